"""TRCE — Tri-level Robust Clustering Ensemble with multiple graph learning (seed 000).

P. Zhou, L. Du, Y.-D. Shen, X. Li, AAAI 2021; follows ``shared/specs/trce.md``. Learns a consensus
transition matrix A, a noise E, instance weights w and clustering weights α by block coordinate
descent, every block in closed form or by an exact vectorised routine (the paper's three typos
corrected); the graph of A is pushed to exactly c connected components, which are the clusters.
Missing labels (-1) become singleton clusters in their clustering. ``on_mismatch="repair"``
(default) forces exactly ``n_clusters`` clusters when the components do not match.

Cost per iteration: O(n² (Σ_k c_k + c)) time plus the eigensolver (dense, O(n³)). Memory: about
seven dense float64 n×n arrays, up to 10 at the peak: n = 2,340 → 0.4 GB; n = 10,000 → 8 GB.
Details: docs/algorithms/trce.md.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.sparse.csgraph import connected_components

from adseg.consensus._base import (
    MISSING,
    BaseFuser,
    average_linkage_cut,
    check_flag,
    check_integer,
    check_real,
    missing_as_singletons,
    relabel,
)
from adseg.spectral import assign_labels

_ON_MISMATCH = ("repair", "return", "continue", "spectral")
_EIGEN_SOLVERS = ("auto", "dense", "arpack")
_SPARSE_EIGEN_MIN_N = 1500  # below this LAPACK's dense subset solver is fast enough
_SPARSE_EIGEN_MAX_DENSITY = 0.5  # above this SuperLU's fill-in costs more than dense LAPACK


class TRCE(BaseFuser):
    """Tri-level Robust Clustering Ensemble (Zhou, Du, Shen, Li; AAAI 2021).

    Parameters
    ----------
    n_clusters : int, 1 ≤ n_clusters < n_items
        Number c of consensus clusters = number of connected components the learned graph must have.
    lam : float > 0, default 1e-2
        λ, weight of ‖E‖²_F (the paper's only tuned hyperparameter; good range [1e-2, 1e1]).
        Large λ forbids noise (E → 0, a dense graph, too few components).
    gamma_init : float > 0 or "quantile", default "quantile"
        Initial self-paced age γ. "quantile" (the authors' public code, spec §3.8 R2) sets
        γ = 2·b_(q) in the first iteration with q = max(1, n // max_iter), so the q easiest
        instances start with weight 1: scale-aware, since b grows with the number of clusterings
        and of clusters. 1.0 is the paper's value (spec §6 A1), kept for reproducing it; with it
        most weights start ≪ 1 and the ACC drops on large pools (pool_binalpha 0.22 against
        0.36, see docs/algorithms/trce.md "Default γ initialisation").
    gamma_growth : float ≥ 1, default 1.1
        γ ← gamma_growth·γ after every iteration (more instances become "easy").
    rho_init : float > 0, default 1.0
        Initial rank-penalty weight ρ.
    rho_factor : float > 1, default 2.0
        ρ is multiplied by it when the graph has fewer than c components, divided when more.
    max_iter : int ≥ 1, default 10
        Iterations of the main loop (the public code's 10).
    min_iter : int ≥ 1, default 2
        Earliest iteration at which reaching exactly c components stops the loop.
    on_mismatch : {"repair", "return", "continue", "spectral"}, default "repair"
        What to do when the graph does not have c components after the main loop (spec §3.9).
        "return": the components as they are, with a warning (faithful to the paper; labels may
        then have ≠ n_clusters values). "continue": up to ``repair_iters`` more iterations with γ
        frozen, then as "return". "spectral": force exactly c clusters at once (too few
        components: k-means on the row-normalised c smallest eigenvectors of L; too many: average
        linkage of the components on the α-weighted co-association). "repair": "continue", then
        "spectral" if still needed — always n_clusters clusters.
    repair_iters : int ≥ 0, default 20
        Extra iterations for "continue" / "repair".
    learn_alpha, learn_w, noise : bool, default True
        The paper's Table 4 ablations: learn_alpha=False is TRCE-α (α frozen, see fixed_alpha),
        learn_w=False is TRCE-w (w = 1), noise=False is TRCE-E (E = 0: A ← B after the B-step).
    fixed_alpha : {"m", "one"}, default "m"
        The frozen α when learn_alpha=False: α_k = m (feasible, Σ1/α = 1) or the literal α_k = 1.
    eigen_solver : {"auto", "dense", "arpack"}, default "auto"
        "dense": LAPACK subset solver (deterministic); "arpack": shift-invert Lanczos on the sparse
        Laplacian (deterministic start vector); "auto": arpack when n ≥ 1500 and the learned graph
        has at most 50 % non-zeros (after the first iterations it is much sparser), else dense.
    random_state : int, RandomState or None
        Only used by the spectral fallback's k-means.

    Attributes
    ----------
    labels_ : (n,) int64, clusters 0..z−1 numbered by smallest member index.
    graph_ : scipy.sparse.csr_matrix (n, n), the learned clean consensus A (rows sum to 1; an
        item labelled in no clustering has an empty row: it joins the largest cluster).
    instance_weights_ : (n,) float, w (0 for an item labelled in no clustering: not fitted).
    clustering_weights_ : (m,) float, α (Σ 1/α_k = 1).
    n_components_ : int, connected components of the final graph (before any fallback).
    labels_path_ : str, "components" (the graph had c components), "components-after-repair"
        (after the extra iterations), "spectral" / "merged" (forced by the fallback) or
        "mismatch" (returned as is, ≠ c clusters).
    rho_, gamma_ : float, final ρ and γ.  n_iter_ : int, iterations run (repair ones included).
    noise_norm_ : float, ‖E‖_F = ‖B − A‖_F at the end.
    history_ : list of dict (iteration, n_components, rho, gamma, objective J4).
    """

    def __init__(
        self,
        n_clusters: int = 2,
        *,
        lam: float = 1e-2,
        gamma_init: float | str = "quantile",
        gamma_growth: float = 1.1,
        rho_init: float = 1.0,
        rho_factor: float = 2.0,
        max_iter: int = 10,
        min_iter: int = 2,
        on_mismatch: str = "repair",
        repair_iters: int = 20,
        learn_alpha: bool = True,
        learn_w: bool = True,
        noise: bool = True,
        fixed_alpha: str = "m",
        eigen_solver: str = "auto",
        random_state=None,
    ):
        self.n_clusters = n_clusters
        self.lam = lam
        self.gamma_init = gamma_init
        self.gamma_growth = gamma_growth
        self.rho_init = rho_init
        self.rho_factor = rho_factor
        self.max_iter = max_iter
        self.min_iter = min_iter
        self.on_mismatch = on_mismatch
        self.repair_iters = repair_iters
        self.learn_alpha = learn_alpha
        self.learn_w = learn_w
        self.noise = noise
        self.fixed_alpha = fixed_alpha
        self.eigen_solver = eigen_solver
        self.random_state = random_state

    # ------------------------------------------------------------------ validation
    def _check_params(self, n: int) -> None:
        check_real("lam", self.lam)
        if isinstance(self.gamma_init, str):
            if self.gamma_init != "quantile":
                raise ValueError(f"gamma_init must be > 0 or 'quantile'; got {self.gamma_init!r}.")
        else:
            check_real("gamma_init", self.gamma_init)
        check_real("gamma_growth", self.gamma_growth)
        if self.gamma_growth < 1:
            raise ValueError(f"gamma_growth must be ≥ 1; got {self.gamma_growth}.")
        check_real("rho_init", self.rho_init)
        check_real("rho_factor", self.rho_factor)
        if self.rho_factor <= 1:
            raise ValueError(f"rho_factor must be > 1; got {self.rho_factor}.")
        check_integer("max_iter", self.max_iter, 1)
        check_integer("min_iter", self.min_iter, 1)
        check_integer("repair_iters", self.repair_iters, 0)
        for flag in ("learn_alpha", "learn_w", "noise"):
            check_flag(flag, getattr(self, flag))
        if self.on_mismatch not in _ON_MISMATCH:
            raise ValueError(
                f"on_mismatch must be one of {_ON_MISMATCH}; got {self.on_mismatch!r}."
            )
        if self.fixed_alpha not in ("m", "one"):
            raise ValueError(f"fixed_alpha must be 'm' or 'one'; got {self.fixed_alpha!r}.")
        if self.eigen_solver not in _EIGEN_SOLVERS:
            raise ValueError(
                f"eigen_solver must be one of {_EIGEN_SOLVERS}; got {self.eigen_solver!r}."
            )
        if self.n_clusters >= n:
            raise ValueError(
                f"n_clusters must be smaller than n_items={n} for TRCE; got {self.n_clusters}."
            )

    # ------------------------------------------------------------------ fit
    def _fit(self, labels: np.ndarray) -> None:
        """Fit on the items some clustering labels; the rest join the largest cluster. An item
        labelled in no clustering is a singleton in every one (``missing_as_singletons``), so
        the learned graph left it a component of its own, each taking one of the c clusters and
        forcing real ones to merge (two such items among 3 clean clusters of 10 merged two of
        them). It carries no evidence; the largest cluster is the likeliest home."""
        covered = (labels != MISSING).any(axis=1)
        if covered.all() or int(covered.sum()) <= int(self.n_clusters):
            self._fit_covered(labels)
            return
        self._fit_covered(labels[covered])  # it checks the parameters
        inside = self.labels_
        full = np.full(labels.shape[0], np.bincount(inside).argmax(), dtype=np.int64)
        full[covered] = inside
        self.labels_ = relabel(full.reshape(-1, 1)).ravel()
        index = np.flatnonzero(covered)
        graph = self.graph_.tocoo()
        n = labels.shape[0]
        self.graph_ = sp.csr_matrix(
            (graph.data, (index[graph.row], index[graph.col])), shape=(n, n)
        )
        weights = np.zeros(n)
        weights[covered] = self.instance_weights_
        self.instance_weights_ = weights

    def _fit_covered(self, labels: np.ndarray) -> None:
        labels = missing_as_singletons(labels)
        n, m = labels.shape
        self._check_params(n)
        c = int(self.n_clusters)
        base = _BaseGraphs.from_labels(labels)
        state, history = self._start(base, n, m, c), []
        t = 0
        for t in range(1, int(self.max_iter) + 1):
            state = self._iterate(base, state, t, c, history)
            if state.z == c and t >= self.min_iter:
                break
            state.gamma *= self.gamma_growth
        path = "components"
        if state.z != c and self.on_mismatch in ("continue", "repair"):
            path = "components-after-repair"
            for _ in range(int(self.repair_iters)):
                if state.z == c:
                    break
                t += 1
                state = self._iterate(base, state, t, c, history)
        self.n_components_ = int(state.z)
        self.labels_, self.labels_path_ = self._final_labels(base, state, c, path)
        self.graph_ = sp.csr_matrix(state.A)
        self.instance_weights_ = state.w
        self.clustering_weights_ = state.alpha
        self.rho_ = state.rho
        self.gamma_ = state.gamma
        self.n_iter_ = t
        self.noise_norm_ = float(np.linalg.norm(state.B - state.A))
        self.history_ = history

    def _start(self, base: _BaseGraphs, n: int, m: int, c: int) -> _State:
        """§3.0: A = B = A⁰ (E = 0), α_k = m, F from L(A⁰), γ and ρ at their starts."""
        alpha = np.full(m, float(m))
        if not self.learn_alpha and self.fixed_alpha == "one":
            alpha = np.ones(m)
        B = base.weighted(np.ones(m)) / m
        A = B.copy()
        _, F = _smallest_eigenpairs(_laplacian(A), c, self.eigen_solver)
        gamma = None if self.gamma_init == "quantile" else float(self.gamma_init)
        return _State(
            A, B, np.ones(n), base.kl_rows(B), alpha, F[:, :c], gamma, float(self.rho_init), -1
        )

    def _iterate(self, base: _BaseGraphs, s: _State, t: int, c: int, history: list) -> _State:
        """One iteration of Algorithm 1 (w-, B-, A-, F-, α-steps, then the ρ rule); appends
        to ``history``. ``s.d`` holds the KL terms of the current B, so the w-step needs no
        extra pass over n × n."""
        n = s.w.size
        b = s.d @ s.alpha
        gamma = s.gamma
        if gamma is None:  # "quantile" start (spec §3.8 R2), decided on the first b
            q = max(1, min(n // int(self.max_iter), n))
            gamma = float(2.0 * np.sort(b)[q - 1])
            if gamma <= 0:  # every instance already agrees perfectly
                gamma = 1.0
        w = w_step(b, gamma) if self.learn_w else np.ones(n)
        G = sqdist_rows(s.F)
        H = base.weighted(s.alpha)
        H *= (w**2)[:, None]
        B, _ = solve_b(H, G, s.rho)
        del H
        A = project_simplex_rows(B - (s.rho / (2.0 * self.lam)) * G) if self.noise else B
        _, F_new = _smallest_eigenpairs(_laplacian(A), c, self.eigen_solver)
        d_new = base.kl_rows(B)
        alpha = alpha_step((w**2) @ d_new) if self.learn_alpha else s.alpha
        z = count_components(A)
        objective = _objective(d_new, alpha, w, gamma, self.lam, B, A, G, s.rho)
        F_next, rho = F_new[:, :c], s.rho
        if z < c:
            rho *= self.rho_factor
        elif z > c:
            rho /= self.rho_factor
            F_next = s.F  # CAN convention: keep the previous embedding when halving
        history.append(dict(iteration=t, n_components=z, rho=rho, gamma=gamma, objective=objective))
        return _State(A, B, w, d_new, alpha, F_next, gamma, rho, z)

    def _final_labels(self, base: _BaseGraphs, s: _State, c: int, path: str):
        """(labels, path): the components of A when there are c of them; else as
        ``on_mismatch`` says (spec §3.9): forced to c clusters or returned with a warning."""
        comp = count_components(s.A, return_labels=True)[1]
        if s.z == c:
            return comp, path
        if self.on_mismatch not in ("spectral", "repair"):
            warnings.warn(
                f"TRCE: the learned graph has {s.z} connected components, not n_clusters={c} "
                f"(lam={self.lam}); returning the components as they are.",
                RuntimeWarning,
                stacklevel=4,
            )
            return comp, "mismatch"
        if s.z < c:
            _, F_final = _smallest_eigenpairs(_laplacian(s.A), c, self.eigen_solver)
            out = assign_labels(F_final[:, :c], c, method="kmeans", random_state=self._rng)
            path = "spectral"
        else:
            out = _merge_components(comp, base.weighted(s.alpha), c)
            path = "merged"
        return relabel(out.reshape(-1, 1)).ravel(), path


@dataclass
class _State:
    """One TRCE iterate: the graphs A and B (n, n), instance weights w (n,), the KL terms d
    (n, m) of B, clustering weights α (m,), the embedding F (n, c), γ (None until the
    quantile start sets it), ρ, and the number z of components of A (-1 before the first)."""

    A: np.ndarray
    B: np.ndarray
    w: np.ndarray
    d: np.ndarray
    alpha: np.ndarray
    F: np.ndarray
    gamma: float | None
    rho: float
    z: int


# ---------------------------------------------------------------------- base graphs


@dataclass(frozen=True)
class _BaseGraphs:
    """The m base transition matrices A^(k), held implicitly by the one-hot incidence.

    onehot : (n, K) dense 0/1, K = Σ_k c_k columns, clustering by clustering.
    col : (n, m) int, the column of item i's cluster in clustering k.
    sizes : (n, m) float, s_k(i) = size of that cluster (≥ 1).
    owner : (K,) int, the clustering each column belongs to; col_size : (K,) its size.
    Memory O(n K); never an n×n×m array.
    """

    onehot: np.ndarray
    col: np.ndarray
    sizes: np.ndarray
    owner: np.ndarray
    col_size: np.ndarray

    @classmethod
    def from_labels(cls, labels: np.ndarray) -> _BaseGraphs:
        lab = relabel(labels)
        n, m = lab.shape
        k = lab.max(axis=0) + 1
        offsets = np.concatenate([[0], np.cumsum(k)[:-1]])
        col = lab + offsets[None, :]
        n_cols = int(k.sum())
        onehot = np.zeros((n, n_cols))
        onehot[np.repeat(np.arange(n), m), col.ravel()] = 1.0
        col_size = onehot.sum(axis=0)
        owner = np.repeat(np.arange(m), k)
        return cls(onehot, col, col_size[col], owner, col_size)

    def weighted(self, alpha: np.ndarray) -> np.ndarray:
        """M(α) = Σ_k α_k A^(k), dense (n, n), symmetric, support Ω. One GEMM, O(n² K)."""
        scale = alpha[self.owner] / self.col_size
        return (self.onehot * scale[None, :]) @ self.onehot.T

    def kl_rows(self, B: np.ndarray) -> np.ndarray:
        """d (n, m): d_ik = KL(A^(k)_i ‖ B_i) = −log s_k(i) − (1/s_k(i)) Σ_{j∈C_k(i)} log B_ij.

        One product log(B) · onehot (O(n² K)); log B is clamped at 1e-300 so entries outside the
        support (never gathered) stay finite."""
        R = np.log(np.maximum(B, 1e-300)) @ self.onehot
        n = B.shape[0]
        gathered = R[np.arange(n)[:, None], self.col]
        return -np.log(self.sizes) - gathered / self.sizes


# ---------------------------------------------------------------------- per-step solvers


def w_step(b: np.ndarray, gamma: float) -> np.ndarray:
    """Self-paced weights (spec §3.1): argmin_{0≤w≤1} w² b_i − γ w = min(γ / 2b_i, 1), and 1 when
    2b_i ≤ γ (which covers b_i ≤ 0). Shape (n,) → (n,)."""
    b = np.asarray(b, dtype=np.float64)
    out = np.ones_like(b)
    hard = 2.0 * b > gamma
    out[hard] = gamma / (2.0 * b[hard])
    return out


def sqdist_rows(F: np.ndarray) -> np.ndarray:
    """G_ij = ‖F_i − F_j‖² (n, n), clipped at 0 with a zero diagonal. O(n² c)."""
    sq = np.einsum("ij,ij->i", F, F)
    G = sq[:, None] + sq[None, :] - 2.0 * (F @ F.T)
    np.maximum(G, 0.0, out=G)
    np.fill_diagonal(G, 0.0)
    return G


def solve_b(
    H: np.ndarray, G: np.ndarray, rho: float, *, tol: float = 1e-12, max_iter: int = 100
) -> tuple[np.ndarray, np.ndarray]:
    """B-step (spec §3.2): per row, min −Σ_j H_ij log B_ij + ρ Σ_j G_ij B_ij over the simplex.

    B_ij = H_ij / (ρ G_ij + θ_i), θ_i the unique root of φ_i(θ) = Σ_j H_ij / (ρ G_ij + θ) = 1,
    inside [max(H_ii, h_i − ρ g_i), h_i] (h_i = Σ_j H_ij, g_i = max of G over the row's support).
    Newton's method is applied to ψ(θ) = 1/φ(θ) − 1, which is increasing and concave (1/φ is a
    "parallel sum" of affine functions of θ) and exactly affine when a row has a single distinct
    G value, so from the left end of the bracket the iterates increase monotonically to the root
    and far fewer steps are needed than for φ − 1 itself (whose Newton steps only double θ when
    started far left). A bisection safeguard keeps every iterate inside the shrinking bracket.
    All rows at once (only unconverged rows are recomputed).
    H (n, n) ≥ 0 with H_ii > 0, G (n, n) ≥ 0 with zero diagonal.
    Returns (B (n, n), θ (n,)). Time O(n² · Newton iterations); one n×n temporary per pass.
    """
    H = np.asarray(H, dtype=np.float64)
    h = H.sum(axis=1)
    if rho == 0:
        return H / h[:, None], h.copy()
    g = np.where(H > 0, G, 0.0).max(axis=1)
    lo = np.maximum(np.diag(H).copy(), h - rho * g)
    hi = h.copy()
    theta = lo.copy()
    active = np.nonzero(g > 0)[0]
    theta[g <= 0] = h[g <= 0]  # G ≡ 0 on the support: B_i = H_i / h_i
    for _ in range(max_iter):
        if active.size == 0:
            break
        th = theta[active]
        denom = rho * G[active] + th[:, None]
        q = H[active] / denom
        phi = q.sum(axis=1)
        dphi = (q / denom).sum(axis=1)  # −φ'(θ) > 0
        res = phi - 1.0
        lo_a = np.where(res > 0, th, lo[active])
        hi_a = np.where(res < 0, th, hi[active])
        step = phi * res / dphi  # Newton on 1/φ − 1 (see above)
        new = th + step
        outside = (new <= lo_a) | (new >= hi_a)
        new = np.where(outside, 0.5 * (lo_a + hi_a), new)
        lo[active], hi[active], theta[active] = lo_a, hi_a, new
        done = (np.abs(res) <= tol) | (np.abs(step) <= 1e-15 * th) | (hi_a - lo_a <= 1e-15 * th)
        theta[active[done]] = th[done]  # keep the iterate whose residual was checked
        active = active[~done]
    B = H / (rho * G + theta[:, None])
    B /= B.sum(axis=1, keepdims=True)  # absorbs round-off (< 1e-12)
    return B, theta


def project_simplex_rows(V: np.ndarray) -> np.ndarray:
    """Euclidean projection of every row of V (r, n) onto the probability simplex (spec §3.3):
    A_ij = max(V_ij − τ_i, 0) with τ_i such that rows sum to 1.

    Michelot's algorithm, vectorised over rows: τ = (Σ_{active} v − 1) / |active|, drop the
    coordinates ≤ τ, repeat until no coordinate drops (exact after finitely many passes, at most
    n; a few in practice). Each pass is O(r n) on the unfinished rows.
    """
    V = np.asarray(V, dtype=np.float64)
    r, n = V.shape
    tau = (V.sum(axis=1) - 1.0) / n
    rows = np.arange(r)
    for _ in range(n + 1):
        if rows.size == 0:
            break
        Vr = V[rows]
        mask = Vr > tau[rows, None]
        count = mask.sum(axis=1)
        new_tau = (np.where(mask, Vr, 0.0).sum(axis=1) - 1.0) / count
        # τ only increases; a row is final when no further coordinate falls to or below it.
        stable = ~np.any(mask & (Vr <= new_tau[:, None]), axis=1)
        tau[rows] = new_tau
        rows = rows[~stable]
    return np.maximum(V - tau[:, None], 0.0)


def alpha_step(o: np.ndarray) -> np.ndarray:
    """Clustering weights (spec §3.6): argmin Σ α_k o_k s.t. Σ 1/α_k = 1 → α_k = Σ_l √o_l / √o_k.

    All o_k = 0 (every clustering agrees with B) → α_k = m; tiny o_k are floored at 1e-16·max."""
    o = np.asarray(o, dtype=np.float64)
    m = o.size
    top = o.max() if m else 0.0
    if not top > 0:
        return np.full(m, float(m))
    root = np.sqrt(np.maximum(o, 1e-16 * top))
    return root.sum() / root


def _laplacian(A: np.ndarray) -> np.ndarray:
    """L = diag(W1) − W with W = (A + Aᵀ)/2, dense (n, n)."""
    L = -0.5 * (A + A.T)
    L[np.diag_indices_from(L)] -= L.sum(axis=1)
    return L


def _smallest_eigenpairs(L: np.ndarray, c: int, solver) -> tuple[np.ndarray, np.ndarray]:
    """The c + 1 smallest eigenpairs of the Laplacian (ascending): values (c+1,), vectors (n, c+1).

    solver "dense" (or True): LAPACK subset solver, O(n³) but deterministic. "arpack" (or False):
    ARPACK shift-invert just below 0 on the sparse L (A is sparse after the projection; SuperLU
    factorisation), with a deterministic start vector. "auto": arpack for n ≥ 1500 when L has at
    most 50 % non-zeros."""
    n = L.shape[0]
    k = min(c + 1, n)
    if solver == "auto":
        sparse_ok = n >= _SPARSE_EIGEN_MIN_N
        if sparse_ok:
            Ls = sp.csr_matrix(L)
            sparse_ok = Ls.nnz <= _SPARSE_EIGEN_MAX_DENSITY * n * n
        solver = "arpack" if sparse_ok else "dense"
    if solver in ("dense", True) or k >= n - 1:
        return sla.eigh(L, subset_by_index=(0, k - 1), driver="evr")
    Ls = sp.csr_matrix(L)
    v0 = np.linspace(1.0, 2.0, n)
    vals, vecs = spla.eigsh(Ls, k=k, sigma=-1e-6, which="LM", v0=v0, tol=1e-10)
    order = np.argsort(vals)
    return vals[order], vecs[:, order]


def count_components(A: np.ndarray, *, return_labels: bool = False):
    """Connected components of the undirected graph with edge (i, j) iff A_ij + A_ji > 0.

    Labels are numbered by smallest member index (scipy visits nodes in order). O(n²) to build the
    sparse graph from the dense A."""
    graph = sp.csr_matrix((A + A.T) > 0)
    z, lab = connected_components(graph, directed=False)
    return (z, lab.astype(np.int64)) if return_labels else z


def _objective(d, alpha, w, gamma, lam, B, A, G, rho) -> float:
    """J4 = Σ_k α_k Σ_i w_i² d_ik + λ‖B − A‖² − γ Σ w + ρ Σ_ij G_ij A_ij (spec §2.2)."""
    return float(
        (w**2) @ d @ alpha + lam * np.sum((B - A) ** 2) - gamma * w.sum() + rho * np.sum(G * A)
    )


def _merge_components(comp: np.ndarray, M: np.ndarray, c: int) -> np.ndarray:
    """Too many components: average linkage of the components (each one point) on the mean
    co-association between them, 1 − C_PQ / max C as distance, cut at exactly c clusters.
    comp (n,) in 0..z−1, M (n, n) co-association. O(n² + z²) time, z×z memory."""
    from scipy.spatial.distance import squareform

    z = int(comp.max()) + 1
    Z = sp.csr_matrix((np.ones(comp.size), (np.arange(comp.size), comp)), shape=(comp.size, z))
    sizes = np.asarray(Z.sum(axis=0)).ravel()
    C = np.asarray(Z.T @ (Z.T @ M).T) / np.outer(sizes, sizes)
    top = C.max()
    D = 1.0 - C / top if top > 0 else np.ones_like(C)
    D = 0.5 * (D + D.T)
    np.fill_diagonal(D, 0.0)
    np.maximum(D, 0.0, out=D)
    return average_linkage_cut(squareform(D, checks=False), c)[comp]
