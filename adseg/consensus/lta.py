"""LTA: clustering ensemble by low-rank tensor approximation of the co-association matrix.

Jia, Liu, Hou, Zhang, AAAI 2021 (seeds/002, specs/lta.md). The co-association matrix A and the
coherent-link matrix M are stacked into an n×n×2 tensor, refined by the paper's inexact ADMM
(tensor nuclear norm + λ‖E‖_F²), and the refined co-association P2 is clustered by spectral
clustering (``final="sc"``) or average linkage on 1 − P2 (``final="ea"``).

``orientation="frontal"`` (default) is permutation-equivariant; ``"sample"`` (the paper's) depends
on the item order and only reproduces the paper on class-sorted files. The frontal solver runs
exactly on the g ≤ n cells: O(T g³) time, about 17–22 (g+1)×g float64 arrays, then the n×n P2
and the final clustering's n×n work. ``"sample"``: O(T n² log n) time, about 16 n×n arrays
(n = 5,000 ≈ 3.2 GB). Missing labels (-1) are supported. Evidence on item order, measured costs
and the deviations from the paper: docs/algorithms/lta.md.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg as sla
import scipy.sparse.linalg as spla
from scipy.spatial.distance import squareform
from sklearn.exceptions import ConvergenceWarning

from adseg.consensus._base import (
    BaseFuser,
    average_linkage_cut,
    check_integer,
    check_real,
    co_association,
    coherent_cells,
)
from adseg.spectral import assign_labels, normalize_by_degree, symmetric_part, top_eigenvectors

ORIENTATIONS = ("frontal", "sample")
FINALS = ("sc", "ea")


# ---------------------------------------------------------------------------------------------
# preprocessing: co-association and coherent links
# ---------------------------------------------------------------------------------------------


def cell_coassociation(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Co-association and coherent links between cells: (A_g (g×g) float64, omega_g (g×g) bool).

    A_g[a, b] is A_ij for any i in cell a, j in cell b (the diagonal A_g[a, a] is also the value
    of A_ii and of A_ij for i ≠ j inside the cell). omega_g is the identity: two items are
    coherently linked when they share a cell, the meet of the base clusterings (spec §1.3, §9.3).
    Without missing labels that is exactly A == 1 (distinct label rows differ in some column).
    With -1 entries, A == 1 also linked items that merely never met in a column that labels
    both, a relation that is not transitive ((0, -1), (0, 0) and (-1, 0) linked the first two
    and the last two, not the first and the last), and it cost accuracy (ARI 0.58 against 0.81
    for the meet on three noisy clusters with half the labels missing).
    """
    A_g = co_association(rows)
    return A_g, np.diag(np.diag(A_g) == 1.0)  # a cell in no clustering is linked to nothing


def coassociation_and_links(labels) -> tuple[np.ndarray, np.ndarray]:
    """The n×n co-association matrix A (float64) and coherent-link mask Ω (bool): the pairs in one
    cell of the meet, i.e. with identical label rows (= A == 1 when no label is missing).

    Built on the g distinct label rows and expanded by indexing, never as an n×n×m array.
    Memory: the two n×n outputs (9n² bytes).
    """
    labels = np.asarray(labels)
    cell, rows, _ = coherent_cells(labels)
    A_g, omega_g = cell_coassociation(rows)
    return A_g[np.ix_(cell, cell)], omega_g[np.ix_(cell, cell)]


# ---------------------------------------------------------------------------------------------
# singular value thresholding of the 2-slice tensor
# ---------------------------------------------------------------------------------------------


def svt_sample(
    T1: np.ndarray, T2: np.ndarray, tau: float, *, axis: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """The paper's tensor SVT (spec §3.3 A): DFT along axis 0 (the item index), then at each
    frequency f the n×2 matrix G_f = [F1[f], F2[f]]ᵀ is shrunk, σ → (σ − τ)₊.

    Exact prox of τ·TNN_sample at (T1, T2). Closed form through the 2×2 Gram matrix of G_f
    (σ₂ accurate to ~1e-8·σ₁ when G_f is nearly rank one). rfft/irfft: the conjugate-symmetric
    half is implied. Inputs: two real n×p arrays (p = n in the solver). Output: two real n×p
    arrays, *not* symmetric even for symmetric inputs. Cost O(n p log n); memory two half
    spectra ((n/2+1)×p complex128) and the outputs.

    ``axis=1`` takes the DFT along the rows instead: ``svt_sample(T1ᵀ, T2ᵀ, τ, axis=1)`` is
    ``svt_sample(T1, T2, τ)`` transposed. The solver runs on transposed iterates for this reason
    (:class:`_RowSVT`): a DFT along the contiguous axis of a C-ordered array is faster.
    """
    if axis not in (0, 1):
        raise ValueError(f"axis must be 0 or 1; got {axis!r}.")
    if axis == 1:
        return _svt_rows(T1, T2, tau)
    P1, P2 = _svt_rows(T1.T, T2.T, tau)
    return P1.T, P2.T


class _RowSVT:
    """``svt_sample(·, ·, τ, axis=1)`` for the solver's p×n iterates, into buffers it reuses
    (two half spectra p×(n/2+1) complex128 and the two p×n outputs: no per-iteration
    allocation of n×n arrays, whose page faults cost as much as the FFTs at n = 5,000), with
    the row blocks' FFTs on a thread pool (numpy's FFT releases the GIL)."""

    def __init__(self, shape: tuple[int, int], executor: ThreadPoolExecutor, threads: int):
        self.spectra, self.out = _row_buffers(*shape)
        self.executor = executor
        self.threads = threads

    def __call__(self, T1: np.ndarray, T2: np.ndarray, tau: float):
        return _svt_rows(
            T1,
            T2,
            tau,
            spectra=self.spectra,
            out=self.out,
            executor=self.executor,
            blocks=self.threads,
        )


def _svt_rows(T1, T2, tau, *, spectra=None, out=None, executor=None, blocks=1):
    """svt_sample with the DFT along axis 1 (rows). ``spectra``/``out``: optional buffers
    (two p×(n/2+1) complex, two p×n float); ``executor``: runs ``blocks`` row blocks' FFTs in
    parallel."""
    p, n = T1.shape
    if spectra is None or out is None:
        spectra, out = _row_buffers(p, n)
    F1, F2 = spectra
    _rowwise(np.fft.rfft, ((T1, F1), (T2, F2)), {}, executor, blocks)
    w11, w12, w21, w22 = _gram_svt_weights(*_gram_entries(F1, F2), tau)
    # G'_f = G_f W_f in place, a slab of rows at a time (no n×n temporaries)
    step = max(1, (1 << 16) // F1.shape[1])
    for r0 in range(0, p, step):
        x, y = F1[r0 : r0 + step], F2[r0 : r0 + step]
        x_to_y = x * w12
        x *= w11
        x += y * w21
        y *= w22
        y += x_to_y
    _rowwise(np.fft.irfft, ((F1, out[0]), (F2, out[1])), {"n": n}, executor, blocks)
    return out


def _row_buffers(p: int, n: int):
    """Two p×(n/2+1) complex128 half spectra and two p×n float64 outputs for :func:`_svt_rows`."""
    spectra = tuple(np.empty((p, n // 2 + 1), dtype=np.complex128) for _ in range(2))
    return spectra, tuple(np.empty((p, n), dtype=np.float64) for _ in range(2))


def _rowwise(transform, pairs, kwargs, executor, blocks: int) -> None:
    """out[rows] = transform(src[rows], axis=1, **kwargs) for each (src, out) pair, in
    ``blocks`` row blocks each, spread over the executor's threads (serially without one)."""
    jobs = []
    for src, dst in pairs:
        edges = np.linspace(0, src.shape[0], blocks + 1).astype(int)
        for r0, r1 in zip(edges[:-1], edges[1:], strict=True):
            if r1 > r0:
                jobs.append((src[r0:r1], dst[r0:r1]))

    def run(job):
        transform(job[0], axis=1, out=job[1], **kwargs)

    if executor is None:
        for job in jobs:
            run(job)
    else:
        list(executor.map(run, jobs))


def _gram_entries(F1: np.ndarray, F2: np.ndarray):
    """Per frequency f (a column of the p×(n/2+1) spectra), summing over the rows:
    a = ‖F1[:, f]‖², d = ‖F2[:, f]‖², b = ⟨F1[:, f], F2[:, f]⟩ (conjugate on the first),
    from real views so that no complex temporaries are formed. Inputs C-contiguous. O(n p)."""
    V1 = F1.view(np.float64)
    V2 = F2.view(np.float64)
    a = np.einsum("jf,jf->f", V1, V1).reshape(-1, 2).sum(axis=1)
    d = np.einsum("jf,jf->f", V2, V2).reshape(-1, 2).sum(axis=1)
    b_re = np.einsum("jf,jf->f", V1, V2).reshape(-1, 2).sum(axis=1)
    b_im = np.einsum("jf,jf->f", V1[:, 0::2], V2[:, 1::2]) - np.einsum(
        "jf,jf->f", V1[:, 1::2], V2[:, 0::2]
    )
    return a, d, b_re + 1j * b_im


def _gram_svt_weights(a, d, b, tau):
    """Mixing matrix W = V diag(φ) Vᴴ of the SVT of G with Gram GᴴG = [[a, b], [b̄, d]]
    (vectorised over frequencies): SVT_τ(G) = G W with φ_i = (σ_i − τ)₊ / σ_i."""
    half = 0.5 * (a - d)
    bb = np.abs(b) ** 2
    r = np.sqrt(half**2 + bb)
    lam_plus = 0.5 * (a + d) + r
    lam_minus = np.maximum(0.5 * (a + d) - r, 0.0)
    s1 = np.sqrt(lam_plus)
    s2 = np.sqrt(lam_minus)
    with np.errstate(divide="ignore", invalid="ignore"):
        phi1 = np.where(s1 > 0, np.maximum(s1 - tau, 0.0) / s1, 0.0)
        phi2 = np.where(s2 > 0, np.maximum(s2 - tau, 0.0) / s2, 0.0)
        # λ₊ − a without cancellation when a ≥ d; 0 when a = d and b = 0 (then r + half = 0 and
        # bb / (r + half) was 0/0: NaN in every weight, from a zero Gram matrix too)
        denominator = r + half
        gap = np.where(half >= 0, bb / np.where(denominator > 0, denominator, 1.0), r - half)
        v1 = b.astype(np.complex128)
        v2 = gap.astype(np.complex128)
        norm = np.sqrt(np.abs(v1) ** 2 + np.abs(v2) ** 2)
        degenerate = norm == 0
        v1 = np.where(degenerate, np.where(a >= d, 1.0, 0.0), v1 / np.where(degenerate, 1, norm))
        v2 = np.where(degenerate, np.where(a >= d, 0.0, 1.0), v2 / np.where(degenerate, 1, norm))
    dphi = phi1 - phi2
    w11 = phi2 + dphi * np.abs(v1) ** 2
    w22 = phi2 + dphi * np.abs(v2) ** 2
    w12 = dphi * v1 * np.conj(v2)
    w21 = np.conj(w12)
    return w11, w12, w21, w22


def svt_frontal(T1: np.ndarray, T2: np.ndarray, tau: float) -> tuple[np.ndarray, np.ndarray]:
    """The textbook tensor SVT (spec §3.3 B): length-2 DFT along the slice mode,
    F̂ = (T1 + T2, T1 − T2); matrix SVT of each with threshold τ; inverse DFT.

    Dense reference (two full n×n SVDs, O(n³)); the solver uses the cell-reduced equivalent.
    Permutation-equivariant: SVT(Pᵀ T P) = Pᵀ SVT(T) P for any permutation matrix P.
    """
    S1 = _matrix_svt(T1 + T2, tau)
    S2 = _matrix_svt(T1 - T2, tau)
    return 0.5 * (S1 + S2), 0.5 * (S1 - S2)


def _matrix_svt(X: np.ndarray, tau: float) -> np.ndarray:
    U, s, Vt = np.linalg.svd(X, full_matrices=False)
    keep = s > tau
    return (U[:, keep] * (s[keep] - tau)) @ Vt[keep]


def tensor_nuclear_norm(P1: np.ndarray, P2: np.ndarray, orientation: str = "frontal") -> float:
    """‖𝓟‖_⊛ of the n×p×2 tensor (P1, P2) as the solver defines it (spec §2.2).

    "sample": (1/n) Σ_f ‖[F1[f], F2[f]]‖_* with F = fft along axis 0 (batched SVDs of p×2).
    "frontal": ½(‖P1 + P2‖_* + ‖P1 − P2‖_*).
    """
    _check_choice("orientation", orientation, ORIENTATIONS)
    if orientation == "frontal":
        return 0.5 * float(
            np.linalg.svd(P1 + P2, compute_uv=False).sum()
            + np.linalg.svd(P1 - P2, compute_uv=False).sum()
        )
    G = np.stack([np.fft.fft(P1, axis=0), np.fft.fft(P2, axis=0)], axis=2)
    return float(np.linalg.svd(G, compute_uv=False).sum() / P1.shape[0])


# ---------------------------------------------------------------------------------------------
# the ADMM (spec §3.2), written once for the n×n and the cell-reduced representation
# ---------------------------------------------------------------------------------------------


@dataclass
class LTAResult:
    """Output of :func:`lta_refine`: the iterates at the stop and the solver's trace."""

    P1: np.ndarray
    P2: np.ndarray
    E: np.ndarray
    B: np.ndarray
    C: np.ndarray
    n_iter: int
    converged: bool
    residual: float
    mu: float
    residual_history: list[float] = field(default_factory=list)


def _admm(
    A: np.ndarray,
    omega: np.ndarray,
    svt: Callable[[np.ndarray, np.ndarray, float], tuple[np.ndarray, np.ndarray]],
    sym_into: Callable[[np.ndarray, np.ndarray], None],
    *,
    valid: np.ndarray | None,
    lam: float,
    mu0: float,
    rho: float,
    mu_max: float,
    tol: float,
    max_iter: int,
) -> LTAResult:
    """Inexact ALM of spec §3.2 on arrays of any shape whose entries are the model's matrix
    entries (n×n, or the packed cell form). ``sym_into(X, out)`` writes sym(X) into ``out``;
    ``valid`` masks the entries that stand for no real matrix entry out of the residual.

    The element-wise updates run in two fused passes over row blocks of ~256 KiB per array
    (``_Iterates.e_step_and_projection_targets`` and ``_Iterates.finish_and_target``), so each
    iterate is read about twice per iteration instead of ~30 times by whole-array numpy calls;
    every entry sees the same floating-point operations in the same order, so the iterates are
    bit-for-bit those of the whole-array loop (tested). The gain per iteration is in
    docs/algorithms/lta.md.
    """
    zeros = np.zeros_like(A)
    E, B, C, L1, L2, L3 = (zeros.copy() for _ in range(6))
    W1, W2 = zeros, np.zeros_like(A)  # work buffers: the SVT's targets, then the projections'
    # P1, P2 live only in the state: it drops them before each SVT
    state = _Iterates(A, omega, valid, zeros.copy(), zeros.copy(), E, B, C, L1, L2, L3, W1, W2)
    mu = float(mu0)
    state.targets(1.0 / mu)
    history: list[float] = []
    converged = False
    r = np.inf
    n_iter = 0
    for n_iter in range(1, max_iter + 1):  # noqa: B007 (the count is returned)
        tau = 1.0 / mu
        state.P1 = state.P2 = None  # the SVT needs only its targets; free the old iterates
        state.P1, state.P2 = svt(W1, W2, tau)
        state.e_step_and_projection_targets(mu, tau, lam)
        sym_into(W1, B)  # B- and C-steps: projections on symmetric ∩ [0,1] (B also 1 on Ω)
        sym_into(W2, C)
        # residuals, stop test (before the dual update, as the authors' code), dual update, and
        # the next iteration's SVT targets, in one pass
        mu_next = min(rho * mu, mu_max)
        r = state.finish_and_target(mu, 1.0 / mu_next)
        history.append(r)
        if r < tol:
            converged = True
            break
        mu = mu_next
    return LTAResult(state.P1, state.P2, E, B, C, n_iter, converged, float(r), mu, history)


class _Iterates:
    """The ADMM's arrays and its element-wise steps, each done in one pass over row blocks.

    Every entry goes through exactly the operations (and their order) of the textbook
    whole-array form, so the result does not depend on the block size."""

    BLOCK_BYTES = 1 << 18  # per array; ~13 arrays per block stay in the L2/L3 caches

    def __init__(self, A, omega, valid, P1, P2, E, B, C, L1, L2, L3, W1, W2):
        self.A, self.omega, self.valid = A, omega, valid
        self.P1, self.P2, self.E, self.B, self.C = P1, P2, E, B, C
        self.L1, self.L2, self.L3, self.W1, self.W2 = L1, L2, L3, W1, W2
        p = A.shape[0]
        step = max(1, self.BLOCK_BYTES // max(1, A[0].nbytes))
        self.blocks = [slice(r0, min(r0 + step, p)) for r0 in range(0, p, step)]

    def targets(self, tau: float) -> None:
        """W1 ← B − τ L1;  W2 ← (A − E + C − τ (L2 + L3)) / 2   (the P-step targets, Eq. 13)."""
        for b in self.blocks:
            self._targets_block(b, tau)

    def _targets_block(self, b: slice, tau: float) -> None:
        W1, W2 = self.W1[b], self.W2[b]
        np.multiply(self.L1[b], -tau, out=W1)
        W1 += self.B[b]
        np.add(self.L2[b], self.L3[b], out=W2)
        W2 *= -tau
        W2 += self.A[b]
        W2 -= self.E[b]
        W2 += self.C[b]
        W2 *= 0.5

    def e_step_and_projection_targets(self, mu: float, tau: float, lam: float) -> None:
        """E ← (μ (A − P2) − L2) / (2λ + μ) (Eq. 15);  W1 ← P1 + τ L1;  W2 ← P2 + τ L3."""
        denominator = 2.0 * lam + mu
        for b in self.blocks:
            E, W1, W2, P2 = self.E[b], self.W1[b], self.W2[b], self.P2[b]
            np.subtract(self.A[b], P2, out=E)
            E *= mu
            E -= self.L2[b]
            E /= denominator
            np.multiply(self.L1[b], tau, out=W1)
            W1 += self.P1[b]
            np.multiply(self.L3[b], tau, out=W2)
            W2 += P2

    def finish_and_target(self, mu: float, tau_next: float) -> float:
        """Clip B and C to [0, 1] and set B to 1 on Ω (completing the projections), return
        the residual max(|P1 − B|, |P2 + E − A|, |P2 − C|) over the valid entries, ascend the
        duals (L += μ · residual) and write the next iteration's SVT targets."""
        r = 0.0
        for b in self.blocks:
            B, C, W1, W2 = self.B[b], self.C[b], self.W1[b], self.W2[b]
            P2 = self.P2[b]
            valid = None if self.valid is None else self.valid[b]
            np.clip(B, 0.0, 1.0, out=B)
            B[self.omega[b]] = 1.0
            np.clip(C, 0.0, 1.0, out=C)
            np.subtract(self.P1[b], B, out=W1)
            np.add(P2, self.E[b], out=W2)
            W2 -= self.A[b]
            r = max(r, _absmax(W1, valid), _absmax(W2, valid))
            W1 *= mu
            self.L1[b] += W1
            W2 *= mu
            self.L2[b] += W2
            np.subtract(P2, C, out=W1)
            r = max(r, _absmax(W1, valid))
            W1 *= mu
            self.L3[b] += W1
            self._targets_block(b, tau_next)
        return r


def _absmax(X: np.ndarray, valid: np.ndarray | None) -> float:
    if valid is not None:
        X = np.where(valid, X, 0.0)
    return float(max(X.max(), -X.min()))


def lta_refine(
    A: np.ndarray,
    omega: np.ndarray,
    *,
    lam: float = 0.002,
    orientation: str = "frontal",
    mu0: float = 1e-4,
    rho: float = 1.1,
    mu_max: float = 1e8,
    tol: float = 1e-8,
    max_iter: int = 500,
) -> LTAResult:
    """Solve the LTA model on a dense n×n co-association A and coherent-link mask Ω.

    This is the literal n×n solver for both orientations ("frontal" does two dense n×n SVDs
    per iteration, O(n³): use it as a reference on small n; :class:`LTA` runs the equivalent
    cell-reduced solver). Holds about 14 n×n float64-sized arrays (A, Ω, the five iterates, three
    multipliers, two work arrays, and for "sample" two reused half spectra). Returns
    :class:`LTAResult`.
    """
    _check_choice("orientation", orientation, ORIENTATIONS)
    A = np.asarray(A, dtype=np.float64)
    omega = np.asarray(omega, dtype=bool)
    settings = dict(valid=None, lam=lam, mu0=mu0, rho=rho, mu_max=mu_max, tol=tol)
    if orientation == "frontal":
        return _admm(
            np.ascontiguousarray(A),
            omega,
            svt_frontal,
            symmetric_part,
            max_iter=max_iter,
            **settings,
        )
    # Every step but the SVT is elementwise or symmetrises, so the ADMM on the transposed data
    # has the transposed iterates; there the item-axis DFT runs along contiguous rows.
    threads = os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=threads) as executor:
        res = _admm(
            np.ascontiguousarray(A.T),
            np.ascontiguousarray(omega.T),
            _RowSVT(A.shape, executor, threads),
            symmetric_part,
            max_iter=max_iter,
            **settings,
        )
    for name in ("P1", "P2", "E", "B", "C"):
        setattr(res, name, getattr(res, name).T)
    return res


class _CellSpace:
    """The packed representation of n×n matrices that are invariant to permuting items inside
    each cell: a (g+1)×g array whose first g rows hold the off-diagonal values Q[a, b] (entry
    (i, j), i ≠ j, i in cell a, j in cell b) and whose last row holds the diagonal values d[a].

    Q[a, a] stands for no entry when the cell has one item (``valid`` is False there). In the
    orthonormal basis (cell indicators / √s, then the within-cell contrasts) such a matrix is
    the g×g matrix R = √s Q √s + diag(d − diag Q) (diagonal: (s−1) Q_aa + d_a) plus
    (d_a − Q_aa) times the identity on each cell's (s_a − 1)-dimensional contrast space, so
    its singular value thresholding is a g×g one plus a soft threshold per cell.
    """

    def __init__(self, sizes: np.ndarray, executor: ThreadPoolExecutor | None = None):
        self.executor = executor
        self.s = sizes.astype(np.float64)
        self.g = sizes.size
        self.root = np.sqrt(self.s)
        self.valid = np.ones((self.g + 1, self.g), dtype=bool)
        self.valid[np.arange(self.g), np.arange(self.g)] = sizes > 1
        self.diag = (np.arange(self.g), np.arange(self.g))
        self.kept = [None, None]  # eigenpairs kept by the last SVT of T1 + T2 and of T1 − T2

    def pack(self, Q: np.ndarray, d: np.ndarray) -> np.ndarray:
        return np.vstack([Q, d[None, :]])

    def expand(self, X: np.ndarray, cell: np.ndarray) -> np.ndarray:
        """The n×n matrix the packed X stands for (items in the order of ``cell``)."""
        full = X[: self.g][np.ix_(cell, cell)]
        full[np.diag_indices_from(full)] = X[self.g][cell]
        return full

    def sym_into(self, X: np.ndarray, out: np.ndarray) -> None:
        g = self.g
        symmetric_part(X[:g], out=out[:g])
        out[g] = X[g]

    def svt(self, T1: np.ndarray, T2: np.ndarray, tau: float) -> tuple[np.ndarray, np.ndarray]:
        if self.executor is None:
            S1 = self._matrix_svt(T1 + T2, tau, 0)
            S2 = self._matrix_svt(T1 - T2, tau, 1)
        else:
            # the two eigendecompositions are independent and LAPACK releases the GIL
            f1 = self.executor.submit(self._matrix_svt, T1 + T2, tau, 0)
            S2 = self._matrix_svt(T1 - T2, tau, 1)
            S1 = f1.result()
        P1 = S1 + S2
        P1 *= 0.5
        S1 -= S2
        S1 *= 0.5
        return P1, S1

    def _matrix_svt(self, X: np.ndarray, tau: float, slot: int = 0) -> np.ndarray:
        g, s, root = self.g, self.s, self.root
        Q, d = X[:g], X[g]
        qdiag = Q[self.diag]
        R = Q * root[:, None]
        R *= root[None, :]
        R[self.diag] = (s - 1.0) * qdiag + d
        # the iterates are symmetric in exact arithmetic (spec §3: SVT, E, B, C and the duals
        # preserve symmetry from a zero start), so the SVT of R is an eigenvalue shrink
        R += R.T
        R *= 0.5
        delta = np.where(s > 1, d - qdiag, 0.0)
        delta_new = np.sign(delta) * np.maximum(np.abs(delta) - tau, 0.0)
        if np.sqrt(np.einsum("ij,ij->", R, R)) <= tau:
            Rn = np.zeros_like(R)  # every singular value is below the threshold
            self.kept[slot] = 0
        else:
            w, V = self._eigenpairs_above(R, tau, slot)
            shrunk = np.sign(w) * np.maximum(np.abs(w) - tau, 0.0)
            keep = shrunk != 0
            self.kept[slot] = int(keep.sum())
            Vk = V[:, keep]
            Rn = (Vk * shrunk[keep]) @ Vk.T
        out = np.empty_like(X)
        Qn = out[:g]
        np.divide(Rn, root[:, None], out=Qn)
        Qn /= root[None, :]
        rdiag = Qn[self.diag].copy()  # = R'_aa / s_a
        out[g] = rdiag + delta_new * (1.0 - 1.0 / s)
        Qn[self.diag] = np.where(s > 1, rdiag - delta_new / s, out[g])
        return out

    def _eigenpairs_above(self, R: np.ndarray, tau: float, slot: int):
        """Eigenpairs of the symmetric R that include every one with |λ| > τ (the only ones the
        SVT keeps). While the last SVT of this slot kept few (< g/8: the ADMM's first ~third,
        when τ = 1/μ is still large), Lanczos for the largest-magnitude pairs (ARPACK, fixed
        start, full accuracy), enlarged until one returned |λ| ≤ τ proves the set complete;
        otherwise (or if Lanczos fails) the full LAPACK eigendecomposition. Cost O(g² k) per
        Lanczos sweep vs O(g³) for the full one (~0.1–0.4 s instead of 0.9 s at g = 1,866)."""
        g = R.shape[0]
        last = self.kept[slot]
        if last is not None and g >= 400 and last < g // 8:
            k = max(2 * last, last + 8)
            v0 = np.ones(g) / np.sqrt(g)  # a fixed start: results do not depend on a seed
            while k < g // 4:
                try:
                    w, V = spla.eigsh(R, k=k, which="LM", v0=v0, tol=0.0)
                except spla.ArpackError:
                    break
                if np.abs(w).min() <= tau:
                    return w, V
                k *= 2
        return sla.eigh(R, driver="evd", overwrite_a=True, check_finite=False)


def lta_refine_cells(
    cell: np.ndarray,
    rows: np.ndarray,
    sizes: np.ndarray,
    *,
    lam: float = 0.002,
    mu0: float = 1e-4,
    rho: float = 1.1,
    mu_max: float = 1e8,
    tol: float = 1e-8,
    max_iter: int = 500,
) -> tuple[LTAResult, _CellSpace]:
    """The frontal LTA solved exactly in the cell-reduced space (see docs/algorithms/lta.md).

    Inputs from :func:`coherent_cells`. Returns the result in packed (g+1)×g form and the space
    (``space.expand(result.P2, cell)`` gives the n×n P2). Cost O(T g³) time, ~17 g×g arrays.
    """
    A_g, omega_g = cell_coassociation(rows)
    with ThreadPoolExecutor(max_workers=1) as executor:
        space = _CellSpace(sizes, executor)
        A = space.pack(A_g, np.diag(A_g).copy())
        omega = space.pack(omega_g, np.diag(omega_g).copy())
        res = _admm(
            A,
            omega,
            space.svt,
            space.sym_into,
            valid=space.valid,
            lam=lam,
            mu0=mu0,
            rho=rho,
            mu_max=mu_max,
            tol=tol,
            max_iter=max_iter,
        )
    space.executor = None
    return res, space


# ---------------------------------------------------------------------------------------------
# final clustering of the refined co-association
# ---------------------------------------------------------------------------------------------


_NO_STRUCTURE = (
    "the refined co-association matrix is {}: the low-rank step removed every difference "
    "between pairs. With orientation='sample' this happens on inputs with very few distinct "
    "label rows (e.g. clusterings that all agree); use orientation='frontal' (the default) or a "
    "smaller lam. Otherwise the solver stopped before its threshold fell below the spectrum: "
    "raise max_iter."
)


def spectral_labels(S: np.ndarray, n_clusters: int, *, random_state=None, n_init: int = 20):
    """Ours-SC: Ng–Jordan–Weiss on W = max(S + Sᵀ, 0): the c largest eigenvectors of
    D^{-1/2} W D^{-1/2}, rows normalised, k-means with ``n_init`` restarts. Invariant to scaling
    S by α > 0. Holds two n×n arrays; eigenvectors by LAPACK (n ≤ 2,000) or Lanczos."""
    W = S + S.T
    np.maximum(W, 0.0, out=W)
    deg = W.sum(axis=1)
    if not deg.max() > 0:
        raise ValueError(_NO_STRUCTURE.format("zero"))
    _, vecs = top_eigenvectors(normalize_by_degree(W, deg), n_clusters)
    return assign_labels(
        vecs, n_clusters, method="kmeans", random_state=random_state, n_init=n_init
    )


def average_linkage_labels(S: np.ndarray, n_clusters: int) -> np.ndarray:
    """Ours-EA: average-linkage (UPGMA) tree on the distances 1 − sym(S), cut into
    ``n_clusters`` clusters. Invariant to positive affine maps of S. Holds the n(n−1)/2
    condensed distances; O(n²) time (nearest-neighbour chain)."""
    D = S + S.T
    D *= -0.5
    D += 1.0
    np.fill_diagonal(D, 0.0)
    condensed = squareform(D, checks=False)
    del D
    low = condensed.min(initial=0.0)
    if low < 0:  # S > 1 somewhere (the sample orientation does not clip P2): shift, which
        condensed -= low  # leaves every UPGMA merge, hence the cut, unchanged
    return average_linkage_cut(condensed, n_clusters)


# ---------------------------------------------------------------------------------------------
# the fuser
# ---------------------------------------------------------------------------------------------


class LTA(BaseFuser):
    """Low-rank tensor approximation of the co-association matrix (seed 002), then SC or EA.

    Parameters
    ----------
    n_clusters : number of segments wanted.
    lam : λ, weight of the removed "wrong links" ‖E‖_F²; the paper's 0.002 for every data set.
    orientation : "frontal" (default; textbook t-SVD, order-invariant, honest for items in
        arbitrary order) or "sample" (the paper's FFT along the item index; its result depends
        on the item order and reproduces the paper only on class-sorted files — see
        docs/algorithms/lta.md).
    final : "sc" (spectral clustering, the paper's Ours-SC) or "ea" (average linkage, Ours-EA).
    mu0, rho, mu_max, tol, max_iter : the ADMM's penalty start, growth, cap, stopping tolerance
        on the max-abs primal residual, and iteration cap (paper / authors' code values).
    n_init : k-means restarts of the spectral step (the authors' code: 20).
    random_state : seed of the k-means of the spectral step (the solver itself is deterministic).

    Attributes
    ----------
    labels_ : (n,) int64 segments in 0..n_clusters−1.
    similarity_ : (n, n) float64, the refined co-association sym(P2) (small scale: P2 is
        strongly shrunk, e.g. entries in [0, 0.25]; only its shape matters downstream).
    n_cells_ : number g of distinct label rows (cells of the meet of the base clusterings).
    n_iter_, converged_, residual_ : the ADMM's iteration count, whether the residual fell below
        ``tol`` before ``max_iter``, and the last max-abs primal residual.

    Memory: see docs/algorithms/lta.md (frontal: ~17 g×g arrays in the solve, then 2–3 n×n;
    sample: ~16 n×n arrays). Time: O(T g³) frontal, O(T n² log n) sample (docs/algorithms/lta.md).
    """

    def __init__(
        self,
        n_clusters: int = 2,
        *,
        lam: float = 0.002,
        orientation: str = "frontal",
        final: str = "sc",
        mu0: float = 1e-4,
        rho: float = 1.1,
        mu_max: float = 1e8,
        tol: float = 1e-8,
        max_iter: int = 500,
        n_init: int = 20,
        random_state=None,
    ):
        self.n_clusters = n_clusters
        self.lam = lam
        self.orientation = orientation
        self.final = final
        self.mu0 = mu0
        self.rho = rho
        self.mu_max = mu_max
        self.tol = tol
        self.max_iter = max_iter
        self.n_init = n_init
        self.random_state = random_state

    def _check_params(self) -> None:
        _check_choice("orientation", self.orientation, ORIENTATIONS)
        _check_choice("final", self.final, FINALS)
        for name in ("lam", "mu0", "mu_max"):
            check_real(name, getattr(self, name))
        check_real("tol", self.tol, high=1.0)  # a relative change: 1 or more stops at once
        if self.mu_max < self.mu0:
            raise ValueError(f"mu_max must be ≥ mu0; got mu_max={self.mu_max}, mu0={self.mu0}.")
        check_real("rho", self.rho, low=1.0)
        for name in ("max_iter", "n_init"):
            check_integer(name, getattr(self, name))

    def _fit(self, labels: np.ndarray) -> None:
        self._check_params()
        solver = {
            "lam": self.lam,
            "mu0": self.mu0,
            "rho": self.rho,
            "mu_max": self.mu_max,
            "tol": self.tol,
            "max_iter": self.max_iter,
        }
        cell, rows, sizes = coherent_cells(labels)
        self.n_cells_ = int(sizes.size)
        if self.orientation == "frontal":
            res, space = lta_refine_cells(cell, rows, sizes, **solver)
            P2 = space.expand(res.P2, cell)
        else:
            A_g, omega_g = cell_coassociation(rows)
            A = A_g[np.ix_(cell, cell)]
            omega = omega_g[np.ix_(cell, cell)]
            del A_g, omega_g
            res = lta_refine(A, omega, orientation="sample", **solver)
            del A, omega
            P2 = res.P2
        self.n_iter_ = res.n_iter
        self.converged_ = res.converged
        self.residual_ = res.residual
        if not res.converged:  # as rcc and rcec do: a caller (the nightly's notes) must hear it
            warnings.warn(
                f"LTA stopped at max_iter={self.max_iter} before reaching tol={self.tol} "
                f"(max-abs primal residual {res.residual:.2e}); increase max_iter or rho.",
                ConvergenceWarning,
                stacklevel=3,
            )
        S = P2 + P2.T
        S *= 0.5
        del res, P2
        self.similarity_ = S
        if self.n_clusters > 1 and np.ptp(S) <= 1e-9 * max(float(np.abs(S).max()), 1e-300):
            # every pair equally similar: any K-partition is as good as any other, and the
            # labels would be the solver's round-off
            raise ValueError(_NO_STRUCTURE.format("constant" if np.any(S) else "zero"))
        if self.final == "sc":
            self.labels_ = spectral_labels(
                S, self.n_clusters, random_state=self._rng, n_init=self.n_init
            )
        else:
            self.labels_ = average_linkage_labels(S, self.n_clusters)


def _check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}.")


__all__ = [
    "LTA",
    "LTAResult",
    "average_linkage_labels",
    "coassociation_and_links",
    "coherent_cells",
    "lta_refine",
    "lta_refine_cells",
    "spectral_labels",
    "svt_frontal",
    "svt_sample",
    "tensor_nuclear_norm",
]
