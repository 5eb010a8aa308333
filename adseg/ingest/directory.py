"""Reading a folder of ingest files: :func:`find_table_files` (one file per table, and the files
that look meant for a table but would be skipped) and :func:`read_directory` (read and validate
every table, check advertiser ids across files)."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import numpy as np
import pandas as pd

from adseg.ingest.batch import (
    COLUMNS,
    SUFFIXES,
    TABLES,
    IngestBatch,
    IngestError,
    Problem,
    _rows_problem,
)
from adseg.ingest.chunked import scan_chunked, streams
from adseg.ingest.readers import read_table_file
from adseg.ingest.validate import _id_ok, validate_advertisers, validate_auctions, validate_delivery


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
    IngestError listing every problem found (across all files) otherwise.

    A large auctions file (``adseg.ingest.chunked.streams``) is validated chunk by chunk and
    returned as a :class:`adseg.ingest.chunked.ChunkedTable` that the write reads again; every
    other table is held whole. Cost: O(rows) time; memory ≈ 1 KiB per row of the tables held
    whole and of one chunk, plus 9 bytes per row of a chunked file."""
    files = find_table_files(directory)
    problems: list[Problem] = []
    batch = IngestBatch(files=files)
    raw = {}
    validators = {
        "advertisers": validate_advertisers,
        "auctions": validate_auctions,
        "delivery": validate_delivery,
    }
    chunked = [t for t, path in files.items() if streams(t, path)]
    for table, path in files.items():
        if table in chunked:
            continue
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

    def unknown(ids: pd.Series) -> np.ndarray:
        # an empty or over-long id is reported as such already, not again as unknown
        return ~ids.isin(known).to_numpy() & _id_ok(ids)

    for table in ("auctions", "delivery"):
        frame = getattr(batch, table)
        if frame is not None and "advertiser_id" in frame:
            problems += _rows_problem(str(files[table]), unknown(frame["advertiser_id"]), _UNKNOWN)
    for table in chunked:  # after the others: their problems come first, as they did
        problems += _read_chunked(batch, table, files[table], validators[table], unknown)
    if problems:
        raise IngestError(problems)
    return batch


_UNKNOWN = "unknown advertiser_id"


def _read_chunked(batch: IngestBatch, table: str, path: Path, validator, unknown) -> list[Problem]:
    """Validate a large table file chunk by chunk and set it on ``batch`` as a ChunkedTable;
    a file Arrow's streaming reader refuses is read whole (as a small one). Returns the
    problems."""
    chunked, problems = scan_chunked(table, path, validator, unknown)
    if chunked is not None or problems:
        setattr(batch, table, chunked)
        return problems
    try:
        frame = read_table_file(path)
    except IngestError as exc:
        return exc.problems
    except pd.errors.EmptyDataError:
        columns = ", ".join(COLUMNS[table])
        return [Problem(str(path), f"the file is empty; expected a header row: {columns}")]
    except Exception as exc:  # noqa: BLE001 — unreadable file: say which and why
        return [Problem(str(path), f"cannot be read: {exc}")]
    typed, problems = validator(frame, str(path))
    setattr(batch, table, typed)
    if typed is not None and "advertiser_id" in typed:
        problems += _rows_problem(str(path), unknown(typed["advertiser_id"]), _UNKNOWN)
    return problems
