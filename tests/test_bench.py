"""The shared benchmark protocol helpers (adseg_research.bench) that need no data set."""

from __future__ import annotations

import os

import numpy as np
import pytest

from adseg_research.bench import (
    adversary_weight,
    machine_summary,
    partial_view_ensemble,
    shuffle_items,
    write_results,
)


def test_machine_summary_names_cpus_memory_python_and_load():
    line = machine_summary()
    assert f"{os.cpu_count()} CPUs" in line
    assert "GiB memory" in line and "Python 3." in line and "load " in line
    assert "\n" not in line


def test_shuffle_items_is_seeded_and_keeps_rows_together():
    y = np.arange(20)
    labels = np.column_stack([y, y % 3])
    y1, l1, perm1 = shuffle_items(y, labels, 5)
    y2, _, perm2 = shuffle_items(y, labels, 5)
    np.testing.assert_array_equal(perm1, perm2)
    np.testing.assert_array_equal(l1[:, 0], y1)  # rows move with their class
    assert sorted(perm1.tolist()) == list(range(20))
    y3, l3, perm3 = shuffle_items(y, labels, None)
    np.testing.assert_array_equal(y3, y)


def test_partial_view_ensemble_columns():
    y, labels = partial_view_ensemble([30, 20, 10], n_good=5, coverage=0.4, seed=3)
    assert labels.shape == (60, 6) and y.tolist() == [0] * 30 + [1] * 20 + [2] * 10
    good = labels[:, :5]
    seen = good >= 0
    np.testing.assert_array_equal(good[seen], np.broadcast_to(y[:, None], good.shape)[seen])
    assert 0.25 < seen.mean() < 0.55  # about the coverage
    assert (labels[:, 5] >= 0).all() and set(np.unique(labels[:, 5])) <= {0, 1, 2}
    _, again = partial_view_ensemble([30, 20, 10], n_good=5, coverage=0.4, seed=3)
    np.testing.assert_array_equal(labels, again)


@pytest.mark.parametrize("adversary, n_labels", [("merged", 2), ("split", 4)])
def test_partial_view_ensemble_merged_and_split(adversary, n_labels):
    y, labels = partial_view_ensemble([30, 20, 10], n_good=1, coverage=1.0, adversary=adversary)
    adv = labels[:, -1]
    assert np.unique(adv).size == n_labels

    # a merge or split of the truth: each adversarial cluster lies inside one class (split) or
    # each class inside one adversarial cluster (merged)
    def inside(a, b):
        return all(np.unique(b[a == v]).size == 1 for v in np.unique(a))

    assert inside(y, adv) if adversary == "merged" else inside(adv, y)


def test_partial_view_ensemble_rejects_bad_parameters():
    with pytest.raises(ValueError, match="adversary"):
        partial_view_ensemble([5, 5], n_good=2, coverage=0.5, adversary="evil")
    with pytest.raises(ValueError, match="coverage"):
        partial_view_ensemble([5, 5], n_good=2, coverage=0.0)
    with pytest.raises(ValueError, match="at least one column"):
        partial_view_ensemble([5, 5], n_good=0, coverage=0.5, adversary="none")
    with pytest.raises(ValueError, match="two classes"):
        partial_view_ensemble([5], n_good=1, coverage=0.5, adversary="merged")
    _, none = partial_view_ensemble([5, 5], n_good=2, coverage=1.0, adversary="none")
    assert none.shape == (10, 2)


def test_adversary_weight_is_one_over_the_covering_columns():
    _, full = partial_view_ensemble([10, 10], n_good=6, coverage=1.0)
    assert adversary_weight(full) == pytest.approx(1 / 7)
    labels = np.array([[0, 0], [0, -1], [1, 1]])
    # the last column labels pairs (0, 2) (both columns: 1/2) and nothing else off the diagonal
    assert adversary_weight(labels) == pytest.approx(0.5)
    assert adversary_weight(labels, column=0) == pytest.approx((1 + 1 + 0.5) / 3)


def test_kmeans_ensemble_init_random_is_seeded_and_differs_from_kmeanspp():
    from sklearn.datasets import make_blobs

    from adseg_research.ensemble import kmeans_ensemble

    X, _ = make_blobs(n_samples=120, centers=6, cluster_std=2.5, random_state=0)
    a = kmeans_ensemble(X, 8, 6, random_state=3, init="random")
    b = kmeans_ensemble(X, 8, 6, random_state=3, init="random")
    c = kmeans_ensemble(X, 8, 6, random_state=3)
    assert a.shape == (120, 8) and a.dtype == np.int64
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)  # same seeds, other initial centres
    assert set(np.unique(a)) <= set(range(6))


def test_kmeans_ensemble_rejects_an_unknown_init():
    from adseg_research.ensemble import kmeans_ensemble

    with pytest.raises(ValueError, match="init must be one of"):
        kmeans_ensemble(np.eye(5), 2, 2, init="forgy")


@pytest.mark.parametrize(
    "heading",
    [
        "## Analysis",
        "## Notes (hand-written)",
        "## Notes (hand-written, 2026-11-21 11:05 UTC)",
        "## pool_usps on a quiet machine (hand-added)",
        "## Discussion (written by hand after the run, from the tables above)",
        "## Addendum (2026-11-21): row blocks",
    ],
)
def test_write_results_keeps_the_hand_written_tail(tmp_path, heading):
    """A re-run (or a --from-csv re-render) deleted the reading written below the tables."""
    path = tmp_path / "r.md"
    path.write_text(f"# T\n\n| a |\n| 1 |\n\n{heading}\n\nWhy 1.\n\n## More\n\nx\n")
    write_results(path, "# T\n\n| a |\n| 2 |\n")
    assert path.read_text() == f"# T\n\n| a |\n| 2 |\n\n{heading}\n\nWhy 1.\n\n## More\n\nx\n"
    write_results(path, "# T\n\n| a |\n| 3 |\n")  # idempotent: the tail once
    assert path.read_text().count(heading) == 1 and "| 3 |" in path.read_text()


def test_write_results_without_a_hand_written_section_replaces_the_file(tmp_path):
    path = tmp_path / "r.md"
    path.write_text("# T\n\n## Runs\n\nold\n")
    write_results(path, "# T\n\n## Runs\n\nnew")
    assert path.read_text() == "# T\n\n## Runs\n\nnew\n"


def test_the_recorded_command_is_the_one_that_ran(monkeypatch):
    """The scripts wrote "nice -n 10" into every results file, whether or not the run was
    niced; the command now says what the process ran with."""
    import os

    from adseg_research.bench import recorded_command

    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    monkeypatch.delenv("OPENBLAS_L2_SIZE", raising=False)
    niceness = os.nice(0)
    command = recorded_command("rcc_scaling.py", ["--sizes", "1000", "a b"])
    nice = f"nice -n {niceness} " if niceness else ""
    expected = f"OPENBLAS_NUM_THREADS=1 {nice}.venv/bin/python benchmarks/rcc_scaling.py"
    assert command == f"{expected} --sizes 1000 'a b'"


def test_the_recorded_command_names_a_forced_blas_kernel(monkeypatch):
    """A machine that forces OpenBLAS's kernel (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE) runs the
    GEMMs at another speed: the command that reproduces the timing must say so."""
    from adseg_research.bench import recorded_command

    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.setenv("OPENBLAS_L2_SIZE", "512")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    command = recorded_command("sccbg_steps.py", ["--size", "100000"])
    prefix = "OPENBLAS_CORETYPE=Haswell OPENBLAS_L2_SIZE=512 OPENBLAS_NUM_THREADS=1 "
    assert command.startswith(prefix)
    assert command.endswith(".venv/bin/python benchmarks/sccbg_steps.py --size 100000")
    monkeypatch.setenv("OPENBLAS_CORETYPE", "a b")
    assert recorded_command("x.py", []).startswith("OPENBLAS_CORETYPE='a b' ")
    monkeypatch.delenv("OPENBLAS_CORETYPE")
    monkeypatch.delenv("OPENBLAS_L2_SIZE")
    command = recorded_command("sccbg_steps.py", [])
    assert "CORETYPE" not in command and "L2_SIZE" not in command


def test_the_datasets_folder_comes_from_the_option_the_variable_or_the_working_directory(
    tmp_path, monkeypatch
):
    """An explicit folder, else $ADSEG_DATASETS, else ./shared/datasets or ../shared/datasets:
    never a folder found from where the code lies."""
    from adseg_research.datasets import find_datasets_dir

    explicit, env, work = tmp_path / "explicit", tmp_path / "env", tmp_path / "checkout"
    for folder in (explicit, env, work, tmp_path / "shared" / "datasets"):
        folder.mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.setenv("ADSEG_DATASETS", str(env))
    assert find_datasets_dir(explicit) == explicit
    assert find_datasets_dir() == env
    monkeypatch.delenv("ADSEG_DATASETS")
    assert find_datasets_dir() == tmp_path / "shared" / "datasets"  # beside the checkout
    (work / "shared" / "datasets").mkdir(parents=True)
    assert find_datasets_dir() == work / "shared" / "datasets"
    with pytest.raises(FileNotFoundError, match="pass --datasets DIR or set .ADSEG_DATASETS"):
        find_datasets_dir(tmp_path / "nowhere")


def test_a_datasets_variable_naming_no_folder_is_an_error(tmp_path, monkeypatch):
    """$ADSEG_DATASETS naming no folder is an error, not a fall-back to ../shared: a benchmark
    would run on other data than the data asked for, with exit 0."""
    from adseg_research.datasets import find_datasets_dir

    monkeypatch.chdir(tmp_path)
    (tmp_path / "shared" / "datasets").mkdir(parents=True)
    monkeypatch.setenv("ADSEG_DATASETS", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match=f"ADSEG_DATASETS={tmp_path}/nowhere is not a"):
        find_datasets_dir()


@pytest.mark.parametrize(
    "args, error, message",
    [  # 2.7 ran as 2, 0 clusterings returned an empty pool, True and '3' failed in numpy (QA)
        ((3, 2.7), TypeError, "n_clusters must be an integer; got 2.7"),
        ((0, 3), ValueError, "n_clusterings must be an integer ≥ 1; got 0"),
        ((True, 3), TypeError, "n_clusterings must be an integer; got True"),
        ((2, "3"), TypeError, "n_clusters must be an integer; got '3'"),
        ((2, 21), ValueError, r"ask for more clusters \(up to 21\) than the 20 items of X"),
    ],
)
def test_kmeans_ensemble_names_a_bad_argument(args, error, message):
    from adseg_research.ensemble import kmeans_ensemble

    X = np.random.RandomState(0).rand(20, 3)
    with pytest.raises(error, match=message):
        kmeans_ensemble(X, *args, random_state=0)


def test_kmeans_ensemble_checks_its_features_and_k_range():
    from adseg_research.ensemble import kmeans_ensemble, kmeans_ensemble_random_k

    X = np.random.RandomState(0).rand(20, 3)
    assert kmeans_ensemble(X.tolist(), 2, 3, random_state=0).shape == (20, 2)  # a list is fine
    with pytest.raises(ValueError, match="X has no items"):
        kmeans_ensemble(np.empty((0, 3)), 2, 1)
    with pytest.raises(ValueError, match=r"X must be 2-D \(n_items, n_features\); got shape"):
        kmeans_ensemble(X[0], 2, 2)
    for k_range in ((0, 3), (2,), (3, 2)):
        with pytest.raises(ValueError, match="k_range must"):
            kmeans_ensemble_random_k(X, 2, k_range, random_state=0)
    with pytest.raises(TypeError, match="k_range must be an integer; got 2.5"):
        kmeans_ensemble_random_k(X, 2, (2.5, 3), random_state=0)
    with pytest.raises(ValueError, match="n_clusterings must be an integer ≥ 1; got 0"):
        kmeans_ensemble_random_k(X, 0, (2, 3))
