"""Base-clustering ensembles from features (k-means pools), for benchmarks and tests."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.cluster import KMeans
from sklearn.utils import check_random_state

from adseg.checks import check_integer, check_k_range

KMEANS_INITS = ("k-means++", "random")


def kmeans_ensemble(
    X, n_clusterings: int, n_clusters: int, random_state=None, *, init: str = "k-means++"
) -> np.ndarray:
    """n_clusterings k-means runs (one start each, each with its own seed drawn from
    random_state) → labels of shape (n_items, n_clusterings). X may be dense or scipy-sparse.

    init: "k-means++" (default) or "random" (Forgy: k distinct items as the initial centres, the
    older default of most k-means codes; its runs stop in more, and worse, local optima, so the
    ensemble is more diverse). Cost: n_clusterings × O(n d k iters).

    Raises TypeError / ValueError naming ``X``, ``n_clusterings`` or ``n_clusters`` (integers
    ≥ 1; a float such as 2.7 was truncated to 2, 0 clusterings returned an empty pool)."""
    n_clusterings = check_integer("n_clusterings", n_clusterings)
    n_clusters = check_integer("n_clusters", n_clusters)
    return _ensemble(X, np.full(n_clusterings, n_clusters), random_state, init)


def kmeans_ensemble_random_k(
    X, n_clusterings: int, k_range: tuple[int, int], random_state=None
) -> np.ndarray:
    """As kmeans_ensemble, with each run's k drawn uniformly from [k_min, k_max] (inclusive), the
    way the literature's pools are built (e.g. k in [c, min(√n, 50)])."""
    n_clusterings = check_integer("n_clusterings", n_clusterings)
    rng = check_random_state(random_state)
    k_min, k_max = check_k_range(k_range)
    ks = rng.randint(k_min, k_max + 1, size=n_clusterings)
    return _ensemble(X, ks, rng)


def _ensemble(X, ks: np.ndarray, random_state, init: str = "k-means++") -> np.ndarray:
    if init not in KMEANS_INITS:
        raise ValueError(f"init must be one of {KMEANS_INITS}; got {init!r}.")
    rng = check_random_state(random_state)
    X = X if sp.issparse(X) else np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n_items, n_features); got shape {X.shape}.")
    n = X.shape[0]
    if n == 0:
        raise ValueError("X has no items (0 rows).")
    if n_bad := int((ks > n).sum()):
        raise ValueError(
            f"{n_bad} clustering(s) ask for more clusters (up to {int(ks.max())}) than the {n} "
            "items of X."
        )
    seeds = rng.randint(0, 2**31 - 1, size=len(ks))
    out = np.empty((n, len(ks)), dtype=np.int64)
    for j, (k, seed) in enumerate(zip(ks, seeds, strict=True)):
        km = KMeans(n_clusters=int(k), n_init=1, init=init, random_state=int(seed))
        out[:, j] = km.fit_predict(X)
    return out
