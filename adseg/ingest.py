"""Read and validate ingest files (CSV, CSV.gz or Parquet; one file per table) into typed frames.

Pure: no SQL here. ``adseg.store.load`` writes a validated batch in one transaction.

Formats (DESIGN.md §3); prices are eCPM (currency per 1000 impressions), spend is currency:
* advertisers: advertiser_id, name, description
* auctions: auction_id, advertiser_id, ts, bid_ecpm, market_price_ecpm, won, paid_ecpm (empty when
  lost)
* delivery: advertiser_id, date, bid_requests, bid_ecpm, impressions, spend

Row numbers in error messages count data records from 1 (the header is not a row), so "row 3" is
the third record of the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

TABLES = ("advertisers", "auctions", "delivery")
COLUMNS: dict[str, tuple[str, ...]] = {
    "advertisers": ("advertiser_id", "name", "description"),
    "auctions": (
        "auction_id",
        "advertiser_id",
        "ts",
        "bid_ecpm",
        "market_price_ecpm",
        "won",
        "paid_ecpm",
    ),
    "delivery": ("advertiser_id", "date", "bid_requests", "bid_ecpm", "impressions", "spend"),
}
KEYS: dict[str, tuple[str, ...]] = {
    "advertisers": ("advertiser_id",),
    "auctions": ("auction_id",),
    "delivery": ("advertiser_id", "date"),
}
SUFFIXES = (".csv", ".csv.gz", ".parquet")
MAX_AMOUNT = 1e12
"""Largest price (eCPM) or spend accepted, in currency: money is stored as int64 micros (exact up
to 9.2e12), and anything near that is a unit or parsing error upstream, not a price."""
MAX_COUNT = 2**53
"""Largest count (bid requests, impressions) accepted: the largest whole number a float64 holds
exactly, far above any day's traffic."""
DATE_RANGE = ("2000-01-01", "2099-12-31")
"""Dates and timestamps accepted (inclusive, UTC): a delivery log is of real auctions, and a year
like 0001, 1970 or 9999 is an exporter's placeholder that would move the default windows."""
MAX_ID_LENGTH = 64
MAX_NAME_LENGTH = 512
MICROS = 1_000_000
MAX_ROWS_SHOWN = 5
_TRUE = {"true", "t", "1", "yes", "y"}
_FALSE = {"false", "f", "0", "no", "n"}


@dataclass(frozen=True)
class Problem:
    """One broken rule in one file: the file, the rule and the first offending rows (1-based)."""

    file: str
    rule: str
    rows: tuple[int, ...] = ()
    n_rows: int = 0

    def __str__(self) -> str:
        if not self.rows:
            return f"{self.file}: {self.rule}"
        shown = ", ".join(str(r) for r in self.rows)
        more = f" (and {self.n_rows - len(self.rows)} more)" if self.n_rows > len(self.rows) else ""
        label = "row" if self.n_rows == 1 else "rows"
        return f"{self.file}: {label} {shown}{more}: {self.rule}"


class IngestError(ValueError):
    """Validation failed; nothing was written. ``problems`` lists every broken rule."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


@dataclass
class IngestBatch:
    """Validated, typed frames ready to write (absent tables are None). Money is in micros."""

    advertisers: pd.DataFrame | None = None
    auctions: pd.DataFrame | None = None
    delivery: pd.DataFrame | None = None
    files: dict[str, Path] = field(default_factory=dict)

    def rows(self) -> dict[str, int]:
        return {t: (0 if getattr(self, t) is None else len(getattr(self, t))) for t in TABLES}


def find_table_files(directory: Path) -> dict[str, Path]:
    """Map each table to its file in ``directory`` (advertisers.csv, auctions.csv.gz, …).
    Raises IngestError if the directory is missing, has none of the tables, or has two files for
    one table."""
    directory = Path(directory)
    if not directory.is_dir():
        raise IngestError([Problem(str(directory), "not a directory")])
    found: dict[str, Path] = {}
    problems = []
    for table in TABLES:
        paths = [
            directory / f"{table}{s}" for s in SUFFIXES if (directory / f"{table}{s}").exists()
        ]
        if len(paths) > 1:
            names = ", ".join(p.name for p in paths)
            problems.append(Problem(str(directory), f"two files for table {table}: {names}"))
        elif paths:
            found[table] = paths[0]
    problems += _miscased_table_files(directory, found)
    if not found and not problems:
        expected = ", ".join(f"{t}.csv[.gz]|.parquet" for t in TABLES)
        problems.append(Problem(str(directory), f"no ingest files found (expected {expected})"))
    if problems:
        raise IngestError(problems)
    return found


def _miscased_table_files(directory: Path, found: dict[str, Path]) -> list[Problem]:
    """Files that would be a missing table's file but for letter case (``Advertisers.CSV``):
    names are case-sensitive here, and silently skipping such a file would lose its table."""
    wanted = {f"{t}{s}": t for t in TABLES if t not in found for s in SUFFIXES}
    return [
        Problem(str(entry), f"file names are case-sensitive: rename it {entry.name.lower()}")
        for entry in sorted(directory.iterdir())
        if entry.name.lower() in wanted and entry.name != entry.name.lower()
    ]


def read_directory(directory: Path, known_advertisers: set[str] | frozenset = frozenset()):
    """Read and validate every table file in ``directory``. ``known_advertisers`` are the ids the
    database already has (auctions/delivery may refer to them). Returns an IngestBatch; raises
    IngestError listing every problem found (across all files) otherwise."""
    files = find_table_files(directory)
    problems: list[Problem] = []
    batch = IngestBatch(files=files)
    raw = {}
    for table, path in files.items():
        try:
            raw[table] = read_table_file(path)
        except UnicodeDecodeError as exc:
            problems.append(Problem(str(path), _not_utf8(path, exc)))
        except pd.errors.EmptyDataError:
            columns = ", ".join(COLUMNS[table])
            problems.append(
                Problem(str(path), f"the file is empty; expected a header row: {columns}")
            )
        except Exception as exc:  # unreadable file: say which and why, check the others too
            problems.append(Problem(str(path), f"cannot be read: {exc}"))
    validators = {
        "advertisers": validate_advertisers,
        "auctions": validate_auctions,
        "delivery": validate_delivery,
    }
    for table, frame in raw.items():
        typed, found = validators[table](frame, str(files[table]))
        problems += found
        setattr(batch, table, typed)
    if "advertisers" in files and batch.advertisers is None:
        # its ids are unknown, so every other file's advertiser_id would look unknown too
        raise IngestError(problems)
    known = set(known_advertisers)
    if batch.advertisers is not None:
        known |= set(batch.advertisers["advertiser_id"])
    for table in ("auctions", "delivery"):
        frame = getattr(batch, table)
        if frame is not None and "advertiser_id" in frame:
            ids = frame["advertiser_id"]
            # an empty or over-long id is reported as such already, not again as unknown
            unknown = ~ids.isin(known).to_numpy() & _id_ok(ids)
            problems += _rows_problem(str(files[table]), unknown, "unknown advertiser_id")
    if problems:
        raise IngestError(problems)
    return batch


def read_table_file(path: Path) -> pd.DataFrame:
    """Read one file with every column as text (CSV) or as stored (Parquet), no NA guessing."""
    path = Path(path)
    if path.name.endswith(".parquet"):
        return pd.read_parquet(path)
    return pd.read_csv(
        path,
        dtype=str,
        keep_default_na=False,
        na_values=[],
        encoding="utf-8",
        compression="infer",
    )


def _not_utf8(path: Path, exc: UnicodeDecodeError) -> str:
    """Where a CSV stops being UTF-8: the physical line (from 1, the header is line 1) and the
    byte, found by a second streaming pass over the file (one line in memory at a time)."""
    import gzip

    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as stream:
        for number, line in enumerate(stream, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as bad:
                where = f"byte 0x{line[bad.start]:02x}, byte {bad.start + 1} of the line"
                return f"line {number} is not UTF-8 ({where}); save the file as UTF-8"
    return f"not UTF-8 ({exc.reason}); save the file as UTF-8"


def validate_advertisers(frame: pd.DataFrame, file: str) -> tuple[pd.DataFrame | None, list]:
    problems = _check_columns(frame, "advertisers", file)
    if problems:
        return None, problems
    out = pd.DataFrame(
        {
            "advertiser_id": _text(frame["advertiser_id"]),
            "name": _text(frame["name"]),
            "description": _text(frame["description"]),
        }
    )
    problems += _check_id(out["advertiser_id"], "advertiser_id", file)
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
    ids = _text(frame["auction_id"])
    adv = _text(frame["advertiser_id"])
    problems += _check_id(ids, "auction_id", file)
    problems += _check_id(adv, "advertiser_id", file)
    ts = pd.to_datetime(frame["ts"], utc=True, errors="coerce", format="ISO8601")
    problems += _rows_problem(file, ts.isna().to_numpy(), "ts is not an ISO-8601 timestamp")
    problems += _rows_problem(file, _outside_date_range(ts), _DATE_RANGE_RULE.format("ts"))
    bid, p = _price(frame["bid_ecpm"], "bid_ecpm", file)
    problems += p
    market, p = _price(frame["market_price_ecpm"], "market_price_ecpm", file)
    problems += p
    won, p = _boolean(frame["won"], "won", file)
    problems += p
    paid_text = _text(frame["paid_ecpm"])
    paid_present = (paid_text.str.len() > 0).to_numpy() & ~frame["paid_ecpm"].isna().to_numpy()
    paid, p = _price(frame["paid_ecpm"].where(paid_present, "0"), "paid_ecpm", file)
    problems += p
    won_known = ~np.isnan(won)
    problems += _rows_problem(
        file, won_known & (won == 1) & ~paid_present, "paid_ecpm is empty on a won auction"
    )
    problems += _rows_problem(
        file, won_known & (won == 0) & paid_present, "paid_ecpm is given on a lost auction"
    )
    out = pd.DataFrame(
        {
            "auction_id": ids,
            "advertiser_id": adv,
            "ts": ts,
            "bid_micros": _micros(bid),
            "market_price_micros": _micros(market),
            "won": won == 1,
            "paid_micros": pd.Series(_micros(paid), dtype="Int64").mask(~paid_present),
        }
    )
    problems += _check_duplicates(out, "auctions", file, _id_ok(ids))
    return out, problems


def validate_delivery(frame: pd.DataFrame, file: str) -> tuple[pd.DataFrame | None, list]:
    problems = _check_columns(frame, "delivery", file)
    if problems:
        return None, problems
    adv = _text(frame["advertiser_id"])
    problems += _check_id(adv, "advertiser_id", file)
    dates, p = _dates(frame["date"], "date", file)
    problems += p
    problems += _rows_problem(file, _outside_date_range(dates), _DATE_RANGE_RULE.format("date"))
    requests, p = _count(frame["bid_requests"], "bid_requests", file)
    problems += p
    impressions, p = _count(frame["impressions"], "impressions", file)
    problems += p
    bid, p = _price(frame["bid_ecpm"], "bid_ecpm", file)
    problems += p
    spend, p = _price(frame["spend"], "spend", file)
    problems += p
    both = ~np.isnan(requests) & ~np.isnan(impressions)
    problems += _rows_problem(
        file, both & (impressions > requests), "impressions exceed bid_requests"
    )
    out = pd.DataFrame(
        {
            "advertiser_id": adv,
            "date": dates.dt.date,
            "bid_requests": np.nan_to_num(requests).astype(np.int64),
            "bid_micros": _micros(bid),
            "impressions": np.nan_to_num(impressions).astype(np.int64),
            "spend_micros": _micros(spend),
        }
    )
    valid_key = _id_ok(adv) & dates.notna().to_numpy()
    problems += _check_duplicates(out, "delivery", file, valid_key)
    return out, problems


# --- helpers -------------------------------------------------------------------------------

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
    dates = pd.to_datetime(_text(series), errors="coerce", format="%Y-%m-%d")
    return dates, _rows_problem(file, dates.isna().to_numpy(), f"{column} is not a YYYY-MM-DD date")


def _outside_date_range(values: pd.Series) -> np.ndarray:
    """(n,) bool: parsed dates or timestamps (naive = UTC) outside DATE_RANGE; NaT is not."""
    days = values.dt.tz_localize(None) if values.dt.tz is not None else values
    days = days.dt.normalize()
    first, last = (pd.Timestamp(d) for d in DATE_RANGE)
    return ((days < first) | (days > last)).fillna(False).to_numpy(dtype=bool)


def _check_columns(frame: pd.DataFrame, table: str, file: str) -> list[Problem]:
    missing = [c for c in COLUMNS[table] if c not in frame.columns]
    if missing:
        return [Problem(file, f"missing required column(s): {', '.join(missing)}")]
    return []


def _text(series: pd.Series) -> pd.Series:
    return series.astype(object).where(series.notna(), "").astype(str).str.strip()


def _id_lengths(ids: pd.Series) -> np.ndarray:
    return ids.astype(str).str.len().to_numpy()


def _id_ok(ids: pd.Series) -> np.ndarray:
    """(n,) bool: ids that pass _check_id (present and not too long)."""
    lengths = _id_lengths(ids)
    return (lengths > 0) & (lengths <= MAX_ID_LENGTH)


def _check_id(ids: pd.Series, column: str, file: str) -> list[Problem]:
    lengths = _id_lengths(ids)
    return _rows_problem(file, lengths == 0, f"{column} is empty") + _rows_problem(
        file, lengths > MAX_ID_LENGTH, f"{column} longer than {MAX_ID_LENGTH} characters"
    )


def _price(series: pd.Series, column: str, file: str) -> tuple[np.ndarray, list[Problem]]:
    values = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values)
    problems = _rows_problem(file, bad, f"{column} is not a finite number")
    problems += _rows_problem(file, ~bad & (values < 0), f"{column} is negative")
    problems += _rows_problem(
        file, ~bad & (values > MAX_AMOUNT), f"{column} is above {MAX_AMOUNT:.0e} (implausible)"
    )
    return values, problems


def _count(series: pd.Series, column: str, file: str) -> tuple[np.ndarray, list[Problem]]:
    values = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values) | (values != np.round(values))
    problems = _rows_problem(file, bad, f"{column} is not a whole number")
    problems += _rows_problem(file, ~bad & (values < 0), f"{column} is negative")
    problems += _rows_problem(
        file, ~bad & (values > MAX_COUNT), f"{column} is above {MAX_COUNT:,} (implausible)"
    )
    values = np.where(bad, np.nan, values)
    return values, problems


def _boolean(series: pd.Series, column: str, file: str) -> tuple[np.ndarray, list[Problem]]:
    if series.dtype == bool:
        return series.to_numpy().astype(np.float64), []
    text = _text(series).str.lower()
    out = np.full(len(text), np.nan)
    out[text.isin(_TRUE).to_numpy()] = 1.0
    out[text.isin(_FALSE).to_numpy()] = 0.0
    return out, _rows_problem(file, np.isnan(out), f"{column} is not a boolean (true/false)")


def _micros(values: np.ndarray) -> np.ndarray:
    return np.round(np.nan_to_num(values, nan=0.0, posinf=0.0) * MICROS).astype(np.int64)


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


def _rows_problem(file: str, mask: np.ndarray, rule: str) -> list[Problem]:
    rows = np.flatnonzero(mask)
    if rows.size == 0:
        return []
    shown = tuple(int(r) + 1 for r in rows[:MAX_ROWS_SHOWN])
    return [Problem(file, rule, shown, int(rows.size))]
