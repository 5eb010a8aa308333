"""Writing a simulated marketplace as ingest files (the io part of ``adseg.simulate``).

``write_marketplace(market, out_dir)`` writes ``advertisers``, ``auctions`` and ``delivery``
(``.csv.gz``, or ``.csv``), ``truth.csv`` and ``config.json``, byte-identical for the same
marketplace, all files or none. The auctions are formatted and compressed in pieces of
``_CSV_CHUNK_ROWS`` rows and streamed to disk. Cost: O(rows) time (≈ 10 µs per auction row,
mostly string formatting and deflate); memory ≈ 850 bytes per auction row of one piece
(≈ 0.4 GiB), not of the file.
"""

from __future__ import annotations

import gzip
import io
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from adseg.simulate.config import MarketplaceConfig
from adseg.simulate.market import Marketplace

_CSV_CHUNK_ROWS = 500_000
"""Auction rows formatted at a time while writing (≈ 850 bytes each while formatted)."""


def _decimal(ticks: np.ndarray, decimals: int) -> pd.Series:
    """Exact decimal strings of non-negative integer tick counts ("" for negative = missing)."""
    t = pd.Series(np.asarray(ticks, dtype=np.int64))
    if decimals == 0:
        out = t.astype(str)
    else:
        scale = 10**decimals
        out = (t // scale).astype(str) + "." + (t % scale).astype(str).str.zfill(decimals)
    return out.where(t >= 0, "")


def _auctions_for_csv(auctions: pd.DataFrame, dec: int) -> pd.DataFrame:
    """An ``auctions`` frame (or a piece of it) string-formatted: prices from integer ticks
    (exact), timestamps ISO-8601 with a Z, booleans as true/false."""
    a = auctions
    # Prices are multiples of the tick, so rounding recovers the integer tick counts exactly.
    scale = 10**dec
    ticks = {
        "bid": np.round(a["bid_ecpm"].to_numpy() * scale).astype(np.int64),
        "market_price": np.round(a["market_price_ecpm"].to_numpy() * scale).astype(np.int64),
        "paid": np.round(a["paid_ecpm"].fillna(-1.0 / scale).to_numpy() * scale).astype(np.int64),
    }
    return pd.DataFrame(
        {
            "auction_id": a["auction_id"].to_numpy(),
            "advertiser_id": a["advertiser_id"].to_numpy(),
            "ts": a["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ").to_numpy(),
            "bid_ecpm": _decimal(ticks["bid"], dec).to_numpy(),
            "market_price_ecpm": _decimal(ticks["market_price"], dec).to_numpy(),
            "won": np.where(a["won"].to_numpy(), "true", "false"),
            "paid_ecpm": _decimal(ticks["paid"], dec).to_numpy(),
        }
    )


def _frames_for_csv(market: Marketplace) -> dict[str, pd.DataFrame]:
    """String-formatted frames of the small tables (advertisers, delivery: spend with 6
    decimals, truth); the auctions go by :func:`_auction_csv_pieces`."""
    dec = int(market.config.price_decimals)
    d = market.delivery
    delivery = d.assign(
        bid_ecpm=_decimal(np.round(d["bid_ecpm"].to_numpy() * 10**dec), dec).to_numpy(),
        spend=d["spend"].map("{:.6f}".format),
    )
    truth = market.truth.copy()
    for name in truth.columns:
        if truth[name].dtype == np.float64:
            truth[name] = truth[name].map(lambda v: "" if np.isnan(v) else f"{v:.10g}")
    return {"advertisers": market.advertisers, "delivery": delivery, "truth": truth}


def _auction_csv_pieces(market: Marketplace, rows: int | None = None) -> Iterator[bytes]:
    """The auctions CSV (header first) as consecutive byte pieces of at most ``rows`` rows each:
    their concatenation is the whole frame's ``to_csv``. Memory: one piece (≈ 850 bytes a row;
    ``rows`` defaults to ``_CSV_CHUNK_ROWS``)."""
    dec = int(market.config.price_decimals)
    pieces = market.auction_chunks(_CSV_CHUNK_ROWS if rows is None else rows)
    first = True
    for piece in pieces:
        yield _csv_bytes(_auctions_for_csv(piece, dec), header=first)
        first = False
    if first:  # no rows: the header alone
        yield _csv_bytes(_auctions_for_csv(market.auctions, dec))


# Fields added with the second generative family: config.json names them only where they differ
# from their defaults, so the default family's config.json keeps its bytes (a missing field
# rebuilds as its default).
_FAMILY_FIELDS = ("price_family", "segment_size_concentration")


def _config_record(config: MarketplaceConfig) -> dict[str, object]:
    """The configuration as config.json records it: every field, but the family fields only
    where they differ from MarketplaceConfig's defaults."""
    record = asdict(config)
    defaults = MarketplaceConfig()
    for name in _FAMILY_FIELDS:
        if record[name] == getattr(defaults, name):
            del record[name]
    return record


def _csv_bytes(frame: pd.DataFrame, header: bool = True) -> bytes:
    buf = io.StringIO()
    frame.to_csv(buf, index=False, header=header, lineterminator="\n")
    return buf.getvalue().encode("utf-8")


def _gzipped(pieces: Iterable[bytes]) -> Iterator[bytes]:
    """The gzip stream of the concatenated ``pieces`` (mtime 0, no file name, level 6), piece by
    piece: the same bytes as compressing their concatenation at once (deflate's output does not
    depend on how its input is split when nothing is flushed)."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, filename="", compresslevel=6) as gz:
        for piece in pieces:
            gz.write(piece)
            yield _drain(buffer)
    yield _drain(buffer)


def _drain(buffer: io.BytesIO) -> bytes:
    """What ``buffer`` holds, emptied."""
    data = buffer.getvalue()
    buffer.seek(0)
    buffer.truncate()
    return data


def write_marketplace(
    market: Marketplace, out_dir: str | Path, *, compress: bool = True
) -> dict[str, Path]:
    """Write the marketplace in the ingest format (DESIGN.md §3) under ``out_dir`` (created).

    Files: ``advertisers.csv.gz``, ``auctions.csv.gz``, ``delivery.csv.gz`` and ``truth.csv``
    (uncompressed: it is for people; the pipeline never reads it). ``compress=False`` writes the
    three ingest files as plain ``.csv`` (the tiny hand-checkable sample). Byte-identical for the
    same marketplace: gzip with mtime 0 and no file name, exact price strings, stable row order.
    Also writes ``config.json`` with the generating configuration. Returns {table: path}.
    """
    if not isinstance(market, Marketplace):
        raise TypeError(f"market must be a Marketplace; got {type(market).__name__}.")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    frames = _frames_for_csv(market)
    pieces = {
        "advertisers": iter([_csv_bytes(frames["advertisers"])]),
        "auctions": _auction_csv_pieces(market),
        "delivery": iter([_csv_bytes(frames["delivery"])]),
    }
    contents: dict[str, tuple[Path, Iterable[bytes]]] = {}
    for table in ("advertisers", "auctions", "delivery"):
        if compress:
            contents[table] = (out / f"{table}.csv.gz", _gzipped(pieces[table]))
        else:
            contents[table] = (out / f"{table}.csv", pieces[table])
    contents["truth"] = (out / "truth.csv", [_csv_bytes(frames["truth"])])
    text = json.dumps(_config_record(market.config), indent=2, ensure_ascii=False) + "\n"
    contents["config"] = (out / "config.json", [text.encode("utf-8")])
    _write_all_or_none({path: data for path, data in contents.values()})
    return {name: path for name, (path, _) in contents.items()}


def _write_all_or_none(files: dict[Path, Iterable[bytes]]) -> None:
    """Write every file (its content given as byte pieces, written as they come) under a
    temporary name beside it, then rename them all into place with stop signals held back: a
    stop or a full disk while writing leaves the folder as it was (no truncated file that a
    later ingest, or `make demo`, would take for data), not a mix of old and new tables. A
    symbolic link is written through (its target is replaced)."""
    from adseg.interrupts import signals_deferred
    from adseg.tempfiles import create_beside

    targets = {Path(os.path.realpath(path)): data for path, data in files.items()}
    partial: dict[Path, Path] = {}
    try:
        for path, data in targets.items():
            fd, partial[path] = create_beside(path)
            with os.fdopen(fd, "wb") as stream:
                for piece in data:
                    stream.write(piece)
        with signals_deferred():
            for path, temporary in partial.items():
                os.replace(temporary, path)
    finally:
        for temporary in partial.values():
            temporary.unlink(missing_ok=True)
