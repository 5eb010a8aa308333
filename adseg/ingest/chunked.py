"""Large CSV tables read in chunks: :func:`scan_chunked` validates one chunk at a time and
returns a :class:`ChunkedTable`, which the write reads again, chunk by chunk.

A table file of at least ``STREAM_MIN_BYTES`` (a regular CSV or CSV.gz file: the auctions of a
marketplace of 100,000 advertisers are ~24 M rows) is never held whole: the first pass checks
every chunk of ``CHUNK_ROWS`` records with the same validator as a small file, the problems'
rows counted over the whole file, and keeps only a 64-bit hash of each key (8 bytes a row) for
the duplicate-key check across chunks (exact: rows whose hashes collide are compared by their
text in a second pass over just those rows). The write reads the file again and validates each
chunk once more (a file changed in between fails the ingest, which writes nothing). A file
Arrow's streaming reader refuses (rows of the wrong width, text that is not UTF-8, a quote left
open) is read whole by :func:`adseg.ingest.readers.read_table_file`, whose slower path words
the problem.

Cost per pass: O(rows) time (Arrow's parser plus the validators, ≈ 3 µs a row on the 2-core VM);
memory ≈ 1 KiB per row of one chunk (≈ 0.5 GiB at 500,000 rows) plus 9 bytes per row of the file
(the key hashes and their valid flags).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from adseg.ingest.batch import KEYS, MAX_ROWS_SHOWN, IngestError, Problem, _rows_problem

CHUNK_ROWS = 500_000
"""Records per chunk: bounds the memory of a read (≈ 1 KiB a record while it is validated)."""
STREAM_MIN_BYTES = 16 * 2**20
"""Files at least this large (as stored, compressed or not: ≈ 1.3 M auction rows gzipped, ≈ 230,000
plain) are read in chunks; a smaller one is held whole (≈ 0.7 KiB a row at its peak)."""
CHUNKED_TABLES = ("auctions",)
"""The tables that can be this large (delivery: advertisers × days; advertisers: one row each)."""

Validator = Callable[[pd.DataFrame, str], tuple[pd.DataFrame | None, list[Problem]]]


class _NotStreamable(Exception):
    """Arrow's streaming reader refused the file: read it whole, by the path that words why."""


def streams(table: str, path: Path) -> bool:
    """Whether ``table``'s file ``path`` is read in chunks: a regular CSV or CSV.gz file of at
    least ``STREAM_MIN_BYTES`` (a named pipe cannot be read twice; Parquet is read whole)."""
    path = Path(path)
    return (
        table in CHUNKED_TABLES
        and path.is_file()
        and not path.name.endswith(".parquet")
        and path.stat().st_size >= STREAM_MIN_BYTES
    )


def _csv_chunks(path: Path, rows: int) -> Iterator[tuple[int, pd.DataFrame]]:
    """(offset, frame of text) for consecutive chunks of at most ``rows`` data records of a CSV
    file (``offset``: the records before the chunk), header names stripped as
    ``read_table_file`` strips them. Raises _NotStreamable where Arrow refuses the file (the
    whole-file path then reads it and words the problem)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    from adseg.ingest.readers import _ends_inside_quotes, _header_name, arrow_csv_options

    try:
        reader = pacsv.open_csv(path, **arrow_csv_options(block_size=8 << 20))
        header: list[str] | None = None
        pending: list = []
        n_pending = 0
        offset = 0
        last_cell = None

        def frame_of(batches: list) -> pd.DataFrame:
            frame = pa.Table.from_batches(batches).to_pandas()
            frame.columns = header
            return frame

        for batch in reader:
            if batch.num_columns < 2 or not all(pa.types.is_string(t) for t in batch.schema.types):
                raise _NotStreamable
            if batch.num_rows == 0:
                continue
            if header is None:
                header = [_header_name(c) for c in batch.slice(0, 1).to_pylist()[0].values()]
                batch = batch.slice(1)
            if batch.num_rows:
                last_cell = batch.column(batch.num_columns - 1)[-1].as_py()
            while batch.num_rows:
                take = min(rows - n_pending, batch.num_rows)
                pending.append(batch.slice(0, take))
                n_pending += take
                batch = batch.slice(take)
                if n_pending == rows:
                    yield offset, frame_of(pending)
                    offset += n_pending
                    pending, n_pending = [], 0
        if header is None:
            raise _NotStreamable  # no data: the whole-file path says the file is empty
        if last_cell is not None and _ends_inside_quotes(path, last_cell):
            raise _NotStreamable
        if n_pending or offset == 0:
            yield offset, frame_of(pending) if pending else pd.DataFrame(columns=header)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _NotStreamable from exc


@dataclass(frozen=True)
class ChunkedTable:
    """A validated table file too large to hold: ``len`` is its rows; :meth:`typed_chunks`
    reads it again and yields its typed frames, chunk by chunk, as the validator returns them
    (raising IngestError where the file no longer validates: it changed since the scan)."""

    table: str
    path: Path
    n_rows: int
    validator: Validator
    chunk_rows: int = CHUNK_ROWS

    def __len__(self) -> int:
        return self.n_rows

    def typed_chunks(self) -> Iterator[pd.DataFrame]:
        """Typed frames of consecutive chunks (index from 0 in each). O(rows) time; memory of
        one chunk."""
        seen = 0
        try:
            for offset, frame in _csv_chunks(self.path, self.chunk_rows):
                typed, problems = self.validator(frame, str(self.path))
                if problems or typed is None:
                    raise IngestError(_merged({}, problems, offset))
                seen = offset + len(frame)
                yield typed
        except _NotStreamable:
            raise IngestError([Problem(str(self.path), _CHANGED)]) from None
        if seen != self.n_rows:
            raise IngestError([Problem(str(self.path), _CHANGED)])


_CHANGED = "the file changed while it was being ingested (its rows differ from the first read)"


def _duplicate_rule(table: str) -> str:
    return f"duplicate key ({', '.join(KEYS[table])}) already seen in this file"


def _merged(acc: dict, problems: list[Problem], offset: int) -> list[Problem]:
    """Add a chunk's ``problems`` (rows counted in the chunk) to ``acc`` {(file, rule): Problem}
    with rows counted in the file: one problem per rule, its first rows and the total count.
    Returns the problems so far, in the order their rules were first met."""
    for p in problems:
        rows = tuple(r + offset for r in p.rows)
        old = acc.get((p.file, p.rule))
        if old is None:
            acc[(p.file, p.rule)] = Problem(p.file, p.rule, rows, p.n_rows)
        else:
            shown = (old.rows + rows)[:MAX_ROWS_SHOWN]
            acc[(p.file, p.rule)] = Problem(p.file, p.rule, shown, old.n_rows + p.n_rows)
    return list(acc.values())


def scan_chunked(
    table: str,
    path: Path,
    validator: Validator,
    known: Callable[[pd.Series], np.ndarray] | None = None,
) -> tuple[ChunkedTable | None, list[Problem]]:
    """Validate ``path`` chunk by chunk: the validator's problems (rows counted over the file),
    duplicate keys across chunks, and, with ``known``, ``unknown advertiser_id`` for the rows
    whose id it finds unknown (``known(ids) -> (n,) bool``, True for an unknown, valid id).
    Returns (the ChunkedTable, problems); (None, []) when Arrow's streaming reader refuses the
    file (read it whole). Cost: one pass; memory: one chunk plus 9 bytes a row."""
    from adseg.ingest.validate import _id_ok

    file = str(path)
    duplicate = _duplicate_rule(table)
    key = KEYS[table][0]  # the chunked tables have one key column
    acc: dict = {}
    unknown_acc: dict = {}
    hashes, valid = [], []
    n_rows = 0
    try:
        for offset, frame in _csv_chunks(path, CHUNK_ROWS):
            typed, problems = validator(frame, file)
            if typed is None:  # the header is wrong (or repeated in this chunk): stop here
                return None, _merged({}, problems, offset)
            _merged(acc, [p for p in problems if p.rule != duplicate], offset)
            ids = typed[key]
            ok = _id_ok(ids)
            hashes.append(pd.util.hash_array(ids.to_numpy(dtype=object)))
            valid.append(ok)
            if known is not None:
                found = _rows_problem(file, known(typed["advertiser_id"]), _UNKNOWN)
                _merged(unknown_acc, found, offset)
            n_rows = offset + len(frame)
    except _NotStreamable:
        return None, []
    dup = _duplicates(np.concatenate(hashes), np.concatenate(valid), path, key)
    problems = list(acc.values()) + _rows_problem(file, dup, duplicate)
    problems += list(unknown_acc.values())
    return ChunkedTable(table, Path(path), n_rows, validator, CHUNK_ROWS), problems


_UNKNOWN = "unknown advertiser_id"


def _duplicates(hashes: np.ndarray, valid: np.ndarray, path: Path, key: str) -> np.ndarray:
    """(n,) bool: the valid rows whose key repeats an earlier valid row's. Rows whose 64-bit
    hash repeats one are candidates; their keys are read again (only theirs) and compared as
    text, so a hash collision is never taken for a duplicate. O(n log n)."""
    dup = np.zeros(hashes.size, dtype=bool)
    rows = np.flatnonzero(valid)
    order = np.argsort(hashes[rows], kind="stable")
    sorted_hashes = hashes[rows][order]
    repeats = np.flatnonzero(sorted_hashes[1:] == sorted_hashes[:-1]) + 1
    if repeats.size == 0:
        return dup
    suspect = np.isin(hashes, np.unique(sorted_hashes[repeats])) & valid
    found_rows, found_ids = [], []
    for offset, frame in _csv_chunks(path, CHUNK_ROWS):
        local = np.flatnonzero(suspect[offset : offset + len(frame)])
        found_rows.append(local + offset)
        found_ids.append(frame[key].to_numpy(dtype=object)[local])
    from adseg.ingest.values import _text

    ids = _text(pd.Series(np.concatenate(found_ids), dtype=object))
    dup[np.concatenate(found_rows)] = ids.duplicated(keep="first").to_numpy()
    return dup
