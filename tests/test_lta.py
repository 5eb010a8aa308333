"""LTA (seed 002, specs/lta.md §9): preprocessing, the two tensor SVTs, the ADMM sub-steps, the
solver's optimality conditions, the order (in)dependence of the two orientations, and the fuser."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from adseg.consensus import FUSERS, co_association
from adseg.consensus.lta import (
    LTA,
    _admm,
    _CellSpace,
    _Iterates,
    average_linkage_labels,
    coassociation_and_links,
    coherent_cells,
    lta_refine,
    lta_refine_cells,
    spectral_labels,
    svt_frontal,
    svt_sample,
    tensor_nuclear_norm,
)
from adseg.metrics import ari, clustering_accuracy
from adseg.spectral import symmetric_part


def _noisy_ensemble(seed, n_groups=5, size=60, m=10, noise=0.15, sub=2):
    """Spec §9.22: c groups; each clustering splits every group into random sub-clusters and
    relabels a share of the items at random. Items come sorted by group."""
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(n_groups), size)
    cols = []
    for _ in range(m):
        col = y * sub + rng.integers(0, sub, y.size)
        flip = rng.random(y.size) < noise
        col[flip] = rng.integers(0, n_groups * sub, flip.sum())
        cols.append(col)
    return np.column_stack(cols), y


def _small_ensemble(seed=0, n=48, m=4, k=4):
    rng = np.random.default_rng(seed)
    base = rng.integers(0, k, n)
    cols = [np.where(rng.random(n) < 0.2, rng.integers(0, k, n), base) for _ in range(m)]
    return np.column_stack(cols)


def _brute_svt_sample(T1, T2, tau):
    G = np.stack([np.fft.fft(T1, axis=0), np.fft.fft(T2, axis=0)], axis=2)
    U, s, Vh = np.linalg.svd(G, full_matrices=False)
    out = np.fft.ifft((U * np.maximum(s - tau, 0.0)[:, None, :]) @ Vh, axis=0)
    return out[..., 0], out[..., 1]


def _brute_svt_frontal(T1, T2, tau):
    F = np.fft.fft(np.stack([T1, T2], axis=2), axis=2)
    out = np.empty_like(F)
    for k in range(2):
        U, s, Vh = np.linalg.svd(F[:, :, k])
        out[:, :, k] = (U * np.maximum(s - tau, 0.0)) @ Vh
    out = np.fft.ifft(out, axis=2)
    return out[..., 0], out[..., 1]


# --- preprocessing (§9.1–4) -----------------------------------------------------------------


def test_coassociation_and_links_properties():
    labels = _small_ensemble(1)
    n, m = labels.shape
    A, omega = coassociation_and_links(labels)
    np.testing.assert_allclose(A, co_association(labels), atol=1e-15)
    np.testing.assert_array_equal(A, A.T)
    np.testing.assert_array_equal(np.diag(A), 1.0)
    np.testing.assert_allclose(m * A, np.round(m * A), atol=1e-12)
    brute = (labels[:, None, :] == labels[None, :, :]).all(axis=2)
    np.testing.assert_array_equal(omega, brute)
    np.testing.assert_array_equal(omega, A == 1)
    assert (omega <= A).all()
    # transitive: a path of coherent links implies a coherent link
    two_step = (omega.astype(int) @ omega.astype(int)) > 0
    np.testing.assert_array_equal(two_step, omega)


def test_links_invariant_to_renaming_and_column_order():
    labels = _small_ensemble(2)
    rng = np.random.default_rng(0)
    renamed = labels.copy()
    for v in range(labels.shape[1]):
        renamed[:, v] = rng.permutation(10)[labels[:, v]]
    renamed = renamed[:, rng.permutation(labels.shape[1])]
    A, omega = coassociation_and_links(labels)
    A2, omega2 = coassociation_and_links(renamed)
    np.testing.assert_allclose(A, A2, atol=1e-15)
    np.testing.assert_array_equal(omega, omega2)
    # one clustering, or identical clusterings: M = A
    A1, omega1 = coassociation_and_links(labels[:, :1])
    np.testing.assert_array_equal(omega1, A1 == 1)
    np.testing.assert_array_equal(omega1.astype(float), A1)
    # permuting the items permutes A and M
    p = rng.permutation(labels.shape[0])
    A3, omega3 = coassociation_and_links(labels[p])
    np.testing.assert_allclose(A3, A[np.ix_(p, p)], atol=1e-15)
    np.testing.assert_array_equal(omega3, omega[np.ix_(p, p)])


def test_missing_labels_links_are_the_meet_and_transitive():
    """With -1 entries Ω was A == 1, which linked items that never met in a column labelling
    both: (0, -1)–(0, 0)–(-1, 0) linked the first two and the last two, not the first and the
    last (spec §1.3, §9.3: Ω is the meet's same-cell relation, transitive)."""
    labels = np.array([[0, 0], [0, -1], [1, 0], [-1, -1], [0, 0]])
    A, omega = coassociation_and_links(labels)
    np.testing.assert_allclose(A, co_association(labels))
    assert omega[0, 4] and not omega[0, 1] and not omega[0, 2] and not omega[1, 2]
    # an item in no clustering has no links at all, not even to itself
    assert not omega[3].any() and not A[3].any()
    rng = np.random.default_rng(3)
    for _ in range(20):
        labels = rng.integers(0, 3, (40, 4))
        labels[rng.random(labels.shape) < 0.4] = -1
        labels[:, 0][labels[:, 0] == -1] = 0  # no all -1 column
        _, omega = coassociation_and_links(labels)
        covered = (labels != -1).any(axis=1)
        same_row = (labels[:, None, :] == labels[None, :, :]).all(axis=2)
        np.testing.assert_array_equal(omega, same_row & covered[:, None] & covered[None, :])
        two_step = (omega.astype(int) @ omega.astype(int)) > 0
        np.testing.assert_array_equal(two_step, omega)


# --- SVT operators (§9.5–11) ---------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 7, 8])
def test_svt_sample_matches_batched_svd(n):
    rng = np.random.default_rng(n)
    T1, T2 = rng.normal(size=(n, n)), rng.normal(size=(n, n))
    for tau in (0.0, 0.3, 2.0):
        P1, P2 = svt_sample(T1, T2, tau)
        B1, B2 = _brute_svt_sample(T1, T2, tau)
        assert P1.dtype == np.float64 and P2.dtype == np.float64
        np.testing.assert_allclose(P1, B1.real, atol=1e-10)
        np.testing.assert_allclose(P2, B2.real, atol=1e-10)
        assert np.abs(B1.imag).max() < 1e-12


@pytest.mark.parametrize("n", [1, 2, 7, 8])
def test_svt_frontal_matches_fft_definition(n):
    rng = np.random.default_rng(10 + n)
    T1, T2 = rng.normal(size=(n, n)), rng.normal(size=(n, n))
    F = np.fft.fft(np.stack([T1, T2], axis=2), axis=2)
    np.testing.assert_allclose(F[..., 0].real, T1 + T2, atol=1e-12)
    np.testing.assert_allclose(F[..., 1].real, T1 - T2, atol=1e-12)
    P1, P2 = svt_frontal(T1, T2, 0.4)
    B1, B2 = _brute_svt_frontal(T1, T2, 0.4)
    np.testing.assert_allclose(P1, B1.real, atol=1e-10)
    np.testing.assert_allclose(P2, B2.real, atol=1e-10)


@pytest.mark.parametrize("svt, orientation", [(svt_sample, "sample"), (svt_frontal, "frontal")])
def test_svt_extremes_contraction_and_prox(svt, orientation):
    rng = np.random.default_rng(3)
    n = 9
    T1, T2, U1, U2 = (rng.normal(size=(n, n)) for _ in range(4))
    # τ = 0 is the identity; τ above every singular value gives zero
    P1, P2 = svt(T1, T2, 0.0)
    np.testing.assert_allclose(P1, T1, atol=1e-10)
    np.testing.assert_allclose(P2, T2, atol=1e-10)
    big = np.linalg.norm(T1) + np.linalg.norm(T2)
    big *= n if orientation == "sample" else 1.0
    Z1, Z2 = svt(T1, T2, big)
    assert np.abs(Z1).max() < 1e-12 and np.abs(Z2).max() < 1e-12
    tau = 0.8
    P1, P2 = svt(T1, T2, tau)
    Q1, Q2 = svt(U1, U2, tau)
    dist_out = np.sqrt(np.sum((P1 - Q1) ** 2) + np.sum((P2 - Q2) ** 2))
    dist_in = np.sqrt(np.sum((T1 - U1) ** 2) + np.sum((T2 - U2) ** 2))
    assert dist_out <= dist_in + 1e-10
    assert tensor_nuclear_norm(P1, P2, orientation) <= tensor_nuclear_norm(T1, T2, orientation)

    def prox_objective(Z1, Z2):
        fit = np.sum((Z1 - T1) ** 2) + np.sum((Z2 - T2) ** 2)
        return tau * tensor_nuclear_norm(Z1, Z2, orientation) + 0.5 * fit

    best = prox_objective(P1, P2)
    for _ in range(10):
        D1, D2 = rng.normal(scale=1e-3, size=(2, n, n))
        assert best <= prox_objective(P1 + D1, P2 + D2) + 1e-12


def test_svt_sample_transposed_axis_for_symmetric_input():
    rng = np.random.default_rng(4)
    X, Y = rng.normal(size=(2, 10, 10))
    T1, T2 = X + X.T, Y + Y.T
    P1, P2 = svt_sample(T1, T2, 0.5)
    # the same SVT along axis 1 is the transpose of the one along axis 0
    Q1, Q2 = svt_sample(T1.T.copy(), T2.T.copy(), 0.5)
    np.testing.assert_allclose(P1, Q1, atol=1e-12)
    # the output is not symmetric (symmetry comes back only through the B/C splitting)
    assert np.abs(P1 - P1.T).max() > 1e-3
    assert np.abs(P2).max() > 0


@pytest.mark.parametrize("shape", [(1, 1), (7, 7), (12, 9), (9, 12)])
def test_svt_sample_along_rows_is_the_transposed_svt(shape):
    """axis=1 (the solver's layout, DFT along contiguous rows) is the axis-0 SVT of the
    transposes, also with reused buffers and the FFTs split into row blocks on threads."""
    from concurrent.futures import ThreadPoolExecutor

    from adseg.consensus.lta import _RowSVT

    rng = np.random.default_rng(sum(shape))
    T1, T2 = rng.normal(size=(2, *shape))
    P1, P2 = svt_sample(T1.T.copy(), T2.T.copy(), 0.6)
    Q1, Q2 = svt_sample(T1, T2, 0.6, axis=1)
    np.testing.assert_allclose(Q1, P1.T, atol=1e-12)
    np.testing.assert_allclose(Q2, P2.T, atol=1e-12)
    with ThreadPoolExecutor(max_workers=3) as pool:
        svt = _RowSVT(shape, pool, threads=3)
        for tau in (0.6, 0.0):  # the second call reuses the buffers
            R1, R2 = svt(T1, T2, tau)
            S1, S2 = svt_sample(T1, T2, tau, axis=1)
            np.testing.assert_allclose(R1, S1, atol=1e-12)
            np.testing.assert_allclose(R2, S2, atol=1e-12)
    with pytest.raises(ValueError, match="axis"):
        svt_sample(T1, T2, 0.6, axis=2)


# --- sub-steps and solver (§9.12–18) -------------------------------------------------------


@pytest.fixture(scope="module")
def solved():
    labels, y = _noisy_ensemble(0, n_groups=4, size=30, m=6)
    A, omega = coassociation_and_links(labels)
    return {
        "labels": labels,
        "y": y,
        "A": A,
        "omega": omega,
        "sample": lta_refine(A, omega, orientation="sample"),
        "frontal": lta_refine(A, omega, orientation="frontal"),
    }


@pytest.mark.parametrize("orientation", ["sample", "frontal"])
def test_solver_converges_to_a_feasible_point(solved, orientation):
    res, A, omega = solved[orientation], solved["A"], solved["omega"]
    assert res.converged and res.n_iter < 500 and res.residual < 1e-8
    assert res.mu < 1e8  # μ never reaches μ_max
    assert np.abs(res.P1 - res.B).max() < 1e-8
    assert np.abs(res.P2 - res.C).max() < 1e-8
    assert np.abs(res.P2 + res.E - A).max() < 1e-8
    np.testing.assert_allclose(res.P1[omega], 1.0, atol=1e-7)
    for P in (res.P1, res.P2):
        np.testing.assert_allclose(P, P.T, atol=1e-7)
        assert P.min() > -1e-7 and P.max() < 1 + 1e-7
    # B and C are the exact projections: symmetric, in [0, 1], B = 1 on Ω
    np.testing.assert_array_equal(res.B, res.B.T)
    np.testing.assert_array_equal(res.C, res.C.T)
    assert res.B.min() >= 0 and res.B.max() <= 1 and (res.B[omega] == 1).all()
    assert res.C.min() >= 0 and res.C.max() <= 1


@pytest.mark.parametrize("orientation", ["sample", "frontal"])
def test_solver_objective_beats_the_obvious_feasible_points(solved, orientation):
    res, A, omega = solved[orientation], solved["A"], solved["omega"]
    lam = 0.002
    M = omega.astype(float)

    def objective(P1, P2, E):
        return tensor_nuclear_norm(P1, P2, orientation) + lam * np.sum(E**2)

    found = objective(res.P1, res.P2, res.E)
    assert found <= objective(M, A, np.zeros_like(A)) + 1e-6
    assert found <= objective(M, np.zeros_like(A), A) + 1e-6


def test_e_step_zeroes_the_gradient():
    """The solver's own E-step (``_Iterates``, spec §3.2 Eq. 15) minimises its term of the
    augmented Lagrangian: λ‖E‖² + (μ/2)‖P2 + E − A + L2/μ‖², gradient 2λE + μ(P2 + E − A + L2/μ),
    is zero at the E it writes (it recomputed the formula before, QA)."""
    from adseg.consensus.lta import _Iterates

    rng = np.random.default_rng(5)
    A, P1, P2, L1, L2, L3 = rng.random((6, 6, 6))
    E, B, C, W1, W2 = np.zeros((5, 6, 6))
    valid = np.ones((6, 6), dtype=bool)
    lam, mu = 0.002, 3.7
    steps = _Iterates(A, valid, valid, P1, P2, E, B, C, L1, L2, L3, W1, W2)
    steps.e_step_and_projection_targets(mu, tau=0.1, lam=lam)
    grad = 2 * lam * steps.E + mu * (P2 + steps.E - A + L2 / mu)
    assert np.abs(grad).max() < 1e-12 and np.any(steps.E != 0)


def test_solver_is_deterministic(solved):
    again = lta_refine(solved["A"], solved["omega"], orientation="sample")
    np.testing.assert_array_equal(again.P2, solved["sample"].P2)


def _textbook_admm(A, omega, svt, lam=0.002, mu=1e-4, rho=1.1, tol=1e-8, max_iter=500):
    """Spec §3.2 written plainly with whole-array expressions, in the solver's operation order:
    the reference for the solver's fused row-block passes."""
    P1 = P2 = E = B = C = L1 = L2 = L3 = np.zeros_like(A)
    for n_iter in range(1, max_iter + 1):
        tau = 1.0 / mu
        P1, P2 = svt(-tau * L1 + B, (-tau * (L2 + L3) + A - E + C) * 0.5, tau)
        E = (((A - P2) * mu) - L2) / (2.0 * lam + mu)
        B = np.clip(symmetric_part(tau * L1 + P1), 0.0, 1.0)
        B[omega] = 1.0
        C = np.clip(symmetric_part(tau * L3 + P2), 0.0, 1.0)
        R1, R2, R3 = P1 - B, P2 + E - A, P2 - C
        r = max(np.abs(R1).max(), np.abs(R2).max(), np.abs(R3).max())
        L1, L2 = L1 + R1 * mu, L2 + R2 * mu
        if r < tol:
            return P1, P2, E, B, C, n_iter, r
        L3 = L3 + R3 * mu
        mu = min(rho * mu, 1e8)
    return P1, P2, E, B, C, n_iter, r


@pytest.mark.parametrize("block_rows", [1, 7, 1000])
def test_fused_solver_is_bit_identical_to_the_textbook_loop(block_rows, monkeypatch):
    labels, _ = _noisy_ensemble(3, n_groups=3, size=20, m=5)
    A, omega = coassociation_and_links(labels)
    monkeypatch.setattr(_Iterates, "BLOCK_BYTES", block_rows * A[0].nbytes)
    res = _admm(
        A,
        omega,
        svt_sample,
        symmetric_part,
        valid=None,
        lam=0.002,
        mu0=1e-4,
        rho=1.1,
        mu_max=1e8,
        tol=1e-8,
        max_iter=500,
    )
    *iterates, n_iter, r = _textbook_admm(A, omega, svt_sample)
    assert res.converged and res.n_iter == n_iter and res.residual == r
    for name, expected in zip(("P1", "P2", "E", "B", "C"), iterates, strict=True):
        np.testing.assert_array_equal(getattr(res, name), expected, err_msg=name)


def test_cell_reduced_solver_equals_dense_frontal_solver(solved):
    labels = solved["labels"]
    cell, rows, sizes = coherent_cells(labels)
    res, space = lta_refine_cells(cell, rows, sizes)
    dense = solved["frontal"]
    assert res.n_iter == dense.n_iter
    np.testing.assert_allclose(space.expand(res.P2, cell), dense.P2, atol=1e-9)
    np.testing.assert_allclose(space.expand(res.P1, cell), dense.P1, atol=1e-9)
    np.testing.assert_allclose(space.expand(res.E, cell), dense.E, atol=1e-9)


def test_cell_space_svt_matches_dense_svt():
    rng = np.random.default_rng(6)
    sizes = np.array([1, 3, 2, 1, 4])
    cell = np.repeat(np.arange(sizes.size), sizes)[rng.permutation(sizes.sum())]
    space = _CellSpace(sizes)
    packed = []
    for _ in range(2):
        Q = rng.normal(size=(5, 5))
        Q = Q + Q.T
        packed.append(space.pack(Q, rng.normal(size=5)))
    P1, P2 = space.svt(packed[0], packed[1], 0.9)
    D1, D2 = svt_frontal(space.expand(packed[0], cell), space.expand(packed[1], cell), 0.9)
    np.testing.assert_allclose(space.expand(P1, cell), D1, atol=1e-10)
    np.testing.assert_allclose(space.expand(P2, cell), D2, atol=1e-10)


# --- order (in)dependence: regression tests documenting spec §0 (§9.19–20) -------------------


def test_frontal_is_permutation_equivariant_and_sample_is_not():
    labels, _ = _noisy_ensemble(1, n_groups=4, size=25, m=6)
    p = np.random.default_rng(7).permutation(labels.shape[0])
    A, omega = coassociation_and_links(labels)
    Ap, omegap = coassociation_and_links(labels[p])
    front = lta_refine(A, omega, orientation="frontal").P2
    front_p = lta_refine(Ap, omegap, orientation="frontal").P2
    np.testing.assert_allclose(front_p, front[np.ix_(p, p)], atol=1e-6)
    samp = lta_refine(A, omega, orientation="sample").P2
    samp_p = lta_refine(Ap, omegap, orientation="sample").P2
    # the paper's orientation depends on the item order; do not "fix" this silently
    assert np.abs(samp_p - samp[np.ix_(p, p)]).max() > 1e-3


def test_fuser_labels_follow_a_permutation_only_in_frontal_orientation():
    # few clusterings keep the number of distinct label rows (the frontal solver's size) small
    labels, y = _noisy_ensemble(2, size=30, m=5, noise=0.1)
    p = np.random.default_rng(8).permutation(y.size)
    for final in ("sc", "ea"):
        a = LTA(5, final=final, random_state=0).fit_predict(labels)
        b = LTA(5, final=final, random_state=0).fit_predict(labels[p])
        assert ari(a[p], b) == pytest.approx(1.0)
        # §9.22 saw 1.0 with 10 clusterings of 300 items; this smaller ensemble is noisier
        assert clustering_accuracy(y, a) >= 0.95


def test_sample_orientation_reads_the_class_sorted_order():
    """§9.22 characterisation: on the same easy ensemble the paper's orientation does well in
    class-sorted order and badly once the items are shuffled (frontal: 1.0 either way)."""
    labels, y = _noisy_ensemble(3, n_groups=4, size=40, m=8)  # seen: 0.975 sorted, 0.33 shuffled
    p = np.random.default_rng(9).permutation(y.size)
    sorted_acc = clustering_accuracy(
        y, LTA(4, orientation="sample", random_state=0).fit_predict(labels)
    )
    shuffled_acc = clustering_accuracy(
        y[p], LTA(4, orientation="sample", random_state=0).fit_predict(labels[p])
    )
    assert sorted_acc >= 0.9
    assert shuffled_acc <= 0.5


def test_identical_clusterings_are_recovered_by_frontal():
    rng = np.random.default_rng(10)
    pi = rng.integers(0, 6, 90)
    labels = np.column_stack([pi] * 4)
    for final in ("sc", "ea"):
        pred = LTA(6, final=final, random_state=0).fit_predict(labels)
        assert clustering_accuracy(pi, pred) == 1.0


# --- downstream clustering (§9.21) and the fuser's contract --------------------------------


def test_final_clusterings_are_scale_invariant():
    labels, _ = _noisy_ensemble(4, n_groups=3, size=20, m=5)
    S = co_association(labels)
    for c in (2, 4):
        sc = spectral_labels(S, c, random_state=0, n_init=5)
        assert set(np.unique(sc)) == set(range(c))
        np.testing.assert_array_equal(sc, spectral_labels(7.5 * S, c, random_state=0, n_init=5))
        ea = average_linkage_labels(S, c)
        assert set(np.unique(ea)) == set(range(c))
        np.testing.assert_array_equal(ea, average_linkage_labels(0.3 * S + 0.2, c))


def test_fuser_contract_and_registration():
    assert FUSERS["lta"] is LTA
    labels, _ = _noisy_ensemble(5, n_groups=3, size=20, m=5)
    fuser = LTA(3, random_state=0)
    out = fuser.fit_predict(labels)
    assert out.shape == (60,) and out.dtype == np.int64
    assert set(np.unique(out)) <= {0, 1, 2}
    assert fuser.similarity_.shape == (60, 60)
    np.testing.assert_array_equal(fuser.similarity_, fuser.similarity_.T)
    assert fuser.converged_ and fuser.n_iter_ < 500 and fuser.n_cells_ <= 60
    np.testing.assert_array_equal(out, LTA(3, random_state=0).fit_predict(labels))


def test_fuser_accepts_missing_labels():
    labels, y = _noisy_ensemble(6, n_groups=3, size=20, m=6)
    rng = np.random.default_rng(11)
    holey = labels.copy()
    holey[rng.random(labels.shape) < 0.1] = -1
    pred = LTA(3, random_state=0).fit_predict(holey)
    assert pred.shape == y.shape
    assert clustering_accuracy(y, pred) >= 0.9


@pytest.mark.parametrize(
    "params, match",
    [
        ({"orientation": "lateral"}, "orientation"),
        ({"final": "kmeans"}, "final"),
        ({"lam": 0}, "lam"),
        ({"rho": 1.0}, "rho"),
        ({"max_iter": 0}, "max_iter"),
        ({"mu0": 1.0, "mu_max": 0.5}, "mu_max"),
    ],
)
def test_bad_parameters_are_rejected(params, match):
    labels, _ = _noisy_ensemble(7, n_groups=2, size=10, m=3)
    with pytest.raises(ValueError, match=match):
        LTA(2, **params).fit(labels)


def test_bad_labels_are_rejected():
    with pytest.raises(ValueError, match="2-D"):
        LTA(2).fit(np.zeros(5, dtype=int))
    with pytest.raises(ValueError, match="n_clusters"):
        LTA(10).fit(np.zeros((5, 2), dtype=int))


def test_unconverged_zero_matrix_gives_a_clear_error():
    labels, _ = _noisy_ensemble(8, n_groups=2, size=10, m=3)
    from sklearn.exceptions import ConvergenceWarning

    with pytest.warns(ConvergenceWarning), pytest.raises(ValueError, match="max_iter"):
        LTA(2, max_iter=1).fit(labels)  # τ = 1/μ₀ = 1e4 zeroes everything in one step


@pytest.mark.parametrize("last_kept", [4, 1])
def test_cell_svt_lanczos_path_equals_the_full_eigendecomposition(last_kept, monkeypatch):
    """While few eigenpairs survive the threshold, the cell SVT uses Lanczos for the largest-
    magnitude pairs (enlarging the request until one below τ proves the set complete); it must
    give the full eigendecomposition's answer. last_kept=1 forces the enlargement (≈ 12
    survivors)."""
    rng = np.random.default_rng(5)
    g = 480  # the Lanczos path needs g ≥ 400
    sizes = rng.integers(1, 4, size=g)
    X = rng.standard_normal((g, 12))
    Q = X @ np.diag(np.linspace(30, 8, 12)) @ X.T / g + 1e-3 * rng.standard_normal((g, g))
    Q = (Q + Q.T) / 2
    packed = np.vstack([Q, np.diag(Q)[None, :] + 0.01])
    tau = 0.5
    full = _CellSpace(sizes)._matrix_svt(packed.copy(), tau)
    space = _CellSpace(sizes)
    space.kept = [last_kept, last_kept]

    def no_full_eigh(*args, **kwargs):
        raise AssertionError("the full eigendecomposition was used")

    import adseg.consensus.lta as lta_module

    monkeypatch.setattr(lta_module.sla, "eigh", no_full_eigh)
    fast = space._matrix_svt(packed.copy(), tau, 0)
    monkeypatch.undo()
    assert 0 < space.kept[0] < g // 8
    np.testing.assert_allclose(fast, full, atol=1e-10)


def test_average_linkage_accepts_similarities_above_one():
    """The sample orientation's refined matrix can exceed 1; EA must not fail on the negative
    distances 1 − S and, being invariant to positive affine maps, must cut the same tree."""
    rng = np.random.default_rng(3)
    y = np.repeat(np.arange(3), 20)
    S = (y[:, None] == y[None, :]) * 1.0 + 0.3 * rng.random((60, 60))
    S = S + S.T  # entries up to ~2.6
    assert S.max() > 1
    labels = average_linkage_labels(S, 3)
    np.testing.assert_array_equal(labels, average_linkage_labels(S / S.max(), 3))
    assert ari(y, labels) == 1.0


def test_sample_orientation_on_agreeing_clusterings_says_what_to_do():
    agree = np.array([[0, 0], [0, 0], [1, 1], [1, 1]])
    with pytest.raises(ValueError, match="orientation='frontal'"):
        LTA(n_clusters=2, orientation="sample", random_state=0).fit(agree)
    pred = LTA(n_clusters=2, random_state=0).fit_predict(agree)
    assert pred[0] == pred[1] != pred[2] == pred[3]


@pytest.mark.parametrize("n_clusters", [2, 3])
def test_average_linkage_gives_the_clusters_asked_when_merge_heights_tie(n_clusters):
    """Four groups of identical items, every pair of groups equally far apart: fcluster's
    maxclust cut skipped past K at the tied height and LTA's final="ea" returned 1 cluster for
    2 or 3 asked (QA). The tree is now cut after n − K merges: exactly K clusters, each a union
    of whole groups."""
    four = np.column_stack([np.repeat(np.arange(4), 5)] * 3)
    found = FUSERS["lta"](n_clusters=n_clusters, final="ea").fit_predict(four)
    assert len(set(found)) == n_clusters
    assert all(len(set(found[g * 5 : g * 5 + 5])) == 1 for g in range(4))


def test_stopping_at_max_iter_warns_as_rcc_and_rcec_do():
    """converged_ was set to False silently: the nightly's fuser notes never heard of it (QA)."""
    from sklearn.exceptions import ConvergenceWarning

    labels, _ = _noisy_ensemble(8, n_groups=2, size=10, m=3)
    with pytest.warns(ConvergenceWarning, match="LTA stopped at max_iter=20"):
        fuser = LTA(2, max_iter=20, mu0=1.0).fit(labels)
    assert not fuser.converged_ and fuser.n_iter_ == 20
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        assert LTA(2).fit(labels).converged_


def test_the_sample_svt_of_a_zero_or_scalar_gram_matrix_is_finite():
    """With a = d and b = 0 in the 2×2 Gram matrix (a zero spectrum, or slices equal up to the
    unit), the eigenvector gap was 0/0: NaN in every weight, an all-NaN refined matrix reported
    as converged, then "the refined co-association matrix is zero" (SC) or a scipy error (EA) on
    identical columns, a single column, K = 1 (QA)."""
    from adseg.consensus.lta import _gram_svt_weights, svt_sample

    weights = _gram_svt_weights(
        np.array([0.0, 1.0]), np.array([0.0, 1.0]), np.zeros(2, complex), 0.1
    )
    assert all(np.all(np.isfinite(w)) for w in weights)
    assert np.allclose(weights[0], [0.0, 0.9]) and np.allclose(weights[3], [0.0, 0.9])
    assert np.allclose(weights[1], 0.0) and np.allclose(weights[2], 0.0)
    for part in svt_sample(np.zeros((3, 3)), np.zeros((3, 3)), 0.1):
        assert np.array_equal(part, np.zeros((3, 3)))
    # the fit is finite now; on so few distinct rows "sample" smooths every difference away,
    # which is said as such (it was reported as a zero matrix, or failed inside scipy)
    identical = np.column_stack([np.repeat([0, 1], 2)] * 2)
    for final in ("sc", "ea"):
        fuser = FUSERS["lta"](n_clusters=1, orientation="sample", final=final, random_state=0)
        assert fuser.fit_predict(identical).tolist() == [0] * 4
        assert np.all(np.isfinite(fuser.similarity_))
        fuser = FUSERS["lta"](n_clusters=2, orientation="sample", final=final, random_state=0)
        with pytest.raises(ValueError, match="is constant: the low-rank step removed every"):
            fuser.fit(identical)


def test_one_item_is_one_cluster_with_either_final_step():
    """final="ea" failed on one item: scipy's linkage cannot size an empty distance list (QA)."""
    for final in ("sc", "ea"):
        labels = FUSERS["lta"](n_clusters=1, final=final, random_state=0).fit_predict([[0, 3]])
        assert labels.tolist() == [0]
