"""The nightly's model stage: the model view, the fusion weights and the recommended source,
all chosen by backtest on the training window (adseg.selection), never on the evaluation
window. The pipeline calls :func:`choose_by_backtest` before fusing and :func:`fit_model_view`
for the full window."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from adseg.mixture import MixtureSegmentation, model_features
from adseg.selection import Backtest, column_weights, k_grid, select_model_k

log = logging.getLogger(__name__)

MODEL_SOURCE = "model"
"""The model view's source name (its base clustering's view name too)."""
N_BINS = 40
"""Equal-share bins of the pooled market prices."""
MAX_COUNT = 300.0
"""Evidence cap per advertiser, in samples (see adseg.mixture)."""
BACKTEST_FUSERS = ("rcc", "l2")
"""Fusers also run on the backtest (when the run runs them), so that they can be recommended."""


def backtest_split(train_start: dt.date, train_end: dt.date) -> tuple[dt.date, dt.date] | None:
    """(last day of the fitting part, first held-out day) of a training window: the last
    two-sevenths of its days (at least one) are held out. None for a one-day window."""
    days = (train_end - train_start).days + 1
    if days < 2:
        return None
    held = max(1, round(days * 2 / 7))
    first_held = train_end - dt.timedelta(days=held - 1)
    return first_held - dt.timedelta(days=1), first_held


def make_backtest(
    win_samples, cost_samples, train_delivery: pd.DataFrame, first_held: dt.date, ids, texts
) -> Backtest | None:
    """A :class:`Backtest` from the fitting part's samples and the training delivery split at
    ``first_held``; None when the held-out days have no delivery or the first part no sample."""
    held = train_delivery["date"] >= first_held
    if not held.any() or sum(len(s) for s in win_samples) == 0:
        return None
    return Backtest(
        list(win_samples),
        list(cost_samples),
        train_delivery[~held].reset_index(drop=True),
        train_delivery[held].reset_index(drop=True),
        np.asarray(ids, dtype=object),
        list(texts),
    )


def estimator(seed: int, n_components: int = 20) -> MixtureSegmentation:
    """The model view's estimator with the run's settings."""
    return MixtureSegmentation(n_components, max_count=MAX_COUNT, random_state=seed)


@dataclass
class Choices:
    """What the backtest chose: the model view's K (and the score of each candidate), the
    backtest's segmentations and scores by source, notes for the run's record."""

    k: int
    k_scores: dict[int, float] = field(default_factory=dict)
    fit_labels: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)


def choose_k(backtest: Backtest | None, n: int, requested: int | None, seed: int) -> Choices:
    """The model view's K: as requested (``--segments``), else by backtest over
    :func:`adseg.selection.k_grid`; without a backtest, the middle of the grid."""
    grid = [requested] if requested is not None else k_grid(n)
    if backtest is None:
        k = grid[len(grid) // 2]
        return Choices(
            k,
            notes=[
                f"no backtest (a one-day training window, or no sample or no delivery in one "
                f"of its parts): model K = {k}"
            ],
        )
    try:
        k, scores, fits = select_model_k(backtest, grid, estimator(seed), N_BINS)
    except ValueError as exc:  # no candidate scored (e.g. every held-out actual is zero)
        k = grid[len(grid) // 2]
        return Choices(k, notes=[f"backtest failed ({str(exc).rstrip('.')}): model K = {k}"])
    log.info("model view: K = %d by backtest (%s)", k, _scores_text(scores))
    return Choices(k, scores, fits[k].labels_)


def _scores_text(scores: dict[int, float]) -> str:
    return ", ".join(f"K={k}: {100 * v:.2f} %" for k, v in scores.items())


def fit_model_view(win_samples, descriptions, k: int, seed: int) -> tuple[np.ndarray, list[str]]:
    """(n,) model-view labels on the full training window, and notes (a fit that did not
    converge says so). Cost O(iterations · (N + n · K · bins)); nothing n × n."""
    views, _ = model_features(win_samples, descriptions, n_bins=N_BINS)
    fit = estimator(seed, k).fit(views)
    notes = []
    if not fit.converged_:
        notes.append(
            f"model view: EM did not converge in {fit.max_iter} iterations (K = {k}); "
            "the recommendation falls back to the primary fuser"
        )
    return fit.labels_, notes


def weights_from_backtest(
    columns: pd.DataFrame, bt_columns: pd.DataFrame, bt_scores: pd.Series
) -> np.ndarray:
    """Fusion weight of each of the run's base clusterings (``columns``' rows): from the
    backtest score of the backtest's clustering of the same view and parameter
    (:func:`adseg.selection.column_weights`); a clustering the backtest did not make gets the
    mean weight of those it did."""
    key = bt_columns["view"].astype(str) + "/" + bt_columns["parameter"].astype(str)
    scores = dict(zip(key, bt_scores.reindex(key).to_numpy(), strict=True))
    mine = columns["view"].astype(str) + "/" + columns["parameter"].astype(str)
    raw = np.array([scores.get(k, np.nan) for k in mine], dtype=np.float64)
    weights = column_weights(raw)
    missing = ~np.isfinite(raw)
    if missing.any():
        weights[missing] = weights[~missing].mean() if (~missing).any() else 1.0
    return weights
