"""RCEC — Robust Convex Ensemble Clustering (Gao, Yamada, Kaski, Mamitsuka, Zhu, IJCAI 2016).

The base clusterings' binary incidence matrix L (n × K, one column per input cluster) is cleaned by

    min_{X ≥ 0}  ‖L − X‖_F² + λ·tr((XᵀX + γI_K)^{1/2}) + β·Σ_j ‖X_{·j}‖₂

(the ℓ2,1 term removes anomalous input clusters, reported in ``suppressed_clusters_``), and X Xᵀ
is cut into ``n_clusters`` segments by normalised cut. Solvers: the paper's multiplicative update
(default, with the spec's typo corrections) or FISTA; both reach the one optimum.
``beta="auto"`` removes input clusters smaller than a quarter of the median one. Missing labels
(-1) are supported. Cost, linear in n: O(R K² + K³) per iteration on the R ≤ n distinct label
rows (with ``mixed_precision`` on, large inputs, ⅘ of those flops run in float32), memory a few
R×K float64 arrays, no n×n array. Derivations, measured cost and deviations
from the spec: docs/algorithms/rcec.md.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

from adseg.consensus._base import (
    MISSING,
    BaseFuser,
    check_flag,
    check_integer,
    check_real,
    row_slices,
)
from adseg.spectral import assign_labels, weighted_kmeans

_SOLVERS = ("multiplicative", "fista")
_INITS = ("random", "support")
_ASSIGN = ("kmeans", "discretize", "cluster_qr")
_TINY = 1e-300
# R·K² from which mixed_precision="auto" runs the update's products in float32 (~1 s of float64
# GEMMs per iteration on one core); below it the all-float64 path runs unchanged
MIXED_PRECISION_WORK = 1e10


# --------------------------------------------------------------------------------------------
# Building L


def incidence_with_columns(labels: np.ndarray) -> tuple[sp.csr_matrix, np.ndarray]:
    """Binary incidence L (n × K, sparse CSR) and its column map.

    Column order: clustering by clustering, each clustering's labels in increasing order. The map
    is an int64 array (K, 2) of (clustering index, original label). Missing labels (-1) give no
    entry. Cost O(n m log n); n·m non-zeros.
    """
    n, m = labels.shape
    rows, cols, colmap = [], [], []
    offset = 0
    for v in range(m):  # loop over clusterings, not items
        col = labels[:, v]
        ok = np.nonzero(col != MISSING)[0]
        values, inverse = np.unique(col[ok], return_inverse=True)
        rows.append(ok)
        cols.append(inverse + offset)
        colmap.append(np.column_stack([np.full(values.size, v), values]))
        offset += values.size
    r = np.concatenate(rows)
    c = np.concatenate(cols)
    L = sp.csr_matrix((np.ones(r.size), (r, c)), shape=(n, offset))
    return L, np.concatenate(colmap).astype(np.int64)


def distinct_label_rows(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The R distinct rows of ``labels`` (n × m): (item_rows (n,), each item's row in 0..R−1;
    first (R,), the first item with each row; counts (R,) float64, items per row).
    Cost O(n m log n), one row sort."""
    unique_rows, item_rows, counts = np.unique(
        labels, axis=0, return_inverse=True, return_counts=True
    )
    item_rows = item_rows.ravel()
    first = np.zeros(unique_rows.shape[0], dtype=np.int64)
    first[item_rows[::-1]] = np.arange(labels.shape[0])[::-1]
    return item_rows, first, counts.astype(np.float64)


def default_beta(cluster_sizes: np.ndarray, scale: float = 0.5) -> float:
    """β = 2·scale·√(median input-cluster size): removes input clusters with at most scale² times
    the median size when λ = 0 (spec §2.5; the rule is this project's, not the paper's)."""
    return float(2.0 * scale * np.sqrt(np.median(np.asarray(cluster_sizes, dtype=np.float64))))


# --------------------------------------------------------------------------------------------
# The objective's pieces, in the scaled variable Z (R × K)


def _eigh(G: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric eigendecomposition on one BLAS thread.

    LAPACK's tridiagonalisation is a chain of small synchronised BLAS-2 calls; with several
    threads on a busy machine it runs up to 10× slower (docs/algorithms/rcec.md), while one thread
    loses little even when the machine is idle."""
    if G.shape[0] < 256:  # too small to thread; skip threadpoolctl's ~1 ms bookkeeping
        return np.linalg.eigh(G)
    with threadpool_limits(limits=1, user_api="blas"):
        return np.linalg.eigh(G)


def _spectrum(Z: np.ndarray, gamma: float) -> tuple[np.ndarray, np.ndarray | None, bool]:
    """Eigen-pairs of ZᵀZ through the smaller of ZᵀZ (K×K) and Z Zᵀ (R×R).

    Returns (mu, V, full): eigenvalues μ ≥ 0 (clipped) and, when full, the K×K eigenvectors of
    ZᵀZ; otherwise V holds the r ≤ R right singular directions with non-negligible μ, which is all
    H needs (the rest of the spectrum is 0 and contributes γ^{-1/2}·(I − V Vᵀ)).
    """
    R, K = Z.shape
    if K <= R:
        mu, V = _eigh(Z.T @ Z)
        return np.maximum(mu, 0.0), V, True
    mu, U = _eigh(Z @ Z.T)
    mu = np.maximum(mu, 0.0)
    keep = mu > 1e-12 * max(float(mu.max()), gamma)
    # right singular vectors from the left ones; dropped directions have μ ≪ γ, where the
    # coefficient (μ+γ)^{-1/2} − γ^{-1/2} ≈ −μ/(2γ^{3/2}) is negligible
    V = (Z.T @ U[:, keep]) / np.sqrt(mu[keep])[None, :]
    return mu, V, False


def _inv_sqrt(mu: np.ndarray, V: np.ndarray, full: bool, K: int, gamma: float) -> np.ndarray:
    """H = (ZᵀZ + γI)^{-1/2}, K×K symmetric, from ``_spectrum``'s output."""
    if full:
        H = (V * (mu + gamma) ** -0.5) @ V.T
    else:
        mu_kept = mu[mu > 1e-12 * max(float(mu.max()), gamma)]
        H = (V * ((mu_kept + gamma) ** -0.5 - gamma**-0.5)) @ V.T
        H[np.diag_indices(K)] += gamma**-0.5
    return (H + H.T) / 2.0


def _smooth_nuclear(mu: np.ndarray, K: int, gamma: float) -> float:
    """tr((ZᵀZ + γI_K)^{1/2}) = Σ over all K eigenvalues (zeros padded when R < K)."""
    return float(np.sqrt(mu + gamma).sum() + max(K - mu.size, 0) * np.sqrt(gamma))


def objective(
    Z: np.ndarray, Lt: np.ndarray, lam: float, beta: float, gamma: float, mu=None
) -> float:
    """F (spec §2.3, constant ‖L‖_F² included so F ≥ 0) at Z with target L̃ (both R × K dense).

    ``mu``: the eigenvalues of ZᵀZ when already known (the multiplicative loop reuses them)."""
    if mu is None:
        G = Z @ Z.T if Z.shape[1] > Z.shape[0] else Z.T @ Z
        if G.shape[0] < 256:
            mu = np.maximum(np.linalg.eigvalsh(G), 0.0)
        else:
            with threadpool_limits(limits=1, user_api="blas"):
                mu = np.maximum(np.linalg.eigvalsh(G), 0.0)
    fit, column_sq = _fit_and_column_squares(Z, Lt, np.empty_like(Z))
    return _objective_value(fit, column_sq, mu, Z.shape[1], lam, beta, gamma)


def _fit_and_column_squares(Z: np.ndarray, Lt: np.ndarray, work: np.ndarray) -> tuple:
    """(‖L̃ − Z‖_F², (K,) Σ_i Z_ij²), computed in ``work`` (R × K, overwritten): no other R × K
    array. The same values to the bit as ``np.sum((Lt - Z) ** 2)`` and ``(Z**2).sum(axis=0)``."""
    np.subtract(Lt, Z, out=work)
    np.square(work, out=work)
    fit = float(np.sum(work))
    np.square(Z, out=work)
    return fit, work.sum(axis=0)


def _objective_value(fit, column_sq, mu, K: int, lam: float, beta: float, gamma: float) -> float:
    """F from its parts: the fit term, the column sums of Z², the eigenvalues of ZᵀZ."""
    return fit + lam * _smooth_nuclear(mu, K, gamma) + beta * float(np.sqrt(column_sq).sum())


def gradient(
    Z: np.ndarray, Lt: np.ndarray, lam: float, beta: float, gamma: float, varsigma: float = 0.0
) -> np.ndarray:
    """∇F = 2(Z − L̃) + λ Z H + β Z diag(1/(‖Z_{·j}‖ + ς)) (valid where no column is zero)."""
    mu, V, full = _spectrum(Z, gamma)
    H = _inv_sqrt(mu, V, full, Z.shape[1], gamma)
    d = 1.0 / (np.sqrt((Z**2).sum(axis=0)) + varsigma)
    return 2.0 * (Z - Lt) + lam * (Z @ H) + beta * Z * d[None, :]


# --------------------------------------------------------------------------------------------
# Solvers


def solve_multiplicative(
    Lt: np.ndarray,
    Z0: np.ndarray,
    *,
    lam: float,
    beta: float,
    gamma: float,
    varsigma: float,
    tol: float,
    max_iter: int,
    mixed_precision: bool = False,
) -> tuple[np.ndarray, list[float], bool, np.ndarray]:
    """The paper's multiplicative update (spec §3.2–3.3) from a strictly positive Z0.

    Stops when |F_t − F_{t+1}| ≤ tol·|F_t| (plus 1e-14·‖L̃‖² for the F → 0 case λ = β = 0) or after
    ``max_iter`` updates. Returns (Z, objective history F_0..F_T, converged, H at the final Z).

    ``mixed_precision``: the update's two products Z·[H]₋ and Z·[H]₊ run as one float32 GEMM
    (R × K by K × 2K, ~3.5× the float64 rate); Z, ZᵀZ, H, the objective and the stopping test
    stay float64. Each factor √(num/den) then carries a relative error ~1e-7 (float32 rounding
    of sums of non-negative terms), far below the 1e-6 stopping tolerance; the iteration is a
    contraction to the one optimum, so the error does not accumulate
    (docs/algorithms/rcec.md, "Mixed precision").

    Cost per iteration: ZᵀZ (½ R K² flops, SYRK), the K × K eigendecomposition (O(K³)) and the two
    products (2 R K²; in float32 when mixed) — linear in R. Memory: Z, numerator and denominator
    (R × K float64 each, made once; mixed: plus Z in float32 and the R × 2K float32 product) plus
    K × K.
    """
    Z = Z0.copy()
    R, K = Z.shape
    floor = 1e-14 * float(np.sum(Lt**2))
    history: list[float] = []
    converged = False
    # R × K buffers made once: a fresh array per use is mapped and faulted in page by page
    num, den = np.empty_like(Z), np.empty_like(Z)
    Z32 = np.empty((R, K), dtype=np.float32) if mixed_precision else None
    for t in range(max_iter + 1):
        mu, V, full = _spectrum(Z, gamma)
        H = _inv_sqrt(mu, V, full, K, gamma)
        # F of the current iterate reuses this iteration's eigenvalues (spec §3.3 step 8);
        # den is free until the products below
        fit, column_sq = _fit_and_column_squares(Z, Lt, den)
        history.append(_objective_value(fit, column_sq, mu, K, lam, beta, gamma))
        if t > 0 and abs(history[-2] - history[-1]) <= tol * abs(history[-2]) + floor:
            converged = True
            break
        if t == max_iter:
            break
        d = 1.0 / (np.sqrt(column_sq) + varsigma)
        _products(Z, H, lam, num, den, Z32)
        scale = (2.0 + beta * d)[None, :]
        for rows in row_slices(R, K, 1 << 20):  # num += 2 L̃, den += Z diag(2 + βd), by blocks
            num[rows] += 2.0 * Lt[rows]
            den[rows] += Z[rows] * scale
        np.maximum(den, _TINY, out=den)
        num /= den
        np.sqrt(num, out=num)
        Z *= num
    return Z, history, converged, H


def _products(Z, H, lam: float, num: np.ndarray, den: np.ndarray, Z32) -> None:
    """num = λ Z[H]₋ and den = λ Z[H]₊ (R × K, written in place): one float32 GEMM through
    ``Z32`` (R × K float32, overwritten) when given, else two float64 GEMMs."""
    K = H.shape[0]
    if Z32 is not None:
        Hs = np.empty((K, 2 * K), dtype=np.float32)
        Hs[:, :K] = np.maximum(-H, 0.0)
        Hs[:, K:] = np.maximum(H, 0.0)
        Z32[...] = Z
        P = Z32 @ Hs
        # widened and scaled in one pass each (the same values as astype, then *= lam)
        np.multiply(P[:, :K], lam, out=num, dtype=np.float64)
        np.multiply(P[:, K:], lam, out=den, dtype=np.float64)
        return
    np.matmul(Z, np.maximum(-H, 0.0), out=num)
    np.matmul(Z, np.maximum(H, 0.0), out=den)
    num *= lam
    den *= lam


def solve_fista(
    Lt: np.ndarray,
    Z0: np.ndarray,
    *,
    lam: float,
    beta: float,
    gamma: float,
    tol: float,
    max_iter: int,
) -> tuple[np.ndarray, list[float], bool, np.ndarray]:
    """Accelerated proximal gradient (FISTA, function-value restart) on F (spec §3.8).

    Smooth part g = ‖L̃ − Z‖² + λ tr((ZᵀZ+γI)^{1/2}) with Lipschitz constant 2 + λ/√γ; the prox of
    β‖·‖_{2,1} + [Z ≥ 0] clips each column at 0 and then shrinks its norm by τβ. Same stopping rule
    as the multiplicative solver. Returns (Z, history, converged, H at the final Z).
    """
    K = Z0.shape[1]
    tau = 1.0 / (2.0 + lam / np.sqrt(gamma))
    floor = 1e-14 * float(np.sum(Lt**2))

    def prox(Vm: np.ndarray) -> np.ndarray:
        np.maximum(Vm, 0.0, out=Vm)
        norms = np.sqrt((Vm**2).sum(axis=0))
        shrink = np.maximum(0.0, 1.0 - tau * beta / np.maximum(norms, _TINY))
        return Vm * shrink[None, :]

    X = prox(Z0.copy())
    Y = X.copy()
    t_k = 1.0
    history = [objective(X, Lt, lam, beta, gamma)]
    converged = False
    restarted = False
    for _ in range(max_iter):
        mu, V, full = _spectrum(Y, gamma)
        H = _inv_sqrt(mu, V, full, K, gamma)
        step = Y - tau * (2.0 * (Y - Lt) + lam * (Y @ H))
        X_new = prox(step)
        F_new = objective(X_new, Lt, lam, beta, gamma)
        if F_new > history[-1]:
            if restarted:
                # a plain proximal step (which cannot increase F) did: F is at rounding level
                converged = True
                break
            # momentum overshoot: restart from the last iterate with a plain proximal step
            t_k = 1.0
            Y = X
            restarted = True
            continue
        restarted = False
        t_next = (1.0 + np.sqrt(1.0 + 4.0 * t_k**2)) / 2.0
        Y = X_new + ((t_k - 1.0) / t_next) * (X_new - X)
        t_k = t_next
        done = abs(history[-1] - F_new) <= tol * abs(history[-1]) + floor
        X = X_new
        history.append(F_new)
        if done:
            converged = True
            break
    mu, V, full = _spectrum(X, gamma)
    return X, history, converged, _inv_sqrt(mu, V, full, K, gamma)


# --------------------------------------------------------------------------------------------
# Normalised cut through X


def ncut_embedding(
    X_rows: np.ndarray, weights: np.ndarray, n_clusters: int
) -> tuple[np.ndarray, int]:
    """Top ``n_clusters`` eigenvectors of D^{-1/2} W D^{-1/2}, W = X Xᵀ over all n items, without
    forming W.

    ``X_rows`` (R × K) are the distinct rows of X, ``weights`` (R,) how many items share each. The
    returned embedding (R × n_clusters) gives the rows of the n × n_clusters eigenvector matrix
    (items of one row share it). Also returns how many rows had a zero degree (floored).
    Cost O(R K·min(R, K)); memory one R × K array.
    """
    R, K = X_rows.shape
    c = min(n_clusters, R, K)
    sw = np.sqrt(weights)
    degree = X_rows @ (X_rows.T @ weights)
    zero = degree <= 1e-300
    degree = np.where(zero, 1.0, degree)
    A = X_rows / np.sqrt(degree)[:, None]  # rows of D^{-1/2} X, one per distinct row
    Zt = A * sw[:, None]  # so that ZtᵀZt = (D^{-1/2}X)ᵀ(D^{-1/2}X) over all n items
    if K <= R:
        s2, V = _eigh(Zt.T @ Zt)
        V = V[:, ::-1][:, :c]
        s = np.sqrt(np.maximum(s2[::-1][:c], 1e-300))
        emb = (A @ V) / s[None, :]
    else:
        s2, U = _eigh(Zt @ Zt.T)
        emb = U[:, ::-1][:, :c] / sw[:, None]
    if c < n_clusters:
        emb = np.hstack([emb, np.zeros((R, n_clusters - c))])
    return emb, int(zero.sum())


def _kmeans_distinct_rows(
    emb: np.ndarray, weights: np.ndarray, n_clusters: int, random_state
) -> np.ndarray:
    """``assign_labels(emb[item_rows], method="kmeans")`` for large inputs: k-means (10 seeded
    starts, :func:`adseg.spectral.weighted_kmeans`) on the R distinct embedding rows weighted by
    how many items share each — the same k-means objective as on the n item rows; only the
    k-means++ draws differ. Row normalisation and the zero-row rule as
    ``adseg.spectral.assign_labels``. Returns (R,) labels 0..k'−1 without gaps. Cost
    O(R c² (log c + iterations)) per start instead of O(n c² (...)). (float32 input was tried
    and is slower: scikit-learn's k-means++ distances upcast it in chunks.)"""
    norms = np.linalg.norm(emb, axis=1, keepdims=True)
    nonzero = norms > 1e-10 * norms.max()
    Xn = np.divide(emb, norms, out=np.zeros_like(emb), where=nonzero)
    n_clusters = min(n_clusters, emb.shape[0])
    if n_clusters <= 1:
        return np.zeros(emb.shape[0], dtype=np.int64)
    found = weighted_kmeans(Xn, weights, n_clusters, 10, random_state)
    return np.unique(found, return_inverse=True)[1].astype(np.int64).ravel()


def _discretize(embedding: np.ndarray, n_clusters: int, method: str, random_state) -> np.ndarray:
    if method == "discretize" and n_clusters > 1:
        return _discretize_rotation(embedding, n_clusters, random_state)
    if method == "discretize":
        return np.zeros(embedding.shape[0], dtype=np.int64)
    return assign_labels(embedding, n_clusters, method=method, random_state=random_state)


def _discretize_rotation(embedding: np.ndarray, n_clusters: int, random_state) -> np.ndarray:
    """Yu–Shi rotation discretisation (scikit-learn's ``discretize``) of an (n × c) embedding
    that may hold zero rows (orphan items) and zero columns (padding when the graph has fewer than
    c eigenvectors). ``discretize`` normalises rows and columns, so a zero one would turn into NaN
    and its SVD fail: it runs on the non-zero block; the orphans share one segment (a new label
    while fewer than ``n_clusters`` are used, else the largest segment). Cost O(n c²) per rotation
    step."""
    from sklearn.cluster._spectral import discretize

    rows = np.any(embedding != 0, axis=1)
    cols = np.any(embedding[rows] != 0, axis=0)
    labels = np.zeros(embedding.shape[0], dtype=np.int64)
    if rows.any() and cols.sum() > 1:
        block = embedding[np.ix_(rows, cols)]
        labels[rows] = discretize(block.copy(), random_state=random_state).astype(np.int64)
    if (~rows).any() and rows.any():
        used = np.unique(labels[rows])
        labels[~rows] = (
            used.size if used.size < n_clusters else int(np.bincount(labels[rows]).argmax())
        )
    return np.unique(labels, return_inverse=True)[1].astype(np.int64)


# --------------------------------------------------------------------------------------------
# The estimator


class RCEC(BaseFuser):
    """Robust Convex Ensemble Clustering (IJCAI 2016): clean the input clusters, then Ncut.

    Parameters
    ----------
    n_clusters : number of consensus segments c (used only by the final normalised cut).
    lam : λ ≥ 0, weight of the smoothed nuclear norm (paper: 0.1).
    gamma : γ > 0, smoothing of the Schatten-1 surrogate (paper: 0.01).
    beta : β ≥ 0, weight of the column ℓ2,1 norm — how much of each input cluster is removed —
        or "auto" (default): β = 2·beta_scale·√(median input-cluster size); see the module doc.
    beta_scale : κ > 0 of the "auto" rule (0.5: drop input clusters under ¼ of the median size).
    solver : "multiplicative" (the paper's update) or "fista" (proximal-gradient cross-check).
    init : "random" — i.i.d. Uniform(0, 1) start, as the paper — or "support" — L + 0.01, the
        spec's deterministic alternative. Both strictly positive (zeros stay zero under the update).
    tol : relative objective decrease that stops the solver (1e-6).
    max_iter : update limit (500).
    varsigma : ς, guard in D = diag(1/(‖X_{·j}‖ + ς)) (1e-10).
    assign_labels : "kmeans" (row-normalised embedding), "discretize" (Yu–Shi), "cluster_qr".
    mixed_precision : the multiplicative update's two R × K × K products in float32 (everything
        else float64; see ``solve_multiplicative``): True, False, or "auto" (default) — on when
        R·K² ≥ 1e10 (R distinct label rows, K input clusters), i.e. when the products take
        ~1 s or more per iteration (n ≳ 20,000 advertisers at K ≈ 700); smaller inputs keep the
        all-float64 path exactly. Ignored by ``solver="fista"``.
    random_state : seed for the start and the label assignment.

    Attributes
    ----------
    labels_ : (n_items,) segments in 0..n_clusters-1.
    beta_ : the β used.
    columns_ : (K, 2) int64, input cluster j = (clustering index, original label).
    cluster_sizes_ : (K,) n_j, members of each input cluster.
    column_norms_ : (K,) ‖X*_{·j}‖₂ (over all items); column_weights_ = column_norms_/√n_j, the
        share of input cluster j that survives (≈ 1 − β/(2√n_j) at small λ, 0 when removed).
    suppressed_mask_ : (K,) bool, input clusters removed (zero column at the optimum).
    suppressed_clusters_ : list of (clustering, label) pairs of the removed input clusters.
    X_unique_ : (R, K) the cleaned matrix on the distinct label rows; ``cleaned_matrix()`` expands
        it to (n_items, K) (which costs n·K floats).
    item_rows_ : (n_items,) index of each item's distinct row in ``X_unique_``.
    objective_ : list of F values per iteration; n_iter_ ; converged_ .
    mixed_precision_ : whether the update's products ran in float32.
    """

    def __init__(
        self,
        n_clusters: int = 2,
        *,
        lam: float = 0.1,
        gamma: float = 0.01,
        beta: float | str = "auto",
        beta_scale: float = 0.5,
        solver: str = "multiplicative",
        init: str = "random",
        tol: float = 1e-6,
        max_iter: int = 500,
        varsigma: float = 1e-10,
        assign_labels: str = "kmeans",
        mixed_precision: bool | str = "auto",
        random_state=None,
    ):
        self.n_clusters = n_clusters
        self.lam = lam
        self.gamma = gamma
        self.beta = beta
        self.beta_scale = beta_scale
        self.solver = solver
        self.init = init
        self.tol = tol
        self.max_iter = max_iter
        self.varsigma = varsigma
        self.assign_labels = assign_labels
        self.mixed_precision = mixed_precision
        self.random_state = random_state

    # -- validation ---------------------------------------------------------------------------
    def _check_params(self) -> None:
        check_real("lam", self.lam, low_inclusive=True)
        check_real("gamma", self.gamma)
        check_real("tol", self.tol, high=1.0)  # relative: 1 or more stops at once, as rcc's
        check_real("varsigma", self.varsigma, low_inclusive=True)
        check_real("beta_scale", self.beta_scale)
        if not (isinstance(self.beta, str) and self.beta == "auto"):
            check_real("beta", self.beta, low_inclusive=True)
        check_integer("max_iter", self.max_iter)
        if not (isinstance(self.mixed_precision, str) and self.mixed_precision == "auto"):
            check_flag("mixed_precision", self.mixed_precision)
        for name, value, allowed in (
            ("solver", self.solver, _SOLVERS),
            ("init", self.init, _INITS),
            ("assign_labels", self.assign_labels, _ASSIGN),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}; got {value!r}.")

    # -- fitting ------------------------------------------------------------------------------
    def _fit(self, labels: np.ndarray) -> None:
        self._check_params()
        c = int(self.n_clusters)
        L, self.columns_ = incidence_with_columns(labels)
        sizes = np.asarray(L.sum(axis=0)).ravel()
        self.cluster_sizes_ = sizes.astype(np.int64)
        lam, gamma = float(self.lam), float(self.gamma)
        beta = self._beta(sizes)
        self.beta_ = beta
        # identical label rows have identical rows in X* — solve on the distinct rows
        item_rows, first, w = distinct_label_rows(labels)
        sw = np.sqrt(w)
        L_rows = L[first]
        Lt = L_rows.toarray()
        Lt *= sw[:, None]
        Z0 = self._start(L_rows, sw)
        kwargs = dict(
            lam=lam, beta=beta, gamma=gamma, tol=float(self.tol), max_iter=int(self.max_iter)
        )
        if self.solver == "multiplicative":
            R, K = Lt.shape
            mixed = (
                R * K * K >= MIXED_PRECISION_WORK
                if isinstance(self.mixed_precision, str)
                else bool(self.mixed_precision)
            )
            self.mixed_precision_ = mixed
            Z, history, converged, H = solve_multiplicative(
                Lt, Z0, varsigma=float(self.varsigma), mixed_precision=mixed, **kwargs
            )
        else:
            self.mixed_precision_ = False
            Z, history, converged, H = solve_fista(Lt, Z0, **kwargs)
        if not converged:
            warnings.warn(
                f"RCEC ({self.solver}) stopped after max_iter={self.max_iter} iterations before "
                f"the relative objective change fell below tol={self.tol}.",
                ConvergenceWarning,
                stacklevel=3,
            )
        self.objective_ = history
        self.n_iter_ = len(history) - 1
        self.converged_ = converged
        self._suppressed(Z, H, Lt, lam, beta, sizes)
        X_rows = Z / sw[:, None]
        self.X_unique_ = X_rows
        self.item_rows_ = item_rows
        emb, _ = ncut_embedding(X_rows, w, c)
        # items in no clustering, or whose every input cluster was removed, have a zero row in
        # X* (the multiplicative update only approaches it): give them a zero embedding row
        orphan = (L_rows @ (~self.suppressed_mask_).astype(np.float64)) == 0
        if orphan.any():
            emb[orphan] = 0.0
            warnings.warn(
                f"{int(w[orphan].sum())} items have no input cluster left (they are in no "
                "clustering, or all their input clusters were removed); they share one segment.",
                RuntimeWarning,
                stacklevel=3,
            )
        if self.mixed_precision_ and self.assign_labels == "kmeans" and c > 1:
            self.labels_ = _kmeans_distinct_rows(emb, w, c, self._rng)[item_rows]
        else:
            self.labels_ = _discretize(emb[item_rows], c, self.assign_labels, self._rng)

    def _beta(self, sizes: np.ndarray) -> float:
        """The β used (``beta`` or the "auto" rule on the input clusters' ``sizes``); a
        ValueError when it would remove every input cluster."""
        beta = default_beta(sizes, self.beta_scale) if self.beta == "auto" else float(self.beta)
        zero_bound = 2.0 * np.sqrt(sizes.max())
        if beta >= zero_bound:
            chosen = (
                f"beta_scale={self.beta_scale!r} gives beta={beta:.4g} (beta='auto'), which"
                if self.beta == "auto"
                else f"beta={beta:.4g}"
            )
            smaller = "beta_scale" if self.beta == "auto" else "beta"
            raise ValueError(
                f"{chosen} removes every input cluster: X* = 0 whenever "
                f"beta ≥ 2·√(largest input cluster) = {zero_bound:.4g}. Use a smaller {smaller}."
            )
        return beta

    def _start(self, L_rows: sp.csr_matrix, sw: np.ndarray) -> np.ndarray:
        """The solver's strictly positive start Z⁰ (R × K) on the distinct rows ``L_rows`` of L,
        scaled by √(items per row) ``sw``: Uniform(0, 1) ("random") or L + 0.01 ("support")."""
        if self.init == "random":
            Z0 = self._rng.uniform(0.0, 1.0, size=L_rows.shape)
            # Uniform(0,1) can return exactly 0, which the multiplicative update never leaves
            np.maximum(Z0, 1e-12, out=Z0)
        else:
            Z0 = L_rows.toarray() + 0.01
        Z0 *= sw[:, None]
        return Z0

    def _suppressed(self, Z, H, Lt, lam: float, beta: float, sizes: np.ndarray) -> None:
        """The input clusters removed at the optimum Z (R × K, H = (ZᵀZ + γI)^-½): sets
        ``column_norms_``, ``suppressed_mask_``, ``column_weights_`` and
        ``suppressed_clusters_``; a ValueError when every one was removed. O(R K²)."""
        # zero-column optimality test (module doc): ‖[2L̃_j − λ(ZH)_j + λZ_j H_jj]₊‖ ≤ β
        G = Z @ H
        G -= Z * np.diag(H)[None, :]
        G *= -lam
        G += 2.0 * Lt
        np.maximum(G, 0.0, out=G)
        dual = np.sqrt((G**2).sum(axis=0))
        del G
        self.column_norms_ = np.sqrt((Z**2).sum(axis=0))
        self.suppressed_mask_ = (dual <= beta) | (self.column_norms_ == 0.0)
        self.column_weights_ = self.column_norms_ / np.sqrt(sizes)
        self.suppressed_clusters_ = [
            (int(m), int(lab)) for m, lab in self.columns_[self.suppressed_mask_]
        ]
        if self.suppressed_mask_.all():
            raise ValueError(
                f"beta={beta:.4g} removed every input cluster; no segmentation is possible. "
                "Use a smaller beta (or beta_scale)."
            )

    def cleaned_matrix(self) -> np.ndarray:
        """The cleaned assignment matrix X* as (n_items, K) float64 (n·K memory)."""
        return self.X_unique_[self.item_rows_]


# --------------------------------------------------------------------------------------------
# The paper's synthetic ensembles (spec §5.1), shared by the tests and benchmarks/rcec_paper.py


def paper_synthetic_ensemble(
    n_anomalous: int,
    *,
    extreme: bool = False,
    n_normal: int = 10,
    n_classes: int = 10,
    class_size: int = 10,
    random_state=None,
) -> tuple[np.ndarray, np.ndarray]:
    """Base clusterings of the paper's synthetic experiment (spec §5.1) and the classes.

    Classes: ``n_classes`` × ``class_size`` items. Each of the ``n_normal`` normal partitions
    picks half of the classes (at random) as "normal" — 20% of their members are moved — and the
    rest as "anomalous" — 80% moved; a moved item goes to one of the other labels uniformly, all
    moves computed from the classes at once. Each of the ``n_anomalous`` added partitions is
    anomalous in every class (80% moved), or, with ``extreme``, keeps one class intact and deals
    each other class's members round-robin (after a shuffle) over n_classes − 1 labels, so every
    such cluster mixes about one member of each class. Labels of every partition are permuted at
    random. Returns (labels (n, n_normal + n_anomalous) int64, y (n,) int64).
    """
    from sklearn.utils import check_random_state

    rng = check_random_state(random_state)
    y = np.repeat(np.arange(n_classes), class_size)
    members = [np.nonzero(y == k)[0] for k in range(n_classes)]

    def perturbed(fractions: np.ndarray) -> np.ndarray:
        out = y.copy()
        for k in range(n_classes):  # loop over classes
            moved = rng.choice(members[k], int(round(fractions[k] * class_size)), replace=False)
            shift = rng.randint(1, n_classes, size=moved.size)  # any label but k
            out[moved] = (k + shift) % n_classes
        return out

    def extreme_partition() -> np.ndarray:
        intact = rng.randint(n_classes)
        out = np.full(y.size, n_classes - 1)
        for k in range(n_classes):
            if k == intact:
                continue
            shuffled = rng.permutation(members[k])
            offset = rng.randint(n_classes - 1)
            out[shuffled] = (np.arange(class_size) + offset) % (n_classes - 1)
        # the intact class gets the one label no scattered cluster uses
        out[members[intact]] = n_classes - 1
        return out

    columns = []
    for _ in range(n_normal):
        fractions = np.full(n_classes, 0.2)
        fractions[rng.choice(n_classes, n_classes // 2, replace=False)] = 0.8
        columns.append(perturbed(fractions))
    for _ in range(n_anomalous):
        columns.append(extreme_partition() if extreme else perturbed(np.full(n_classes, 0.8)))
    labels = np.column_stack([rng.permutation(n_classes)[col] for col in columns])
    return labels.astype(np.int64), y.astype(np.int64)
