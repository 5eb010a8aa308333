"""The S-step sweeps of SCCBG (:mod:`adseg.consensus.sccbg`): projected SOR over the rows of
S, one GEMM per base clustering's block (dense), or with S held sparse while it is mostly exact
zeros (docs/algorithms/sccbg.md)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

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


def _s_sweeps(S, W, Y, C_off, blocks, gamma, rho, H, weights_are_one, tol, max_sweeps, omega):
    """The sweeps of :func:`s_step` in the dtype of the arrays passed (S updated in place).
    O(u k²) per sweep (one GEMM per block) on the rows still moving."""
    u, k = S.shape
    blocks = _block_slices(blocks)
    if weights_are_one:
        r_const = C_off.sum(axis=0)
    active = np.arange(u)
    # the rows still moving; all of them at first, as views (S updated in place), compacted
    # into copies only once some rows have stopped: no u × k copies of S, Y and H up front
    Sa, Ya, Ha = S, Y, H
    if not weights_are_one:
        Wa = W
        W2a = Wa * Wa
        WSa = Sa * Wa
    sweeps = 0
    for sweeps in range(1, max_sweeps + 1):  # noqa: B007 - sweeps is reported
        row_delta = np.zeros(active.size, dtype=S.dtype)
        for J in blocks:  # loop over base clusterings
            old = Sa[:, J]
            if weights_are_one:
                t = Sa @ C_off[:, J]
                # num = 2Y + 4γ t − ρH and new = clip(old + ω(num/den − old), 0, 1), evaluated
                # in place in the same order (den = 2 + 4γ Σ_q C_pq ≥ 2 > 0)
                t *= 4.0 * gamma
                t += 2.0 * Ya[:, J]
                t -= rho * Ha[:, J]
                t /= (2.0 + 4.0 * gamma * r_const[J])[None, :]
                t -= old
                t *= omega
                t += old
                new = np.clip(t, 0.0, 1.0, out=t)
            else:
                Wj = Wa[:, J]
                t = WSa @ C_off[:, J]
                r = Wa @ C_off[:, J]
                num = 2.0 * W2a[:, J] * Ya[:, J] + 4.0 * gamma * Wj * t - rho * Ha[:, J]
                den = 2.0 * W2a[:, J] + 4.0 * gamma * Wj * r
                with np.errstate(divide="ignore", invalid="ignore"):
                    new = np.where(
                        den > _DEN_EPS,
                        np.clip(old + omega * (num / den - old), 0.0, 1.0),
                        np.where(Ha[:, J] > 0, 0.0, old),
                    )
            np.maximum(row_delta, np.abs(new - old).max(axis=1), out=row_delta)
            Sa[:, J] = new
            if not weights_are_one:
                WSa[:, J] = new * Wj
        done = row_delta < tol
        if done.any():
            S[active[done]] = Sa[done]
            keep = ~done
            active = active[keep]
            if active.size == 0:
                break
            # one at a time, so that each old copy is freed before the next is made
            Sa = Sa[keep]
            Ya = Ya[keep]
            Ha = Ha[keep]
            if not weights_are_one:
                Wa = Wa[keep]
                W2a = W2a[keep]
                WSa = WSa[keep]
    if active.size and Sa is not S:
        S[active] = Sa
    return S, sweeps


def _rows_cols(rows: np.ndarray, J):
    """Index of the sub-matrix rows × J (J a slice or an index array)."""
    return (rows, J) if isinstance(J, slice) else np.ix_(rows, J)


def _s_sweeps_sparse(S, Y, C_off, blocks, gamma, rho, H, tol, max_sweeps, omega, density):
    """The W ≡ 1 sweeps of :func:`s_step` with S held as one CSR matrix per base clustering
    (float64; S updated in place at the end).

    The same projected-SOR coordinate update as :func:`_s_sweeps`, block by block,
    new = clip(old + ω((2Y + 4γ S C_off − ρH)/den − old), 0, 1) with den = 2 + 4γ C_off 1,
    regrouped as S·(4γ C_off/den) + 2Y/den − ρH/den so that the coupling product is sparse ×
    dense and the Y and relaxation terms touch only non-zeros. Per sweep and active row:
    O(nnz(S_i)·k) for the products plus ~7 passes over the row's k entries (the dense solver
    makes ~20 and a k × k product). Memory: the CSR blocks, ρH/den (u × k) and one u × k_b
    block at a time. Returns (S, sweeps, finished): not finished when S filled in past twice
    ``density`` (then S holds the state reached, for the dense sweeps to go on from)."""
    u, k = S.shape
    blocks = _block_slices(blocks)
    den = 2.0 + 4.0 * gamma * C_off.sum(axis=0)
    A = (4.0 * gamma) * C_off / den[None, :]
    Ab = [np.ascontiguousarray(A[:, J]) for J in blocks]
    Hd = H * (rho / den)[None, :]
    Sp = [sp.csr_matrix(S[:, J]) for J in blocks]
    yterm = []  # (rows, cols, 2 Y/den) of each block's non-zeros of Y
    for J in blocks:  # loop over base clusterings
        Yb = Y[:, J]
        r, c = np.nonzero(Yb)
        yterm.append((r, c, 2.0 * Yb[r, c] / den[J][c]))
    active = np.arange(u)
    sweeps = 0
    finished = True  # max_sweeps spent counts as finished, as in the dense solver
    for sweeps in range(1, max_sweeps + 1):  # noqa: B007 - sweeps is reported
        if sum(P.nnz for P in Sp) > 2.0 * density * active.size * k:
            # filled in (the first S-step from S = Y): the dense sweeps take over these rows
            sweeps -= 1
            finished = False
            break
        row_delta = np.zeros(active.size)
        for b, J in enumerate(blocks):  # loop over base clusterings
            x = sp.hstack(Sp, format="csr") @ Ab[b]  # ua × k_b, dense
            x -= Hd[:, J]
            r, c, v = yterm[b]
            x[r, c] += v
            P = Sp[b]  # the block's old values (zero outside P's pattern)
            pr = np.repeat(np.arange(P.shape[0]), np.diff(P.indptr))
            pc = P.indices
            if omega != 1.0:
                x *= omega
                x[pr, pc] += (1.0 - omega) * P.data
            np.clip(x, 0.0, 1.0, out=x)
            # max_j |new − old| per row: new itself where old = 0 (new ≥ 0)
            kept = x[pr, pc]
            x[pr, pc] = np.abs(kept - P.data)
            np.maximum(row_delta, x.max(axis=1, initial=0.0), out=row_delta)
            x[pr, pc] = kept
            Sp[b] = sp.csr_matrix(x)
            del x
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
            Hd = Hd[keep]
            for b, (r, c, v) in enumerate(yterm):  # loop over base clusterings
                on = keep[r]
                yterm[b] = (new_index[r[on]], c[on], v[on])
    if active.size:
        for P, J in zip(Sp, blocks, strict=True):  # loop over base clusterings
            S[_rows_cols(active, J)] = P.toarray()
    return S, sweeps, finished


# ----------------------------------------------------------------------------------------------
# the estimator
# ----------------------------------------------------------------------------------------------
