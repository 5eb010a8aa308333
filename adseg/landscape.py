"""Bid landscapes: empirical c.d.f.s and exact all-pairs two-sample Kolmogorov–Smirnov statistics.

The scaled KS statistic dist(i, j) = sqrt(m n / (m + n)) · sup_x |F_i(x) − F_j(x)| (paper seed 003,
Eq. 41) is computed exactly for every pair as D_ij = max(A_ij, A_ji), A_ij the largest F_i − F_j
over the distinct values of sample i, snapped like ``scipy.stats.ks_2samp`` (bit for bit there).

Cost: n · Σ_i |U_i| element operations ("points" method, default; "grid" is the cross-check).
Memory: the n×n float64 result, one column block's e.c.d.f. table (≤ ``memory_mb`` and ≤ 64 MB),
≈ 40 bytes per pooled sample, one working chunk of ``chunk_elements`` float64; never n × n × G.
Empty samples get NaN rows and columns (``on_empty="raise"`` makes it an error). Derivation and
timings: docs/algorithms/ks.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from adseg.checks import index_dtype

__all__ = [
    "ecdf",
    "ecdf_values",
    "ks_critical_value",
    "ks_distance_matrix",
    "ks_distance_of_pairs",
    "ks_distance_pairs",
    "ks_pairs_within",
    "ks_statistic_against",
    "ks_statistic_matrix",
    "sample_sizes",
]

_DEFAULT_MEMORY_MB = 256.0
_DEFAULT_CHUNK = 1 << 18


# --------------------------------------------------------------------------------------------
# Single-sample helpers
# --------------------------------------------------------------------------------------------


def ecdf(sample) -> tuple[np.ndarray, np.ndarray]:
    """The e.c.d.f. of one sample as its distinct values and F at them.

    Returns (x, F): x sorted distinct values (k,), F(x) = #{samples ≤ x} / m (k,), float64, right-
    continuous. Empty input → two empty arrays. Cost O(m log m).
    """
    a = _as_sample(sample, "sample")
    if a.size == 0:
        return np.empty(0), np.empty(0)
    a = np.sort(a)
    x, counts = np.unique(a, return_counts=True)
    return x, np.cumsum(counts) / a.size


def ecdf_values(sample, points) -> np.ndarray:
    """F(points) for the e.c.d.f. of ``sample`` (right-continuous: F(x) = #{samples ≤ x} / m).

    ``points`` any shape; returns float64 of the same shape. Empty sample → NaN. A NaN point gives
    NaN (propagated, as numpy arithmetic would; ±inf give 0 and 1). Cost O((m + p) log m).
    """
    a = np.sort(_as_sample(sample, "sample"))
    p = np.asarray(points, dtype=np.float64)
    if a.size == 0:
        return np.full(p.shape, np.nan)
    # searchsorted places NaN after every number, which would read as F = 1
    return np.where(np.isnan(p), np.nan, np.searchsorted(a, p, side="right") / a.size)


def sample_sizes(samples: Sequence) -> np.ndarray:
    """Number of observations of each sample (n,), int64."""
    return np.array([np.asarray(s).size for s in _as_sample_list(samples)], dtype=np.int64)


def ks_critical_value(alpha: float) -> float:
    """C_α with Pr(K > C_α) = α for the Kolmogorov distribution K (the asymptotic law of
    sqrt(mn/(m+n)) · D under H0: F_i = F_j): scipy.stats.kstwobign.isf(alpha).

    C_0.01 ≈ 1.6276, C_0.05 ≈ 1.3581, C_0.10 ≈ 1.2238; decreasing in α. ``alpha`` in (0, 1).
    """
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating, np.integer)):
        raise TypeError(f"alpha must be a number in (0, 1); got {alpha!r}.")
    alpha = float(alpha)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1); got {alpha}.")
    return float(stats.kstwobign.isf(alpha))


# --------------------------------------------------------------------------------------------
# All-pairs KS
# --------------------------------------------------------------------------------------------


def ks_statistic_matrix(
    samples: Sequence,
    *,
    method: str = "points",
    precision: str = "auto",
    memory_mb: float = _DEFAULT_MEMORY_MB,
    chunk_elements: int = _DEFAULT_CHUNK,
    on_empty: str = "nan",
) -> np.ndarray:
    """All-pairs two-sample KS statistics D_ij = sup_x |F_i(x) − F_j(x)|.

    Parameters
    ----------
    samples : sequence of n 1-D array-likes of finite numbers (sizes may differ, ties allowed).
    method : "points" (directed maxima at each sample's own distinct values; default) or "grid"
        (every pair on the pooled grid of distinct values; slower unless samples are dense on a
        small grid). Both are exact.
    precision : "auto" (default) or "float64", for method="points". When the scan is large
        (n · P > 2·10⁸, P = Σ_i |U_i|; else "auto" is "float64"), "auto" runs it in float32 (half
        the memory traffic, ≈ 1.5× faster) and snaps each D_ij to the nearest multiple of
        1 / lcm(m_i, m_j): the float32 error is ≤ 3 · 2⁻²⁵ < 1 / (2 lcm) whenever lcm ≤ 2²¹, so
        the snapped value is the exact statistic; pairs with a larger lcm (both samples large,
        sizes coprime) are recomputed in float64 on the sub-matrix of the samples involved (all
        of it in float64 if they are more than half the samples). Same result as "float64", bit
        for bit.
    memory_mb : budget for the block tables (the e.c.d.f. table of one column block for "points",
        the (G, n) e.c.d.f. table for "grid", which raises if it does not fit). The n×n result is
        extra.
    chunk_elements : float64 elements in one working chunk (the points × columns or rows ×
        columns temporary); a cache-sized chunk is fastest.
    on_empty : "nan" (NaN row and column for an empty sample) or "raise".

    Returns
    -------
    D : (n, n) float64, symmetric, zero diagonal, values in [0, 1] (NaN rows for empty samples).
        Equal to ``scipy.stats.ks_2samp(samples[i], samples[j]).statistic`` for every pair.

    Cost: "points" n · Σ_i |U_i| element operations (|U_i| = distinct values of sample i);
    "grid" n² G / 2. Memory: see the module docstring and docs/algorithms/ks.md.
    """
    data = _Pooled.from_samples(samples, on_empty=on_empty)
    _check_positive(memory_mb, "memory_mb")
    _check_positive(chunk_elements, "chunk_elements")
    chunk_elements = int(chunk_elements)
    if precision not in ("auto", "float64"):
        raise ValueError(f"precision must be 'auto' or 'float64'; got {precision!r}.")
    # the float32 screen pays once the scan (≈ n · P element operations) dominates the O(n²) and
    # O(N) overheads; below that, "auto" is float64 (same result either way)
    screen = precision == "auto" and data.sizes.size * data.p_vals.size > _SCREEN_MIN_WORK
    if method == "points" and screen:
        out = _ks_points_screened(data, memory_mb, chunk_elements)
    elif method == "points":
        out = _ks_points(data, memory_mb, chunk_elements)
    elif method == "grid":
        out = _ks_grid(data, memory_mb, chunk_elements)
    else:
        raise ValueError(f"method must be 'points' or 'grid'; got {method!r}.")
    _round_to_lattice(out, data.sizes, chunk_elements)
    empty = data.sizes == 0
    if empty.any():
        out[empty, :] = np.nan
        out[:, empty] = np.nan
    return out


def ks_statistic_against(samples: Sequence, references: Sequence) -> np.ndarray:
    """(n, r) KS statistics D_ij of each of n non-empty ``samples`` against each of r non-empty
    ``references``: the (samples, references) block of ``ks_statistic_matrix(samples +
    references)``, bit for bit, without its (n + r)² matrix.

    Between two jumps of F_i, F_i is constant and G_j monotone, so sup |F_i − G_j| is reached at
    a point u of sample i, at G_j(u) or at the left limit G_j(u−) (with F_i just before u): both
    are counts of the sorted reference. Cost: Σ_i |U_i| binary searches into each reference,
    after sorting each once; memory O(Σ_i |U_i| + largest reference), plus the (n, r) result.
    Meant for small samples against large pools (advertisers left out of a view against the
    segments' pooled samples)."""
    xs = [np.sort(_as_sample(x, f"samples[{i}]")) for i, x in enumerate(_as_sample_list(samples))]
    refs = [_as_sample(x, f"references[{j}]") for j, x in enumerate(_as_sample_list(references))]
    sizes = np.array([x.size for x in xs], dtype=np.int64)
    ref_sizes = np.array([x.size for x in refs], dtype=np.int64)
    if (sizes == 0).any() or (ref_sizes == 0).any():
        raise ValueError("ks_statistic_against needs non-empty samples and references.")
    values = np.concatenate(xs) if xs else np.empty(0)
    owner = np.repeat(np.arange(len(xs)), sizes)
    last = np.ones(values.size, dtype=bool)  # the last copy of each distinct value of a sample
    last[:-1] = (values[1:] != values[:-1]) | (owner[1:] != owner[:-1])
    first = np.ones(values.size, dtype=bool)
    first[1:] = last[:-1]
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    rank = np.arange(values.size) - starts[owner]  # samples of i below this copy
    m = sizes[owner].astype(np.float64)
    u, after, before = values[last], (rank[last] + 1) / m[last], rank[first] / m[first]
    segments = np.r_[0, np.cumsum(np.bincount(owner[last], minlength=len(xs)))[:-1]]
    out = np.empty((len(xs), len(refs)))
    for j, ref in enumerate(refs):  # loop over references
        ref = np.sort(ref)
        right = np.searchsorted(ref, u, side="right") / ref.size
        left = np.searchsorted(ref, u, side="left") / ref.size
        gap = np.maximum(np.abs(after - right), np.abs(before - left))
        out[:, j] = np.maximum.reduceat(gap, segments) if gap.size else 0.0
    _round_to_lattice(out, sizes, _DEFAULT_CHUNK, col_sizes=ref_sizes)
    return out


def ks_distance_matrix(samples: Sequence, **kwargs) -> np.ndarray:
    """Scaled KS distances dist_ij = sqrt(m_i m_j / (m_i + m_j)) · D_ij (paper Eq. 41), (n, n)
    float64, symmetric, zero diagonal; NaN rows/columns for empty samples. Keyword arguments go to
    ``ks_statistic_matrix``; the scaling is done in place (no n×n temporary). Compare with
    ``ks_critical_value(alpha)``.
    """
    samples = _as_sample_list(samples)
    d = ks_statistic_matrix(samples, **kwargs)
    _scale_inplace(d, sample_sizes(samples), kwargs.get("chunk_elements", _DEFAULT_CHUNK))
    return d


def ks_distance_pairs(
    samples: Sequence,
    max_distance: float,
    *,
    block_mb: float = 64.0,
    memory_mb: float = _DEFAULT_MEMORY_MB,
    chunk_elements: int = _DEFAULT_CHUNK,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pairs i < j with scaled KS distance dist_ij ≤ ``max_distance``, without an n×n array.

    Rows of advertisers are processed in blocks of b = ``block_mb`` MiB / (8 n) against every
    later advertiser; each block's distances are those of ``ks_distance_matrix(samples,
    precision="float64")``, bit for bit, so no pair is missed or added (no candidate pruning).
    Pairs with an empty sample (NaN distance) are never kept.

    Returns (i, j, dist): (k,) int32 (int64 from 2³¹ samples on), (k,) likewise, (k,) float64,
    row-major order. Cost: the dense matrix's n · Σ_i |U_i| element operations (each unordered
    pair once), plus O(N) table work per block. Memory: about two b × n float64 arrays and a b × n
    boolean at a time (≈ 2.2 ``block_mb``), the block tables (≤ ``memory_mb``) and 16 bytes per
    pair kept.
    """
    data = _Pooled.from_samples(samples, on_empty="nan")
    for value, name in ((block_mb, "block_mb"), (memory_mb, "memory_mb")):
        _check_positive(value, name)
    _check_positive(chunk_elements, "chunk_elements")
    if not isinstance(max_distance, (int, float, np.integer, np.floating)):
        raise TypeError(f"max_distance must be a number; got {max_distance!r}.")
    n = data.sizes.size
    index = index_dtype(n)
    b = max(1, int(block_mb * 2**20 // (8 * max(n, 1))))
    found_i, found_j, found_d = [], [], []
    for i0 in range(0, n, b):  # loop over row blocks
        i1 = min(n, i0 + b)
        dist = _ks_distance_rows(data, i0, i1, memory_mb, int(chunk_elements))
        with np.errstate(invalid="ignore"):
            a, c = np.nonzero(np.triu(dist <= max_distance, 1))  # j > i only
        found_i.append((a + i0).astype(index))
        found_j.append((c + i0).astype(index))
        found_d.append(dist[a, c])
    if not found_i:
        return np.empty(0, index), np.empty(0, index), np.empty(0)
    return np.concatenate(found_i), np.concatenate(found_j), np.concatenate(found_d)


def ks_distance_of_pairs(
    samples: Sequence, i, j, *, chunk_elements: int = _DEFAULT_CHUNK
) -> np.ndarray:
    """Scaled KS distances dist(i[p], j[p]) of the given pairs only, without any n×n array.

    Each value has the bits of ``ks_distance_matrix(samples)[i[p], j[p]]``: the statistic is
    found in integers, the max over the distinct values x of either sample of |c_i(x) m_j −
    c_j(x) m_i| (c the counts ≤ x), divided once as h / lcm(m_i, m_j) (scipy's ks_2samp snaps
    to that value), then scaled as ``ks_distance_matrix`` scales. NaN where a sample is empty.

    i, j : (k,) integer arrays of sample indices. Returns (k,) float64.
    Cost: Σ_p (|U_i| + |U_j|) binary searches in the N pooled samples (|U| distinct values),
    in chunks of ``chunk_elements`` points; memory O(N + chunk).
    """
    data = _Pooled.from_samples(samples, on_empty="nan")
    _check_positive(chunk_elements, "chunk_elements")
    i, j = _pair_indices(i, j, data.sizes.size)
    return _distances(_PairTable(data), i, j, int(chunk_elements))


def _pair_indices(i, j, n: int) -> tuple[np.ndarray, np.ndarray]:
    """i and j as equal-length int64 arrays of sample indices in [0, n), else ValueError."""
    i, j = (np.asarray(a, dtype=np.int64).ravel() for a in (i, j))
    if i.shape != j.shape or (i.size and (min(i.min(), j.min()) < 0 or max(i.max(), j.max()) >= n)):
        raise ValueError(f"i and j must be equal-length arrays of indices in [0, {n}).")
    return i, j


def _distances(table, i: np.ndarray, j: np.ndarray, chunk: int) -> np.ndarray:
    """Scaled KS distances of the pairs (i, j) from the counting table (ks_distance_of_pairs)."""
    data = table.data
    h = np.maximum(table.directed(i, j, chunk), table.directed(j, i, chunk))
    m_i, m_j = data.sizes[i], data.sizes[j]
    g = np.maximum(np.gcd(m_i, m_j), 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        stat = (h // g) / ((m_i // g) * m_j).astype(np.float64)
        mf_i, mf_j = m_i.astype(np.float64), m_j.astype(np.float64)
        dist = stat * np.sqrt(mf_i * mf_j / (mf_i + mf_j))
    dist[(m_i == 0) | (m_j == 0)] = np.nan
    return dist


def ks_pairs_within(
    samples: Sequence,
    i,
    j,
    max_distance: float,
    *,
    settle_below: float | None = None,
    grid_points: int = 64,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The given pairs whose scaled KS distance is ≤ ``max_distance``, with that distance:
    ``ks_distance_of_pairs`` on the pairs that exact bounds cannot settle.

    The bounds: on a grid Q = q_1 < … < q_G of ``grid_points`` pooled sample values, every
    F is known at Q and monotone between, so max_g |F_i(q_g) − F_j(q_g)| ≤ D_ij ≤
    max_g max(F_i(q_{g+1}) − F_j(q_g), F_j(q_{g+1}) − F_i(q_g)). A pair whose scaled lower
    bound exceeds ``max_distance`` is dropped unseen (none within it is missed). With
    ``settle_below``, a pair whose scaled upper bound is ≤ it is kept with that bound as its
    distance, not computed: the caller only asks which side of limits ≥ ``settle_below`` it is
    on, and the bound answers that exactly. Every other pair is counted exactly.

    i, j : (k,) integer arrays of sample indices. Returns (i, j, dist) of the kept pairs, in the
    given order; dist is exact except for settled pairs (an upper bound ≤ ``settle_below``).
    Cost: about 5 k · grid_points operations for the bounds, plus ``ks_distance_of_pairs``
    on the unsettled survivors; memory: an (n, grid_points) float64 table and chunks.
    """
    data = _Pooled.from_samples(samples, on_empty="nan")
    i, j = _pair_indices(i, j, data.sizes.size)
    table = _PairTable(data)
    grid = table.grid(int(grid_points))
    m = data.sizes.astype(np.float64)
    settle = -np.inf if settle_below is None else float(settle_below)
    exact, settled, bounds = [], [], []
    # chunks of 2^18 grid values (2 MB a table): the bounds' passes then run in cache, 2.5×
    # faster than on 16 MB chunks (docs/algorithms/ks.md)
    step = max(1, (1 << 18) // max(grid.shape[1], 1))
    for p0 in range(0, i.size, step):  # loop over chunks of pairs
        a, b = i[p0 : p0 + step], j[p0 : p0 + step]
        low, high = _grid_bounds(grid[a], grid[b])
        with np.errstate(invalid="ignore", divide="ignore"):
            scale = np.sqrt(m[a] * m[b] / (m[a] + m[b]))
            low, high = low * scale, high * scale + 1e-9  # margins for the rounding
            done = high <= settle
            exact.append(p0 + np.flatnonzero(~(low > max_distance + 1e-9) & ~done))
        settled.append(p0 + np.flatnonzero(done))
        bounds.append(high[done])
    todo = np.concatenate(exact) if exact else np.empty(0, dtype=np.int64)
    dist = _distances(table, i[todo], j[todo], _DEFAULT_CHUNK)
    with np.errstate(invalid="ignore"):
        todo, dist = todo[dist <= max_distance], dist[dist <= max_distance]
    keep = np.concatenate([todo, *settled])
    values = np.concatenate([dist, *bounds])
    order = np.argsort(keep, kind="stable")
    return i[keep[order]], j[keep[order]], values[order]


def _grid_bounds(fa: np.ndarray, fb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds on sup |F_a − F_b| from both c.d.f.s on a common grid, (c, G)
    each (ks_pairs_within). Returns two (c,) arrays."""
    if fa.shape[1] == 0:
        return np.zeros(fa.shape[0]), np.ones(fa.shape[0])
    low = np.abs(fa - fb).max(axis=1)
    high = np.maximum((fa[:, 1:] - fb[:, :-1]).max(axis=1, initial=0.0), low)
    np.maximum(high, (fb[:, 1:] - fa[:, :-1]).max(axis=1, initial=0.0), out=high)
    # nothing outside [q_1, q_G]: the grid holds the pooled minimum (below it every F is 0)
    # and maximum (from it on every F is 1)
    return low, high


class _PairTable:
    """The pooled samples keyed for counting: key = sample id · R + rank of the value among all
    R distinct values, sorted, so #{x_j ≤ x} is one binary search of j · R + rank(x)."""

    def __init__(self, data: _Pooled):
        self.data = data
        distinct = np.unique(data.values)
        self.width = np.int64(distinct.size + 1)
        self.keys = data.ids.astype(np.int64) * self.width + np.searchsorted(distinct, data.values)
        self.p_rank = np.searchsorted(distinct, data.p_vals).astype(np.int64)
        self.p_count = np.rint(data.p_f * data.sizes[data.p_ids]).astype(np.int64)
        self.p_start = np.searchsorted(data.p_ids, np.arange(data.sizes.size + 1))
        self.distinct = distinct

    def grid(self, points: int) -> np.ndarray:
        """(n, q) float64 F_i at q ≤ ``points`` pooled sample values (quantiles of all samples
        together, the smallest and the largest among them), the same points for every sample."""
        data, n = self.data, self.data.sizes.size
        if data.values.size == 0:
            return np.zeros((n, 0))
        levels = np.linspace(0, 1, max(points, 1))
        q = np.unique(np.quantile(data.values, levels, method="inverted_cdf"))
        rank = np.searchsorted(self.distinct, q)
        keys = np.arange(n, dtype=np.int64)[:, None] * self.width + rank[None, :]
        below = np.searchsorted(self.keys, keys, "right") - data.offsets[:-1, None]
        with np.errstate(invalid="ignore", divide="ignore"):
            return below / data.sizes[:, None].astype(np.float64)

    def directed(self, a: np.ndarray, b: np.ndarray, chunk: int) -> np.ndarray:
        """max(0, max over the distinct values x of sample a[p] of c_a(x) m_b − c_b(x) m_a),
        (k,) int64, in chunks of about ``chunk`` points."""
        order = np.argsort(b, kind="stable")  # queries into one sample's keys together: cached
        a, b = a[order], b[order]
        out = np.zeros(a.size, dtype=np.int64)
        counts = self.p_start[a + 1] - self.p_start[a]
        ends = np.cumsum(counts)
        p0 = 0
        while p0 < a.size:  # loop over chunks of pairs
            done = int(ends[p0 - 1]) if p0 else 0
            p1 = max(int(np.searchsorted(ends, done + chunk, "right")), p0 + 1)
            out[p0:p1] = self._directed_chunk(a[p0:p1], b[p0:p1], counts[p0:p1])
            p0 = p1
        result = np.empty_like(out)
        result[order] = out
        return result

    def _directed_chunk(self, a, b, counts) -> np.ndarray:
        data = self.data
        pair = np.repeat(np.arange(a.size), counts)
        first = np.cumsum(counts) - counts
        point = self.p_start[a][pair] + np.arange(pair.size) - first[pair]
        bb = b[pair]
        below = np.searchsorted(self.keys, bb * self.width + self.p_rank[point], "right")
        term = (
            self.p_count[point] * data.sizes[bb] - (below - data.offsets[bb]) * data.sizes[a][pair]
        )
        out = np.zeros(a.size, dtype=np.int64)
        has = counts > 0
        if pair.size:
            out[has] = np.maximum.reduceat(term, first[has])
        return np.maximum(out, 0)


def scale_statistics(statistics: np.ndarray, sizes) -> np.ndarray:
    """sqrt(m_i m_j / (m_i + m_j)) · D_ij for an (n, n) statistic matrix and sample sizes (n,).
    Pairs involving an empty sample become NaN. Returns a new (n, n) float64 array."""
    d = np.array(statistics, dtype=np.float64)
    m = np.asarray(sizes)
    if d.ndim != 2 or d.shape != (m.size, m.size):
        raise ValueError(f"statistics must be ({m.size}, {m.size}); got shape {d.shape}.")
    _scale_inplace(d, m, _DEFAULT_CHUNK)
    return d


# --------------------------------------------------------------------------------------------
# Internals
# --------------------------------------------------------------------------------------------


class _Pooled:
    """All samples concatenated and sorted within each sample, plus each sample's distinct values
    ("points") with its own F there. Arrays of length N = Σ m_i and P = Σ |U_i|."""

    def __init__(self, values, ids, sizes, offsets, p_ids, p_vals, p_f, arrays):
        self.values, self.ids, self.sizes, self.offsets = values, ids, sizes, offsets
        self.p_ids, self.p_vals, self.p_f = p_ids, p_vals, p_f
        self.arrays = arrays  # the validated input samples (references, not copies)
        self._n_distinct: int | None = None

    @property
    def n_distinct(self) -> int:
        """Distinct values over all samples (computed once: O(P log P))."""
        if self._n_distinct is None:
            self._n_distinct = int(np.unique(self.p_vals).size)
        return self._n_distinct

    @classmethod
    def from_samples(cls, samples, *, on_empty: str) -> _Pooled:
        if on_empty not in ("nan", "raise"):
            raise ValueError(f"on_empty must be 'nan' or 'raise'; got {on_empty!r}.")
        arrays = [_as_sample(s, f"samples[{i}]") for i, s in enumerate(_as_sample_list(samples))]
        sizes = np.array([a.size for a in arrays], dtype=np.int64)
        if on_empty == "raise" and (sizes == 0).any():
            raise ValueError(f"samples[{int(np.argmin(sizes))}] is empty (on_empty='raise').")
        n = sizes.size
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        ids = np.repeat(np.arange(n), sizes)
        values = np.concatenate(arrays) if n else np.empty(0)
        # ids are already grouped in ascending order, so lexsort sorts values within each sample
        order = np.lexsort((values, ids))
        values = values[order]
        # last occurrence of each distinct value within a sample: its rank + 1 = #{x ≤ value}
        last = np.ones(values.size, dtype=bool)
        last[:-1] = (values[1:] != values[:-1]) | (ids[1:] != ids[:-1])
        rank = np.arange(values.size) - offsets[ids]
        p_f = (rank[last] + 1) / sizes[ids[last]]
        return cls(values, ids, sizes, offsets, ids[last], values[last], p_f, arrays)


_SCREEN_MIN_WORK = 2e8
"""n · P above which precision="auto" scans in float32."""

_SCREEN_LCM = 2.0**21
"""Largest lcm(m_i, m_j) for which a float32 statistic snaps to the exact rational h / lcm."""


def _ks_points_screened(data: _Pooled, memory_mb: float, chunk: int) -> np.ndarray:
    """float32 scan + snapping to h / lcm; float64 for the pairs whose lattice is too fine."""
    n = data.sizes.size
    m = np.maximum(data.sizes, 1)
    b_row = max(1, chunk // max(n, 1))
    fine = np.zeros(n, dtype=bool)  # samples in some pair with lcm > _SCREEN_LCM
    for i0 in range(0, n, b_row):  # loop over row blocks
        fine[i0 : i0 + b_row] = (np.lcm.outer(m[i0 : i0 + b_row], m) > _SCREEN_LCM).any(axis=1)
    hard = np.flatnonzero(fine)
    if hard.size > n // 2:
        return _ks_points(data, memory_mb, chunk)
    out = _ks_points(data, memory_mb, chunk, dtype=np.float32).astype(np.float64)
    _round_to_lattice(out, data.sizes, chunk, limit=_SCREEN_LCM)
    if hard.size:
        sub = _Pooled.from_samples([data.arrays[i] for i in hard], on_empty="nan")
        exact = _ks_points(sub, memory_mb, chunk)
        block = np.ix_(hard, hard)
        too_fine = np.lcm.outer(m[hard], m[hard]) > _SCREEN_LCM
        out[block] = np.where(too_fine, exact, out[block])
    return out


_TABLE_ENTRIES_MAX = 4_000_000
"""Entries of one block's e.c.d.f. table at most (32 MB in float64), whatever ``memory_mb``
allows: larger tables make the per-point gathers miss the cache (timings by table size:
docs/algorithms/ks.md)."""


def _ks_points(
    data: _Pooled, memory_mb: float, chunk: int, min_rows: int = 64, dtype=np.float64
) -> np.ndarray:
    n = data.sizes.size
    directed = _directed_maxima(data, (0, n), (0, n), memory_mb, chunk, min_rows, dtype)
    _symmetric_max_inplace(directed, chunk)
    np.fill_diagonal(directed, 0.0)
    return directed


def _directed_maxima(
    data: _Pooled,
    rows: tuple[int, int],
    cols: tuple[int, int],
    memory_mb: float,
    chunk: int,
    min_rows: int = 64,
    dtype=np.float64,
) -> np.ndarray:
    """A_ij = max_{x ∈ U_i} (F_i(x) − F_j(x)) for samples i in [r0, r1), j in [c0, c1).

    Returns (r1 − r0, c1 − c0) ``dtype``; each entry is computed alone (the same bits whatever the
    ranges). Cost (points of rows i) × (c1 − c0) element operations; memory: the result, one
    column block's e.c.d.f. table (≤ ``memory_mb`` / 2 and ≤ 32 MB) and one chunk.
    """
    (r0, r1), (c0, c1) = rows, cols
    directed = np.zeros((r1 - r0, c1 - c0), dtype=dtype)  # A_ij ≥ 0: 0 is the max's identity
    p0, p1 = np.searchsorted(data.p_ids, [r0, r1])
    if p1 == p0 or c1 == c0:
        return directed
    p_ids, p_vals = data.p_ids[p0:p1], data.p_vals[p0:p1]
    # narrow enough that a chunk holds ≥ min_rows points (amortises the per-chunk numpy calls),
    # and the block table fits in half the memory budget
    blocks = _column_blocks(
        data.sizes[c0:c1],
        data.n_distinct,
        table_budget=min(memory_mb * 2**20 / 2 / 8, _TABLE_ENTRIES_MAX),
        max_width=max(1, chunk // min_rows),
    )
    rows_per_chunk = max(1, chunk // max(j1 - j0 for j0, j1 in blocks))
    plan = _segment_plan(p_ids, rows_per_chunk)
    p_f = data.p_f[p0:p1].astype(dtype, copy=False)
    for j0, j1 in blocks:  # loop over column blocks (relative to c0)
        table, grid = _block_table(data, c0 + j0, c0 + j1)
        table = table.astype(dtype, copy=False)  # rounding the exact float64 count / m
        # row of `table` holding each point's F_j: 0 = before the block's first value
        where = np.searchsorted(grid, p_vals, side="right")
        for owners, idx in plan:  # loop over chunks of equal-length (padded) segments
            block = table[where[idx]]  # (segments, length, columns)
            np.subtract(p_f[idx][:, :, None], block, out=block)
            part = block.max(axis=1)
            # a long sample is cut into pieces that land in different chunks: keep the max
            np.maximum(directed[owners - r0, j0:j1], part, out=part)
            directed[owners - r0, j0:j1] = part
    return directed


def _column_blocks(
    sizes: np.ndarray, n_distinct: int, table_budget: float, max_width: int
) -> list[tuple[int, int]]:
    """Consecutive column blocks [j0, j1), each as wide as its e.c.d.f. table allows: a block's
    table has (its distinct values + 1) × width entries, and its distinct values are at most
    both the pooled count ``n_distinct`` and the block's own sample count. Sizing every block by
    the pooled count alone made blocks ~14 columns wide on unrounded prices (distinct values ≈
    all samples) and the scan super-quadratic. Cost O(n · max_width) at most (a vectorised
    search per block)."""
    n = sizes.size
    cum = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    blocks, j0 = [], 0
    while j0 < n:  # loop over blocks
        widths = np.arange(1, min(max_width, n - j0) + 1)
        entries = (np.minimum(n_distinct, cum[j0 + widths] - cum[j0]) + 1) * widths
        fits = int(np.count_nonzero(entries <= table_budget))  # entries grows with the width
        j1 = j0 + max(1, fits)
        blocks.append((j0, j1))
        j0 = j1
    return blocks


def _symmetric_max_inplace(a: np.ndarray, chunk: int) -> None:
    """a ← max(a, aᵀ) in place, by square blocks of about ``chunk`` elements (no n×n copy)."""
    n = a.shape[0]
    b = max(1, int(np.sqrt(chunk)))
    for i0 in range(0, n, b):  # loop over block rows
        i1 = min(n, i0 + b)
        for j0 in range(i0, n, b):  # loop over blocks right of the diagonal
            j1 = min(n, j0 + b)
            m = np.maximum(a[i0:i1, j0:j1], a[j0:j1, i0:i1].T)
            a[i0:i1, j0:j1] = m
            a[j0:j1, i0:i1] = m.T


def _segment_plan(p_ids: np.ndarray, max_rows: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Group the points of each sample into chunks of equal-length segments for a batched max.

    Each sample's run of points is cut into pieces of at most ``max_rows`` points; pieces are
    padded up to a length class (powers of 2^(1/4), so ≤ 19% padding) by repeating their last
    point, which leaves the max unchanged. Returns [(owners (s,), point indices (s, L))] with
    s · L ≤ max(max_rows, L) and distinct owners within a chunk.
    """
    starts = np.flatnonzero(np.r_[True, p_ids[1:] != p_ids[:-1]])
    lengths = np.diff(np.r_[starts, p_ids.size])
    n_full = lengths // max_rows
    # full pieces of max_rows points, then one remainder piece per sample
    full_owner = np.repeat(np.arange(starts.size), n_full)
    full_offset = np.arange(full_owner.size) - np.repeat(np.cumsum(n_full) - n_full, n_full)
    piece_start = np.r_[starts[full_owner] + full_offset * max_rows, starts + n_full * max_rows]
    piece_len = np.r_[np.full(full_owner.size, max_rows), lengths - n_full * max_rows]
    piece_owner = np.r_[full_owner, np.arange(starts.size)]
    keep = piece_len > 0
    piece_start, piece_len, piece_owner = piece_start[keep], piece_len[keep], piece_owner[keep]
    sample_of = p_ids[starts]
    padded = np.minimum(max_rows, np.ceil(2.0 ** (np.ceil(4 * np.log2(piece_len)) / 4)))
    padded = padded.astype(np.int64)
    plan = []
    for length in np.unique(padded):  # loop over length classes (a few dozen at most)
        members = np.flatnonzero(padded == length)
        per_chunk = max(1, max_rows // length)
        steps = np.minimum(np.arange(length)[None, :], piece_len[members, None] - 1)
        idx_all = piece_start[members, None] + steps
        for c0 in range(0, members.size, per_chunk):  # loop over chunks
            sel = slice(c0, c0 + per_chunk)
            plan.append((sample_of[piece_owner[members[sel]]], idx_all[sel]))
    return plan


def _scale_inplace(d: np.ndarray, sizes, chunk: int, col_sizes=None) -> None:
    """d_ij *= sqrt(m_i m_j / (m_i + m_j)) in place, by row blocks; NaN where m_i or m_j is 0.
    ``sizes`` are the rows' sample sizes, ``col_sizes`` the columns' (default: ``sizes``)."""
    m = np.asarray(sizes, dtype=np.float64)
    mc = m if col_sizes is None else np.asarray(col_sizes, dtype=np.float64)
    b_row = max(1, int(chunk) // max(mc.size, 1))
    for i0 in range(0, m.size, b_row):  # loop over row blocks
        i1 = min(m.size, i0 + b_row)
        with np.errstate(invalid="ignore", divide="ignore"):
            scale = np.sqrt(np.multiply.outer(m[i0:i1], mc) / np.add.outer(m[i0:i1], mc))
        scale[m[i0:i1] == 0, :] = np.nan
        scale[:, mc == 0] = np.nan
        d[i0:i1] *= scale


def _round_to_lattice(
    stat: np.ndarray, sizes: np.ndarray, chunk: int, limit: float = 2.0**40, col_sizes=None
) -> None:
    """Replace each D_ij by the float nearest the exact rational h / lcm(m_i, m_j), in place.

    D_ij is an integer multiple of 1 / lcm(m_i, m_j); the float difference k/m − l/n can be one ulp
    off it. scipy's ks_2samp snaps its statistic the same way (h = round(d·lcm), d = h / lcm), so
    this makes the match bit-exact. Skipped where lcm > ``limit`` (default 2⁴⁰: beyond it d·lcm
    would no longer round to h reliably; such float64 pairs are already within a few ulp; the
    float32 screen passes 2²¹). ``sizes`` are the rows' sample sizes, ``col_sizes`` the columns'
    (default: ``sizes``). Works in row blocks of ``chunk`` elements.
    """
    m = np.maximum(sizes, 1)
    mc = m if col_sizes is None else np.maximum(col_sizes, 1)
    if m.size == 0 or mc.size == 0:
        return
    b_row = max(1, chunk // mc.size)
    for i0 in range(0, m.size, b_row):  # loop over row blocks
        i1 = min(m.size, i0 + b_row)
        lcm = np.lcm.outer(m[i0:i1], mc).astype(np.float64)
        ok = lcm <= limit
        snapped = np.round(stat[i0:i1] * lcm) / lcm
        stat[i0:i1] = np.where(ok, snapped, stat[i0:i1])


def _ks_distance_rows(data: _Pooled, i0: int, i1: int, memory_mb: float, chunk: int) -> np.ndarray:
    """Scaled KS distances of samples [i0, i1) against samples [i0, n), (i1 − i0, n − i0) float64.

    Entry (a, b) is dist(i0 + a, i0 + b), the same bits as ``ks_distance_matrix`` with
    precision="float64" (each entry is computed alone, then snapped and scaled alike); NaN for an
    empty sample, 0 on the diagonal. Cost: (points of rows) × (n − i0) + (points of samples ≥ i0)
    × (i1 − i0) element operations, so row blocks over [0, n) cost what the dense matrix does.
    Memory: three (i1 − i0) × (n − i0) float64 arrays at peak, plus the block tables and a chunk.
    """
    n = data.sizes.size
    own = _directed_maxima(data, (i0, i1), (i0, n), memory_mb, chunk)  # A_ij
    other = _directed_maxima(data, (i0, n), (i0, i1), memory_mb, chunk)  # A_ji
    np.maximum(own, other.T, out=own)
    del other
    own[np.arange(i1 - i0), np.arange(i1 - i0)] = 0.0
    _round_to_lattice(own, data.sizes[i0:i1], chunk, col_sizes=data.sizes[i0:])
    _scale_inplace(own, data.sizes[i0:i1], chunk, col_sizes=data.sizes[i0:])
    return own


def _block_table(data: _Pooled, j0: int, j1: int) -> tuple[np.ndarray, np.ndarray]:
    """E.c.d.f.s of samples j0..j1-1 tabulated on their own distinct values.

    Returns (table (G_B + 1, j1 - j0) float64, grid (G_B,)); table[0] = 0 (left of every value),
    table[g + 1, c] = F_{j0 + c}(grid[g]) computed as count / m exactly as scipy does.
    """
    s0, s1 = data.offsets[j0], data.offsets[j1]
    vals = data.values[s0:s1]
    grid = np.unique(vals)
    width = j1 - j0
    flat = (np.searchsorted(grid, vals) + 1) * width + (data.ids[s0:s1] - j0)
    counts = np.bincount(flat, minlength=(grid.size + 1) * width).reshape(grid.size + 1, width)
    np.cumsum(counts, axis=0, out=counts)
    sizes = data.sizes[j0:j1]
    with np.errstate(invalid="ignore", divide="ignore"):
        table = counts / np.where(sizes == 0, 1, sizes)
    return table, grid


def _ks_grid(data: _Pooled, memory_mb: float, chunk: int) -> np.ndarray:
    """Every pair on the pooled grid: loop over grid points with a (rows × n) running max."""
    n = data.sizes.size
    out = np.zeros((n, n))
    if data.values.size == 0:
        return out
    grid_size = int(np.unique(data.values).size) + 1
    if grid_size * n * 8 > memory_mb * 2**20:
        raise MemoryError(
            f"method='grid' needs a {grid_size} × {n} float64 table"
            f" ({grid_size * n * 8 / 2**20:.0f} MiB) > memory_mb={memory_mb}; use method='points'."
        )
    table, _ = _block_table(data, 0, n)  # (G + 1, n), row g = all F at grid point g
    b_row = max(1, chunk // n)
    tmp = np.empty((b_row, n))
    for i0 in range(0, n, b_row):  # loop over row blocks
        i1 = min(n, i0 + b_row)
        acc = out[i0:i1]
        work = tmp[: i1 - i0]
        for g in range(table.shape[0]):  # loop over grid points
            row = table[g]
            np.subtract(row[i0:i1, None], row[None, :], out=work)
            np.abs(work, out=work)
            np.maximum(acc, work, out=acc)
    return out


def _as_sample_list(samples) -> list:
    if isinstance(samples, np.ndarray) and samples.dtype != object:
        if samples.ndim != 2:
            raise ValueError(
                "samples must be a sequence of 1-D arrays (or a 2-D array, one sample per row);"
                f" got an array of shape {samples.shape}."
            )
        return list(samples)
    if isinstance(samples, (str, bytes)) or not isinstance(samples, Sequence | np.ndarray):
        raise TypeError(f"samples must be a sequence of 1-D arrays; got {type(samples).__name__}.")
    return list(samples)


def _as_sample(sample, name: str) -> np.ndarray:
    try:
        a = np.asarray(sample, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be numeric: {exc}") from None
    if a.ndim > 1:
        raise ValueError(f"{name} must be 1-D; got shape {a.shape}.")
    a = a.ravel()
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} has NaN or infinite values.")
    return a


def _check_positive(value, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a positive number; got {value!r}.")
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive number; got {value!r}.")
