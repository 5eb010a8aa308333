"""RCC — robust l1 consensus clustering by ADMM (seed 003, Kong, Lu, Shmakov, Yang; spec rcc.md).

Solves ``min_{H, D} ||M̃ − H D Hᵀ||_1`` s.t. HᵀH = I_K, D diagonal ≥ 0, with M̃ the (optionally
weighted, optionally degree-normalised) co-association matrix of the base clusterings, by ADMM
(the paper's Algorithm 1 with its two sign typos corrected), started from the L2CC solution; the
labels are k-means on the row-normalised rows of H, or ``cluster_qr``. The l1 loss absorbs a
gross error on a minority of entries of M̃ (e.g. one column labelling every item among partial
views), which l2 would follow.

The solver runs on the g×g matrices of the g ≤ n cells (items with identical label rows), an
exact reduction; above ``max_cells`` cells, on that many micro-clusters of them (reduced.py, an
approximation). Memory: four dense g×g float64 arrays (M̃, E, Λ, one work array), plus the
dense eigensolver's copy for g ≤ 1,000; g = 2,000 → 128 MB. Time per ADMM iteration: one top-K
eigensolve (``eigen_solver``) and O(g²) element-wise work. Derivation, defaults, the choice of
``normalize`` and measured costs: docs/algorithms/rcc.md.
"""

from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.sparse.linalg as spla
from sklearn.exceptions import ConvergenceWarning

from adseg.consensus._base import (
    BaseFuser,
    average_nmi,
    check_flag,
    check_integer,
    check_real,
    check_weights,
    co_association,
    coherent_cells,
    row_slices,
)
from adseg.consensus.reduced import micro_cell_problem
from adseg.spectral import assign_labels, fix_signs, symmetric_part

__all__ = ["RCC", "RCCResult", "rcc_admm", "soft_threshold"]

_ASSIGN_METHODS = ("kmeans", "cluster_qr")
_SOLVERS = ("auto", "dense", "subspace", "lobpcg", "arpack")
# Cap on the early eigen-steps' residual tolerance, relative to λ₁ (see ``rcc_admm``). Larger caps
# are faster and land the ADMM on other, equally good fixed points (rcc_eigen_tolerance.md);
# kept at 1e-4 so that a faster eigensolver is the only change to the iterates' accuracy.
_EIGEN_TOL_CAP = 1e-4
_DENSE_MAX_N = 1000  # above this, warm-started subspace iteration beats LAPACK (O(n³))
_BLOCK_BYTES = 2 * 2**20  # block size of the fused element-wise passes (cache-sized)


def soft_threshold(x: np.ndarray, t: float, out: np.ndarray | None = None) -> np.ndarray:
    """S_t(x) = sign(x) · max(|x| − t, 0), element-wise; ``out`` may be ``x`` itself."""
    sign_src = x if out is not x else x.copy()
    out = np.abs(x, out=out)
    out -= t
    np.maximum(out, 0.0, out=out)
    np.copysign(out, sign_src, out=out)
    return out


def _primal_block(M, E, Lam, W, thresh: float) -> None:
    """Steps 1–2 on one row block, in place: E ← S_t(M − L − Λ) with L read from W, then
    W ← B = M − E − Λ. Temporaries: one block."""
    x = M - W
    x -= Lam
    soft_threshold(x, thresh, out=E)
    np.subtract(M, E, out=W)
    W -= Lam


def _low_rank_into(G: np.ndarray, out: np.ndarray) -> None:
    """out ← G Gᵀ (n×n), computed on the upper block triangle and mirrored, so that the result is
    exactly symmetric. Cost O(n² K) flops, no n×n temporary."""
    n = G.shape[0]
    step = max(1, int(np.sqrt(_BLOCK_BYTES / 8)))
    for i0 in range(0, n, step):
        i1 = min(i0 + step, n)
        for j0 in range(i0, n, step):
            j1 = min(j0 + step, n)
            blk = G[i0:i1] @ G[j0:j1].T
            out[i0:i1, j0:j1] = blk
            if j0 != i0:
                out[j0:j1, i0:i1] = blk.T
    # diagonal blocks: G_i G_iᵀ is symmetric in exact arithmetic; BLAS may differ in the last bit
    for i0 in range(0, n, step):
        i1 = min(i0 + step, n)
        blk = out[i0:i1, i0:i1]
        blk[...] = np.triu(blk) + np.triu(blk, 1).T


def _top_eigenpairs(
    B: np.ndarray,
    k: int,
    solver: str,
    start: np.ndarray | None,
    rng: np.random.RandomState,
    tol: float,
) -> tuple[np.ndarray, np.ndarray]:
    """The k largest algebraic eigenpairs of the dense symmetric B, largest first, with
    deterministic signs. ``start`` (n×k, previous H) warm-starts the iterative solvers."""
    n = B.shape[0]
    # small n: LAPACK. ARPACK on a small matrix of lower rank than its Krylov space restarts
    # from a random vector drawn from its own process-wide seed, so two fits with the same
    # random_state would give different eigenvectors (and label numbers); LOBPCG needs n ≥ 5 k
    if solver == "dense" or k >= n - 1 or n < 6 * (k + 2):
        vals, vecs = sla.eigh(B, subset_by_index=(n - k, n - 1), driver="evr")
    elif solver == "lobpcg":
        vals, vecs = _lobpcg_top(B, k, start, rng, tol)
    else:  # arpack
        vals, vecs = _arpack_top(B, k, start, rng, tol)
    order = np.argsort(vals)[::-1]
    return vals[order], fix_signs(vecs[:, order])


class _SubspaceTracker:
    """Warm-started block eigensolver for the top k pairs, whose basis is carried from one ADMM
    iteration to the next (successive B differ little, so late in the ADMM one product B Q and
    one narrower one certify the top k pairs).

    Holds Q (n × (k+p)), orthonormal: the previous Ritz vectors, k wanted plus p guards. Per call:
    one guard is replaced by a fresh random vector (so that a direction that becomes dominant
    outside the tracked subspace is caught, see ``_lobpcg_top``), Z = B Q, Rayleigh–Ritz
    (eigh of QᵀZ), residual norms ||B x − θ x|| of the top k read off Z at no extra cost. While
    some exceed ``tol``: the residuals r = B x − θ x of those u pairs, orthonormalised against
    X, give P (n × u); one product B P, and Rayleigh–Ritz on span[X, P] keeps the top k+p Ritz
    pairs as the next X (B X is updated from B X and B P, no further product). Returns None when
    it has spent ``max_products`` full-width products without certifying them.

    Residual directions rather than power steps X ← orth(B X): B = M̃ − E − Λ is indefinite, and
    early in the ADMM its most negative eigenvalues can be larger in magnitude than the K-th
    largest, so power steps would spend the block on the negative end; Rayleigh–Ritz over the
    residuals (a block Davidson / LOBPCG step without its third block) takes the best combination,
    and B P is only as wide as the pairs still to certify (docs/algorithms/rcc.md#eigensolver).
    Cost per step: O(n² u) for B P plus O(n (k+p+u)²) for the orthogonalisation and the
    Rayleigh–Ritz.
    Memory: four n × (k+p+u) blocks."""

    def __init__(self, start: np.ndarray, rng: np.random.RandomState):
        n, k = start.shape
        self.k, self.rng = k, rng
        guard = max(k, 4)
        Q = rng.standard_normal((n, k + guard))
        Q[:, :k] = start
        self.Q = np.linalg.qr(Q)[0]

    def top(self, B: np.ndarray, tol: float, max_products: float = 30.0):
        k, Q = self.k, self.Q
        width = Q.shape[1]
        Q[:, -1] = self.rng.standard_normal(Q.shape[0])
        basis = np.linalg.qr(Q)[0]
        image = B @ basis
        spent = 1.0  # products B Q, in units of the block's width
        while spent <= max_products:
            T = basis.T @ image
            theta, U = np.linalg.eigh((T + T.T) * 0.5)
            theta, U = theta[::-1][:width], U[:, ::-1][:, :width]
            X, BX = basis @ U, image @ U
            resid = np.linalg.norm(BX[:, :k] - X[:, :k] * theta[None, :k], axis=0)
            if not np.all(np.isfinite(resid)):
                return None
            if resid.max() <= tol:
                self.Q = X
                return theta[:k], X[:, :k]
            late = np.flatnonzero(resid > tol)  # only uncertified pairs get a new direction
            P = _orthonormal_complement(BX[:, late] - X[:, late] * theta[late], X)
            basis, image = np.hstack([X, P]), np.hstack([BX, B @ P])
            spent += P.shape[1] / width
        return None


def _orthonormal_complement(R: np.ndarray, X: np.ndarray) -> np.ndarray:
    """An orthonormal basis of R's columns projected out of span(X) (X orthonormal), projected
    twice so that the result is orthogonal to X to round-off. O(n m²) for n × m blocks."""
    for _ in range(2):
        R = R - X @ (X.T @ R)
        R = np.linalg.qr(R)[0]
    return R


def _arpack_top(B, k, start, rng, tol):
    v0 = start.sum(axis=1) if start is not None else None
    if v0 is None or not np.any(v0):
        v0 = rng.uniform(-1, 1, B.shape[0])
    return spla.eigsh(B, k=k, which="LA", v0=v0, tol=1e-9)  # relative tolerance


def _lobpcg_top(B, k, start, rng, tol):
    """LOBPCG on the block [previous H, p fresh random guard vectors], run in short rounds until
    the top k Ritz pairs have residual norms ≤ ``tol`` (absolute); falls back to ARPACK from a
    random start after 5 rounds (31 block iterations). The random guards matter: the previous H
    can be an exact
    invariant subspace of the new B while a new, larger eigenvalue appears elsewhere (the
    multiplier amplifies directions outside H), and a purely warm-started solver would then stop
    at once on the wrong subspace. The guards need not converge themselves (that would cost ~30
    block iterations from a random start); Rayleigh–Ritz keeps the largest Ritz values of the
    whole block, so a guard that picks up a larger eigen-direction takes it into the top k."""
    n = B.shape[0]
    guard = max(k // 2, 4)
    X = rng.standard_normal((n, k + guard))
    if start is not None:
        X[:, :k] = start
    for maxiter in (1, 2, 4, 8, 16):  # near the ADMM's end one step suffices
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # lobpcg warns when maxiter is reached
            vals, X = spla.lobpcg(B, X, tol=tol, maxiter=maxiter, largest=True)
        order = np.argsort(vals)[::-1]
        vals, X = vals[order], X[:, order]
        top = X[:, :k]
        resid = np.linalg.norm(B @ top - top * vals[None, :k], axis=0)
        if np.all(np.isfinite(resid)) and resid.max() <= tol:
            return vals[:k], top
    return _arpack_top(B, k, None, rng, tol)


class RCC(BaseFuser):
    """Robust l1 consensus clustering (ADMM), the project's default fuser (``FUSERS["rcc"]``).

    Parameters
    ----------
    n_clusters : int, K, number of consensus clusters (1 ≤ K ≤ n_items).
    normalize : bool, "l1" or "auto", default "auto". True fuses D^{-1/2} M̃ D^{-1/2} (spec §2),
        False M̃ itself, "l1" d̄ D^{-1} M̃ D^{-1}, which gives every cluster the same l1 mass (the
        l1 fit otherwise favours large clusters). "auto" fits True and "l1" and keeps the labels
        with the higher average NMI with the base clusterings (ties keep True), at about twice
        the time of True. Derivation and evidence: docs/algorithms/rcc.md#normalize.
    weights : array-like (n_clusterings,) or None, per-clustering weights w_v ≥ 0 of M̃.
    assign_labels : {"kmeans", "cluster_qr"}, rounding of H to labels (spec §4).
    rho : float > 1, growth factor of the penalty μ.
    mu : "residual" (default), "spectral" or float > 0, the initial penalty μ⁰. "spectral" is the
        spec's 1.25 / ||M̃||_2 (from robust PCA). "residual" is 1 / max_ij |M̃ − L⁰|_ij, so that the
        first soft threshold 1/μ⁰ sits at the largest residual of the L2CC start and E becomes
        active within a few iterations. With "spectral" the threshold starts ~n/K times above every
        entry of M̃ (co-association entries are ≤ 1 while ||M̃||_2 ≈ n/K), E stays 0 for ~60
        iterations at ρ = 1.1, and meanwhile the multiplier drifts to (L⁰ − M̃)/(ρ − 1), which
        amplifies the spectrum outside H by 1/(ρ − 1). Measured on the Table 2 sets: the same ACC
        and l1 objective, 30–60% fewer iterations (3 repetitions on the seven small Table 2 sets).
    mu_max : float, cap on μ.
    max_iter : int ≥ 1, ADMM iterations at most (a ConvergenceWarning is raised when reached).
    tol : float > 0, relative tolerance on the primal residual and on the change of H D Hᵀ.
    eigen_solver : {"auto", "dense", "subspace", "lobpcg", "arpack"}, see docs/algorithms/rcc.md.
        "arpack" is not reproducible within a process on a B of lower rank than its Krylov
        space (ARPACK restarts from a random vector of its own process-wide seed): use it to
        compare solvers, not in production; "auto" uses it only for the start, from a seeded
        vector, on more than 1,000 cells. Below 6 (K + 2) cells every solver is LAPACK's.
    n_init : int, k-means restarts for ``assign_labels="kmeans"``.
    store_error : bool, keep the final sparse error E (n×n) in ``error_`` — the pairs whose
        co-association the consensus overrides. Costs one n×n array after ``fit``.
    max_cells : int > K or None, default 2000. Above this many distinct label rows (cells) the
        solver works on at most ``max_cells`` weighted micro-clusters of the cells (mini-batch
        k-means on the cells' co-association rows) with their pair-averaged co-association — an
        approximation, memory O(n m + max_cells²) instead of O(g²); at or below it (and with
        None) the exact cell problem, unchanged. Derivation, accuracy and the threshold's
        measurements: docs/algorithms/rcc.md#reduced-problem.
    random_state : int, RandomState or None (k-means seeds and the eigensolvers' random starts).

    Attributes
    ----------
    labels_ : (n_items,) int64 in 0..K-1.
    embedding_ : (n_items, K) float64, H (orthonormal columns, largest eigenvalue first).
    eigenvalues_ : (K,) float64, diag(D) ≥ 0.
    n_clusters_found_ : int, number of non-empty clusters in ``labels_``.
    error_ : (n_items, n_items) float64, E = S_{1/μ}(M̃ − HDHᵀ − Λ) at the final H, D and
        multiplier (only when ``store_error=True``).
    n_iter_ : int, ADMM iterations run.
    converged_ : bool.
    objective_ : float, ||M̃ − H D Hᵀ||_1 at the end.
    history_ : dict of 1-D float arrays, one entry per iteration: "objective" (the l1 loss
        ||M̃ − HDHᵀ||_1), "residual" (||E − M̃ + HDHᵀ||_F / ||M̃||_F), "change"
        (||Lᵗ − Lᵗ⁻¹||_F / ||Lᵗ⁻¹||_F) and "mu".

    n_cells_ : int, g, the number of distinct label rows (n_items when g ≤ K).
    n_micro_clusters_ : int, the rows of the matrix the solver worked on: ``n_cells_``, or at
        most ``max_cells`` micro-clusters when ``reduced_``.
    reduced_ : bool, whether g > ``max_cells`` made the solver work on micro-clusters (then
        ``objective_``, ``history_`` and ``error_`` are those of the micro-cluster matrix,
        ``error_`` mapped back to the items).
    normalize_ : True, False or "l1", the form fitted (with ``normalize="auto"``, the one chosen).
    anmi_ : dict {True: float, "l1": float}, each form's average NMI with the base clusterings
        (only with ``normalize="auto"``).

    Cost per iteration: a few passes over four g×g arrays (O(g²)) plus one partial eigensolve
    (O(g³) dense, or O(g² (K+p)) per subspace/LOBPCG step), g ≤ n the number of distinct label
    rows (G = ``n_micro_clusters_`` ≤ ``max_cells`` in place of g when reduced, plus the
    micro-clustering's O(g G m) per k-means pass). Memory: four dense g×g float64 arrays (M̃, E,
    Λ, W) — 32 g² bytes, at most 128 MB with the default ``max_cells`` — plus O(n K), O(n m) and
    row-block temporaries; ``store_error=True`` adds one n×n array after the fit.
    ``normalize="auto"`` runs two fits one after the other (the same peak memory, plus the first
    fit's O(n K) results, and its n×n ``error_`` with ``store_error=True``) and O(n m) for ANMI.
    """

    def __init__(
        self,
        n_clusters: int = 2,
        *,
        normalize: bool | str = "auto",
        weights=None,
        assign_labels: str = "kmeans",
        rho: float = 1.1,
        mu: float | str = "residual",
        mu_max: float = 1e8,
        max_iter: int = 300,
        tol: float = 1e-6,
        eigen_solver: str = "auto",
        n_init: int = 10,
        store_error: bool = False,
        max_cells: int | None = 2000,
        random_state=None,
    ):
        self.n_clusters = n_clusters
        self.normalize = normalize
        self.weights = weights
        self.assign_labels = assign_labels
        self.rho = rho
        self.mu = mu
        self.mu_max = mu_max
        self.max_iter = max_iter
        self.tol = tol
        self.eigen_solver = eigen_solver
        self.n_init = n_init
        self.store_error = store_error
        self.max_cells = max_cells
        self.random_state = random_state

    def _check_params(self) -> None:
        if self.assign_labels not in _ASSIGN_METHODS:
            raise ValueError(
                f"assign_labels must be one of {_ASSIGN_METHODS}; got {self.assign_labels!r}."
            )
        check_integer("n_init", self.n_init)
        check_flag("store_error", self.store_error)
        named = isinstance(self.normalize, str) and self.normalize in ("l1", "auto")
        if not (isinstance(self.normalize, bool | np.bool_) or named):
            raise ValueError(
                f"normalize must be True, False, 'l1' or 'auto'; got {self.normalize!r}."
            )
        if self.eigen_solver not in _SOLVERS:
            raise ValueError(f"eigen_solver must be one of {_SOLVERS}; got {self.eigen_solver!r}.")
        check_real("rho", self.rho, low=1.0)
        if isinstance(self.mu, numbers.Real):
            check_real("mu", self.mu)
        elif self.mu not in ("residual", "spectral"):
            raise ValueError(
                f"mu must be 'residual', 'spectral' or a positive number; got {self.mu!r}."
            )
        check_real("mu_max", self.mu_max)
        check_integer("max_iter", self.max_iter)
        check_real("tol", self.tol, high=1.0)  # relative to ‖M̃‖_F: 1 or more stops at once
        if self.max_cells is not None:
            check_integer("max_cells", self.max_cells, low=self.n_clusters + 1)

    def _fit(self, labels: np.ndarray) -> None:
        self._check_params()
        if isinstance(self.normalize, str) and self.normalize == "auto":
            self._fit_auto(labels)
            return
        # numpy's bool is not ``True``: as a plain bool it cannot pass for the "l1" form below
        form = bool(self.normalize) if isinstance(self.normalize, bool | np.bool_) else "l1"
        self.normalize_ = form
        K = self.n_clusters
        rng = self._rng
        cache = getattr(self, "_micro_cache", None)
        cell, sizes, M, n_cells = _cell_problem(
            labels, self.weights, form, K, self.max_cells, rng, cache
        )
        g = M.shape[0]
        reduced = bool((sizes > 1).any())
        symmetric_part(M, out=M)  # the degree scaling is not bit-for-bit symmetric
        solver = self.eigen_solver
        if solver == "auto":
            solver = "dense" if g <= _DENSE_MAX_N else "subspace"
        fit = rcc_admm(
            M,
            sizes,
            K,
            solver=solver,
            mu=self.mu,
            rho=self.rho,
            mu_max=self.mu_max,
            max_iter=int(self.max_iter),
            tol=self.tol,
            rng=rng,
            keep_error=self.store_error,
        )
        del M
        history = fit.history
        if not fit.converged:
            warnings.warn(
                f"RCC stopped at max_iter={self.max_iter} before reaching tol={self.tol} "
                f"(relative residual {history['residual'][-1]:.2e}, "
                f"change {history['change'][-1]:.2e}); increase max_iter or rho.",
                ConvergenceWarning,
                stacklevel=3,
            )
        if self.store_error:
            self.error_ = fit.error[np.ix_(cell, cell)] if reduced else fit.error
        H = fit.embedding[cell]  # orthonormal columns: Vᵀ C^-½ Pᵀ P C^-½ V = VᵀV
        self.embedding_ = H
        self.eigenvalues_ = fit.eigenvalues
        self.n_cells_ = n_cells
        self.n_micro_clusters_ = g
        self.reduced_ = g < n_cells
        self.n_iter_ = len(history["residual"])
        self.converged_ = fit.converged
        self.objective_ = history["objective"][-1]
        self.history_ = {k: np.asarray(v, dtype=np.float64) for k, v in history.items()}
        self.labels_ = assign_labels(
            H,
            K,
            method=self.assign_labels,
            random_state=int(rng.randint(0, 2**31 - 1)),
            n_init=self.n_init,
        )
        self.n_clusters_found_ = int(np.unique(self.labels_).size)

    def _fit_auto(self, labels: np.ndarray) -> None:
        """``normalize="auto"``: fit True and "l1" (each as it would run alone), keep the one
        whose labels have the higher ANMI with ``labels`` (ties: True); only the kept fit's
        warnings reach the caller (the other's ConvergenceWarning says nothing about the result)."""
        fits, caught, scores, cache = {}, {}, {}, {}
        for form in (True, "l1"):
            fit = RCC(**{**self.get_params(), "normalize": form})
            fit._micro_cache = cache  # the same micro-clusters for both forms, merged once
            with warnings.catch_warnings(record=True) as caught[form]:
                warnings.simplefilter("always")
                # a finalizer's ResourceWarning (an object of the caller's collected mid-fit) is
                # not the fit's: left out, not replayed below as if the fit had raised it
                warnings.simplefilter("ignore", ResourceWarning)
                fit.fit(labels)
            fits[form], scores[form] = fit, average_nmi(fit.labels_, labels)
        choice = "l1" if scores["l1"] > scores[True] else True
        for name, value in fits[choice]._learned().items():
            setattr(self, name, value)
        self.anmi_ = scores
        for w in caught[choice]:
            warnings.warn(w.message, w.category, stacklevel=4)


@dataclass
class RCCResult:
    """What :func:`rcc_admm` returns, on the g cells.

    embedding : (g, K) V C^-½, row a = the row of H of every item in cell a.
    eigenvalues : (K,) diag(D) ≥ 0.  history : lists per iteration ("objective", "residual",
    "change", "mu"; see RCC.history_).  converged : whether both criteria met ``tol``.
    error : (g, g) E at the end, only with ``keep_error`` (else None).
    """

    embedding: np.ndarray
    eigenvalues: np.ndarray
    history: dict[str, list[float]]
    converged: bool
    error: np.ndarray | None


def rcc_admm(
    M: np.ndarray,
    sizes: np.ndarray,
    n_clusters: int,
    *,
    solver: str,
    mu: float | str,
    rho: float,
    mu_max: float,
    max_iter: int,
    tol: float,
    rng: np.random.RandomState,
    keep_error: bool = False,
) -> RCCResult:
    """RCC's ADMM on the g cells: min ||M̃ − H D Hᵀ||_1 s.t. HᵀH = I_K, D ≥ 0 diagonal.

    M : (g, g) float64 M̃_g, exactly symmetric, read only; sizes : (g,) items per cell (all 1:
    the n×n problem). solver : "dense", "subspace", "lobpcg" or "arpack" (RCC's eigen_solver,
    "auto" resolved); mu, rho, mu_max, max_iter, tol : RCC's parameters (max_iter ≥ 1); rng
    draws the eigensolvers' random starts. Started from the L2CC solution; each iteration is one
    top-K eigensolve and one fused pass over four g×g arrays (32 g² bytes in all).
    """
    admm = _CellADMM(M, sizes)
    eig_tol = 1e-10  # relative; the iterative solvers get it times ||M̃||_2
    vals, V, F, mu = admm.start(n_clusters, mu, rng, eig_tol)
    d = np.maximum(vals, 0.0)
    # Absolute residual tolerance of the iterative eigensolvers (inexact ADMM): 1e-2 × the last
    # relative change of H D Hᵀ, within [1e-3 tol, 1e-4], times ||M̃||_2. Early, when B moves
    # a lot, a loose solve suffices; near the end it is 1000× below the ADMM's tol.
    lam1 = max(float(vals[0]), 1e-300)
    change = 1.0
    tracker = None
    history = {"objective": [], "residual": [], "change": [], "mu": []}
    converged = False
    # E¹ and B¹ from (H⁰, D⁰); afterwards each pass fuses step 3 of iteration t with
    # steps 1–2 of iteration t+1, so that the four g×g arrays are streamed once per iteration.
    admm.primal(mu)
    for _ in range(max_iter):
        # 2. (H, D)-step on the exactly symmetric S = C^½ B C^½ (in W)
        iter_tol = lam1 * min(_EIGEN_TOL_CAP, max(1e-3 * tol, 0.1 * change))
        vals, V, tracker = _eigen_step(admm.W, V, n_clusters, solver, tracker, rng, iter_tol)
        d = np.maximum(vals, 0.0)
        F_old, F = F, V * np.sqrt(d)[None, :]
        _low_rank_into(F / admm.root[:, None], admm.W)  # W = Lᵗ on the cells
        # 3. dual step (residual, l1 objective), then 1.–2. of the next iteration (W: L → S)
        mu_new = min(rho * mu, mu_max)
        obj, res_sq = admm.dual_and_primal(mu / mu_new, mu_new)
        change = _low_rank_change(F_old, F)
        residual = np.sqrt(res_sq) / admm.m_norm_f
        history["objective"].append(obj)
        history["residual"].append(residual)
        history["change"].append(change)
        history["mu"].append(mu)
        mu = mu_new
        if residual <= tol and change <= tol:
            converged = True
            break
    error = admm.E if keep_error else None
    return RCCResult(V / admm.root[:, None], d, history, converged, error)


class _CellADMM:
    """RCC's ADMM arrays on the g cells: M̃_g (read only), E, the scaled multiplier Λ = Ω / μ
    and the work array W (each g×g float64), and its fused passes over their row blocks."""

    def __init__(self, M: np.ndarray, sizes: np.ndarray):
        self.M = M
        self.count = sizes.astype(np.float64)
        self.root = np.sqrt(self.count)
        self.reduced = bool((sizes > 1).any())
        self.blocks = row_slices(M.shape[0], M.shape[0], _BLOCK_BYTES // 8)
        self.W = np.empty_like(M)

    def _scale(self, b: slice) -> None:
        """W[b] ← C^½ W[b] C^½ (the cells' sizes), when some cell holds several items."""
        if self.reduced:
            self.W[b] *= self.root[b, None] * self.root[None, :]

    def start(self, K: int, mu_rule, rng, eig_tol: float):
        """(H⁰, D⁰) = the L2CC solution (exact, without warm start), from S = C^½ M̃_g C^½ in
        W; then E = Λ = 0, W ← L⁰ on the cells, and μ⁰. Returns (eigenvalues, V, F, μ⁰) with
        F the factor of L in the scaled space: C^½ L_g C^½ = F Fᵀ."""
        M, W, root, blocks = self.M, self.W, self.root, self.blocks
        W[...] = M
        for b in blocks:
            self._scale(b)
        g = M.shape[0]
        vals, V = _top_eigenpairs(
            W, K, "dense" if g <= _DENSE_MAX_N else "arpack", None, rng, eig_tol
        )
        d = np.maximum(vals, 0.0)
        self.m_norm_f = np.sqrt(sum(_weighted_sum(M[b] * M[b], self.count, b) for b in blocks))
        self.E = np.zeros_like(M)
        self.Lam = np.zeros_like(M)  # scaled multiplier Ω / μ
        F = V * np.sqrt(d)[None, :]
        _low_rank_into(F / root[:, None], W)  # W = L⁰ on the cells
        if mu_rule == "spectral":
            spectral = float(vals[0]) if vals[0] > 0 else _spectral_norm(M * np.outer(root, root))
            mu = 1.25 / spectral
        elif mu_rule == "residual":
            max_res = max(float(np.abs(M[b] - W[b]).max()) for b in blocks)
            mu = 1.0 / max(max_res, 1e-12)
        else:
            mu = float(mu_rule)
        return vals, V, F, mu

    def primal(self, mu: float) -> None:
        """Steps 1–2 from W = L: E ← S_{1/μ}(M − L − Λ), then W ← S = C^½ (M − E − Λ) C^½."""
        for b in self.blocks:
            _primal_block(self.M[b], self.E[b], self.Lam[b], self.W[b], 1.0 / mu)
            self._scale(b)

    def dual_and_primal(self, shrink: float, mu_new: float) -> tuple[float, float]:
        """Step 3 from W = L (R = E − M + L, Λ ← (Λ + R)·shrink), then :meth:`primal` at μ_new,
        in one pass. Returns (||M − L||_1, ||R||_F²), both over the n×n arrays."""
        M, E, Lam, W, count = self.M, self.E, self.Lam, self.W, self.count
        res_sq = 0.0
        obj = 0.0
        for b in self.blocks:
            r = E[b] - M[b]
            r += W[b]
            obj += _weighted_sum(np.abs(E[b] - r), count, b)  # M − L = E − R
            res_sq += _weighted_sum(r * r, count, b)
            Lam[b] += r
            if shrink != 1.0:
                Lam[b] *= shrink
            _primal_block(M[b], E[b], Lam[b], W[b], 1.0 / mu_new)
            self._scale(b)
        return obj, res_sq


def _eigen_step(W, V, K, solver, tracker, rng, tol):
    """The (H, D)-step: the top K eigenpairs of W (largest first, signs fixed), warm-started
    from V. Returns (values, vectors, tracker): the subspace solver's tracker carries its basis
    to the next call (None after a fallback to LOBPCG, or for the other solvers)."""
    if solver == "subspace":
        if tracker is None:
            tracker = _SubspaceTracker(V, rng)
        found = tracker.top(W, tol)
        if found is None:  # not converged in its step budget: a full LOBPCG solve
            vals, V = _top_eigenpairs(W, K, "lobpcg", V, rng, tol)
            tracker = None
        else:
            order = np.argsort(found[0])[::-1]
            vals, V = found[0][order], fix_signs(found[1][:, order])
    else:
        vals, V = _top_eigenpairs(W, K, solver, V, rng, tol)
    return vals, V, tracker


def _cell_problem(
    labels: np.ndarray,
    weights,
    normalize: bool | str,
    n_clusters: int,
    max_cells: int | None = None,
    rng: np.random.RandomState | None = None,
    cache: dict | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The fused matrix on the g cells of identical label rows: (cell (n,), sizes (g,), M̃_g
    (g×g), g).

    Items with identical label rows have identical rows and columns in M̃ (and in its degree
    normalisations), so M̃ = P M̃_g Pᵀ with P the n×g cell indicator. Falls back to one cell per
    item when g ≤ n_clusters (K consensus eigenvectors need more than K cells). When g exceeds
    ``max_cells``, the cells are merged into at most ``max_cells`` micro-clusters (seeded from
    ``rng``) and M̃_g is their pair-averaged co-association (reduced.micro_cell_problem); the
    degree normalisation below treats them as cells. ``cache`` (a dict shared by the two fits of
    ``normalize="auto"``, whose seeds are equal) keeps the merge for the other form.
    Cost O(n m log n) for the grouping plus one g×g co-association (G×G when reduced).
    """
    if weights is not None:  # a clustering of weight 0 changes no entry: it must not split cells
        weights = check_weights(weights, labels.shape[1])
        labels, weights = labels[:, weights > 0], weights[weights > 0]
    cell, rows, sizes = coherent_cells(labels)
    g = rows.shape[0]
    if max_cells is not None and g > max_cells:
        seed = int(rng.randint(0, 2**31 - 1))
        if cache is not None and seed in cache:  # normalize="auto": the other form's merge
            cell, sizes, M = cache[seed]
            M = M.copy()
        else:
            cell, sizes, M = micro_cell_problem(
                rows, cell, sizes, weights, max_cells, seed, n_clusters
            )
            if cache is not None:
                cache[seed] = (cell, sizes, M.copy())
    else:
        if g <= n_clusters:
            rows, cell = labels, np.arange(labels.shape[0])
            sizes = np.ones(labels.shape[0], dtype=np.int64)
            g = labels.shape[0]
        M = co_association(rows, weights)
    if normalize:
        degree = M @ sizes.astype(np.float64)  # degree of an item of each cell in the full M̃
        scale = np.zeros_like(degree)
        root_or_not = np.sqrt(degree) if normalize is True else degree
        np.divide(1.0, root_or_not, out=scale, where=degree > 0)
        if normalize == "l1":
            # d̄ D^-1 M̃ D^-1 (d̄ the mean degree) is on the scale of D^-1/2 M̃ D^-1/2: a constant
            # factor leaves the minimiser's H alone, but μ_max is absolute, and on the bare
            # D^-1 M̃ D^-1 (entries ~ 1/d̄²) μ reached it d̄× earlier, leaving the ADMM to crawl
            # at a fixed penalty (300 iterations on pool_mf instead of ~125; rcc_pools.md)
            scale *= np.sqrt(float(degree @ sizes) / float(sizes.sum()))
        M *= scale[:, None]
        M *= scale[None, :]
    return cell, sizes, M, g


def _weighted_sum(block: np.ndarray, count: np.ndarray, rows: slice) -> float:
    """Σ_ab c_a c_b X_ab over one row block of a g×g cell array: the sum over the n×n array it
    stands for. O(block) flops, one matrix-vector product."""
    return float(count[rows] @ (block @ count))


def _spectral_norm(M: np.ndarray) -> float:
    vals = sla.eigh(M, eigvals_only=True) if M.shape[0] <= 500 else None
    if vals is not None:
        return max(float(np.abs(vals).max()), 1e-300)
    return max(float(spla.svds(M, k=1, return_singular_vectors=False)[0]), 1e-300)


def _low_rank_change(G_old: np.ndarray, G_new: np.ndarray) -> float:
    """||G₁G₁ᵀ − G₀G₀ᵀ||_F / ||G₀G₀ᵀ||_F from the n×K factors, in O(n K²)."""
    a = np.linalg.norm(G_new.T @ G_new) ** 2
    b = np.linalg.norm(G_old.T @ G_old) ** 2
    c = np.linalg.norm(G_old.T @ G_new) ** 2
    diff = max(a + b - 2 * c, 0.0)
    return float(np.sqrt(diff) / max(np.sqrt(b), 1e-300))
