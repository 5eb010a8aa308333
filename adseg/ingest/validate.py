"""Validation of each table's frame (:func:`validate_advertisers`, :func:`validate_auctions`,
:func:`validate_delivery`): the header, ids, text, parsed values (``values``) and duplicate keys.
Each returns the typed frame (money in micros) and every problem found; rows are taken by
position, whatever index the frame has."""

from __future__ import annotations

import numpy as np
import pandas as pd

from adseg.checks import header_columns
from adseg.ingest.batch import COLUMNS, KEYS, Problem, _rows_problem
from adseg.ingest.values import (
    _DATE_RANGE_RULE,
    _boolean,
    _count,
    _dates,
    _outside_date_range,
    _price,
    _text,
    _trimmed,
)

MAX_ID_LENGTH = 64
BOM = "\ufeff"
MAX_NAME_LENGTH = 512


def validate_advertisers(frame: pd.DataFrame, file: str) -> tuple[pd.DataFrame | None, list]:
    problems = _check_columns(frame, "advertisers", file)
    if problems:
        return None, problems
    frame = frame.reset_index(drop=True)
    problems = _repeated_header(frame, "advertisers", file)
    if problems:  # every other rule would fail on those rows too: this one says why
        return None, problems  # rows by position, whatever index the caller's has
    out = _frame(
        {
            "advertiser_id": _text(frame["advertiser_id"]),
            "name": _text(frame["name"]),
            "description": _text(frame["description"]),
        }
    )
    problems += _check_id(out["advertiser_id"], "advertiser_id", file)
    problems += _check_text(out["name"], "name", file) + _check_text(
        out["description"], "description", file
    )
    problems += _rows_problem(file, (out["name"].str.len() == 0).to_numpy(), "name is empty")
    problems += _rows_problem(
        file,
        (out["name"].str.len() > MAX_NAME_LENGTH).to_numpy(),
        f"name longer than {MAX_NAME_LENGTH} characters",
    )
    problems += _check_duplicates(out, "advertisers", file, _id_ok(out["advertiser_id"]))
    return out, problems


def validate_auctions(frame: pd.DataFrame, file: str) -> tuple[pd.DataFrame | None, list]:
    problems = _check_columns(frame, "auctions", file)
    if problems:
        return None, problems
    frame = frame.reset_index(drop=True)
    problems = _repeated_header(frame, "auctions", file)
    if problems:  # every other rule would fail on those rows too: this one says why
        return None, problems
    ids = _text(frame["auction_id"])
    adv = _text(frame["advertiser_id"])
    problems += _check_id(ids, "auction_id", file)
    problems += _check_id(adv, "advertiser_id", file)
    ts = pd.to_datetime(_trimmed(frame["ts"]), utc=True, errors="coerce", format="ISO8601")
    problems += _rows_problem(file, ts.isna().to_numpy(), "ts is not an ISO-8601 timestamp")
    problems += _rows_problem(file, _outside_date_range(ts), _DATE_RANGE_RULE.format("ts"))
    bid, p = _price(frame["bid_ecpm"], "bid_ecpm", file)
    problems += p
    market, p = _price(frame["market_price_ecpm"], "market_price_ecpm", file)
    problems += p
    won, p = _boolean(frame["won"], "won", file)
    problems += p
    paid_column = frame["paid_ecpm"]
    paid_text = _text(paid_column)
    paid_present = (paid_text.str.len() > 0).to_numpy() & ~paid_column.isna().to_numpy()
    # an absent price is 0 of the column's own kind, so a numeric column stays numeric
    absent = 0 if pd.api.types.is_numeric_dtype(paid_column.dtype) else "0"
    paid, p = _price(paid_column.where(paid_present, absent), "paid_ecpm", file)
    problems += p
    won_known = ~np.isnan(won)
    problems += _rows_problem(
        file, won_known & (won == 1) & ~paid_present, "paid_ecpm is empty on a won auction"
    )
    problems += _rows_problem(
        file, won_known & (won == 0) & paid_present, "paid_ecpm is given on a lost auction"
    )
    out = _frame(
        {
            "auction_id": ids,
            "advertiser_id": adv,
            "ts": ts,
            "bid_micros": bid,
            "market_price_micros": market,
            "won": won == 1,
            "paid_micros": pd.arrays.IntegerArray(paid, ~paid_present),
        }
    )
    problems += _check_duplicates(out, "auctions", file, _id_ok(ids))
    return out, problems


def validate_delivery(frame: pd.DataFrame, file: str) -> tuple[pd.DataFrame | None, list]:
    problems = _check_columns(frame, "delivery", file)
    if problems:
        return None, problems
    frame = frame.reset_index(drop=True)
    problems = _repeated_header(frame, "delivery", file)
    if problems:  # every other rule would fail on those rows too: this one says why
        return None, problems
    adv = _text(frame["advertiser_id"])
    problems += _check_id(adv, "advertiser_id", file)
    dates, p = _dates(frame["date"], "date", file)
    problems += p
    problems += _rows_problem(file, _outside_date_range(dates), _DATE_RANGE_RULE.format("date"))
    requests, requests_ok, p = _count(frame["bid_requests"], "bid_requests", file)
    problems += p
    impressions, impressions_ok, p = _count(frame["impressions"], "impressions", file)
    problems += p
    bid, p = _price(frame["bid_ecpm"], "bid_ecpm", file)
    problems += p
    spend, p = _price(frame["spend"], "spend", file)
    problems += p
    both = requests_ok & impressions_ok
    problems += _rows_problem(
        file, both & (impressions > requests), "impressions exceed bid_requests"
    )
    out = _frame(
        {
            "advertiser_id": adv,
            "date": dates.dt.date,
            "bid_requests": requests,
            "bid_micros": bid,
            "impressions": impressions,
            "spend_micros": spend,
        }
    )
    valid_key = _id_ok(adv) & dates.notna().to_numpy()
    problems += _check_duplicates(out, "delivery", file, valid_key)
    return out, problems


def _frame(columns: dict[str, object]) -> pd.DataFrame:
    """A frame from columns taken by position: a Series gives up its index first, so that one
    whose labels differ from the others' (or repeat) can never be aligned by label into the
    wrong rows."""
    return pd.DataFrame(
        {name: (c.array if isinstance(c, pd.Series) else c) for name, c in columns.items()}
    )


def _check_columns(frame: pd.DataFrame, table: str, file: str) -> list[Problem]:
    """The header's problems: required columns missing, and required columns named twice
    (which of the two is meant cannot be told), both said: a column renamed by mistake into
    another's name is both."""
    missing, repeated = header_columns(list(frame.columns), COLUMNS[table])
    problems = []
    if missing:
        problems.append(Problem(file, f"missing required column(s): {', '.join(missing)}"))
    if repeated:
        problems.append(
            Problem(file, f"column(s) named twice in the header: {', '.join(repeated)}")
        )
    return problems


def _repeated_header(frame: pd.DataFrame, table: str, file: str) -> list[Problem]:
    """Rows that repeat the header (every required cell a required column's name, blanks and a
    byte-order mark aside, in any order), as two exports joined with ``cat`` give: one problem
    for them, rather than a phantom advertiser named "name" or one failed rule per cell. Cost:
    one pass over the first column (~0.04 s per million rows of Arrow text, ~0.15 s of Python
    strings); the other columns are read only on the rows that pass it."""
    names = COLUMNS[table]
    first = frame[names[0]]
    if not (pd.api.types.is_object_dtype(first) or pd.api.types.is_string_dtype(first)):
        return []  # a typed (Parquet) column holds no header
    rows = np.flatnonzero(_header_cell(first).isin(names).to_numpy(bool, na_value=False))
    repeat = np.ones(rows.size, dtype=bool)
    for column in names[1:]:  # loop over the other columns, on the candidate rows only
        repeat &= _header_cell(_text(frame[column].iloc[rows])).isin(names).to_numpy()
    mask = np.zeros(len(frame), dtype=bool)
    mask[rows[repeat]] = True
    return _rows_problem(
        file, mask, "repeats the header row (files joined with cat? keep only the first header)"
    )


def _header_cell(cells: pd.Series) -> pd.Series:
    """Text cells as a header name would read: blanks and a byte-order mark removed."""
    return cells.astype(str).str.strip().str.lstrip(BOM).str.strip()


def _id_lengths(ids: pd.Series) -> np.ndarray:
    return ids.astype(str).str.len().to_numpy()


def _id_ok(ids: pd.Series) -> np.ndarray:
    """(n,) bool: ids that pass _check_id (present, not too long, no NUL)."""
    lengths = _id_lengths(ids)
    return (lengths > 0) & (lengths <= MAX_ID_LENGTH) & ~_has_nul(ids)


def _check_id(ids: pd.Series, column: str, file: str) -> list[Problem]:
    lengths = _id_lengths(ids)
    return (
        _rows_problem(file, lengths == 0, f"{column} is empty")
        + _rows_problem(
            file, lengths > MAX_ID_LENGTH, f"{column} longer than {MAX_ID_LENGTH} characters"
        )
        + _check_text(ids, column, file)
    )


def _check_text(values: pd.Series, column: str, file: str) -> list[Problem]:
    """Rows whose text holds a NUL character, which PostgreSQL text cannot store (its ingest
    failed with a driver traceback) and SQLite would keep where no other tool reads it right."""
    return _rows_problem(file, _has_nul(values), f"{column} contains a NUL character (byte 0x00)")


def _has_nul(values: pd.Series) -> np.ndarray:
    """(n,) bool: values whose text holds a NUL character."""
    return values.astype(str).str.contains("\x00", regex=False).to_numpy()


def _check_duplicates(
    frame: pd.DataFrame, table: str, file: str, valid: np.ndarray
) -> list[Problem]:
    """Rows whose key repeats an earlier row's. Only rows with a ``valid`` key take part: empty
    ids or unparseable dates are reported as such, and their placeholders ("" or NaT) compare
    equal to each other without being the same key."""
    keys = list(KEYS[table])
    valid = np.asarray(valid, dtype=bool)
    dup = np.zeros(len(frame), dtype=bool)
    dup[valid] = frame.loc[valid, keys].duplicated(keep="first").to_numpy()
    return _rows_problem(file, dup, f"duplicate key ({', '.join(keys)}) already seen in this file")
