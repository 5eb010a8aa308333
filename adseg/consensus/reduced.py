"""Reduced forms of the co-association problems of l2 and rcc, for large n: memory O(n·Σk + G²).

* :func:`co_association_factor`: the sparse n × Σk factor Z with Z Zᵀ = M̃ (exact when no label
  is missing; with missing labels the pair's covering weight is replaced by the geometric mean of
  the two items' own, see the function).
* :func:`factor_top_eigenpairs`: l2's top-K eigenpairs of Z Zᵀ (or of its degree normalisation)
  from the Σk × Σk Gram matrix Zᵀ Z, exact, without any n×n array.
* :func:`micro_cell_problem`: rcc's problem on G ≤ ``max_cells`` weighted micro-clusters of the
  g cells: the G×G co-association averaged over member pairs.
Derivation and measurements: docs/algorithms/rcc.md#reduced-problem.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from sklearn.cluster import MiniBatchKMeans

from adseg.consensus._base import MISSING, check_weights, incidence_matrix
from adseg.spectral import fix_signs

__all__ = ["co_association_factor", "factor_top_eigenpairs", "micro_cell_problem"]

_MERGE_DIMS = 64  # dimensions of the micro-clustering's projection (at least; 2K when larger)
_GRAM_MAX = 4000  # Σk up to this: eigh of the dense Σk × Σk Gram matrix (128 MB); above: Lanczos


def co_association_factor(labels: np.ndarray, weights=None) -> sp.csr_matrix:
    """Z (n × Σk sparse, n·m non-zeros at most): Z[i, (v, c)] = √(w_v / c_i) when item i has
    label c in column v, with c_i = Σ_v w_v [i labelled in v] its covering weight.

    Z Zᵀ = Σ_v w_v [i, j together in v] / √(c_i c_j). With no missing label every c_i = Σ_v w_v
    and this is the co-association M̃ exactly; with missing labels M̃ divides by the pair's covering
    weight c_ij = Σ_v w_v [both labelled in v], which is not a product of per-item terms, and Z
    replaces it by √(c_i c_j) ≥ c_ij (equal when i and j are labelled in the same columns; the
    diagonal stays 1). An item labelled in no clustering of positive weight has a zero row.
    Cost O(n m log n) (the relabelling), memory O(n m).
    """
    w = check_weights(weights, labels.shape[1])
    Y = incidence_matrix(labels, np.sqrt(w))
    covered = (labels != MISSING) @ w
    scale = np.zeros_like(covered)
    np.divide(1.0, np.sqrt(covered), out=scale, where=covered > 0)
    return sp.csr_matrix(sp.diags(scale) @ Y)


def _degree_scaled(Z: sp.csr_matrix) -> sp.csr_matrix:
    """D^-½ Z with D = diag(Z Zᵀ 1), the factor of the normalised-cut form D^-½ Z Zᵀ D^-½.
    O(nnz)."""
    degree = Z @ np.asarray(Z.sum(axis=0)).ravel()
    scale = np.zeros_like(degree)
    np.divide(1.0, np.sqrt(degree), out=scale, where=degree > 0)
    return sp.csr_matrix(sp.diags(scale) @ Z)


def factor_top_eigenpairs(
    Z: sp.csr_matrix, k: int, *, normalize: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """The k largest eigenpairs of A = Z Zᵀ (normalize=False) or D^-½ Z Zᵀ D^-½ (True, D the
    row sums of Z Zᵀ), largest first, signs fixed as :func:`adseg.spectral.fix_signs` does:
    (values (k,), vectors (n, k)).

    A = X Xᵀ (X = Z or D^-½ Z) has the eigenpairs (σ², u) of X's singular triplets; with
    Xᵀ X V = V Σ² (a Σk × Σk eigenproblem) the eigenvectors are U = X V Σ⁻¹, exactly
    orthonormal up to round-off. Used when Σk ≤ 4,000 and the k-th value is clear of 0; else
    Lanczos on the operator x ↦ X (Xᵀ x) (same O(n·Σk) memory, deterministic start).
    Cost O(nnz · Σk) for the Gram matrix plus O(Σk³) for its eigh; memory O(nnz + Σk² + n k).
    """
    X = _degree_scaled(Z) if normalize else Z
    n, p = X.shape
    k = min(k, n)
    if p <= _GRAM_MAX and k <= p:
        gram = (X.T @ X).toarray()
        vals, V = sla.eigh(gram, subset_by_index=(p - k, p - 1), driver="evr")
        order = np.argsort(vals)[::-1]
        vals, V = vals[order], V[:, order]
        if vals[-1] > 1e-10 * max(vals[0], 1e-300):  # else: U = X V Σ⁻¹ is ill-defined
            U = (X @ V) / np.sqrt(vals)[None, :]
            return vals, fix_signs(U)
    op = spla.LinearOperator((n, n), matvec=lambda x: X @ (X.T @ x), dtype=np.float64)
    start = np.random.RandomState(0).uniform(-1.0, 1.0, n)
    vals, U = spla.eigsh(op, k=k, which="LA", v0=start, tol=1e-10)
    order = np.argsort(vals)[::-1]
    return vals[order], fix_signs(U[:, order])


def _leading_projection(Z: sp.csr_matrix, d: int) -> np.ndarray:
    """(n, d) Z V_d, the rows of Z in the basis of its d leading right singular vectors (from
    the Σk × Σk Gram matrix, or svds above 4,000 columns). O(nnz d + Σk³)."""
    p = Z.shape[1]
    if d >= p:
        return Z.toarray()
    if p <= _GRAM_MAX:
        _, V = sla.eigh((Z.T @ Z).toarray(), subset_by_index=(p - d, p - 1), driver="evr")
        return np.asarray(Z @ V)
    U, s, _ = spla.svds(Z, k=d, random_state=0)
    return U * s[None, :]


def micro_cell_problem(
    rows: np.ndarray,
    cell: np.ndarray,
    sizes: np.ndarray,
    weights,
    max_cells: int,
    seed: int,
    n_clusters: int = 2,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """rcc's problem on at most ``max_cells`` micro-clusters of the g cells.

    rows (g, m): the distinct label rows; cell (n,): each item's row; sizes (g,): items per row;
    weights: RCC's (None or (m,)); seed: the k-means seed; n_clusters: K (the merge keeps
    max(64, 2K) dimensions).
    Returns (micro (n,) each item's micro-cluster in 0..G−1, counts (G,) items per
    micro-cluster, M̄ (G, G)): M̄_AB = Σ_{i∈A, j∈B} (Z Zᵀ)_ij / (|A| |B|), the co-association
    averaged over the item pairs of the two micro-clusters (with Z of
    :func:`co_association_factor`), so that P M̄ Pᵀ is the least-squares approximation of M̃ by a
    matrix constant on the micro-cluster blocks. Micro-clusters: mini-batch k-means (G centres,
    one start, seeded) weighted by the cells' sizes on the cells' rows of Z projected onto Z's
    d = max(64, 2K) leading right singular vectors (squared distances in Z are
    M̃_ii + M̃_jj − 2 M̃_ij: cells close in co-association are merged; the projection keeps
    their leading part and makes k-means dense and 4× faster, with a lower within-cluster sum
    of squares in Z itself than k-means on the sparse rows, docs/algorithms/rcc.md).
    Cost: O(g d Σk) for the projection, k-means O(b G d) per batch of b cells, then O(G² Σk)
    for M̄; memory the g × Σk sparse Z, the g × d projection, G × Σk dense means and the G×G M̄
    (G = 2,000: 32 MB).
    """
    Z = co_association_factor(rows, weights)
    features = _leading_projection(Z, min(Z.shape[1], max(_MERGE_DIMS, 2 * n_clusters)))
    km = MiniBatchKMeans(
        n_clusters=max_cells,
        n_init=1,
        batch_size=max(4096, 2 * max_cells),
        max_no_improvement=5,
        random_state=seed,
    )
    found = km.fit(features, sample_weight=sizes.astype(np.float64)).labels_
    used, of_cell = np.unique(found, return_inverse=True)  # drop empty centres
    G = used.size
    counts = np.bincount(of_cell, weights=sizes, minlength=G)
    agg = sp.csr_matrix(
        (sizes.astype(np.float64), (of_cell, np.arange(rows.shape[0]))), (G, len(rows))
    )
    means = (agg @ Z).toarray() / counts[:, None]  # (G, Σk) mean row of Z per micro-cluster
    M = means @ means.T
    return of_cell[cell].astype(np.int64), counts.astype(np.int64), M
