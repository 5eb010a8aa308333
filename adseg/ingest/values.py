"""Typed column parsers of the validation: dates and timestamps, money as exact int64 micros,
counts as exact integers, booleans, and trimmed text. Each takes a column of text (CSV) or of a
Parquet type and returns the typed values, the rows refused and the problems found."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

import numpy as np
import pandas as pd

from adseg.ingest.batch import Problem, _rows_problem
from adseg.units import MICROS

MAX_AMOUNT = 1e12
"""Largest price (eCPM) or spend accepted, in currency: money is stored as int64 micros (exact up
to 9.2e12), and anything near that is a unit or parsing error upstream, not a price."""
MAX_COUNT = 2**53
"""Largest count (bid requests, impressions) accepted: the largest whole number a float64 holds
exactly, far above any day's traffic. CSV counts are parsed as exact integers, so 2**53 + 1 is
refused, not rounded down to 2**53."""
DATE_RANGE = ("2000-01-01", "2099-12-31")
"""Dates and timestamps accepted (inclusive, UTC): a delivery log is of real auctions, and a year
like 0001, 1970 or 9999 is an exporter's placeholder that would move the default windows."""

_TRUE = {"true", "t", "1", "yes", "y"}
_FALSE = {"false", "f", "0", "no", "n"}

_DATE_RANGE_RULE = "{} is outside " + " … ".join(DATE_RANGE) + " (a placeholder date?)"


def _dates(series: pd.Series, column: str, file: str) -> tuple[pd.Series, list[Problem]]:
    """Parse a date column: text ``YYYY-MM-DD`` (CSV, or a Parquet string/date column), or a
    timestamp column (Parquet ``timestamp``, naive or tz-aware: what pandas and Spark write for
    dates) whose values are all at midnight; a tz-aware value's date is taken in its own time zone.
    Returns naive midnight timestamps, NaT where the row is refused, and the problems."""
    if pd.api.types.is_datetime64_any_dtype(series.dtype) or pd.api.types.infer_dtype(
        series, skipna=True
    ) in ("datetime", "datetime64"):
        try:
            stamps = pd.to_datetime(series, errors="coerce")
        except (ValueError, TypeError):  # Python datetimes in several time zones: take UTC
            stamps = pd.to_datetime(series, errors="coerce", utc=True)
        if stamps.dt.tz is not None:
            stamps = stamps.dt.tz_localize(None)
        missing = stamps.isna().to_numpy()
        timed = ~missing & (stamps != stamps.dt.normalize()).to_numpy()
        problems = _rows_problem(file, missing, f"{column} is empty")
        problems += _rows_problem(
            file,
            timed,
            f"{column} is a timestamp with a time of day; the {column} column takes dates "
            "(YYYY-MM-DD, or timestamps at midnight)",
        )
        return stamps.mask(timed), problems
    text = _text(series)
    # the format alone takes one-digit months and days (2026-3-2): the README's form is exact
    exact = text.str.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}").to_numpy(dtype=bool, na_value=False)
    dates = pd.to_datetime(text.where(exact, ""), errors="coerce", format="%Y-%m-%d")
    return dates, _rows_problem(file, dates.isna().to_numpy(), f"{column} is not a YYYY-MM-DD date")


def _outside_date_range(values: pd.Series) -> np.ndarray:
    """(n,) bool: parsed dates or timestamps (naive = UTC) outside DATE_RANGE; NaT is not."""
    days = values.dt.tz_localize(None) if values.dt.tz is not None else values
    days = days.dt.normalize()
    first, last = (pd.Timestamp(d) for d in DATE_RANGE)
    return ((days < first) | (days > last)).fillna(False).to_numpy(dtype=bool)


def _text(series: pd.Series) -> pd.Series:
    """Trimmed text of a column; empty where missing. A float column's whole numbers read as
    integers ("101", not "101.0"): a Parquet integer id column with a null in it is stored or
    read as float, and its ids must still match the same ids written as integers elsewhere."""
    if pd.api.types.is_float_dtype(series.dtype):
        values = series.to_numpy(dtype=np.float64, na_value=np.nan)
        whole = np.isfinite(values) & (np.abs(values) < MAX_COUNT) & (values == np.round(values))
        series = series.astype(object).where(~whole, np.where(whole, values, 0).astype(np.int64))
    return series.astype(object).where(series.notna(), "").astype(str).str.strip()


def _trimmed(series: pd.Series) -> pd.Series:
    """``series`` with its text values stripped of surrounding white space, Unicode's included
    (a spreadsheet's no-break space: pandas' parsers strip ASCII spaces only), and every other
    value (a Parquet timestamp, number or Decimal, a missing value) left as it is."""
    if pd.api.types.infer_dtype(series, skipna=True) not in ("string", "mixed"):
        return series
    stripped = series.str.strip()
    return stripped.where(stripped.notna(), series)


def _price(series: pd.Series, column: str, file: str) -> tuple[np.ndarray, list[Problem]]:
    """A money column (prices in eCPM, spend in currency) as int64 micros, 0 on refused rows,
    and the problems. Text (CSV, a Parquet string or decimal column) is converted exactly, see
    ``_text_micros``; a Parquet float is binary already and is rounded to the nearest micro."""
    series = _trimmed(series)
    values = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values)
    negative = ~bad & (values < 0)
    above = ~bad & (values > MAX_AMOUNT)
    ok = ~bad & ~negative & ~above
    micros = np.zeros(len(values), dtype=np.int64)
    if pd.api.types.is_integer_dtype(series.dtype):
        micros[ok] = values[ok].astype(np.int64) * MICROS  # whole and ≤ 1e12: exact in float
    elif pd.api.types.is_float_dtype(series.dtype):
        micros[ok] = np.round(values[ok] * MICROS).astype(np.int64)
    else:
        micros[ok], parsed = _text_micros(series[ok], values[ok])
        bad[np.flatnonzero(ok)[~parsed]] = True
        # the float of 1000000000000.000001 is 1e12 exactly; its micros are not
        over = ok & ~bad & (micros > int(MAX_AMOUNT) * MICROS)
        above |= over
        micros[over] = 0
    problems = _rows_problem(file, bad, f"{column} is not a finite number")
    problems += _rows_problem(file, negative, f"{column} is negative")
    problems += _rows_problem(file, above, f"{column} is above {MAX_AMOUNT:.0e} (implausible)")
    return micros, problems


_EXACT_BELOW = 2.0**40
"""Below this many micros (about 1.1 million currency), a float parse of a decimal text, scaled
by 1e6, is within 2**-12 of the exact decimal value times 1e6 (two roundings of 2**-53 each)."""
_TIE_MARGIN = 1e-3
"""Scaled values nearer than this to a half micro are settled exactly, from their text."""


def _text_micros(texts: pd.Series, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact micros of decimal texts (or Decimal objects) that parsed as finite, non-negative
    ``values`` of at most MAX_AMOUNT.

    Money is stored exactly, so the decimal value, not its nearest float, is what is rounded: to
    the nearest micro, a half micro to the even one (``ROUND_HALF_EVEN``; a value with more than 6
    decimal places is rounded, not refused). Where the float is provably enough it is used: below
    ``_EXACT_BELOW`` micros its error is far below the margin kept from a half micro, so the
    nearest whole micro of the float is that of the decimal. The rest (large amounts, values
    within ``_TIE_MARGIN`` of a half micro) are rounded from their digits, see ``_digits_micros``.
    Returns the micros and a mask of the rows parsed (False: not a plain decimal number).
    """
    scaled = values * MICROS
    micros = np.round(scaled)
    settled = (np.abs(scaled) < _EXACT_BELOW) & (0.5 - np.abs(scaled - micros) > _TIE_MARGIN)
    out = micros.astype(np.int64)
    parsed = np.ones(len(values), dtype=bool)
    rest = np.flatnonzero(~settled)
    if rest.size:
        out[rest], parsed[rest] = _digits_micros(_text(texts.iloc[rest]))
    return out, parsed


def _digits_micros(text: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Micros of non-negative decimal texts, rounded half-even from the digits themselves
    (vectorised; ``12.3456785`` is 12345678 micros, ``12.3456795`` is 12345680). Texts with an
    exponent go through ``decimal`` one by one. Returns the micros and the mask of rows parsed."""
    parts = text.str.extract(r"^\+?([0-9]*)(?:\.([0-9]*))?$")
    plain = parts[0].notna().to_numpy(dtype=bool)
    whole = parts[0].fillna("").str.rjust(1, "0").to_numpy(dtype=object)
    fraction = parts[1].fillna("").str.ljust(6, "0")
    beyond = fraction.str.slice(6).str.rstrip("0")  # digits past the micro, as a decimal
    floor = whole.astype(np.int64) * MICROS + fraction.str.slice(0, 6).astype(np.int64).to_numpy()
    tie = (beyond == "5").to_numpy(dtype=bool)
    up = (beyond > "5").to_numpy(dtype=bool)  # as strings: "51" and "6" are above, "49" below
    out = floor + up + (tie & (floor % 2 == 1))
    parsed = plain.copy()
    for i in np.flatnonzero(~plain):
        number = _decimal(text.iloc[i])
        if number is not None:
            out[i] = int(number.scaleb(6).to_integral_value(rounding=ROUND_HALF_EVEN))
            parsed[i] = True
    return out, parsed


_DECIMAL_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
"""A plain decimal number: ASCII digits, optional sign, point and exponent. Narrower than what
``Decimal`` takes (no other scripts' digits, no ``1_000``), as the float parser is."""
_INTEGER_TEXT = re.compile(r"[+-]?[0-9]{1,18}")
"""Integer texts that int64 holds (18 digits): converted in one vectorised step."""


def _decimal(value: object) -> Decimal | None:
    """A finite Decimal from a Decimal object or a plain decimal text; None otherwise."""
    if isinstance(value, Decimal):
        return value if value.is_finite() else None
    text = str(value).strip()
    if not _DECIMAL_TEXT.fullmatch(text):
        return None
    try:
        return Decimal(text)
    except InvalidOperation:  # not expected after the pattern; refused all the same
        return None


def _count(
    series: pd.Series, column: str, file: str
) -> tuple[np.ndarray, np.ndarray, list[Problem]]:
    """A count column as int64 (0 on refused rows), the mask of rows accepted, and the problems.

    Text is parsed as an exact integer (``1000``; ``1e3`` or ``1000.0`` too, through ``decimal``:
    whole is whole), never through float64, so ``9007199254740993`` is refused as above 2**53
    instead of stored as 2**53. Integer columns are taken as they are; a float column (Parquet)
    holds whole numbers exactly up to 2**53."""
    if pd.api.types.is_integer_dtype(series.dtype):
        bad = series.isna().to_numpy()
        values = series.where(~bad, 0).to_numpy().astype(object)  # Python ints compare exactly
    elif pd.api.types.is_float_dtype(series.dtype):
        values = series.to_numpy(dtype=np.float64, na_value=np.nan)
        bad = ~np.isfinite(values) | (values != np.round(values))
    else:
        values, bad = _integer_texts(_text(series))
    negative = ~bad & (values < 0).astype(bool)
    above = ~bad & (values > MAX_COUNT).astype(bool)
    ok = ~bad & ~negative & ~above
    counts = np.zeros(len(series), dtype=np.int64)
    counts[ok] = values[ok].astype(np.int64)
    problems = _rows_problem(file, bad, f"{column} is not a whole number")
    problems += _rows_problem(file, negative, f"{column} is negative")
    problems += _rows_problem(file, above, f"{column} is above {MAX_COUNT:,} (implausible)")
    return counts, ok, problems


def _integer_texts(text: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Exact integers of texts as Python ints (object array; 0 where not whole) and the mask of
    texts that are not whole numbers. Plain digits convert in one vectorised step; the rest
    (``1e3``, ``1000.0``) through ``decimal``. A value with more than 18 digits is not built (an
    exponent like 1e999999999 would take for ever): it stands as ±(MAX_COUNT + 1), out of range
    whatever its size."""
    values = np.zeros(len(text), dtype=object)
    bad = np.zeros(len(text), dtype=bool)
    plain = text.str.fullmatch(_INTEGER_TEXT).to_numpy(dtype=bool, na_value=False)
    values[plain] = text[plain].astype(np.int64).to_numpy().astype(object)
    for i in np.flatnonzero(~plain):
        number = _decimal(text.iloc[i])
        if number is None or number != number.to_integral_value():
            bad[i] = True
        elif number.adjusted() > 17:
            values[i] = (MAX_COUNT + 1) * (1 if number > 0 else -1)
        else:
            values[i] = int(number)
    return values, bad


def _boolean(series: pd.Series, column: str, file: str) -> tuple[np.ndarray, list[Problem]]:
    if series.dtype == bool:
        return series.to_numpy().astype(np.float64), []
    text = _text(series).str.lower()
    out = np.full(len(text), np.nan)
    out[text.isin(_TRUE).to_numpy()] = 1.0
    out[text.isin(_FALSE).to_numpy()] = 0.0
    return out, _rows_problem(file, np.isnan(out), f"{column} is not a boolean (true/false)")
