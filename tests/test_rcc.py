"""Invariants of the robust l1 consensus fuser RCC and of its least-squares baselines L2CC / KC
(spec rcc.md §§1–4)."""

from __future__ import annotations

import warnings
from unittest import mock

import numpy as np
import pytest
import scipy.linalg as sla
from sklearn.exceptions import ConvergenceWarning

from adseg.consensus import FUSERS, co_association
from adseg.consensus._base import average_nmi
from adseg.consensus.l2 import KC, L2CC
from adseg.consensus.rcc import RCC, soft_threshold
from adseg.metrics import ari, clustering_accuracy
from adseg_research.bench import partial_view_ensemble


def _truth(sizes):
    return np.repeat(np.arange(len(sizes)), sizes)


def _permuted_copies(y, n_cols, rng):
    """n_cols copies of y, each with its label values permuted (same partition)."""
    k = y.max() + 1
    return np.column_stack([rng.permutation(k)[y] for _ in range(n_cols)])


def _noisy_ensemble(sizes, n_cols, p, seed):
    """Columns = truth with each label replaced by a random one with probability p."""
    rng = np.random.default_rng(seed)
    y = _truth(sizes)
    cols = []
    for _ in range(n_cols):
        z = y.copy()
        flip = rng.random(y.size) < p
        z[flip] = rng.integers(0, len(sizes), flip.sum())
        cols.append(z)
    return y, np.column_stack(cols)


FUSER_CASES = [
    pytest.param(RCC, {"normalize": True}, id="rcc-normalized"),
    pytest.param(RCC, {"normalize": False}, id="rcc-raw"),
    pytest.param(RCC, {"assign_labels": "cluster_qr"}, id="rcc-qr"),
    pytest.param(RCC, {"normalize": "auto"}, id="rcc-auto"),
    pytest.param(L2CC, {"normalize": True}, id="l2-normalized"),
    pytest.param(L2CC, {"normalize": False}, id="l2-raw"),
    pytest.param(L2CC, {"assign_labels": "cluster_qr"}, id="l2-qr"),
    pytest.param(KC, {}, id="kc"),
]


def test_registered():
    assert FUSERS["rcc"] is RCC
    assert FUSERS["l2"] is L2CC


@pytest.mark.parametrize("cls, params", FUSER_CASES)
def test_identical_clusterings_recovered_exactly(cls, params):
    rng = np.random.default_rng(0)
    y = _truth([30, 20, 25, 15])
    labels = _permuted_copies(y, 6, rng)
    pred = cls(n_clusters=4, random_state=0, **params).fit_predict(labels)
    assert clustering_accuracy(y, pred) == 1.0


def test_soft_threshold():
    x = np.array([-3.0, -0.5, 0.0, 0.2, 2.5])
    np.testing.assert_allclose(soft_threshold(x, 1.0), [-2.0, 0.0, 0.0, 0.0, 1.5])
    y = x.copy()
    soft_threshold(y, 1.0, out=y)  # in place
    np.testing.assert_allclose(y, [-2.0, 0.0, 0.0, 0.0, 1.5])


def test_l2cc_is_the_exact_eigen_solution():
    y, labels = _noisy_ensemble([40, 30, 30], 8, 0.3, seed=1)
    for normalize in (False, True):
        model = L2CC(3, normalize=normalize, random_state=0).fit(labels)
        M = co_association(labels, normalize=normalize)
        ref = sla.eigh(M, eigvals_only=True)[::-1][:3]
        np.testing.assert_allclose(model.eigenvalues_, np.maximum(ref, 0), rtol=1e-10)
        H = model.embedding_
        np.testing.assert_allclose(H.T @ H, np.eye(3), atol=1e-10)
        np.testing.assert_allclose(M @ H, H * ref[None, :], atol=1e-9)


def test_rcc_reduces_the_l1_objective_of_its_l2_start():
    y, labels = _noisy_ensemble([40, 30, 30], 8, 0.4, seed=2)
    model = RCC(3, random_state=0).fit(labels)
    hist = model.history_["objective"]
    M = co_association(labels, normalize=True)
    l2 = L2CC(3, normalize=True, random_state=0).fit(labels)
    L2 = (l2.embedding_ * l2.eigenvalues_) @ l2.embedding_.T
    L = (model.embedding_ * model.eigenvalues_) @ model.embedding_.T
    assert np.abs(M - L).sum() <= np.abs(M - L2).sum() + 1e-9
    np.testing.assert_allclose(model.objective_, np.abs(M - L).sum(), rtol=1e-9)
    assert hist[-1] <= hist[0]


def test_iterates_symmetric_and_residual_reaches_tol():
    y, labels = _noisy_ensemble([35, 35, 30], 10, 0.35, seed=3)
    model = RCC(3, tol=1e-6, store_error=True, random_state=0).fit(labels)
    assert model.converged_
    res = model.history_["residual"]
    assert res.size == model.n_iter_ == model.history_["objective"].size
    assert res[-1] <= 1e-6 and model.history_["change"][-1] <= 1e-6
    # the residual decreases overall: the last tenth of the run is far below the first tenth
    tenth = max(1, res.size // 10)
    assert res[-tenth:].max() < 1e-2 * res[:tenth].max()
    E = model.error_
    np.testing.assert_array_equal(E, E.T)  # exactly symmetric, not only to round-off
    H = model.embedding_
    np.testing.assert_allclose(H.T @ H, np.eye(3), atol=1e-8)
    assert np.all(model.eigenvalues_ >= 0)
    assert np.all(np.diff(model.history_["mu"]) > 0)


def test_max_iter_warns():
    y, labels = _noisy_ensemble([20, 20, 20], 6, 0.4, seed=4)
    with pytest.warns(ConvergenceWarning, match="max_iter=3"):
        model = RCC(3, max_iter=3, random_state=0).fit(labels)
    assert model.n_iter_ == 3 and not model.converged_


def test_invariant_to_column_permutation():
    y, labels = _noisy_ensemble([30, 30, 20, 20], 9, 0.3, seed=5)
    perm = np.random.default_rng(0).permutation(labels.shape[1])
    a = RCC(4, random_state=7).fit(labels)
    b = RCC(4, random_state=7).fit(labels[:, perm])
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_allclose(a.embedding_, b.embedding_, atol=1e-12)
    assert a.n_iter_ == b.n_iter_


@pytest.mark.parametrize("cls", [RCC, L2CC])
def test_equivariant_to_item_permutation(cls):
    y, labels = _noisy_ensemble([30, 25, 25], 8, 0.25, seed=6)
    perm = np.random.default_rng(1).permutation(y.size)
    a = cls(3, random_state=0).fit(labels)
    b = cls(3, random_state=0).fit(labels[perm])
    assert ari(a.labels_[perm], b.labels_) == 1.0
    # the fitted low-rank matrix H D Hᵀ is permuted with the items
    La = (a.embedding_ * a.eigenvalues_) @ a.embedding_.T
    Lb = (b.embedding_ * b.eigenvalues_) @ b.embedding_.T
    np.testing.assert_allclose(La[np.ix_(perm, perm)], Lb, atol=1e-6)


def test_missing_labels_handled():
    rng = np.random.default_rng(8)
    y, labels = _noisy_ensemble([30, 30, 30], 8, 0.1, seed=8)
    labels = labels.copy()
    labels[rng.random(labels.shape) < 0.2] = -1  # 20% of the entries missing
    for cls in (RCC, L2CC):
        pred = cls(3, random_state=0).fit_predict(labels)
        assert clustering_accuracy(y, pred) >= 0.95


def test_zero_weight_removes_a_clustering():
    rng = np.random.default_rng(9)
    y, good = _noisy_ensemble([30, 30, 30], 6, 0.2, seed=9)
    bad = rng.integers(0, 3, size=(y.size, 2))
    labels = np.column_stack([good, bad])
    w = np.r_[np.ones(6), 0.0, 0.0]
    a = RCC(3, weights=w, random_state=0).fit(labels)
    b = RCC(3, random_state=0).fit(good)
    np.testing.assert_allclose(a.embedding_, b.embedding_, atol=1e-10)
    np.testing.assert_array_equal(a.labels_, b.labels_)


def test_an_integer_weight_acts_as_that_many_copies_of_a_clustering():
    y, labels = _noisy_ensemble([30, 30, 30], 3, 0.3, seed=4)
    copies = np.column_stack([labels[:, [0, 0, 0]], labels[:, 1:]])
    for cls in (RCC, L2CC):
        a = cls(3, weights=[3, 1, 1], random_state=0).fit(labels)
        b = cls(3, random_state=0).fit(copies)
        np.testing.assert_allclose(a.eigenvalues_, b.eigenvalues_, atol=1e-8)
        np.testing.assert_array_equal(a.labels_, b.labels_)


def test_attributes():
    y, labels = _noisy_ensemble([20, 20, 20], 5, 0.1, seed=11)
    model = RCC(3, random_state=0).fit(labels)
    assert model.labels_.dtype == np.int64 and model.labels_.shape == (60,)
    assert model.embedding_.shape == (60, 3) and model.eigenvalues_.shape == (3,)
    assert model.n_clusters_found_ == 3
    assert not hasattr(model, "error_")
    assert set(model.history_) == {"objective", "residual", "change", "mu"}
    # a single cluster is allowed
    assert np.all(RCC(1, random_state=0).fit_predict(labels) == 0)


@pytest.mark.parametrize("cls", [RCC, L2CC, KC])
@pytest.mark.parametrize(
    "labels, n_clusters, err, match",
    [
        (np.zeros(5, dtype=int), 2, ValueError, "2-D"),
        (np.zeros((4, 2, 2), dtype=int), 2, ValueError, "2-D"),
        (np.array([[0.5, 1.0], [1.0, 0.0]]), 1, TypeError, "integers"),
        (np.array([["a", "b"], ["c", "d"]]), 1, TypeError, "integer"),
        (np.array([[0, 1], [1, 0], [0, 0]]), 0, ValueError, "n_clusters"),
        (np.array([[0, 1], [1, 0], [0, 0]]), 4, ValueError, "n_clusters"),
        (np.array([[0, -1], [1, -1], [0, -1]]), 2, ValueError, "all -1"),
        (np.array([[0, -2], [1, 0], [0, 0]]), 2, ValueError, "negative"),
    ],
)
def test_input_validation(cls, labels, n_clusters, err, match):
    with pytest.raises(err, match=match):
        cls(n_clusters=n_clusters).fit(labels)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"rho": 1.0}, "rho"),
        ({"normalize": "sym"}, "normalize"),
        ({"mu": -1.0}, "mu"),
        ({"mu": "big"}, "mu"),
        ({"max_iter": 0}, "max_iter"),
        ({"tol": 0.0}, "tol"),
        ({"eigen_solver": "magic"}, "eigen_solver"),
        ({"assign_labels": "discretize"}, "assign_labels"),
    ],
)
def test_parameter_validation(params, match):
    labels = np.array([[0, 1], [1, 0], [0, 0], [1, 1]])
    with pytest.raises(ValueError, match=match):
        RCC(2, **params).fit(labels)


def test_deterministic_given_seed():
    y, labels = _noisy_ensemble([25, 25, 25], 6, 0.3, seed=12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # converges without warnings on this case
        a = RCC(3, random_state=3).fit(labels)
    b = RCC(3, random_state=3).fit(labels)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.history_["objective"], b.history_["objective"])


@pytest.mark.parametrize(("normalize", "rtol"), [(True, 1e-5), ("l1", 1e-4)])
def test_eigen_solvers_agree(normalize, rtol):
    """The iterative (H, D)-steps used for large n give the dense solver's answer: the same
    labels, and eigenvalues within the early eigen-steps' tolerance. Those steps stop at a
    residual of up to 1e-4 λ₁ (``_EIGEN_TOL_CAP``), which moves the fixed point the ADMM lands
    on by that order whatever ``tol`` is (measured: 1.5e-5 relative on the "l1" form at tol 1e-6,
    1e-8 and 1e-10 alike, 1.0e-5 on the True form); the True form's 1e-5 predates the "l1"
    form and is kept."""
    y, labels = _noisy_ensemble([60, 50, 40, 30], 8, 0.3, seed=10)
    ref = RCC(4, normalize=normalize, eigen_solver="dense", random_state=0).fit(labels)
    for solver in ("subspace", "lobpcg", "arpack"):
        other = RCC(4, normalize=normalize, eigen_solver=solver, random_state=0).fit(labels)
        np.testing.assert_allclose(other.eigenvalues_, ref.eigenvalues_, rtol=rtol)
        assert ari(ref.labels_, other.labels_) == 1.0


def test_bench_table2_protocol(shared_datasets):
    from adseg_research.bench_table2 import format_table2, run_table2

    frame = run_table2(["iris"], n_repetitions=2, n_clusterings=5, seed=0, data_dir=shared_datasets)
    assert set(frame["method"]) >= {"k-means", "KC", "l2", "rcc"}
    assert frame["error"].isna().all()
    assert (frame.groupby("method").size() == 2).all()
    assert frame["acc"].between(0, 1).all()
    text = format_table2(frame)
    assert "| iris | raw | 150 |" in text and "paper RCC" in text


def test_bench_consensus_runs_the_columns_asked(shared_datasets, tmp_path):
    from typer.testing import CliRunner

    from adseg.cli import app

    out = tmp_path / "t2.md"
    args = ["bench", "consensus", "--datasets", str(shared_datasets), "--dataset", "iris"]
    args += ["--repetitions", "1", "--clusterings", "3", "--method", "rcc", "--method", "l2"]
    res = CliRunner().invoke(app, [*args, "-q", "-o", str(out)])
    assert res.exit_code == 0, res.output
    head = out.read_text().splitlines()[0]
    assert head.startswith("| dataset | prep | n | k-means | rcc | l2 | paper k-means |"), head


def test_bench_consensus_refuses_an_unknown_column():
    from typer.testing import CliRunner

    from adseg.cli import app

    res = CliRunner().invoke(app, ["bench", "consensus", "--method", "rcc (l3)"])
    assert res.exit_code == 2
    assert "--method 'rcc (l3)' is not a Table 2 column" in res.output
    assert "'rcc (normalised)'" in res.output  # the valid names are listed


@pytest.mark.parametrize(
    "args, message",
    [
        (["--dataset", "iris", "--dataset", "nope"], "no benchmark data set 'nope'"),
        (["--dataset", "../datasets/iris"], "named by its file's stem (iris)"),
        (["--dataset", "iris", "--dataset", "iris"], "--dataset 'iris' is given twice"),
        (["--method", "KC", "--method", "KC"], "--method 'KC' is given twice"),
        (["--preprocessing", "raw", "--preprocessing", "bogus"], "got 'bogus'"),
        (["--seed", str(2**32 - 1000), "--repetitions", "1001"], "--seed + --repetitions - 1"),
    ],
)
def test_bench_consensus_refuses_bad_options_before_any_fit(args, message, shared_datasets):
    """A bad set, mode or seed after a good one failed only after the good one had run (minutes
    with the defaults), a path read a file outside the data folder, and a set or column given
    twice pooled its runs silently (QA)."""
    from typer.testing import CliRunner

    from adseg.cli import app

    with mock.patch("adseg_research.bench_table2.run_table2") as run:
        res = CliRunner().invoke(
            app, ["bench", "consensus", "-q", "--datasets", str(shared_datasets), *args]
        )
    assert res.exit_code == 2 and message in res.output, res.output
    run.assert_not_called()


def test_bench_consensus_names_a_missing_data_folder_and_how_to_set_it(tmp_path, monkeypatch):
    """The data folder comes from --datasets, else $ADSEG_DATASETS, else shared/datasets in or
    beside the working directory; a missing one is a bad-input error (2) naming where it looked."""
    from typer.testing import CliRunner

    from adseg.cli import app

    missing = tmp_path / "nowhere"
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ADSEG_DATASETS", raising=False)
    cases = [
        (["--datasets", str(missing)], {}, f"benchmark data folder {missing} not found"),
        ([], {}, f"benchmark data not found at {tmp_path / 'shared' / 'datasets'}"),
        ([], {"ADSEG_DATASETS": str(missing)}, f"ADSEG_DATASETS={missing} is not a folder"),
    ]
    with mock.patch("adseg_research.bench_table2.run_table2") as run:
        for args, env, message in cases:
            res = CliRunner().invoke(app, ["bench", "consensus", "-q", *args], env=env)
            assert res.exit_code == 2 and f"error: {message}" in res.output, res.output
            assert args or env or "pass --datasets DIR or set $ADSEG_DATASETS" in res.output
    run.assert_not_called()


def test_the_table_has_one_mean_row_per_preprocessing():
    """With raw and standardised rows in one frame, the mean row averaged all of them: each set
    counted twice, a number no results file reports (QA)."""
    import pandas as pd

    from adseg_research.bench_table2 import format_table2

    rows = [
        {
            "dataset": d,
            "preprocessing": p,
            "method": "rcc",
            "repetition": r,
            "acc": acc,
            "n_items": 10,
            "seconds": 0.1,
            "error": None,
        }
        for d, p, acc in (
            ("wine", "raw", 0.6),
            ("zoo", "raw", 0.8),
            ("wine", "standardized", 0.9),
            ("zoo", "standardized", 0.7),
        )
        for r in range(2)
    ]
    text = format_table2(pd.DataFrame(rows), paper=False)
    assert "| **mean (raw)** |  |  | **0.700** |" in text
    assert "| **mean (standardized)** |  |  | **0.800** |" in text
    assert "| **mean** |" in format_table2(pd.DataFrame(rows[:4]), paper=False)


def test_set_means_count_text_sets_in_every_mode_and_refuse_partial_means():
    import pandas as pd

    from adseg_research.bench_table2 import TABLE2_DATASETS, TEXT_DATASETS, format_set_means

    def acc(name, prep, method):
        if method == "rcc":
            return {"cstr": 0.6, "zoo": 0.4}.get(
                name, 0.7 if (name, prep) == ("glass", "standardized") else 0.5
            )
        return 0.5

    rows = [
        {
            "dataset": name,
            "preprocessing": prep,
            "method": m,
            "repetition": r,
            "acc": acc(name, prep, m),
            "seconds": 0.1,
            "error": None,
            "n_items": 10,
        }
        for name in TABLE2_DATASETS
        for prep in (("raw",) if name in TEXT_DATASETS else ("raw", "standardized"))
        for m in ("l2", "rcc")
        for r in range(2)
    ]
    frame = pd.DataFrame(rows)
    lines = format_set_means(frame, ["l2", "rcc"]).splitlines()
    # identical repetitions: the paired interval has zero width
    assert lines[2] == "| raw | 8 of 8 | 0.500 | 0.500 | 1 / 6 / 1 | +0.000 [+0.000, +0.000] |"
    # the text sets' raw runs count for the standardised row too
    assert lines[3] == (
        "| standardized | 8 of 8 | 0.500 | 0.525 | 2 / 5 / 1 | +0.025 [+0.025, +0.025] |"
    )
    partial = format_set_means(frame[frame["dataset"] != "iris"], ["l2", "rcc"]).splitlines()
    assert partial[2] == "| raw | 7 of 8 | — | — | — | — |"
    # raw iris: paired differences +0.2 and -0.2 → sample variance 0.08, standard error of the
    # eight-set mean sqrt(0.08 / 2) / 8 = 0.025, half-width 1.96 × 0.025 = 0.049
    noisy = frame.copy()
    iris_rcc = (noisy["dataset"] == "iris") & (noisy["preprocessing"] == "raw")
    iris_rcc &= noisy["method"] == "rcc"
    noisy.loc[iris_rcc, "acc"] = 0.5 + np.where(noisy.loc[iris_rcc, "repetition"] == 0, 0.2, -0.2)
    assert (
        format_set_means(noisy, ["l2", "rcc"])
        .splitlines()[2]
        .endswith("| +0.000 [-0.049, +0.049] |")
    )
    # a second method compared with l2 gets its own two columns; absent from a mode: —
    auto = frame[(frame["method"] == "l2") & (frame["preprocessing"] == "raw")].assign(
        method="rcc (normalised)"
    )
    auto.loc[auto["dataset"] == "zoo", "acc"] = 0.9
    both = pd.concat([frame, auto], ignore_index=True)
    lines = format_set_means(
        both, ["l2", "rcc"], challengers=["rcc", "rcc (normalised)"]
    ).splitlines()
    assert lines[0].endswith(
        "| rcc (normalised) vs l2: better / tie / worse | rcc (normalised) − l2 (95% interval) |"
    )
    assert lines[2].endswith(
        "| 1 / 6 / 1 | +0.000 [+0.000, +0.000] | 1 / 7 / 0 | +0.050 [+0.050, +0.050] |"
    )
    assert lines[3].endswith("| 2 / 5 / 1 | +0.025 [+0.025, +0.025] | — | — |")


def _spec_unbalanced_case(p=0.05, seed=0):
    """spec rcc.md §2: truth 240/60/60/60; five clusterings close to the truth (each label
    replaced at random with probability p) and three identical ones over-splitting the big
    cluster into three."""
    rng = np.random.default_rng(seed)
    y = _truth([240, 60, 60, 60])
    cols = []
    for _ in range(5):
        z = y.copy()
        flip = rng.random(y.size) < p
        z[flip] = rng.integers(0, 4, flip.sum())
        cols.append(z)
    z = y.copy()
    big = np.nonzero(y == 0)[0]
    z[big[:80]], z[big[80:160]] = 4, 5
    cols += [z.copy() for _ in range(3)]
    return y, np.column_stack(cols)


def test_adversarial_oversplit_normalised_default_recovers():
    """Three identical columns over-split the big cluster. The default rcc (``"auto"``), its
    normalised form alone and l2 recover the truth; the unnormalised l1 fit does not: it spends
    a component on the big cluster's split, whose entries outnumber a small cluster's 16:1 (the
    evidence, with the Table 2 benchmark, for normalising; the spec's prototype saw the same,
    ACC ≈ 0.77)."""
    y, labels = _spec_unbalanced_case()
    assert clustering_accuracy(y, RCC(4, random_state=0).fit_predict(labels)) == 1.0
    normalised = RCC(4, normalize=True, random_state=0).fit_predict(labels)
    assert clustering_accuracy(y, normalised) == 1.0
    assert clustering_accuracy(y, L2CC(4, random_state=0).fit_predict(labels)) == 1.0
    raw = RCC(4, normalize=False, random_state=0).fit_predict(labels)
    assert clustering_accuracy(y, raw) < 0.9
    balanced = RCC(4, normalize="l1", random_state=0).fit_predict(labels)
    assert clustering_accuracy(y, balanced) == 1.0


@pytest.mark.parametrize(
    "seed, p, kept",
    [(6, 0.3, "l1"), (15, 0.5, True)],  # found by scanning seeds of this unbalanced case
)
def test_auto_keeps_the_form_whose_labels_agree_best_with_the_inputs(seed, p, kept):
    """normalize="auto" is exactly the True or the "l1" fit (same random_state), the one with the
    higher ANMI with the base clusterings; on unbalanced clusters (40 … 5 items) that is usually
    "l1" (seed 6: ACC 0.99 vs 0.79 for True), and the rule does not always pick it (seed 15)."""
    y, labels = _noisy_ensemble([40, 20, 12, 8, 5], 8, p, seed)
    fits = {form: RCC(5, normalize=form, random_state=0).fit(labels) for form in (True, "l1")}
    scores = {form: average_nmi(fit.labels_, labels) for form, fit in fits.items()}
    assert scores[kept] > scores["l1" if kept is True else True]
    auto = RCC(5, normalize="auto", random_state=0).fit(labels)
    assert auto.normalize_ == kept and auto.anmi_ == scores
    default = RCC(5, random_state=0).fit(labels)  # "auto" is the default (#5, 2026-11-25)
    assert default.normalize_ == kept and default.anmi_ == scores
    np.testing.assert_array_equal(default.labels_, auto.labels_)
    chosen = fits[kept]
    np.testing.assert_array_equal(auto.labels_, chosen.labels_)
    np.testing.assert_array_equal(auto.embedding_, chosen.embedding_)
    np.testing.assert_array_equal(auto.history_["objective"], chosen.history_["objective"])
    assert auto.n_iter_ == chosen.n_iter_ and auto.get_params()["normalize"] == "auto"
    assert clustering_accuracy(y, auto.labels_) == max(
        clustering_accuracy(y, fit.labels_) for fit in fits.values()
    )


def test_a_numpy_bool_is_the_bool():
    """normalize=np.True_ (from a config array, say) is the normalised form, not the "l1" one
    (before: ``normalize is True`` failed for numpy's bool and the bare D^-1 M̃ D^-1 was fused)."""
    y, labels = _noisy_ensemble([40, 20, 12, 8, 5], 8, 0.3, seed=6)
    for value in (True, False):
        a = RCC(5, normalize=value, random_state=0).fit(labels)
        b = RCC(5, normalize=np.bool_(value), random_state=0).fit(labels)
        np.testing.assert_array_equal(a.history_["objective"], b.history_["objective"])
        assert b.normalize_ is value


def test_auto_ties_keep_the_normalised_form_and_warn_once():
    """Equal ANMI (both forms recover identical clusterings) keeps True, the spec's form; only the
    kept fit's ConvergenceWarning reaches the caller, not one per form."""
    rng = np.random.default_rng(3)
    y = _truth([30, 20, 10])
    auto = RCC(3, normalize="auto", random_state=0).fit(_permuted_copies(y, 4, rng))
    assert auto.normalize_ is True and auto.anmi_[True] == auto.anmi_["l1"] == 1.0
    y, labels = _noisy_ensemble([20, 20, 20], 6, 0.4, seed=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        RCC(3, normalize="auto", max_iter=3, random_state=0).fit(labels)
    assert [w.category for w in caught] == [ConvergenceWarning]


def test_random_adversarial_columns_do_not_break_recovery():
    """Two columns of random labels among six exact ones that label every item: rcc and l2
    both recover the truth. Such columns corrupt every entry of M̃ by at most 2/8, densely:
    no gross error for the l1 loss to absorb, and the truth is the clear majority for both
    (benchmarks/results/rcc_adversarial.md, coverage 1.0). The next test is the case where they
    part."""
    rng = np.random.default_rng(13)
    y = _truth([40, 40, 40, 40])
    labels = np.column_stack([_permuted_copies(y, 6, rng), rng.integers(0, 4, (y.size, 2))])
    for cls in (RCC, L2CC):
        assert clustering_accuracy(y, cls(4, random_state=0).fit_predict(labels)) == 1.0


def test_adversarial_column_over_partial_views_rcc_holds_l2_follows_it():
    """Six good columns each label a random half of the items (-1 elsewhere: a view that has no
    data for the rest) and one random column labels them all. M̃_ij averages the columns that
    label both i and j, so the adversary carries about half of every entry (E[1/(1+c)] with
    c ~ Bin(6, 1/4) good columns on a pair) and all of the ~18% of pairs no good column labels:
    a gross (±1) error on a minority of the entries. l2, the least-squares fit, follows the
    mean, where the adversary's complete blocks compete with the truth, and goes over to the
    adversary; rcc's l1 fit follows the per-entry majority, which is the truth on every pair one
    good column labels. Without the adversary both recover (l2 slightly better). Means over
    eight seeds, asserted with margin (measured: rcc 0.931, l2 0.664; agreement with the
    adversary 0.378 vs 0.651; without it 0.974 vs 0.994; the grid of cases is in
    benchmarks/results/rcc_adversarial.md)."""
    scores, control = [], []
    for seed in range(8):
        y, labels = partial_view_ensemble([50] * 4, n_good=6, coverage=0.5, seed=seed)
        adv = labels[:, -1]
        rcc, l2 = (cls(4, random_state=0).fit_predict(labels) for cls in (RCC, L2CC))
        scores.append(
            [clustering_accuracy(y, rcc), clustering_accuracy(y, l2)]
            + [clustering_accuracy(adv, rcc), clustering_accuracy(adv, l2)]
        )
        good = labels[:, :-1]
        control.append(
            [
                clustering_accuracy(y, cls(4, random_state=0).fit_predict(good))
                for cls in (RCC, L2CC)
            ]
        )
    rcc_acc, l2_acc, rcc_adv, l2_adv = np.mean(scores, axis=0)
    assert rcc_acc >= 0.88 and l2_acc <= 0.75 and rcc_acc - l2_acc >= 0.15
    assert l2_adv >= rcc_adv + 0.15  # l2's loss is the adversary's gain
    assert np.mean(control, axis=0).min() >= 0.95  # the adversary is what breaks l2


def _reference_admm(M, K, mu, n_iter, rho=1.1):
    """Spec §3 on the full n×n matrix, dense eigh each step: the plain reading of the algorithm,
    against which the cell-reduced solver is checked. Returns (L, objective history)."""

    def top(B):
        n = B.shape[0]
        vals, vecs = sla.eigh(B, subset_by_index=(n - K, n - 1))
        return (vecs * np.maximum(vals, 0.0)) @ vecs.T

    L = top(M)
    mu = 1.0 / np.abs(M - L).max() if mu == "residual" else mu
    E, Lam, hist = np.zeros_like(M), np.zeros_like(M), []
    for _ in range(n_iter):
        E = soft_threshold(M - L - Lam, 1.0 / mu)
        L = top(M - E - Lam)
        mu_new = rho * mu
        Lam = (Lam + E - M + L) * (mu / mu_new)
        mu = mu_new
        hist.append(np.abs(M - L).sum())
    return L, np.array(hist)


@pytest.mark.parametrize("normalize", [True, False, "l1"])
def test_cell_reduction_matches_the_full_admm(normalize):
    """Items with identical label rows share rows of M̃; RCC solves on the g cells with
    multiplicity weights. Its iterates must be the full n×n ADMM's (to round-off)."""
    y, labels = _noisy_ensemble([40, 30, 30], 4, 0.15, seed=21)
    n_cells = np.unique(labels, axis=0).shape[0]
    assert n_cells < 0.6 * y.size  # the case exercises the reduction
    if normalize == "l1":
        M = co_association(labels)
        deg = M.sum(axis=1)
        M = M / np.outer(deg, deg) * deg.mean()  # the mean degree: the True form's scale
    else:
        M = co_association(labels, normalize=normalize)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = RCC(3, normalize=normalize, max_iter=25, eigen_solver="dense", random_state=0).fit(
            labels
        )
    L_ref, hist_ref = _reference_admm(M, 3, "residual", 25)
    assert model.n_cells_ == n_cells
    np.testing.assert_allclose(model.history_["objective"], hist_ref, rtol=1e-8)
    L = (model.embedding_ * model.eigenvalues_) @ model.embedding_.T
    np.testing.assert_allclose(L, L_ref, atol=1e-9)


def _oversplit_ensemble(sizes, n_columns, p, seed, n_sub=3):
    """Pool-like columns: each class split into n_sub parts along a hidden coordinate (the cut
    points jitter from column to column), then each label replaced at random with probability
    p. Returns (truth, labels)."""
    rng = np.random.default_rng(seed)
    y = _truth(sizes)
    coord = rng.random(y.size)
    cols = []
    for _ in range(n_columns):
        part = (coord + 0.1 * rng.standard_normal(y.size)) * n_sub
        z = y * n_sub + np.clip(part, 0, n_sub - 1).astype(int)
        flip = rng.random(y.size) < p
        z[flip] = rng.integers(0, len(sizes) * n_sub, flip.sum())
        cols.append(z)
    return y, np.column_stack(cols)


def test_l1_form_on_the_normalised_forms_scale_converges_like_it():
    """normalize="l1" fuses d̄ D^-1 M̃ D^-1: on the bare D^-1 M̃ D^-1 (entries ~1/d̄² instead of
    ~1/d̄) μ⁰ was d̄ times larger, μ hit its absolute cap μ_max ~100 iterations in, and the ADMM
    ran to max_iter at a fixed penalty (300 here, as on pool_mf; fails before). The constant
    leaves the minimiser alone: the reference ADMM of the cell-reduction test uses it."""
    y, labels = _oversplit_ensemble([300, 200, 100], 10, 0.1, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        l1 = RCC(3, normalize="l1", random_state=0).fit(labels)
    normalised = RCC(3, random_state=0).fit(labels)
    assert l1.converged_ and l1.n_iter_ <= 1.2 * normalised.n_iter_
    ratio = l1.history_["mu"][0] / normalised.history_["mu"][0]
    assert 1 / 3 <= ratio <= 3  # the bare form: 52 (d̄ = 200)


def _indefinite(n, k, seed):
    """A symmetric matrix shaped like rcc's B early in the ADMM: k leading eigenvalues clustered
    near 0.2 (the k-th and (k+1)-th 1 % apart), a bulk in [0, 0.12], and a negative end reaching
    −0.7 — larger in magnitude than the wanted eigenvalues."""
    rng = np.random.default_rng(seed)
    top = np.sort(rng.uniform(0.2, 1.0, k))[::-1]
    top[-1] = 0.2
    rest = np.concatenate(
        [[0.198], rng.uniform(0.0, 0.12, n - k - 13), -rng.uniform(0.25, 0.7, 12)]
    )
    vecs = np.linalg.qr(rng.standard_normal((n, n)))[0]
    return (vecs * np.concatenate([top, rest])) @ vecs.T


def test_subspace_tracker_finds_the_top_pairs_of_an_indefinite_matrix():
    """The warm-started tracker returns B's k largest eigenpairs to the asked residual, from a
    start far from them (as early in the ADMM) and from one close to them (late), when the
    negative end dominates in magnitude. Power steps X ← orth(B X), the tracker before
    2026-11-25, needed 50 and 104 products B Q (of the block's width) here; the residual
    directions need 8.1 and 7.4."""
    from adseg.consensus.rcc import _SubspaceTracker

    n, k = 300, 10
    B = _indefinite(n, k, seed=0)
    vals, vecs = sla.eigh(B)
    rng = np.random.RandomState(0)

    class Counted:  # products B Q in units of the tracker's block width (2k columns)
        products = 0.0

        def __matmul__(self, Q):
            Counted.products += Q.shape[1] / (2 * k)
            return B @ Q

    for noise, tol in ((1.0, 1e-4), (1e-3, 1e-6)):
        start = np.linalg.qr(vecs[:, -k:] + noise * rng.standard_normal((n, k)))[0]
        Counted.products = 0
        found = _SubspaceTracker(start, np.random.RandomState(1)).top(Counted(), tol)
        assert found is not None
        assert Counted.products <= 15
        theta, X = found
        np.testing.assert_allclose(np.sort(theta), vals[-k:], atol=10 * tol**2 + 1e-12)
        assert np.linalg.norm(B @ X - X * theta, axis=0).max() <= tol
        np.testing.assert_allclose(X.T @ X, np.eye(k), atol=1e-10)
        # the wanted invariant subspace, although the k-th and (k+1)-th eigenvalues are 1 % apart
        cosines = np.linalg.svd(vecs[:, -k:].T @ X, compute_uv=False)
        assert cosines.min() > 1 - 10 * tol


def test_orthonormal_complement():
    from adseg.consensus.rcc import _orthonormal_complement

    rng = np.random.default_rng(0)
    X = np.linalg.qr(rng.standard_normal((50, 6)))[0]
    R = rng.standard_normal((50, 6)) + X @ rng.standard_normal((6, 6)) * 1e6
    P = _orthonormal_complement(R, X)
    np.testing.assert_allclose(P.T @ P, np.eye(6), atol=1e-12)
    assert np.abs(X.T @ P).max() < 1e-12
    # span(P) = the part of span(R) outside span(X)
    projected = R - X @ (X.T @ R)
    np.testing.assert_allclose(P @ (P.T @ projected), projected, atol=1e-6 * np.abs(R).max())


@pytest.mark.parametrize("solver", ["arpack", "lobpcg"])
def test_same_seed_same_result_after_arpack_has_run_elsewhere(solver):
    """ARPACK restarts from a random vector of its own, process-wide seed when a small matrix
    has lower rank than its Krylov space: two fits with the same random_state then gave
    different embeddings and label numbers, depending on what ran before (QA). Small problems
    now go to LAPACK with every solver."""
    import scipy.sparse.linalg as spla

    labels = np.column_stack([np.repeat([0, 1, 2], 4)] * 3)
    degenerate = np.kron(np.eye(3), np.ones((10, 10)))
    fits = []
    for _ in range(4):
        spla.eigsh(degenerate, k=3, which="LA", v0=np.ones(30))  # moves ARPACK's own seed
        fits.append(RCC(3, eigen_solver=solver, random_state=0).fit(labels))
    for fit in fits[1:]:
        np.testing.assert_array_equal(fit.labels_, fits[0].labels_)
        np.testing.assert_array_equal(fit.embedding_, fits[0].embedding_)


def test_a_finalizers_resource_warning_during_the_fit_is_not_replayed(monkeypatch):
    """normalize="auto" replays its kept fit's warnings; a ResourceWarning raised meanwhile by a
    finalizer (an unclosed connection of the caller's, collected mid-fit) is not the fit's and
    must not come out of fit() as an error under a strict filter, nor as a fuser note."""
    import adseg.consensus.rcc as rcc_module
    from adseg.fusion import _fit_one

    real = rcc_module.rcc_admm

    def with_stray_warning(*args, **kwargs):
        warnings.warn("connection deleted while still open", ResourceWarning, stacklevel=1)
        return real(*args, **kwargs)

    monkeypatch.setattr(rcc_module, "rcc_admm", with_stray_warning)
    y, labels = _noisy_ensemble([25, 25, 25], 6, 0.3, seed=12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fitted = RCC(3, random_state=3).fit(labels)
    assert fitted.labels_.shape == (75,)
    _, _, notes = _fit_one("rcc", labels, 3, 3, {})
    assert not any("still open" in note for note in notes)
