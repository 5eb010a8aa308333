"""SQLAlchemy 2.0 typed models of the store.

Money and prices are stored as integer *micros* (1e-6 currency units): exact, portable across
SQLite and PostgreSQL, and fast to read back into float64 frames (a Numeric column would come back
as Python Decimals, one object per value). eCPM values are per 1000 impressions, as exchanges quote
them; spend is in currency units.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Advertiser(Base):
    """An advertiser: stable external id, name, free-text description (the text view)."""

    __tablename__ = "advertisers"

    advertiser_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(512))
    description: Mapped[str] = mapped_column(Text, default="")
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_now)


class Auction(Base):
    """One logged auction of an advertiser. ``market_price_micros`` is the minimum eCPM bid that
    would have won; ``paid_micros`` is the eCPM paid, present iff ``won``."""

    __tablename__ = "auctions"

    auction_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    advertiser_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("advertisers.advertiser_id", ondelete="CASCADE")
    )
    ts: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    bid_micros: Mapped[int] = mapped_column(BigInteger)
    market_price_micros: Mapped[int] = mapped_column(BigInteger)
    won: Mapped[bool] = mapped_column(Boolean)
    paid_micros: Mapped[int | None] = mapped_column(BigInteger, nullable=True)

    __table_args__ = (
        # every read selects a time window; (advertiser_id, ts) served no query and halved
        # ingest (dropped in revision 0005)
        Index("ix_auctions_ts", "ts"),
        CheckConstraint("bid_micros >= 0 AND market_price_micros >= 0", name="prices_nonnegative"),
        CheckConstraint(
            "(won AND paid_micros IS NOT NULL AND paid_micros >= 0)"
            " OR (NOT won AND paid_micros IS NULL)",
            name="paid_iff_won",
        ),
    )


class Delivery(Base):
    """What an advertiser got on one day: supply (bid requests), its bid, impressions, spend."""

    __tablename__ = "delivery"

    advertiser_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("advertisers.advertiser_id", ondelete="CASCADE"), primary_key=True
    )
    date: Mapped[dt.date] = mapped_column(Date, primary_key=True)
    bid_requests: Mapped[int] = mapped_column(BigInteger)
    bid_micros: Mapped[int] = mapped_column(BigInteger)
    impressions: Mapped[int] = mapped_column(BigInteger)
    spend_micros: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (
        Index("ix_delivery_date", "date"),
        CheckConstraint(
            "bid_requests >= impressions AND impressions >= 0", name="impressions_within_supply"
        ),
        CheckConstraint("bid_micros >= 0 AND spend_micros >= 0", name="money_nonnegative"),
    )


class Run(Base):
    """One pipeline run (or one stage run from the CLI): what ran, with which parameters, how it
    ended. Results of a run are visible to readers only once ``status`` is 'completed'."""

    __tablename__ = "runs"

    run_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16), default="running")
    started_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_now)
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    train_start: Mapped[dt.date | None] = mapped_column(Date)
    train_end: Mapped[dt.date | None] = mapped_column(Date)
    eval_start: Mapped[dt.date | None] = mapped_column(Date)
    eval_end: Mapped[dt.date | None] = mapped_column(Date)
    seed: Mapped[int | None] = mapped_column(BigInteger)
    parameters: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    code_version: Mapped[str] = mapped_column(String(64), default="")
    timings: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    error: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        CheckConstraint("status IN ('running', 'completed', 'failed')", name="status_known"),
        Index("ix_runs_status_started", "status", "started_at"),
    )


# --- results tables (migration 0002) -------------------------------------------------------


class RunLock(Base):
    """A named lock row: holding it means a run of that kind is in progress. Inserted and deleted
    in their own short transactions, so a second nightly sees it and refuses."""

    __tablename__ = "run_locks"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    run_id: Mapped[int | None] = mapped_column(Integer)
    holder: Mapped[str] = mapped_column(String(256))
    acquired_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_now)


class BaseClusteringColumn(Base):
    """One base clustering of a run: its view, parameter and summary."""

    __tablename__ = "base_clustering_columns"

    run_id: Mapped[int] = mapped_column(
        ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True
    )
    column_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    view: Mapped[str] = mapped_column(String(32))
    parameter: Mapped[str] = mapped_column(String(64))
    n_clusters: Mapped[int] = mapped_column(Integer)
    n_excluded: Mapped[int] = mapped_column(Integer)
    seconds: Mapped[float | None] = mapped_column(Float)


class BaseClusteringLabel(Base):
    """(run, column, advertiser) → label; -1 = left out of that view."""

    __tablename__ = "base_clustering_labels"

    run_id: Mapped[int] = mapped_column(
        ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True
    )
    column_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    advertiser_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    label: Mapped[int] = mapped_column(Integer)


class Segment(Base):
    """(run, source, advertiser) → segment; source is a fuser name, a single view or a reference."""

    __tablename__ = "segments"

    run_id: Mapped[int] = mapped_column(
        ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True
    )
    source: Mapped[str] = mapped_column(String(32), primary_key=True)
    advertiser_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    segment: Mapped[int] = mapped_column(Integer)


class SegmentCdf(Base):
    """A segment's c.d.f. (win rate or eCPM cost) tabulated on a bid grid (eCPM)."""

    __tablename__ = "segment_cdfs"

    run_id: Mapped[int] = mapped_column(
        ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True
    )
    source: Mapped[str] = mapped_column(String(32), primary_key=True)
    segment: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    bid_ecpm: Mapped[float] = mapped_column(Float, primary_key=True)
    cdf: Mapped[float] = mapped_column(Float)


class Forecast(Base):
    """Per advertiser forecast and actual over the evaluation window, per source and method."""

    __tablename__ = "forecasts"

    run_id: Mapped[int] = mapped_column(
        ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True
    )
    source: Mapped[str] = mapped_column(String(32), primary_key=True)
    method: Mapped[str] = mapped_column(String(16), primary_key=True)
    supply_mode: Mapped[str] = mapped_column(String(16), primary_key=True)
    advertiser_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    # NULL: no forecast (no supply history for --supply forecast; migration 0004)
    impressions_forecast: Mapped[float | None] = mapped_column(Float)
    impressions_actual: Mapped[float] = mapped_column(Float)
    spend_forecast: Mapped[float | None] = mapped_column(Float)
    spend_actual: Mapped[float] = mapped_column(Float)


class Metric(Base):
    """A scored source: MAPE of impressions and spend and the counts behind them."""

    __tablename__ = "metrics"

    run_id: Mapped[int] = mapped_column(
        ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True
    )
    source: Mapped[str] = mapped_column(String(32), primary_key=True)
    method: Mapped[str] = mapped_column(String(16), primary_key=True)
    supply_mode: Mapped[str] = mapped_column(String(16), primary_key=True)
    impressions_mape: Mapped[float | None] = mapped_column(Float)
    spend_mape: Mapped[float | None] = mapped_column(Float)
    n_advertisers: Mapped[int] = mapped_column(Integer)
    n_segments: Mapped[int] = mapped_column(Integer)
    n_zero_impressions: Mapped[int] = mapped_column(Integer, default=0)
    n_zero_spend: Mapped[int] = mapped_column(Integer, default=0)
    n_missing_forecast: Mapped[int] = mapped_column(Integer, default=0)
    kappa_win: Mapped[float | None] = mapped_column(Float)
    kappa_cost: Mapped[float | None] = mapped_column(Float)
