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

from adseg.mixture import MixtureSegmentation, delivery_log_likelihood, model_features
from adseg.selection import (
    Backtest,
    column_weights,
    k_grid,
    model_k_parts,
    parsimonious_choice,
    select_model_k,
)

log = logging.getLogger(__name__)

MODEL_SOURCE = "model"
"""The model view's source name (its base clustering's view name too)."""
N_BINS = 40
"""Equal-share bins of the pooled market prices."""
MAX_COUNT = 300.0
"""Evidence cap per advertiser, in samples (see adseg.mixture)."""
DELIVERY_CAPS = (0.0, 30.0, 100.0, 300.0)
"""Candidate caps, in bid requests, on each advertiser's delivery evidence (0: none); the
backtest chooses (see :func:`place`)."""
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
    delivery_cap: float = 0.0
    cap_scores: dict[float, float] = field(default_factory=dict)


def choose_k(
    backtest: Backtest | None, n: int, requested: int | None, seed: int, run_parts=None
) -> Choices:
    """The model view's K: as requested (``--segments``), else by backtest over
    :func:`adseg.selection.k_grid`; without a backtest, the middle of the grid. ``run_parts``:
    how the candidates are fitted (:func:`adseg.selection.select_model_k`)."""
    grid = candidate_ks(n, requested)
    if backtest is None:
        k = grid[len(grid) // 2]
        return Choices(
            k,
            notes=[
                f"no backtest (a one-day training window, or no sample or no delivery in one "
                f"of its parts): model K = {k}"
            ],
        )
    views, edges = backtest_features(backtest)
    try:
        k, scores, fits = select_model_k(
            backtest, grid, estimator(seed), N_BINS, views=views, run_parts=run_parts
        )
    except ValueError as exc:  # no candidate scored (e.g. every held-out actual is zero)
        k = grid[len(grid) // 2]
        return Choices(k, notes=[f"backtest failed ({str(exc).rstrip('.')}): model K = {k}"])
    log.info("model view: K = %d by backtest (%s)", k, _scores_text(scores))
    cap, cap_scores, labels = choose_delivery_cap(backtest, fits[k], views, edges)
    log.info("model view: delivery evidence capped at %g requests by backtest", cap)
    return Choices(k, scores, labels, delivery_cap=cap, cap_scores=cap_scores)


def candidate_ks(n: int, requested: int | None) -> list[int]:
    """The model view's candidate K: as requested, else :func:`adseg.selection.k_grid`."""
    return [requested] if requested is not None else k_grid(n)


def backtest_features(backtest: Backtest):
    """(views, edges) of the model view on the backtest's first part
    (:func:`adseg.mixture.model_features`)."""
    return model_features(backtest.win_samples, backtest.descriptions, n_bins=N_BINS)


def candidate_parts(backtest: Backtest, n: int, requested: int | None, seed: int) -> list:
    """The candidate fits that :func:`choose_k` gives its ``run_parts`` (a caller may start
    them early); [] without a backtest."""
    if backtest is None:
        return []
    views, _ = backtest_features(backtest)
    return model_k_parts(estimator(seed), candidate_ks(n, requested), views)


@dataclass
class Delivery:
    """Each advertiser's delivery over a window (advertiser order): bid requests and
    impressions summed over the days, and the median bid (eCPM); zeros without a row."""

    requests: np.ndarray
    wins: np.ndarray
    bids: np.ndarray

    @classmethod
    def of(cls, delivery: pd.DataFrame | None, ids) -> Delivery:
        """From delivery rows (advertiser_id, bid_requests, impressions, bid_ecpm). O(rows)."""
        index = pd.Index(np.asarray(ids, dtype=object))
        if delivery is None or len(delivery) == 0:
            zeros = np.zeros(len(index))
            return cls(zeros, zeros.copy(), zeros.copy())
        g = delivery.groupby("advertiser_id").agg(
            requests=("bid_requests", "sum"),
            wins=("impressions", "sum"),
            bids=("bid_ecpm", "median"),
        )
        g = g.reindex(index).fillna(0.0)
        return cls(*(g[c].to_numpy(dtype=np.float64) for c in ("requests", "wins", "bids")))


def place(fit: MixtureSegmentation, views, edges, top: float, delivery: Delivery, cap: float):
    """(n,) segments of the fitted model view with each advertiser's delivery as one more piece
    of evidence: the posterior from its samples and words times the binomial likelihood of its
    wins at its bid (:func:`adseg.mixture.delivery_log_likelihood`, capped at ``cap``
    requests). ``cap`` 0 gives the fit's own labels. Cost O(n · K)."""
    if cap <= 0:
        return fit.labels_
    extra = delivery_log_likelihood(
        fit.log_theta_[0], edges, top, delivery.requests, delivery.wins, delivery.bids, cap
    )
    return np.argmax(fit.predict_log_proba(views) + extra, axis=1).astype(np.int64)


def _top(win_samples) -> float:
    """The highest market price of the window (the last price bin's upper end)."""
    return max((float(np.max(s)) for s in win_samples if np.size(s)), default=0.0)


def choose_delivery_cap(backtest: Backtest, fit: MixtureSegmentation, views, edges):
    """(cap, {cap: score}, labels at that cap): the backtest's fit (on ``views``, binned at
    ``edges``) placed with the first part's delivery at each of :data:`DELIVERY_CAPS`, scored
    on the held-out days; the smallest cap within 1 % of the best
    (:func:`adseg.selection.parsimonious_choice`). Cost: one forecast per candidate."""
    delivery = Delivery.of(backtest.fit_delivery, backtest.advertiser_ids)
    top = _top(backtest.win_samples)
    labels = {c: place(fit, views, edges, top, delivery, c) for c in DELIVERY_CAPS}
    table = backtest.score({f"cap {c:g}": lab for c, lab in labels.items()})
    scores = {c: float(table.loc[f"cap {c:g}", "score"]) for c in DELIVERY_CAPS}
    cap = parsimonious_choice(scores)
    return cap, scores, labels[cap]


def _scores_text(scores: dict[int, float]) -> str:
    return ", ".join(f"K={k}: {100 * v:.2f} %" for k, v in scores.items())


def fit_model_view(
    win_samples, descriptions, k: int, seed: int, delivery: Delivery | None = None, cap=0.0
) -> tuple[np.ndarray, list[str]]:
    """(n,) model-view labels on the full training window, placed with the window's
    ``delivery`` at ``cap`` (:func:`place`), and notes (a fit that did not converge says so).
    Cost O(iterations · (N + n · K · bins)); nothing n × n."""
    views, edges = model_features(win_samples, descriptions, n_bins=N_BINS)
    fit = estimator(seed, k).fit(views)
    labels = fit.labels_
    if delivery is not None:
        labels = place(fit, views, edges, _top(win_samples), delivery, cap)
    notes = []
    if not fit.converged_:
        notes.append(
            f"model view: EM did not converge in {fit.max_iter} iterations (K = {k}); "
            "the recommendation falls back to the primary fuser"
        )
    return labels, notes


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
