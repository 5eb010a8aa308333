"""Write a validated ingest batch: upserts on natural keys, in chunks, in ONE transaction."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pandas as pd
from sqlalchemy import Engine, Table, func, select
from sqlalchemy.dialects import postgresql, sqlite

from adseg.ingest import KEYS, TABLES, IngestBatch
from adseg.store.models import Advertiser, Auction, Delivery

CHUNK_ROWS = 20_000
_MODELS = {"advertisers": Advertiser, "auctions": Auction, "delivery": Delivery}

Progress = Callable[[str, int], None]
"""progress(table, rows_done_in_this_chunk)"""


@dataclass(frozen=True)
class TableSummary:
    table: str
    rows: int
    inserted: int
    updated: int


@dataclass(frozen=True)
class IngestSummary:
    tables: tuple[TableSummary, ...]
    seconds: float

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables)


def known_advertiser_ids(engine: Engine) -> set[str]:
    """Every advertiser id the database holds."""
    with engine.connect() as conn:
        return set(conn.scalars(select(Advertiser.advertiser_id)))


def write_batch(engine: Engine, batch: IngestBatch, progress: Progress | None = None):
    """Upsert every table of the batch in one transaction; any error rolls everything back.

    Inserted vs updated counts come from the row count before and after each table (keys are
    unique inside a validated file, so every row is either new or an update).
    """
    t0 = time.perf_counter()
    summaries = []
    with engine.begin() as conn:
        for table in TABLES:
            frame = getattr(batch, table)
            if frame is None:
                continue
            model_table: Table = _MODELS[table].__table__
            before = conn.scalar(select(func.count()).select_from(model_table))
            stmt = _upsert(conn.dialect.name, model_table, KEYS[table])
            for chunk in _records(frame, table):
                conn.execute(stmt, chunk)
                if progress:
                    progress(table, len(chunk))
            after = conn.scalar(select(func.count()).select_from(model_table))
            inserted = after - before
            summaries.append(TableSummary(table, len(frame), inserted, len(frame) - inserted))
    return IngestSummary(tuple(summaries), time.perf_counter() - t0)


def _upsert(dialect: str, table: Table, keys: tuple[str, ...]):
    if dialect == "sqlite":
        ins = sqlite.insert(table)
    elif dialect == "postgresql":
        ins = postgresql.insert(table)
    else:
        raise NotImplementedError(f"ingest supports SQLite and PostgreSQL, not {dialect}.")
    updates = {c.name: ins.excluded[c.name] for c in table.columns if c.name not in keys}
    return ins.on_conflict_do_update(index_elements=list(keys), set_=updates)


def _records(frame: pd.DataFrame, table: str) -> Iterator[list[dict]]:
    frame = frame.copy()
    if table == "advertisers":
        frame["updated_at"] = dt.datetime.now(dt.UTC)
    if table == "auctions":
        frame["ts"] = frame["ts"].dt.to_pydatetime()
        frame["paid_micros"] = (
            frame["paid_micros"].astype(object).where(frame["paid_micros"].notna(), None)
        )
    for start in range(0, len(frame), CHUNK_ROWS):
        part = frame.iloc[start : start + CHUNK_ROWS]
        yield part.to_dict(orient="records")
