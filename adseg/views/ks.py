"""The KS views: graphs of advertisers whose price samples do not differ significantly.

For each α, S_ij = 1[dist_ij ≤ C_α] of the scaled KS distances (adseg.landscape) is segmented
by normalised cut (adseg.views.ncut), one base clustering per α; advertisers with fewer than
``min_samples`` samples get -1. From ncut.SPARSE_MIN_N advertisers on, the graphs are built
block by block as CSR and cut sparse (no n×n array). Memory and time: see the package docstring.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.utils import check_random_state

from adseg.checks import check_integer, index_dtype
from adseg.landscape import (
    ks_critical_value,
    ks_distance_matrix,
    ks_distance_pairs,
)
from adseg.views import ncut
from adseg.views.base import BaseClusterings, ViewConfig, empty_columns
from adseg.views.ks_blocks import compare_in_blocks, row_ranges
from adseg.views.ncut import NormalizedCutClustering

log = logging.getLogger("adseg.views")  # the job log's name for every view step

REFILL_FACTOR = 10
"""A sampled KS view's rare advertisers (see ``ks_sampled_pairs``) draw this many times the
partners in a second round."""

MIN_DEGREE = 5
"""Links, at the view's smallest critical value, below which an advertiser of a sampled KS
view is refilled (``ks_sampled_pairs``)."""

SAMPLED_MIN_N = ncut.SPARSE_MIN_N
"""Views of fewer advertisers compare every pair whatever ``ks_partners``: below it the exact
graphs are small and the all-pairs kernel is faster than the pair kernel (docs/algorithms/ks.md)."""

__all__ = ["ks_graph", "ks_sampled_pairs", "ks_sparse_graphs", "ks_view"]


def ks_graph(distances: np.ndarray, alpha: float) -> np.ndarray:
    """Adjacency S_ij = 1[dist_ij ≤ C_α] (paper Eq. 42) as an (n, n) float64 0/1 array; NaN
    distances (empty samples) are unlinked, the diagonal is 1 (dist_ii = 0)."""
    d = np.asarray(distances, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        raise ValueError(f"distances must be a square matrix; got shape {d.shape}.")
    with np.errstate(invalid="ignore"):
        s = (d <= ks_critical_value(alpha)).astype(np.float64)
    np.fill_diagonal(s, 1.0)
    return s


def ks_sparse_graphs(
    samples: Sequence,
    alphas: Sequence[float],
    *,
    block_mb: float = 64.0,
    memory_mb: float = 256.0,
    partners: int | None = None,
    random_state=None,
    block_values: int | None = None,
    run_parts=None,
) -> Iterator[sp.csr_matrix]:
    """The KS graphs S_ij = 1[dist_ij ≤ C_α] of every α, as sparse matrices.

    One pass of ``adseg.landscape.ks_distance_pairs`` at the largest C_α (smallest α), done by
    this call, finds every pair any graph links; each α keeps those under its own C_α. Returns an
    iterator of one (n, n) float64 CSR per α, in order, each built when asked for: symmetric, 1
    on the diagonal (every node, as ``ks_graph``) and at each linked pair, no explicit zeros:
    ``ks_graph(ks_distance_matrix(samples), α)`` entry for entry. With ``partners`` (and more
    than ``partners + 1`` samples), only the pairs of ``ks_sampled_pairs`` are compared: each
    graph is then the threshold graph restricted to those pairs, the same on them.
    Cost: that of the dense distance matrix (with ``partners``: about partners / n of it).
    Memory: about 2.2 ``block_mb`` for a row block, 16
    bytes per pair under the largest C_α, held until the last graph is built, and per graph 12
    bytes per nonzero (plus 16 while it is assembled). ``block_values`` and ``run_parts``: how
    the drawn pairs are compared (``ks_sampled_pairs``).
    """
    samples = list(samples)
    limits = [ks_critical_value(a) for a in alphas]
    kw = dict(block_mb=block_mb, memory_mb=memory_mb)
    if partners is None:
        pairs = ks_distance_pairs(samples, max(limits), **kw)
    else:  # all pairs, exactly as above, when n ≤ partners + 1
        pairs = ks_sampled_pairs(
            samples,
            max(limits),
            partners,
            settle_below=min(limits),
            min_degree=MIN_DEGREE,
            degree_limit=min(limits),
            random_state=random_state,
            block_values=block_values,
            run_parts=run_parts,
            **kw,
        )
    return _graphs_from_pairs(pairs, limits, len(samples))


def ks_sampled_pairs(
    samples: Sequence,
    max_distance: float,
    partners: int,
    *,
    settle_below: float | None = None,
    min_degree: int = 0,
    degree_limit: float | None = None,
    refill_factor: int = REFILL_FACTOR,
    random_state=None,
    block_mb: float = 64.0,
    memory_mb: float = 256.0,
    block_values: int | None = None,
    run_parts=None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pairs with scaled KS distance ≤ ``max_distance`` among about ``partners`` random
    partners of each sample: a uniform random comparison design, not all n(n − 1)/2 pairs.

    Each sample draws partners / 2 others uniformly at random (with replacement, itself
    excluded); a pair drawn from either end is compared once, exactly
    (``adseg.landscape.ks_pairs_within``: the dense matrix's bits, after an exact screen).
    Every pair is compared, independently of the prices, with the same probability, about
    partners / (n − 1), so the graph is a uniformly thinned threshold graph: its expectation is
    the threshold graph times that factor, the same block (segment) structure with smaller
    degrees.
    With n ≤ partners + 1 every pair is compared: exactly ``ks_distance_pairs``.

    Refill: a sample linked to fewer than ``min_degree`` of its partners at ``degree_limit``
    (default ``max_distance``) draws ``refill_factor`` × partners / 2 more (all others when
    that is most of them) in a second round. Such a sample has a price distribution few others
    share; with partners / n of its links drawn it would often end isolated, and a normalised
    cut makes each isolated node a cluster of its own: the view over-splits. The refill
    thins those rows less, so the graph is the threshold graph thinned by partners / n, and by
    up to ``refill_factor`` times less on the rows of the rare samples (docs/algorithms/ks.md).

    Returns (i, j, dist) as ``ks_distance_pairs``: i < j, each pair once, sorted by (i, j);
    with ``settle_below``, a pair whose exact upper bound is ≤ it carries that bound instead of
    its distance (``ks_pairs_within``): right for every limit ≥ ``settle_below``.
    Cost: about (n + r · refill_factor) · partners / 2 pair comparisons, r the samples
    refilled: a 64-point screen each, then Σ (|U_i| + |U_j|) binary searches for the pairs it
    cannot rule out. Memory: 8 bytes per drawn pair plus 16 per kept pair.

    Blocks: with ``block_values``, the drawn pairs are compared in KS blocks
    (:func:`compare_in_blocks`), each a part for ``run_parts`` (the execution engine's; None:
    here, in order). The pairs returned are the same.
    """
    samples = list(samples)
    n = len(samples)
    if isinstance(partners, bool) or not isinstance(partners, (int, np.integer)) or partners < 1:
        raise ValueError(f"partners must be a positive integer; got {partners!r}.")
    if n <= partners + 1:
        return ks_distance_pairs(samples, max_distance, block_mb=block_mb, memory_mb=memory_mb)
    check_integer("min_degree", min_degree, low=0)
    check_integer("refill_factor", refill_factor)
    rng = check_random_state(random_state)
    draws = max(1, partners // 2)
    key = _draw_pairs(np.arange(n, dtype=np.int64), draws, n, rng)
    compare = dict(block_values=block_values, run_parts=run_parts)
    i, j, dist = compare_in_blocks(samples, key, max_distance, settle_below, **compare)
    limit = max_distance if degree_limit is None else float(degree_limit)
    linked = dist <= limit
    degree = np.bincount(i[linked], minlength=n) + np.bincount(j[linked], minlength=n)
    rare = np.flatnonzero(degree < min_degree)
    if rare.size:
        more = _draw_pairs(rare, min(draws * refill_factor, n - 1), n, rng)
        more = more[~np.isin(more, key, assume_unique=True)]  # a pair is compared once
        del key
        i2, j2, dist2 = compare_in_blocks(samples, more, max_distance, settle_below, **compare)
        order = np.argsort(np.concatenate([i, i2]) * n + np.concatenate([j, j2]), kind="stable")
        i, j, dist = (np.concatenate(pair)[order] for pair in ((i, i2), (j, j2), (dist, dist2)))
        log.info(
            "KS partners: %d of %d advertisers linked to fewer than %d drew %d more partners",
            rare.size,
            n,
            min_degree,
            min(draws * refill_factor, n - 1),
        )
    return i.astype(index_dtype(n)), j.astype(index_dtype(n)), dist


def _draw_pairs(rows: np.ndarray, draws: int, n: int, rng) -> np.ndarray:
    """Sorted unique pair keys i · n + j (i < j) of ``draws`` uniform partners of each of
    ``rows`` among the n samples (with replacement, never itself); all pairs of ``rows`` with
    every other sample when ``draws`` ≥ n − 1. Memory: 16 bytes per draw while drawing."""
    if draws >= n - 1:
        a = np.repeat(rows, n - 1)
        b = np.tile(np.arange(n - 1, dtype=np.int64), rows.size)
    else:
        a = np.repeat(rows, draws)
        b = rng.randint(0, n - 1, size=a.size).astype(np.int64)
    b += b >= a  # uniform over the others
    key = np.minimum(a, b) * n + np.maximum(a, b)
    del a, b
    key.sort()  # each pair once, (i, j) order; np.unique's hash path is ~40× slower here
    keep = np.empty(key.size, dtype=bool)
    keep[:1] = True
    np.not_equal(key[1:], key[:-1], out=keep[1:])
    return key[keep]


def _graphs_from_pairs(pairs, limits: list[float], n: int) -> Iterator[sp.csr_matrix]:
    """For each limit, the (n, n) CSR graph of the pairs (i, j, dist) with dist ≤ limit,
    symmetrised, with a unit diagonal."""
    i, j, dist = pairs
    diagonal = np.arange(n, dtype=i.dtype)
    for limit in limits:  # loop over significance levels
        kept = dist <= limit
        rows = np.concatenate([i[kept], j[kept], diagonal])
        cols = np.concatenate([j[kept], i[kept], diagonal])
        del kept
        yield sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n))


def ks_view(
    samples: Sequence,
    view: str,
    config: ViewConfig | None = None,
    random_state=None,
    run_parts=None,
) -> BaseClusterings:
    """One KS view: distances once, then a normalised-cut clustering per α in config.alphas.

    samples : n 1-D arrays (eCPM prices; any length, empty allowed). Advertisers with fewer than
        ``config.min_samples`` samples get -1 in every column of this view.
    run_parts : on the sampled path, runs the view's KS blocks (``config.ks_block_values``)
        and then, when there is more than one block, its cuts, one per α: given [(name,
        function, arguments)], returns their results in order (the execution engine's); None:
        here, one after the other (each graph built only when its cut starts). The labels are
        the same either way.
    Returns BaseClusterings with labels (n, len(alphas)). If fewer than 2 advertisers qualify the
    view has no columns (a warning says so). Cost: see the module docstring.
    """
    config = config or ViewConfig()
    rng = check_random_state(random_state)
    seeds = rng.randint(0, 2**31 - 1, size=len(config.alphas))
    sizes = np.array([np.asarray(s).size for s in samples], dtype=np.int64)
    n = sizes.size
    keep = np.flatnonzero(sizes >= config.min_samples)
    if keep.size < 2:
        warnings.warn(
            f"KS view {view!r}: only {keep.size} of {n} advertisers have ≥ {config.min_samples}"
            " samples; the view is skipped.",
            RuntimeWarning,
            stacklevel=2,
        )
        return BaseClusterings(np.empty((n, 0), dtype=np.int64), empty_columns())
    t0 = time.perf_counter()
    design_seed = int(rng.randint(0, 2**31 - 1))  # drawn after the columns' seeds: those stay
    kept = [samples[i] for i in keep]
    dist, graphs, kind = _distances_or_graphs(kept, config, design_seed, run_parts)
    ks_seconds = time.perf_counter() - t0
    # the KS matrix takes minutes at 10,000 advertisers: a job log hears of it
    log.info("view %s: KS distances of %d advertisers: %.1f s", view, keep.size, ks_seconds)
    if graphs is None:
        graphs = (ks_graph(dist, alpha) for alpha in config.alphas)
    cut = _cut_params(config, keep.size)
    if not _in_blocks(sizes[keep], config, kind) or run_parts is None:
        cuts = _cuts_here(graphs, cut, seeds)
    else:  # a view large enough for KS blocks: its cuts are parts too
        names = [f"{view} alpha={a:g}" for a in config.alphas]
        args = [(g, cut, int(seed)) for g, seed in zip(graphs, seeds, strict=True)]
        cuts = iter(run_parts([(m, _cut, a) for m, a in zip(names, args, strict=True)]))
        del args
    labels = np.full((n, len(config.alphas)), -1, dtype=np.int64)
    rows = []
    for c, alpha in enumerate(config.alphas):  # loop over significance levels
        result = next(cuts)
        labels[keep, c] = result.labels
        log.info(
            "view %s alpha=%g: %d clusters, %.1f s", view, alpha, result.n_clusters, result.seconds
        )
        rows.append(_column_row(view, alpha, result, n - keep.size, ks_seconds, config, kind))
    distances = {view: (dist, keep)} if config.keep_distances and dist is not None else {}
    return BaseClusterings(labels, pd.DataFrame(rows), distances)


def _in_blocks(sizes: np.ndarray, config: ViewConfig, kind: str) -> bool:
    """Whether a view's pairs are compared in more than one KS block (``ks_blocks``)."""
    return kind == "sampled" and row_ranges(sizes, config.ks_block_values).size > 2


def _cuts_here(graphs: Iterator, params: dict, seeds) -> Iterator[_Cut]:
    """Each graph's cut, in this process, each graph dropped before the next is built."""
    for seed in seeds:  # loop over significance levels
        graph = next(graphs)
        yield _cut(graph, params, int(seed))
        del graph


class _Cut(NamedTuple):
    """One α's normalised cut of a KS graph, as its task returns it."""

    labels: np.ndarray
    n_clusters: int
    n_components: int
    n_isolated: int
    n_edges: int
    seconds: float


def _cut_params(config: ViewConfig, n: int) -> dict:
    """NormalizedCutClustering's parameters of a view of n advertisers (but its seed)."""
    return dict(
        n_clusters=None if config.n_clusters is None else min(config.n_clusters, n),
        k_range=config.k_range,
        k_selection=config.k_selection,
        assign_method=config.assign_method,
        n_init=config.n_init,
    )


def _cut(graph, params: dict, seed: int) -> _Cut:
    """The normalised cut of one KS graph (dense 0/1 array or CSR, unit diagonal): an engine
    task of :func:`ks_view`. Cost: NormalizedCutClustering's."""
    t0 = time.perf_counter()
    n = graph.shape[0]
    n_edges = int(((graph.nnz if sp.issparse(graph) else graph.sum()) - n) // 2)
    model = NormalizedCutClustering(**params, random_state=seed).fit(graph)
    seconds = time.perf_counter() - t0
    return _Cut(
        model.labels_, model.n_clusters_, model.n_components_, model.n_isolated_, n_edges, seconds
    )


def _column_row(view, alpha, result: _Cut, n_excluded, ks_seconds, config, kind) -> dict:
    """The columns-frame row of one α of a KS view."""
    return {
        "view": view,
        "parameter": f"alpha={alpha:g}",
        "n_clusters": result.n_clusters,
        "n_excluded": int(n_excluded),
        "seconds": result.seconds + ks_seconds / len(config.alphas),
        "alpha": alpha,
        "k": np.nan,
        "critical_value": ks_critical_value(alpha),
        "n_edges": result.n_edges,
        "n_components": result.n_components,
        "n_isolated": result.n_isolated,
        "ks_seconds": ks_seconds,
        "graph": kind,
    }


def _distances_or_graphs(
    samples: list, config: ViewConfig, design_seed: int, run_parts=None
) -> tuple[np.ndarray | None, Iterator[sp.csr_matrix] | None, str]:
    """(distances, None, "dense") below ncut.SPARSE_MIN_N advertisers when every pair is
    compared: the dense (n, n) matrix, as ever; else (None, graphs, kind): the CSR graph of each
    α, one at a time, no n×n array — kind "sampled" on ``config.ks_partners`` random partners
    (from SAMPLED_MIN_N advertisers and more than ks_partners + 1; its pairs compared in KS
    blocks, run by ``run_parts``), else "sparse" (every pair).
    On the sparse paths ``keep_distances`` keeps nothing (a warning says so)."""
    n, partners = len(samples), config.ks_partners
    sampled = partners is not None and n >= SAMPLED_MIN_N and n > partners + 1
    if n < ncut.SPARSE_MIN_N and not sampled:
        return ks_distance_matrix(samples, memory_mb=config.ks_memory_mb), None, "dense"
    if config.keep_distances:
        warnings.warn(
            f"keep_distances: the KS graphs of {n} advertisers are built sparse; no distance"
            " matrix is kept.",
            RuntimeWarning,
            stacklevel=3,
        )
    graphs = ks_sparse_graphs(
        samples,
        config.alphas,
        memory_mb=config.ks_memory_mb,
        partners=partners if sampled else None,
        random_state=design_seed,
        block_values=config.ks_block_values,
        run_parts=run_parts,
    )
    return None, graphs, "sampled" if sampled else "sparse"
