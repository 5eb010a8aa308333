"""κ of the blended estimate, chosen by two-fold sample splitting on the training window."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from sklearn.utils import check_random_state

from adseg.forecast.blend import Landscape, shrinkage_weights
from adseg.forecast.ecdf import SampleSet

#: κ candidates of :func:`select_kappa` (samples); 0 = own c.d.f. only, inf = segment c.d.f. only.
DEFAULT_KAPPA_GRID = np.concatenate(([0.0], np.geomspace(1.0, 1e4, 25), [np.inf]))


# --------------------------------------------------------------------------------------------
# κ: empirical-Bayes shrinkage chosen on the training window
# --------------------------------------------------------------------------------------------


class KappaSelector:
    """Choose κ by two-fold sample splitting on the training samples alone.

    ``fit(samples, bids)`` splits each sample into half A or B at random (seeded) and prepares
    everything that does not depend on the segmentation; ``select(segments)`` then costs one
    pooled sort per fold. From the fitting half: own, segment and global c.d.f.s; for each κ,
    F̂_i = w_i F_own,i + (1 − w_i) F_base,i with w_i = n^fit_i / (n^fit_i + κ). Loss = mean over the
    advertisers with samples in both halves and over the points x of (F̂_i(x) − F^held_i(x))²
    (a Brier score), x = the ``n_quantiles`` inner quantiles of all samples plus the advertiser's
    bid. F^held is independent of F̂, so the loss estimates the c.d.f. error up to a constant that
    does not depend on κ. Both folds are scored (A→B and B→A).

    Parameters
    ----------
    kappa_grid : candidate κ values ≥ 0 (0 = own c.d.f. only, inf = segment c.d.f. only).
    n_quantiles : number of quantile points.
    random_state : seed of the split.

    Attributes (after fit)
    ----------
    folds_ : list of per-fold prepared arrays. n_points_ : number of (advertiser, x) pairs scored.
    """

    def __init__(
        self, kappa_grid: ArrayLike = DEFAULT_KAPPA_GRID, n_quantiles: int = 19, random_state=None
    ):
        self.kappa_grid = kappa_grid
        self.n_quantiles = n_quantiles
        self.random_state = random_state

    def fit(self, samples: SampleSet, bids: ArrayLike | None = None) -> KappaSelector:
        """samples : one kind's samples; bids : (n,) training bid per advertiser (NaN = none)."""
        grid = np.asarray(self.kappa_grid, dtype=np.float64).ravel()
        if grid.size == 0 or np.any(~(grid >= 0)):
            raise ValueError("kappa_grid must be a non-empty list of values >= 0 (inf allowed).")
        if int(self.n_quantiles) < 1:
            raise ValueError(f"n_quantiles must be >= 1; got {self.n_quantiles}.")
        self.grid_ = grid
        rng = check_random_state(self.random_state)
        n = samples.n_owners
        if bids is not None:
            # checked before the early return below, so a wrong length never passes silently
            b = np.asarray(bids, dtype=np.float64)
            if b.shape != (n,):
                raise ValueError(
                    f"bids must have one value per advertiser, shape ({n},); got shape {b.shape}."
                )
        self.folds_ = []
        self.n_points_ = 0
        if samples.values.size == 0:
            return self
        q = np.quantile(samples.values, np.linspace(0, 1, int(self.n_quantiles) + 2)[1:-1])
        pts = np.broadcast_to(q, (n, q.size))
        if bids is not None:
            b = b[:, None]
            pts = np.hstack([pts, np.where(np.isfinite(b), b, q[q.size // 2])])
        adv = np.broadcast_to(np.arange(n)[:, None], pts.shape)
        in_a = rng.random_sample(samples.values.size) < 0.5
        for fit_mask in (in_a, ~in_a):
            fit, held = samples.subset(fit_mask), samples.subset(~fit_mask)
            use = (fit.counts > 0) & (held.counts > 0)
            if not use.any():
                continue
            a, x = adv[use].ravel(), pts[use].ravel()
            shape = (int(use.sum()), pts.shape[1])
            own = fit.pool(np.arange(n), n)  # for own_cdf alone: select() needs none
            self.folds_.append(
                dict(
                    fit=fit,
                    pooled=fit.pool(np.zeros(n, dtype=np.int64), 1),
                    adv=a,
                    x=x,
                    shape=shape,
                    own_cdf=own.cdf(a, x).reshape(shape),
                    target=held.pool(np.arange(n), n).cdf(a, x).reshape(shape),
                    n_fit=fit.counts[use].astype(np.float64)[:, None],
                )
            )
            self.n_points_ += shape[0] * shape[1]
        return self

    def select(self, segments: ArrayLike) -> tuple[float, pd.DataFrame]:
        """Returns (κ, frame with columns kappa, loss). With no advertiser having samples in both
        halves: (inf, empty frame) — nothing to learn from, keep the segment c.d.f."""
        if not self.folds_:
            return math.inf, pd.DataFrame({"kappa": [], "loss": []})
        losses = np.zeros(self.grid_.size)
        for f in self.folds_:
            lsc = Landscape.build(f["fit"], segments, math.inf, pooled=f["pooled"], with_own=False)
            base = lsc.cdf(f["adv"], f["x"]).reshape(f["shape"])
            for j, kappa in enumerate(self.grid_):  # loop over the κ grid only
                w = shrinkage_weights(f["n_fit"], kappa)
                losses[j] += np.sum((w * f["own_cdf"] + (1 - w) * base - f["target"]) ** 2)
        losses /= self.n_points_
        # ties (e.g. the "own" reference, where own = segment for every κ) go to the largest κ:
        # the paper's segment estimate unless the advertiser's own samples measurably help
        tied = losses <= losses.min() * (1 + 1e-9) + 1e-300
        best = float(self.grid_[tied].max())
        return best, pd.DataFrame({"kappa": self.grid_, "loss": losses})


def select_kappa(
    samples: SampleSet,
    segments: ArrayLike,
    *,
    bids: ArrayLike | None = None,
    kappa_grid: ArrayLike = DEFAULT_KAPPA_GRID,
    n_quantiles: int = 19,
    random_state=None,
) -> tuple[float, pd.DataFrame]:
    """κ for one segmentation: ``KappaSelector(...).fit(samples, bids).select(segments)``.
    Cost O(N log N + |grid| · n · Q)."""
    sel = KappaSelector(kappa_grid, n_quantiles, random_state).fit(samples, bids)
    return sel.select(segments)
