"""SCCBG (a.k.a. SPCC): self-paced consensus clustering on the instance–cluster bipartite graph.

Zhou, Du, Li, IJCAI 2020; follows ``shared/specs/sccbg.md``. Learns a bipartite graph S and entry
reliabilities W (n × k, k = Σ_b k_b input clusters) from the one-hot incidence Y of the base
clusterings, with a self-paced λ doubling each outer iteration and ρ adapted until the graph has
exactly c connected components, which are the labels. γ is picked from ``gamma_grid`` by the
highest ANMI with the base clusterings (``gamma="auto"``); ``learn_weights=False`` is SCCBG-W.
Missing labels (-1) are supported.

The result is deterministic for a given item order but not exactly equivariant to reordering
items or columns: on weakly structured input, or while the graph has c + 1 or more components,
other orders can reach other local optima. Cost: O(n_iter · (T_W + T_S + 1) · u k²) time on the
u ≤ n distinct label rows, 5 u × k float64 arrays plus k × k and a row block's working arrays
per thread, no n × n array; with ``sparse`` on (large inputs), an S-sweep or spectral step on an
S with nnz(S) < 3 % of u·k costs O(nnz(S)·k + u k) instead of O(u k²). ``n_jobs`` threads solve
the row blocks side by side. Implementation choices and measurements: docs/algorithms/sccbg.md.
"""

from __future__ import annotations

import numbers

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.sparse.csgraph import connected_components
from sklearn.cluster import KMeans

from adseg.consensus._base import (
    MISSING,
    BaseFuser,
    average_nmi,
    check_flag,
    check_integer,
    check_real,
    map_threads,
    relabel,
    resolve_threads,
)
from adseg.consensus._sccbg_labels import _merge_components, _renumber, _split_to
from adseg.consensus._sccbg_sweeps import (
    _coupling,
    _max_sq_diff,
    _row_blocks,
    _running_min,
    _s_sweeps,
    _s_sweeps_sparse,
    _s_sweeps_weighted,
    dense_to_csr,
    w_step,
)

DEFAULT_GAMMA_GRID = (1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)
_DEG_EPS = 1e-12
# u·k (distinct rows × input clusters) from which ``sparse="auto"`` lets the W ≡ 1 S-sweeps and
# the spectral step use sparse products once S is mostly exact zeros; smaller inputs keep the
# dense path unchanged
SPARSE_WORK = 5_000_000
# the float32 sweeps of an S-step run until every row moves less than this, then the float64
# ones to ``inner_tol``. An entry inside (0, 1) has terms of order 1, which float32 resolves to
# ~1e-7, so this is well above float32's rounding; lower, fewer float64 sweeps are needed
COARSE_TOL = 1e-5
# nonzero share of S below which the sparse path is taken (dense float32 GEMMs win above it)
SPARSE_DENSITY = 0.03


def young_relaxation(C_off: np.ndarray, gamma: float) -> float:
    """Young's over-relaxation ω = 2 / (1 + √(1 − ρ_J²)) for the W ≡ 1 S-step, ρ_J the spectral
    radius of its Jacobi iteration matrix 4γ D^{-1/2} C_off D^{-1/2}, D = 2 + 4γ C_off 1
    (C_off ≥ 0 and symmetric, so ρ_J is its Perron root; ρ_J < 1 always). Optimal for consistently
    ordered systems; here a well-founded default (the box constraints and W ≠ 1 perturb it).
    Clipped to [1, 1.95]. Cost: a few ARPACK matvecs on the k × k matrix."""
    k = C_off.shape[0]
    if gamma <= 0 or k < 2 or not C_off.any():
        return 1.0
    scale = 1.0 / np.sqrt(2.0 + 4.0 * gamma * C_off.sum(axis=0))
    A = (4.0 * gamma) * C_off * scale[:, None] * scale[None, :]
    if k <= 64:
        rho_j = float(np.abs(np.linalg.eigvalsh(A)).max())
    else:
        v0 = np.sqrt(C_off.sum(axis=0) + 1.0)  # near the Perron vector
        rho_j = float(abs(spla.eigsh(A, k=1, which="LM", v0=v0, tol=1e-4)[0][0]))
    rho_j = min(rho_j, 1.0 - 1e-12)
    return float(np.clip(2.0 / (1.0 + np.sqrt(1.0 - rho_j**2)), 1.0, 1.95))


def membership_matrix(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense one-hot Y (n × k, float64) of validated labels, blocks in clustering order, labels
    sorted within a block; missing (-1) entries give no one. Also returns ``block`` (k,): the base
    clustering of each column. Memory n × k float64."""
    n, m = labels.shape
    blocks, ones = [], []
    k = 0
    for b in range(m):  # loop over clusterings (few): each one's column of every labelled item
        col = labels[:, b]
        ok = col != MISSING
        values, inverse = np.unique(col[ok], return_inverse=True)
        ones.append((np.nonzero(ok)[0], k + inverse))
        blocks.append(np.full(values.size, b))
        k += values.size
    Y = np.zeros((n, k))
    for rows, columns in ones:  # loop over clusterings (few)
        Y[rows, columns] = 1.0
    return Y, np.concatenate(blocks)


def _coupling_counts(Y: np.ndarray, mult: np.ndarray, threads: int = 1) -> np.ndarray:
    """C_off (k × k): C = Yᵀ diag(mult) Y, the items two input clusters share, with a zero
    diagonal. A sparse product of the one-hot Y (integer counts: exact). O(u m² + k²)."""
    Ysp = dense_to_csr(Y, threads)
    C_off = np.ascontiguousarray((Ysp.T @ sp.diags(mult) @ Ysp).toarray())
    np.fill_diagonal(C_off, 0.0)
    return C_off


def phi(S: np.ndarray, W: np.ndarray, C: np.ndarray, mult: np.ndarray | None = None) -> float:
    """Φ(S,W) = Σ_i Σ_pq C_pq (S_ip − S_iq)² W_ip W_iq in O(n k²) (spec §2.2), rows weighted by
    ``mult``."""
    mult = np.ones(S.shape[0]) if mult is None else mult
    SW = S * W
    per_row = 2.0 * np.einsum("ip,ip->i", S * SW, W @ C) - 2.0 * np.einsum("ip,ip->i", SW, SW @ C)
    return float(mult @ per_row)


def spectral(
    S: np.ndarray, mult: np.ndarray, n_vectors: int, sparse: bool = False, threads: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Top ``n_vectors`` singular triplets of Ŝ = D_u^{-1/2} S D_v^{-1/2} (spec §3.2), where rows
    of S stand for ``mult`` identical instances each.

    Returns (σ (n_vectors,), U (u × n_vectors), V (k × n_vectors), du (u,), dv (k,)); σ beyond
    the rank are 0. Via the k × k Gram matrix, summed over row blocks of about
    ``ROW_BLOCK_VALUES`` entries: O(u k² + k³) time, no u × k temporary (a block's per thread).
    ``sparse``: when fewer than ``SPARSE_DENSITY`` of S's entries are non-zero, Ŝ is held as CSR
    and the Gram matrix and U = Ŝ V Σ⁻¹ are sparse products: O(Σ_i nnz(S_i)² + nnz(S)·n_vectors
    + k³) time, O(nnz(S) + u·n_vectors) memory. Same quantities; rounding differs.
    ``threads``: the row blocks go on that many threads (the same values for any ``threads``).
    """
    u, k = S.shape
    row_blocks = _row_blocks(S.shape)
    if sparse:  # the density test, only where the sparse form may be taken
        nnz = sum(map_threads(lambda rows: np.count_nonzero(S[rows] != 0), row_blocks, threads))
        sparse = nnz < SPARSE_DENSITY * S.size
    if sparse:
        Ssp = dense_to_csr(S, threads)
        du = np.asarray(Ssp.sum(axis=1)).ravel()
        dv = Ssp.T @ mult
        su = 1.0 / np.sqrt(np.maximum(du, _DEG_EPS))
        sv = 1.0 / np.sqrt(np.maximum(dv, _DEG_EPS))
        X = sp.diags(np.sqrt(mult) * su) @ Ssp @ sp.diags(sv)
        gram = (X.T @ X).toarray()
        del X
    else:
        du = np.concatenate(map_threads(lambda rows: S[rows].sum(axis=1), row_blocks, threads))
        dv = sum(map_threads(lambda rows: mult[rows] @ S[rows], row_blocks, threads))
        su = 1.0 / np.sqrt(np.maximum(du, _DEG_EPS))
        sv = 1.0 / np.sqrt(np.maximum(dv, _DEG_EPS))
        # Ŝᵀ diag(mult) Ŝ = diag(sv) Sᵀ diag(mult su²) S diag(sv): one pass per row block
        # to weight its rows, one SYRK, and the column scaling on the k × k sum
        root = np.sqrt(mult) * su

        def gram_of(rows) -> np.ndarray:  # XᵀX of a row block of X = diag(√mult su) S
            X = S[rows] * root[rows, None]
            return X.T @ X

        gram = sum(map_threads(gram_of, row_blocks, threads))
        gram *= sv[:, None]
        gram *= sv[None, :]
        Ssp = None
    r = min(n_vectors, k)
    vals, vecs = sla.eigh(gram, subset_by_index=(k - r, k - 1))
    vals, vecs = vals[::-1], vecs[:, ::-1]
    sig = np.sqrt(np.clip(vals, 0.0, None))
    # The Gram route squares σ; σ ≤ 1 holds exactly in theory, so clip the rounding above 1.
    sig = np.minimum(sig, 1.0)
    # U = Ŝ V Σ⁻¹ = diag(su) S (diag(sv) V Σ⁻¹), a product per row block (0 where σ = 0)
    nz = sig > 1e-10
    right = sv[:, None] * vecs
    right[:, nz] /= sig[nz]
    right[:, ~nz] = 0.0
    U = np.empty((u, r))

    def left_vectors(rows) -> None:
        np.multiply((S[rows] if Ssp is None else Ssp[rows]) @ right, su[rows, None], out=U[rows])

    map_threads(left_vectors, row_blocks, threads)
    if r < n_vectors:
        pad = n_vectors - r
        sig = np.concatenate([sig, np.zeros(pad)])
        U = np.hstack([U, np.zeros((u, pad))])
        vecs = np.hstack([vecs, np.zeros((k, pad))])
    return sig, U, vecs, du, dv


def h_matrix(
    U: np.ndarray,
    V: np.ndarray,
    du: np.ndarray,
    dv: np.ndarray,
    threads: int = 1,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """H_ij = ½‖a_i − b_j‖², a = U/√du, b = V/√dv (spec §3.2): the linear coefficient of S in the
    rank term, Σ S⊙H = c − Σσ_i. One GEMM of the augmented rows [a_i, ½‖a_i‖², 1] and
    [−b_j, 1, ½‖b_j‖²] (inner size c + 2) gives ½‖a_i‖² + ½‖b_j‖² − a_i·b_j, clipped at 0 in
    place: a row block at a time on ``threads`` threads, one u × k array (``out`` if given: the
    last H, whose pages are then not allocated and faulted in again) and no u × k temporary.
    O(u k c) time."""
    c = U.shape[1]
    b = V / np.sqrt(np.maximum(dv, _DEG_EPS))[:, None]
    right = np.hstack([-b, np.ones((b.shape[0], 1)), 0.5 * (b * b).sum(1)[:, None]]).T.copy()
    H = np.empty((U.shape[0], b.shape[0])) if out is None else out

    def finish(rows) -> None:  # H = max(½‖a‖² + ½‖b‖² − a bᵀ, 0) on a row block
        left = np.empty((rows.stop - rows.start, c + 2))
        a = left[:, :c]
        np.divide(U[rows], np.sqrt(np.maximum(du[rows], _DEG_EPS))[:, None], out=a)
        left[:, c] = 0.5 * np.einsum("ij,ij->i", a, a)
        left[:, c + 1] = 1.0
        np.matmul(left, right, out=H[rows])
        np.maximum(H[rows], 0.0, out=H[rows])

    map_threads(finish, _row_blocks(H.shape), threads)
    return H


def _relative_change(sums: np.ndarray, mult: np.ndarray) -> float:
    """‖S − S_prev‖_F / ‖S_prev‖_F over the rows weighted by ``mult`` (floored at 1e-12), from
    the per-row sums (2, u) that :func:`s_step` fills in: S_prev² and (S − S_prev)²."""
    return float(np.sqrt(mult @ sums[1]) / max(np.sqrt(mult @ sums[0]), 1e-12))


def objective(S, W, Y, C, lam, gamma, rho, H, mult=None) -> float:
    """J(S, W) of Eq. 8 with the rank term written Σ S⊙H (H from the current F), rows weighted by
    ``mult``. Only for diagnostics and tests."""
    mult = np.ones(S.shape[0]) if mult is None else mult
    fit = mult @ ((W * (S - Y)) ** 2).sum(1) - lam * (mult @ W.sum(1))
    return float(fit + gamma * phi(S, W, C, mult) + rho * (mult @ (S * H).sum(1)))


def s_step(
    S,
    W,
    Y,
    C_off,
    blocks,
    gamma,
    rho,
    H,
    *,
    weights_are_one=False,
    tol=1e-6,
    max_sweeps=100,
    omega=1.0,
    coarse_tol=None,
    sparse=False,
    threads=1,
    change=None,
) -> tuple[np.ndarray, int]:
    """Paper Eq. 12 (spec §3.3): exact block coordinate descent on the convex box QPs of all rows
    at once, warm-started from S (modified in place and returned with the sweep count).

    ``weights_are_one`` (W ≡ 1; W may then be None) saves one GEMM per block: Σ_q C_pq W_iq is
    then a constant row.
    ``omega`` in (0, 2) over-relaxes each coordinate step (projected SOR, Cryer 1971): the same
    unique minimiser (the problem is convex), every step still decreases the objective, and far
    fewer sweeps when γ makes the coupling dominate the diagonal. Each row stops on its own (its
    largest change in a sweep below ``tol``); later sweeps only touch the rows still moving.

    ``coarse_tol`` (> tol) runs the first sweeps in float32 (GEMMs at twice the float64 rate)
    until every row moves less than ``coarse_tol``, then finishes in float64 to ``tol``: the
    float64 sweeps decide convergence, so the result meets the same stopping rule and the
    minimiser is the same (the problem is convex); only the path to it changes.

    The rows go in blocks of about ``ROW_BLOCK_VALUES`` entries, each solved on its own;
    ``threads`` > 1 solves the blocks on that many threads (the same values to the bit).
    ``change`` (2, u), if given, receives each row's Σ_j S_ij² before the step and
    Σ_j (ΔS_ij)² over it (a block's copy of S at a time, not u × k).

    ``sparse`` (W ≡ 1): in a row block where fewer than ``SPARSE_DENSITY`` of S's entries are
    non-zero (the clipping makes exact zeros; late in a run ~1 % remain), all sweeps run in
    float64 with the coupling products from sparse copies of S: O(nnz(S)·k + u k) per sweep
    instead of O(u k²), or, when ρ is large enough for a bound to rule out most entries, on the
    remaining candidate entries only (``_s_sweeps_sparse``; the same values). Same stopping
    rule, same minimiser; the rounding (summation order) differs from the dense GEMM's. Cost
    otherwise O(u k²) per sweep; memory a few u × k arrays, and a block's working arrays per
    thread (float32 copies when ``coarse_tol`` is set).
    """
    coarse = coarse_tol is not None and coarse_tol > tol
    if weights_are_one:  # the sweeps' k × k matrix: A = 4γ C_off/den, or C_off with W ≠ 1
        coupling = _coupling(C_off, gamma)
        matrix = coupling[1]
    else:
        coupling, matrix = None, C_off
    low = matrix.astype(np.float32) if coarse else None
    sparse = sparse and weights_are_one
    args = (C_off, coupling, low, sparse, blocks, gamma, rho, tol, max_sweeps, omega, coarse_tol)

    def solve(rows) -> tuple[int, int, int]:  # a block's sweeps, and its rows' change if asked
        before = None if change is None else S[rows].copy()
        Wb = None if weights_are_one else W[rows]  # W is not read when W ≡ 1
        counts = _s_step_rows(S[rows], Wb, Y[rows], H[rows], *args)  # S[rows]: a view
        if before is not None:
            change[0, rows] = (before**2).sum(1)
            np.subtract(before, S[rows], out=before)
            np.square(before, out=before)
            change[1, rows] = before.sum(1)
        return counts

    # rows are independent problems: a block at a time, on ``threads`` threads
    most = np.max(map_threads(solve, _row_blocks(S.shape), threads), axis=0)
    return S, int(most.sum())


def _s_step_rows(
    S, W, Y, H, C_off, coupling, low, sparse, blocks, gamma, rho, tol, max_sweeps, omega, coarse_tol
) -> tuple[int, int, int]:
    """:func:`s_step` on the rows given (S updated in place; W None when W ≡ 1, ``coupling``
    then (den, A) of ``_coupling``): the sparse sweeps where ``sparse`` and fewer than
    ``SPARSE_DENSITY`` of the entries are non-zero, then, unless they finished, the float32
    sweeps (``low``: A or C_off in float32) and the float64 ones. Returns the three sweep
    counts."""
    done0 = done32 = 0
    left = max_sweeps
    if sparse and np.count_nonzero(S != 0) < SPARSE_DENSITY * S.size:
        # mostly exact zeros: float64 sweeps with sparse products beat float32 dense GEMMs;
        # when S fills in (the first S-step from S = Y), the dense sweeps below take over
        _, done0, finished = _s_sweeps_sparse(
            S, Y, coupling, blocks, rho, H, tol, max_sweeps, omega, SPARSE_DENSITY
        )
        if finished:
            return done0, 0, 0
        left -= done0
    if W is None:  # the fixed part of the update, (2Y − ρH)/den, made once for all sweeps
        den, A = coupling
        base = H * (-rho / den)[None, :]
        base += Y * (2.0 / den)[None, :]

        def sweeps(S, low, tol, left) -> int:
            matrix = A if low is None else low
            terms = base.astype(S.dtype, copy=False)  # a float32 copy for the float32 sweeps
            _, done = _s_sweeps(S, terms, matrix, blocks, tol, left, omega)
            return done
    else:

        def sweeps(S, low, tol, left) -> int:
            Wd, Yd, Hd = (x.astype(S.dtype, copy=False) for x in (W, Y, H))
            matrix = C_off if low is None else low
            args = (Wd, Yd, matrix, blocks, gamma, rho, Hd, tol, left, omega)
            return _s_sweeps_weighted(S, *args)[1]

    if low is not None:
        S32 = S.astype(np.float32)
        done32 = sweeps(S32, low, coarse_tol, left)
        S[...] = S32
    return done0, done32, sweeps(S, None, tol, left)


class SCCBG(BaseFuser):
    """Self-paced consensus clustering on the bipartite graph (SCCBG / SPCC; SCCBG-W with
    ``learn_weights=False``).

    Parameters
    ----------
    n_clusters : c, the number of final clusters (1 ≤ c ≤ total number of base clusters).
    gamma : γ ≥ 0, weight of the cluster-consistency term (the paper's only tuned parameter), or
        "auto": choose from ``gamma_grid`` by average NMI with the base clusterings (no labels).
        C = YᵀY is unnormalised (as in the paper), so γ's strength grows like γ·m·n/c: the same γ
        is much stronger on 100,000 items than on 200 (spec §2.3, A17) — prefer "auto" when n
        differs much from the paper's data sets (n ≤ 2,340).
    learn_weights : True = SCCBG; False = SCCBG-W (W ≡ 1, the paper's ablation).
    lambda0, rho0 : initial pace λ (doubled every iteration) and rank weight ρ (paper: 0.5, 1).
    max_iter : outer iterations (spec §3.5: 50).
    tol : relative ‖ΔS‖_F below which the run stops once exactly c components are found.
    rank_tol : spectral component test Σ_{i≤c}(1 − σ_i) (spec §3.4).
    edge_tol : S_ij above this is an edge when reading components.
    inner_tol, max_sweeps : stopping rule of the block coordinate descents (max |Δ| per sweep).
    relaxation : "auto" (Young's ω from the coupling, see docs/algorithms/sccbg.md) or the
        over-relaxation ω ∈ (0, 2) of the S-step (projected SOR; 1 = plain coordinate descent).
        The S-step is convex, so ω changes the speed, not the minimiser — except where
        ``max_sweeps`` cuts a solve short (γ ≥ 0.1 on the paper's data sets).
    mixed_precision : run each S-solve's first sweeps in float32 (to a change < ``COARSE_TOL``
        per row) before the float64 sweeps that decide convergence; faster, same minimiser.
    gamma_grid : candidates for ``gamma="auto"``.
    compress : fuse items with identical label rows (exact; see docs/algorithms/sccbg.md).
    sparse : True, False or "auto" (default: on when u·k ≥ ``SPARSE_WORK`` = 5e6, u distinct
        label rows, k input clusters — n ≳ 8,000 advertisers at k ≈ 650). When on, every
        S-step with W ≡ 1 and the spectral step switch to sparse products while S has fewer
        than 3 % non-zero entries (most of a run: the clipping leaves exact zeros), which cuts
        their cost from O(u k²) to O(nnz(S)·k + u k) per sweep. Same minimiser and stopping rule,
        other rounding; small inputs (below the threshold) run the dense path unchanged.
    n_jobs : threads for the dense S-sweeps and the W-step, which solve blocks of rows on their
        own (scikit-learn's convention: None = 1, -1 = every CPU). The same result for any value.
    random_state : seeds the k-means fallback only (the rest is deterministic).

    Attributes
    ----------
    labels_ : (n,) int64 in 0..c-1.
    graph_ : (n, k) float64, the learned bipartite graph S.
    edge_weights_ : (n, k) float64, the learned reliabilities W (all ones for SCCBG-W); a small
        W_ij marks the instance–cluster entry (i, j) as judged unreliable.
    min_edge_weights_ : (n, k) float64, the lowest W_ij reached during the run. Because λ doubles
        without bound, W returns to 1 once the self-paced phase ends (spec §2.4), so this is where
        the entries excluded early (W = 0 while the pace was small) remain visible.
    cluster_ids_ : (k, 2) int64, (base clustering, original label) of each column of S and W;
        ordered by clustering, then by each label's first appearance.
    labels_path_ : how labels were read: "components" (exactly c components, the paper's path),
        "merge" (K > c, merged), "kmeans" (K < c, k-means on the embedding), "trivial" (c = 1);
        suffix "+isolated" when isolated instances were attached by co-association, and
        "+split" when that left fewer than c clusters and rows were split off (``_split_to``).
    fallback_used_ : labels_path_ is not "components"/"trivial".
    n_components_found_, n_isolated_instances_, n_iter_, converged_, gamma_,
    lambda_history_, rho_history_, singular_values_ (last top c+1 σ), n_unique_rows_,
    relaxation_ (the S-step's ω of the returned run), sparse_path_ (whether the sparse path was
    allowed),
    gamma_scores_ (for "auto": {γ: (ANMI, fallback_used)}).

    Cost: O(n k) memory (no n × n array), O(n_iter · sweeps · u k²) time; see
    docs/algorithms/sccbg.md.
    """

    def __init__(
        self,
        n_clusters: int = 2,
        *,
        gamma: float | str = 1e-4,
        learn_weights: bool = True,
        lambda0: float = 0.5,
        rho0: float = 1.0,
        max_iter: int = 50,
        tol: float = 1e-4,
        rank_tol: float = 1e-7,
        edge_tol: float = 1e-6,
        inner_tol: float = 1e-6,
        max_sweeps: int = 100,
        relaxation: float | str = "auto",
        mixed_precision: bool = True,
        gamma_grid: tuple[float, ...] = DEFAULT_GAMMA_GRID,
        compress: bool = True,
        sparse: bool | str = "auto",
        n_jobs=None,
        random_state=None,
    ):
        self.n_clusters = n_clusters
        self.gamma = gamma
        self.learn_weights = learn_weights
        self.lambda0 = lambda0
        self.rho0 = rho0
        self.max_iter = max_iter
        self.tol = tol
        self.rank_tol = rank_tol
        self.edge_tol = edge_tol
        self.inner_tol = inner_tol
        self.max_sweeps = max_sweeps
        self.relaxation = relaxation
        self.mixed_precision = mixed_precision
        self.gamma_grid = gamma_grid
        self.compress = compress
        self.sparse = sparse
        self.n_jobs = n_jobs
        self.random_state = random_state

    # -- validation ----------------------------------------------------------------------------

    def _check_params(self) -> None:
        # the grid is checked even when a fixed gamma leaves it unused: a bad grid recorded in a
        # run's parameters (--fuser-option sccbg.gamma_grid=NaN) must not pass silently
        grid = self.gamma_grid
        if isinstance(grid, str | bytes) or not hasattr(grid, "__len__"):
            raise TypeError(f"gamma_grid must be a sequence of numbers ≥ 0; got {grid!r}.")
        if len(grid) == 0:
            raise ValueError("gamma_grid is empty.")
        for g in grid:
            check_real("gamma_grid entries", g, low_inclusive=True)
        if isinstance(self.gamma, str):
            if self.gamma != "auto":
                raise ValueError(f"gamma must be a number ≥ 0 or 'auto'; got {self.gamma!r}.")
        else:
            check_real("gamma", self.gamma, low_inclusive=True)
        for name in ("lambda0", "rho0", "rank_tol"):
            check_real(name, getattr(self, name))
        for name in ("tol", "inner_tol"):  # a relative change, a change of entries in [0, 1]
            check_real(name, getattr(self, name), high=1.0)
        # S's entries are at most 1: a threshold of 1 or more would leave no edge at all
        check_real("edge_tol", self.edge_tol, low_inclusive=True, high=1.0)
        if self.relaxation != "auto" and not (
            isinstance(self.relaxation, numbers.Real)
            and not isinstance(self.relaxation, bool | np.bool_)
            and 0 < self.relaxation < 2
        ):
            raise ValueError(f"relaxation must be 'auto' or in (0, 2); got {self.relaxation!r}.")
        for name in ("max_iter", "max_sweeps"):
            check_integer(name, getattr(self, name))
        for flag in ("learn_weights", "mixed_precision", "compress"):
            check_flag(flag, getattr(self, flag))
        if not (isinstance(self.sparse, str) and self.sparse == "auto"):
            check_flag("sparse", self.sparse)
        resolve_threads(self.n_jobs)

    # -- fit -----------------------------------------------------------------------------------

    def _fit(self, labels: np.ndarray) -> None:
        self._check_params()
        c = int(self.n_clusters)
        n, m = labels.shape
        original, labels = labels, relabel(labels)
        if self.compress:
            uniq, first, inverse, mult = np.unique(
                labels, axis=0, return_index=True, return_inverse=True, return_counts=True
            )
            inverse = inverse.ravel()
        else:
            uniq, first = labels, np.arange(n)
            inverse, mult = np.arange(n), np.ones(n, dtype=np.int64)
        Y, block_of = membership_matrix(uniq)
        k = Y.shape[1]
        if c > k:
            raise ValueError(
                f"n_clusters={c} exceeds the {k} clusters of all base clusterings together."
            )
        cluster_ids = np.empty((k, 2), dtype=np.int64)
        cluster_ids[:, 0] = block_of
        for b in range(m):  # loop over clusterings
            seen = labels[:, b] != MISSING  # relabelled value r is column r of block b
            original_of = np.empty(int(labels[seen, b].max()) + 1, dtype=np.int64)
            original_of[labels[seen, b]] = original[seen, b]
            cluster_ids[block_of == b, 1] = original_of
        self.cluster_ids_ = cluster_ids
        self.n_unique_rows_ = int(uniq.shape[0])
        mult = mult.astype(np.float64)

        if self.gamma == "auto":
            scores, best = {}, None
            for g in self.gamma_grid:  # loop over candidate γ (few)
                run = self._run(Y, mult, block_of, first, float(g), c)
                full = run["labels"][inverse]
                score = average_nmi(full, labels)
                scores[float(g)] = (score, run["fallback_used"])
                key = gamma_choice_key(score, run["fallback_used"])
                if best is None or key > best[0]:  # strict: ties keep the earlier (smaller) γ
                    best = (key, float(g), run)
            self.gamma_scores_ = scores
            self.gamma_ = best[1]
            run = best[2]
        else:
            self.gamma_ = float(self.gamma)
            run = self._run(Y, mult, block_of, first, self.gamma_, c)

        self.labels_ = run["labels"][inverse]
        # the (n, k) attributes are the distinct rows' arrays expanded when read (properties
        # below): the fitted estimator holds 3 u × k arrays, not 3 n × k
        self._row_of = inverse
        ones = np.broadcast_to(np.float64(1.0), run["S"].shape)  # W ≡ 1 is held as None
        self._distinct = {
            "graph": run["S"],
            "edge": ones if run["W"] is None else run["W"],
            "min_edge": ones if run["W_min"] is None else run["W_min"],
        }
        for key in (
            "labels_path",
            "fallback_used",
            "n_components_found",
            "n_isolated_instances",
            "n_iter",
            "converged",
            "lambda_history",
            "rho_history",
            "singular_values",
            "sweeps_history",
            "relaxation",
        ):
            setattr(self, key + "_", run[key])

    @property
    def graph_(self) -> np.ndarray:
        """(n, k) float64 S, expanded from the distinct rows' on each read (n × k memory)."""
        return self._expanded("graph")

    @property
    def edge_weights_(self) -> np.ndarray:
        """(n, k) float64 W, expanded from the distinct rows' on each read."""
        return self._expanded("edge")

    @property
    def min_edge_weights_(self) -> np.ndarray:
        """(n, k) float64 lowest W reached, expanded from the distinct rows' on each read."""
        return self._expanded("min_edge")

    def _expanded(self, name: str) -> np.ndarray:
        if not hasattr(self, "_distinct"):
            raise AttributeError(f"{type(self).__name__} is not fitted: call fit first.")
        return self._distinct[name][self._row_of]

    def _run(self, Y, mult, block_of, first, gamma, c) -> dict:
        """One SCCBG run at a fixed γ on the u distinct rows (spec §3.7). Cost per outer
        iteration: a W-step while the self-paced phase lasts (see ``w_step``), one S-step (see
        ``s_step``), one ``spectral`` and one ``h_matrix`` (u × c × k GEMM); memory 5 u × k
        float64 arrays (Y, S, H, and W and its running minimum once a W-step has run) and a row
        block's working arrays per thread."""
        u, k = Y.shape
        m = int(block_of.max()) + 1
        blocks = [np.nonzero(block_of == b)[0] for b in range(m)]
        threads = resolve_threads(self.n_jobs)
        C_off = _coupling_counts(Y, mult, threads)
        max_coupling = float(C_off.sum(axis=0).max())
        omega = (
            young_relaxation(C_off, gamma) if self.relaxation == "auto" else float(self.relaxation)
        )
        coarse = COARSE_TOL if self.mixed_precision and self.inner_tol < COARSE_TOL else None
        sparse = u * k >= SPARSE_WORK if isinstance(self.sparse, str) else bool(self.sparse)
        self.sparse_path_ = sparse

        S = Y.copy()
        change = np.empty((2, u))  # each S-step's per-row sums behind the change test
        # W and the lowest weight each entry reached (W itself ends ≡ 1 as λ grows): None while
        # they are all ones, allocated by the first W-step that runs (often none does)
        W = W_min = H = None
        w_is_one = True
        lam, rho = float(self.lambda0), float(self.rho0)
        if c == 1:
            return self._result(
                np.zeros(u, dtype=np.int64), "trivial", S, W, 0, True, c, [], [], []
            )
        sig, U, V, du, dv = spectral(S, mult, c + 1, sparse, threads)
        lam_hist, rho_hist, sweeps_hist = [], [], []
        converged = False
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):  # noqa: B007 - n_iter is reported
            lam_hist.append(lam)
            rho_hist.append(rho)
            sw = 0
            if self.learn_weights:
                W, sw, w_is_one, ran = self._w_update(
                    S, W, Y, C_off, blocks, lam, gamma, w_is_one, max_coupling, threads
                )
                if ran:
                    W_min = _running_min(W_min, W, threads)
            H = h_matrix(U[:, :c], V[:, :c], du, dv, threads, out=H)
            S, ss = s_step(
                S, W, Y, C_off, blocks, gamma, rho, H,
                weights_are_one=w_is_one, tol=self.inner_tol, max_sweeps=self.max_sweeps,
                omega=omega, coarse_tol=coarse, sparse=sparse, threads=threads, change=change,
            )  # fmt: skip
            sweeps_hist.append((sw, ss))
            dS = _relative_change(change, mult)
            sig, U, V, du, dv = spectral(S, mult, c + 1, sparse, threads)
            fn1 = float(np.sum(1.0 - sig[:c]))
            fn2 = fn1 + float(1.0 - sig[c])
            exact_c = False
            if fn1 > self.rank_tol:
                rho *= 2.0
            elif fn2 < self.rank_tol:
                rho /= 2.0
            else:
                exact_c = True
            lam *= 2.0
            if exact_c and dS < self.tol:
                converged = True
                break
        labels, path, n_comp, n_iso = self._extract(S, Y, mult, U[:, :c], first, c)
        out = self._result(
            labels, path, S, W, n_iter, converged, c, lam_hist, rho_hist, sweeps_hist
        )
        out.update(
            singular_values=sig,
            n_components_found=n_comp,
            n_isolated_instances=n_iso,
            W_min=W_min,
            relaxation=omega,
        )
        return out

    def _w_update(self, S, W, Y, C_off, blocks, lam, gamma, w_is_one, max_coupling, threads):
        """(W, sweeps, W ≡ 1, whether the W-step ran): the W-step (``w_step``) unless W ≡ 1 is
        a fixed point, which it is once λ ≥ 2 max A² + 2γ max_p Σ_q C_pq (spec §2.4); A² ≤ 1,
        so λ ≥ 2 + 2γ max_p Σ_q C_pq decides it without the u × k pass."""
        sure = w_is_one and lam >= 2.0 + 2.0 * gamma * max_coupling
        rows_of = _row_blocks(S.shape)
        if not sure:
            a2max = max(map_threads(lambda rows: _max_sq_diff(S[rows], Y[rows]), rows_of, threads))
        if sure or (w_is_one and lam >= 2.0 * a2max + 2.0 * gamma * max_coupling):
            return W, 0, w_is_one, False
        if W is None:
            W = np.empty_like(S)
            map_threads(lambda rows: W[rows].fill(1.0), rows_of, threads)
        W, sw = w_step(
            S, W, Y, C_off, blocks, lam, gamma,
            tol=self.inner_tol, max_sweeps=self.max_sweeps, threads=threads,
        )  # fmt: skip
        ones = all(map_threads(lambda rows: bool(np.all(W[rows] == 1.0)), rows_of, threads))
        return W, sw, ones, True

    @staticmethod
    def _result(labels, path, S, W, n_iter, converged, c, lam_hist, rho_hist, sweeps_hist):
        return {
            "labels": labels,
            "labels_path": path,
            "fallback_used": path not in ("components", "trivial"),
            "S": S,
            "W": W,
            "n_iter": n_iter,
            "converged": converged,
            "lambda_history": np.asarray(lam_hist),
            "rho_history": np.asarray(rho_hist),
            "sweeps_history": sweeps_hist,
            "singular_values": np.ones(1),
            "n_components_found": c,
            "n_isolated_instances": 0,
            "W_min": W,
            "relaxation": 1.0,
        }

    def _extract(self, S, Y, mult, U, first, c) -> tuple[np.ndarray, str, int, int]:
        """Labels from the connected components of {S > edge_tol} (spec §3.6), with fallbacks.
        Works on the u distinct rows; ``first`` gives each row's lowest original item index so the
        numbering follows the original item order. Memory O(u k) (a sparse adjacency)."""
        u, k = S.shape
        m = float(np.max(Y.sum(1)))  # clusterings per item (co-association denominator)
        A = sp.csr_matrix(S > self.edge_tol)
        graph = sp.bmat([[None, A], [A.T, None]], format="csr")
        _, comp = connected_components(graph, directed=False)
        comp = comp[:u]
        isolated = np.asarray(A.sum(axis=1)).ravel() == 0
        n_iso = int(mult[isolated].sum())
        # Number the non-trivial components by their lowest original item index.
        ids = np.unique(comp[~isolated])
        lowest = np.full(ids.size, np.iinfo(np.int64).max)
        pos = np.searchsorted(ids, comp[~isolated])
        np.minimum.at(lowest, pos, first[~isolated])
        rank = np.empty(ids.size, dtype=np.int64)
        rank[np.argsort(lowest)] = np.arange(ids.size)
        labels = np.full(u, -1, dtype=np.int64)
        labels[~isolated] = rank[pos]
        K = int(ids.size)

        if K == c:
            path = "components"
        elif K > c:
            path = "merge"
            labels[~isolated] = _merge_components(
                labels[~isolated], Y[~isolated], mult[~isolated], K, c, m
            )
        else:
            path = "kmeans"
            keep = ~isolated
            X = U[keep]
            norms = np.linalg.norm(X, axis=1, keepdims=True)
            X = np.divide(X, norms, out=np.zeros_like(X), where=norms > 0)
            # a small ensemble at a large c can leave fewer connected rows than c: then each
            # gets its own cluster at most, and the isolated rows join them below; with none
            # connected (K = 0) every row is isolated and starts in one cluster; _split_to then
            # makes up the c clusters
            if keep.any():
                # no more groups than distinct points (k-means would warn and find fewer);
                # _split_to below makes up the rest
                n_groups = min(c, np.unique(X, axis=0).shape[0])
                seed = self._rng.randint(2**31 - 1)
                km = KMeans(n_clusters=n_groups, n_init=10, random_state=seed)
                labels[keep] = km.fit_predict(X, sample_weight=mult[keep])
                labels[keep] = _renumber(labels[keep], first[keep], c)
        if isolated.any():
            path += "+isolated"
            if K == 0:
                labels[isolated] = 0
            else:
                # Mean co-association of each isolated row with each final cluster.
                onehot = sp.csr_matrix(
                    (mult[~isolated], (labels[~isolated], np.nonzero(~isolated)[0])), shape=(c, u)
                )
                M = np.asarray(onehot @ Y)  # c × k: Σ of member rows per cluster
                size = np.asarray(onehot.sum(axis=1)).ravel()
                score = (Y[isolated] @ M.T) / (m * np.maximum(size, 1.0))[None, :]
                labels[isolated] = np.argmax(score, axis=1)  # ties → lowest label
        if np.unique(labels).size < c:
            # k-means on fewer distinct embedding rows than c, or isolated rows joining the few
            # clusters there were, can leave fewer than the c clusters asked
            path += "+split"
            labels = _split_to(labels, Y, mult, first, c, m)
        return labels, path, K, n_iso


def gamma_choice_key(anmi: float, fallback_used: bool) -> tuple[float, bool]:
    """The ``gamma="auto"`` rule as a sort key (larger is better): the higher ANMI wins; at equal
    ANMI a run whose labels came straight from c components beats one that needed a fallback.
    Candidates are tried in ``gamma_grid`` order and ties keep the earlier one."""
    return (float(anmi), not fallback_used)
