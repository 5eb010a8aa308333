"""Reading one table file into a frame of text (CSV, CSV.gz) or of stored types (Parquet):
:func:`read_table_file`. CSV goes through Arrow's reader when it accepts the file, else pandas',
whose path finds and names what is wrong (rows of the wrong width, text that is not UTF-8);
Parquet columns' types are checked before conversion. Measurements: docs/algorithms/ingest.md.
"""

from __future__ import annotations

import csv
import gzip
import os
import shutil
import tempfile
import zlib
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from adseg.ingest.batch import IngestError, Problem, _rows_problem


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


def arrow_csv_options(**read) -> dict:
    """pyarrow.csv reader options for an ingest file: every column as text (validation types
    it), no NA spellings, quoted newlines allowed; ``read``: more ReadOptions (block_size)."""
    import pyarrow.csv as pacsv

    return dict(
        read_options=pacsv.ReadOptions(autogenerate_column_names=True, **read),
        parse_options=pacsv.ParseOptions(newlines_in_values=True),
        convert_options=pacsv.ConvertOptions(
            column_types=_ARROW_TEXT_COLUMNS,
            null_values=[],
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        ),
    )


def _read_csv_arrow(path: Path) -> pd.DataFrame | None:
    """The file's records (header first) as text columns, or None when Arrow refuses it: a record
    wider or narrower than the first, invalid UTF-8, no data, a field over its block size, or
    anything else it raises. Arrow keeps a blank-looking record that pandas skips (a line of
    spaces) only in a one-column file, which is refused here too. About 4× faster than pandas'
    reader plus the second pass (docs/algorithms/ingest.md)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    try:
        table = pacsv.read_csv(path, **arrow_csv_options())
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
