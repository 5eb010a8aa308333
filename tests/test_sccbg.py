"""SCCBG / SPCC: the invariants of shared/specs/sccbg.md §7 on small synthetic ensembles."""

from __future__ import annotations

import tracemalloc
import warnings

import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.datasets import make_blobs
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

from adseg.consensus import FUSERS, relabel
from adseg.consensus._base import average_nmi
from adseg.consensus.sccbg import (
    SCCBG,
    gamma_choice_key,
    h_matrix,
    membership_matrix,
    objective,
    phi,
    s_step,
    spectral,
    w_step,
    young_relaxation,
)
from adseg.metrics import ari, clustering_accuracy
from adseg_research.ensemble import kmeans_ensemble


@pytest.fixture(autouse=True)
def _one_blas_thread():
    # Tiny GEMMs: threads only add contention on the shared CI cores.
    with threadpool_limits(1):
        yield


def blobs_ensemble(n=150, c=3, m=10, std=1.0, seed=0):
    X, y = make_blobs(n_samples=n, centers=c, cluster_std=std, random_state=seed)
    return kmeans_ensemble(X, m, c, random_state=seed), y


def setup(labels):
    Y, block_of = membership_matrix(labels)
    C = Y.T @ Y
    C_off = C - np.diag(np.diag(C))
    blocks = [np.nonzero(block_of == b)[0] for b in range(labels.shape[1])]
    return Y, C, C_off, blocks, block_of


def step_inputs(seed, n, weights_are_one):
    """(Y, C_off, blocks, S, W, H) of a random ensemble of n items and 4 clusterings, S near Y,
    W ≡ 1 or random in [0.2, 1), H random: inputs for the W- and S-steps."""
    rng = np.random.default_rng(seed)
    labels = np.column_stack([rng.integers(0, k, n) for k in (4, 6, 5, 7)])
    Y, _, C_off, blocks, _ = setup(labels)
    S = np.clip(Y + rng.normal(scale=0.3, size=Y.shape), 0, 1)
    W = np.ones_like(Y) if weights_are_one else rng.uniform(0.2, 1, size=Y.shape)
    return Y, C_off, blocks, S, W, rng.uniform(0, 0.5, size=Y.shape)


def rank_term_of(Y):
    """H of the spectral step on S = Y (c = 2: three singular vectors), rows weighted 1."""
    sig, U, V, du, dv = spectral(Y, np.ones(Y.shape[0]), 3)
    return h_matrix(U, V, du, dv)


@pytest.fixture(scope="module")
def noisy():
    """Overlapping blobs with k_b in [c, 2c]: an ensemble that really disagrees."""
    X, y = make_blobs(n_samples=60, centers=3, cluster_std=2.5, random_state=3)
    rng = np.random.RandomState(3)
    from sklearn.cluster import KMeans

    labels = np.column_stack(
        [KMeans(int(k), n_init=1, random_state=j).fit_predict(X) for j, k in
         enumerate(rng.randint(3, 7, size=8))]
    )  # fmt: skip
    return labels, y


# 1. Y / C structure ----------------------------------------------------------------------------


def test_membership_and_cluster_similarity_structure(noisy):
    labels, _ = noisy
    n, m = labels.shape
    Y, C, _, blocks, block_of = setup(labels)
    assert set(np.unique(Y)) <= {0.0, 1.0}
    np.testing.assert_array_equal(Y.sum(1), m)
    sizes = Y.sum(0)
    np.testing.assert_array_equal(C, C.T)
    np.testing.assert_array_equal(np.diag(C), sizes)
    for J in blocks:
        sub = C[np.ix_(J, J)]
        np.testing.assert_array_equal(sub - np.diag(np.diag(sub)), 0)
    np.testing.assert_array_equal(C.sum(1), m * sizes)
    assert C.sum() == n * m * m
    # Relabelling inside one clustering only permutes columns of its block.
    relabelled = labels.copy()
    relabelled[:, 0] = 10 - labels[:, 0]
    Y2, _ = membership_matrix(relabelled)
    assert sorted(map(tuple, Y.T)) == sorted(map(tuple, Y2.T))


# 3–5. spectral identities, block components, Φ ------------------------------------------------


def dense_laplacian(S):
    n, k = S.shape
    G = np.block([[np.zeros((n, n)), S], [S.T, np.zeros((k, k))]])
    d = G.sum(1)
    return np.eye(n + k) - G / np.sqrt(np.outer(d, d))


def test_spectral_identities_against_dense_laplacian():
    rng = np.random.default_rng(0)
    n, k, c = 9, 6, 3
    S = rng.uniform(0.05, 1.0, size=(n, k))
    sig, U, V, du, dv = spectral(S, np.ones(n), c)
    F = np.vstack([U, V]) / np.sqrt(2)
    np.testing.assert_allclose(F.T @ F, np.eye(c), atol=1e-10)
    assert np.all((sig >= 0) & (sig <= 1)) and abs(sig[0] - 1) < 1e-12
    L = dense_laplacian(S)
    H = h_matrix(U, V, du, dv)
    np.testing.assert_allclose((S * H).sum(), c - sig.sum(), atol=1e-10)
    np.testing.assert_allclose(np.trace(F.T @ L @ F), c - sig.sum(), atol=1e-10)
    # Eigenvalues of L are {1 ± σ_i} ∪ {1}×|n−k|.
    all_sig = np.linalg.svd(S / np.sqrt(np.outer(du, dv)), compute_uv=False)
    expected = np.sort(np.concatenate([1 - all_sig, 1 + all_sig, np.ones(abs(n - k))]))
    np.testing.assert_allclose(np.sort(np.linalg.eigvalsh(L)), expected, atol=1e-10)
    # The F-step is optimal: any other orthonormal F gives a larger trace.
    Q, _ = np.linalg.qr(rng.normal(size=(n + k, c)))
    assert np.trace(Q.T @ L @ Q) >= c - sig.sum() - 1e-12


def test_h_matrix_is_half_the_squared_distances_and_reuses_out():
    rng = np.random.default_rng(3)
    U, V = rng.normal(size=(700, 4)), rng.normal(size=(9, 4))
    du, dv = rng.uniform(0.5, 3.0, 700), rng.uniform(0.5, 3.0, 9)
    a, b = U / np.sqrt(du)[:, None], V / np.sqrt(dv)[:, None]
    expected = 0.5 * ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    H = h_matrix(U, V, du, dv, threads=2)
    np.testing.assert_allclose(H, expected, rtol=1e-12, atol=1e-12)
    assert H.min() >= 0.0
    buffer = np.full_like(H, np.nan)
    again = h_matrix(U, V, du, dv, out=buffer)
    assert again is buffer and np.array_equal(again, H)


@pytest.mark.parametrize("J", [slice(0, 3), slice(3, 7), slice(7, 12), slice(0, 12), [1, 5, 9]])
def test_off_block_product_skips_only_the_zero_block(J):
    from adseg.consensus._sccbg_sweeps import _off_block_product

    rng = np.random.default_rng(4)
    X, M = rng.normal(size=(6, 12)), rng.normal(size=(12, 12))
    M[np.ix_(np.arange(12)[J], np.arange(12)[J])] = 0.0  # a clustering's own block of C_off
    np.testing.assert_allclose(_off_block_product(X, M, J), X @ M[:, J], rtol=1e-13, atol=1e-13)


def test_spectral_with_multiplicities_equals_expanded_rows():
    rng = np.random.default_rng(1)
    S = rng.uniform(0.0, 1.0, size=(5, 7))
    mult = np.array([1.0, 3.0, 2.0, 1.0, 4.0])
    sig, U, V, du, dv = spectral(S, mult, 3)
    big = np.repeat(S, mult.astype(int), axis=0)
    sig2, U2, V2, _, dv2 = spectral(big, np.ones(big.shape[0]), 3)
    np.testing.assert_allclose(sig, sig2, atol=1e-12)
    np.testing.assert_allclose(dv, dv2)
    np.testing.assert_allclose(
        h_matrix(U, V, du, dv),
        h_matrix(U2, V2, big.sum(1), dv2)[np.cumsum(mult).astype(int) - 1],
        atol=1e-10,
    )


def test_block_diagonal_graph_has_c_components_and_expected_h():
    rng = np.random.default_rng(2)
    rows, cols, c = [4, 3, 5], [2, 3, 2], 3
    S = np.zeros((sum(rows), sum(cols)))
    r0 = np.cumsum([0, *rows])
    c0 = np.cumsum([0, *cols])
    for b in range(c):
        S[r0[b] : r0[b + 1], c0[b] : c0[b + 1]] = rng.uniform(0.2, 1, size=(rows[b], cols[b]))
    sig, U, V, du, dv = spectral(S, np.ones(S.shape[0]), c + 1)
    np.testing.assert_allclose(sig[:c], 1.0, atol=1e-10)
    assert sig[c] < 1 - 1e-3
    n, k = S.shape
    assert np.linalg.matrix_rank(dense_laplacian(S), tol=1e-8) == n + k - c
    H = h_matrix(U[:, :c], V[:, :c], du, dv)
    vol = [2 * S[r0[b] : r0[b + 1]].sum() for b in range(c)]
    for p in range(c):
        for q in range(c):
            block = H[r0[p] : r0[p + 1], c0[q] : c0[q + 1]]
            want = 0.0 if p == q else 1 / vol[p] + 1 / vol[q]
            np.testing.assert_allclose(block, want, atol=1e-10)


def test_phi_matrix_form_equals_triple_loop(noisy):
    labels, _ = noisy
    Y, C, *_ = setup(labels[:12])
    rng = np.random.default_rng(3)
    S, W = rng.uniform(size=Y.shape), rng.uniform(size=Y.shape)
    n, k = Y.shape
    brute = sum(
        C[p, q] * (S[i, p] - S[i, q]) ** 2 * W[i, p] * W[i, q]
        for i in range(n)
        for p in range(k)
        for q in range(k)
    )
    np.testing.assert_allclose(phi(S, W, C), brute, rtol=1e-12)


# 6. W-step -------------------------------------------------------------------------------------


def w_row_objective(w, a2, B, lam, gamma):
    return float(a2 @ (w * w) - lam * w.sum() + gamma * w @ B @ w)


def w_fixed_point_residual(S, W, Y, C, lam, gamma):
    g = np.maximum(S**2 * (W @ C) - 2 * S * ((S * W) @ C) + (S**2 * W) @ C, 0)
    grad = 2 * (S - Y) ** 2 * W - lam + 2 * gamma * g
    return np.abs(np.clip(W - grad, 0, 1) - W).max()  # projected-gradient residual


def test_w_step_is_a_kkt_point_and_matches_lbfgsb(noisy):
    labels, _ = noisy
    Y, C, C_off, blocks, _ = setup(labels)
    rng = np.random.default_rng(4)
    gamma, lam = 2e-3, 0.5
    # Iteration 1 (S = Y): A ≡ 0, so Q = 2γB is indefinite whenever B ≠ 0 (spec A7).
    i = 0
    B0 = C * (Y[i][:, None] - Y[i][None, :]) ** 2
    assert np.linalg.eigvalsh(2 * gamma * B0).min() < 0
    S = np.clip(Y + rng.normal(scale=0.3, size=Y.shape), 0, 1)
    W0 = np.ones_like(Y)
    W, _ = w_step(S, W0.copy(), Y, C_off, blocks, lam, gamma, tol=1e-12, max_sweeps=500)
    assert W.min() >= 0 and W.max() <= 1
    assert w_fixed_point_residual(S, W, Y, C, lam, gamma) < 1e-8
    for i in range(5):
        a2 = (S[i] - Y[i]) ** 2
        B = C * (S[i][:, None] - S[i][None, :]) ** 2

        def fun(w, a2=a2, B=B):
            return w_row_objective(w, a2, B, lam, gamma), 2 * a2 * w - lam + 2 * gamma * B @ w

        ref = minimize(fun, W0[i], jac=True, method="L-BFGS-B", bounds=[(0, 1)] * len(a2))
        ours = w_row_objective(W[i], a2, B, lam, gamma)
        assert ours <= w_row_objective(W0[i], a2, B, lam, gamma) + 1e-12
        assert ours <= ref.fun + 1e-6 * max(1.0, abs(ref.fun))  # soft: non-convex


def test_w_step_closed_forms(noisy):
    labels, _ = noisy
    Y, C, C_off, blocks, _ = setup(labels)
    rng = np.random.default_rng(5)
    S = np.clip(Y + rng.normal(scale=0.4, size=Y.shape), 0, 1)
    S[:, 0] = Y[:, 0]  # some A = 0 entries
    lam = 0.3
    W, _ = w_step(S, np.full_like(Y, 0.5), Y, C_off, blocks, lam, 0.0)
    A2 = (S - Y) ** 2
    with np.errstate(divide="ignore"):
        want = np.where(A2 > 1e-12, np.minimum(1, lam / (2 * A2)), 1.0)
    np.testing.assert_allclose(W, want, atol=1e-12)
    # W ≡ 1 once λ ≥ 2 + 2γ m max|π|.
    gamma = 1e-2
    lam = 2 + 2 * gamma * labels.shape[1] * Y.sum(0).max()
    W, _ = w_step(S, rng.uniform(size=Y.shape), Y, C_off, blocks, lam, gamma)
    np.testing.assert_array_equal(W, 1.0)


def test_w_step_sets_entries_with_no_fit_term_by_the_sign_of_their_gradient(noisy):
    """Where A = S − Y is 0 the row's W-problem is linear in W_ip: the exact coordinate step
    sets it to 1 if λ > 2γg and to 0 if λ < 2γg (g at the final W); both occur here."""
    labels, _ = noisy
    Y, C, C_off, blocks, _ = setup(labels)
    rng = np.random.default_rng(9)
    S = np.clip(Y + rng.normal(scale=0.4, size=Y.shape), 0, 1)
    flat = rng.random(Y.shape) < 0.3
    S[flat] = Y[flat]
    lam, gamma = 0.5, 0.05
    W, _ = w_step(S, np.ones_like(Y), Y, C_off, blocks, lam, gamma, tol=1e-12, max_sweeps=500)
    g = np.maximum(S**2 * (W @ C) - 2 * S * ((S * W) @ C) + (S**2 * W) @ C, 0)
    up, down = flat & (lam > 2 * gamma * g + 1e-9), flat & (lam < 2 * gamma * g - 1e-9)
    assert up.any() and down.any()
    np.testing.assert_array_equal(W[up], 1.0)
    np.testing.assert_array_equal(W[down], 0.0)
    assert w_fixed_point_residual(S, W, Y, C, lam, gamma) < 1e-8


# 7. S-step -------------------------------------------------------------------------------------


def s_row_objective(s, w, y, E, h, gamma, rho):
    return float(
        (w**2 * (s - y) ** 2).sum()
        + gamma * (E * (s[:, None] - s[None, :]) ** 2).sum()
        + rho * h @ s
    )


def test_s_step_decreases_surrogate_is_a_fixed_point_and_is_unique(noisy):
    labels, _ = noisy
    Y, C, C_off, blocks, _ = setup(labels)
    rng = np.random.default_rng(6)
    gamma, rho = 1e-2, 50.0
    W = rng.uniform(0.2, 1, size=Y.shape)
    S0 = np.clip(Y + rng.normal(scale=0.2, size=Y.shape), 0, 1)
    sig, U, V, du, dv = spectral(S0, np.ones(Y.shape[0]), 3)
    H = h_matrix(U, V, du, dv)
    before = objective(S0, W, Y, C, 1.0, gamma, rho, H)
    S, _ = s_step(S0.copy(), W, Y, C_off, blocks, gamma, rho, H, tol=1e-13, max_sweeps=2000)
    assert S.min() >= 0 and S.max() <= 1
    assert objective(S, W, Y, C, 1.0, gamma, rho, H) <= before
    # Fixed point of the clip formula, evaluated for all coordinates at once.
    num = 2 * W**2 * Y + 4 * gamma * W * ((W * S) @ C_off) - rho * H
    den = 2 * W**2 + 4 * gamma * W * (W @ C_off)
    assert np.abs(np.clip(num / den, 0, 1) - S).max() < 1e-8
    # Convex: a different warm start reaches the same S; L-BFGS-B agrees row by row.
    S_other, _ = s_step(
        rng.uniform(size=Y.shape), W, Y, C_off, blocks, gamma, rho, H, tol=1e-13, max_sweeps=2000
    )
    np.testing.assert_allclose(S_other, S, atol=1e-7)
    S_sor, _ = s_step(
        S0.copy(), W, Y, C_off, blocks, gamma, rho, H, tol=1e-13, max_sweeps=2000, omega=1.6
    )
    np.testing.assert_allclose(S_sor, S, atol=1e-7)  # over-relaxation: same minimiser
    for i in range(4):
        E = C_off * np.outer(W[i], W[i])

        def fun(s, i=i, E=E):
            grad = 2 * W[i] ** 2 * (s - Y[i]) + 4 * gamma * (E.sum(1) * s - E @ s) + rho * H[i]
            return s_row_objective(s, W[i], Y[i], E, H[i], gamma, rho), grad

        ref = minimize(fun, S0[i], jac=True, method="L-BFGS-B", bounds=[(0, 1)] * Y.shape[1],
                       options=dict(ftol=1e-15, gtol=1e-12))  # fmt: skip
        np.testing.assert_allclose(S[i], ref.x, atol=1e-5)


@pytest.mark.parametrize("coarse_tol", [None, 1e-5])
def test_s_step_holds_the_entries_of_zero_weight_apart(noisy, coarse_tol):
    """Where W_ip = 0 the entry has no quadratic term: the S-step sets it to 0 if H_ip > 0 and
    leaves it where it was otherwise (rounded to float32 by the float32 sweeps); every other
    entry meets the fixed point of the update."""
    labels, _ = noisy
    Y, C, C_off, blocks, _ = setup(labels)
    rng = np.random.default_rng(8)
    gamma, rho = 1e-2, 50.0
    W = rng.uniform(0.2, 1, size=Y.shape)
    W[rng.random(Y.shape) < 0.1] = 0.0
    S0 = np.clip(Y + rng.normal(scale=0.2, size=Y.shape), 0, 1)
    sig, U, V, du, dv = spectral(S0, np.ones(Y.shape[0]), 3)
    H = h_matrix(U, V, du, dv)
    H[rng.random(Y.shape) < 0.3] = 0.0
    S, _ = s_step(
        S0.copy(), W, Y, C_off, blocks, gamma, rho, H, tol=1e-13, max_sweeps=2000,
        coarse_tol=coarse_tol,
    )  # fmt: skip
    free = W == 0
    assert free.sum() > 50 and (free & (H > 0)).any() and (free & (H == 0)).any()
    np.testing.assert_array_equal(S[free & (H > 0)], 0.0)
    held = S0 if coarse_tol is None else S0.astype(np.float32)  # float32 sweeps round it once
    np.testing.assert_array_equal(S[free & (H == 0)], held[free & (H == 0)])
    num = 2 * W**2 * Y + 4 * gamma * W * ((W * S) @ C_off) - rho * H
    den = 2 * W**2 + 4 * gamma * W * (W @ C_off)
    fixed = np.clip(num[~free] / den[~free], 0, 1)
    assert np.abs(fixed - S[~free]).max() < 1e-8


@pytest.mark.parametrize("sparse_share", [0.0, 1.0])  # GEMMs; sparse products
def test_the_w_steps_products_kept_up_to_date_equal_fresh_ones(sparse_share, monkeypatch):
    """The W-step starts from its sure-rows test's products (those of W ≡ 1) and adds what
    1 − W and each block's change of W do: the products of the stacked [W, S⊙W, S²⊙W] made
    afresh, to rounding, whether the changes go by GEMMs or by sparse products."""
    from adseg.consensus import _sccbg_sweeps as sweeps

    monkeypatch.setattr(sweeps, "_SPARSE_CHANGE", sparse_share)
    rng = np.random.default_rng(6)
    u, k = 200, 30
    S = rng.random((u, k))
    S2 = S * S
    C_off = rng.integers(0, 50, size=(k, k)).astype(float)
    C_off = np.triu(C_off, 1) + np.triu(C_off, 1).T
    W = np.where(rng.random((u, k)) < 0.03, rng.random((u, k)), 1.0)
    P = np.stack([np.broadcast_to(C_off.sum(axis=0), (u, k)), S @ C_off, S2 @ C_off])
    sweeps._spread(P, W - 1.0, S, S2, C_off)
    fresh = np.stack([W @ C_off, (S * W) @ C_off, (S2 * W) @ C_off])
    np.testing.assert_allclose(P, fresh, rtol=1e-12, atol=1e-9)
    J = slice(10, 17)  # one block's change
    W2 = W.copy()
    W2[:, J] = np.where(rng.random((u, 7)) < 0.05, 0.0, W[:, J])
    sweeps._spread(P, W2[:, J] - W[:, J], S[:, J], S2[:, J], C_off[J])
    fresh = np.stack([W2 @ C_off, (S * W2) @ C_off, (S2 * W2) @ C_off])
    np.testing.assert_allclose(P, fresh, rtol=1e-12, atol=1e-9)


def test_w_step_does_not_increase_the_objective(noisy):
    labels, _ = noisy
    Y, C, C_off, blocks, _ = setup(labels)
    rng = np.random.default_rng(7)
    S = np.clip(Y + rng.normal(scale=0.3, size=Y.shape), 0, 1)
    W0 = rng.uniform(size=Y.shape)
    H = np.zeros_like(Y)
    lam, gamma = 0.7, 5e-3
    before = objective(S, W0, Y, C, lam, gamma, 1.0, H)
    W, _ = w_step(S, W0.copy(), Y, C_off, blocks, lam, gamma)
    assert objective(S, W, Y, C, lam, gamma, 1.0, H) <= before + 1e-12


# 9–11. end to end ------------------------------------------------------------------------------


def test_identical_clusterings_are_recovered_in_one_iteration():
    rng = np.random.default_rng(8)
    truth = rng.integers(0, 4, size=80)
    cols = []
    for _ in range(6):  # same partition, relabelled per column
        perm = rng.permutation(4) + 10
        cols.append(perm[truth])
    f = SCCBG(4, random_state=0).fit(np.column_stack(cols))
    assert ari(truth, f.labels_) == 1.0
    assert f.n_iter_ == 1 and f.converged_ and f.labels_path_ == "components"
    assert not f.fallback_used_ and f.n_components_found_ == 4
    np.testing.assert_array_equal(f.edge_weights_, 1.0)
    Y, _ = membership_matrix(relabel(np.column_stack(cols)))  # the fuser's column order
    np.testing.assert_array_equal(f.graph_, Y)


def test_recovery_on_separated_blobs():
    labels, y = blobs_ensemble(n=150, c=3, m=10, std=1.5, seed=1)
    base = np.mean([clustering_accuracy(y, labels[:, j]) for j in range(labels.shape[1])])
    assert base >= 0.8
    f = SCCBG(3, random_state=0).fit(labels)
    assert np.unique(f.labels_).size == 3 and not f.fallback_used_
    assert clustering_accuracy(y, f.labels_) >= base


def test_robust_to_a_corrupted_clustering():
    labels, y = blobs_ensemble(n=150, c=3, m=10, std=1.0, seed=2)
    clean = SCCBG(3, random_state=0).fit_predict(labels)
    rng = np.random.default_rng(9)
    corrupted = labels.copy()
    corrupted[:, 0] = rng.integers(0, 3, size=labels.shape[0])  # one clustering is noise
    corrupted[:, 1] = rng.integers(0, 5, size=labels.shape[0])  # and one with 5 random clusters
    f = SCCBG(3, random_state=0).fit(corrupted)
    assert clustering_accuracy(y, corrupted[:, 0]) < 0.5  # the corruption is real
    assert clustering_accuracy(y, clean) >= 0.98
    assert clustering_accuracy(y, f.labels_) >= clustering_accuracy(y, clean) - 0.01
    assert ari(clean, f.labels_) >= 0.95
    assert not f.fallback_used_


def test_output_contract_determinism_and_permutation_invariance(noisy):
    labels, _ = noisy
    f = SCCBG(3, random_state=0).fit(labels)
    out = f.labels_
    assert out.shape == (labels.shape[0],) and out.dtype == np.int64
    np.testing.assert_array_equal(np.unique(out), np.arange(3))
    np.testing.assert_array_equal(SCCBG(3, random_state=0).fit_predict(labels), out)
    assert f.graph_.shape == f.edge_weights_.shape == (labels.shape[0], f.cluster_ids_.shape[0])
    assert 0 <= f.graph_.min() and f.graph_.max() <= 1
    assert 0 <= f.edge_weights_.min() and f.edge_weights_.max() <= 1
    assert f.n_components_found_ >= 1 and f.n_isolated_instances_ >= 0
    # SCCBG-W: permuting and relabelling the base clusterings leaves the partition unchanged.
    rng = np.random.default_rng(10)
    perm_labels = labels[:, rng.permutation(labels.shape[1])]
    perm_labels = perm_labels * 7 + 3
    a = SCCBG(3, learn_weights=False, random_state=0).fit_predict(labels)
    b = SCCBG(3, learn_weights=False, random_state=0).fit_predict(perm_labels)
    assert ari(a, b) == 1.0


def test_compression_of_identical_rows_is_exact(noisy):
    labels, _ = noisy
    big = np.vstack([labels, labels[:25], labels[::2]])
    a = SCCBG(3, gamma=1e-3, random_state=0).fit(big)
    b = SCCBG(3, gamma=1e-3, compress=False, random_state=0).fit(big)
    assert a.n_unique_rows_ < big.shape[0] == b.n_unique_rows_
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_allclose(a.graph_, b.graph_, atol=1e-10)
    np.testing.assert_allclose(a.edge_weights_, b.edge_weights_, atol=1e-10)


# 12–13. schedule and the SCCBG-W equivalence ---------------------------------------------------


def test_schedule_lambda_doubles_and_rho_moves_by_factors_of_two(noisy):
    labels, _ = noisy
    f = SCCBG(3, random_state=0).fit(labels)
    t = np.arange(f.n_iter_)
    np.testing.assert_allclose(f.lambda_history_, 0.5 * 2.0**t)
    assert f.rho_history_[0] == 1.0
    ratios = f.rho_history_[1:] / f.rho_history_[:-1]
    assert set(np.round(ratios, 12)) <= {2.0, 1.0, 0.5}  # 1: exactly c components found
    # ρ grows while there are fewer than c components: the first steps double.
    assert ratios[0] == 2.0


def test_sccbg_w_equals_sccbg_for_small_gamma(noisy):
    labels, _ = noisy
    n, m = labels.shape
    Y, _ = membership_matrix(labels)
    gamma = 1e-5
    assert 2 * gamma * m * Y.sum(0).max() < 0.5
    a = SCCBG(3, gamma=gamma, random_state=0).fit(labels)
    b = SCCBG(3, gamma=gamma, learn_weights=False, random_state=0).fit(labels)
    np.testing.assert_array_equal(a.min_edge_weights_, 1.0)
    np.testing.assert_allclose(a.graph_, b.graph_, atol=1e-8)
    np.testing.assert_array_equal(a.labels_, b.labels_)


def test_large_gamma_drops_conflicting_entries_early(noisy):
    labels, _ = noisy
    f = SCCBG(3, gamma=1e-1, random_state=0).fit(labels)
    # 2γg ≥ λ0 excludes entries in the first iteration; the minimum records them ...
    assert f.min_edge_weights_.min() == 0.0
    # ... while W itself ends at 1 once λ has outgrown the conflict mass.
    np.testing.assert_array_equal(f.edge_weights_, 1.0)


# 14. fallbacks ---------------------------------------------------------------------------------


def extractor(c):
    f = SCCBG(c, random_state=0)
    f._rng = np.random.RandomState(0)
    return f


def test_isolated_instance_is_attached_by_co_association():
    # Two blocks of items over clusters {0,1} | {2,3}; item 4 has no edge left in S.
    labels = np.array([[0, 0], [0, 0], [0, 0], [1, 1], [1, 1], [1, 1], [0, 1]])
    Y, _ = membership_matrix(labels)
    S = Y.copy()
    S[6] = 0.0
    S[6, 0] = 0.0
    lab, path, K, n_iso = extractor(2)._extract(S, Y, np.ones(7), np.zeros((7, 2)), np.arange(7), 2)
    assert path == "components+isolated" and K == 2 and n_iso == 1
    np.testing.assert_array_equal(lab[:6], [0, 0, 0, 1, 1, 1])
    # Co-association ½ with both groups: the tie goes to the lowest label.
    assert lab[6] == 0
    S2 = Y.copy()
    S2[6] = 0.0
    Y2 = Y.copy()
    Y2[6] = Y[4]  # now it agrees fully with the second group
    lab2, *_ = extractor(2)._extract(S2, Y2, np.ones(7), np.zeros((7, 2)), np.arange(7), 2)
    assert lab2[6] == 1


def test_too_many_components_are_merged_and_too_few_use_kmeans():
    labels = np.array([[0, 0]] * 3 + [[1, 1]] * 3 + [[2, 2]] * 2)
    Y, _ = membership_matrix(labels)
    lab, path, K, _ = extractor(2)._extract(Y, Y, np.ones(8), np.zeros((8, 2)), np.arange(8), 2)
    assert path == "merge" and K == 3
    np.testing.assert_array_equal(np.unique(lab), [0, 1])
    # One component but c = 2: k-means on the embedding rows.
    S = np.ones_like(Y)
    U = np.vstack([np.tile([1.0, 0.0], (4, 1)), np.tile([0.0, 1.0], (4, 1))])
    lab, path, K, _ = extractor(2)._extract(S, Y, np.ones(8), U, np.arange(8), 2)
    assert path == "kmeans" and K == 1
    np.testing.assert_array_equal(lab, [0, 0, 0, 0, 1, 1, 1, 1])


# missing labels, γ rule, validation, registry, memory ------------------------------------------


def test_missing_labels_mean_no_edge(noisy):
    labels, _ = noisy
    holey = labels.copy()
    rng = np.random.default_rng(11)
    holey[rng.random(labels.shape) < 0.1] = -1
    f = SCCBG(3, random_state=0).fit(holey)
    assert np.unique(f.labels_).size == 3
    Y, _ = membership_matrix(holey)
    np.testing.assert_array_equal(Y.sum(1), (holey != -1).sum(1))
    # An item missing everywhere has no edge: it is isolated and attached by the fallback.
    holey[0] = -1
    f = SCCBG(3, random_state=0).fit(holey)
    assert f.labels_path_.endswith("+isolated") and f.n_isolated_instances_ >= 1


def test_auto_gamma_is_the_documented_label_free_rule(noisy):
    labels, _ = noisy
    grid = (1e-4, 1e-2, 1e-1)
    f = SCCBG(3, gamma="auto", gamma_grid=grid, random_state=0).fit(labels)
    keys = []
    for g in grid:
        run = SCCBG(3, gamma=g, random_state=0).fit(labels)
        keys.append(gamma_choice_key(average_nmi(run.labels_, labels), run.fallback_used_))
        assert f.gamma_scores_[g][0] == pytest.approx(keys[-1][0])
    assert f.gamma_ == grid[max(range(len(grid)), key=lambda i: (keys[i], -i))]
    np.testing.assert_array_equal(
        f.labels_, SCCBG(3, gamma=f.gamma_, random_state=0).fit_predict(labels)
    )


@pytest.mark.parametrize(
    "kwargs, error",
    [
        (dict(gamma=-1.0), ValueError),
        (dict(gamma="best"), ValueError),
        (dict(gamma="auto", gamma_grid=()), ValueError),
        (dict(gamma=0.5, gamma_grid=(float("nan"),)), ValueError),  # unused, still checked
        (dict(gamma=0.5, gamma_grid=()), ValueError),
        (dict(gamma=0.5, gamma_grid="0.5"), TypeError),
        (dict(max_iter=0), ValueError),
        (dict(rho0=0.0), ValueError),
        (dict(n_clusters=50), ValueError),
    ],
)
def test_bad_parameters_are_rejected(noisy, kwargs, error):
    labels, _ = noisy
    params = dict(n_clusters=3) | kwargs
    with pytest.raises(error):
        SCCBG(**params).fit(labels)


def test_registered_under_both_names():
    assert FUSERS["sccbg"] is SCCBG and FUSERS["spcc"] is SCCBG


def test_memory_is_linear_no_n_by_n_array():
    labels, _ = blobs_ensemble(n=3000, c=3, m=6, std=3.0, seed=4)
    tracemalloc.start()
    SCCBG(3, compress=False, max_iter=3, random_state=0).fit(labels)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    n = labels.shape[0]
    assert peak < 0.25 * n * n * 8  # an n × n float64 array alone would be 72 MB


@pytest.mark.slow
def test_pool_lung_beats_the_base_clusterings(shared_datasets):
    from adseg_research.datasets import load_dataset

    ds = load_dataset("pool_lung", shared_datasets)
    labels = ds.members[:, :20]
    f = SCCBG(ds.n_classes, random_state=0).fit(labels)
    base = np.mean([clustering_accuracy(ds.y, labels[:, j]) for j in range(20)])
    assert clustering_accuracy(ds.y, f.labels_) > base


def test_mixed_precision_s_step_reaches_the_float64_minimiser(noisy):
    """The float32 warm-up sweeps change the path, not the answer: the float64 sweeps that follow
    decide convergence, for learned weights and for W ≡ 1."""
    labels, _ = noisy
    Y, C, C_off, blocks, _ = setup(labels)
    rng = np.random.default_rng(8)
    S0 = np.clip(Y + rng.normal(scale=0.2, size=Y.shape), 0, 1)
    sig, U, V, du, dv = spectral(S0, np.ones(Y.shape[0]), 3)
    H = h_matrix(U, V, du, dv)
    for W, ones in ((rng.uniform(0.2, 1, size=Y.shape), False), (np.ones_like(Y), True)):
        ref, _ = s_step(S0.copy(), W, Y, C_off, blocks, 1e-2, 50.0, H, weights_are_one=ones,
                        tol=1e-11, max_sweeps=5000)  # fmt: skip
        mixed, _ = s_step(S0.copy(), W, Y, C_off, blocks, 1e-2, 50.0, H, weights_are_one=ones,
                          tol=1e-11, max_sweeps=5000, coarse_tol=1e-4)  # fmt: skip
        assert mixed.dtype == np.float64
        np.testing.assert_allclose(mixed, ref, atol=1e-8)


def test_young_relaxation_follows_the_coupling(noisy):
    labels, _ = noisy
    Y, C, C_off, blocks, _ = setup(labels)
    omegas = [young_relaxation(C_off, g) for g in (0.0, 1e-5, 1e-3, 1e-1, 10.0)]
    assert omegas[0] == 1.0 and omegas[1] < 1.01
    assert all(b >= a for a, b in zip(omegas, omegas[1:], strict=False))  # monotone in γ
    assert 1.5 < omegas[-1] <= 1.95
    # the iterative (k > 64) path agrees with the dense spectrum on a larger C
    big = np.abs(np.random.default_rng(0).normal(size=(120, 120)))
    big = big + big.T
    np.fill_diagonal(big, 0.0)
    scale = 1.0 / np.sqrt(2.0 + 4.0 * 0.01 * big.sum(0))
    rho_j = np.abs(np.linalg.eigvalsh(0.04 * big * np.outer(scale, scale))).max()
    expected = min(2.0 / (1.0 + np.sqrt(1.0 - rho_j**2)), 1.95)
    assert abs(young_relaxation(big, 0.01) - expected) < 1e-3


def test_auto_relaxation_and_mixed_precision_do_not_change_the_fit(noisy):
    labels, y = noisy
    ref = SCCBG(3, relaxation=1.0, mixed_precision=False, random_state=0).fit(labels)
    fast = SCCBG(3, random_state=0).fit(labels)
    assert 1.0 <= fast.relaxation_ <= 1.95
    np.testing.assert_array_equal(fast.labels_, ref.labels_)
    np.testing.assert_allclose(fast.graph_, ref.graph_, atol=1e-5)


def test_gamma_rule_ranks_anmi_before_the_fallback():
    """A fallback-free but degenerate run (low ANMI) must not beat a much better run that needed
    the isolated-item fallback (the case seen on tr41 and the sample marketplace)."""
    assert gamma_choice_key(0.59, True) > gamma_choice_key(0.08, False)
    assert gamma_choice_key(0.5, False) > gamma_choice_key(0.5, True)  # fallback breaks ties


def test_fewer_connected_rows_than_clusters_still_gives_a_segmentation():
    """At a c inside SCCBG's range (≤ base clusters, ≤ distinct rows) the learned graph can leave
    fewer connected rows than c: k-means was asked for c clusters of 9 points and raised
    scikit-learn's ValueError. Now each connected row is a cluster at most (≤ c labels)."""
    labels = np.array(
        [[2, 1, 1], [0, 0, 0], [0, 3, 2], [3, 2, 2], [3, 2, 2], [2, 2, 3], [1, 3, 2], [0, 1, 3],
         [2, 0, 3], [2, 3, 0], [0, 3, 0], [2, 0, 1], [1, 1, 1], [0, 0, 0], [0, 2, 2], [2, 1, 2],
         [3, 1, 1], [3, 3, 3]]
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = SCCBG(12, random_state=0).fit(labels)
    used = np.unique(fit.labels_)
    assert (
        fit.labels_.shape == (18,) and used.tolist() == list(range(used.size)) and used.size <= 12
    )
    assert fit.labels_[1] == fit.labels_[13]  # identical rows stay together


def test_no_connected_row_at_all_gives_the_segments_asked_not_a_crash(monkeypatch):
    """With every row isolated (K = 0 components) the fallback asked k-means for 0 clusters;
    then it gave one segment for the three asked; rows are now split off to make three."""
    import adseg.consensus.sccbg as module

    labels = np.array([[0, 0], [0, 1], [1, 1], [1, 2], [2, 2], [2, 0]])
    real = SCCBG._extract

    def nothing_connected(self, S, *args):
        return real(self, np.zeros_like(S), *args)

    monkeypatch.setattr(module.SCCBG, "_extract", nothing_connected)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = SCCBG(3, random_state=0).fit(labels)
    assert sorted(np.unique(fit.labels_)) == [0, 1, 2]
    assert fit.labels_path_ == "kmeans+isolated+split"


def test_exactly_n_clusters_when_the_graph_has_fewer_components():
    """Fewer components than c sent the labels to k-means on an embedding with fewer distinct
    rows than c: fewer clusters, with only scikit-learn's warning (QA; 2 of ~60 small random
    inputs). Rows are now split off until there are c; a random sweep finds no shortfall."""
    labels = np.array([[0, 1], [1, 0], [0, 0], [1, 1]])  # fewer components than c = 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # k-means is no longer asked for more groups than points
        fuser = SCCBG(n_clusters=3, random_state=0).fit(labels)
    assert fuser.n_components_found_ < 3
    assert np.unique(fuser.labels_).size == 3 and fuser.labels_path_.endswith("+split")
    rng = np.random.RandomState(1)
    fitted = 0
    for _ in range(150):
        n, m = rng.randint(4, 14), rng.randint(1, 4)
        sample = rng.randint(0, 3, (n, m))
        k = rng.randint(1, np.unique(sample, axis=0).shape[0] + 1)
        try:
            found = SCCBG(n_clusters=k, random_state=0).fit_predict(sample)
        except ValueError:  # more clusters than the base clusterings have: refused, clearly
            continue
        fitted += 1
        assert sorted(np.unique(found)) == list(range(k)), (sample, k, found)
    assert fitted > 100


# large-input (sparse) path ----------------------------------------------------------------------


def test_sparse_s_step_reaches_the_dense_minimiser(noisy, monkeypatch):
    """The CSR sweeps (forced on here: the threshold admits any density) are the same projected-SOR
    updates as the dense ones — same minimiser, same sweep count, same exact zeros — and when S
    fills in they hand over to the dense sweeps without changing the answer."""
    import adseg.consensus.sccbg as sccbg_module

    labels, _ = noisy
    Y, C, C_off, blocks, _ = setup(labels)
    H = rank_term_of(Y)
    W = np.ones_like(Y)
    for density in (1.0, 0.3):  # sparse throughout; sparse, then filled in → dense
        monkeypatch.setattr(sccbg_module, "SPARSE_DENSITY", density)
        for gamma, rho, omega in ((1e-3, 5.0, 1.0), (1e-2, 50.0, 1.3), (1e-4, 1e3, 1.05)):
            kw = dict(weights_are_one=True, tol=1e-12, max_sweeps=5000, omega=omega)
            ref, n_ref = s_step(Y.copy(), W, Y, C_off, blocks, gamma, rho, H, **kw)
            got, n_got = s_step(Y.copy(), W, Y, C_off, blocks, gamma, rho, H, sparse=True, **kw)
            np.testing.assert_allclose(got, ref, atol=1e-10)
            np.testing.assert_array_equal(got == 0, ref == 0)
            if density == 1.0:
                assert n_got == n_ref


def test_sparse_s_step_in_row_blocks_on_threads(noisy, monkeypatch):
    """The sparse S-step solves each row block on its own: in blocks of 20 rows each block's
    rows get the one-block values to the bit (the sparse sums are row by row), and 3 threads
    give the 1 thread values; with a threshold that sends the denser first block to the dense
    sweeps (and filled-in blocks back to them), still the same minimiser."""
    import adseg.consensus.sccbg as sccbg_module
    from adseg.consensus._base import row_slices

    labels, _ = noisy
    Y, C, C_off, blocks, _ = setup(labels)
    H = rank_term_of(Y)
    S0 = 0.2 * Y
    more = np.random.default_rng(3).random((20, Y.shape[1])) < 0.4
    S0[:20] = np.clip(Y[:20] + 0.1 * more, 0, 1)  # a denser first block (~50 % non-zero)
    kw = dict(weights_are_one=True, tol=1e-12, max_sweeps=5000, omega=1.3, sparse=True)
    for density, exact in ((1.0, True), (0.3, False)):
        monkeypatch.setattr(sccbg_module, "SPARSE_DENSITY", density)
        whole, n_whole = s_step(S0.copy(), None, Y, C_off, blocks, 1e-2, 50.0, H, **kw)
        with monkeypatch.context() as patch:
            patch.setattr(sccbg_module, "_row_blocks", lambda shape: row_slices(*shape, 20 * 31))
            assert len(sccbg_module._row_blocks(Y.shape)) == 3
            one, n_one = s_step(S0.copy(), None, Y, C_off, blocks, 1e-2, 50.0, H, **kw)
            three, n_three = s_step(
                S0.copy(), None, Y, C_off, blocks, 1e-2, 50.0, H, threads=3, **kw
            )
        assert np.array_equal(three, one) and n_three == n_one
        if exact:
            assert np.array_equal(one, whole) and n_one == n_whole
        else:
            np.testing.assert_allclose(one, whole, atol=1e-10)
            np.testing.assert_array_equal(one == 0, whole == 0)


def test_sparse_sweeps_coupling_sums_are_a_csr_products_to_the_bit(monkeypatch):
    """The sparse sweeps compute (S·A)_ip only at their candidate entries, summing over the
    row's candidates in column order: the values of scipy's CSR × dense product, to the bit,
    in one chunk or in many."""
    import scipy.sparse as sp

    from adseg.consensus import _sccbg_sweeps as sweeps

    rng = np.random.default_rng(4)
    u, k = 300, 40
    S = np.where(rng.random((u, k)) < 0.2, rng.random((u, k)), 0.0)
    Y = (rng.random((u, k)) < 0.05).astype(float)
    A = rng.random((k, k)) * 0.1
    H = rng.random((u, k))
    den = 2.0 + rng.random(k)
    E, _ = sweeps._Entries.scan(S, Y, H, 0.5 / den, den, A.max(axis=0), S.sum(axis=1))
    in_e = np.zeros((u, k), dtype=bool)
    in_e[E.rows, E.cols] = True
    assert in_e[S != 0].all()  # S's non-zeros are candidates
    at = np.arange(E.rows.size)
    reference = (sp.csr_matrix(S) @ A)[E.rows, E.cols]
    np.testing.assert_array_equal(sweeps._coupling_sums(E, at, A.ravel(), k), reference)
    monkeypatch.setattr(sweeps, "TERMS_PER_CHUNK", 7)
    np.testing.assert_array_equal(sweeps._coupling_sums(E, at, A.ravel(), k), reference)


def test_the_sparse_sweeps_two_forms_give_the_same_bits(noisy, monkeypatch):
    """The sparse S-sweeps run on the candidate entries when their sums are cheap, else with S
    as CSR: the same values to the bit and the same sweeps. The candidates rest on a bound on
    each row's sum of S, found again when a row outgrows it: a tight bound (rebuilt many times)
    and tiny chunks change nothing either — the entries left out provably stay 0 (S starts at
    0.2·Y and grows, so rows do outgrow their bounds)."""
    import adseg.consensus.sccbg as sccbg_module
    from adseg.consensus import _sccbg_sweeps as sweeps

    monkeypatch.setattr(sccbg_module, "SPARSE_DENSITY", 1.0)
    labels, _ = noisy
    Y, C, C_off, blocks, _ = setup(labels)
    H = rank_term_of(Y)
    builds = []
    real = sweeps._Entries.scan.__func__

    def counted(cls, *args, **kwargs):
        made = real(cls, *args, **kwargs)
        builds.append(made[0] is not None)
        return made

    monkeypatch.setattr(sweeps._Entries, "scan", classmethod(counted))
    for gamma, rho, omega in ((1e-3, 5.0, 1.0), (1e-2, 50.0, 1.3), (1e-3, 200.0, 1.1)):
        kw = dict(weights_are_one=True, tol=1e-12, max_sweeps=5000, omega=omega, sparse=True)
        runs = []
        for per_entry, slack, chunk in (
            (0.0, 1.25, 1 << 22),
            (np.inf, 1.25, 1 << 22),
            (np.inf, 1.0, 5),
        ):
            with monkeypatch.context() as patch:
                patch.setattr(sweeps, "CANDIDATE_TERMS_PER_ENTRY", per_entry)
                patch.setattr(sweeps, "_ROW_SUM_SLACK", slack)
                patch.setattr(sweeps, "TERMS_PER_CHUNK", chunk)
                builds.clear()
                runs.append(s_step(0.2 * Y, None, Y, C_off, blocks, gamma, rho, H, **kw))
                runs[-1] += (list(builds),)
        (csr, n_csr, b_csr), (cand, n_cand, b_cand), (tight, n_tight, b_tight) = runs
        assert b_csr == [False] and b_cand[0] and len(b_tight) > 1  # the forms that ran
        np.testing.assert_array_equal(cand, csr)
        np.testing.assert_array_equal(tight, csr)
        assert n_csr == n_cand == n_tight


def test_a_block_whose_candidates_say_it_fills_in_goes_to_the_dense_sweeps(noisy, monkeypatch):
    """Where the candidate entries of a sparse row block are past the sparse density but within
    _UNINFORMATIVE times it, the step fills the block in: no sparse sweep runs, and the result is
    the dense sweeps' to the bit. Past _UNINFORMATIVE times (a loose bound), the sparse sweeps
    run as before."""
    import adseg.consensus.sccbg as sccbg_module
    from adseg.consensus import _sccbg_sweeps as sweeps

    labels, _ = noisy
    Y, C, C_off, blocks, _ = setup(labels)
    H = rank_term_of(Y)
    gamma, rho = 1e-3, 50.0  # the bound admits 36 % of the entries; 26 % are Y's
    den, A = sweeps._coupling(C_off, gamma)
    S0 = 0.2 * Y
    bound = sweeps._ROW_SUM_SLACK * S0.sum(axis=1)
    _, count = sweeps._Entries.scan(S0, Y, H, rho / den, den, A.max(axis=0), bound)
    share, start = count / Y.size, np.count_nonzero(S0) / Y.size
    assert start < share < 1.0
    kw = dict(weights_are_one=True, tol=1e-10, max_sweeps=500, omega=1.2)
    ran = []
    for name in ("_s_sweeps_candidates", "_s_sweeps_csr"):
        real = getattr(sweeps, name)
        monkeypatch.setattr(sweeps, name, lambda *a, real=real, **k: ran.append(1) or real(*a, **k))
    dense, n_dense = s_step(S0.copy(), None, Y, C_off, blocks, gamma, rho, H, **kw)

    # the sparse density between the start's and the candidates': it fills in
    monkeypatch.setattr(sccbg_module, "SPARSE_DENSITY", max(start, share / 2) * 1.0001)
    got, n_got = s_step(S0.copy(), None, Y, C_off, blocks, gamma, rho, H, sparse=True, **kw)
    assert ran == [] and n_got == n_dense
    np.testing.assert_array_equal(got, dense)

    # past _UNINFORMATIVE times the sparse density, the bound says nothing: sparse sweeps run
    monkeypatch.setattr(sweeps, "_UNINFORMATIVE", 0.999 * share / sccbg_module.SPARSE_DENSITY)
    got, _ = s_step(S0.copy(), None, Y, C_off, blocks, gamma, rho, H, sparse=True, **kw)
    assert ran
    np.testing.assert_allclose(got, dense, atol=1e-8)


def test_sparse_spectral_matches_dense(noisy, monkeypatch):
    import adseg.consensus.sccbg as sccbg_module

    monkeypatch.setattr(sccbg_module, "SPARSE_DENSITY", 1.0)
    labels, _ = noisy
    Y, *_ = setup(labels)
    rng = np.random.default_rng(2)
    S = Y * rng.uniform(0.5, 1.0, size=Y.shape)
    mult = rng.integers(1, 4, size=Y.shape[0]).astype(float)
    dense = spectral(S, mult, 4)
    sparse = spectral(S, mult, 4, sparse=True)
    np.testing.assert_allclose(sparse[0], dense[0], atol=1e-12)  # σ
    np.testing.assert_allclose(sparse[3], dense[3], atol=1e-12)  # du
    np.testing.assert_allclose(sparse[4], dense[4], atol=1e-12)  # dv
    # U and V up to the sign of each singular pair (σ distinct here)
    for a, b in ((sparse[1], dense[1]), (sparse[2], dense[2])):
        signs = np.sign(np.sum(a * b, axis=0))
        np.testing.assert_allclose(a * signs, b, atol=1e-8)


@pytest.mark.parametrize("learn_weights", [True, False])
def test_sparse_fit_matches_dense_fit(learn_weights, monkeypatch):
    """A whole fit with the sparse path forced on (below its size threshold) gives the dense
    path's labels and, to the solver tolerance, its graph."""
    import adseg.consensus.sccbg as sccbg_module

    monkeypatch.setattr(sccbg_module, "SPARSE_DENSITY", 0.5)
    labels, _ = blobs_ensemble(n=200, c=4, m=8, std=2.0, seed=5)
    kw = dict(gamma=1e-3, learn_weights=learn_weights, random_state=0)
    dense = SCCBG(4, sparse=False, **kw).fit(labels)
    sparse = SCCBG(4, sparse=True, **kw).fit(labels)
    assert sparse.sparse_path_ and not dense.sparse_path_
    np.testing.assert_array_equal(sparse.labels_, dense.labels_)
    assert sparse.labels_path_ == dense.labels_path_
    assert sparse.n_iter_ == dense.n_iter_
    np.testing.assert_allclose(sparse.graph_, dense.graph_, atol=1e-5)
    # below the size threshold "auto" keeps the dense path
    assert not SCCBG(4, **kw).fit(labels).sparse_path_


def test_sparse_must_be_a_flag_or_auto():
    labels, _ = blobs_ensemble(n=60, c=3, m=4)
    for bad in ("yes", 1, None):
        with pytest.raises(TypeError, match="sparse"):
            SCCBG(3, sparse=bad).fit(labels)


def test_the_fitted_estimator_holds_the_distinct_rows_not_n_by_k():
    """graph_, edge_weights_ and min_edge_weights_ are (n, k), expanded from the u distinct
    label rows' arrays when read; W ≡ 1 throughout is held as no array at all."""
    rng = np.random.default_rng(3)
    distinct = rng.integers(0, 4, size=(40, 3))
    labels = distinct[rng.integers(0, 40, 2_000)]  # n = 2,000 rows, at most 40 distinct
    f = SCCBG(n_clusters=3, learn_weights=False, random_state=0).fit(labels)
    n, k = labels.shape[0], f.cluster_ids_.shape[0]
    held = [v for v in vars(f).values() if isinstance(v, np.ndarray)]
    held += [v for v in vars(f)["_distinct"].values() if v.base is None]
    assert max(a.nbytes for a in held) < n * k * 8 / 10
    assert f.graph_.shape == f.edge_weights_.shape == f.min_edge_weights_.shape == (n, k)
    np.testing.assert_array_equal(f.edge_weights_, 1.0)
    np.testing.assert_array_equal(f.min_edge_weights_, 1.0)
    _, first, inverse = np.unique(labels, axis=0, return_index=True, return_inverse=True)
    graph = f.graph_  # rows with the same labels share one learned row
    np.testing.assert_array_equal(graph, graph[first][inverse.ravel()])


@pytest.mark.parametrize("weights_are_one", [True, False])
def test_row_blocks_give_the_whole_steps_results(monkeypatch, weights_are_one):
    """The W- and S-steps solve each row on its own: in blocks of 256 rows (ROW_BLOCK_VALUES
    lowered) they give the one-block results to rounding, the same sweep counts included."""
    import adseg.consensus._sccbg_sweeps as module

    Y, C_off, blocks, S, W, H = step_inputs(8, 900, weights_are_one)
    results = []
    for values in (10**9, 1):  # one block; then 256-row blocks
        monkeypatch.setattr(module, "ROW_BLOCK_VALUES", values)
        assert len(module._row_blocks(S.shape)) == (1 if values > 1 else 4)
        Wn, w_sweeps = w_step(S, W.copy(), Y, C_off, blocks, 0.5, 2e-3, tol=1e-10)
        Sn, s_sweeps = s_step(
            S.copy(), W, Y, C_off, blocks, 2e-3, 0.7, H, weights_are_one=weights_are_one,
            tol=1e-9, max_sweeps=300, omega=1.3, coarse_tol=1e-4,
        )  # fmt: skip
        results.append((Wn, w_sweeps, Sn, s_sweeps))
    (W1, w1, S1, s1), (W2, w2, S2, s2) = results
    assert (w1, s1) == (w2, s2)
    # the GEMMs on fewer rows may round otherwise (a few 1e-12 seen): far below the sweeps' tol
    np.testing.assert_allclose(W2, W1, rtol=0, atol=1e-10)
    np.testing.assert_allclose(S2, S1, rtol=0, atol=1e-10)


@pytest.mark.parametrize("weights_are_one", [True, False])
def test_threads_give_the_one_threads_results_to_the_bit(monkeypatch, weights_are_one):
    """The row blocks of the W- and S-steps solved on 3 threads: the same values and sweep
    counts as on one, to the bit (each block is solved as it would be alone)."""
    import adseg.consensus._sccbg_sweeps as module

    monkeypatch.setattr(module, "ROW_BLOCK_VALUES", 1)  # 256-row blocks: 4 of them
    Y, C_off, blocks, S, W, H = step_inputs(9, 1000, weights_are_one)
    results = []
    for threads in (1, 3):
        Wn, w_sweeps = w_step(S, W.copy(), Y, C_off, blocks, 0.5, 2e-3, tol=1e-10, threads=threads)
        Sn, s_sweeps = s_step(
            S.copy(), W, Y, C_off, blocks, 2e-3, 0.7, H, weights_are_one=weights_are_one,
            tol=1e-9, max_sweeps=300, omega=1.3, coarse_tol=1e-4, threads=threads,
        )  # fmt: skip
        results.append((Wn, w_sweeps, Sn, s_sweeps))
    (W1, w1, S1, s1), (W3, w3, S3, s3) = results
    assert (w1, s1) == (w3, s3)
    assert not np.array_equal(W1, W) or weights_are_one  # the W-step did change W
    assert np.array_equal(W3, W1) and np.array_equal(S3, S1)


def test_n_jobs_is_checked_and_gives_the_same_fit(monkeypatch):
    """n_jobs follows scikit-learn's convention; a fit whose W-steps run (γ large enough) on 3
    threads over 256-row blocks equals the one-thread fit to the bit."""
    import adseg.consensus._sccbg_sweeps as module

    monkeypatch.setattr(module, "ROW_BLOCK_VALUES", 1)
    rng = np.random.default_rng(5)
    truth = rng.integers(0, 3, 900)
    noisy = rng.random((900, 8)) < 0.3  # 30 % of each clustering's labels at random
    labels = np.where(noisy, rng.integers(0, 4, (900, 8)), truth[:, None])
    one = SCCBG(3, gamma=1e-2, random_state=0).fit(labels)
    three = SCCBG(3, gamma=1e-2, n_jobs=3, random_state=0).fit(labels)
    assert one.n_unique_rows_ > 512  # three row blocks or more
    assert (one.min_edge_weights_ < 1).any()  # the W-step ran
    np.testing.assert_array_equal(three.labels_, one.labels_)
    assert np.array_equal(three.graph_, one.graph_)
    assert np.array_equal(three.min_edge_weights_, one.min_edge_weights_)
    for bad, error in ((0, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(error, match="n_jobs"):
            SCCBG(3, n_jobs=bad).fit(labels)


def test_dense_to_csr_is_scipys_csr_matrix_on_any_threads():
    """The one-pass CSR build (by row blocks on threads) gives scipy's arrays exactly."""
    import scipy.sparse as sp

    from adseg.consensus._sccbg_sweeps import dense_to_csr

    rng = np.random.default_rng(0)
    for shape in ((5000, 300), (7, 3), (0, 4), (3000, 1), (40, 0)):
        x = rng.random(shape) * (rng.random(shape) < 0.05)
        want = sp.csr_matrix(x)
        for threads in (1, 3):
            got = dense_to_csr(x, threads)
            assert got.shape == want.shape
            for name in ("indptr", "indices", "data"):
                assert np.array_equal(getattr(got, name), getattr(want, name)), (shape, threads)


@pytest.mark.parametrize("threads", [1, 3])
def test_the_s_step_measures_its_own_change(noisy, monkeypatch, threads):
    """The outer loop's change test reads per-row sums that the S-step fills in block by block
    (no copy of S): each row's Σ S² before the step and Σ (ΔS)² over it, as computed directly."""
    import adseg.consensus.sccbg as sccbg_module
    from adseg.consensus._base import row_slices

    labels, _ = noisy
    Y, C, C_off, blocks, _ = setup(labels)
    H = rank_term_of(Y)
    monkeypatch.setattr(sccbg_module, "_row_blocks", lambda shape: row_slices(*shape, 20 * 31))
    S0 = 0.5 * Y
    change = np.full((2, Y.shape[0]), np.nan)
    S1, _ = s_step(
        S0.copy(), None, Y, C_off, blocks, 1e-2, 5.0, H,
        weights_are_one=True, omega=1.2, threads=threads, change=change,
    )  # fmt: skip
    assert not np.array_equal(S1, S0)
    np.testing.assert_array_equal(change[0], (S0**2).sum(1))
    np.testing.assert_array_equal(change[1], ((S0 - S1) ** 2).sum(1))
