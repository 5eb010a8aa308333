"""Delivery frames as the forecasting takes them: checked columns, ids and dates."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

DELIVERY_COLUMNS = ("advertiser_id", "date", "bid_requests", "bid_ecpm", "impressions", "spend")


def _dates(values: pd.Series, name: str) -> np.ndarray:
    """Calendar days (datetime64[D]) of a date column (strings, dates or timestamps).

    A missing (None, NaN, NaT, "") or unparseable value is a ValueError naming the frame
    (``name``), the column and the first offending rows, counted from 1 (the first row of the
    frame is row 1) — a NaT would otherwise sort after every day and pass for the latest one.
    """
    try:
        d = pd.to_datetime(values)
    except (ValueError, TypeError) as exc:
        _raise_bad_dates(values, name, reason=str(exc).splitlines()[0])
        raise ValueError(f"{name} column 'date' has values that are not dates: {exc}") from exc
    if d.isna().any():
        _raise_bad_dates(values, name, missing=np.asarray(d.isna()))
    if getattr(d.dt, "tz", None) is not None:
        d = d.dt.tz_localize(None)
    return d.to_numpy().astype("datetime64[D]")


def _raise_bad_dates(
    values: pd.Series, name: str, *, missing: np.ndarray | None = None, reason: str = ""
) -> None:
    """Raise the ValueError of :func:`_dates` for the rows that are missing or do not parse on
    their own (found by a coercing parse when the strict one failed as a whole); return quietly
    if there are none (the caller then reports the parser's own error)."""
    if missing is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                missing = np.asarray(pd.to_datetime(values, errors="coerce", utc=True).isna())
            except (ValueError, TypeError):
                return
    rows = np.flatnonzero(missing)
    if rows.size == 0:
        return
    first = ", ".join(str(r + 1) for r in rows[:5])
    example = values.iloc[rows[0]]
    raise ValueError(
        f"{name} column 'date' has {rows.size} missing or unparseable value(s), in row(s) "
        f"{first}{', …' if rows.size > 5 else ''} (rows counted from 1); row {rows[0] + 1} is "
        f"{example!r}{f' ({reason})' if reason else ''}."
    )


# --------------------------------------------------------------------------------------------
# Delivery frames
# --------------------------------------------------------------------------------------------


def _as_ids(advertiser_ids: ArrayLike) -> np.ndarray:
    ids = np.asarray(advertiser_ids)
    if ids.ndim != 1:
        raise ValueError(f"advertiser_ids must be 1-D; got shape {ids.shape}.")
    if pd.Index(ids).has_duplicates:
        dup = pd.Index(ids)[pd.Index(ids).duplicated()][:3].tolist()
        raise ValueError(f"advertiser_ids has duplicates, e.g. {dup}.")
    return ids


def _check_delivery(df: pd.DataFrame, name: str, ids: np.ndarray, need=()) -> pd.DataFrame:
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"{name} must be a pandas DataFrame; got {type(df).__name__}.")
    cols = ("advertiser_id", "date", *need)
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{name} lacks column(s) {missing}; has {list(df.columns)}.")
    unknown = ~df["advertiser_id"].isin(ids)
    if unknown.any():
        ex = df.loc[unknown, "advertiser_id"].unique()[:3].tolist()
        raise ValueError(
            f"{name} has {int(unknown.sum())} row(s) of advertisers not in advertiser_ids, "
            f"e.g. {ex}."
        )
    _dates(df["date"], name)  # missing or unparseable dates are an error naming the rows
    for c in need:
        v = pd.to_numeric(df[c], errors="coerce").to_numpy(np.float64)
        bad = ~np.isfinite(v) | (v < 0)
        if bad.any():
            row = int(np.nonzero(bad)[0][0])
            raise ValueError(
                f"{name} column {c!r} must be finite and >= 0; row {row + 1} (rows counted from "
                f"1) has {df[c].iloc[row]!r}."
            )
    return df
