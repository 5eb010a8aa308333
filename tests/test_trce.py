"""TRCE (seed 000): per-step optimality against brute force; the invariants of spec §7."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import brentq, minimize
from threadpoolctl import threadpool_limits

from adseg.consensus import FUSERS
from adseg.consensus.trce import (
    TRCE,
    _BaseGraphs,
    _laplacian,
    _merge_components,
    _objective,
    _smallest_eigenpairs,
    alpha_step,
    count_components,
    project_simplex_rows,
    solve_b,
    sqdist_rows,
    w_step,
)
from adseg.metrics import ari, clustering_accuracy

# ------------------------------------------------------------------ fixtures


@pytest.fixture(autouse=True)
def _one_blas_thread():
    # Tiny matrices: BLAS threads only contend on a loaded 2-core machine (10× slower).
    with threadpool_limits(limits=1):
        yield


def _partition(n: int, c: int, rng: np.random.RandomState) -> np.ndarray:
    p = np.arange(n) % c
    rng.shuffle(p)
    return p


def _noisy_copies(p, m, flip, rng, n_labels=None) -> np.ndarray:
    """m clusterings: p with a share `flip` of items moved to a random cluster, labels permuted."""
    n = p.size
    k = n_labels or p.max() + 1
    cols = []
    for _ in range(m):
        q = p.copy()
        moved = rng.rand(n) < flip
        q[moved] = rng.randint(0, k, moved.sum())
        cols.append(rng.permutation(k)[q] + 7)  # arbitrary label values
    return np.column_stack(cols)


def _dense_base(labels: np.ndarray) -> np.ndarray:
    """Brute force: the m dense A^(k) (m, n, n); only for tiny n."""
    same = labels.T[:, :, None] == labels.T[:, None, :]
    return same / same.sum(axis=2, keepdims=True)


def _small_state(seed=0, n=12, m=4, c=3):
    rng = np.random.RandomState(seed)
    labels = _noisy_copies(_partition(n, c, rng), m, 0.3, rng)
    base = _BaseGraphs.from_labels(labels)
    alpha = rng.uniform(1.5, 6.0, m)
    alpha = alpha * np.sum(1 / alpha)  # Σ 1/α = 1
    w = rng.uniform(0.2, 1.0, n)
    F = np.linalg.qr(rng.randn(n, c))[0]
    return labels, base, alpha, w, F


# ------------------------------------------------------------------ construction (§7.1–2)


def test_base_graphs_match_brute_force():
    labels, base, alpha, _, _ = _small_state()
    dense = _dense_base(labels)
    m = labels.shape[1]
    for k in range(m):
        Ak = base.weighted(np.eye(m)[k])
        np.testing.assert_allclose(Ak, dense[k], atol=1e-14)
        np.testing.assert_allclose(Ak.sum(axis=1), 1.0)
        np.testing.assert_allclose(Ak, Ak.T)
        np.testing.assert_allclose(Ak @ Ak, Ak, atol=1e-14)  # idempotent
        assert np.all(np.diag(Ak) > 0)
    np.testing.assert_allclose(base.weighted(alpha), np.tensordot(alpha, dense, 1), atol=1e-13)
    A0 = base.weighted(np.ones(m)) / m
    np.testing.assert_allclose(A0.sum(axis=1), 1.0)
    np.testing.assert_array_equal(A0 > 0, dense.sum(axis=0) > 0)  # support Ω


def test_kl_rows_match_brute_force():
    labels, base, alpha, w, F = _small_state(1)
    H = base.weighted(alpha) * (w**2)[:, None]
    B, _ = solve_b(H, sqdist_rows(F), 0.7)
    dense = _dense_base(labels)
    ratio = np.where(dense > 0, dense / np.where(dense > 0, B[None], 1.0), 1.0)
    brute = np.sum(dense * np.log(ratio), axis=2).T  # (n, m)
    d = base.kl_rows(B)
    np.testing.assert_allclose(d, brute, atol=1e-12)
    assert np.all(np.isfinite(d)) and np.all(d >= -1e-12)  # §7.11


# ------------------------------------------------------------------ w-step (§7.3)


def test_w_step_closed_form_and_grid():
    rng = np.random.RandomState(2)
    b = np.concatenate([rng.uniform(0, 3, 20), [0.0, 0.25, 0.5]])
    gamma = 1.0
    w = w_step(b, gamma)
    assert np.all((w > 0) & (w <= 1))
    np.testing.assert_array_equal(w == 1, 2 * b <= gamma)
    grid = np.linspace(0, 1, 200001)
    brute = grid[np.argmin(grid[None, :] ** 2 * b[:, None] - gamma * grid[None, :], axis=1)]
    np.testing.assert_allclose(w, brute, atol=1e-5)
    assert np.all(w_step(b, 2.0) >= w)  # non-decreasing in γ
    assert np.all(np.diff(w_step(np.sort(b), gamma)) <= 0)  # non-increasing in b


# ------------------------------------------------------------------ B-step (§7.4)


def _b_objective(row_H, row_G, rho, x):
    return -np.sum(row_H * np.log(x)) + rho * np.sum(row_G * x)


def test_b_step_kkt_bracket_and_brute_force():
    labels, base, alpha, w, F = _small_state(3)
    H = base.weighted(alpha) * (w**2)[:, None]
    G = sqdist_rows(F)
    rho = 2.5
    B, theta = solve_b(H, G, rho)
    support = H > 0
    np.testing.assert_allclose(B.sum(axis=1), 1.0, atol=1e-13)
    assert np.all(B >= 0)
    np.testing.assert_array_equal(B > 0, support)  # supp(B) = Ω
    h = H.sum(axis=1)
    g = np.where(support, G, 0).max(axis=1)
    lo = np.maximum(np.diag(H), h - rho * g)
    assert np.all(theta >= lo * (1 - 1e-12)) and np.all(theta <= h * (1 + 1e-12))
    kkt = np.where(support, H / np.where(support, B, 1) - rho * G, np.nan)
    np.testing.assert_allclose(kkt, np.where(support, theta[:, None], np.nan), rtol=1e-9)
    for i in range(H.shape[0]):  # reference root finder, row by row (test only)
        ref = brentq(lambda t, i=i: np.sum(H[i] / (rho * G[i] + t)) - 1, lo[i], h[i], xtol=1e-15)
        assert theta[i] == pytest.approx(ref, rel=1e-10)
    # Brute force on one row: SLSQP over the simplex restricted to the support.
    i = 0
    s = support[i]
    res = minimize(
        lambda x: _b_objective(H[i, s], G[i, s], rho, x),
        np.full(s.sum(), 1 / s.sum()),
        method="SLSQP",
        bounds=[(1e-12, 1)] * s.sum(),
        constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1}],
        options={"ftol": 1e-14, "maxiter": 500},
    )
    np.testing.assert_allclose(B[i, s], res.x, atol=1e-5)
    f_opt = _b_objective(H[i, s], G[i, s], rho, B[i, s])
    rng = np.random.RandomState(0)
    for _ in range(50):  # random feasible neighbours with the same support
        x = B[i, s] * np.exp(0.05 * rng.randn(s.sum()))
        assert f_opt <= _b_objective(H[i, s], G[i, s], rho, x / x.sum()) + 1e-12


def test_b_step_without_penalty_is_normalised_h():
    _, base, alpha, w, F = _small_state(4)
    H = base.weighted(alpha) * (w**2)[:, None]
    expected = H / H.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(solve_b(H, sqdist_rows(F), 0.0)[0], expected)
    np.testing.assert_allclose(solve_b(H, np.zeros_like(H), 3.0)[0], expected)


def test_b_step_large_scale_theta_beyond_fixed_bracket():
    # α can be large, so θ can exceed the reference code's fixed bracket [eps, 1e4].
    _, base, _, w, F = _small_state(5)
    H = base.weighted(np.full(4, 1e5)) * (w**2)[:, None]
    B, theta = solve_b(H, sqdist_rows(F), 1.0)
    assert theta.max() > 1e4
    np.testing.assert_allclose(B.sum(axis=1), 1.0, atol=1e-12)


# ------------------------------------------------------------------ A-step / E (§7.5–6)


def _proj_sort(v):
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1
    k = np.nonzero(u - css / np.arange(1, v.size + 1) > 0)[0][-1]
    return np.maximum(v - css[k] / (k + 1), 0)


def test_simplex_projection_exact():
    rng = np.random.RandomState(6)
    V = np.vstack([rng.randn(30, 9), 5 * rng.randn(5, 9), np.full((1, 9), 1 / 9)])
    A = project_simplex_rows(V)
    np.testing.assert_allclose(A.sum(axis=1), 1.0, atol=1e-13)
    assert np.all(A >= 0)
    np.testing.assert_allclose(A, np.vstack([_proj_sort(v) for v in V]), atol=1e-13)
    tau = (V - A)[A > 0]  # one τ per row on the positive entries
    for i in range(V.shape[0]):
        t = (V[i] - A[i])[A[i] > 0]
        assert np.ptp(t) < 1e-12 and np.all(V[i][A[i] == 0] <= t[0] + 1e-12)
    assert tau.size
    v = V[0]
    res = minimize(  # brute-force QP
        lambda x: np.sum((x - v) ** 2),
        np.full(9, 1 / 9),
        method="SLSQP",
        bounds=[(0, 1)] * 9,
        constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1}],
        options={"ftol": 1e-14},
    )
    np.testing.assert_allclose(A[0], res.x, atol=1e-6)


def test_a_step_noise_properties():
    _, base, alpha, w, F = _small_state(7)
    H = base.weighted(alpha) * (w**2)[:, None]
    G = sqdist_rows(F)
    rho = 1.0
    B, _ = solve_b(H, G, rho)
    np.testing.assert_allclose(project_simplex_rows(B - 0 * G), B, atol=1e-14)  # G ≡ 0 → A = B
    norms = []
    for lam in (1e-2, 1.0, 1e2, 1e4):
        A = project_simplex_rows(B - rho / (2 * lam) * G)
        E = B - A
        np.testing.assert_allclose(E.sum(axis=1), 0.0, atol=1e-13)
        assert np.all(E <= B + 1e-15) and np.all(E >= B - 1 - 1e-15)
        norms.append(np.linalg.norm(E))
    assert norms[-1] < 1e-3 * norms[0] and np.all(np.diff(norms) <= 1e-15)


# ------------------------------------------------------------------ L, F (§7.7–8)


def test_laplacian_and_components():
    rng = np.random.RandomState(8)
    n = 15
    A = rng.rand(n, n) * (rng.rand(n, n) < 0.15)
    block = np.arange(n) // 5  # three blocks, possibly split further
    A *= block[:, None] == block[None, :]
    A[np.arange(n), np.arange(n)] += 0.1
    A /= A.sum(axis=1, keepdims=True)
    L = _laplacian(A)
    np.testing.assert_allclose(L, L.T)
    np.testing.assert_allclose(L @ np.ones(n), 0, atol=1e-14)
    ev = np.linalg.eigvalsh(L)
    assert ev[0] >= -1e-10
    z = count_components(A)
    assert z >= 3 and np.sum(ev <= 1e-10) == z


def test_f_step_eigenpairs():
    _, base, alpha, _, _ = _small_state(9, n=20)
    A = base.weighted(alpha) / alpha.sum()
    L = _laplacian(A)
    c = 3
    ev, F = _smallest_eigenpairs(L, c, "dense")
    F = F[:, :c]
    np.testing.assert_allclose(F.T @ F, np.eye(c), atol=1e-12)
    np.testing.assert_allclose(np.trace(F.T @ L @ F), np.linalg.eigvalsh(L)[:c].sum(), atol=1e-12)
    Q = np.linalg.qr(np.random.RandomState(0).randn(c, c))[0]
    np.testing.assert_allclose(sqdist_rows(F @ Q), sqdist_rows(F), atol=1e-12)
    # identity 2 tr(FᵀLF) = Σ_ij A_ij G_ij, valid for non-symmetric A
    A_ns = A * np.random.RandomState(1).uniform(0.5, 1.5, A.shape)
    A_ns /= A_ns.sum(axis=1, keepdims=True)
    L_ns = _laplacian(A_ns)
    assert 2 * np.trace(F.T @ L_ns @ F) == pytest.approx(np.sum(A_ns * sqdist_rows(F)))
    ev_sparse, _ = _smallest_eigenpairs(L, c, "arpack")
    np.testing.assert_allclose(ev_sparse, ev, atol=1e-8)
    # the F-step minimises Σ G A over orthonormal F (block monotonicity, §7.10)
    rng = np.random.RandomState(2)
    best = np.sum(sqdist_rows(F) * A)
    for _ in range(20):
        Fr = np.linalg.qr(rng.randn(A.shape[0], c))[0]
        assert best <= np.sum(sqdist_rows(Fr) * A) + 1e-12


# ------------------------------------------------------------------ α (§7.9) and J4 blocks (§7.10)


def test_alpha_step_optimal():
    rng = np.random.RandomState(10)
    o = rng.uniform(0.1, 5.0, 6)
    a = alpha_step(o)
    assert np.all(a > 0)
    assert abs(np.sum(1 / a) - 1) < 1e-12
    assert np.ptp(a * np.sqrt(o)) < 1e-12
    assert a.sum() >= o.size**2 - 1e-9
    assert a @ o == pytest.approx(np.sqrt(o).sum() ** 2)
    for _ in range(100):
        ar = rng.uniform(0.1, 10, o.size)
        ar = ar * np.sum(1 / ar)
        assert a @ o <= ar @ o + 1e-12
    np.testing.assert_array_equal(alpha_step(np.zeros(4)), np.full(4, 4.0))


def test_w_and_alpha_blocks_do_not_increase_objective():
    _, base, alpha, w, F = _small_state(11)
    G = sqdist_rows(F)
    rho, lam, gamma = 1.0, 0.1, 1.0
    B, _ = solve_b(base.weighted(alpha) * (w**2)[:, None], G, rho)
    A = project_simplex_rows(B - rho / (2 * lam) * G)
    d = base.kl_rows(B)
    j0 = _objective(d, alpha, w, gamma, lam, B, A, G, rho)
    w1 = w_step(d @ alpha, gamma)
    j1 = _objective(d, alpha, w1, gamma, lam, B, A, G, rho)
    a2 = alpha_step((w1**2) @ d)
    j2 = _objective(d, a2, w1, gamma, lam, B, A, G, rho)
    assert j1 <= j0 + 1e-12 and j2 <= j1 + 1e-12


# ------------------------------------------------------------------ end to end (§7.12–16)


def test_identical_clusterings_recovered():
    rng = np.random.RandomState(12)
    p = _partition(60, 4, rng)
    labels = np.column_stack([rng.permutation(4)[p] for _ in range(6)])
    f = TRCE(4, random_state=0).fit(labels)
    assert clustering_accuracy(p, f.labels_) == 1.0
    assert f.labels_path_ == "components" and f.n_components_ == 4
    np.testing.assert_allclose(f.clustering_weights_, 6.0)  # o_k = 0 guard → α_k = m


def test_corrupted_member_gets_smallest_weight():
    rng = np.random.RandomState(13)
    p = _partition(80, 4, rng)
    labels = _noisy_copies(p, 6, 0.05, rng)
    labels = np.column_stack([labels, rng.randint(0, 4, 80)])  # one random clustering
    f = TRCE(4, random_state=0).fit(labels)
    assert clustering_accuracy(p, f.labels_) == 1.0
    assert np.argmin(f.clustering_weights_) == labels.shape[1] - 1
    assert abs(np.sum(1 / f.clustering_weights_) - 1) < 1e-12
    w = f.instance_weights_
    assert w.shape == (80,) and np.all((w > 0) & (w <= 1))
    A = f.graph_.toarray()
    np.testing.assert_allclose(A.sum(axis=1), 1.0, atol=1e-12)
    assert count_components(A) == 4


def test_equivariance():
    rng = np.random.RandomState(14)
    p = _partition(90, 3, rng)
    labels = _noisy_copies(p, 8, 0.25, rng)
    base = TRCE(3, random_state=0).fit(labels)
    perm = rng.permutation(90)
    permuted = TRCE(3, random_state=0).fit(labels[perm])
    assert ari(base.labels_[perm], permuted.labels_) == pytest.approx(1.0)
    np.testing.assert_allclose(permuted.instance_weights_, base.instance_weights_[perm], rtol=1e-6)
    cols = rng.permutation(8)
    swapped = TRCE(3, random_state=0).fit(labels[:, cols])
    np.testing.assert_array_equal(swapped.labels_, base.labels_)
    np.testing.assert_allclose(swapped.clustering_weights_, base.clustering_weights_[cols])
    # relabelling the clusters inside one clustering changes nothing (§7.1)
    relabelled = labels.copy()
    relabelled[:, 0] = 100 - relabelled[:, 0]
    np.testing.assert_array_equal(TRCE(3, random_state=0).fit_predict(relabelled), base.labels_)
    z = base.n_components_
    assert set(np.unique(base.labels_)) == set(range(z))
    assert base.labels_[0] == 0  # numbered by smallest member index


def test_no_noise_ablation_collapses():
    rng = np.random.RandomState(15)
    p = _partition(120, 4, rng)
    labels = _noisy_copies(p, 10, 0.3, rng)
    with pytest.warns(RuntimeWarning, match="connected components"):
        f = TRCE(4, noise=False, on_mismatch="return", random_state=0).fit(labels)
    assert f.n_components_ == 1 and f.labels_path_ == "mismatch"
    assert np.all(f.labels_ == 0) and f.noise_norm_ == 0.0
    # the default repairs it to the requested number of clusters
    g = TRCE(4, noise=False, random_state=0).fit(labels)
    assert g.labels_path_ == "spectral" and np.unique(g.labels_).size == 4


@pytest.mark.slow
def test_no_noise_ablation_collapses_on_lung(shared_datasets):
    from adseg_research.datasets import load_dataset

    data = load_dataset("pool_lung", shared_datasets)
    labels = data.members[:, :20]
    # the paper's Table 4 ablation, with the paper's γ = 1 (not the default quantile start)
    full = TRCE(5, gamma_init=1.0, random_state=0).fit(labels)
    assert full.n_components_ == 5
    assert clustering_accuracy(data.y, full.labels_) > 0.75
    with pytest.warns(RuntimeWarning):
        e0 = TRCE(5, gamma_init=1.0, noise=False, on_mismatch="return").fit(labels)
    assert e0.n_components_ == 1


def test_ablation_options():
    rng = np.random.RandomState(16)
    p = _partition(60, 3, rng)
    labels = _noisy_copies(p, 5, 0.2, rng)
    fa = TRCE(3, learn_alpha=False).fit(labels)
    np.testing.assert_array_equal(fa.clustering_weights_, np.full(5, 5.0))
    fa1 = TRCE(3, learn_alpha=False, fixed_alpha="one").fit(labels)
    np.testing.assert_array_equal(fa1.clustering_weights_, np.ones(5))
    fw = TRCE(3, learn_w=False).fit(labels)
    np.testing.assert_array_equal(fw.instance_weights_, np.ones(60))
    # default γ start: the public code's quantile rule (issue 39); 1.0 is the paper's value
    assert TRCE(3).get_params()["gamma_init"] == "quantile"
    fq = TRCE(3).fit(labels)
    assert fq.history_[0]["gamma"] > 0
    fq_named = TRCE(3, gamma_init="quantile").fit(labels)
    assert fq_named.history_[0]["gamma"] == fq.history_[0]["gamma"]
    np.testing.assert_array_equal(fq_named.labels_, fq.labels_)
    f1 = TRCE(3, gamma_init=1.0).fit(labels)
    assert f1.history_[0]["gamma"] == 1.0


def test_mismatch_paths():
    rng = np.random.RandomState(17)
    p = _partition(60, 3, rng)
    labels = _noisy_copies(p, 5, 0.1, rng)
    # huge λ leaves almost no noise: too few components within one iteration
    with pytest.warns(RuntimeWarning):
        r = TRCE(3, lam=1e8, max_iter=1, min_iter=1, on_mismatch="return").fit(labels)
    assert r.n_components_ < 3 and r.labels_path_ == "mismatch"
    s = TRCE(3, lam=1e8, max_iter=1, min_iter=1, on_mismatch="spectral", random_state=0)
    assert np.unique(s.fit_predict(labels)).size == 3 and s.labels_path_ == "spectral"
    # asking for more clusters than the data support: merged back to n_clusters
    many = TRCE(2, lam=1e-6, max_iter=1, min_iter=1, on_mismatch="spectral").fit(labels)
    assert np.unique(many.labels_).size == 2
    assert many.labels_path_ in ("merged", "components")
    default = TRCE(3, random_state=0).fit(labels)
    assert np.unique(default.labels_).size == 3 and default.labels_path_.startswith("components")


def test_registration_and_validation():
    assert FUSERS["trce"] is TRCE
    labels = np.array([[0, 1], [0, 1], [1, 0], [1, -1]])
    assert TRCE(2).fit(labels).labels_.shape == (4,)  # -1 accepted (a singleton), see below
    ok = np.array([[0, 1], [0, 1], [1, 0], [1, 0]])
    with pytest.raises(ValueError, match="lam"):
        TRCE(2, lam=0).fit(ok)
    with pytest.raises(ValueError, match="on_mismatch"):
        TRCE(2, on_mismatch="ignore").fit(ok)
    with pytest.raises(ValueError, match="gamma_init"):
        TRCE(2, gamma_init="median").fit(ok)
    with pytest.raises(ValueError, match="n_clusters"):
        TRCE(4).fit(ok)
    with pytest.raises(TypeError, match="max_iter"):
        TRCE(2, max_iter=2.5).fit(ok)
    assert TRCE(2).get_params()["lam"] == 1e-2  # sklearn convention: params stored as given


def test_dense_and_arpack_solvers_agree():
    rng = np.random.RandomState(18)
    p = _partition(100, 3, rng)
    labels = _noisy_copies(p, 6, 0.15, rng)
    a = TRCE(3, eigen_solver="dense").fit(labels)
    b = TRCE(3, eigen_solver="arpack").fit(labels)
    assert ari(a.labels_, b.labels_) > 0.95


def test_merge_fallback_unions_whole_components():
    rng = np.random.RandomState(19)
    p = _partition(40, 4, rng)
    coarse = np.where(p < 2, 0, 1)
    M = _BaseGraphs.from_labels(np.column_stack([p, coarse, coarse])).weighted(np.ones(3))
    merged = _merge_components(p, M, 2)
    # each merged cluster is a union of whole components, joined where co-association is high
    assert ari(coarse, merged) == pytest.approx(1.0)
    assert _merge_components(p, M, 4).max() == 3


def test_missing_labels_are_singletons_as_the_fuser_contract_asks():
    """DESIGN §3: every fuser takes -1 = missing; TRCE refused it (only the pipeline filled it)."""
    from adseg.consensus._base import missing_as_singletons

    rng = np.random.default_rng(3)
    truth = np.repeat(np.arange(3), 20)
    labels = np.stack([truth] * 6, axis=1)
    labels[rng.random(labels.shape) < 0.1] = -1
    filled = missing_as_singletons(labels)
    assert (filled >= 0).all() and (filled[labels >= 0] == labels[labels >= 0]).all()
    for j in range(labels.shape[1]):  # each missing entry a cluster of its own
        new = filled[labels[:, j] == -1, j]
        assert len(set(new)) == new.size and not set(new) & set(labels[:, j])
    fused = TRCE(n_clusters=3, random_state=0).fit(labels).labels_
    np.testing.assert_array_equal(fused, TRCE(n_clusters=3, random_state=0).fit(filled).labels_)
    assert clustering_accuracy(truth, fused) == 1.0


def test_items_labelled_nowhere_do_not_take_a_cluster_of_their_own():
    """Each such item was a component of the learned graph by itself (a singleton in every
    clustering), so two of them among three clean clusters of ten merged two real clusters."""
    from sklearn.metrics import adjusted_rand_score

    y = np.repeat(np.arange(3), 10)
    labels = np.column_stack([y, (y + 1) % 3, 2 - y])
    labels[[0, 15], :] = -1
    fitted = TRCE(n_clusters=3, random_state=0).fit(labels)
    covered = np.ones(30, dtype=bool)
    covered[[0, 15]] = False
    assert adjusted_rand_score(y[covered], fitted.labels_[covered]) == 1.0
    assert np.unique(fitted.labels_).size == 3
    assert fitted.labels_[0] == fitted.labels_[15]  # both in the largest cluster
    assert fitted.graph_.shape == (30, 30) and fitted.graph_[[0, 15]].nnz == 0
    assert fitted.instance_weights_[[0, 15]].tolist() == [0.0, 0.0]
