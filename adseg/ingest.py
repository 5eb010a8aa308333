"""Read and validate ingest files (CSV, CSV.gz or Parquet; one file per table) into typed frames.

Pure: no SQL here. ``adseg.store.load`` writes a validated batch in one transaction.

Formats (DESIGN.md §3); prices are eCPM (currency per 1000 impressions), spend is currency:
* advertisers: advertiser_id, name, description
* auctions: auction_id, advertiser_id, ts, bid_ecpm, market_price_ecpm, won, paid_ecpm (empty when
  lost)
* delivery: advertiser_id, date, bid_requests, bid_ecpm, impressions, spend

Row numbers in error messages count data records from 1 (the header is not a row), so "row 3" is
the third record of the file. Rows are taken by position: whatever index a Parquet file stores is
dropped on reading, and every typed frame is built from index-free arrays.
"""

from __future__ import annotations

import csv
import difflib
import gzip
import os
import re
import shutil
import tempfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from pathlib import Path

import numpy as np
import pandas as pd

from adseg.checks import header_columns
from adseg.units import MICROS

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
exactly, far above any day's traffic. CSV counts are parsed as exact integers, so 2**53 + 1 is
refused, not rounded down to 2**53."""
DATE_RANGE = ("2000-01-01", "2099-12-31")
"""Dates and timestamps accepted (inclusive, UTC): a delivery log is of real auctions, and a year
like 0001, 1970 or 9999 is an exporter's placeholder that would move the default windows."""
MAX_ID_LENGTH = 64
MAX_NAME_LENGTH = 512
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
        what = "not a directory" if directory.exists() else "no such directory"
        raise IngestError([Problem(str(directory), what)])
    found: dict[str, Path] = {}
    problems = []
    for table in TABLES:
        # lexists: a dangling symbolic link is a table file that cannot be read, not no file
        # (skipping it loaded the other tables and exited 0 without this one's rows)
        paths = [
            directory / f"{table}{s}"
            for s in SUFFIXES
            if os.path.lexists(directory / f"{table}{s}")
        ]
        if len(paths) > 1:
            names = ", ".join(p.name for p in paths)
            problems.append(Problem(str(directory), f"two files for table {table}: {names}"))
        elif paths and not paths[0].exists():
            target = os.readlink(paths[0])
            problems.append(
                Problem(str(paths[0]), f"a symbolic link to {target}, which does not exist")
            )
        elif paths:
            found[table] = paths[0]
    problems += _miscased_table_files(directory, found)
    problems += _unsupported_table_files(directory)
    problems += _misspelled_table_files(directory, found)
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


def _unsupported_table_files(directory: Path) -> list[Problem]:
    """Files named for a table in a form ingest does not read (``delivery.csv.bz2``,
    ``auctions.tsv``, ``advertisers.json``): skipping one would load the other tables and exit 0
    without this one's rows. Files named for no table (``truth.csv``, ``README.txt``) are not
    ingest's business; a mis-cased accepted name is left to ``_miscased_table_files``."""
    accepted = {f"{t}{s}" for t in TABLES for s in SUFFIXES}
    problems = []
    for entry in sorted(directory.iterdir()):
        name = entry.name.lower()
        table = name.split(".", 1)[0]
        if table in TABLES and name not in accepted:
            forms = ", ".join(f"{table}{s}" for s in SUFFIXES)
            problems.append(
                Problem(str(entry), f"not a table file format ingest reads; use one of {forms}")
            )
    return problems


def _misspelled_table_files(directory: Path, found: dict[str, Path]) -> list[Problem]:
    """Data files whose name is close to a missing table's (``auction.csv``, ``deliveries.csv``,
    ``advertiser.parquet``): skipping one would load the other tables and exit 0 without this
    one's rows. Names far from every table (``truth.csv``) are left alone."""
    missing = [t for t in TABLES if t not in found]
    problems = []
    for entry in sorted(directory.iterdir()):
        name = entry.name.lower()
        suffix = next((s for s in SUFFIXES if name.endswith(s)), None)
        if suffix is None or name[: -len(suffix)] in TABLES:
            continue
        close = difflib.get_close_matches(name[: -len(suffix)], missing, n=1, cutoff=0.75)
        if close:
            problems.append(
                Problem(
                    str(entry),
                    f"not a table name ingest knows: is it {close[0]}{suffix}? (rename it, or "
                    "move it out of the folder)",
                )
            )
    return problems


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
        except IngestError as exc:  # a rule broken while reading (rows not as wide as the header)
            problems += exc.problems
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


@contextmanager
def _regular_file(path: Path):
    """``path`` itself when it is a regular file; otherwise (a named pipe, ``<(zcat …)``) a
    temporary regular copy of what it streams, removed on exit. A CSV whose first parse fails
    is read again to find the rows at fault, and a pipe's second read waited forever for a
    writer that had gone. Costs the file's size in the temporary folder (``$TMPDIR``)."""
    if path.is_file() or not path.exists():
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="adseg-ingest-") as folder:
        copy = Path(folder) / path.name
        with open(path, "rb") as source, open(copy, "wb") as target:
            shutil.copyfileobj(source, target, 1 << 20)
        yield copy


def read_table_file(path: Path) -> pd.DataFrame:
    """Read one file with every column as text (CSV) or as stored (Parquet), no NA guessing.

    The frame is indexed 0..n-1 by position (a Parquet file's stored index is dropped, or made a
    column again if it was a named one, as ``df.set_index("auction_id")`` writes) and header names
    are stripped of surrounding spaces (``advertiser_id, name`` names the column ``name``). Raises
    IngestError for a CSV row with more, or fewer, fields than the header, or text that is not
    UTF-8 (naming the line and byte). A named pipe is read once (see ``_regular_file``)."""
    path = Path(path)
    with _regular_file(path) as readable:
        try:
            if path.name.endswith(".parquet"):
                frame = _read_parquet(readable)
            else:
                frame = _read_csv(readable)
        except IngestError as exc:  # the problems name the file given, not a temporary copy
            raise IngestError([replace(p, file=str(path)) for p in exc.problems]) from None
        except UnicodeDecodeError as exc:
            raise IngestError([Problem(str(path), _not_utf8(readable, exc))]) from None
    frame.columns = [_header_name(c) for c in frame.columns]
    return frame


def _read_parquet(path: Path) -> pd.DataFrame:
    """A Parquet file as a frame, its required columns' types checked first (IngestError): a
    column named twice, text that is not UTF-8, and types no value of the column can be (a
    struct id, a boolean or duration price) are refused by name instead of failing deep in
    pyarrow or being stored as something else."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as parquet:
        # the header names as read_table_file will use them: matched untrimmed, ' bid_ecpm'
        # skipped the type checks and a boolean price was stored as 1 eCPM
        names = [_header_name(n) for n in parquet.schema_arrow.names]
        if repeated := sorted({n for n in names if names.count(n) > 1}):
            raise IngestError([Problem(str(path), f"column(s) named twice: {', '.join(repeated)}")])
        table = parquet.read()
    problems = [
        problem
        for name, column in zip(names, table.columns, strict=True)
        if name in _PARQUET_KINDS
        for problem in _parquet_column_problems(str(path), name, column)
    ]
    if problems:
        raise IngestError(problems)
    frame = table.to_pandas()
    named = [n for n in frame.index.names if n is not None and n not in frame.columns]
    if named:
        frame = frame.reset_index(level=named)
    return frame.reset_index(drop=True)


_PARQUET_KINDS = {
    **dict.fromkeys(("advertiser_id", "auction_id", "name", "description"), "text"),
    **dict.fromkeys(
        ("bid_ecpm", "market_price_ecpm", "paid_ecpm", "spend", "bid_requests", "impressions"),
        "number",
    ),
    "won": "boolean",
    "ts": "time",
    "date": "time",
}
"""What each required column holds, for the Parquet type check (a CSV is all text)."""


def _parquet_type_fits(kind: str, arrow_type) -> bool:
    """Whether a Parquet (Arrow) column type can hold a value of ``kind``: text also from
    integers (ids), numbers from integers, floats, decimals or text, booleans from booleans,
    integers or text, times from timestamps, dates or text; an all-null column fits any."""
    import pyarrow as pa

    t = pa.types
    if t.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if t.is_null(arrow_type):
        return True
    text = t.is_string(arrow_type) or t.is_large_string(arrow_type) or _is_binary(arrow_type)
    if kind == "text":
        return text or t.is_integer(arrow_type) or t.is_floating(arrow_type)
    if kind == "number":
        return (
            text
            or t.is_integer(arrow_type)
            or t.is_floating(arrow_type)
            or t.is_decimal(arrow_type)
        )
    if kind == "boolean":
        return text or t.is_boolean(arrow_type) or t.is_integer(arrow_type)
    return text or t.is_timestamp(arrow_type) or t.is_date(arrow_type)


def _is_binary(arrow_type) -> bool:
    import pyarrow as pa

    return pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type)


def _parquet_column_problems(file: str, name: str, column) -> list[Problem]:
    """A required Parquet column of a type its values cannot be, or text (string or binary)
    that is not UTF-8, with the offending rows. The UTF-8 check is pyarrow's validation; the
    rows are found value by value only when it fails."""
    import pyarrow as pa

    arrow_type = column.type
    kind = _PARQUET_KINDS[name]
    if not _parquet_type_fits(kind, arrow_type):
        what = "a date or timestamp" if kind == "time" else f"a {kind}"
        return [
            Problem(
                file, f"column {name} has Parquet type {arrow_type}, which cannot hold {what} value"
            )
        ]
    if pa.types.is_dictionary(arrow_type):
        column = column.cast(arrow_type.value_type)
        arrow_type = column.type
    textual = pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
    if not (textual or _is_binary(arrow_type)):
        return []
    large = pa.types.is_large_string(arrow_type) or pa.types.is_large_binary(arrow_type)
    try:  # both check every value's UTF-8 in C
        column.validate(full=True) if textual else column.cast(
            pa.large_string() if large else pa.string()
        )
        return []
    except pa.ArrowInvalid:
        pass
    as_bytes = pa.large_binary() if large else pa.binary()
    raw = [b for chunk in column.chunks for b in chunk.view(as_bytes).to_pylist()]
    bad = np.zeros(len(raw), dtype=bool)
    for i, value in enumerate(raw):
        try:
            value is None or value.decode("utf-8")
        except UnicodeDecodeError:
            bad[i] = True
    return _rows_problem(file, bad, f"{name} is not UTF-8 text")


def _read_csv(path: Path) -> pd.DataFrame:
    """A CSV as a frame of text, by Arrow's reader when it accepts the file (every record as wide
    as the header, valid UTF-8: then it equals what pandas reads, in a quarter of the time and
    without the second pass below), else by pandas, whose path finds and names what is wrong."""
    cells = _read_csv_arrow(path)
    if cells is None:
        cells = _read_csv_pandas(path)
    frame = cells.iloc[1:].reset_index(drop=True)
    frame.columns = list(cells.iloc[0])
    return frame


def _read_csv_arrow(path: Path) -> pd.DataFrame | None:
    """The file's records (header first) as text columns, or None when Arrow refuses it: a record
    wider or narrower than the first, invalid UTF-8, no data, a field over its block size, or
    anything else it raises. Arrow keeps a blank-looking record that pandas skips (a line of
    spaces) only in a one-column file, which is refused here too. About 4× faster than pandas'
    reader plus the second pass (docs/algorithms/ingest.md)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    try:
        table = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(autogenerate_column_names=True),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                column_types=_ARROW_TEXT_COLUMNS,
                null_values=[],
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except (pa.ArrowException, OSError, ValueError):
        return None  # pandas reads it again and owns the error
    if table.num_columns < 2 or not all(pa.types.is_string(t) for t in table.schema.types):
        return None
    if _ends_inside_quotes(path, table.column(table.num_columns - 1)[-1].as_py()):
        return None
    cells = table.to_pandas()
    cells.columns = range(table.num_columns)
    return cells


def _ends_inside_quotes(path: Path, last_cell: str) -> bool:
    """Whether the file may end inside a quoted field (a file cut off mid-record): Arrow then
    takes everything to the end as the field's text, so a quote left open in a description
    swallowed the records after it and loaded without a word, where pandas stops with 'EOF
    inside string'. Such a field is the last record's last (a record cut short is refused for
    its width), opened by a quote after a comma and running to the end of the file, so the
    file ends with ``,"`` and the cell's text, its quotes doubled. True also when the file's
    end cannot be read (pandas' path reads it again and words the problem)."""
    tail = ('"' + last_cell.replace('"', '""')).encode("utf-8")
    n = len(tail) + 1
    end = bytearray()
    try:
        with _open(path, "rb") as stream:
            if not path.name.endswith(".gz"):
                stream.seek(max(0, stream.seek(0, os.SEEK_END) - n))
            while chunk := stream.read(1 << 20):
                end += chunk
                if len(end) > 2 * n:
                    del end[:-n]
    except (OSError, EOFError, zlib.error):
        return True
    return bytes(end[-n:]) == b"," + tail


# Arrow names the columns f0, f1, …: every one of them text, as pandas' dtype=str (a wider file
# gets inferred types past this and goes to pandas)
_ARROW_TEXT_COLUMNS = {f"f{i}": "string" for i in range(1024)}


def _read_csv_pandas(path: Path) -> pd.DataFrame:
    """Read a CSV with its header row as the first row of data, so that pandas neither takes the
    first column for an index when rows are one field longer than the header (a trailing comma
    would shift every value one column left) nor drops extra fields: any row longer than the
    header stops the parse, and the rows at fault are then found and reported."""
    try:
        cells = pd.read_csv(
            path,
            header=None,
            index_col=False,
            dtype=str,
            keep_default_na=False,
            na_values=[],
            encoding="utf-8",
            compression="infer",
        )
    except pd.errors.ParserError as exc:
        if "fields in line" in str(exc) and (problems := _rows_of_wrong_width(path)):
            raise IngestError(problems) from exc
        raise
    # pandas pads a short row with empty fields, so a short row ends in one: only a file with a
    # row ending in an empty field needs the second, streaming pass that tells a missing field
    # from an empty one (an auctions file always does: lost auctions have no paid price; about
    # 0.35 CPU s per 300,000 rows, docs/algorithms/ingest.md)
    if len(cells) > 1 and (cells.iloc[1:, -1] == "").any():
        if problems := _rows_of_wrong_width(path):
            raise IngestError(problems)
    return cells


def _rows_of_wrong_width(path: Path) -> list[Problem]:
    """The records (data records from 1, blank lines skipped as pandas skips them) with more, or
    fewer, fields than the header, found by a streaming pass of the csv module (one record in
    memory at a time; about 1 s per million auction rows). Empty when every record fits (the
    parser failed for another reason)."""
    limit = csv.field_size_limit(2**31 - 1)  # a long description is not an error here
    try:
        with _open(path, "rt", encoding="utf-8", newline="") as stream:
            records = (r for r in csv.reader(stream) if r and (len(r) > 1 or r[0].strip()))
            width = len(next(records, []))
            lengths = np.fromiter((len(r) for r in records), dtype=np.int64)
    finally:
        csv.field_size_limit(limit)
    long = (
        f"more fields than the {width} of the header row (a trailing comma, or an unquoted comma "
        "inside a field?); remove the extra fields or quote the field"
    )
    short = (
        f"fewer fields than the {width} of the header row (a missing comma?); write every "
        "field, an empty one as nothing between two commas"
    )
    return _rows_problem(str(path), lengths > width, long) + _rows_problem(
        str(path), lengths < width, short
    )


def _open(path: Path, mode: str, **kwargs):
    """Open a table file for a second, streaming pass, through gzip when it is ``.gz``."""
    return (gzip.open if path.name.endswith(".gz") else open)(path, mode, **kwargs)


def _header_name(name: object) -> str:
    return "" if name is None or (isinstance(name, float) and np.isnan(name)) else str(name).strip()


def _not_utf8(path: Path, exc: UnicodeDecodeError) -> str:
    """Where a CSV stops being UTF-8: the physical line (from 1, the header is line 1) and the
    byte, found by a second streaming pass over the file (one line in memory at a time)."""
    with _open(path, "rb") as stream:
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
    frame = frame.reset_index(drop=True)  # rows by position, whatever index the caller's has
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
