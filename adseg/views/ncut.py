"""Spectral normalised cut of a graph, with its rules for the number of clusters.

NormalizedCutClustering segments a symmetric non-negative affinity matrix (a KS graph, in the
views) by the top eigenvectors of N = D^-1/2 A D^-1/2 and k-means (or cluster_qr). The number
of clusters is given or chosen: the Bethe Hessian's negative eigenvalues (default, counted by an
LDLᵀ factorisation; by Lanczos on a sparse graph of ≥ SPARSE_MIN_N nodes, which is never
densified), the eigengap of N, or the best Newman modularity over a range. Cost and memory: see
the class; measurements: docs/algorithms/ks.md.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components
from scipy.sparse.linalg import LinearOperator
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils import check_random_state

from adseg.checks import check_integer, check_k_range
from adseg.spectral import assign_labels, lanczos_solves, top_eigenvectors
from adseg.views.base import K_SELECTIONS, compact_labels

__all__ = ["SPARSE_MAX_DENSITY", "SPARSE_MIN_N", "NormalizedCutClustering"]

SPARSE_MAX_DENSITY = 0.3
"""Lanczos works on a sparse N up to this fraction of nonzeros (crossover ≈ 0.4, see
_normalized_affinity)."""

SPARSE_MIN_N = 5000
"""A scipy-sparse affinity of at least this many nodes is cut without any n×n array (the sparse
path: Lanczos Bethe-Hessian count, CSR N); smaller ones are densified, as they always were, so
their results stay the same bit for bit. ks_view builds its graphs sparse from this size on."""


class NormalizedCutClustering(ClusterMixin, BaseEstimator):
    """Spectral normalised cut of a graph given by a symmetric non-negative affinity matrix.

    Parameters
    ----------
    n_clusters : int or None: clusters of the nodes that have an edge (isolated nodes are
        singletons on top). None = chosen within ``k_range`` by ``k_selection``.
    k_range : (k_min, k_max) searched; capped at n - 1. When n_clusters is None and the nodes
        that have an edge are all linked to each other (a clique: no pair differs), they are one
        cluster whatever k_min is.
    k_selection : "bethe_hessian" (default: the number of negative eigenvalues of the graph's
        Bethe Hessian, clipped to k_range; Saade, Krzakala & Zdeborová 2014), "eigengap" (argmax
        λ_k − λ_{k+1} of N = D^-1/2 A D^-1/2) or "modularity"
        (cluster for 16 geometrically spaced k in k_range, keep the partition of highest Newman
        modularity on the graph; 16 discretisations instead of one).
    assign_method : "kmeans" | "cluster_qr" (adseg.spectral.assign_labels).
    n_init : k-means restarts.
    random_state : seed of the k-means discretisation.

    Attributes
    ----------
    labels_ : (n,) int64 in 0..n_clusters_-1.
    n_clusters_ : clusters found (distinct labels; may be below the k used if k-means empties one).
    eigenvalues_ : the top eigenvalues of N computed (largest first), (min(k + 1, n),) with k the
        largest cluster count considered.
    bethe_hessian_count_ : the Bethe-Hessian estimate before clipping (None for other rules);
        on the sparse path, counted only up to k_max (a larger count reads k_max).
    sparse_path_ : whether the graph was cut sparse (scipy-sparse input of ≥ SPARSE_MIN_N nodes).
    n_components_ : connected components of the graph. n_isolated_ : nodes linked to nobody
        (each is a singleton cluster; the cut, and n_clusters, apply to the other nodes).
    modularity_ : Newman's modularity of labels_ on the graph.

    Cost: a partial eigendecomposition (k_max + 1 pairs), O(n² k_max) time for n ≤ 2,000,
    Lanczos above (on a sparse N when at most SPARSE_MAX_DENSITY of the pairs are linked), plus
    the Bethe Hessian's O(n³/3) LDLᵀ. Memory besides the caller's affinity (read, not copied):
    about 3 n×n float64 arrays at peak up to n = 2,000 — the normalised copy, the Bethe Hessian
    factorised in place, the eigensolver's work copy; above, with a sparse N, one n×n (the Bethe
    Hessian) and two CSR copies of the graph (12 bytes per link each; about 1.14 n×n in all at
    8 % of pairs linked) — and one
    n×n more, the linked nodes' subgraph, when some nodes are isolated. Sparse path: no n×n
    array; the graph's CSR copies (12 bytes per link each: the checked input, the linked nodes'
    subgraph, N, the Bethe Hessian), n × (k_max + 1) eigenvectors, and the Bethe Hessian count by
    Lanczos (k_max smallest eigenpairs at most) instead of the LDLᵀ.
    """

    def __init__(
        self,
        n_clusters: int | None = None,
        k_range: tuple[int, int] = (1, 80),
        k_selection: str = "bethe_hessian",
        assign_method: str = "kmeans",
        n_init: int = 10,
        random_state=None,
    ):
        self.n_clusters = n_clusters
        self.k_range = k_range
        self.k_selection = k_selection
        self.assign_method = assign_method
        self.n_init = n_init
        self.random_state = random_state

    def fit(self, affinity, y=None):
        """Segment the graph ``affinity`` (n, n), dense or scipy-sparse; returns self. A sparse
        one of n ≥ SPARSE_MIN_N nodes is never densified (``sparse_path_`` is then True)."""
        self.sparse_path_ = bool(sp.issparse(affinity) and affinity.shape[0] >= SPARSE_MIN_N)
        a = _check_sparse_affinity(affinity) if self.sparse_path_ else _check_affinity(affinity)
        n = a.shape[0]
        k_min, k_max = check_k_range(self.k_range, "k_range")
        if self.k_selection not in K_SELECTIONS:
            raise ValueError(
                f"k_selection must be one of {K_SELECTIONS}; got {self.k_selection!r}."
            )
        if self.n_clusters is not None:
            check_integer("n_clusters", self.n_clusters, 1)
            if self.n_clusters > n:
                raise ValueError(f"n_clusters={self.n_clusters} exceeds the {n} nodes.")
        isolated = _row_sums(a) - a.diagonal() == 0
        self.n_isolated_ = int(isolated.sum())
        self.n_components_ = int(connected_components(sp.csr_matrix(a), directed=False)[0])
        self.bethe_hessian_count_ = None
        self.eigenvalues_ = np.empty(0)
        labels = np.arange(n, dtype=np.int64)  # every node alone unless there is a graph to cut
        core = np.flatnonzero(~isolated)
        if core.size >= 2 and self.n_clusters is None and _is_complete(a, core):
            # every pair linked (no pair differs significantly): any split would be arbitrary
            labels[core] = 0
            labels[isolated] = 1 + np.arange(self.n_isolated_)
        elif core.size >= 2:
            if core.size == n:
                sub = a
            else:  # a copy only when needed
                sub = a[core][:, core] if self.sparse_path_ else a[np.ix_(core, core)]
            core_labels = self._cut(sub, k_min, k_max)
            labels[core] = core_labels
            # nodes linked to nobody are significantly different from every other: singletons
            labels[isolated] = core_labels.max() + 1 + np.arange(self.n_isolated_)
        self.labels_ = compact_labels(labels)
        self.n_clusters_ = int(self.labels_.max()) + 1
        self.modularity_ = _modularity(a, self.labels_)
        return self

    def _cut(self, a: np.ndarray | sp.csr_matrix, k_min: int, k_max: int) -> np.ndarray:
        """Normalised cut of a graph in which every node has an edge (self-loops allowed); ``a``
        dense, or CSR on the sparse path."""
        n = a.shape[0]
        k_hi = min(k_max, n - 1)
        k_lo = min(k_min, k_hi)
        if self.n_clusters is not None:
            candidates = [min(int(self.n_clusters), n)]
        elif self.k_selection == "bethe_hessian" and sp.issparse(a):
            self.bethe_hessian_count_ = _bethe_hessian_count_sparse(a, cap=k_hi)
            candidates = [int(np.clip(self.bethe_hessian_count_, k_lo, k_hi))]
        elif self.k_selection == "bethe_hessian":
            self.bethe_hessian_count_ = _bethe_hessian_count(a)
            candidates = [int(np.clip(self.bethe_hessian_count_, k_lo, k_hi))]
        elif self.k_selection == "modularity":
            candidates = np.unique(np.round(np.geomspace(k_lo, k_hi, 16)).astype(int)).tolist()
        else:
            candidates = None  # eigengap: needs the spectrum first
        # after the Bethe Hessian (its n×n array and this CSR copy are not held together)
        links = sp.csr_matrix(a, copy=True) if sp.issparse(a) else sp.csr_matrix(a)
        n_parts, parts = connected_components(links, directed=False)
        if candidates is not None and self.n_clusters is None:
            # separate components are separate clusters whenever the range allows it
            candidates = sorted({max(k, min(n_parts, k_hi)) for k in candidates})
        k_top = k_hi if candidates is None else max(candidates)
        # with more components than clusters, eigenvalue 1 is degenerate: embed in all of its
        # eigenspace so that k-means keeps each component whole
        n_vectors = min(n, max(k_top, n_parts) + 1)
        degree = _row_sums(a)
        lanczos = lanczos_solves(n, n_vectors)
        normalized = _normalized_affinity(a, links, degree, sparse=lanczos)
        del links
        if lanczos and n_parts > 1:
            values, vectors = _top_eigenvectors_by_component(normalized, parts, degree, n_vectors)
        else:
            values, vectors = top_eigenvectors(normalized, n_vectors)
        del normalized
        self.eigenvalues_ = values
        if candidates is None:
            candidates = [max(_eigengap(values, k_lo, k_hi), min(n_parts, k_hi))]
        seed = check_random_state(self.random_state).randint(2**31 - 1)
        best, best_labels = -np.inf, None
        for k in candidates:  # loop over candidate cluster counts
            dims = min(vectors.shape[1], max(k, n_parts))
            labels = assign_labels(
                vectors[:, :dims], k, method=self.assign_method, random_state=seed,
                n_init=self.n_init,
            )  # fmt: skip
            quality = _modularity(a, labels) if len(candidates) > 1 else 0.0
            if quality > best:
                best, best_labels = quality, labels
        return compact_labels(best_labels)


def _normalized_affinity(
    adjacency: np.ndarray, links: sp.csr_matrix, degree: np.ndarray, sparse: bool
) -> np.ndarray | sp.csr_matrix:
    """N = D^-1/2 A D^-1/2 (D = diag(degree), A's row sums, all > 0), (n, n): sparse CSR when
    ``sparse`` (Lanczos will solve it) and at most SPARSE_MAX_DENSITY of the entries are
    nonzero, or always when A itself is sparse — ``links`` (A's CSR copy) scaled in place and
    returned — else dense. Lanczos
    multiplies by one vector per step, which streams a dense N whole; CSR streams 12 bytes per
    nonzero instead of 8 per entry: 3.4× faster products at 10 % density, 1.7× at 25 %, even at
    40 % (n = 6,000, one core). The KS graphs link 2–12 % of pairs. Both forms compute
    (a_ij · s_i) · s_j, so they hold the same numbers. Memory: one nnz-long index array besides
    ``links`` when sparse, one n×n array when dense."""
    n = adjacency.shape[0]
    scale = 1.0 / np.sqrt(degree)
    if sp.issparse(adjacency) or (sparse and links.nnz <= SPARSE_MAX_DENSITY * n * n):
        links.data *= np.repeat(scale, np.diff(links.indptr))
        links.data *= scale[links.indices]
        return links
    normalized = adjacency * scale[:, None]
    normalized *= scale[None, :]
    return normalized


def _top_eigenvectors_by_component(
    normalized, parts: np.ndarray, degree: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The k top eigenpairs of N = D^-1/2 A D^-1/2 for a graph of several components (labels
    ``parts``, (n,)), k > their number c. Eigenvalue 1 has one eigenvector per component,
    sqrt(degree) on it and 0 elsewhere; Lanczos finds only some copies of a repeated eigenvalue
    (7 of 10 measured at n = 2,200), so the embedding, and the clusters, depended on rounding.
    Those c vectors are written down exactly; Lanczos finds the other k − c on N − 3 U Uᵀ, whose
    eigenvalue-1 directions move to −2, below N's spectrum [−1, 1]. Cost: Lanczos on k − c pairs,
    plus an n × c array U."""
    n = degree.size
    n_parts = int(parts.max()) + 1
    basis = np.zeros((n, n_parts))
    basis[np.arange(n), parts] = np.sqrt(degree)
    basis /= np.linalg.norm(basis, axis=0)

    def product(x):
        return normalized @ x - 3.0 * (basis @ (basis.T @ x))

    deflated = LinearOperator((n, n), matvec=product, matmat=product, dtype=np.float64)
    values, vectors = top_eigenvectors(deflated, k - n_parts)
    return np.concatenate([np.ones(n_parts), values]), np.hstack([basis, vectors])


def _is_complete(adjacency, nodes: np.ndarray) -> bool:
    """Whether every pair of ``nodes`` is linked, for ``nodes`` = those with an edge (their edges
    all stay among them): each links the other n_nodes − 1. Counts nonzeros per row (an (n, n)
    boolean temporary when dense, not a float64 copy of the subgraph; O(n) on a CSR graph
    without explicit zeros)."""
    if sp.issparse(adjacency):
        per_row = np.diff(adjacency.indptr)
    else:
        per_row = np.count_nonzero(adjacency, axis=1)
    links = per_row - (adjacency.diagonal() != 0)
    return bool((links[nodes] == nodes.size - 1).all())


def _bethe_hessian_count(adjacency: np.ndarray) -> int:
    """Number of negative eigenvalues of the Bethe Hessian H(r) = (r² − 1) I − r A + D of a graph
    (self-loops of A ignored), r = sqrt(<d²>/<d> − 1): the estimate of the number of communities of
    Saade, Krzakala & Zdeborová (NeurIPS 2014), degree-corrected choice of r. Counted by Sylvester
    inertia of an LDLᵀ factorisation (O(n³/3), LAPACK's blocked code: about 5 s at n = 8,000
    on one core, docs/algorithms/ks.md), not by an eigendecomposition.
    Memory: one n×n array (H, factorised in place by LAPACK's dsytrf; scipy.linalg.ldl would add
    a dense n×n D and copies: 4 n×n arrays measured) plus dsytrf's workspace of 64 n floats. A
    graph without edges has n communities."""
    n = adjacency.shape[0]
    h = _bethe_hessian(adjacency)
    if h is None:
        return n
    return _negative_inertia(h)


def _negative_inertia(h: np.ndarray) -> int:
    """Negative eigenvalues of a dense symmetric (n, n) float64 array by LDLᵀ (dsytrf), which
    overwrites ``h``. O(n³/3) time, dsytrf's workspace of 64 n floats besides ``h``."""
    n = h.shape[0]
    # h is symmetric, so its transpose view is the Fortran-ordered matrix LAPACK factorises in
    # place (no copy); D of H = L D Lᵀ sits on the diagonal and, for 2×2 blocks, the subdiagonal.
    # The wrapper's default workspace (n) makes dsytrf fall back to its unblocked, matrix-vector
    # code: the queried size (block size × n) runs it on matrix products, 10× faster at n = 4,000
    # (docs/algorithms/ks.md)
    lwork, info = scipy.linalg.lapack.dsytrf_lwork(n, lower=1)
    if info != 0:  # pragma: no cover - an argument error, not a property of the graph
        raise RuntimeError(f"LAPACK dsytrf workspace query: info = {info}")
    ldu, ipiv, info = scipy.linalg.lapack.dsytrf(
        h.T, lower=1, lwork=max(int(lwork), n), overwrite_a=1
    )
    if info < 0:  # pragma: no cover - an argument error, not a property of the graph
        raise RuntimeError(f"LAPACK dsytrf: argument {-info} is invalid")
    return _negative_pivots(ldu, ipiv)


DENSE_COMPONENT_MAX = 2000
"""Components of a sparse graph up to this size get their Bethe-Hessian count by a dense LDLᵀ
(32 MB at most); larger ones by Lanczos."""


def _bethe_hessian_count_sparse(adjacency: sp.csr_matrix, cap: int) -> int:
    """The Bethe-Hessian count of ``_bethe_hessian_count`` for a sparse (n, n) graph, without a
    dense n×n array, and at most ``cap`` (the count is clipped to k_max afterwards anyway).

    H is block-diagonal over the connected components (r is the whole graph's), so the count is
    the sum of theirs: a dense LDLᵀ for components of ≤ DENSE_COMPONENT_MAX nodes, else the
    Lanczos count of ``_negative_count_lanczos`` (each component apart, so that the repeated
    eigenvalues of identical components, which Lanczos can miss, never meet). Stops once
    ``cap`` is reached. Memory: H in CSR (12 bytes per link), one component's copy, and a dense
    DENSE_COMPONENT_MAX² array at most. A graph without edges has n communities (capped)."""
    n = adjacency.shape[0]
    off = sp.csr_matrix(adjacency, copy=True)
    off.setdiag(0.0)
    off.eliminate_zeros()
    degree = np.asarray(off.sum(axis=1)).ravel()
    if degree.sum() == 0:
        return min(n, cap)
    zeta = (degree**2).mean() / degree.mean() - 1.0
    r = np.sqrt(max(zeta, 1.0 + 1e-6))  # as _bethe_hessian
    off.data *= -r
    h = (off + sp.diags(r * r - 1.0 + degree, format="csr")).tocsr()
    del off
    _, parts = connected_components(h, directed=False)
    order = np.argsort(parts, kind="stable")
    bounds = np.flatnonzero(np.r_[True, np.diff(parts[order]) != 0, True])
    count = 0
    for s0, s1 in zip(bounds[:-1], bounds[1:], strict=True):  # loop over components
        if s1 - s0 == 1:
            continue  # a lone node: H = r² − 1 + 0 > 0
        nodes = order[s0:s1]
        block = h if nodes.size == n else h[nodes][:, nodes]  # no copy for one component
        if nodes.size <= DENSE_COMPONENT_MAX:
            count += _negative_inertia(block.toarray())
        else:
            count += _negative_count_lanczos(block, cap - count)
        if count >= cap:
            return cap
    return count


def _negative_count_lanczos(h: sp.csr_matrix, cap: int, k_start: int = 16) -> int:
    """min(cap, number of negative eigenvalues) of a sparse symmetric (s, s) matrix, s > cap + 1:
    the k smallest eigenvalues by Lanczos (ARPACK ``eigsh``, which="SA", fixed start vector),
    k doubling from ``k_start`` until one of them is ≥ 0 or k reaches ``cap``. Cost: a few
    hundred sparse products per try (nnz each) and O(s k) vectors."""
    from scipy.sparse.linalg import eigsh

    s = h.shape[0]
    start = np.random.RandomState(0).uniform(-1.0, 1.0, s)
    k = max(1, min(k_start, cap, s - 2))
    while True:  # loop over tries, k doubling: log2(cap / k_start) of them at most
        values = eigsh(h, k=k, which="SA", v0=start, tol=1e-10, return_eigenvectors=False)
        negative = int((values < 0).sum())
        if negative < k or k >= min(cap, s - 2):
            return min(negative, cap)
        k = min(2 * k, cap, s - 2)


def _bethe_hessian(adjacency: np.ndarray) -> np.ndarray | None:
    """H(r) = (r² − 1) I − r A + D, r = sqrt(<d²>/<d> − 1) (self-loops of A ignored), as a new
    (n, n) float64 array; None for a graph without edges."""
    n = adjacency.shape[0]
    degree = adjacency.sum(axis=1) - np.diag(adjacency)  # self-loops are not edges here
    if degree.sum() == 0:
        return None
    zeta = (degree**2).mean() / degree.mean() - 1.0
    r = np.sqrt(max(zeta, 1.0 + 1e-6))  # r > 1 keeps (r² − 1) I positive off the communities
    h = adjacency * (-r)
    h[np.diag_indices(n)] = r * r - 1.0 + degree
    return h


def _negative_pivots(ldu: np.ndarray, ipiv: np.ndarray) -> int:
    """The number of negative eigenvalues of D in LAPACK dsytrf's H = L D Lᵀ (lower): by
    Sylvester's law of inertia, H's. D's 1×1 and 2×2 blocks form a tridiagonal matrix."""
    n = ldu.shape[0]
    diagonal = np.diag(ldu).copy()
    off = np.zeros(max(n - 1, 0))
    k = 0
    while k < n:  # loop over D's blocks (1×1 or 2×2): O(n), beside the O(n³) factorisation
        if ipiv[k] > 0:
            k += 1
        else:  # a 2×2 block at (k, k+1); LAPACK marks it with ipiv[k] = ipiv[k+1] < 0
            off[k] = ldu[k + 1, k]
            k += 2
    values = scipy.linalg.eigvalsh_tridiagonal(diagonal, off)
    return int((values < 0).sum())


def _modularity(adjacency: np.ndarray, labels: np.ndarray) -> float:
    """Newman's modularity Q = Σ_c e_cc / 2m − (d_c / 2m)² of a partition of the graph
    ``adjacency`` (self-loops counted as edges), dense or sparse. O(n² k) time (O(nnz k) sparse),
    one n × k product."""
    y = np.zeros((labels.size, int(labels.max()) + 1))
    y[np.arange(labels.size), labels] = 1.0
    degree = _row_sums(adjacency)
    two_m = degree.sum()
    if two_m == 0:
        return 0.0
    inside = np.einsum("ic,ic->c", y, adjacency @ y)
    return float((inside / two_m - (y.T @ degree / two_m) ** 2).sum())


def _eigengap(values: np.ndarray, k_min: int, k_max: int) -> int:
    """argmax_{k_min ≤ k ≤ k_max} λ_k − λ_{k+1} (1-based, λ descending); ties → smallest k."""
    gaps = values[k_min - 1 : k_max] - values[k_min : k_max + 1]
    return int(k_min + np.argmax(gaps))


def _row_sums(a) -> np.ndarray:
    """Row sums (n,) of a dense or scipy-sparse (n, n) matrix, as a 1-D float64 array."""
    return np.asarray(a.sum(axis=1), dtype=np.float64).ravel()


def _check_sparse_affinity(affinity) -> sp.csr_matrix:
    """The sparse affinity as a new float64 CSR matrix (12 bytes per nonzero) with sorted indices,
    duplicates summed and no explicit zeros; checked finite, non-negative and symmetric in
    O(nnz) (one more sparse temporary, A − Aᵀ)."""
    a = sp.csr_matrix(affinity, dtype=np.float64, copy=True)
    if a.shape[0] != a.shape[1] or a.shape[0] == 0:
        raise ValueError(f"affinity must be a non-empty square matrix; got shape {a.shape}.")
    a.sum_duplicates()
    a.eliminate_zeros()
    if not np.all(np.isfinite(a.data)) or np.any(a.data < 0):
        raise ValueError("affinity must be finite and non-negative.")
    asymmetry = abs(a - a.T)
    if asymmetry.nnz and asymmetry.max() > 1e-12:
        raise ValueError("affinity must be symmetric.")
    return a


def _check_affinity(affinity) -> np.ndarray:
    """The affinity as a float64 array, the caller's own when it is one (it is only read: no
    n×n copy); the symmetry check runs by row blocks (no n×n temporaries)."""
    a = affinity.toarray() if sp.issparse(affinity) else affinity
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] == 0:
        raise ValueError(f"affinity must be a non-empty square matrix; got shape {a.shape}.")
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError("affinity must be finite and non-negative.")
    rows = max(1, 2**20 // a.shape[0])
    for i0 in range(0, a.shape[0], rows):  # loop over row blocks
        if np.abs(a[i0 : i0 + rows] - a[:, i0 : i0 + rows].T).max() > 1e-12:
            raise ValueError("affinity must be symmetric.")
    return a
