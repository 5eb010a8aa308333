"""How SCCBG (:mod:`adseg.consensus.sccbg`) reads c clusters off its graph when the connected
components are not exactly c: merging components, numbering clusters, splitting rows off."""

from __future__ import annotations

import numpy as np


def _merge_components(labels, Y, mult, K, c, m) -> np.ndarray:
    """Greedy merge of K > c components by highest average co-association (M_P·M_Q)/(m|P||Q|)
    until c remain; numbering kept in order of the lowest label. O((K−c) K² + u k)."""
    M = np.zeros((K, Y.shape[1]))
    np.add.at(M, labels, Y * mult[:, None])
    size = np.bincount(labels, weights=mult, minlength=K).astype(np.float64)
    alive = np.ones(K, dtype=bool)
    target = np.arange(K)
    for _ in range(K - c):  # loop over merges
        G = (M @ M.T) / (m * np.outer(size, size))
        G[~alive, :] = -np.inf
        G[:, ~alive] = -np.inf
        np.fill_diagonal(G, -np.inf)
        p, q = np.unravel_index(np.argmax(G), G.shape)
        p, q = min(p, q), max(p, q)
        M[p] += M[q]
        size[p] += size[q]
        alive[q] = False
        target[target == q] = p
    kept = np.nonzero(alive)[0]
    new_id = np.full(K, -1)
    new_id[kept] = np.arange(kept.size)
    return new_id[target[labels]]


def _split_to(labels, Y, mult, first, c, m) -> np.ndarray:
    """Labels of the u distinct rows with exactly c clusters, from fewer: one at a time, the row
    with the lowest average co-association with the rest of its cluster (among clusters of two
    or more rows; ties → lowest row) becomes a cluster of its own. u ≥ c, as the fuser checks
    (n_clusters ≤ distinct label rows), so there is always a row to split off. Numbered in order
    of the lowest original item index. O((c − found) u k)."""
    _, labels = np.unique(labels, return_inverse=True)
    for new in range(labels.max() + 1, c):  # loop over the missing clusters (few)
        sums = np.zeros((new, Y.shape[1]))
        np.add.at(sums, labels, Y * mult[:, None])
        size = np.bincount(labels, weights=mult, minlength=new)
        rows = np.bincount(labels, minlength=new)
        others = sums[labels] - Y * mult[:, None]  # the rest of each row's cluster
        with np.errstate(divide="ignore", invalid="ignore"):
            affinity = np.einsum("ij,ij->i", Y, others) / (m * (size[labels] - mult))
        affinity[rows[labels] < 2] = np.inf
        labels[np.argmin(affinity)] = new
    return _renumber(labels, first, c)


def _renumber(labels, first, c) -> np.ndarray:
    """Number clusters in order of their lowest original item index (deterministic output)."""
    lowest = np.full(c, np.iinfo(np.int64).max)
    np.minimum.at(lowest, labels, first)
    rank = np.empty(c, dtype=np.int64)
    rank[np.argsort(lowest)] = np.arange(c)
    return rank[labels]
