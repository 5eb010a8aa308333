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
