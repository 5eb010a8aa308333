"""KS blocks: the drawn pairs of a sampled KS view compared block by block, each block a task
that needs only the samples of its two row ranges.

The advertisers are split into P contiguous row ranges of about ``block_values`` / 2 sample
values each; a block is the pairs (i, j), i < j, with i in range a and j in range b (a ≤ b),
compared by ``adseg.landscape.ks_pairs_within`` on the samples of ranges a and b alone. The
kept pairs are those of one call on all samples: the exact screen drops a pair only when its
distance exceeds the limit and settles one only when it is within ``settle_below``, so the
grid the bounds are read on (the block's own samples' quantiles) changes which pairs need a
count, never which pairs are kept, nor the side of any limit ≥ ``settle_below`` they are on
(docs/algorithms/ks.md, "KS blocks").
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np

from adseg.checks import check_integer, index_dtype
from adseg.landscape import ks_pairs_within

log = logging.getLogger("adseg.views")

__all__ = ["compare_in_blocks", "row_ranges"]


def row_ranges(sizes: np.ndarray, block_values: int | None) -> np.ndarray:
    """Starts of the contiguous row ranges, (P + 1,) int64 from 0 to n: about ``block_values``
    / 2 sample values each (a block holds two ranges), at least one row each; one range when
    ``block_values`` is None or all samples fit in it."""
    n = sizes.size
    total = int(sizes.sum())
    if block_values is not None:
        check_integer("block_values", block_values, 2)
    if block_values is None or total <= block_values or n < 2:
        return np.array([0, n], dtype=np.int64)
    p = min(n, math.ceil(2 * total / block_values))
    ends = np.cumsum(sizes)
    inner = np.searchsorted(ends, np.arange(1, p) * (total / p), side="left") + 1
    return np.unique(np.concatenate([[0], np.clip(inner, 1, n - 1), [n]])).astype(np.int64)


def compare_in_blocks(
    samples: Sequence,
    key: np.ndarray,
    max_distance: float,
    settle_below: float | None = None,
    *,
    block_values: int | None = None,
    run_parts=None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``ks_pairs_within`` on the pairs of ``key`` (sorted i · n + j, i < j), block by block.

    samples : n 1-D arrays. Returns (i, j, dist) of the kept pairs sorted by (i, j), as one
    ``ks_pairs_within(samples, key // n, key % n, max_distance, settle_below=...)`` call keeps
    them (a settled pair carries its block's bound: a value ≤ ``settle_below`` either way).
    run_parts : runs the blocks, given [(name, function, arguments)], returning their results
        in order (the execution engine's); None: here, one after the other. One block is
        compared here whatever ``run_parts``.
    Cost: the pair comparisons of one call, plus pooling each block's samples: (P + 1) times
    the samples over the P(P + 1)/2 blocks. Memory: 8 bytes per key, here; a block's task holds
    its two ranges' samples pooled (about 60 bytes a value) and its pairs (16 bytes each).
    """
    n = len(samples)
    sizes = np.fromiter((np.asarray(s).size for s in samples), dtype=np.int64, count=n)
    starts = row_ranges(sizes, block_values)
    if starts.size == 2:
        return ks_pairs_within(samples, key // n, key % n, max_distance, settle_below=settle_below)
    parts, maps = _block_parts(samples, key, n, starts, max_distance, settle_below)
    log.info(
        "KS blocks: %d pairs of %d advertisers in %d blocks of %d row ranges",
        key.size,
        n,
        len(parts),
        starts.size - 1,
    )
    results = [f(*a) for _, f, a in parts] if run_parts is None else run_parts(parts)
    found = [_global(result, where) for result, where in zip(results, maps, strict=True)]
    i = np.concatenate([f[0] for f in found])
    j = np.concatenate([f[1] for f in found])
    dist = np.concatenate([f[2] for f in found])
    order = np.argsort(i * n + j, kind="stable")
    dtype = index_dtype(n)
    return i[order].astype(dtype), j[order].astype(dtype), dist[order]


def _block_parts(samples, key, n, starts, max_distance, settle_below):
    """The blocks' parts (name, ``block_pairs``, arguments) and, for each, (row start of range
    a, rows in a, row start of range b) to map its local indices back. Each range's samples are
    packed once and shared by its blocks' arguments. Memory: 8 bytes per pair (the local int32
    indices) plus the samples once; the keys, sorted by i, are grouped by range a already, so
    only one range's pairs are sorted (by range b) at a time."""
    p = starts.size - 1
    packed = [_packed(samples[starts[a] : starts[a + 1]]) for a in range(p)]
    seg = np.searchsorted(key, starts * n)  # keys of range a: seg[a] to seg[a + 1]
    parts, maps = [], []
    for a in range(p):  # loop over row ranges
        k = key[seg[a] : seg[a + 1]]
        b_of = np.searchsorted(starts, k % n, "right") - 1
        order = np.argsort(b_of, kind="stable")
        ends = np.cumsum(np.bincount(b_of, minlength=p))
        for b in range(a, p):  # loop over the blocks of range a
            mine = k[order[ends[b - 1] if b else 0 : ends[b]]]
            if not mine.size:
                continue
            where = (int(starts[a]), int(starts[a + 1] - starts[a]), int(starts[b]))
            pairs = (_local(mine // n, where), _local(mine % n, where))
            other = packed[b] if b != a else (np.empty(0), np.zeros(1, dtype=np.int64))
            args = (*packed[a], *other, *pairs, max_distance, settle_below)
            parts.append((f"KS block {a},{b}", block_pairs, args))
            maps.append(where)
    return parts, maps


def _local(g: np.ndarray, where) -> np.ndarray:
    """Rows of the view as int32 indices into a block's samples (range a's, then range b's)."""
    start_a, rows_a, start_b = where
    return np.where(g < start_a + rows_a, g - start_a, g - start_b + rows_a).astype(np.int32)


def _packed(samples) -> tuple[np.ndarray, np.ndarray]:
    """A range's samples as one float64 array and (m + 1,) int64 offsets: two arrays to ship,
    not one object per advertiser."""
    offsets = np.zeros(len(samples) + 1, dtype=np.int64)
    np.cumsum([np.asarray(s).size for s in samples], out=offsets[1:])
    values = np.concatenate(samples).astype(np.float64, copy=False) if len(samples) else None
    return (np.empty(0) if values is None else values), offsets


def block_pairs(values_a, offsets_a, values_b, offsets_b, i, j, max_distance, settle_below):
    """One block's kept pairs (an engine task): ``ks_pairs_within`` on the samples of range a
    then range b, each packed as values split at offsets (views, no copy); i, j index them."""
    samples = np.split(values_a, offsets_a[1:-1])
    if offsets_b.size > 1:  # a block across two ranges
        samples += np.split(values_b, offsets_b[1:-1])
    return ks_pairs_within(samples, i, j, max_distance, settle_below=settle_below)


def _global(result, where) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A block's (i, j, dist) with its local indices mapped back to the view's rows."""
    start_a, rows_a, start_b = where
    li, lj, dist = (np.asarray(a) for a in result)
    to_global = [np.where(g < rows_a, g + start_a, g - rows_a + start_b) for g in (li, lj)]
    return to_global[0].astype(np.int64), to_global[1].astype(np.int64), dist
