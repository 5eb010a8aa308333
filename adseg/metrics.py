"""Scores: clustering accuracy (Hungarian), NMI, ARI, pair consistency, MAPE, mean ± std."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from sklearn.metrics.cluster import contingency_matrix


def clustering_accuracy(y_true, y_pred) -> float:
    """Share of items correctly labelled under the best one-to-one map of predicted clusters to
    classes (Hungarian algorithm on the contingency table; rectangular when the counts differ, the
    unmatched clusters count as wrong). Cost O(n + k³)."""
    y_true, y_pred = _pair(y_true, y_pred, ("y_true", "y_pred"))
    table = contingency_matrix(y_true, y_pred)
    rows, cols = linear_sum_assignment(table, maximize=True)
    return float(table[rows, cols].sum() / y_true.size)


def nmi(y_true, y_pred) -> float:
    """Normalised mutual information (arithmetic mean normalisation, scikit-learn's default)."""
    y_true, y_pred = _pair(y_true, y_pred, ("y_true", "y_pred"))
    return float(normalized_mutual_info_score(y_true, y_pred))


def ari(y_true, y_pred) -> float:
    """Adjusted Rand index."""
    y_true, y_pred = _pair(y_true, y_pred, ("y_true", "y_pred"))
    return float(adjusted_rand_score(y_true, y_pred))


def pair_consistency(a, b) -> tuple[float, float]:
    """Share of item pairs (i < j) on which two clusterings agree (both together or both apart) and
    the share on which they disagree — the paper's Table 5 (TPN, FPN); the first is the Rand index.

    Items labelled -1 in either clustering are left out. Computed from the contingency table in
    O(n + k_a k_b), never over the n² pairs. Returns (agree, disagree); (1.0, 0.0) if < 2 items.
    """
    a, b = _pair(a, b, ("a", "b"))
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
    """MAPE over non-zero actuals and the number of zero actuals left out.

    y, y_hat : array-likes of the same shape (any), finite. Every value must be finite: a NaN or
    infinite actual or forecast is an error (ValueError naming the argument and the first flat
    index), never a silent NaN or inf score — a caller with forecasts it could not make leaves
    those items out first (as ``adseg.forecast.score_forecasts`` does). Empty input and input
    whose actuals are all zero are errors too, each with its own message. Cost O(n).
    """
    y = _finite_array(y, "y")
    y_hat = _finite_array(y_hat, "y_hat")
    if y.shape != y_hat.shape:
        raise ValueError(f"y and y_hat must have the same shape; got {y.shape} and {y_hat.shape}.")
    if y.size == 0:
        raise ValueError("MAPE is undefined for empty input: y and y_hat have no values.")
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


def _finite_array(values, name: str) -> np.ndarray:
    """``values`` as float64 (any shape); ValueError naming ``name`` and the first flat index of a
    NaN or infinite value (a missing actual or forecast must be dropped by the caller, not scored
    as NaN or inf)."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be numeric: {exc}") from None
    bad = ~np.isfinite(arr)
    if bad.any():
        flat = np.flatnonzero(bad.ravel())
        raise ValueError(
            f"{name} has {flat.size} non-finite value(s) (NaN or inf), first at index {flat[0]}: "
            f"{float(arr.ravel()[flat[0]])}; leave out the items without a value before scoring."
        )
    return arr


def _pair(a, b, names: tuple[str, str] = ("a", "b")) -> tuple[np.ndarray, np.ndarray]:
    """Two labelings as 1-D arrays of equal, non-zero length. Labels may be any hashable values
    (ints, strings) of one kind, but not missing: a NaN/inf (float labels) or None/NaN (object
    labels) would otherwise be scored as a class of its own. A 2-D input is refused, as
    scikit-learn refuses it: a fuser's (n, m) label matrix was flattened and scored."""
    a, b = np.asarray(a), np.asarray(b)
    for arr, name in ((a, names[0]), (b, names[1])):
        if arr.ndim != 1:
            raise ValueError(f"{name} must be 1-D (one label per item); got shape {arr.shape}.")
    if a.shape != b.shape:
        raise ValueError(
            f"the two labelings differ in length: {names[0]} has {a.size}, {names[1]} {b.size}."
        )
    if a.size == 0:
        raise ValueError("empty labeling.")
    for arr, name in ((a, names[0]), (b, names[1])):
        if arr.dtype.kind in "fc":
            bad = ~np.isfinite(arr)
        elif arr.dtype.kind == "O":
            bad = np.asarray(pd.isna(arr), dtype=bool)
        else:
            continue  # integer, bool, string labels cannot be missing
        if bad.any():
            first = np.flatnonzero(bad)
            raise ValueError(
                f"{name} has {first.size} missing or non-finite label(s) (NaN, inf or None), "
                f"first at index {first[0]}; every item needs a label."
            )
        if arr.dtype.kind == "O":
            try:  # the metrics sort the labels: mixed kinds failed deep inside numpy
                np.unique(arr)
            except TypeError:
                kinds = sorted({type(v).__name__ for v in arr})
                raise TypeError(
                    f"{name} mixes labels that cannot be compared ({', '.join(kinds)}); use "
                    "labels of one kind."
                ) from None
    return a, b
