"""Supply (daily bid requests) forecasts: vectorised simple exponential smoothing, the mean,
the seasonal naive; and the forecast options a run records."""

from __future__ import annotations

import math
import warnings
from typing import Literal

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from adseg.checks import check_integer
from adseg.forecast.frames import _as_ids, _check_delivery, _dates

# --------------------------------------------------------------------------------------------
# Supply: vectorised simple exponential smoothing
# --------------------------------------------------------------------------------------------


def _ses_pass(y: np.ndarray, alpha: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run SES over (n, T) ``y`` (NaN = missing day, level carried) for (n, A) ``alpha``; the
    level starts at each row's first observation. Returns (SSE of one-step errors, final level),
    both (n, A)."""
    n, t_len = y.shape
    level = np.broadcast_to(first[:, None], alpha.shape).astype(np.float64).copy()
    sse = np.zeros(alpha.shape)
    for t in range(t_len):  # loop over days only
        yt = y[:, t : t + 1]
        obs = np.isfinite(yt)
        err = np.where(obs, yt - level, 0.0)
        sse += err * err
        level += alpha * err
    return sse, level


def fit_ses(y: ArrayLike, *, n_grid: int = 51, n_refine: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares simple exponential smoothing of many series at once.

    y : (n, T) float, one series per row, NaN = no observation (the level is carried over).
    The initial level is the row's first observation (statsmodels' ``initialization_method=
    "known", initial_level=y[0]``); α ∈ [0, 1] minimises the sum of squared one-step-ahead errors:
    a grid of ``n_grid`` values, then golden-section search in the bracket around the best one.
    Returns (alpha (n,), level (n,)): the flat h-step forecast is ``level``; NaN for all-NaN rows.
    Where the SSE does not depend on α (one or two observations, or a series that only moves on
    its last day) α is 0.5, the middle of the tied interval (two days: their mean).
    ``n_grid`` ≥ 2 (the grid includes 0 and 1), ``n_refine`` ≥ 0, T ≥ 1.
    Cost O(n T (n_grid + 2 n_refine)) time, O(n n_grid) memory.
    """
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 2:
        raise ValueError(f"y must be 2-D (n_series, n_days); got shape {y.shape}.")
    if y.shape[1] == 0:
        raise ValueError(f"y has no days (shape {y.shape}): at least one column is needed.")
    check_integer("n_grid", n_grid, 2)
    check_integer("n_refine", n_refine, 0)
    n_grid, n_refine = int(n_grid), int(n_refine)
    n = y.shape[0]
    has, first = _first_observations(y)
    grid = np.linspace(0.0, 1.0, n_grid)
    sse, _ = _ses_pass(y, np.broadcast_to(grid, (n, n_grid)), first)
    k = np.argmin(sse, axis=1)
    step = 1.0 / (n_grid - 1)
    lo = np.clip(grid[k] - step, 0.0, 1.0)
    hi = np.clip(grid[k] + step, 0.0, 1.0)
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(n_refine):  # golden-section iterations, vectorised over series
        c = hi - ratio * (hi - lo)
        d = lo + ratio * (hi - lo)
        s, _ = _ses_pass(y, np.stack([c, d], axis=1), first)
        left = s[:, 0] <= s[:, 1]
        hi = np.where(left, d, hi)
        lo = np.where(left, lo, c)
    alpha = (lo + hi) / 2
    # the bracket ends (0 and 1 included) may beat the interior optimum of a non-convex SSE
    cand = np.stack([alpha, grid[k]], axis=1)
    s, lev = _ses_pass(y, cand, first)
    pick = np.argmin(s, axis=1)
    alpha = cand[np.arange(n), pick]
    level = lev[np.arange(n), pick]
    alpha, level = _midpoint_where_unidentified(y, first, alpha, level, sse)
    return np.where(has, alpha, np.nan), np.where(has, level, np.nan)


def _first_observations(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(has, first), both (n,): whether each row of (n, T) ``y`` has an observation (not NaN),
    and its first one (0 for a row with none): SES's initial level."""
    obs = np.isfinite(y)
    has = obs.any(axis=1)
    return has, np.where(has, y[np.arange(y.shape[0]), np.argmax(obs, axis=1)], 0.0)


def _midpoint_where_unidentified(
    y: np.ndarray, first: np.ndarray, alpha: np.ndarray, level: np.ndarray, grid_sse: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """α = 0.5 (and its level) for the rows whose one-step SSE is the same for every α.

    That happens when only a series' last observation differs from its first (one or two
    training days, or a flat series that moves on its last day): the last observation enters no
    one-step error, so the data say nothing about α and any optimiser returns an arbitrary one
    (the grid search α = 0, i.e. the first day, ignoring the last). 0.5 is the middle of the
    tied interval; on two days its level is their mean. ``grid_sse`` (n, G): the SSE on a grid
    of α spanning [0, 1]. Cost O(n T)."""
    spread = grid_sse.max(axis=1) - grid_sse.min(axis=1)
    flat = spread <= 1e-9 * grid_sse.max(axis=1)
    if not flat.any():
        return alpha, level
    _, mid_level = _ses_pass(y[flat], np.full((int(flat.sum()), 1), 0.5), first[flat])
    alpha, level = alpha.copy(), level.copy()
    alpha[flat], level[flat] = 0.5, mid_level[:, 0]
    return alpha, level


def _ses_statsmodels(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The statsmodels path: one SimpleExpSmoothing fit per series (missing days dropped)."""
    from statsmodels.tsa.holtwinters import SimpleExpSmoothing

    alpha = np.full(y.shape[0], np.nan)
    level = np.full(y.shape[0], np.nan)
    for i, row in enumerate(y):  # statsmodels fits one series at a time
        r = row[np.isfinite(row)]
        if r.size < 2:
            continue  # α is unidentified: set below
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = SimpleExpSmoothing(r, initialization_method="known", initial_level=r[0]).fit()
        alpha[i] = fit.params["smoothing_level"]
        level[i] = float(fit.forecast(1)[0])
    has, first = _first_observations(y)
    n_grid = 11
    grid_sse, _ = _ses_pass(
        y, np.broadcast_to(np.linspace(0, 1, n_grid), (y.shape[0], n_grid)), first
    )
    alpha, level = _midpoint_where_unidentified(y, first, alpha, level, grid_sse)
    return np.where(has, alpha, np.nan), np.where(has, level, np.nan)


SUPPLY_MODELS = ("ses", "mean", "seasonal_naive")

FORECAST_CHOICES = {
    "supply": ("actual", "forecast", "both"),
    "supply_model": SUPPLY_MODELS,
    "supply_engine": ("numpy", "statsmodels"),
    "spend_price": ("cost", "market"),
}
""":func:`evaluate_sources`' choice-valued options and their values (the pipeline's
configuration and the CLI's ``--supply*`` / ``--spend-price`` options take them from here)."""


def _daily_matrix(df: pd.DataFrame, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n, T) daily bid requests over the distinct days of ``df`` (NaN = no row), and the days."""
    idx = pd.Index(ids).get_indexer(df["advertiser_id"])
    days, day_idx = np.unique(_dates(df["date"], "train_delivery"), return_inverse=True)
    day_idx = day_idx.ravel()
    shape = (ids.size, max(days.size, 1))
    flat = np.zeros(shape[0] * shape[1])
    # duplicate (advertiser, day) rows are summed
    np.add.at(flat, idx * shape[1] + day_idx, df["bid_requests"].to_numpy(np.float64))
    seen = np.zeros(flat.size, dtype=bool)
    seen[idx * shape[1] + day_idx] = True
    return np.where(seen, flat, np.nan).reshape(shape), days


def forecast_supply(
    train_delivery: pd.DataFrame,
    advertiser_ids: ArrayLike,
    *,
    engine: Literal["numpy", "statsmodels"] = "numpy",
) -> pd.DataFrame:
    """Per-advertiser daily-supply forecasts from the training window's bid requests.

    The training days are the distinct dates of ``train_delivery``; a day without a row for an
    advertiser is missing (not zero). Returns one row per ``advertiser_ids`` entry: advertiser_id,
    alpha and level (SES smoothing parameter and flat forecast of bid requests per day), mean
    (the training days' mean), n_days; NaN where the advertiser has no training delivery.
    ``engine`` "numpy" (:func:`fit_ses`, all advertisers at once) or "statsmodels" (one
    SimpleExpSmoothing fit per advertiser, ~4 ms each).
    """
    ids = _as_ids(advertiser_ids)
    df = _check_delivery(train_delivery, "train_delivery", ids, need=("bid_requests",))
    y, _ = _daily_matrix(df, ids)
    if engine == "numpy":
        alpha, level = fit_ses(y)
    elif engine == "statsmodels":
        alpha, level = _ses_statsmodels(y)
    else:
        raise ValueError(f"engine must be 'numpy' or 'statsmodels'; got {engine!r}.")
    n_days = np.isfinite(y).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n_days > 0, np.nansum(y, axis=1) / n_days, np.nan)
    return pd.DataFrame(
        {"advertiser_id": ids, "alpha": alpha, "level": level, "mean": mean, "n_days": n_days}
    )


def supply_for_rows(
    train_delivery: pd.DataFrame,
    advertiser_ids: ArrayLike,
    row_adv: ArrayLike,
    row_dates: ArrayLike,
    *,
    model: Literal["ses", "mean", "seasonal_naive"] = "ses",
    engine: Literal["numpy", "statsmodels"] = "numpy",
) -> tuple[np.ndarray, pd.DataFrame]:
    """Forecast bid requests for evaluation rows (advertiser index ``row_adv``, day
    ``row_dates``), (R,), from the training window alone.

    model : "ses" — the SES level (flat; the DESIGN's exponential-smoothing forecast);
        "mean" — the training days' mean (flat);
        "seasonal_naive" — the advertiser's latest training value on the same weekday, else its
        mean (weekly supply profiles; needs no fitted parameter).
    Returns (supply per row, NaN where the advertiser has no training delivery; the frame of
    :func:`forecast_supply`).
    """
    if model not in SUPPLY_MODELS:
        raise ValueError(f"supply_model must be one of {SUPPLY_MODELS}; got {model!r}.")
    ids = _as_ids(advertiser_ids)
    frame = forecast_supply(train_delivery, ids, engine=engine)
    row_adv = np.asarray(row_adv, dtype=np.int64)
    if model == "ses":
        return frame["level"].to_numpy()[row_adv], frame
    mean = frame["mean"].to_numpy()
    if model == "mean":
        return mean[row_adv], frame
    y, days = _daily_matrix(train_delivery, ids)
    weekday = (days.astype(np.int64) + 3) % 7  # 1970-01-01 was a Thursday (3)
    table = np.full((ids.size, 7), np.nan)
    for t in range(days.size):  # loop over training days: later days overwrite earlier ones
        ok = np.isfinite(y[:, t])
        table[ok, weekday[t]] = y[ok, t]
    row_days = np.asarray(row_dates).astype("datetime64[D]")
    if np.isnat(row_days).any():
        bad = np.flatnonzero(np.isnat(row_days))
        raise ValueError(
            f"row_dates has {bad.size} missing date(s) (NaT), first at index {bad[0]}."
        )
    row_wd = (row_days.astype(np.int64) + 3) % 7
    out = table[row_adv, row_wd]
    return np.where(np.isfinite(out), out, mean[row_adv]), frame
