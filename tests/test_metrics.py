"""Invariants of the clustering scores (specs/lta.md §9, items 23–26); brute-force agreement."""

from itertools import permutations

import numpy as np
import pytest
from sklearn.metrics import normalized_mutual_info_score
from sklearn.metrics.cluster import contingency_matrix

from adseg.metrics import ari, clustering_accuracy, mape, mape_with_count, nmi, pair_consistency


def _rename(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The same partition under a random bijection of its label values (to far-apart integers)."""
    values = np.unique(labels)
    new = rng.permutation(values.size) * 7 + 3
    return new[np.searchsorted(values, labels)]


@pytest.mark.parametrize("seed", range(5))
def test_identical_labelings_score_one_under_any_renaming(seed):
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, 6, 200)
    renamed = _rename(truth, rng)
    assert clustering_accuracy(truth, renamed) == 1.0
    assert nmi(truth, renamed) == pytest.approx(1.0)
    assert ari(truth, renamed) == pytest.approx(1.0)


@pytest.mark.parametrize("seed", range(5))
def test_scores_do_not_depend_on_label_names(seed):
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, 4, 150), rng.integers(0, 5, 150)
    a2, b2 = _rename(a, rng), _rename(b, rng)
    assert clustering_accuracy(a2, b2) == pytest.approx(clustering_accuracy(a, b))
    assert nmi(a2, b2) == pytest.approx(nmi(a, b))
    assert ari(a2, b2) == pytest.approx(ari(a, b))


@pytest.mark.parametrize("k_pred", [3, 4, 5])
def test_accuracy_equals_the_best_map_found_by_brute_force(k_pred):
    """Hungarian map = the best of all injective maps clusters → classes (4 classes); with more
    clusters than classes the unmatched clusters count as wrong."""
    rng = np.random.default_rng(k_pred)
    truth, pred = rng.integers(0, 4, 80), rng.integers(0, k_pred, 80)
    table = contingency_matrix(truth, pred)  # classes × clusters
    if table.shape[0] > table.shape[1]:
        table = table.T  # match every row of the smaller side to a distinct column
    n_rows, n_cols = table.shape
    best = max(
        table[range(n_rows), list(cols)].sum() for cols in permutations(range(n_cols), n_rows)
    )
    assert clustering_accuracy(truth, pred) == pytest.approx(best / truth.size)


@pytest.mark.parametrize("seed", range(5))
def test_accuracy_is_at_most_purity(seed):
    rng = np.random.default_rng(seed)
    truth, pred = rng.integers(0, 5, 120), rng.integers(0, 7, 120)
    purity = contingency_matrix(truth, pred).max(axis=0).sum() / truth.size
    assert clustering_accuracy(truth, pred) <= purity + 1e-12


def test_ari_is_near_zero_for_independent_labelings():
    rng = np.random.default_rng(0)
    values = [ari(rng.integers(0, 5, 2000), rng.integers(0, 5, 2000)) for _ in range(20)]
    assert abs(np.mean(values)) < 0.005
    assert max(abs(v) for v in values) < 0.02


@pytest.mark.parametrize("seed", range(5))
def test_nmi_normalisations_are_ordered(seed):
    """NMI(max) ≤ NMI(arithmetic, ours) ≤ NMI(min): the benchmarks quote the max form."""
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, 3, 300), rng.integers(0, 8, 300)
    b[:150] = a[:150]  # some shared structure so the scores are not all near 0
    low = normalized_mutual_info_score(a, b, average_method="max")
    high = normalized_mutual_info_score(a, b, average_method="min")
    assert low <= nmi(a, b) + 1e-12
    assert nmi(a, b) <= high + 1e-12
    assert low < high


# --------------------------------------------------------------------------------------------
# MAPE and labelings: non-finite and empty inputs are errors, never a silent NaN / inf / class
# --------------------------------------------------------------------------------------------


def test_mape_hand_computed_and_zero_actuals_counted():
    assert mape([100.0, 200.0], [110.0, 150.0]) == pytest.approx((0.1 + 0.25) / 2)
    assert mape_with_count([0.0, 100.0, 0.0], [5.0, 90.0, 1.0]) == (pytest.approx(0.1), 2)


@pytest.mark.parametrize(
    ("y", "y_hat", "name"),
    [
        ([np.nan, 2.0], [1.0, 1.0], "y"),
        ([1.0, 2.0], [1.0, np.nan], "y_hat"),
        ([1.0, 2.0], [np.inf, 1.0], "y_hat"),
        ([1.0, -np.inf], [1.0, 1.0], "y"),
    ],
)
def test_mape_rejects_non_finite_values_naming_the_argument(y, y_hat, name):
    with pytest.raises(ValueError, match=rf"^{name} has 1 non-finite value"):
        mape(y, y_hat)
    with pytest.raises(ValueError, match=rf"^{name} has 1 non-finite value"):
        mape_with_count(y, y_hat)


def test_mape_empty_input_and_all_zero_actuals_have_their_own_messages():
    with pytest.raises(ValueError, match="empty input"):
        mape([], [])
    with pytest.raises(ValueError, match="every actual value is zero"):
        mape([0.0, 0.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="same shape"):
        mape([1.0, 2.0], [1.0])


@pytest.mark.parametrize("score", [clustering_accuracy, nmi, ari])
def test_scores_reject_missing_labels_naming_the_argument(score):
    with pytest.raises(ValueError, match="y_true has 2 missing or non-finite"):
        score([0, 1, np.nan, np.nan], [0, 1, 2, 2])
    with pytest.raises(ValueError, match="y_pred has 1 missing or non-finite"):
        score([0, 1, 2, 2], [0.0, 1.0, np.inf, 2.0])
    with pytest.raises(ValueError, match="y_pred has 1 missing"):
        score(["a", "b", "c"], np.array(["a", None, "c"], dtype=object))
    # labels of any hashable kind still work: strings, floats that are whole numbers
    assert score(["x", "y", "y"], [2.0, 5.0, 5.0]) == pytest.approx(1.0)


def test_pair_consistency_rejects_nan_but_keeps_minus_one_as_left_out():
    with pytest.raises(ValueError, match="b has 1 missing or non-finite"):
        pair_consistency([0, 0, 1], [0.0, np.nan, 1.0])
    assert pair_consistency([0, 0, 1, -1], [3, 3, 4, 4]) == (1.0, 0.0)


def test_a_label_matrix_or_mixed_labels_are_refused_by_name():
    """A fuser's (n, m) label matrix was flattened and scored (scikit-learn refuses it), and
    labels mixing str and int failed deep in numpy's sort (QA)."""
    matrix = np.zeros((3, 2), dtype=int)
    for metric in (clustering_accuracy, nmi, ari):
        with pytest.raises(ValueError, match=r"must be 1-D \(one label per item\); got shape"):
            metric(matrix, np.arange(6))
    with pytest.raises(TypeError, match=r"mixes labels that cannot be compared \(int, str\)"):
        nmi(np.array([0, "a", 0], dtype=object), [0, 1, 0])
    assert nmi(["a", "b", "a"], [0, 1, 0]) == 1.0
