"""Base clusterings of advertisers from each view: KS graphs of the bid landscapes, and text.

Pipeline steps 3–4 (DESIGN.md §2; paper seed 003, Eqs. 40–42):

* **KS views** ("win_rate", "ecpm_cost"): for each α the graph S_ij = 1[dist_ij ≤ C_α] of the
  scaled KS distances is segmented by normalised cut, one base clustering per α. Advertisers with
  fewer than ``min_samples`` samples get label -1. The number of clusters is ``n_clusters`` or, by
  default, the Bethe-Hessian estimate clipped to ``k_range`` ("eigengap", "modularity" optional).
* **Text view**: TF-IDF, LSA and row-normalisation, then seeded k-means for each k in ``text_ks``;
  descriptions with no usable term get -1.

Memory per KS view (n_v advertisers with enough samples): two n_v × n_v float64 arrays plus the
cut's peak, up to 3 more at n_v ≤ 2,000 and about 1.1 above; n_v = 7,600 → 460 MB each. Time: the
KS matrix plus, per α, an O(n_v³/3) LDLᵀ factorisation, a partial eigendecomposition and k-means.
Choice of k against the paper, and measurements: docs/algorithms/ks.md.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import scipy.linalg
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components
from scipy.sparse.linalg import LinearOperator
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils import check_random_state

from adseg.checks import check_integer, check_k_range, check_real
from adseg.consensus._base import assign_labels, lanczos_solves, top_eigenvectors
from adseg.landscape import ks_critical_value, ks_distance_matrix
from adseg.metrics import pair_consistency

log = logging.getLogger(__name__)

__all__ = [
    "KS_VIEWS",
    "BaseClusterings",
    "NormalizedCutClustering",
    "ViewConfig",
    "build_base_clusterings",
    "clusters_per_view",
    "ks_graph",
    "ks_view",
    "text_view",
    "view_consistency",
]

KS_VIEWS = ("win_rate", "ecpm_cost")
"""Names of the two bid-landscape views, in column order."""

K_SELECTIONS = ("bethe_hessian", "eigengap", "modularity")
"""Rules for the number of clusters of a KS graph (see NormalizedCutClustering)."""

SPARSE_MAX_DENSITY = 0.3
"""Lanczos works on a sparse N up to this fraction of nonzeros (crossover ≈ 0.4, see
_normalized_affinity)."""

COLUMN_FIELDS = ("view", "parameter", "n_clusters", "n_excluded", "seconds")
"""Columns every metadata frame has (more may follow: alpha, k, critical_value, n_edges, …)."""


@dataclass(frozen=True)
class ViewConfig:
    """Parameters of the base clusterings (all recorded with a run).

    alphas : significance levels of the KS graphs, each in (0, 1); one base clustering per α and
        KS view.
    min_samples : advertisers with fewer samples of a kind are left out of that view (label -1).
        Default 5 here, for the library's small inputs; the nightly passes its own
        ``--min-samples`` (``NightlyConfig.min_samples``, default 20), so a direct call with the
        defaults leaves out fewer advertisers than the nightly does.
    n_clusters : clusters per KS graph; None = chosen by ``k_selection`` within ``k_range``.
    k_range : (k_min, k_max) searched (capped at the number of advertisers - 1). k_min = 1 lets
        a view without community structure (Bethe-Hessian count 1, e.g. identical price
        distributions) be one cluster; a graph in which every pair is linked is one cluster
        whatever k_min is.
    k_selection : "bethe_hessian" (default), "eigengap" or "modularity" (see
        NormalizedCutClustering and docs/algorithms/ks.md).
    assign_method : "kmeans" or "cluster_qr" (see adseg.consensus.assign_labels).
    n_init : k-means restarts (spectral discretisation and text).
    text_ks : cluster counts of the text view; empty = no text view.
    text_components : LSA dimensions before k-means (None = k-means on the raw TF-IDF rows).
    text_min_df, text_max_features, text_stop_words : TfidfVectorizer settings.
    ks_memory_mb : block-table budget of the KS computation (adseg.landscape).
    keep_distances : keep each KS view's distance matrix in the result (n_v × n_v each).
    blas_threads : BLAS/OpenMP threads while building the views (threadpoolctl); None = leave
        the process default. 1 by default: on the shared 2-core machine, multi-threaded BLAS
        spin-waits in the partial eigendecompositions and k-means, about 14× slower at 1,268
        advertisers (docs/algorithms/ks.md).
    """

    alphas: tuple[float, ...] = (0.01, 0.05, 0.1)
    min_samples: int = 5
    n_clusters: int | None = None
    k_range: tuple[int, int] = (1, 80)
    k_selection: str = "bethe_hessian"
    assign_method: str = "kmeans"
    n_init: int = 10
    text_ks: tuple[int, ...] = (10, 20, 40)
    text_components: int | None = 100
    text_min_df: int = 1
    text_max_features: int | None = 50_000
    text_stop_words: str | None = "english"
    ks_memory_mb: float = 256.0
    keep_distances: bool = False
    blas_threads: int | None = 1

    def __post_init__(self) -> None:
        alphas = _sequence("ViewConfig.alphas", self.alphas)
        for a in alphas:
            check_real("ViewConfig.alphas", a, high=1.0)  # a number in (0, 1)
        if len(set(alphas)) != len(alphas):
            raise ValueError(f"ViewConfig.alphas has duplicates: {alphas}.")
        object.__setattr__(self, "alphas", tuple(float(a) for a in alphas))
        check_integer("ViewConfig.min_samples", self.min_samples, 1)
        if self.n_clusters is not None:
            check_integer("ViewConfig.n_clusters", self.n_clusters, 1)
        check_k_range(self.k_range, "ViewConfig.k_range")
        if self.k_selection not in K_SELECTIONS:
            raise ValueError(
                f"ViewConfig.k_selection must be one of {K_SELECTIONS}; got {self.k_selection!r}."
            )
        if self.assign_method not in ("kmeans", "cluster_qr"):
            raise ValueError(
                f"ViewConfig.assign_method must be 'kmeans' or 'cluster_qr';"
                f" got {self.assign_method!r}."
            )
        check_integer("ViewConfig.n_init", self.n_init, 1)
        ks = _sequence("ViewConfig.text_ks", self.text_ks)
        for k in ks:
            check_integer("ViewConfig.text_ks", k, 1)
        object.__setattr__(self, "text_ks", ks)
        if self.text_components is not None:
            check_integer("ViewConfig.text_components", self.text_components, 1)
        if self.blas_threads is not None:
            check_integer("ViewConfig.blas_threads", self.blas_threads, 1)
        check_real("ViewConfig.ks_memory_mb", self.ks_memory_mb)


def _sequence(name: str, value) -> tuple:
    """A config field that lists values (``alphas=(0.05,)``), as a tuple; a TypeError naming
    the field for a single value or a string (rather than "'float' object is not iterable")."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a list of values, e.g. ({value!r},); got {value!r}.")
    return tuple(value)


@dataclass
class BaseClusterings:
    """The base clusterings of all views.

    labels : (n_advertisers, n_columns) int64; -1 = advertiser left out of that column.
    columns : one row per column of ``labels`` (index = column number): view ∈ {"win_rate",
        "ecpm_cost", "text"}, parameter ("alpha=0.05" / "k=20"), n_clusters (distinct labels),
        n_excluded (-1 count), seconds (wall time; a KS view's distance time is shared out
        evenly over its α columns), then alpha, k, critical_value, n_edges (linked pairs i < j),
        n_components and n_isolated (graph components / nodes linked to nobody), ks_seconds.
    distances : view → (n_v × n_v scaled KS distances, indices of the n_v advertisers), only when
        ``ViewConfig.keep_distances``.
    """

    labels: np.ndarray
    columns: pd.DataFrame
    distances: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def column(self, view: str, parameter: str) -> np.ndarray:
        """The labels (n,) of one column, e.g. ``column("win_rate", "alpha=0.05")``."""
        hit = self.columns[
            (self.columns["view"] == view) & (self.columns["parameter"] == parameter)
        ]
        if hit.empty:
            raise KeyError(f"no base clustering {view} / {parameter}.")
        return self.labels[:, int(hit.index[0])]


# --------------------------------------------------------------------------------------------
# Normalised cut
# --------------------------------------------------------------------------------------------


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
    assign_method : "kmeans" | "cluster_qr" (adseg.consensus.assign_labels).
    n_init : k-means restarts.
    random_state : seed of the k-means discretisation.

    Attributes
    ----------
    labels_ : (n,) int64 in 0..n_clusters_-1.
    n_clusters_ : clusters found (distinct labels; may be below the k used if k-means empties one).
    eigenvalues_ : the top eigenvalues of N computed (largest first), (min(k + 1, n),) with k the
        largest cluster count considered.
    bethe_hessian_count_ : the Bethe-Hessian estimate before clipping (None for other rules).
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
    n×n more, the linked nodes' subgraph, when some nodes are isolated.
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
        """Segment the graph ``affinity`` (n, n), dense or scipy-sparse; returns self."""
        a = _check_affinity(affinity)
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
        isolated = a.sum(axis=1) - np.diag(a) == 0
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
            sub = a if core.size == n else a[np.ix_(core, core)]  # a copy only when needed
            core_labels = self._cut(sub, k_min, k_max)
            labels[core] = core_labels
            # nodes linked to nobody are significantly different from every other: singletons
            labels[isolated] = core_labels.max() + 1 + np.arange(self.n_isolated_)
        self.labels_ = _compact(labels)
        self.n_clusters_ = int(self.labels_.max()) + 1
        self.modularity_ = _modularity(a, self.labels_)
        return self

    def _cut(self, a: np.ndarray, k_min: int, k_max: int) -> np.ndarray:
        """Normalised cut of a graph in which every node has an edge (self-loops allowed)."""
        n = a.shape[0]
        k_hi = min(k_max, n - 1)
        k_lo = min(k_min, k_hi)
        if self.n_clusters is not None:
            candidates = [min(int(self.n_clusters), n)]
        elif self.k_selection == "bethe_hessian":
            self.bethe_hessian_count_ = _bethe_hessian_count(a)
            candidates = [int(np.clip(self.bethe_hessian_count_, k_lo, k_hi))]
        elif self.k_selection == "modularity":
            candidates = np.unique(np.round(np.geomspace(k_lo, k_hi, 16)).astype(int)).tolist()
        else:
            candidates = None  # eigengap: needs the spectrum first
        # after the Bethe Hessian (its n×n array and this CSR copy are not held together)
        links = sp.csr_matrix(a)
        n_parts, parts = connected_components(links, directed=False)
        if candidates is not None and self.n_clusters is None:
            # separate components are separate clusters whenever the range allows it
            candidates = sorted({max(k, min(n_parts, k_hi)) for k in candidates})
        k_top = k_hi if candidates is None else max(candidates)
        # with more components than clusters, eigenvalue 1 is degenerate: embed in all of its
        # eigenspace so that k-means keeps each component whole
        n_vectors = min(n, max(k_top, n_parts) + 1)
        degree = a.sum(axis=1)
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
        return _compact(best_labels)


def _normalized_affinity(
    adjacency: np.ndarray, links: sp.csr_matrix, degree: np.ndarray, sparse: bool
) -> np.ndarray | sp.csr_matrix:
    """N = D^-1/2 A D^-1/2 (D = diag(degree), A's row sums, all > 0), (n, n): sparse CSR when
    ``sparse`` (Lanczos will solve it) and at most SPARSE_MAX_DENSITY of the entries are
    nonzero — ``links`` (A's CSR copy) scaled in place and returned — else dense. Lanczos
    multiplies by one vector per step, which streams a dense N whole; CSR streams 12 bytes per
    nonzero instead of 8 per entry: 3.4× faster products at 10 % density, 1.7× at 25 %, even at
    40 % (n = 6,000, one core). The KS graphs link 2–12 % of pairs. Both forms compute
    (a_ij · s_i) · s_j, so they hold the same numbers. Memory: one nnz-long index array besides
    ``links`` when sparse, one n×n array when dense."""
    n = adjacency.shape[0]
    scale = 1.0 / np.sqrt(degree)
    if sparse and links.nnz <= SPARSE_MAX_DENSITY * n * n:
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


def _is_complete(adjacency: np.ndarray, nodes: np.ndarray) -> bool:
    """Whether every pair of ``nodes`` is linked, for ``nodes`` = those with an edge (their edges
    all stay among them): each links the other n_nodes − 1. Counts nonzeros per row (an (n, n)
    boolean temporary, not a float64 copy of the subgraph)."""
    links = np.count_nonzero(adjacency, axis=1) - (np.diag(adjacency) != 0)
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
    ``adjacency`` (self-loops counted as edges). O(n² k) time, one n × k product."""
    y = np.zeros((labels.size, int(labels.max()) + 1))
    y[np.arange(labels.size), labels] = 1.0
    degree = adjacency.sum(axis=1)
    two_m = degree.sum()
    if two_m == 0:
        return 0.0
    inside = np.einsum("ic,ic->c", y, adjacency @ y)
    return float((inside / two_m - (y.T @ degree / two_m) ** 2).sum())


def _eigengap(values: np.ndarray, k_min: int, k_max: int) -> int:
    """argmax_{k_min ≤ k ≤ k_max} λ_k − λ_{k+1} (1-based, λ descending); ties → smallest k."""
    gaps = values[k_min - 1 : k_max] - values[k_min : k_max + 1]
    return int(k_min + np.argmax(gaps))


# --------------------------------------------------------------------------------------------
# Views
# --------------------------------------------------------------------------------------------


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


def ks_view(
    samples: Sequence,
    view: str,
    config: ViewConfig | None = None,
    random_state=None,
) -> BaseClusterings:
    """One KS view: distances once, then a normalised-cut clustering per α in config.alphas.

    samples : n 1-D arrays (eCPM prices; any length, empty allowed). Advertisers with fewer than
        ``config.min_samples`` samples get -1 in every column of this view.
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
        return BaseClusterings(np.empty((n, 0), dtype=np.int64), _empty_columns())
    t0 = time.perf_counter()
    dist = ks_distance_matrix([samples[i] for i in keep], memory_mb=config.ks_memory_mb)
    ks_seconds = time.perf_counter() - t0
    # the KS matrix takes minutes at 10,000 advertisers: a job log hears of it
    log.info("view %s: KS distances of %d advertisers: %.1f s", view, keep.size, ks_seconds)
    labels = np.full((n, len(config.alphas)), -1, dtype=np.int64)
    rows = []
    for c, alpha in enumerate(config.alphas):  # loop over significance levels
        t1 = time.perf_counter()
        graph = ks_graph(dist, alpha)
        n_edges = int((graph.sum() - keep.size) // 2)
        n_clusters = None if config.n_clusters is None else min(config.n_clusters, keep.size)
        model = NormalizedCutClustering(
            n_clusters=n_clusters,
            k_range=config.k_range,
            k_selection=config.k_selection,
            assign_method=config.assign_method,
            n_init=config.n_init,
            random_state=int(seeds[c]),
        ).fit(graph)
        del graph
        labels[keep, c] = model.labels_
        log.info(
            "view %s alpha=%g: %d clusters, %.1f s",
            view,
            alpha,
            model.n_clusters_,
            time.perf_counter() - t1,
        )
        rows.append(
            {
                "view": view,
                "parameter": f"alpha={alpha:g}",
                "n_clusters": model.n_clusters_,
                "n_excluded": int(n - keep.size),
                "seconds": time.perf_counter() - t1 + ks_seconds / len(config.alphas),
                "alpha": alpha,
                "k": np.nan,
                "critical_value": ks_critical_value(alpha),
                "n_edges": n_edges,
                "n_components": model.n_components_,
                "n_isolated": model.n_isolated_,
                "ks_seconds": ks_seconds,
            }
        )
    distances = {view: (dist, keep)} if config.keep_distances else {}
    return BaseClusterings(labels, pd.DataFrame(rows), distances)


def text_view(
    descriptions: Sequence[str | None],
    config: ViewConfig | None = None,
    random_state=None,
) -> BaseClusterings:
    """The text view: TF-IDF (+ LSA) of descriptions, k-means for each k in config.text_ks.

    descriptions : n strings (None/NaN/empty allowed → -1). k is capped at the number of distinct
    usable documents. Returns BaseClusterings with labels (n, len(text_ks)); no columns if fewer
    than 2 descriptions are usable (with a warning). Cost: TF-IDF O(total tokens), SVD
    O(n · terms · components), k-means O(n · components · k · iterations) per k.
    """
    from sklearn.cluster import KMeans
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.preprocessing import normalize

    config = config or ViewConfig()
    rng = check_random_state(random_state)
    seeds = rng.randint(0, 2**31 - 1, size=len(config.text_ks) + 1)
    docs = [d if isinstance(d, str) else "" for d in descriptions]
    n = len(docs)
    if not config.text_ks or n == 0:
        return BaseClusterings(np.empty((n, 0), dtype=np.int64), _empty_columns())
    t0 = time.perf_counter()
    x = None
    try:
        vectorizer = TfidfVectorizer(
            sublinear_tf=True,
            min_df=config.text_min_df,
            max_features=config.text_max_features,
            stop_words=config.text_stop_words,
        )
        x = vectorizer.fit_transform(docs)
    except ValueError:  # empty vocabulary: no description has a usable term
        pass
    usable = np.flatnonzero(np.asarray(x.getnnz(axis=1)) > 0) if x is not None else np.array([])
    if usable.size < 2:
        warnings.warn(
            f"text view: only {usable.size} of {n} descriptions have usable terms; skipped.",
            RuntimeWarning,
            stacklevel=2,
        )
        return BaseClusterings(np.empty((n, 0), dtype=np.int64), _empty_columns())
    x = x[usable]
    if config.text_components is not None and min(x.shape) > 2:
        n_comp = min(config.text_components, min(x.shape) - 1)
        svd = TruncatedSVD(n_components=n_comp, random_state=int(seeds[-1]))
        # explained_variance_ratio_ (unused) divides by the total variance, which is 0 when
        # every description is the same
        with np.errstate(divide="ignore", invalid="ignore"):
            features = normalize(svd.fit_transform(x))
    else:
        features = x
    n_distinct = _n_distinct_rows(features)
    prep_seconds = time.perf_counter() - t0
    labels = np.full((n, len(config.text_ks)), -1, dtype=np.int64)
    rows = []
    for c, k in enumerate(config.text_ks):  # loop over cluster counts
        t1 = time.perf_counter()
        k_used = int(min(k, n_distinct))
        km = KMeans(n_clusters=k_used, n_init=config.n_init, random_state=int(seeds[c]))
        labels[usable, c] = _compact(km.fit_predict(features))
        rows.append(
            {
                "view": "text",
                "parameter": f"k={k}",
                "n_clusters": int(labels[usable, c].max()) + 1,
                "n_excluded": int(n - usable.size),
                "seconds": time.perf_counter() - t1 + prep_seconds / len(config.text_ks),
                "alpha": np.nan,
                "k": k,
            }
        )
    return BaseClusterings(labels, pd.DataFrame(rows))


def build_base_clusterings(
    win_samples: Sequence,
    cost_samples: Sequence,
    descriptions: Sequence[str | None],
    config: ViewConfig | None = None,
    random_state=None,
) -> BaseClusterings:
    """All base clusterings the consensus step fuses (pipeline steps 3–4).

    win_samples, cost_samples : n 1-D arrays each (market prices; paid eCPMs on won auctions),
        advertiser i at position i in both and in ``descriptions`` (n strings).
    Returns BaseClusterings: labels (n, V) int64 (-1 = left out), columns in the order win_rate
    per α, ecpm_cost per α, text per k (a view with too few usable advertisers contributes no
    columns, with a warning). Deterministic for a given random_state.
    """
    config = config or ViewConfig()
    n = len(win_samples)
    if len(cost_samples) != n or len(descriptions) != n:
        raise ValueError(
            "win_samples, cost_samples and descriptions must describe the same advertisers;"
            f" got lengths {n}, {len(cost_samples)} and {len(descriptions)}."
        )
    from threadpoolctl import threadpool_limits

    rng = check_random_state(random_state)
    seeds = rng.randint(0, 2**31 - 1, size=3)
    with threadpool_limits(limits=config.blas_threads):
        parts = [
            ks_view(win_samples, "win_rate", config, int(seeds[0])),
            ks_view(cost_samples, "ecpm_cost", config, int(seeds[1])),
            text_view(descriptions, config, int(seeds[2])),
        ]
    labels = np.concatenate([p.labels for p in parts], axis=1)
    frames = [p.columns for p in parts if len(p.columns)]
    columns = pd.concat(frames, ignore_index=True) if frames else _empty_columns()
    distances = {k: v for p in parts for k, v in p.distances.items()}
    return BaseClusterings(labels, columns, distances)


# --------------------------------------------------------------------------------------------
# Tables 4 and 5
# --------------------------------------------------------------------------------------------


def clusters_per_view(base: BaseClusterings) -> pd.DataFrame:
    """The paper's Table 4: clusters of each KS view at each α.

    One row per KS view present (view, then one column "alpha=<α>" per α with its n_clusters,
    then n_excluded). Paper, 1,268 advertisers: win_rate 65 / 47 / 32, ecpm_cost 73 / 51 / 40 at
    α = 0.01 / 0.05 / 0.1.
    """
    cols = base.columns
    ks = cols[cols["view"].isin(KS_VIEWS)] if len(cols) else cols
    if ks.empty:
        return pd.DataFrame(columns=["view", "n_excluded"])
    wide = ks.pivot(index="view", columns="parameter", values="n_clusters")
    order = [f"alpha={a:g}" for a in sorted(ks["alpha"].unique())]
    wide = wide[order].astype("Int64")
    wide["n_excluded"] = ks.groupby("view")["n_excluded"].max()
    wide = wide.reindex([v for v in KS_VIEWS if v in wide.index])
    return wide.reset_index().rename_axis(columns=None)


def view_consistency(base: BaseClusterings) -> pd.DataFrame:
    """The paper's Table 5: at each α, the share of advertiser pairs on which the win-rate and the
    eCPM-cost clusterings agree (both together or both apart; TPN) and disagree (FPN), over the
    advertisers labelled in both (adseg.metrics.pair_consistency, from the contingency table).

    Columns: alpha, view_a, view_b, agree, disagree, n_items. Paper: 74.21% / 25.79%.
    """
    cols = base.columns
    rows = []
    if len(cols):
        for alpha in sorted(cols.loc[cols["view"].isin(KS_VIEWS), "alpha"].unique()):
            param = f"alpha={alpha:g}"
            try:
                a = base.column("win_rate", param)
                b = base.column("ecpm_cost", param)
            except KeyError:
                continue
            agree, disagree = pair_consistency(a, b)
            rows.append(
                {
                    "alpha": float(alpha),
                    "view_a": "win_rate",
                    "view_b": "ecpm_cost",
                    "agree": agree,
                    "disagree": disagree,
                    "n_items": int(((a != -1) & (b != -1)).sum()),
                }
            )
    return pd.DataFrame(rows, columns=["alpha", "view_a", "view_b", "agree", "disagree", "n_items"])


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _empty_columns() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in (*COLUMN_FIELDS, "alpha", "k")})


def _compact(labels: np.ndarray) -> np.ndarray:
    """Labels → 0..k-1 in order of first appearance (k-means can leave a cluster empty)."""
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.argsort(np.argsort(first))
    return rank[inverse].astype(np.int64)


def _n_distinct_rows(x) -> int:
    """Distinct rows of a dense or sparse (n, d) matrix, via two fixed random projections (no
    dense copy of a sparse matrix); distinct rows collide with probability 0."""
    proj = x @ np.random.default_rng(0).normal(size=(x.shape[1], 2))
    return int(np.unique(np.round(np.asarray(proj), 10), axis=0).shape[0])


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
