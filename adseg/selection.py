"""Model selection by backtest, inside the training window only.

The training window is split in time: segmentations are learned from the samples of its first
part and each is scored by forecasting the delivery of its last days (actual supply and bids of
those days, the run's own forecasting). Those scores choose the model view's number of segments,
the fusers' per-clustering weights and the recommended source. The evaluation window is never
read here. Also: MAPE by advertiser size band.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.base import clone

from adseg.forecast import evaluate_sources
from adseg.metrics import mape_with_count
from adseg.mixture import MixtureSegmentation, model_features

SIZE_BANDS: tuple[tuple[int, float, str], ...] = (
    (0, 0, "0"),
    (1, 4, "1-4"),
    (5, 19, "5-19"),
    (20, 99, "20-99"),
    (100, math.inf, ">=100"),
)
"""(lowest, highest, name) training win-rate samples of each advertiser size band."""

DEFAULT_K_GRID = (10, 15, 20, 30, 40, 60, 80)
"""Candidate numbers of segments for the model view (those above n / 2 are dropped)."""


def size_band(counts: Sequence[int] | np.ndarray) -> np.ndarray:
    """(n,) band name of each advertiser's training sample count (see SIZE_BANDS)."""
    counts = np.asarray(counts)
    out = np.empty(counts.shape, dtype=object)
    for lo, hi, name in SIZE_BANDS:
        out[(counts >= lo) & (counts <= hi)] = name
    return out


def mape_by_band(forecasts: pd.DataFrame, advertiser_ids, counts) -> pd.DataFrame:
    """MAPE of impressions and spend per (source, method, supply_mode, band): columns source,
    method, supply_mode, band, n_advertisers, impressions_mape, spend_mape (fractions; NaN when
    a band has no advertiser with a non-zero actual). ``forecasts`` as in ForecastResult;
    ``counts`` (n,) training win-rate samples of ``advertiser_ids``. O(rows)."""
    band = pd.Series(size_band(counts), index=pd.Index(advertiser_ids))
    frame = forecasts.assign(band=forecasts["advertiser_id"].map(band).to_numpy())
    ok = np.isfinite(frame["impressions_forecast"]) & np.isfinite(frame["spend_forecast"])
    rows = []
    keys = ["source", "method", "supply_mode", "band"]
    for key, g in frame[ok].groupby(keys, sort=False):  # loop over groups, not advertisers
        row = dict(zip(keys, key, strict=True), n_advertisers=len(g))
        for what in ("impressions", "spend"):
            y = g[f"{what}_actual"].to_numpy(np.float64)
            row[f"{what}_mape"] = (
                mape_with_count(y, g[f"{what}_forecast"].to_numpy(np.float64))[0]
                if np.any(y != 0)
                else math.nan
            )
        rows.append(row)
    order = {name: i for i, (_, _, name) in enumerate(SIZE_BANDS)}
    out = pd.DataFrame(rows, columns=[*keys, "n_advertisers", "impressions_mape", "spend_mape"])
    return out.sort_values(["band"], key=lambda b: b.map(order), kind="stable").reset_index(
        drop=True
    )


@dataclass
class Backtest:
    """A training window split in time: what segmentations learn from, and what scores them.

    win_samples, cost_samples : n arrays each, the first part's samples (advertiser order).
    fit_delivery : the first part's delivery rows (training bids for κ); may be empty.
    holdout_delivery : the last days' delivery rows (advertiser_id, date, bid_requests,
        bid_ecpm, impressions, spend), the backtest's "evaluation".
    advertiser_ids, descriptions : (n,) as in the run.
    spend_price : the run's spend forecast price (``"cost"`` or ``"market"``), so the backtest
        scores spend as the run's report does.
    """

    win_samples: list[np.ndarray]
    cost_samples: list[np.ndarray]
    fit_delivery: pd.DataFrame
    holdout_delivery: pd.DataFrame
    advertiser_ids: np.ndarray
    descriptions: list
    spend_price: str = "cost"

    def score(self, segmentations: Mapping[str, np.ndarray], random_state=0) -> pd.DataFrame:
        """Per source: impressions_mape, spend_mape for methods segment and blended (actual
        supply), and ``score`` = the mean of the blended pair: one row per source."""
        result = evaluate_sources(
            self.win_samples,
            self.cost_samples,
            dict(segmentations),
            self.fit_delivery if len(self.fit_delivery) else None,
            self.holdout_delivery,
            self.advertiser_ids,
            supply="actual",
            spend_price=self.spend_price,
            random_state=random_state,
        )
        # dropna=False: a source whose held-out actuals are all zero scores NaN, not a KeyError
        wide = result.mape.pivot_table(
            index="source",
            columns="method",
            values=["impressions_mape", "spend_mape"],
            dropna=False,
        )
        wide.columns = [f"{what}_{method}" for what, method in wide.columns]
        wide["score"] = (wide["impressions_mape_blended"] + wide["spend_mape_blended"]) / 2
        return wide.reindex([s for s in result.mape["source"].unique()])


def parsimonious_choice(scores: Mapping[int, float], tolerance: float = 0.01) -> int:
    """The smallest key whose score (lower is better) is within ``tolerance`` (relative) of the
    best: more segments must earn their keep. NaN scores never win."""
    finite = {k: v for k, v in scores.items() if np.isfinite(v)}
    if not finite:
        raise ValueError("no candidate could be scored.")
    best = min(finite.values())
    return min(k for k, v in finite.items() if v <= best * (1 + tolerance))


def k_grid(n_items: int, grid: Sequence[int] = DEFAULT_K_GRID) -> list[int]:
    """Candidates of ``grid`` that leave about two items per segment (at least one: 1)."""
    keep = [k for k in grid if k <= n_items // 2]
    return keep or [max(1, min(n_items, grid[0]))]


def select_model_k(
    backtest: Backtest,
    candidates: Sequence[int],
    estimator: MixtureSegmentation,
    n_bins: int,
    tolerance: float = 0.01,
    views=None,
    run_parts=None,
) -> tuple[int, dict[int, float], dict[int, MixtureSegmentation]]:
    """The model view's K by backtest: fit ``estimator`` with each candidate K on the first
    part's evidence (``views``, else :func:`adseg.mixture.model_features` of it) and score its
    segments on the held-out days (:meth:`Backtest.score`); :func:`parsimonious_choice` picks.
    Returns (K, {K: score}, {K: fitted estimator}). Cost: one mixture fit and one forecast per
    candidate. ``run_parts``: how the fits are run (see
    ``adseg.views.build_base_clusterings``; None: here, one after the other)."""
    if views is None:
        views, _ = model_features(backtest.win_samples, backtest.descriptions, n_bins=n_bins)
    tasks = model_k_parts(estimator, candidates, views)
    done = [fn(*args) for _, fn, args in tasks] if run_parts is None else run_parts(tasks)
    fits = dict(zip((int(k) for k in candidates), done, strict=True))
    table = backtest.score({f"model_k{k}": f.labels_ for k, f in fits.items()})
    scores = {k: float(table.loc[f"model_k{k}", "score"]) for k in fits}
    return parsimonious_choice(scores, tolerance), scores, fits


def model_k_parts(estimator: MixtureSegmentation, candidates: Sequence[int], views) -> list:
    """The candidate fits of :func:`select_model_k` as (name, function, arguments): what its
    ``run_parts`` is given (a caller may start them early)."""
    return [(f"K={k}", _fit_with_k, (estimator, int(k), views)) for k in candidates]


def _fit_with_k(estimator: MixtureSegmentation, k: int, views) -> MixtureSegmentation:
    """A clone of ``estimator`` with ``k`` components, fitted on ``views``."""
    return clone(estimator).set_params(n_components=k).fit(views)


def column_weights(scores: Sequence[float], power: float = 4.0) -> np.ndarray:
    """Per-clustering fusion weights from backtest scores (lower is better): (s_min / s_j)^power,
    0 for a clustering that could not be scored. A clustering twice as bad as the best weighs
    1/16 of it."""
    s = np.asarray(scores, dtype=np.float64)
    ok = np.isfinite(s) & (s >= 0)
    out = np.zeros(s.shape)
    if ok.any() and s[ok].min() == 0:  # a perfect clustering: it alone counts
        out[ok] = (s[ok] == 0).astype(np.float64)
    elif ok.any():
        out[ok] = (s[ok].min() / s[ok]) ** power
    return out


def recommend(scores: pd.DataFrame) -> tuple[str, str]:
    """(source, reason) of the lowest backtest score (:meth:`Backtest.score`'s frame)."""
    ranked = scores["score"].dropna().sort_values(kind="stable")
    if ranked.empty:
        raise ValueError("no source could be scored on the backtest.")
    best = str(ranked.index[0])
    runner = f"; next {ranked.index[1]} {100 * ranked.iloc[1]:.1f} %" if ranked.size > 1 else ""
    reason = (
        f"lowest backtest MAPE (mean of blended impressions and spend on the training window's "
        f"last days, segments learned before them): {best} {100 * ranked.iloc[0]:.1f} %{runner}"
    )
    return best, reason
