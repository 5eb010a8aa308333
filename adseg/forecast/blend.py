"""The blended (empirical-Bayes) bid landscape: each advertiser's own c.d.f. shrunk toward its
segment's with weight n / (n + κ); κ = ∞ is the paper's pure segment c.d.f."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike

from adseg.forecast.ecdf import MISSING, GroupedECDF, SampleSet, _advertiser_index, _compact_labels


def shrinkage_weights(counts: ArrayLike, kappa: float) -> np.ndarray:
    """w_i = n_i / (n_i + κ): weight of an advertiser's own c.d.f. (0 when n_i = 0 or κ = ∞)."""
    if not (kappa >= 0):  # also rejects NaN
        raise ValueError(f"kappa must be >= 0 (inf allowed); got {kappa}.")
    n = np.asarray(counts, dtype=np.float64)
    if math.isinf(kappa):
        return np.zeros_like(n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, n / (n + kappa), 0.0)


@dataclass(frozen=True, eq=False)
class Landscape:
    """One kind of bid landscape for n advertisers under one segmentation and one κ.

    The estimate for advertiser i is w_i F_own,i + (1 − w_i) F_base,i, where F_base,i is its
    segment's pooled c.d.f., or the global pooled c.d.f. when i has label -1 or its segment has no
    samples. ``kappa = inf`` (w = 0) is the paper's pure-segment method.
    """

    own: GroupedECDF | None  # groups = advertisers; None: built for κ = ∞ alone (build)
    segment: GroupedECDF  # groups = compact segment labels
    pooled: GroupedECDF  # one group: all samples
    base_group: np.ndarray  # (n,) segment group of each advertiser, -1 → global
    weight: np.ndarray  # (n,) w_i
    kappa: float

    @classmethod
    def build(
        cls,
        samples: SampleSet,
        segments: ArrayLike,
        kappa: float = math.inf,
        *,
        own: GroupedECDF | None = None,
        pooled: GroupedECDF | None = None,
        with_own: bool = True,
    ) -> Landscape:
        """``segments``: (n,) int labels (arbitrary non-negative values; -1 = none). ``own`` and
        ``pooled`` may be passed to reuse them across segmentations. All -1 (zero segments) is
        allowed: every advertiser then gets the global pooled c.d.f. ``with_own=False`` (κ = ∞
        only) makes no own c.d.f.s: the segment estimate reads none, and they cost 8 bytes per
        sample; :meth:`with_kappa` then refuses a finite κ."""
        codes, n_seg = _compact_labels(segments, samples.n_owners)
        seg = samples.pool(codes, n_seg)
        if not with_own and not math.isinf(kappa):
            raise ValueError(f"with_own=False is for kappa = inf alone; got kappa={kappa}.")
        if own is None and with_own:
            own = samples.pool(np.arange(samples.n_owners), samples.n_owners)
        if pooled is None:
            pooled = samples.pool(np.zeros(samples.n_owners, dtype=np.int64), 1)
        base = codes.copy()
        # look up only the labelled advertisers: with zero segments seg.counts is empty
        labelled = np.flatnonzero(codes >= 0)
        base[labelled[seg.counts[codes[labelled]] == 0]] = MISSING
        return cls(own, seg, pooled, base, shrinkage_weights(samples.counts, kappa), float(kappa))

    def with_kappa(self, kappa: float) -> Landscape:
        """The same c.d.f.s with another κ (no re-pooling)."""
        if self.own is None and not math.isinf(kappa):
            raise ValueError(f"built without own c.d.f.s (with_own=False): kappa={kappa}.")
        if self.own is None:
            return replace(self, kappa=float(kappa))
        counts = self.own.counts.astype(np.float64)
        return replace(self, weight=shrinkage_weights(counts, kappa), kappa=float(kappa))

    def _base(self, adv: np.ndarray, x: np.ndarray, fn: str) -> np.ndarray:
        g = self.base_group[adv]
        seg_ok = g >= 0
        out = np.empty(adv.shape)
        if seg_ok.any():
            out[seg_ok] = getattr(self.segment, fn)(g[seg_ok], x[seg_ok])
        if not seg_ok.all():
            out[~seg_ok] = getattr(self.pooled, fn)(
                np.zeros(int((~seg_ok).sum()), np.int64), x[~seg_ok]
            )
        return out

    @property
    def n_advertisers(self) -> int:
        return int(self.base_group.size)

    def _blend(self, adv, x, fn: str) -> np.ndarray:
        adv = _advertiser_index(adv, self.n_advertisers)
        x = np.asarray(x, dtype=np.float64)
        adv, x = np.broadcast_arrays(adv, x)
        adv, x = adv.ravel(), x.ravel()
        base = self._base(adv, x, fn)
        w = self.weight[adv]
        mine = w > 0
        if mine.any():
            own = getattr(self.own, fn)(adv[mine], x[mine])
            base[mine] = w[mine] * own + (1 - w[mine]) * base[mine]
        return base

    def cdf(self, adv: ArrayLike, x: ArrayLike) -> np.ndarray:
        """F̂_adv(x), flat (R,) for R broadcast (advertiser index, x) pairs. ``adv`` in 0..n-1
        (IndexError otherwise: -1 is not "the last advertiser"); NaN x → NaN."""
        return self._blend(adv, x, "cdf")

    def partial_mean(self, adv: ArrayLike, x: ArrayLike) -> np.ndarray:
        """E[v · 1{v ≤ x}] under the blended mixture, flat (R,)."""
        return self._blend(adv, x, "partial_mean")


def expected_cost(win: Landscape, cost: Landscape, adv: ArrayLike, bid: ArrayLike) -> np.ndarray:
    """Expected paid eCPM at ``bid`` given a win: E[cost | cost ≤ bid] under ``cost``; where no
    cost mass is ≤ bid, E[market price | price ≤ bid] under ``win``; else the bid itself. (R,).
    A NaN bid gives NaN."""
    adv = _advertiser_index(adv, cost.n_advertisers).ravel()
    bid = np.asarray(bid, dtype=np.float64).ravel()
    with np.errstate(invalid="ignore", divide="ignore"):
        fc = cost.cdf(adv, bid)
        out = cost.partial_mean(adv, bid) / fc
        bad = ~(fc > 0)
        if bad.any():
            fw = win.cdf(adv[bad], bid[bad])
            alt = win.partial_mean(adv[bad], bid[bad]) / fw
            out[bad] = np.where(fw > 0, alt, bid[bad])
    return out
