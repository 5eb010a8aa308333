"""Scores: clustering accuracy (Hungarian), NMI, ARI, pair consistency, MAPE, mean ± std."""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from sklearn.metrics.cluster import contingency_matrix


def clustering_accuracy(y_true, y_pred) -> float:
    """Share of items correctly labelled under the best one-to-one map of predicted clusters to
    classes (Hungarian algorithm on the contingency table; rectangular when the counts differ, the
    unmatched clusters count as wrong). Cost O(n + k³)."""
    y_true, y_pred = _pair(y_true, y_pred)
    table = contingency_matrix(y_true, y_pred)
    rows, cols = linear_sum_assignment(table, maximize=True)
    return float(table[rows, cols].sum() / y_true.size)


def nmi(y_true, y_pred) -> float:
    """Normalised mutual information (arithmetic mean normalisation, scikit-learn's default)."""
    y_true, y_pred = _pair(y_true, y_pred)
    return float(normalized_mutual_info_score(y_true, y_pred))


def ari(y_true, y_pred) -> float:
    """Adjusted Rand index."""
    y_true, y_pred = _pair(y_true, y_pred)
    return float(adjusted_rand_score(y_true, y_pred))


def pair_consistency(a, b) -> tuple[float, float]:
    """Share of item pairs (i < j) on which two clusterings agree (both together or both apart) and
    the share on which they disagree — the paper's Table 5 (TPN, FPN); the first is the Rand index.

    Items labelled -1 in either clustering are left out. Computed from the contingency table in
    O(n + k_a k_b), never over the n² pairs. Returns (agree, disagree); (1.0, 0.0) if < 2 items.
    """
    a, b = _pair(a, b)
    keep = (a != -1) & (b != -1)
    a, b = a[keep], b[keep]
    n = a.size
    if n < 2:
        return 1.0, 0.0
    table = contingency_matrix(a, b, sparse=True)
    together_both = _pairs(table.data).sum()
    together_a = _pairs(np.asarray(table.sum(axis=1)).ravel()).sum()
    together_b = _pairs(np.asarray(table.sum(axis=0)).ravel()).sum()
    total = _pairs(np.array([n]))[0]
    agree = total + 2 * together_both - together_a - together_b
    return float(agree / total), float(1 - agree / total)


def mape(y, y_hat) -> float:
    """Mean absolute percentage error (1/n) Σ |y − ŷ| / y over the items with y ≠ 0, as a fraction
    (0.16 = 16%). Raises if no item has a non-zero actual. See ``mape_with_count``."""
    value, _ = mape_with_count(y, y_hat)
    return value


def mape_with_count(y, y_hat) -> tuple[float, int]:
    """MAPE over non-zero actuals and the number of zero actuals left out."""
    y = np.asarray(y, dtype=np.float64)
    y_hat = np.asarray(y_hat, dtype=np.float64)
    if y.shape != y_hat.shape:
        raise ValueError(f"y and y_hat must have the same shape; got {y.shape} and {y_hat.shape}.")
    nonzero = y != 0
    if not nonzero.any():
        raise ValueError("MAPE is undefined: every actual value is zero.")
    err = np.abs(y[nonzero] - y_hat[nonzero]) / np.abs(y[nonzero])
    return float(err.mean()), int((~nonzero).sum())


def mean_std(values) -> tuple[float, float]:
    """Mean and population standard deviation of a sequence (NaN-free)."""
    arr = np.asarray(values, dtype=np.float64)
    return float(arr.mean()), float(arr.std())


def format_mean_std(values, digits: int = 3) -> str:
    """'0.812 ± 0.034' for a sequence of scores."""
    m, s = mean_std(values)
    return f"{m:.{digits}f} ± {s:.{digits}f}"


def _pairs(counts: np.ndarray) -> np.ndarray:
    counts = np.asarray(counts, dtype=np.float64)
    return counts * (counts - 1) / 2


def _pair(a, b) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(a).ravel()
    b = np.asarray(b).ravel()
    if a.shape != b.shape:
        raise ValueError(f"the two labelings differ in length: {a.size} and {b.size}.")
    if a.size == 0:
        raise ValueError("empty labeling.")
    return a, b
