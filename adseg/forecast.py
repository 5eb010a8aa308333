"""Segment bid landscapes and delivery forecasts (pipeline steps 6–8 of DESIGN.md §2).

Step 6, **regenerate**: every segment's win-rate c.d.f. (market prices, eCPM) and eCPM-cost c.d.f.
(paid eCPM of won auctions) is the empirical c.d.f. of the *pooled* training samples of its
advertisers — the paper's method (spec rcc.md §7). :class:`GroupedECDF` holds the c.d.f.s of
many groups as ONE array sorted by (group, value) and answers F_g(x) for any number of (g, x)
pairs with a single ``np.searchsorted`` — no loop over groups, advertisers or days.

Beside the paper's pure-segment estimate, a **blended** (empirical-Bayes) estimate shrinks each
advertiser's own c.d.f. toward its segment's in proportion to its sample count:

    F̂_i(b) = w_i F_own,i(b) + (1 − w_i) F_seg(i)(b),     w_i = n_i / (n_i + κ).

κ is the ratio of within-advertiser sampling variance to between-advertiser variance of the true
c.d.f.s inside a segment; it does not depend on n_i, so it is chosen on the *training window only*
(:func:`select_kappa`): each advertiser's training samples are split in two random halves (seeded),
the estimate is built from one half for every κ on a log grid (κ = 0 is the own c.d.f., κ = ∞ the
pure segment c.d.f.), and the κ with the least squared error against the other half's c.d.f. (a
Brier score, at a quantile grid of bids plus each advertiser's training bid) wins. κ is chosen per
segmentation source and per sample kind. The evaluation window is never looked at.

Step 7, **forecast**: per advertiser and evaluation day d with supply s_d (bid requests) and bid b_d

    impressions_d = s_d · F_win(b_d)
    spend_d       = impressions_d · E[cost | cost ≤ b_d] / 1000      (currency units)

summed over the window's days. *Expected paid eCPM at bid b* is the mean of the cost samples ≤ b,
i.e. the mean paid eCPM of auctions one would still win (and pay no more than) at bid b. For the
blended estimate it is the conditional mean of the blended *mixture* distribution,
(w S_own(b)/n_own + (1 − w) S_seg(b)/n_seg) / F̂_cost(b), with S(b) the sum of samples ≤ b.
Fallbacks when no cost sample is ≤ b (F̂_cost(b) = 0): the conditional mean of the market-price
samples ≤ b (what a second-price auction would charge), and if none of those is ≤ b either, b
itself (the most one can pay). With F_win(b) = 0 the impressions are 0 anyway.

Supply is either the window's actual bid requests (``"actual"``: isolates segmentation quality, as
the paper does) or a forecast from the training window's daily bid requests (``"forecast"``), by
``supply_model`` (:func:`supply_for_rows`):

* ``"ses"`` (default) — simple exponential smoothing (ETS(A,N,N)), flat forecast = the last
  smoothed level. The smoothing parameter is estimated per advertiser by least squares of
  one-step-ahead errors for all advertisers at once (grid search + golden-section refinement,
  :func:`fit_ses`); it agrees with ``statsmodels.tsa.holtwinters.SimpleExpSmoothing`` (initial
  level = first observation) to its optimiser's tolerance (tests/test_forecast.py). 1,300
  advertisers × 7–28 days: 0.03–0.09 s, against ≈ 40 s for one statsmodels fit per advertiser
  (both measured at load 12 on 2 shared cores; statsmodels ≈ 3.6 ms per fit when idle).
  ``supply_engine="statsmodels"`` runs the statsmodels fits instead.
* ``"mean"`` — the training days' mean; ``"seasonal_naive"`` — the same weekday's latest training
  value. With a one-week training window and a weekly supply profile (the simulator's
  sample_campaigns/small), SES chases the weekday pattern (MAPE of weekly supply 11.3%) where the
  mean is 6.2%: pick by backtest on your data; the default follows the DESIGN.

``spend_price="market"`` replaces the cost samples by the market-price samples in the expected
paid eCPM (E[price | price ≤ b], the second-price charge). Cost samples exist only for auctions won
at each advertiser's own historical bid, so a pooled cost c.d.f. mixes distributions censored at
different bids and under-estimates the price for an advertiser bidding above its segment's
peers; market prices are reported on wins and losses and are not censored. On
sample_campaigns/small (true segments, actual supply) the spend MAPE is 14.1% ("cost") vs 10.5%
("market"); the blended estimate narrows it (11.4% vs 11.4%). The default stays "cost" (the
paper's eCPM cost c.d.f.).

Step 8, **score**: MAPE of the per-advertiser window totals of impressions and spend, per source,
supply mode and method (``adseg.metrics.mape_with_count``: zero actuals are left out and counted).

Fallbacks, stated once: an advertiser with label -1 in a segmentation (left out of that view), or
whose segment has no samples of a kind, gets the *global* pooled c.d.f. of that kind (a
segmentation with every label -1, i.e. zero segments, is allowed: everyone gets the global one); an
advertiser with no own samples has w_i = 0. Delivery frames with a missing or unparseable date
are refused (rows in messages are counted from 1).

Cost, with N samples of a kind, n advertisers, K segments, R evaluation rows: the samples are
sorted once per kind (O(N log N)); pooling them by a segmentation is then a stable radix sort of
the ≤16-bit group codes (O(N)); evaluating R points is O(R log N). Memory O(N) per segmentation;
nothing n×n is ever held. The default simulated marketplace (1,268 advertisers, 0.22 M training
auctions, 10 sources, both supply modes) takes ≈ 4 s at load 12 on 2 shared cores.
"""

from __future__ import annotations

import math
import numbers
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from sklearn.utils import check_random_state

from adseg.checks import check_integer
from adseg.metrics import mape_with_count
from adseg.units import MICROS

__all__ = [
    "DEFAULT_KAPPA_GRID",
    "DELIVERY_COLUMNS",
    "ForecastResult",
    "GroupedECDF",
    "KappaSelector",
    "Landscape",
    "SampleSet",
    "evaluate_sources",
    "expected_cost",
    "fit_ses",
    "forecast_supply",
    "reference_segmentations",
    "samples_by_advertiser",
    "score_forecasts",
    "segment_cdf_table",
    "segment_sizes",
    "select_kappa",
    "shrinkage_weights",
    "supply_for_rows",
]

DELIVERY_COLUMNS = ("advertiser_id", "date", "bid_requests", "bid_ecpm", "impressions", "spend")
#: κ candidates of :func:`select_kappa` (samples); 0 = own c.d.f. only, inf = segment c.d.f. only.
DEFAULT_KAPPA_GRID = np.concatenate(([0.0], np.geomspace(1.0, 1e4, 25), [np.inf]))
KINDS = ("win", "cost")
MISSING = -1


# --------------------------------------------------------------------------------------------
# Pooled empirical c.d.f.s
# --------------------------------------------------------------------------------------------


class SampleSet:
    """The samples of one kind for n advertisers, concatenated once so that pooling them by any
    segmentation is one integer sort.

    Parameters
    ----------
    samples : sequence of n 1-D array-likes (eCPM values; finite). Empty arrays are allowed.

    Attributes
    ----------
    values : (N,) float64, all samples in advertiser order.
    owner : (N,) int64, index of the advertiser each sample belongs to.
    counts : (n,) int64, samples per advertiser.
    support : (M,) float64, the sorted distinct sample values.
    rank : (N,) int64, position of each sample's value in ``support``.
    """

    def __init__(self, samples: Sequence[ArrayLike], *, name: str = "samples"):
        if isinstance(samples, np.ndarray) and samples.dtype != object:
            raise TypeError(f"{name} must be a list of 1-D arrays (one per advertiser).")
        arrays = []
        for i, s in enumerate(samples):
            a = np.asarray(s, dtype=np.float64)
            if a.ndim != 1:
                a = a.ravel()
            if a.size and not np.all(np.isfinite(a)):
                raise ValueError(f"{name}[{i}] holds non-finite values.")
            arrays.append(a)
        self.counts = np.array([a.size for a in arrays], dtype=np.int64)
        self.values = np.concatenate(arrays) if arrays else np.empty(0)
        self.owner = np.repeat(np.arange(len(arrays), dtype=np.int64), self.counts)
        # one sort gives both the distinct values (ranks) and the value order used by pool()
        self.by_value = np.argsort(self.values, kind="stable")
        ordered = self.values[self.by_value]
        new = np.empty(ordered.size, dtype=bool)
        new[:1] = True
        np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
        self.support = ordered[new]
        self.rank = np.empty(ordered.size, dtype=np.int64)
        self.rank[self.by_value] = np.cumsum(new) - 1

    @property
    def n_owners(self) -> int:
        return int(self.counts.size)

    def subset(self, mask: np.ndarray) -> SampleSet:
        """The samples where ``mask`` (N,) is true; same owners, same support (ranks stay valid)."""
        out = object.__new__(SampleSet)
        out.values = self.values[mask]
        out.owner = self.owner[mask]
        out.rank = self.rank[mask]
        out.support = self.support
        out.counts = np.bincount(out.owner, minlength=self.n_owners).astype(np.int64)
        new_index = np.cumsum(mask) - 1
        out.by_value = new_index[self.by_value[mask[self.by_value]]]
        return out

    def pool(self, groups: ArrayLike, n_groups: int | None = None) -> GroupedECDF:
        """Pool the samples by the group of their advertiser.

        groups : (n,) int, group of each advertiser in 0..G-1; -1 leaves its samples out. Floats
        are accepted only when integral (0.7 is an error, never truncated to 0).
        Cost O(N log N) time (one int64 argsort), O(N) memory.
        """
        groups = np.asarray(groups)
        if groups.shape != (self.n_owners,):
            raise ValueError(
                f"groups must have shape ({self.n_owners},) (one per advertiser); "
                f"got {groups.shape}."
            )
        groups = _integer_array(groups, "groups")
        if n_groups is None:
            n_groups = int(groups.max()) + 1 if groups.size else 0
        if groups.size and (groups.min() < MISSING or groups.max() >= n_groups):
            raise ValueError(f"groups must be in -1..{n_groups - 1}.")
        # the samples are already in value order: a stable sort by group alone finishes the job,
        # and numpy's stable sort of ≤16-bit integers is a radix sort, O(N)
        g = groups[self.owner[self.by_value]]
        keep = g >= 0
        idx, g = self.by_value[keep], g[keep]
        small = np.int16 if n_groups <= np.iinfo(np.int16).max else np.int64
        order = idx[np.argsort(g.astype(small), kind="stable")]
        return GroupedECDF._build(
            self.values[order], self.rank[order], groups[self.owner[order]], n_groups, self.support
        )


@dataclass(frozen=True, eq=False)
class GroupedECDF:
    """Empirical c.d.f.s of G groups of samples, stored as one array sorted by (group, value).

    F_g(x) = #{samples of g ≤ x} / n_g. Queries are exact (ranks in the shared support, no float
    offsets) and vectorised over any number of (group, x) pairs: O(log N) each. A NaN x gives NaN
    from ``cdf``, ``partial_mean`` and ``conditional_mean`` (propagated, as numpy arithmetic
    would; x = ±inf is an ordinary bound) and is an error for the integer ``count_le``.

    Attributes
    ----------
    values : (N,) float64 sorted by (group, value).
    offsets : (G+1,) int64, group g occupies values[offsets[g]:offsets[g+1]].
    support : (M,) float64, sorted distinct values the ranks refer to.
    """

    values: np.ndarray
    offsets: np.ndarray
    support: np.ndarray
    _keys: np.ndarray = field(repr=False)
    _prefix: np.ndarray = field(repr=False)

    @classmethod
    def from_samples(cls, samples: Sequence[ArrayLike], groups: ArrayLike | None = None):
        """Pool ``samples`` (one 1-D array per owner) by ``groups`` (one int per owner, -1 = left
        out; default: every owner its own group)."""
        ss = SampleSet(samples)
        if groups is None:
            groups = np.arange(ss.n_owners)
        return ss.pool(groups)

    @classmethod
    def _build(cls, values, rank, group, n_groups, support) -> GroupedECDF:
        """From samples already sorted by (group, value)."""
        keys = group * np.int64(support.size + 1) + rank
        offsets = np.zeros(n_groups + 1, dtype=np.int64)
        np.cumsum(np.bincount(group, minlength=n_groups), out=offsets[1:])
        return cls(values, offsets, support, keys, _group_prefix_sums(values, offsets))

    @property
    def n_groups(self) -> int:
        return int(self.offsets.size - 1)

    @property
    def counts(self) -> np.ndarray:
        """(G,) int64, samples per group."""
        return np.diff(self.offsets)

    def _index_le(self, group: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Index into ``values`` one past the last sample of ``group`` that is ≤ x."""
        r = np.searchsorted(self.support, x, side="right")
        q = group * np.int64(self.support.size + 1) + r
        return np.searchsorted(self._keys, q, side="left")

    def _check_group(self, group, x) -> tuple[np.ndarray, np.ndarray]:
        group = _integer_array(group, "group")
        x = np.asarray(x, dtype=np.float64)
        group, x = np.broadcast_arrays(group, x)
        if group.size and (group.min() < 0 or group.max() >= self.n_groups):
            raise IndexError(f"group index out of range 0..{self.n_groups - 1}.")
        return group, x

    def count_le(self, group: ArrayLike, x: ArrayLike) -> np.ndarray:
        """Number of samples of ``group`` that are ≤ x (broadcast shapes), int64. A NaN x is a
        ValueError: an integer count has no NaN to propagate."""
        group, x = self._check_group(group, x)
        if np.isnan(x).any():
            raise ValueError("x has NaN values: the number of samples <= NaN is undefined.")
        return self._index_le(group, x) - self.offsets[group]

    def cdf(self, group: ArrayLike, x: ArrayLike) -> np.ndarray:
        """F_group(x) (broadcast shapes); NaN for a group with no samples or a NaN x."""
        group, x = self._check_group(group, x)
        n = self.counts[group].astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            f = np.where(n > 0, (self._index_le(group, x) - self.offsets[group]) / n, np.nan)
        return _nan_where_nan(f, x)

    def partial_mean(self, group: ArrayLike, x: ArrayLike) -> np.ndarray:
        """E[v · 1{v ≤ x}] = (sum of the group's samples ≤ x) / n_g; NaN for an empty group or a
        NaN x."""
        group, x = self._check_group(group, x)
        s = self._prefix[self._index_le(group, x) + group]
        n = self.counts[group].astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return _nan_where_nan(np.where(n > 0, s / n, np.nan), x)

    def conditional_mean(self, group: ArrayLike, x: ArrayLike) -> np.ndarray:
        """E[v | v ≤ x] over the group's samples; NaN where no sample is ≤ x or x is NaN."""
        group, x = self._check_group(group, x)
        idx = self._index_le(group, x)
        start = self.offsets[group]
        k = (idx - start).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            m = np.where(k > 0, self._prefix[idx + group] / k, np.nan)
        return _nan_where_nan(m, x)

    def tabulate(self, grid: ArrayLike) -> np.ndarray:
        """(G, len(grid)) matrix of F_g(grid); NaN rows for empty groups."""
        grid = np.asarray(grid, dtype=np.float64).ravel()
        return self.cdf(np.arange(self.n_groups)[:, None], grid[None, :])


def _group_prefix_sums(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Running sums that restart at each group: (N + G,) float64, group g's block
    ``[offsets[g] + g, offsets[g + 1] + g]`` holds 0 and then the sums of its first 1, 2, ...
    values, so the sum of its first k values is ``prefix[offsets[g] + g + k]``. Per group
    rather than one running sum over all: a difference of two global sums loses a group's
    digits to the groups stored before it (ten prices of 1e12 ahead put a 0.02 mean 5 % off).
    One cumsum per group (a loop over groups, each vectorised), O(N + G) time and memory; about
    3 µs per group (0.3 s for 100,000 groups; a vectorised doubling scan was slower below that)."""
    prefix = np.zeros(values.size + offsets.size - 1)
    bounds = offsets.tolist()
    for g in range(len(bounds) - 1):
        start, stop = bounds[g], bounds[g + 1]
        np.cumsum(values[start:stop], out=prefix[start + g + 1 : stop + g + 1])
    return prefix


def _nan_where_nan(values: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``values`` with NaN wherever ``x`` is NaN (same shape). searchsorted puts NaN after every
    number, so without this a NaN query would read as "every sample is ≤ x"."""
    return np.where(np.isnan(x), np.nan, values)


def _integer_array(values: ArrayLike, name: str) -> np.ndarray:
    """``values`` as int64 (same shape). Integer and bool dtypes pass; floats only when finite
    and integral (``astype`` would silently truncate 0.7 to 0); anything else is a TypeError."""
    a = np.asarray(values)
    if a.dtype.kind in "iub":
        return a.astype(np.int64, copy=False)
    if a.dtype.kind == "f":
        flat = a.ravel()
        bad = np.flatnonzero(~np.isfinite(flat) | (flat != np.round(flat)))
        if bad.size:
            raise TypeError(
                f"{name} must hold integers; got {float(flat[bad[0]])} at flat index {bad[0]}."
            )
        return a.astype(np.int64)
    raise TypeError(f"{name} must be an integer array; got dtype {a.dtype}.")


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

    own: GroupedECDF  # groups = advertisers
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
    ) -> Landscape:
        """``segments``: (n,) int labels (arbitrary non-negative values; -1 = none). ``own`` and
        ``pooled`` may be passed to reuse them across segmentations. All -1 (zero segments) is
        allowed: every advertiser then gets the global pooled c.d.f."""
        codes, n_seg = _compact_labels(segments, samples.n_owners)
        seg = samples.pool(codes, n_seg)
        if own is None:
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


def _advertiser_index(adv: ArrayLike, n: int, name: str = "adv") -> np.ndarray:
    """Advertiser indices as int64 (same shape), each in 0..n-1. Negative indices are refused,
    not wrapped around: -1 means "no segment" elsewhere in this module, never "the last one"."""
    a = _integer_array(adv, name)
    out = (a < 0) | (a >= n)
    if out.any():
        pos = int(np.flatnonzero(out.ravel())[0])
        raise IndexError(
            f"{name} must be advertiser indices in 0..{n - 1}; got {int(a.ravel()[pos])} at flat "
            f"index {pos}."
        )
    return a


def _compact_labels(segments: ArrayLike, n: int, name: str = "segments") -> tuple[np.ndarray, int]:
    """Map arbitrary non-negative labels to 0..K-1 (sorted by label), keeping -1."""
    seg = np.asarray(segments)
    if seg.shape != (n,):
        raise ValueError(
            f"{name} must have shape ({n},) (one label per advertiser); got {seg.shape}."
        )
    if seg.dtype.kind == "f":
        if not np.all(np.isfinite(seg)) or not np.all(seg == np.round(seg)):
            raise TypeError(f"{name} must hold integer labels.")
    elif seg.dtype.kind not in "iub":
        raise TypeError(f"{name} must be an integer array; got dtype {seg.dtype}.")
    seg = seg.astype(np.int64)
    if np.any(seg < MISSING):
        raise ValueError(f"{name} has a negative label other than -1 (no segment).")
    codes = np.full(n, MISSING, dtype=np.int64)
    has = seg >= 0
    uniq, inv = np.unique(seg[has], return_inverse=True)
    codes[has] = inv.ravel()
    return codes, int(uniq.size)


def _label_values(segments: ArrayLike) -> np.ndarray:
    seg = np.asarray(segments).astype(np.int64)
    return np.unique(seg[seg >= 0])


def samples_by_advertiser(
    auctions: pd.DataFrame, advertiser_ids: ArrayLike
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Split an auction-sample frame (DESIGN.md §3 ingest format: advertiser_id,
    market_price_ecpm, won, paid_ecpm) into the per-advertiser lists this module takes, in
    ``advertiser_ids`` order: win-rate samples = every auction's market price; cost samples = the
    paid eCPM of won auctions. Advertisers without auctions get empty arrays; auctions of
    advertisers not in ``advertiser_ids`` are an error. Filter the frame to the training window
    first. O(N log N) (one stable sort)."""
    ids = _as_ids(advertiser_ids)
    need = ["advertiser_id", "market_price_ecpm", "won", "paid_ecpm"]
    missing = [c for c in need if c not in auctions.columns]
    if missing:
        raise ValueError(f"auctions lacks column(s) {missing}; has {list(auctions.columns)}.")
    idx = pd.Index(ids).get_indexer(auctions["advertiser_id"])
    if np.any(idx < 0):
        ex = auctions.loc[idx < 0, "advertiser_id"].unique()[:3].tolist()
        raise ValueError(f"auctions has rows of advertisers not in advertiser_ids, e.g. {ex}.")
    won = _won(auctions["won"])
    out = []
    for values, keep in (
        (auctions["market_price_ecpm"].to_numpy(np.float64), np.ones(idx.size, dtype=bool)),
        (auctions["paid_ecpm"].to_numpy(np.float64), won),
    ):
        a = idx[keep]
        order = np.argsort(a, kind="stable")
        cuts = np.cumsum(np.bincount(a, minlength=ids.size))[:-1]
        out.append(np.split(values[keep][order], cuts))
    return out[0], out[1]


def _won(column: pd.Series) -> np.ndarray:
    """The ``won`` column as (N,) bool: booleans, or integers 0/1. Text is refused, not cast:
    ``astype(bool)`` took the string "false" (and a float NaN) for won, and lost auctions then
    reached the cost samples as NaN prices (QA). Parse ingest files with ``adseg.ingest``."""
    if pd.api.types.is_bool_dtype(column.dtype) and not column.isna().any():
        return column.to_numpy(dtype=bool)
    if pd.api.types.is_integer_dtype(column.dtype) and not column.isna().any():
        values = column.to_numpy(dtype=np.int64)
        if np.isin(values, (0, 1)).all():
            return values.astype(bool)
    raise ValueError(
        f"auctions.won must be booleans (or 0/1) with no missing value; got dtype {column.dtype}"
        f" (e.g. {column.iloc[0]!r} in the first row): read ingest files with adseg.ingest, "
        "which parses true/false."
    )


def reference_segmentations(n: int) -> dict[str, np.ndarray]:
    """The two references: ``own`` (every advertiser its own segment, i.e. no segmentation) and
    ``global`` (all advertisers in one segment)."""
    return {"own": np.arange(n, dtype=np.int64), "global": np.zeros(n, dtype=np.int64)}


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
            own = fit.pool(np.arange(n), n)
            self.folds_.append(
                dict(
                    fit=fit,
                    own=own,
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
            lsc = Landscape.build(f["fit"], segments, math.inf, own=f["own"], pooled=f["pooled"])
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


# --------------------------------------------------------------------------------------------
# Supply: vectorised simple exponential smoothing
# --------------------------------------------------------------------------------------------


def _ses_pass(y: np.ndarray, alpha: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run SES over (n, T) ``y`` (NaN = missing day, level carried) for (n, A) ``alpha``; the
    level starts at each row's first observation. Returns (SSE of one-step errors, final level),
    both (n, A)."""
    n, t_len = y.shape
    level = np.broadcast_to(first[:, None], alpha.shape).astype(np.float64).copy()
    sse = np.zeros(alpha.shape)
    for t in range(t_len):  # loop over days only
        yt = y[:, t : t + 1]
        obs = np.isfinite(yt)
        err = np.where(obs, yt - level, 0.0)
        sse += err * err
        level += alpha * err
    return sse, level


def fit_ses(y: ArrayLike, *, n_grid: int = 51, n_refine: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares simple exponential smoothing of many series at once.

    y : (n, T) float, one series per row, NaN = no observation (the level is carried over).
    The initial level is the row's first observation (statsmodels' ``initialization_method=
    "known", initial_level=y[0]``); α ∈ [0, 1] minimises the sum of squared one-step-ahead errors:
    a grid of ``n_grid`` values, then golden-section search in the bracket around the best one.
    Returns (alpha (n,), level (n,)): the flat h-step forecast is ``level``; NaN for all-NaN rows.
    Where the SSE does not depend on α (one or two observations, or a series that only moves on
    its last day) α is 0.5, the middle of the tied interval (two days: their mean).
    ``n_grid`` ≥ 2 (the grid includes 0 and 1), ``n_refine`` ≥ 0, T ≥ 1.
    Cost O(n T (n_grid + 2 n_refine)) time, O(n n_grid) memory.
    """
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 2:
        raise ValueError(f"y must be 2-D (n_series, n_days); got shape {y.shape}.")
    if y.shape[1] == 0:
        raise ValueError(f"y has no days (shape {y.shape}): at least one column is needed.")
    check_integer("n_grid", n_grid, 2)
    check_integer("n_refine", n_refine, 0)
    n_grid, n_refine = int(n_grid), int(n_refine)
    n = y.shape[0]
    has, first = _first_observations(y)
    grid = np.linspace(0.0, 1.0, n_grid)
    sse, _ = _ses_pass(y, np.broadcast_to(grid, (n, n_grid)), first)
    k = np.argmin(sse, axis=1)
    step = 1.0 / (n_grid - 1)
    lo = np.clip(grid[k] - step, 0.0, 1.0)
    hi = np.clip(grid[k] + step, 0.0, 1.0)
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(n_refine):  # golden-section iterations, vectorised over series
        c = hi - ratio * (hi - lo)
        d = lo + ratio * (hi - lo)
        s, _ = _ses_pass(y, np.stack([c, d], axis=1), first)
        left = s[:, 0] <= s[:, 1]
        hi = np.where(left, d, hi)
        lo = np.where(left, lo, c)
    alpha = (lo + hi) / 2
    # the bracket ends (0 and 1 included) may beat the interior optimum of a non-convex SSE
    cand = np.stack([alpha, grid[k]], axis=1)
    s, lev = _ses_pass(y, cand, first)
    pick = np.argmin(s, axis=1)
    alpha = cand[np.arange(n), pick]
    level = lev[np.arange(n), pick]
    alpha, level = _midpoint_where_unidentified(y, first, alpha, level, sse)
    return np.where(has, alpha, np.nan), np.where(has, level, np.nan)


def _first_observations(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(has, first), both (n,): whether each row of (n, T) ``y`` has an observation (not NaN),
    and its first one (0 for a row with none): SES's initial level."""
    obs = np.isfinite(y)
    has = obs.any(axis=1)
    return has, np.where(has, y[np.arange(y.shape[0]), np.argmax(obs, axis=1)], 0.0)


def _midpoint_where_unidentified(
    y: np.ndarray, first: np.ndarray, alpha: np.ndarray, level: np.ndarray, grid_sse: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """α = 0.5 (and its level) for the rows whose one-step SSE is the same for every α.

    That happens when only a series' last observation differs from its first (one or two
    training days, or a flat series that moves on its last day): the last observation enters no
    one-step error, so the data say nothing about α and any optimiser returns an arbitrary one
    (the grid search α = 0, i.e. the first day, ignoring the last). 0.5 is the middle of the
    tied interval; on two days its level is their mean. ``grid_sse`` (n, G): the SSE on a grid
    of α spanning [0, 1]. Cost O(n T)."""
    spread = grid_sse.max(axis=1) - grid_sse.min(axis=1)
    flat = spread <= 1e-9 * grid_sse.max(axis=1)
    if not flat.any():
        return alpha, level
    _, mid_level = _ses_pass(y[flat], np.full((int(flat.sum()), 1), 0.5), first[flat])
    alpha, level = alpha.copy(), level.copy()
    alpha[flat], level[flat] = 0.5, mid_level[:, 0]
    return alpha, level


def _ses_statsmodels(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The statsmodels path: one SimpleExpSmoothing fit per series (missing days dropped)."""
    from statsmodels.tsa.holtwinters import SimpleExpSmoothing

    alpha = np.full(y.shape[0], np.nan)
    level = np.full(y.shape[0], np.nan)
    for i, row in enumerate(y):  # statsmodels fits one series at a time
        r = row[np.isfinite(row)]
        if r.size < 2:
            continue  # α is unidentified: set below
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = SimpleExpSmoothing(r, initialization_method="known", initial_level=r[0]).fit()
        alpha[i] = fit.params["smoothing_level"]
        level[i] = float(fit.forecast(1)[0])
    has, first = _first_observations(y)
    n_grid = 11
    grid_sse, _ = _ses_pass(
        y, np.broadcast_to(np.linspace(0, 1, n_grid), (y.shape[0], n_grid)), first
    )
    alpha, level = _midpoint_where_unidentified(y, first, alpha, level, grid_sse)
    return np.where(has, alpha, np.nan), np.where(has, level, np.nan)


SUPPLY_MODELS = ("ses", "mean", "seasonal_naive")

FORECAST_CHOICES = {
    "supply": ("actual", "forecast", "both"),
    "supply_model": SUPPLY_MODELS,
    "supply_engine": ("numpy", "statsmodels"),
    "spend_price": ("cost", "market"),
}
""":func:`evaluate_sources`' choice-valued options and their values (the pipeline's
configuration and the CLI's ``--supply*`` / ``--spend-price`` options take them from here)."""


def _dates(values: pd.Series, name: str) -> np.ndarray:
    """Calendar days (datetime64[D]) of a date column (strings, dates or timestamps).

    A missing (None, NaN, NaT, "") or unparseable value is a ValueError naming the frame
    (``name``), the column and the first offending rows, counted from 1 (the first row of the
    frame is row 1) — a NaT would otherwise sort after every day and pass for the latest one.
    """
    try:
        d = pd.to_datetime(values)
    except (ValueError, TypeError) as exc:
        _raise_bad_dates(values, name, reason=str(exc).splitlines()[0])
        raise ValueError(f"{name} column 'date' has values that are not dates: {exc}") from exc
    if d.isna().any():
        _raise_bad_dates(values, name, missing=np.asarray(d.isna()))
    if getattr(d.dt, "tz", None) is not None:
        d = d.dt.tz_localize(None)
    return d.to_numpy().astype("datetime64[D]")


def _raise_bad_dates(
    values: pd.Series, name: str, *, missing: np.ndarray | None = None, reason: str = ""
) -> None:
    """Raise the ValueError of :func:`_dates` for the rows that are missing or do not parse on
    their own (found by a coercing parse when the strict one failed as a whole); return quietly
    if there are none (the caller then reports the parser's own error)."""
    if missing is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                missing = np.asarray(pd.to_datetime(values, errors="coerce", utc=True).isna())
            except (ValueError, TypeError):
                return
    rows = np.flatnonzero(missing)
    if rows.size == 0:
        return
    first = ", ".join(str(r + 1) for r in rows[:5])
    example = values.iloc[rows[0]]
    raise ValueError(
        f"{name} column 'date' has {rows.size} missing or unparseable value(s), in row(s) "
        f"{first}{', …' if rows.size > 5 else ''} (rows counted from 1); row {rows[0] + 1} is "
        f"{example!r}{f' ({reason})' if reason else ''}."
    )


def _daily_matrix(df: pd.DataFrame, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n, T) daily bid requests over the distinct days of ``df`` (NaN = no row), and the days."""
    idx = pd.Index(ids).get_indexer(df["advertiser_id"])
    days, day_idx = np.unique(_dates(df["date"], "train_delivery"), return_inverse=True)
    day_idx = day_idx.ravel()
    shape = (ids.size, max(days.size, 1))
    flat = np.zeros(shape[0] * shape[1])
    # duplicate (advertiser, day) rows are summed
    np.add.at(flat, idx * shape[1] + day_idx, df["bid_requests"].to_numpy(np.float64))
    seen = np.zeros(flat.size, dtype=bool)
    seen[idx * shape[1] + day_idx] = True
    return np.where(seen, flat, np.nan).reshape(shape), days


def forecast_supply(
    train_delivery: pd.DataFrame,
    advertiser_ids: ArrayLike,
    *,
    engine: Literal["numpy", "statsmodels"] = "numpy",
) -> pd.DataFrame:
    """Per-advertiser daily-supply forecasts from the training window's bid requests.

    The training days are the distinct dates of ``train_delivery``; a day without a row for an
    advertiser is missing (not zero). Returns one row per ``advertiser_ids`` entry: advertiser_id,
    alpha and level (SES smoothing parameter and flat forecast of bid requests per day), mean
    (the training days' mean), n_days; NaN where the advertiser has no training delivery.
    ``engine`` "numpy" (:func:`fit_ses`, all advertisers at once) or "statsmodels" (one
    SimpleExpSmoothing fit per advertiser, ~4 ms each).
    """
    ids = _as_ids(advertiser_ids)
    df = _check_delivery(train_delivery, "train_delivery", ids, need=("bid_requests",))
    y, _ = _daily_matrix(df, ids)
    if engine == "numpy":
        alpha, level = fit_ses(y)
    elif engine == "statsmodels":
        alpha, level = _ses_statsmodels(y)
    else:
        raise ValueError(f"engine must be 'numpy' or 'statsmodels'; got {engine!r}.")
    n_days = np.isfinite(y).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n_days > 0, np.nansum(y, axis=1) / n_days, np.nan)
    return pd.DataFrame(
        {"advertiser_id": ids, "alpha": alpha, "level": level, "mean": mean, "n_days": n_days}
    )


def supply_for_rows(
    train_delivery: pd.DataFrame,
    advertiser_ids: ArrayLike,
    row_adv: ArrayLike,
    row_dates: ArrayLike,
    *,
    model: Literal["ses", "mean", "seasonal_naive"] = "ses",
    engine: Literal["numpy", "statsmodels"] = "numpy",
) -> tuple[np.ndarray, pd.DataFrame]:
    """Forecast bid requests for evaluation rows (advertiser index ``row_adv``, day
    ``row_dates``), (R,), from the training window alone.

    model : "ses" — the SES level (flat; the DESIGN's exponential-smoothing forecast);
        "mean" — the training days' mean (flat);
        "seasonal_naive" — the advertiser's latest training value on the same weekday, else its
        mean (weekly supply profiles; needs no fitted parameter).
    Returns (supply per row, NaN where the advertiser has no training delivery; the frame of
    :func:`forecast_supply`).
    """
    if model not in SUPPLY_MODELS:
        raise ValueError(f"supply_model must be one of {SUPPLY_MODELS}; got {model!r}.")
    ids = _as_ids(advertiser_ids)
    frame = forecast_supply(train_delivery, ids, engine=engine)
    row_adv = np.asarray(row_adv, dtype=np.int64)
    if model == "ses":
        return frame["level"].to_numpy()[row_adv], frame
    mean = frame["mean"].to_numpy()
    if model == "mean":
        return mean[row_adv], frame
    y, days = _daily_matrix(train_delivery, ids)
    weekday = (days.astype(np.int64) + 3) % 7  # 1970-01-01 was a Thursday (3)
    table = np.full((ids.size, 7), np.nan)
    for t in range(days.size):  # loop over training days: later days overwrite earlier ones
        ok = np.isfinite(y[:, t])
        table[ok, weekday[t]] = y[ok, t]
    row_days = np.asarray(row_dates).astype("datetime64[D]")
    if np.isnat(row_days).any():
        bad = np.flatnonzero(np.isnat(row_days))
        raise ValueError(
            f"row_dates has {bad.size} missing date(s) (NaT), first at index {bad[0]}."
        )
    row_wd = (row_days.astype(np.int64) + 3) % 7
    out = table[row_adv, row_wd]
    return np.where(np.isfinite(out), out, mean[row_adv]), frame


# --------------------------------------------------------------------------------------------
# Delivery frames
# --------------------------------------------------------------------------------------------


def _as_ids(advertiser_ids: ArrayLike) -> np.ndarray:
    ids = np.asarray(advertiser_ids)
    if ids.ndim != 1:
        raise ValueError(f"advertiser_ids must be 1-D; got shape {ids.shape}.")
    if pd.Index(ids).has_duplicates:
        dup = pd.Index(ids)[pd.Index(ids).duplicated()][:3].tolist()
        raise ValueError(f"advertiser_ids has duplicates, e.g. {dup}.")
    return ids


def _check_delivery(df: pd.DataFrame, name: str, ids: np.ndarray, need=()) -> pd.DataFrame:
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"{name} must be a pandas DataFrame; got {type(df).__name__}.")
    cols = ("advertiser_id", "date", *need)
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{name} lacks column(s) {missing}; has {list(df.columns)}.")
    unknown = ~df["advertiser_id"].isin(ids)
    if unknown.any():
        ex = df.loc[unknown, "advertiser_id"].unique()[:3].tolist()
        raise ValueError(
            f"{name} has {int(unknown.sum())} row(s) of advertisers not in advertiser_ids, "
            f"e.g. {ex}."
        )
    _dates(df["date"], name)  # missing or unparseable dates are an error naming the rows
    for c in need:
        v = pd.to_numeric(df[c], errors="coerce").to_numpy(np.float64)
        bad = ~np.isfinite(v) | (v < 0)
        if bad.any():
            row = int(np.nonzero(bad)[0][0])
            raise ValueError(
                f"{name} column {c!r} must be finite and >= 0; row {row + 1} (rows counted from "
                f"1) has {df[c].iloc[row]!r}."
            )
    return df


# --------------------------------------------------------------------------------------------
# Forecast and score
# --------------------------------------------------------------------------------------------


@dataclass
class ForecastResult:
    """What :func:`evaluate_sources` returns (plain frames, ready to persist or report).

    forecasts : one row per (source, method, supply_mode, advertiser) with eval delivery —
        advertiser_id, source, method, supply_mode, impressions_forecast, impressions_actual,
        spend_forecast, spend_actual (window totals; spend in currency units).
    mape : one row per (source, supply_mode, method) — source, supply_mode, method,
        impressions_mape, spend_mape (fractions: 0.16 = 16%; NaN if every actual is zero),
        n_advertisers (scored, i.e. with a forecast and eval delivery), n_zero_impressions,
        n_zero_spend (zero actuals left out of the MAPE), n_segments, kappa_win, kappa_cost
        (NaN for method "segment"), n_missing_forecast (no supply forecast: no training delivery).
    segment_cdfs : source, segment (the label value), kind ("win" | "cost"), bid, cdf — each
        segment's pooled c.d.f. on a common bid grid per kind (reference "own" left out).
    segment_sizes : source, segment, n_advertisers, n_win_samples, n_cost_samples.
    kappa : source, kind, kappa, loss_own (κ=0), loss_segment (κ=∞), loss_best — the held-out
        c.d.f. errors of the training-window split behind each κ.
    supply : advertiser_id, alpha, level, mean, n_days of the supply forecast (None if unused).
    timings : seconds per stage.
    parameters : the evaluation's settings (supply, methods, kappa, supply_model, supply_engine,
        spend_price, cdf_grid_size, random_state), for the run record.
    """

    forecasts: pd.DataFrame
    mape: pd.DataFrame
    segment_cdfs: pd.DataFrame
    segment_sizes: pd.DataFrame
    kappa: pd.DataFrame
    supply: pd.DataFrame | None
    timings: dict[str, float]
    parameters: dict = field(default_factory=dict)


def segment_sizes(
    win: SampleSet, cost: SampleSet, segments: ArrayLike, source: str = ""
) -> pd.DataFrame:
    """Per segment label: number of advertisers and of pooled win / cost samples. ``win`` and
    ``cost`` must hold the same n advertisers."""
    if win.n_owners != cost.n_owners:
        raise ValueError(
            f"win and cost must hold the same advertisers; got {win.n_owners} and "
            f"{cost.n_owners} sample arrays."
        )
    codes, k = _compact_labels(segments, win.n_owners)
    has = codes >= 0
    return pd.DataFrame(
        {
            "source": source,
            "segment": _label_values(segments),
            "n_advertisers": np.bincount(codes[has], minlength=k),
            "n_win_samples": np.bincount(codes[has], weights=win.counts[has], minlength=k).astype(
                np.int64
            ),
            "n_cost_samples": np.bincount(codes[has], weights=cost.counts[has], minlength=k).astype(
                np.int64
            ),
        }
    )


def cdf_grid(samples: SampleSet, size: int = 101, upper_quantile: float = 0.995) -> np.ndarray:
    """Bid grid for tabulating c.d.f.s: ``size`` points from 0 to the largest advertiser's
    ``upper_quantile`` among the advertisers whose price scale is typical: on the log scale,
    within 5 scaled MADs of the advertisers' median. The far tail is dropped so that a few
    outliers do not flatten every plot; the quantile of all samples pooled did not do that when
    the outliers were advertisers with many samples (two of 120 logging prices ×1000, a unit
    error, put the top at 2,370 eCPM against a median price of 1.87, and every curve was at 0.99
    by the first grid step: QA). O(N log N) for N samples (one sort)."""
    has = samples.counts > 0
    if not has.any():
        return np.linspace(0.0, 1.0, size)
    order = np.lexsort((samples.values, samples.owner))  # by advertiser, then by value
    starts = (np.cumsum(samples.counts) - samples.counts)[has]
    at = starts + np.floor(upper_quantile * (samples.counts[has] - 1)).astype(np.int64)
    tops = samples.values[order][at]  # each advertiser's upper_quantile (lower order statistic)
    tops = tops[tops > 0]
    if tops.size == 0:
        return np.linspace(0.0, 1.0, size)
    logs = np.log(tops)
    centre = np.median(logs)
    spread = 1.4826 * np.median(np.abs(logs - centre))
    typical = tops[np.abs(logs - centre) <= 5.0 * spread + 1e-12]
    return np.linspace(0.0, float(typical.max()), size)


def segment_cdf_table(
    samples: SampleSet, segments: ArrayLike, grid: ArrayLike, *, kind: str, source: str = ""
) -> pd.DataFrame:
    """Tidy table of each segment's pooled c.d.f. on ``grid``: source, segment, kind, bid, cdf.
    Segments without samples of this kind are left out. Size K · len(grid) rows."""
    codes, k = _compact_labels(segments, samples.n_owners)
    ecdf = samples.pool(codes, k)
    grid = np.asarray(grid, dtype=np.float64)
    tab = ecdf.tabulate(grid)
    keep = ecdf.counts > 0
    labels = _label_values(segments)[keep]
    return pd.DataFrame(
        {
            "source": source,
            "segment": np.repeat(labels, grid.size),
            "kind": kind,
            "bid": np.tile(grid, labels.size),
            "cdf": tab[keep].ravel(),
        }
    )


def score_forecasts(forecasts: pd.DataFrame) -> pd.DataFrame:
    """MAPE of impressions and spend per (source, supply_mode, method) of a forecasts frame
    (columns as in :class:`ForecastResult`). Rows with a NaN (non-finite) impressions or spend
    forecast — forecasts adseg could not make, e.g. no supply history with supply "forecast" — are
    left out of both MAPEs and counted in n_missing_forecast (``mape_with_count`` itself refuses
    NaN); zero actuals are left out by ``mape_with_count`` and counted."""
    rows = []
    for (src, mode, meth), g in forecasts.groupby(
        ["source", "supply_mode", "method"], sort=False
    ):  # loop over sources, not advertisers
        ok = np.isfinite(g["impressions_forecast"].to_numpy(np.float64)) & np.isfinite(
            g["spend_forecast"].to_numpy(np.float64)
        )
        g = g[ok]
        imp_mape, imp_zero = _safe_mape(g["impressions_actual"], g["impressions_forecast"])
        sp_mape, sp_zero = _safe_mape(g["spend_actual"], g["spend_forecast"])
        rows.append(
            {
                "source": src,
                "supply_mode": mode,
                "method": meth,
                "impressions_mape": imp_mape,
                "spend_mape": sp_mape,
                "n_advertisers": int(len(g)),
                "n_zero_impressions": imp_zero,
                "n_zero_spend": sp_zero,
                "n_missing_forecast": int((~ok).sum()),
            }
        )
    return pd.DataFrame(rows)


def _safe_mape(y, y_hat) -> tuple[float, int]:
    y = np.asarray(y, dtype=np.float64)
    if y.size == 0 or not np.any(y != 0):
        return math.nan, int(np.sum(y == 0))
    return mape_with_count(y, np.asarray(y_hat, dtype=np.float64))


def evaluate_sources(
    win_samples: Sequence[ArrayLike],
    cost_samples: Sequence[ArrayLike],
    segmentations: Mapping[str, ArrayLike],
    train_delivery: pd.DataFrame | None,
    eval_delivery: pd.DataFrame,
    advertiser_ids: ArrayLike,
    *,
    supply: Literal["actual", "forecast", "both"] = "actual",
    methods: Sequence[str] = ("segment", "blended"),
    kappa: float | Literal["cv"] = "cv",
    kappa_grid: ArrayLike = DEFAULT_KAPPA_GRID,
    add_references: bool = True,
    supply_model: Literal["ses", "mean", "seasonal_naive"] = "ses",
    supply_engine: Literal["numpy", "statsmodels"] = "numpy",
    spend_price: Literal["cost", "market"] = "cost",
    cdf_grid_size: int = 101,
    random_state=0,
) -> ForecastResult:
    """Forecast the evaluation window's impressions and spend under every segmentation source and
    score them (pipeline steps 6–8).

    Parameters
    ----------
    win_samples, cost_samples : n 1-D arrays each, in ``advertiser_ids`` order: training-window
        market prices (eCPM) and paid eCPM of won auctions. Empty arrays allowed.
    segmentations : source name → (n,) int labels (-1 = advertiser in no segment → global c.d.f.).
    train_delivery : training-window delivery (advertiser_id, date, bid_requests, bid_ecpm, ...);
        needed for ``supply`` "forecast"/"both"; also gives each advertiser's median training bid
        as an extra point of the κ selection. May be None for ``supply="actual"``.
    eval_delivery : evaluation-window delivery, one row per (advertiser_id, date) with
        bid_requests, bid_ecpm, impressions, spend (currency; whole micros, as stored: the
        actual totals are summed in micros, exactly). Only advertisers with rows are forecast.
    advertiser_ids : (n,) unique ids; the order of the sample lists and segmentations.
    supply : "actual" (the window's bid requests), "forecast" (from train_delivery), "both".
    supply_model : the "forecast" supply: "ses" (default), "mean", "seasonal_naive" — see
        :func:`supply_for_rows`. supply_engine : "numpy" or "statsmodels" for "ses".
    spend_price : expected paid eCPM at the bid from the eCPM-cost samples ("cost", the paper's
        eCPM cost c.d.f.; default) or from the market-price samples ("market": E[price | price ≤
        bid], the second-price charge — not censored at each advertiser's own historical bid,
        which the cost samples are: they exist only for auctions won at that bid).
    methods : any of "segment" (the paper: segment c.d.f. only) and "blended" (empirical Bayes).
    kappa : "cv" (per source and kind by :func:`select_kappa`) or a fixed κ ≥ 0 for "blended"
        (any real number: int, float, numpy scalar, inf; not a bool).
    add_references : also evaluate ``reference_segmentations(n)`` ("own", "global") unless
        ``segmentations`` already has those names.
    random_state : seed of the κ selection's sample split.

    Time: O(N log N + S (N + R log N)) for S sources, N samples, R eval rows. Measured on 2
    shared cores at load ≈ 12: 1,268 advertisers, 0.22 M training auctions, 10 sources, both
    supply modes ≈ 4 s; 1,300 advertisers, 1 M samples, 4 sources ≈ 5 s.
    """
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    ids = _as_ids(advertiser_ids)
    n = ids.size
    if len(win_samples) != n or len(cost_samples) != n:
        raise ValueError(
            f"win_samples and cost_samples must have one array per advertiser ({n}); got "
            f"{len(win_samples)} and {len(cost_samples)}."
        )
    chosen = {
        "supply": supply,
        "supply_model": supply_model,
        "supply_engine": supply_engine,
        "spend_price": spend_price,
    }
    for name, value in chosen.items():
        if value not in FORECAST_CHOICES[name]:
            raise ValueError(f"{name} must be one of {FORECAST_CHOICES[name]}; got {value!r}.")
    modes = ["actual", "forecast"] if supply == "both" else [supply]
    bad = [m for m in methods if m not in ("segment", "blended")]
    if bad or not methods:
        raise ValueError(f"methods must be among 'segment', 'blended'; got {list(methods)}.")
    kappa = _check_kappa(kappa)
    if "forecast" in modes and train_delivery is None:
        raise ValueError("supply='forecast' needs train_delivery (the training window's supply).")
    ev = _check_delivery(
        eval_delivery,
        "eval_delivery",
        ids,
        need=("bid_requests", "bid_ecpm", "impressions", "spend"),
    )
    if len(ev) == 0:
        raise ValueError("eval_delivery has no rows: nothing to forecast or score.")
    sources: dict[str, np.ndarray] = dict(segmentations)
    if not sources and not add_references:
        raise ValueError("segmentations is empty.")
    references = reference_segmentations(n)
    if add_references:
        for name, seg in references.items():
            sources.setdefault(name, seg)
    for name, seg in sources.items():
        _compact_labels(seg, n, name=f"segmentations[{name!r}]")

    samples = {
        "win": SampleSet(win_samples, name="win_samples"),
        "cost": SampleSet(cost_samples, name="cost_samples"),
    }
    own = {k: s.pool(np.arange(n), n) for k, s in samples.items()}
    pooled = {k: s.pool(np.zeros(n, dtype=np.int64), 1) for k, s in samples.items()}
    timings["index_samples"] = time.perf_counter() - t0

    train_bids = None
    if train_delivery is not None:
        tr = _check_delivery(train_delivery, "train_delivery", ids, need=("bid_requests",))
        if "bid_ecpm" in tr.columns:
            med = tr.groupby("advertiser_id")["bid_ecpm"].median()
            train_bids = med.reindex(ids).to_numpy(np.float64)

    # per eval row: advertiser index, bid, actual supply; per advertiser: actual totals
    row_adv = pd.Index(ids).get_indexer(ev["advertiser_id"])
    row_bid = ev["bid_ecpm"].to_numpy(np.float64)
    scored = np.unique(row_adv)
    pos = np.searchsorted(scored, row_adv)
    imp_actual = np.bincount(pos, weights=ev["impressions"].to_numpy(np.float64))
    # delivered spend is whole micros: summed as integers it is exact and reconciles with
    # billing (a float sum gave 880.1107870000001 for 880.110787); a finer input is rounded
    spend_micros = np.rint(ev["spend"].to_numpy(np.float64) * MICROS)
    spend_actual = np.bincount(pos, weights=spend_micros) / MICROS
    row_supply = {"actual": ev["bid_requests"].to_numpy(np.float64)}
    supply_frame = None
    if "forecast" in modes:
        t = time.perf_counter()
        row_supply["forecast"], supply_frame = supply_for_rows(
            train_delivery,
            ids,
            row_adv,
            _dates(ev["date"], "eval_delivery"),
            model=supply_model,
            engine=supply_engine,
        )
        timings["supply_forecast"] = time.perf_counter() - t

    t = time.perf_counter()
    grids = {k: cdf_grid(s, cdf_grid_size) for k, s in samples.items()}
    cdf_tables, size_tables = [], []
    for name, seg in sources.items():  # loop over sources
        size_tables.append(segment_sizes(samples["win"], samples["cost"], seg, name))
        if name == "own" and seg is references["own"]:
            continue  # n tiny c.d.f.s: not worth persisting or plotting
        for kind, s in samples.items():
            cdf_tables.append(segment_cdf_table(s, seg, grids[kind], kind=kind, source=name))
    timings["segment_cdfs"] = time.perf_counter() - t

    t = time.perf_counter()
    selectors = {}
    if "blended" in methods and kappa == "cv":
        selectors = {
            k: KappaSelector(kappa_grid, random_state=random_state).fit(s, train_bids)
            for k, s in samples.items()
        }
    timings["kappa_prepare"] = time.perf_counter() - t

    t = time.perf_counter()
    out_frames, kappa_rows, kappa_used = [], [], {}
    for name, seg in sources.items():  # loop over sources
        n_seg = int(_label_values(seg).size)
        segment_lands = {
            k: Landscape.build(s, seg, math.inf, own=own[k], pooled=pooled[k])
            for k, s in samples.items()
        }
        for meth in methods:
            lands = {}
            for kind in samples:
                if meth == "segment":
                    lands[kind] = segment_lands[kind]
                    continue
                if kappa == "cv":
                    kap, curve = selectors[kind].select(seg)
                    kappa_rows.append(_kappa_row(name, kind, kap, curve))
                else:
                    kap = float(kappa)
                lands[kind] = segment_lands[kind].with_kappa(kap)
            kappa_used[(name, meth)] = (lands["win"].kappa, lands["cost"].kappa)
            win_rate = lands["win"].cdf(row_adv, row_bid)
            if spend_price == "cost":
                ecost = expected_cost(lands["win"], lands["cost"], row_adv, row_bid)
            else:  # the cost landscape replaced by the market prices themselves
                ecost = expected_cost(lands["win"], lands["win"], row_adv, row_bid)
            for mode in modes:
                imp_rows = row_supply[mode] * win_rate
                spend_rows = imp_rows * ecost / 1000.0
                out_frames.append(
                    pd.DataFrame(
                        {
                            "advertiser_id": ids[scored],
                            "source": name,
                            "method": meth,
                            "supply_mode": mode,
                            "impressions_forecast": np.bincount(pos, weights=imp_rows),
                            "impressions_actual": imp_actual,
                            "spend_forecast": np.bincount(pos, weights=spend_rows),
                            "spend_actual": spend_actual,
                            "n_segments": n_seg,
                        }
                    )
                )
    timings["forecast"] = time.perf_counter() - t

    forecasts = pd.concat(out_frames, ignore_index=True)
    scores = score_forecasts(forecasts)
    nseg = forecasts.groupby(["source"], sort=False)["n_segments"].first()
    scores.insert(8, "n_segments", scores["source"].map(nseg).astype(np.int64))
    scores["kappa_win"] = [
        kappa_used[(s, m)][0] if m == "blended" else math.nan
        for s, m in zip(scores["source"], scores["method"], strict=True)
    ]
    scores["kappa_cost"] = [
        kappa_used[(s, m)][1] if m == "blended" else math.nan
        for s, m in zip(scores["source"], scores["method"], strict=True)
    ]
    cols = [*scores.columns[:9], "kappa_win", "kappa_cost", "n_missing_forecast"]
    scores = scores[cols]
    forecasts = forecasts.drop(columns="n_segments")
    timings["total"] = time.perf_counter() - t0
    return ForecastResult(
        forecasts=forecasts,
        mape=scores,
        segment_cdfs=pd.concat(cdf_tables, ignore_index=True)
        if cdf_tables
        else pd.DataFrame(columns=["source", "segment", "kind", "bid", "cdf"]),
        segment_sizes=pd.concat(size_tables, ignore_index=True),
        kappa=pd.DataFrame(
            kappa_rows,
            columns=["source", "kind", "kappa", "loss_own", "loss_segment", "loss_best"],
        ),
        supply=supply_frame,
        timings=timings,
        parameters={
            "supply": supply,
            "methods": list(methods),
            "kappa": kappa if kappa == "cv" else float(kappa),
            "supply_model": supply_model,
            "supply_engine": supply_engine,
            "spend_price": spend_price,
            "cdf_grid_size": int(cdf_grid_size),
            "random_state": random_state,
        },
    )


def _check_kappa(kappa) -> float | str:
    """``kappa`` as "cv" or a float ≥ 0 (inf allowed). Any real number is accepted (numpy scalars
    included); a bool is refused, not read as 0 or 1."""
    if isinstance(kappa, str) and kappa == "cv":
        return kappa
    if isinstance(kappa, bool | np.bool_) or not isinstance(kappa, numbers.Real):
        raise TypeError(f"kappa must be 'cv' or a real number >= 0; got {kappa!r}.")
    if not kappa >= 0:  # also refuses NaN
        raise ValueError(f"kappa must be 'cv' or a number >= 0; got {kappa!r}.")
    return float(kappa)


def _kappa_row(source: str, kind: str, kap: float, curve: pd.DataFrame) -> dict:
    if curve.empty:
        return dict(source=source, kind=kind, kappa=kap, loss_own=math.nan,
                    loss_segment=math.nan, loss_best=math.nan)  # fmt: skip
    loss = curve["loss"].to_numpy()
    kg = curve["kappa"].to_numpy()
    at = {v: loss[kg == v][0] if np.any(kg == v) else math.nan for v in (0.0, math.inf)}
    return dict(source=source, kind=kind, kappa=kap, loss_own=at[0.0],
                loss_segment=at[math.inf], loss_best=float(loss.min()))  # fmt: skip
