"""Read and validate ingest files (CSV, CSV.gz or Parquet; one file per table) into typed frames.

Pure: no SQL here. ``adseg.store.load`` writes a validated batch in one transaction. The tables
and their columns (prices in eCPM, spend in currency) are in docs/data-format.md. Row numbers in
error messages count data records from 1 (the header is not a row); rows are taken by position
(a Parquet file's stored index is dropped).

Modules: ``directory`` (find the table files, :func:`read_directory`), ``readers`` (one file to a
frame), ``validate`` (each table's checks), ``values`` (typed column parsers), ``batch`` (the
tables, :class:`IngestBatch`, :class:`IngestError`).
"""

from __future__ import annotations

from adseg.ingest.batch import (
    COLUMNS,
    KEYS,
    SUFFIXES,
    TABLES,
    IngestBatch,
    IngestError,
    Problem,
)
from adseg.ingest.directory import find_table_files, read_directory
from adseg.ingest.readers import read_table_file
from adseg.ingest.validate import (
    MAX_ID_LENGTH,
    MAX_NAME_LENGTH,
    validate_advertisers,
    validate_auctions,
    validate_delivery,
)
from adseg.ingest.values import DATE_RANGE, MAX_AMOUNT, MAX_COUNT

__all__ = [
    "COLUMNS",
    "DATE_RANGE",
    "KEYS",
    "MAX_AMOUNT",
    "MAX_COUNT",
    "MAX_ID_LENGTH",
    "MAX_NAME_LENGTH",
    "SUFFIXES",
    "TABLES",
    "IngestBatch",
    "IngestError",
    "Problem",
    "find_table_files",
    "read_directory",
    "read_table_file",
    "validate_advertisers",
    "validate_auctions",
    "validate_delivery",
]
