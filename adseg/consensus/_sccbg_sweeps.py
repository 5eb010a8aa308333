"""The sweeps of SCCBG (:mod:`adseg.consensus.sccbg`): the W-step's exact coordinate descent
and the S-step's projected SOR over the rows, one GEMM per base clustering's block (dense, in
row blocks), or with S held sparse while it is mostly exact zeros (docs/algorithms/sccbg.md)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from adseg.consensus._base import map_threads, row_slices

_DEN_EPS = 1e-12


def _block_slices(blocks) -> list:
    """``blocks`` (column index arrays) with each contiguous run as a slice: a view instead of a
    fancy-index copy per access, the same values. O(k)."""
    out = []
    for J in blocks:
        J = np.asarray(J)
        if J.size and np.array_equal(J, np.arange(J[0], J[0] + J.size)):
            out.append(slice(int(J[0]), int(J[0]) + J.size))
        else:
            out.append(J)
    return out


# ----------------------------------------------------------------------------------------------
# building blocks (module level so the tests can check them against the spec's identities)
# ----------------------------------------------------------------------------------------------


def _off_block_product(X: np.ndarray, M: np.ndarray, J) -> np.ndarray:
    """X @ M[:, J] for a base clustering's columns J where M[J, J] = 0 (C_off and its column
    scalings: a clustering's clusters are disjoint): when J is a slice, the products of X's
    columns before and after J only (one or two GEMMs, and an addition), k_J·k_J fewer
    multiply-adds per row than the whole product. The same value up to rounding."""
    if not isinstance(J, slice):
        return X @ M[:, J]
    lo, hi = J.start, J.stop
    if lo == 0:
        return X[:, hi:] @ M[hi:, J]
    t = X[:, :lo] @ M[:lo, J]
    if hi < X.shape[1]:
        t += X[:, hi:] @ M[hi:, J]
    return t


def _s_sweeps(S, base, A, blocks, tol, max_sweeps, omega):
    """The W ≡ 1 sweeps of :func:`s_step` in the dtype of the arrays passed (S updated in
    place): per base clustering J, new = clip(old + ω(S·A_J + base_J − old), 0, 1) with
    A = 4γ C_off/den and base = (2Y − ρH)/den (den = 2 + 4γ C_off 1), made once per step.
    O(u k²) per sweep (one GEMM per block) and ~8 passes over the rows still moving."""
    u = S.shape[0]
    blocks = _block_slices(blocks)
    active = np.arange(u)
    # the rows still moving; all of them at first, as views (S updated in place), compacted
    # into copies only once some rows have stopped: no u × k copies up front
    moving = {"S": S, "base": base}
    sweeps = 0
    for sweeps in range(1, max_sweeps + 1):  # noqa: B007 - sweeps is reported
        Sa, Ba = moving["S"], moving["base"]
        row_delta = np.zeros(active.size, dtype=S.dtype)
        for J in blocks:  # loop over base clusterings
            old = Sa[:, J]
            t = _off_block_product(Sa, A, J)
            t += Ba[:, J]
            _relax_and_clip(t, old, omega)
            _largest_change(row_delta, old, t)
            Sa[:, J] = t
        active = _drop_stopped(S, active, row_delta < tol, moving)
        if active.size == 0:
            break
    _write_back(S, active, moving)
    return S, sweeps


def _relax_and_clip(t, old, omega) -> None:
    """t = clip(old + ω(t − old), 0, 1) in place: the projected SOR step from the plain update
    ``t`` (ω = 1: the clip alone)."""
    if omega != 1.0:
        t -= old
        t *= omega
        t += old
    np.clip(t, 0.0, 1.0, out=t)


def _largest_change(row_delta, old, new) -> None:
    """row_delta = max(row_delta, max_j |new − old|) per row, computed in ``old``'s place (the
    caller writes ``new`` over it next)."""
    np.subtract(old, new, out=old)
    np.abs(old, out=old)
    np.maximum(row_delta, old.max(axis=1), out=row_delta)


def _write_back(out, active, moving: dict, key: str = "S") -> None:
    """At the end of the sweeps: the rows still moving, if they are copies, back into ``out``."""
    if active.size and moving[key] is not out:
        out[active] = moving[key]


def _drop_stopped(out, active, done, moving: dict, key: str = "S") -> np.ndarray:
    """After a sweep: the rows ``done`` (a mask over ``active``, the rows still moving) are
    written back to ``out`` from ``moving[key]`` and dropped from every array of ``moving``, one
    at a time so that each old copy is freed before the next is made. Returns the rows still
    moving."""
    if not done.any():
        return active
    out[active[done]] = moving[key][done]
    keep = ~done
    for name in moving:  # loop over the moving rows' arrays
        moving[name] = moving[name][keep]
    return active[keep]


def _s_sweeps_weighted(S, W, Y, C_off, blocks, gamma, rho, H, tol, max_sweeps, omega):
    """:func:`_s_sweeps` with W ≠ 1: num = 2W²Y + 4γ W (S⊙W)·C − ρH and den = 2W² + 4γ W (W·C),
    new = clip(old + ω(num/den − old), 0, 1) where den > ``_DEN_EPS``; elsewhere (W_ip = 0)
    the entry has no quadratic term: 0 if H_ip > 0, else it keeps its value.

    W does not change during an S-step, so the update is regrouped as (S⊙W)·C_J ⊙ q + base with
    q = 4γW/den and base = (2W²Y − ρH)/den made once per step (W·C, one GEMM per block, with
    them). A sweep is then one GEMM per block and ~12 passes over its columns of the rows still
    moving. Memory: ~6 ua × k arrays of the rows (S, W, S⊙W, q, base, the den = 0 masks)."""
    u = S.shape[0]
    blocks = _block_slices(blocks)
    m = {"S": S, "W": W, "WS": S * W, "q": np.empty_like(S), "base": np.empty_like(S)}
    free = np.empty(S.shape, dtype=bool)  # den = 0 (to _DEN_EPS): the entries held apart
    for J in blocks:  # loop over base clusterings: the fixed terms, a block of columns at a time
        Wj = W[:, J]
        den = _off_block_product(W, C_off, J)
        den *= 4.0 * gamma * Wj
        den += 2.0 * Wj * Wj
        np.less_equal(den, _DEN_EPS, out=free[:, J])
        flat = np.where(free[:, J], np.inf, den)  # 1/den = 0 where den = 0: set apart below
        np.divide(4.0 * gamma * Wj, flat, out=m["q"][:, J])
        np.divide(2.0 * Wj * Wj * Y[:, J] - rho * H[:, J], flat, out=m["base"][:, J])
    m["zero"], m["keep"] = free & (H > 0), free & (H <= 0)
    any_free = bool(free.any())
    del free
    active = np.arange(u)
    sweeps = 0
    for sweeps in range(1, max_sweeps + 1):  # noqa: B007 - sweeps is reported
        row_delta = np.zeros(active.size, dtype=S.dtype)
        for J in blocks:  # loop over base clusterings
            old = m["S"][:, J]
            t = _off_block_product(m["WS"], C_off, J)
            t *= m["q"][:, J]
            t += m["base"][:, J]
            _relax_and_clip(t, old, omega)
            if any_free:
                np.copyto(t, old, where=m["keep"][:, J])
                t[m["zero"][:, J]] = 0.0
            _largest_change(row_delta, old, t)
            m["S"][:, J] = t
            np.multiply(t, m["W"][:, J], out=m["WS"][:, J])
        active = _drop_stopped(S, active, row_delta < tol, m)
        if active.size == 0:
            break
    _write_back(S, active, m)
    return S, sweeps


# the sparse S-sweeps hand a row block to the dense ones once its moving rows have filled in
# past this many times the density that let them take it
_FILLED = 1.3
TERMS_PER_CHUNK = 1 << 22
"""Terms (one S value times one coupling) per chunk of a block's coupling sums in the sparse
S-sweeps: their index and value arrays (~32 bytes a term) are about 128 MB, whatever S's
density."""

# slack of the row-sum bound behind the sparse sweeps' candidate entries: a larger one keeps
# more candidates, a smaller one rebuilds them more often; neither changes a value
_ROW_SUM_SLACK = 1.25
# the candidates' sums are used while they cost at most this many terms a sweep per entry of
# S (~20 ns a term against ~25 ns an entry for the CSR sweeps' dense passes); either form
# gives the same values
CANDIDATE_TERMS_PER_ENTRY = 1.0


_UNINFORMATIVE = 10.0
"""The candidates (:class:`_Entries`) bound the entries an S-step can make non-zero. Where
they are more than the sparse density (``SPARSE_DENSITY``) of a row block but at most this
many times it, the step fills the block in (late in a fit, as ρ falls or H moves: 1 % → 4 %
within the first sweep), and its first sparse sweep alone would cost about as much as the
block's whole dense solve, which then takes over anyway; the block goes to the dense sweeps
from the start. Past this many times, the bound is too loose to say anything (small ρ: it
admits 40–60 % of the entries where 1–2 % end up non-zero), and the sparse sweeps are tried as
before. Either way the minimiser and the stopping rule are the same."""


class _Entries:
    """The entries of S that an S-step with W ≡ 1 may make non-zero, row-major: S's non-zeros,
    Y's, and every (i, p) whose coupling bound s̄_i·max_q A_qp reaches ρH_ip/den_p (s̄_i ≥ the
    row's sum of S while this set is used; S, A ≥ 0 make (S·A)_ip ≤ s_i·max_q A_qp). Any other
    entry's update is clip(negative) = 0 and stays 0. Made by :meth:`scan`."""

    @classmethod
    def scan(cls, S, Y, H, scale, den, reach, row_bound, max_terms=None):
        """(the candidates, their number); the candidates are None once their coupling sums
        would cost more than ``max_terms`` terms a sweep (Σ_i |E_i|·(nnz(S_i) + 1)), and are
        then counted to the end but not gathered. In row blocks (no u × k temporary): O(u k)
        time, O(|E|) memory."""
        u, k = S.shape
        rows, cols, vals, hd, yv = [], [], [], [], []
        terms = count = 0
        over = False  # past max_terms: the rest is counted, not gathered
        for block in row_slices(u, k, 1 << 20):  # loop over row blocks
            hd_b = H[block] * scale[None, :]  # ρH/den, the values the dense update uses
            limit = (row_bound[block] * (1.0 + 1e-12))[:, None] * reach[None, :]
            keep = hd_b <= limit
            keep |= S[block] != 0
            keep |= Y[block] != 0
            per_row = keep.sum(axis=1, dtype=np.int64)
            count += int(per_row.sum())
            if not over:  # a sweep's terms: each candidate's sum runs over the row's S non-zeros
                terms += int(per_row @ (np.count_nonzero(S[block], axis=1) + 1))
                over = max_terms is not None and terms > max_terms
            if over:
                continue
            flat = np.flatnonzero(keep)
            r, c = np.divmod(flat, k)
            rows.append(r + block.start)
            cols.append(c)
            vals.append(S[block].ravel()[flat])
            hd.append(hd_b.ravel()[flat])
            yv.append(Y[block].ravel()[flat])
        if over:
            return None, count
        E = cls()
        E.rows, E.cols = np.concatenate(rows), np.concatenate(cols)
        E.s, E.hd = np.concatenate(vals), np.concatenate(hd)
        y = np.concatenate(yv)
        E.is_y = y != 0  # 2Y/den is added at Y's non-zeros only, as the dense update does
        E.y_term = np.zeros(y.size)
        E.y_term[E.is_y] = 2.0 * y[E.is_y] / den[E.cols[E.is_y]]
        E.indptr = _row_pointer(E.rows, u)
        E.row_bound, E._inputs = row_bound, (Y, H, scale, den, reach)
        return E, count

    def rebuilt(self, S, row_sums) -> _Entries:
        """The candidates again, for S as it is now and a bound of ``_ROW_SUM_SLACK`` times
        ``row_sums`` (no budget: correctness does not depend on it)."""
        Y, H, scale, den, reach = self._inputs
        return self.scan(S, Y, H, scale, den, reach, _ROW_SUM_SLACK * row_sums)[0]

    def write_to(self, S) -> None:
        S[self.rows, self.cols] = self.s


def _coupling_sums(E, at, A_flat, k) -> np.ndarray:
    """(S·A)_ip at the entries ``at`` of E, each a sum over its row's non-zero entries of E in
    column order (S is zero elsewhere in the row): the terms, order and rounding of a CSR ×
    dense product. O(|E| + Σ_at nnz(S_i)) time; chunked to ``TERMS_PER_CHUNK`` terms."""
    out = np.empty(at.size)
    nz = np.flatnonzero(E.s != 0)  # S's non-zeros, in E's (row-major) order
    nz_ptr = _row_pointer(E.rows[nz], E.indptr.size - 1)
    rows = E.rows[at]
    counts = nz_ptr[rows + 1] - nz_ptr[rows]
    ends = np.cumsum(counts)
    first = 0
    while first < at.size:  # loop over chunks of entries
        last = int(np.searchsorted(ends, ends[first] - counts[first] + TERMS_PER_CHUNK, "right"))
        last = max(last, first + 1)
        cnt = counts[first:last]
        total = int(cnt.sum())
        offsets = np.cumsum(cnt) - cnt
        f = nz[np.repeat(nz_ptr[rows[first:last]] - offsets, cnt) + np.arange(total)]
        terms = E.s[f] * A_flat[E.cols[f] * k + np.repeat(E.cols[at[first:last]], cnt)]
        owner = np.repeat(np.arange(last - first), cnt)
        out[first:last] = np.bincount(owner, weights=terms, minlength=last - first)
        first = last
    return out


def _coupling(C_off, gamma) -> tuple[np.ndarray, np.ndarray]:
    """(den (k,), A (k × k)) of the sparse S-sweeps: den = 2 + 4γ C_off 1 and A = 4γ C_off/den,
    made once per S-step for all its row blocks. O(k²)."""
    den = 2.0 + 4.0 * gamma * C_off.sum(axis=0)
    return den, (4.0 * gamma) * C_off / den[None, :]


def _s_sweeps_sparse(S, Y, coupling, blocks, rho, H, tol, max_sweeps, omega, density):
    """The W ≡ 1 sweeps of :func:`s_step` while S is mostly exact zeros (float64; S updated in
    place at the end).

    The same projected-SOR coordinate update as :func:`_s_sweeps`, block by block,
    new = clip(old + ω((2Y + 4γ S C_off − ρH)/den − old), 0, 1) with den = 2 + 4γ C_off 1,
    regrouped as ω(S·A + 2Y/den − ρH/den) + (1 − ω)·old, A = 4γ C_off/den, S·A summed over
    the row's non-zeros in column order (a CSR × dense product). Two exact forms, the same
    values to the bit: on the candidate entries only (:class:`_Entries`; late in a run, when
    ρ is large, ~1 % of u·k: O(Σ_i |E_i|·nnz(S_i)) a sweep, E_i a row's candidates) when their sums
    cost fewer terms than S has entries, else with S as CSR (:func:`_s_sweeps_csr`,
    O(nnz(S)·k + u k) a sweep). Returns (S, sweeps, finished): not finished when S filled in
    past ``_FILLED`` times ``density`` (then S holds the state reached, for the dense sweeps
    to go on from)."""
    u, k = S.shape
    den, A = coupling
    bound = _ROW_SUM_SLACK * S.sum(axis=1)
    budget = CANDIDATE_TERMS_PER_ENTRY * u * k
    E, count = _Entries.scan(S, Y, H, rho / den, den, A.max(axis=0), bound, max_terms=budget)
    sparse_entries = density * u * k
    if sparse_entries < count <= _UNINFORMATIVE * sparse_entries:
        return S, 0, False  # it fills in (see _UNINFORMATIVE): the dense sweeps from the start
    if E is None:
        return _s_sweeps_csr(S, Y, A, den, blocks, rho, H, tol, max_sweeps, omega, density)
    return _s_sweeps_candidates(S, E, A, blocks, tol, max_sweeps, omega, density)


def _s_sweeps_candidates(S, E, A, blocks, tol, max_sweeps, omega, density):
    """:func:`_s_sweeps_sparse` on the candidate entries ``E`` of S; every other entry provably
    stays 0. O(|E|) memory besides the chunks' of :func:`_coupling_sums`."""
    u, k = S.shape
    block_of = np.empty(k, dtype=np.intp)
    for b, J in enumerate(blocks):  # loop over base clusterings
        block_of[J] = b
    A_flat = A.ravel()

    def by_block(E) -> list[np.ndarray]:  # each block's entries of E, in E's order
        of_entry = block_of[E.cols]
        return [np.flatnonzero(of_entry == b) for b in range(len(blocks))]

    in_block = by_block(E)
    active = np.ones(u, dtype=bool)
    n_active = u
    sweeps = 0
    finished = True  # max_sweeps spent counts as finished, as in the dense solver
    for sweeps in range(1, max_sweeps + 1):  # noqa: B007 - sweeps is reported
        on = active[E.rows]
        if np.count_nonzero(E.s[on]) > _FILLED * density * n_active * k:
            # filled in (the first S-step from S = Y): the dense sweeps take over these rows
            sweeps -= 1
            finished = False
            break
        row_delta = np.zeros(u)
        for b in range(len(blocks)):  # loop over base clusterings
            at = in_block[b][on[in_block[b]]]
            x = _coupling_sums(E, at, A_flat, k)
            x -= E.hd[at]
            y_here = E.is_y[at]
            x[y_here] += E.y_term[at[y_here]]
            old = E.s[at]
            was = np.flatnonzero(old != 0)
            if omega != 1.0:
                x *= omega
                x[was] += (1.0 - omega) * old[was]
            np.clip(x, 0.0, 1.0, out=x)
            change = x.copy()  # max_j |new − old| per row: new itself where old = 0
            change[was] = np.abs(x[was] - old[was])
            np.maximum.at(row_delta, E.rows[at], change)
            E.s[at] = x
            sums = np.bincount(E.rows, weights=E.s, minlength=u)
            if np.any(sums[active] > E.row_bound[active]):  # outgrown: new candidates
                E.write_to(S)
                E = E.rebuilt(S, np.maximum(sums, E.row_bound))
                on, in_block = active[E.rows], by_block(E)
        done = active & (row_delta < tol)
        if done.any():
            active &= ~done
            n_active = int(active.sum())
            if n_active == 0:
                break
    E.write_to(S)
    return S, sweeps, finished


def _rows_cols(rows: np.ndarray, J):
    """Index of the sub-matrix rows × J (J a slice or an index array)."""
    return (rows, J) if isinstance(J, slice) else np.ix_(rows, J)


def dense_to_csr(x: np.ndarray, threads: int = 1) -> sp.csr_matrix:
    """``scipy.sparse.csr_matrix(x)`` of a C-ordered 2-D array (the same arrays, sorted
    indices), from one pass of ``flatnonzero`` instead of the row and column index arrays of
    ``nonzero``; row blocks on ``threads`` threads. O(size) time, O(nnz) memory."""
    n, m = x.shape

    def part(rows):  # a row block's row and column indices and values
        block = x[rows].reshape(-1)
        flat = np.flatnonzero(block != 0)  # on a mask: ~2× faster than on the floats
        r, c = np.divmod(flat, m)
        return r + rows.start, c, block[flat]

    blocks = (row_slices(n, m, 1 << 20) if threads > 1 else None) or [slice(0, n)]
    r, c, vals = (np.concatenate(a) for a in zip(*map_threads(part, blocks, threads), strict=True))
    return sp.csr_matrix((vals, c, _row_pointer(r, n)), shape=(n, m))


def _row_pointer(rows: np.ndarray, n: int) -> np.ndarray:
    """CSR's ``indptr`` (n + 1,) of entries whose sorted row indices are ``rows``."""
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return indptr


def _s_sweeps_csr(S, Y, A, den, blocks, rho, H, tol, max_sweeps, omega, density):
    """:func:`_s_sweeps_sparse` with S held as one CSR matrix per base clustering, for the
    steps where too many entries are candidates (float64; S updated in place at the end); ``A``
    and ``den`` as that function makes them.

    The same projected-SOR coordinate update as :func:`_s_sweeps`, block by block,
    new = clip(old + ω((2Y + 4γ S C_off − ρH)/den − old), 0, 1) with den = 2 + 4γ C_off 1,
    regrouped as S·(4γ C_off/den) + 2Y/den − ρH/den so that the coupling product is sparse ×
    dense and the Y and relaxation terms touch only non-zeros. Per sweep and active row:
    O(nnz(S_i)·k) for the products plus ~7 passes over the row's k entries (the dense solver
    makes ~8 and a k × k product). Memory: the CSR blocks, ρH/den (u × k) and one u × k_b
    block at a time. Returns (S, sweeps, finished): not finished when S filled in past
    ``_FILLED`` times ``density`` (then S holds the state reached, for the dense sweeps to go
    on from)."""
    u, k = S.shape
    blocks = _block_slices(blocks)
    Ab = [np.ascontiguousarray(A[:, J]) for J in blocks]
    # ρH/den, one contiguous array per block (the values of H * (ρ/den), to the bit)
    Hd = [H[:, J] * (rho / den[J])[None, :] for J in blocks]
    Sp = [sp.csr_matrix(S[:, J]) for J in blocks]
    yterm = []  # (flat index in the block, 2 Y/den) of each block's non-zeros of Y
    for J in blocks:  # loop over base clusterings
        Yb = Y[:, J]
        r, c = np.nonzero(Yb)
        yterm.append((r * Yb.shape[1] + c, 2.0 * Yb[r, c] / den[J][c]))
    active = np.arange(u)
    sweeps = 0
    finished = True  # max_sweeps spent counts as finished, as in the dense solver
    for sweeps in range(1, max_sweeps + 1):  # noqa: B007 - sweeps is reported
        if sum(P.nnz for P in Sp) > _FILLED * density * active.size * k:
            # filled in (the first S-step from S = Y): the dense sweeps take over these rows
            sweeps -= 1
            finished = False
            break
        row_delta = np.zeros(active.size)
        for b in range(len(blocks)):  # loop over base clusterings
            x = sp.hstack(Sp, format="csr") @ Ab[b]  # ua × k_b, dense
            x -= Hd[b]
            flat = x.reshape(-1)  # a view: the block's entries by flat index
            at, v = yterm[b]
            flat[at] += v
            P = Sp[b]  # the block's old values (zero outside P's pattern)
            was = np.repeat(np.arange(P.shape[0]) * x.shape[1], np.diff(P.indptr)) + P.indices
            if omega != 1.0:
                x *= omega
                flat[was] += (1.0 - omega) * P.data
            np.clip(x, 0.0, 1.0, out=x)
            # max_j |new − old| per row: new itself where old = 0 (new ≥ 0)
            kept = flat[was]
            flat[was] = np.abs(kept - P.data)
            np.maximum(row_delta, x.max(axis=1, initial=0.0), out=row_delta)
            flat[was] = kept
            Sp[b] = dense_to_csr(x)
            del x, flat
        done = row_delta < tol
        if done.any():
            rows = active[done]
            for P, J in zip(Sp, blocks, strict=True):  # loop over base clusterings
                S[_rows_cols(rows, J)] = P[done].toarray()
            keep = ~done
            active = active[keep]
            if active.size == 0:
                break
            new_index = np.cumsum(keep) - 1
            Sp = [P[keep] for P in Sp]
            Hd = [Hb[keep] for Hb in Hd]
            for b, (at, v) in enumerate(yterm):  # loop over base clusterings
                width = Hd[b].shape[1]
                r, c = np.divmod(at, width)
                on = keep[r]
                yterm[b] = (new_index[r[on]] * width + c[on], v[on])
    if active.size:
        for P, J in zip(Sp, blocks, strict=True):  # loop over base clusterings
            S[_rows_cols(active, J)] = P.toarray()
    return S, sweeps, finished


# ----------------------------------------------------------------------------------------------
# the estimator
# ----------------------------------------------------------------------------------------------


ROW_BLOCK_VALUES = 1 << 20
"""Values per row block of the dense S-sweeps (8 MB a float64 array): each block's working
arrays (its float32 copies, the moving rows' copies) are this size, not u × k."""


def _row_blocks(shape: tuple[int, int]) -> list[slice]:
    """Slices of consecutive rows, about ``ROW_BLOCK_VALUES`` values each (at least 256 rows)."""
    return row_slices(*shape, ROW_BLOCK_VALUES, min_rows=256)


def _max_sq_diff(a: np.ndarray, b: np.ndarray) -> float:
    """max (a − b)² over a row block (0 for an empty one)."""
    return float(np.max(np.abs(a - b), initial=0.0)) ** 2


def _running_min(W_min: np.ndarray | None, W: np.ndarray, threads: int) -> np.ndarray:
    """The lowest W reached: a copy of W the first time, else min(W_min, W) in place, by row
    blocks on ``threads`` threads."""
    if W_min is None:
        W_min = np.empty_like(W)
        map_threads(lambda rows: np.copyto(W_min[rows], W[rows]), _row_blocks(W.shape), threads)
        return W_min

    def lower(rows) -> None:
        np.minimum(W_min[rows], W[rows], out=W_min[rows])

    map_threads(lower, _row_blocks(W.shape), threads)
    return W_min


def w_step(
    S, W, Y, C_off, blocks, lam, gamma, *, tol=1e-6, max_sweeps=100, threads=1
) -> tuple[np.ndarray, int]:
    """Paper Eq. 9 (spec §3.1): exact block coordinate descent on the non-convex box QPs of all rows
    at once, warm-started from W (modified in place and returned with the sweep count).

    ``C_off`` is C with a zero diagonal; ``blocks`` lists the column index arrays of the base
    clusterings. Each coordinate is set to its exact 1-D minimiser, so the objective never
    increases and the fixed point satisfies W = clip((λ − 2γ g)/(2A²), 0, 1).

    Rows are independent problems, so each row stops on its own (its largest change in a sweep
    below ``tol``) and later sweeps only touch the rows still moving. Rows that provably end at
    W_i ≡ 1 are set directly: g is increasing in W, so g(W) ≤ g(1), and where
    2A² + 2γ g(1) < λ for every entry of the row the first exact sweep sets it to all ones.

    Cost: the "sure" test two u × k × k GEMMs, whose products (W ≡ 1's) the sweeps then keep up
    to date as W changes (:func:`_spread`: sparse products of the changed entries, O(nnz(ΔW)·k),
    or GEMMs where more than ``_SPARSE_CHANGE`` of a block's entries change), and per sweep ~17
    elementwise passes over ua × k (ua the rows still moving), all float64; memory about seven
    u × k float64 arrays (the stacked products and the active rows' copies). The rows go in
    blocks of about ``ROW_BLOCK_VALUES`` entries, so the working arrays are a block's, not u × k;
    ``threads`` > 1 solves them on that many threads (the same values to the bit).
    """

    def solve(rows) -> int:  # W[rows] is a view: updated in place
        args = (C_off, blocks, lam, gamma, tol, max_sweeps)
        return _w_step_rows(S[rows], W[rows], Y[rows], *args)[1]

    # rows are independent problems: a block at a time
    return W, max(map_threads(solve, _row_blocks(S.shape), threads))


def _w_step_rows(S, W, Y, C_off, blocks, lam, gamma, tol, max_sweeps) -> tuple[np.ndarray, int]:
    """:func:`w_step` on the rows given (W updated in place)."""
    u, k = S.shape
    blocks = _block_slices(blocks)
    A2 = (S - Y) ** 2
    S2 = S * S
    colsum = C_off.sum(axis=0)
    SC, S2C = S @ C_off, S2 @ C_off
    g1 = np.maximum(S2 * colsum - 2.0 * S * SC + S2C, 0.0)
    sure = np.all(2.0 * A2 + 2.0 * gamma * g1 < lam, axis=1)
    del g1
    # 1/(2A²), +inf where 2A² is 0 (to _DEN_EPS): the update is then ±inf, clipped to 1 or 0
    with np.errstate(divide="ignore"):
        inv = np.where(2.0 * A2 > _DEN_EPS, 0.5 / A2, np.inf)
    del A2
    W[sure] = 1.0
    active = np.nonzero(~sure)[0]
    if active.size == 0:
        return W, 1
    if active.size == u:  # every row moves: views (W updated in place), no copies
        m = {"W": W, "S": S, "S2": S2, "inv": inv}
    else:  # the moving rows' copies; the full 1/(2A²) and S2 go
        m = {"W": W[active], "S": S[active], "S2": S2[active], "inv": inv[active]}
        SC, S2C = SC[active], S2C[active]
    del inv, S2
    # P = [W·C, (S⊙W)·C, (S²⊙W)·C] on the active rows: the test's products for W ≡ 1, less
    # those of 1 − W (sparse), then kept up to date as each block changes W
    m["P0"] = np.empty((active.size, k))
    m["P0"][...] = colsum
    m["P1"], m["P2"] = SC, S2C
    del SC, S2C
    _spread([m["P0"], m["P1"], m["P2"]], m["W"] - 1.0, m["S"], m["S2"], C_off)
    sweeps = 0
    for sweeps in range(1, max_sweeps + 1):  # noqa: B007 - sweeps is reported
        row_delta = np.zeros(active.size)
        P = [m["P0"], m["P1"], m["P2"]]
        for J in blocks:  # loop over base clusterings
            Sj, S2j = m["S"][:, J], m["S2"][:, J]
            new = S2j * P[0][:, J]  # g = max(S²P0 − 2S P1 + P2, 0), then the update, in place
            tmp = Sj * P[1][:, J]
            tmp *= 2.0
            new -= tmp
            new += P[2][:, J]
            np.maximum(new, 0.0, out=new)
            new *= -2.0 * gamma
            new += lam  # λ − 2γg
            old = m["W"][:, J]
            with np.errstate(invalid="ignore"):
                new *= m["inv"][:, J]  # (λ − 2γg)/(2A²); 0 · inf = nan where both are 0
            np.clip(new, 0.0, 1.0, out=new)
            held = np.isnan(new)  # λ = 2γg where 2A² = 0: any value is a minimiser, kept
            if held.any():
                new[held] = old[held]
            change = new - old
            np.maximum(row_delta, np.abs(change).max(axis=1), out=row_delta)
            _spread(P, change, Sj, S2j, C_off[J])
            m["W"][:, J] = new
        active = _drop_stopped(W, active, row_delta < tol, m, "W")
        if active.size == 0:
            break
    _write_back(W, active, m, "W")
    return W, sweeps


# share of a block's entries above which a change of W reaches the products by GEMMs rather
# than by sparse products of the changed entries
_SPARSE_CHANGE = 0.05


def _spread(P, change, S, S2, C_rows) -> None:
    """Add to the W-step's products P (three ua × k arrays) what a change of W on some columns
    does: P[0] += ΔW·C_rows, P[1] += (S⊙ΔW)·C_rows, P[2] += (S²⊙ΔW)·C_rows, with ``change`` (ua ×
    k_J) ΔW, ``S`` and ``S2`` those columns of S and S², ``C_rows`` (k_J × k) their rows of
    C_off. O(nnz(ΔW)·k + rows changed · k) with sparse products while few entries change (the
    W-steps change ~0.3 % of W), else three ua × k_J × k GEMMs."""
    r, c = np.nonzero(change)
    if r.size == 0:
        return
    if r.size > _SPARSE_CHANGE * change.size:
        for i, term in enumerate((change, S * change, S2 * change)):
            P[i] += term @ C_rows
        return
    rows, inverse = np.unique(r, return_inverse=True)
    d = change[r, c]
    for i, values in enumerate((d, S[r, c] * d, S2[r, c] * d)):
        M = sp.csr_matrix((values, (inverse, c)), shape=(rows.size, change.shape[1]))
        P[i][rows] += M @ C_rows
