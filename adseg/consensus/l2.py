"""Least-squares consensus baselines on the co-association matrix: L2CC and KC.

* :class:`L2CC` (``FUSERS["l2"]``) solves the Frobenius-norm relaxation exactly (seed 003, Eq. 25
  with the squared Frobenius norm; spec rcc.md §2): min ‖M̃ − H D Hᵀ‖_F² over HᵀH = I_K, D ≥ 0
  diagonal, whose minimiser is the K leading eigenpairs of M̃ (eigenvalues clipped at 0); labels
  from H as in spectral clustering. It also starts :class:`adseg.consensus.rcc.RCC`.
* :class:`KC`: the papers' "KC" baseline, k-means on the rows of the co-association matrix; for
  benchmarks only, not registered in ``FUSERS`` (O(n² K) per k-means iteration).

Memory: one dense n×n co-association matrix (n = 10,000 → 0.8 GB in float64), plus the work
copies of their solvers (see each class); above ``max_dense`` items L2CC uses the sparse n × Σk
factor of M̃ instead (O(n m) memory). Derivation: docs/algorithms/rcc.md.
"""

from __future__ import annotations

import numpy as np
from sklearn.cluster import KMeans

from adseg.consensus._base import BaseFuser, check_integer, co_association
from adseg.consensus.reduced import co_association_factor, factor_top_eigenpairs
from adseg.spectral import assign_labels, top_eigenvectors

__all__ = ["KC", "L2CC"]

_ASSIGN_METHODS = ("kmeans", "cluster_qr")


def _check_assign(method: str) -> None:
    if method not in _ASSIGN_METHODS:
        raise ValueError(f"assign_labels must be one of {_ASSIGN_METHODS}; got {method!r}.")


def _seed(rng) -> int:
    """A fresh integer seed from a RandomState (k-means and friends take ints reproducibly)."""
    return int(rng.randint(0, 2**31 - 1))


class L2CC(BaseFuser):
    """Exact L2 consensus clustering: top-K eigenvectors of the co-association matrix.

    Parameters
    ----------
    n_clusters : int, K, the number of consensus clusters (1 ≤ K ≤ n_items).
    normalize : bool, default True. Use the normalised-cut form D^{-1/2} M̃ D^{-1/2} (D = diag of
        the row sums of M̃) instead of M̃ itself; see spec rcc.md §2, and docs/algorithms/rcc.md for
        the evidence (the same form as RCC's ``normalize=True``, so that ``l2`` is its exact
        least-squares counterpart).
    weights : array-like of shape (n_clusterings,) or None. Non-negative per-clustering weights of
        the weighted co-association (None = equal weights).
    assign_labels : {"kmeans", "cluster_qr"}, how rows of H become labels (k-means on the
        row-normalised embedding, seeded; or the deterministic column-pivoted QR rounding).
    n_init : int, k-means restarts when ``assign_labels="kmeans"``.
    max_dense : int ≥ 1 or None, default 2000. Above this many items the eigenpairs come from the
        sparse n × Σk factor Z of M̃ = Z Zᵀ (reduced.factor_top_eigenpairs: the eigenproblem of
        the Σk × Σk Gram matrix), with no n×n array: exact when no label is missing; with
        missing labels a pair's covering weight is approximated by the geometric mean of the
        two items' (reduced.co_association_factor). None: always the dense M̃.
    random_state : int, RandomState or None.

    Attributes
    ----------
    labels_ : (n_items,) int64 consensus labels in 0..K-1.
    embedding_ : (n_items, K) float64, H (orthonormal columns, largest eigenvalue first).
    eigenvalues_ : (K,) float64, diag(D): the K largest eigenvalues of M̃ clipped at 0.
    n_clusters_found_ : int, number of non-empty clusters in ``labels_``.
    sparse_ : bool, whether n > ``max_dense`` made the fit use the sparse factor.

    Cost (n > max_dense): O(n m Σk) for the Gram matrix, O(Σk³) for its eigh, memory
    O(n m + Σk² + n K). Cost (dense): O(n² m̄) to build M̃ plus a partial symmetric eigensolver
    (LAPACK subset for n ≤ 2,000, Lanczos above), O(n² K) per Lanczos sweep. Memory: M̃ (n×n)
    and, for n ≤ 2,000, LAPACK's work copy of it (about 2.0 n×n at the peak for n ≤ 2,000, 1.06
    above); with missing labels co_association briefly holds one more (2.3).
    """

    def __init__(
        self,
        n_clusters: int = 2,
        *,
        normalize: bool = True,
        weights=None,
        assign_labels: str = "kmeans",
        n_init: int = 10,
        max_dense: int | None = 2000,
        random_state=None,
    ):
        self.n_clusters = n_clusters
        self.normalize = normalize
        self.weights = weights
        self.assign_labels = assign_labels
        self.n_init = n_init
        self.max_dense = max_dense
        self.random_state = random_state

    def _fit(self, labels: np.ndarray) -> None:
        _check_assign(self.assign_labels)
        check_integer("n_init", self.n_init)
        if not isinstance(self.normalize, bool | np.bool_):  # RCC's "l1" form: none for L2CC
            raise ValueError(f"normalize must be True or False; got {self.normalize!r}.")
        if self.max_dense is not None:
            check_integer("max_dense", self.max_dense)
        self.sparse_ = self.max_dense is not None and labels.shape[0] > self.max_dense
        if self.sparse_:
            Z = co_association_factor(labels, self.weights)
            vals, H = factor_top_eigenpairs(Z, self.n_clusters, normalize=bool(self.normalize))
        else:
            M = co_association(labels, self.weights, normalize=self.normalize)
            vals, H = top_eigenvectors(M, self.n_clusters)
            del M
        self.embedding_ = H
        self.eigenvalues_ = np.maximum(vals, 0.0)
        self.labels_ = assign_labels(
            H,
            self.n_clusters,
            method=self.assign_labels,
            random_state=_seed(self._rng),
            n_init=self.n_init,
        )
        self.n_clusters_found_ = int(np.unique(self.labels_).size)


class KC(BaseFuser):
    """The "KC" baseline of the consensus literature: k-means on the rows of the co-association
    matrix M̃ (unnormalised, as in the seed papers).

    Parameters
    ----------
    n_clusters : int, K.
    weights : array-like of shape (n_clusterings,) or None, per-clustering weights of M̃.
    n_init : int, k-means restarts (k-means++ seeding).
    random_state : int, RandomState or None.

    Attributes
    ----------
    labels_ : (n_items,) int64.
    n_clusters_found_ : int.

    Cost: O(n² K) per Lloyd iteration (the rows are n-dimensional). Memory: M̃ (n×n) plus
    k-means' working copies (scikit-learn may copy the n×n data once).
    """

    def __init__(self, n_clusters: int = 2, *, weights=None, n_init: int = 10, random_state=None):
        self.n_clusters = n_clusters
        self.weights = weights
        self.n_init = n_init
        self.random_state = random_state

    def _fit(self, labels: np.ndarray) -> None:
        M = co_association(labels, self.weights)
        km = KMeans(n_clusters=self.n_clusters, n_init=self.n_init, random_state=_seed(self._rng))
        self.labels_ = km.fit_predict(M).astype(np.int64)
        self.n_clusters_found_ = int(np.unique(self.labels_).size)
