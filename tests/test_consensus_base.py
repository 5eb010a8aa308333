import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.utils.validation import check_is_fitted

from adseg.consensus import (
    FUSERS,
    check_labels,
    co_association,
    incidence_matrix,
    relabel,
)
from adseg.consensus._base import average_nmi
from adseg.metrics import clustering_accuracy, pair_consistency


def test_co_association_matches_pair_definition():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, size=(30, 5))
    M = co_association(labels)
    brute = (labels[:, None, :] == labels[None, :, :]).mean(axis=2)
    np.testing.assert_allclose(M, brute, atol=1e-12)


def test_average_nmi_is_the_mean_nmi_over_the_items_each_column_labels():
    from sklearn.metrics import normalized_mutual_info_score as nmi

    rng = np.random.default_rng(1)
    labels = rng.integers(0, 4, size=(40, 3))
    labels[:10, 1] = -1  # column 1 leaves the first ten items out
    pred = rng.integers(0, 3, size=40)
    expected = np.mean(
        [nmi(labels[:, 0], pred), nmi(labels[10:, 1], pred[10:]), nmi(labels[:, 2], pred)]
    )
    assert average_nmi(pred, labels) == pytest.approx(expected, abs=1e-12)
    # a partition every column agrees with (up to the names of its labels) scores 1
    y = np.repeat(np.arange(4), 10)
    assert average_nmi(y, np.column_stack([y, (y + 1) % 4, 3 - y])) == pytest.approx(1.0)


def test_co_association_missing_divides_by_covering_columns():
    labels = np.array([[0, 0], [0, -1], [1, 0]])
    M = co_association(labels)
    # items 0,1 only both covered in column 0, where they are together
    assert M[0, 1] == 1.0
    # items 0,2: together in column 1 only
    assert M[0, 2] == 0.5
    # items 1,2: covered together only by column 0, apart there
    assert M[1, 2] == 0.0
    np.testing.assert_allclose(M, M.T)


@pytest.mark.parametrize("missing", [False, True])
def test_weighted_co_association_is_the_weighted_share_of_clusterings(missing):
    """Weights entered squared (Σ w_v² / Σ w_v: a diagonal of 2.5 for weights 3, 1); a weight
    must act as that many copies of its clustering."""
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 3, size=(25, 4))
    if missing:
        labels[rng.random(labels.shape) < 0.2] = -1
    w = np.array([3.0, 1.0, 0.5, 2.0])
    both = (labels[:, None, :] >= 0) & (labels[None, :, :] >= 0)
    together = (labels[:, None, :] == labels[None, :, :]) & both
    with np.errstate(invalid="ignore"):
        brute = np.nan_to_num((together * w).sum(axis=2) / (both * w).sum(axis=2))
    np.testing.assert_allclose(co_association(labels, w), brute, atol=1e-12)
    copies = np.repeat(labels, [6, 2, 1, 4], axis=1)  # the same weights as whole copies
    np.testing.assert_allclose(co_association(labels, w), co_association(copies), atol=1e-12)
    small = np.array([[0, 0], [0, 1], [1, 1]])
    np.testing.assert_allclose(
        co_association(small, [3, 1]), [[1, 0.75, 0], [0.75, 1, 0.25], [0, 0.25, 1]]
    )


def test_relabel_first_appearance():
    out = relabel(np.array([[7, -1], [3, 5], [7, 5]]))
    np.testing.assert_array_equal(out, [[0, -1], [1, 0], [0, 0]])


def test_incidence_shape():
    Y = incidence_matrix(np.array([[0, 1], [1, 1], [2, 0]]))
    assert Y.shape == (3, 5)
    np.testing.assert_array_equal(Y.sum(axis=1).A.ravel(), [2, 2, 2])


@pytest.mark.parametrize(
    "bad, err",
    [
        (np.zeros(5, dtype=int), ValueError),
        (np.zeros((5, 0), dtype=int), ValueError),
        (np.array([[0.5, 1.0]]), TypeError),
        (np.array([["a", "b"]]), TypeError),
        (np.array([[0, -1], [1, -1]]), ValueError),
        (np.array([[0, -2]]), ValueError),
    ],
)
def test_check_labels_rejects(bad, err):
    with pytest.raises(err):
        check_labels(bad)


def test_pair_consistency_matches_brute_force():
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 4, 60), rng.integers(0, 3, 60)
    iu = np.triu_indices(60, 1)
    same_a = (a[:, None] == a[None, :])[iu]
    same_b = (b[:, None] == b[None, :])[iu]
    agree, disagree = pair_consistency(a, b)
    assert agree == pytest.approx((same_a == same_b).mean())
    assert disagree == pytest.approx(1 - agree)


def test_clustering_accuracy_rectangular():
    assert clustering_accuracy([0, 0, 1, 1], [0, 1, 2, 2]) == 0.75


@pytest.mark.parametrize(
    "labels",
    [np.array([[2**63 + 5], [1]], dtype=np.uint64), np.array([[1e20], [1.0]])],
)
def test_check_labels_names_labels_beyond_int64(labels):
    # the int64 cast used to wrap them round and report a 'negative label other than -1'
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no RuntimeWarning from an invalid cast
        with pytest.raises(ValueError, match="outside the int64 range"):
            check_labels(labels)


def test_check_labels_keeps_small_unsigned_and_integral_float_labels():
    np.testing.assert_array_equal(check_labels(np.array([[5], [1]], dtype=np.uint64)), [[5], [1]])
    np.testing.assert_array_equal(check_labels(np.array([[5.0], [-1.0]])), [[5], [-1]])


# --- the door, as a scikit-learn user meets it (QA, 2026-11-24) --------------------------------

BLOCKS = np.array([[0, 1], [0, 1], [1, 0], [1, 0]])


@pytest.mark.parametrize(
    ("labels", "err", "match"),
    [
        (sp.csr_matrix(BLOCKS), TypeError, r"dense array; got a sparse matrix"),
        (np.ma.masked_array(BLOCKS, mask=[[0, 1]] * 4), ValueError, r"masked entries.*-1"),
        ([[0, 1], [1]], ValueError, "rows have different lengths"),
        (np.array([[0, 1.0], [np.nan, 1]]), ValueError, r"NaN at row 1, column 0.*-1"),
        (np.array([[0, 1.0], [1, -np.inf]]), ValueError, r"has -inf at row 1, column 1"),
        (
            pd.DataFrame({"a": [0, 1], "b": [1, None]}).astype("Int64"),
            ValueError,
            r"missing value \(NA/None/NaN\) at row 1, column 1.*-1",
        ),
    ],
)
def test_check_labels_explains_what_numpy_would_get_wrong(labels, err, match):
    """These were "got shape ()", the mask silently dropped, numpy's own message, "non-integral
    floats" and "got dtype object"."""
    with pytest.raises(err, match=match):
        check_labels(labels)


def test_check_labels_takes_pandas_nullable_integers_without_na():
    frame = pd.DataFrame(BLOCKS, columns=["a", "b"]).astype("Int64")
    np.testing.assert_array_equal(check_labels(frame), BLOCKS)
    assert check_labels(BLOCKS.astype(object)).dtype == np.int64


@pytest.mark.parametrize(
    ("name", "params", "err", "match"),
    [
        ("rcc", {"rho": None}, TypeError, "rho must be a real number"),
        ("rcc", {"tol": "1e-6"}, TypeError, "tol must be a real number"),
        ("rcc", {"tol": 1.5}, ValueError, "tol must be finite and > 0 and < 1"),
        ("rcec", {"tol": 2.5}, ValueError, "tol must be finite and > 0 and < 1"),
        ("sccbg", {"tol": 1.0}, ValueError, "tol must be finite and > 0 and < 1"),
        ("sccbg", {"inner_tol": 1e9}, ValueError, "inner_tol must be finite and > 0 and < 1"),
        ("sccbg", {"gamma": "auto", "gamma_grid": None}, TypeError, "gamma_grid must be a seq"),
        ("sccbg", {"gamma": "auto", "gamma_grid": 1e-3}, TypeError, "gamma_grid must be a seq"),
        ("rcc", {"mu_max": None}, TypeError, "mu_max must be a real number"),
        ("rcc", {"max_iter": None}, TypeError, "max_iter must be an integer"),
        ("rcc", {"mu": "big"}, ValueError, "mu must be 'residual', 'spectral'"),
        ("l2", {"weights": "ab"}, TypeError, "weights must be numbers"),
        ("l2", {"normalize": "l1"}, ValueError, "normalize must be True or False"),
        ("lta", {"lam": np.inf}, ValueError, "lam must be finite"),
        ("lta", {"tol": 1.5}, ValueError, "tol must be finite and > 0 and < 1"),
        ("sccbg", {"edge_tol": 1.5}, ValueError, "edge_tol must be finite and ≥ 0 and < 1"),
        ("rcec", {"max_iter": 0}, ValueError, "max_iter must be an integer ≥ 1"),
        ("trce", {"lam": np.inf}, ValueError, "lam must be finite and > 0"),
    ],
)
def test_bad_parameters_are_named(name, params, err, match):
    with pytest.raises(err, match=match):
        FUSERS[name](n_clusters=2, random_state=0, **params).fit(np.repeat(BLOCKS, 3, axis=0))


def test_a_refit_forgets_the_last_fits_learned_attributes():
    labels = np.repeat(BLOCKS, 5, axis=0)
    rcc = FUSERS["rcc"](n_clusters=2, store_error=True, random_state=0).fit(labels)
    assert rcc.error_.shape == (20, 20)
    rcc.set_params(store_error=False).fit(labels[:12])
    assert not hasattr(rcc, "error_") and rcc.n_items_ == 12 and rcc.labels_.shape == (12,)
    with pytest.raises(ValueError, match="assign_labels"):  # a failed refit: unfitted, not mixed
        rcc.set_params(assign_labels="bogus").fit(labels)
    with pytest.raises(NotFittedError):
        check_is_fitted(rcc)


@pytest.mark.parametrize("name", sorted(FUSERS))
def test_every_fuser_refuses_more_clusters_than_distinct_label_rows(name):
    """Items with identical label rows cannot be told apart. The fusers used to disagree when K
    exceeded the g distinct rows: rcc, l2, lta and trce split identical items by round-off,
    rcec returned fewer clusters with a warning, sccbg raised. Now all raise, naming g; K = g
    still fits, and -1 counts as a value (rows that differ only in a missing label differ)."""
    rows = np.array([[0, 0], [1, 1], [2, 2], [0, -1]])
    labels = np.repeat(rows, [3, 2, 4, 1], axis=0)
    with pytest.raises(ValueError, match="n_clusters=5 exceeds the 4 distinct label rows"):
        FUSERS[name](n_clusters=5, random_state=0).fit(labels)
    with warnings.catch_warnings():  # sccbg's k-means may find 3 of the 4 (sklearn says so)
        warnings.simplefilter("ignore", ConvergenceWarning)
        fitted = FUSERS[name](n_clusters=4, random_state=0).fit(labels)
    assert fitted.labels_.shape == (10,) and set(fitted.labels_) <= set(range(4))


@pytest.mark.parametrize("name", sorted(FUSERS))
def test_items_no_clustering_labels_are_no_group_of_their_own(name):
    """Two groups of identical items and two items labelled in no clustering: the unlabelled
    row was counted as a third group, so K = 3 was allowed, and rcc, l2 and trce split a group
    of identical items ([1 1 1 1 1 0 2 0 0 2 2 2]) while rcec and lta made the two unlabelled
    items the third cluster and sccbg returned 2 (QA). Now K = 3 is refused, saying why; at
    K = 2 every fuser keeps each group of identical items whole."""
    labels = np.array([[0, 0]] * 5 + [[1, 1]] * 5 + [[-1, -1]] * 2)
    with pytest.raises(
        ValueError,
        match=r"n_clusters=3 exceeds the 2 distinct label rows \(2 item\(s\) labelled in no",
    ):
        FUSERS[name](n_clusters=3, random_state=0).fit(labels)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rcec says it placed the unlabelled items
        found = FUSERS[name](n_clusters=2, random_state=0).fit_predict(labels)
    assert len(set(found[:5])) == 1 and len(set(found[5:10])) == 1 and found[0] != found[5]


_WEIGHTED_FUSERS = sorted(
    name for name, fuser in FUSERS.items() if "weights" in fuser().get_params()
)


@pytest.mark.parametrize("name", _WEIGHTED_FUSERS)
def test_a_clustering_of_weight_zero_tells_no_rows_apart(name):
    """A clustering of weight 0 changes no entry of the fused matrix, so rows that differ only
    there cannot be told apart either. They were counted as distinct: asked for 3 clusters
    where the weighted clusterings see 2 groups, rcc and l2 split the second group by the
    random start ([0 0 0 0 2 2 1 1] with one seed, [0 0 0 0 1 1 2 2] with another), kc returned
    2. Now refused, naming the weight; K = 2 fits."""
    labels = np.array([[0, 0], [0, 1], [0, 0], [0, 1], [1, 2], [1, 3], [1, 2], [1, 3]])
    with pytest.raises(
        ValueError, match="n_clusters=3 exceeds the 2 distinct label rows .*weight 0"
    ):
        FUSERS[name](n_clusters=3, weights=[1.0, 0.0], random_state=0).fit(labels)
    fitted = FUSERS[name](n_clusters=3, weights=[1.0, 0.5], random_state=0).fit(labels)
    assert len(set(fitted.labels_)) == 3
    fitted = FUSERS[name](n_clusters=2, weights=[1.0, 0.0], random_state=0).fit(labels)
    assert fitted.labels_.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]


def test_sccbg_cluster_ids_name_the_original_labels():
    """They were the internal 0..k_v-1 numbers, not the (clustering, label) the docs promise."""
    labels = np.array([[10, 7], [10, 3], [42, 7], [42, 3]])
    fuser = FUSERS["sccbg"](n_clusters=2, random_state=0).fit(labels)
    # by clustering, then by first appearance: the order of graph_'s columns
    assert fuser.cluster_ids_.tolist() == [[0, 10], [0, 42], [1, 7], [1, 3]]


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("trce", {"noise": "no"}),  # was run with the noise term on
        ("trce", {"learn_alpha": None}),
        ("sccbg", {"compress": "bad"}),
        ("sccbg", {"relaxation": True}),  # was taken as ω = 1
        ("rcc", {"store_error": "bad"}),
        ("rcc", {"normalize": 0}),
        ("l2", {"normalize": 1}),
        ("rcc", {"n_init": True}),
    ],
)
def test_on_off_and_choice_parameters_are_checked(name, options):
    from adseg.consensus import FUSERS

    labels = np.random.RandomState(0).randint(0, 3, (30, 4))
    (parameter,) = options
    with pytest.raises((TypeError, ValueError), match=parameter):
        FUSERS[name](n_clusters=3, random_state=0, **options).fit(labels)


def test_fuser_options_are_checked_at_the_door_and_keyed_by_canonical_name():
    """--fuser-option's core: known fusers and constructor parameters only (not the run's K,
    seed or per-clustering weights), values tried on a tiny fit so that a bad one fails before
    a run starts, in the fuser's own words with the option named."""
    from adseg.consensus import check_fuser_options

    assert check_fuser_options({}) == {}
    checked = check_fuser_options({"rcc": {"normalize": True}, "spcc": {"gamma": 0.5}})
    assert checked == {"rcc": {"normalize": True}, "sccbg": {"gamma": 0.5}}
    with pytest.raises(ValueError, match="unknown fuser 'rccc'; registered: l2, lta, rcc"):
        check_fuser_options({"rccc": {"normalize": True}})
    with pytest.raises(ValueError, match="rcc has no option 'normalise'; its options: .*normalize"):
        check_fuser_options({"rcc": {"normalise": True}})
    for param in ("n_clusters", "random_state", "weights"):
        with pytest.raises(ValueError, match=f"rcc has no option '{param}' \\(the run sets it\\)"):
            check_fuser_options({"rcc": {param: 3}})
    with pytest.raises(ValueError, match=r"fuser option rcc.normalize='sym': normalize must be"):
        check_fuser_options({"rcc": {"normalize": "sym"}})
    with pytest.raises(ValueError, match=r"fuser option l2.normalize='l1': normalize must be"):
        check_fuser_options({"l2": {"normalize": "l1"}})  # rcc's form, none for l2
    # counts of work are probed at 10: a huge n_init is accepted at once, a bad one still refused
    assert check_fuser_options({"rcc": {"n_init": 10**8}}) == {"rcc": {"n_init": 10**8}}
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="fuser option rcc.n_init="):
            check_fuser_options({"rcc": {"n_init": bad}})
    # an alias and its canonical name merge, the later value winning
    assert check_fuser_options({"sccbg": {"gamma": 0.5}, "spcc": {"gamma": 2.0}}) == {
        "sccbg": {"gamma": 2.0}
    }


def test_resolve_threads_follows_scikit_learns_n_jobs():
    """None and 1 are one thread, a positive count is itself, -1 every CPU the process may use,
    -2 all but one (at least one); 0, floats and bools are refused, naming n_jobs."""
    import os

    from adseg.consensus._base import map_threads, resolve_threads

    cpus = len(os.sched_getaffinity(0))
    assert resolve_threads(None) == resolve_threads(1) == 1
    assert resolve_threads(3) == 3
    assert resolve_threads(-1) == cpus
    assert resolve_threads(-2) == max(1, cpus - 1)
    assert resolve_threads(-10_000) == 1
    for bad, error in ((0, ValueError), (2.0, TypeError), (False, TypeError), ("2", TypeError)):
        with pytest.raises(error, match="n_jobs"):
            resolve_threads(bad)
    assert map_threads(lambda x: x * x, range(7), 3) == [x * x for x in range(7)]


def test_map_threads_stops_at_an_error_without_running_the_rest():
    """An item that fails ends the map with its error; the items not started are cancelled (a
    Ctrl-C during a threaded fit does not wait for the whole step)."""
    import threading
    import time

    from adseg.consensus._base import map_threads

    ran, lock = [], threading.Lock()

    def work(x):
        if x == 0:
            raise RuntimeError("item 0 failed")
        time.sleep(0.01)
        with lock:
            ran.append(x)

    with pytest.raises(RuntimeError, match="item 0 failed"):
        map_threads(work, range(200), 2)
    assert len(ran) < 100
