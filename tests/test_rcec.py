"""RCEC (seed 004): the invariants of specs/rcec.md §7 (objective, solvers, optima, suppression)."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from scipy.optimize import brentq
from sklearn.utils import check_random_state
from threadpoolctl import threadpool_limits

from adseg.consensus import FUSERS, incidence_matrix
from adseg.consensus.rcec import (
    RCEC,
    gradient,
    incidence_with_columns,
    objective,
    paper_synthetic_ensemble,
    solve_multiplicative,
)
from adseg.metrics import ari, nmi
from adseg.spectral import assign_labels, top_eigenvectors


@pytest.fixture(autouse=True)
def _one_blas_thread():
    # the problems here are tiny; BLAS threads only add contention on a shared CI machine
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def _fit(**kwargs) -> RCEC:
    labels = kwargs.pop("labels")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning where max_iter is the intended stop
        return RCEC(**kwargs).fit(labels)


def _noisy_copies(
    n_per_class=(20, 20, 20), m=6, noise=0.1, seed=0
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(len(n_per_class)), n_per_class)
    cols = []
    for _ in range(m):
        col = y.copy()
        flip = rng.random(y.size) < noise
        col[flip] = rng.integers(0, len(n_per_class), flip.sum())
        cols.append(rng.permutation(len(n_per_class))[col])
    return np.column_stack(cols), y


def _dense_L(labels: np.ndarray, columns: np.ndarray) -> np.ndarray:
    return np.column_stack([(labels[:, m] == lab).astype(float) for m, lab in columns])


# ---------------------------------------------------------------- L and the objective's pieces


def test_incidence_matrix_properties():
    labels, _ = _noisy_copies()
    L, columns = incidence_with_columns(labels)
    Ld = L.toarray()
    assert Ld.shape == (labels.shape[0], sum(np.unique(c).size for c in labels.T))
    np.testing.assert_array_equal(Ld.sum(axis=1), labels.shape[1])
    np.testing.assert_array_equal(Ld, _dense_L(labels, columns))
    Y = incidence_matrix(labels)
    np.testing.assert_allclose(Ld @ Ld.T, (Y @ Y.T).toarray())  # co-association counts


def test_gradient_matches_finite_differences():
    rng = np.random.default_rng(1)
    Z = rng.uniform(0.1, 1.0, (12, 7))
    Lt = (rng.random((12, 7)) < 0.3).astype(float)
    lam, beta, gamma = 0.7, 1.3, 0.05
    g = gradient(Z, Lt, lam, beta, gamma)
    E = rng.standard_normal(Z.shape)
    h = 1e-6
    fd = objective(Z + h * E, Lt, lam, beta, gamma) - objective(Z - h * E, Lt, lam, beta, gamma)
    np.testing.assert_allclose(fd / (2 * h), np.sum(g * E), rtol=1e-5)


def test_objective_is_convex_on_random_pairs():
    rng = np.random.default_rng(2)
    Lt = (rng.random((15, 9)) < 0.3).astype(float)
    for _ in range(5):
        A, B = rng.random((15, 9)), rng.random((15, 9))
        mid = objective((A + B) / 2, Lt, 0.1, 2.0, 0.01)
        assert mid <= (objective(A, Lt, 0.1, 2.0, 0.01) + objective(B, Lt, 0.1, 2.0, 0.01)) / 2


# ---------------------------------------------------------------- the multiplicative update


def test_objective_non_increasing_and_anomalous_columns_shrink():
    """§7.10, §7.18 on the paper's Fig. 4 set-up: 10 normal + 5 extremely anomalous partitions."""
    labels, y = paper_synthetic_ensemble(5, extreme=True, random_state=0)
    fit = _fit(labels=labels, n_clusters=10, beta=6.0, max_iter=150, tol=1e-12, random_state=0)
    F = np.asarray(fit.objective_)
    assert np.all(F[1:] <= F[:-1] + 1e-10 * np.abs(F[:-1]))
    assert np.all(fit.X_unique_ >= 0)
    x = fit.cleaned_matrix().sum(axis=0)
    x_ratio = x / x.max()
    normal, extreme = fit.columns_[:, 0] < 10, fit.columns_[:, 0] >= 10
    assert x_ratio[extreme].mean() < 0.6 * x_ratio[normal].mean()
    base_nmi = np.mean([nmi(y, labels[:, j]) for j in range(labels.shape[1])])
    assert nmi(y, fit.labels_) >= base_nmi


def test_zero_entries_of_the_start_stay_zero():
    labels, _ = _noisy_copies()
    L, _ = incidence_with_columns(labels)
    Lt = L.toarray()
    Z0 = np.random.default_rng(0).random(Lt.shape)
    Z0[:, 0] = 0.0
    Z, *_ = solve_multiplicative(
        Lt, Z0, lam=0.1, beta=1.0, gamma=0.01, varsigma=1e-10, tol=1e-9, max_iter=30
    )
    assert np.all(Z[:, 0] == 0.0) and np.all(Z >= 0)


# ---------------------------------------------------------------- closed-form optima


def _identical_partitions_optimum(sizes, m, lam, gamma, beta):
    def s_k(n):
        def f(s):
            return 2 * (s - np.sqrt(n * m)) + lam * s / np.sqrt(s * s + gamma) + beta * np.sqrt(m)

        return 0.0 if f(0.0) >= 0 else brentq(f, 0.0, np.sqrt(n * m), xtol=1e-15)

    s = np.array([s_k(n) for n in sizes])
    t = s / np.sqrt(np.asarray(sizes) * m)
    c = len(sizes)
    F = float(
        np.sum((s - np.sqrt(np.asarray(sizes) * m)) ** 2 + lam * np.sqrt(s**2 + gamma))
        + beta * np.sqrt(m) * s.sum()
        + lam * (c * m - c) * np.sqrt(gamma)
    )
    return t, F


@pytest.mark.parametrize("solver", ["multiplicative", "fista"])
def test_identical_partitions_closed_form(solver):
    """§7.9: M relabelled copies of one partition with sizes (3, 10, 30, 60), λ=0.1, γ=0.01, β=6."""
    sizes, m = (3, 10, 30, 60), 4
    rng = np.random.default_rng(0)
    base = np.repeat(np.arange(4), sizes)
    labels = np.column_stack([rng.permutation(4)[base] for _ in range(m)])
    t, F_star = _identical_partitions_optimum(sizes, m, 0.1, 0.01, 6.0)
    np.testing.assert_allclose(t, [0, 0.04388, 0.44771, 0.60947], atol=1e-5)
    assert F_star == pytest.approx(298.85278263, abs=1e-7)
    fit = _fit(
        labels=labels, n_clusters=3, beta=6.0, solver=solver, tol=1e-14, max_iter=3000,
        random_state=0,
    )  # fmt: skip
    assert fit.objective_[-1] == pytest.approx(F_star, rel=1e-10)
    expected = _dense_L(labels, fit.columns_) * np.array(
        [t[base[labels[:, mm] == lab][0]] for mm, lab in fit.columns_]
    )
    np.testing.assert_allclose(fit.cleaned_matrix(), expected, atol=1e-5)
    # the size-3 cluster (n ≤ β²/4 = 9) is removed from every copy, nothing else is
    assert sorted(fit.suppressed_clusters_) == sorted((mm, int(labels[0, mm])) for mm in range(m))
    assert ari(base[3:], fit.labels_[3:]) == 1.0


@pytest.mark.parametrize("solver", ["multiplicative", "fista"])
def test_lambda_zero_is_columnwise_shrinkage(solver):
    """§7.7: λ = 0 ⇒ X*_{·j} = max(0, 1 − β/(2√n_j)) L_{·j}; removed iff n_j ≤ β²/4."""
    labels, _ = _noisy_copies(n_per_class=(25, 12, 6), m=4, noise=0.15, seed=3)
    beta = 5.5
    fit = _fit(
        labels=labels, n_clusters=3, lam=0.0, beta=beta, solver=solver, tol=1e-14,
        max_iter=4000, random_state=1,
    )  # fmt: skip
    n = fit.cluster_sizes_
    expected = _dense_L(labels, fit.columns_) * np.maximum(0, 1 - beta / (2 * np.sqrt(n)))
    np.testing.assert_allclose(fit.cleaned_matrix(), expected, atol=1e-4)
    np.testing.assert_array_equal(fit.suppressed_mask_, n <= beta**2 / 4)


def test_all_zero_threshold():
    """§7.8: β ≥ 2√(max n_j) ⇒ X* = 0, refused with a clear error; just below, X* ≠ 0."""
    labels, _ = _noisy_copies()
    sizes = np.asarray(incidence_with_columns(labels)[0].sum(axis=0)).ravel()
    bound = 2 * np.sqrt(sizes.max())
    with pytest.raises(ValueError, match="removes every input cluster"):
        RCEC(n_clusters=3, beta=bound, random_state=0).fit(labels)
    fit = _fit(labels=labels, n_clusters=3, beta=0.98 * bound, solver="fista", random_state=0)
    assert fit.column_norms_.max() > 0
    assert not fit.suppressed_mask_[np.argmax(sizes)]


def test_lambda_beta_zero_is_ncut_on_coassociation_counts():
    """§1.2: with λ = β = 0, X* = L and RCEC is normalised cut on W = L Lᵀ (co-association
    counts, -1 = no entry). Compare with the dense n×n route."""
    labels, y = _noisy_copies(n_per_class=(30, 20, 25), m=7, noise=0.2, seed=4)
    labels[np.random.default_rng(5).random(labels.shape) < 0.05] = -1
    fit = _fit(labels=labels, n_clusters=3, lam=0.0, beta=0.0, init="support", random_state=7)
    Y = incidence_matrix(labels)
    L = _dense_L(labels, fit.columns_)
    np.testing.assert_allclose(fit.cleaned_matrix(), L, atol=1e-6)
    W = (Y @ Y.T).toarray()
    d = W.sum(axis=1)
    _, U = top_eigenvectors(W / np.sqrt(np.outer(d, d)), 3)
    dense_labels = assign_labels(U, 3, method="kmeans", random_state=check_random_state(7))
    assert ari(dense_labels, fit.labels_) == 1.0
    assert nmi(y, fit.labels_) > 0.8


# ---------------------------------------------------------------- the two solvers agree


def test_solvers_reach_the_same_optimum_from_different_starts():
    """§7.11–7.12: the problem is strictly convex — MU (two random starts and L + 0.01) and FISTA
    (two starts) reach the same F* and X*."""
    labels, _ = _noisy_copies(n_per_class=(18, 12, 9), m=5, noise=0.25, seed=6)
    common = dict(labels=labels, n_clusters=3, beta=2.5, random_state=0)
    fista = [
        _fit(**{**common, "random_state": s}, solver="fista", init=i, tol=1e-15, max_iter=5000)
        for s, i in ((0, "support"), (1, "random"))
    ]
    mu = [
        _fit(**{**common, "random_state": s}, init=i, tol=1e-13, max_iter=3000)
        for s, i in ((0, "random"), (1, "random"), (0, "support"))
    ]
    X_ref, F_ref = fista[0].cleaned_matrix(), fista[0].objective_[-1]
    np.testing.assert_allclose(fista[1].cleaned_matrix(), X_ref, atol=1e-6)
    for fit in mu:
        F = fit.objective_[-1]
        assert abs(F - F_ref) <= 1e-6 * F_ref
        assert F_ref <= F + 1e-9 * F
        assert np.linalg.norm(fit.cleaned_matrix() - X_ref) <= 1e-2 * np.linalg.norm(X_ref)
        np.testing.assert_array_equal(fit.suppressed_mask_, fista[0].suppressed_mask_)
        assert ari(fit.labels_, fista[0].labels_) == 1.0


# ---------------------------------------------------------------- what the method is for


def test_planted_anomalous_cluster_is_suppressed():
    """A small input cluster that mixes all classes is removed with the default (size-adaptive)
    β; no consistent cluster is, and the consensus recovers the classes."""
    labels, y = _noisy_copies(n_per_class=(30, 30, 30, 30), m=8, noise=0.08, seed=8)
    planted = np.concatenate([np.nonzero(y == k)[0][:2] for k in range(3)])  # 6 items, 3 classes
    labels[planted, 3] = 99
    fit = _fit(labels=labels, n_clusters=4, random_state=0)
    assert fit.beta_ == pytest.approx(np.sqrt(np.median(fit.cluster_sizes_)))
    assert (3, 99) in fit.suppressed_clusters_
    big = fit.cluster_sizes_ >= 20
    assert not fit.suppressed_mask_[big].any()
    assert ari(y, fit.labels_) == 1.0


def test_nuclear_term_shrinks_inconsistent_clusters_more():
    """Two input clusters of equal size: one agrees with the other clusterings, one is scattered.
    The low-rank term leaves the consistent one larger."""
    labels, y = _noisy_copies(n_per_class=(12, 12, 12), m=6, noise=0.0, seed=9)
    scattered = np.concatenate([np.nonzero(y == k)[0][:4] for k in range(3)])
    labels[:, 0] = np.where(np.isin(np.arange(y.size), scattered), 7, labels[:, 0] + 10)
    # column 0 now: 3 consistent clusters of 8 and one scattered cluster of 12 (label 7)
    fit = _fit(labels=labels, n_clusters=3, lam=2.0, beta=1.0, solver="fista", random_state=0)
    cols0 = fit.columns_[:, 0] == 0
    w = fit.column_weights_
    scattered_w = w[cols0 & (fit.columns_[:, 1] == 7)][0]
    consistent_same_size = w[(fit.columns_[:, 0] == 1)]  # clusters of 12 in a clean clustering
    assert scattered_w < consistent_same_size.min() - 0.05


# ---------------------------------------------------------------- contract, missing, compression


def test_row_compression_is_exact():
    """Items with identical label rows are solved once, with multiplicities (module doc): with the
    deterministic start the iterates equal the plain multiplicative update on the full n × K L."""
    labels, _ = _noisy_copies(seed=10)
    labels = np.repeat(labels, 3, axis=0)
    fit = _fit(labels=labels, n_clusters=3, init="support", tol=1e-9, max_iter=200)
    assert fit.X_unique_.shape[0] < labels.shape[0] / 2
    L, _ = incidence_with_columns(labels)
    Lt = L.toarray()
    Z, history, *_ = solve_multiplicative(
        Lt, Lt + 0.01, lam=0.1, beta=fit.beta_, gamma=0.01, varsigma=1e-10, tol=1e-9,
        max_iter=200,
    )  # fmt: skip
    np.testing.assert_allclose(fit.cleaned_matrix(), Z, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(fit.objective_, history, rtol=1e-10)


def test_equivariance_under_item_and_label_permutations():
    labels, _ = _noisy_copies(seed=11)
    rng = np.random.default_rng(0)
    perm = rng.permutation(labels.shape[0])
    relabelled = labels[perm][:, ::-1] * 3 + 5
    kw = dict(n_clusters=3, init="support", tol=1e-10, max_iter=500, random_state=0)
    a = _fit(labels=labels, **kw)
    b = _fit(labels=relabelled, **kw)
    assert nmi(a.labels_[perm], b.labels_) == pytest.approx(1.0)
    assert a.objective_[-1] == pytest.approx(b.objective_[-1], rel=1e-9)


def test_missing_labels_have_no_entry_and_fully_missing_items_are_labelled():
    labels, y = _noisy_copies(seed=12)
    labels[:5, :3] = -1
    labels[5, :] = -1  # in no clustering
    with pytest.warns(RuntimeWarning, match="no input cluster left"):
        fit = RCEC(n_clusters=3, random_state=0).fit(labels)
    L, columns = incidence_with_columns(labels)
    assert not np.any(columns[:, 1] == -1)
    np.testing.assert_array_equal(np.asarray(L.sum(axis=1)).ravel()[:6], [3] * 5 + [0])
    assert fit.labels_.shape == (y.size,) and set(fit.labels_) == {0, 1, 2}
    assert np.allclose(fit.cleaned_matrix()[5], 0.0, atol=1e-6)


def test_output_contract_and_registry():
    labels, y = _noisy_copies(seed=13)
    assert FUSERS["rcec"] is RCEC
    fit = RCEC(n_clusters=3, random_state=0)
    pred = fit.fit_predict(labels)
    assert pred.dtype == np.int64 and pred.shape == (y.size,) and set(pred) == {0, 1, 2}
    assert fit.cleaned_matrix().shape == (y.size, fit.columns_.shape[0])
    for method in ("discretize", "cluster_qr"):
        assert (
            nmi(y, RCEC(n_clusters=3, assign_labels=method, random_state=0).fit_predict(labels))
            > 0.7
        )
    again = RCEC(n_clusters=3, random_state=0).fit_predict(labels)
    np.testing.assert_array_equal(pred, again)


@pytest.mark.parametrize(
    "params, error",
    [
        ({"lam": -1.0}, ValueError),
        ({"gamma": 0.0}, ValueError),
        ({"beta": "big"}, TypeError),
        ({"beta": -0.5}, ValueError),
        ({"solver": "admm"}, ValueError),
        ({"init": "zeros"}, ValueError),
        ({"max_iter": 0}, ValueError),
        ({"assign_labels": "qr"}, ValueError),
    ],
)
def test_bad_parameters_are_refused(params, error):
    labels, _ = _noisy_copies()
    with pytest.raises(error):
        RCEC(n_clusters=3, **params).fit(labels)


@pytest.mark.parametrize(
    "labels, k, expected",
    [
        # an item in no clustering (orphan: zero embedding row) joins the largest segment (it
        # was a segment of its own at k = 3, which every fuser now refuses: such items are no
        # group of their own, test_consensus_base.py)
        ([[0, 0], [0, 0], [1, 1], [1, 1], [-1, -1]], 2, [0, 0, 1, 1, 0]),
        ([[0, 0], [0, 0], [1, 1], [1, 1], [2, 2], [-1, -1]], 3, [0, 0, 1, 1, 2, 0]),
    ],
)
def test_discretize_handles_orphans_and_padding(labels, k, expected):
    # used to print "SVD did not converge" 30 times and raise LinAlgError (NaN from 0/0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the orphan warning
        pred = RCEC(n_clusters=k, assign_labels="discretize", random_state=0).fit_predict(
            np.array(labels)
        )
    assert ari(expected, pred) == 1.0
    assert pred.min() == 0 and pred.max() < k


def test_discretize_pads_when_k_exceeds_the_graphs_eigenvectors():
    """k = 7 ≤ the 8 distinct rows of three binary clusterings, but the graph has only their
    6 clusters' eigenvectors: the embedding is padded with zero columns, which discretize must
    not turn into NaN. (The old case, k above the distinct rows, is now refused at the door.)"""
    rows = np.array(list(itertools.product([0, 1], repeat=3)))
    labels = np.repeat(rows, 2, axis=0)
    pred = RCEC(n_clusters=7, assign_labels="discretize", random_state=0).fit_predict(labels)
    assert pred.min() == 0 and pred.max() < 7
    np.testing.assert_array_equal(pred[0::2], pred[1::2])  # identical rows share a segment


def test_an_auto_beta_that_removes_everything_names_beta_scale():
    """The message said 'Use a smaller beta' to a user who never set beta (QA)."""
    labels, _ = _noisy_copies()
    with pytest.raises(ValueError, match=r"beta_scale=5\.0 gives beta=.*smaller beta_scale\."):
        RCEC(n_clusters=3, beta_scale=5.0, random_state=0).fit(labels)


# ---------------------------------------------------------------- large-input (mixed) path


def test_mixed_precision_update_reaches_the_float64_optimum():
    """float32 products in the multiplicative update: the same iterates to ~1e-6 and the same
    optimum, objective to ~1e-7 relative."""
    labels, _ = _noisy_copies(n_per_class=(30, 25, 20), m=8, noise=0.2, seed=3)
    L, _ = incidence_with_columns(labels)
    Lt = L.toarray()
    Z0 = check_random_state(0).uniform(0.01, 1.0, size=Lt.shape)
    kw = dict(lam=0.1, beta=0.5, gamma=0.01, varsigma=1e-10, tol=1e-9, max_iter=2000)
    ref, h_ref, conv_ref, _ = solve_multiplicative(Lt, Z0, **kw)
    mixed, h_mixed, conv_mixed, _ = solve_multiplicative(Lt, Z0, mixed_precision=True, **kw)
    assert conv_ref and conv_mixed
    assert abs(h_mixed[-1] - h_ref[-1]) <= 1e-7 * h_ref[-1]
    np.testing.assert_allclose(mixed, ref, atol=1e-4)


def test_mixed_precision_fit_matches_float64_fit():
    labels, y = _noisy_copies(n_per_class=(40, 30, 30, 20), m=8, noise=0.25, seed=4)
    ref = _fit(labels=labels, n_clusters=4, mixed_precision=False, random_state=0)
    mixed = _fit(labels=labels, n_clusters=4, mixed_precision=True, random_state=0)
    assert mixed.mixed_precision_ and not ref.mixed_precision_
    assert ari(mixed.labels_, ref.labels_) == 1.0  # k-means on distinct rows: same partition
    np.testing.assert_array_equal(mixed.suppressed_mask_, ref.suppressed_mask_)
    np.testing.assert_allclose(mixed.X_unique_, ref.X_unique_, atol=1e-4)
    # "auto" keeps small inputs on the float64 path
    assert not _fit(labels=labels, n_clusters=4, random_state=0).mixed_precision_


def test_mixed_precision_must_be_a_flag_or_auto():
    labels, _ = _noisy_copies()
    for bad in ("yes", 1, None):
        with pytest.raises(TypeError, match="mixed_precision"):
            RCEC(3, mixed_precision=bad).fit(labels)
