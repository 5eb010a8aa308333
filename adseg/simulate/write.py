"""Writing a simulated marketplace as ingest files (the io part of ``adseg.simulate``).

``write_marketplace(market, out_dir)`` writes ``advertisers``, ``auctions`` and ``delivery``
(``.csv.gz``, or ``.csv``), ``truth.csv`` and ``config.json``, byte-identical for the same
marketplace, all files or none. Cost: ≈ 850 bytes of memory per auction row while formatting.
"""

from __future__ import annotations

import gzip
import io
import json
import os
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from adseg.simulate.config import MarketplaceConfig
from adseg.simulate.market import Marketplace


def _decimal(ticks: np.ndarray, decimals: int) -> pd.Series:
    """Exact decimal strings of non-negative integer tick counts ("" for negative = missing)."""
    t = pd.Series(np.asarray(ticks, dtype=np.int64))
    if decimals == 0:
        out = t.astype(str)
    else:
        scale = 10**decimals
        out = (t // scale).astype(str) + "." + (t % scale).astype(str).str.zfill(decimals)
    return out.where(t >= 0, "")


def _frames_for_csv(market: Marketplace) -> dict[str, pd.DataFrame]:
    """String-formatted frames: prices from integer ticks (exact), spend with 6 decimals,
    timestamps ISO-8601 with a Z, booleans as true/false."""
    dec = int(market.config.price_decimals)
    a = market.auctions
    # Prices are multiples of the tick, so rounding recovers the integer tick counts exactly.
    scale = 10**dec
    ticks = {
        "bid": np.round(a["bid_ecpm"].to_numpy() * scale).astype(np.int64),
        "market_price": np.round(a["market_price_ecpm"].to_numpy() * scale).astype(np.int64),
        "paid": np.round(a["paid_ecpm"].fillna(-1.0 / scale).to_numpy() * scale).astype(np.int64),
    }
    auctions = pd.DataFrame(
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
    d = market.delivery
    delivery = d.assign(
        bid_ecpm=_decimal(np.round(d["bid_ecpm"].to_numpy() * 10**dec), dec).to_numpy(),
        spend=d["spend"].map("{:.6f}".format),
    )
    truth = market.truth.copy()
    for name in truth.columns:
        if truth[name].dtype == np.float64:
            truth[name] = truth[name].map(lambda v: "" if np.isnan(v) else f"{v:.10g}")
    return {
        "advertisers": market.advertisers,
        "auctions": auctions,
        "delivery": delivery,
        "truth": truth,
    }


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


def _csv_bytes(frame: pd.DataFrame) -> bytes:
    buf = io.StringIO()
    frame.to_csv(buf, index=False, lineterminator="\n")
    return buf.getvalue().encode("utf-8")


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
    contents: dict[str, tuple[Path, bytes]] = {}
    for table in ("advertisers", "auctions", "delivery"):
        data = _csv_bytes(frames[table])
        if compress:
            buffer = io.BytesIO()
            with gzip.GzipFile(
                fileobj=buffer, mode="wb", mtime=0, filename="", compresslevel=6
            ) as gz:
                gz.write(data)
            contents[table] = (out / f"{table}.csv.gz", buffer.getvalue())
        else:
            contents[table] = (out / f"{table}.csv", data)
    contents["truth"] = (out / "truth.csv", _csv_bytes(frames["truth"]))
    text = json.dumps(_config_record(market.config), indent=2, ensure_ascii=False) + "\n"
    contents["config"] = (out / "config.json", text.encode("utf-8"))
    _write_all_or_none({path: data for path, data in contents.values()})
    return {name: path for name, (path, _) in contents.items()}


def _write_all_or_none(files: dict[Path, bytes]) -> None:
    """Write every file under a temporary name beside it, then rename them all into place with
    stop signals held back: a stop or a full disk while writing leaves the folder as it was (no
    truncated file that a later ingest, or `make demo`, would take for data), not a mix of old
    and new tables. A symbolic link is written through (its target is replaced)."""
    from adseg.interrupts import signals_deferred
    from adseg.tempfiles import create_beside

    targets = {Path(os.path.realpath(path)): data for path, data in files.items()}
    partial: dict[Path, Path] = {}
    try:
        for path, data in targets.items():
            fd, partial[path] = create_beside(path)
            with os.fdopen(fd, "wb") as stream:
                stream.write(data)
        with signals_deferred():
            for path, temporary in partial.items():
                os.replace(temporary, path)
    finally:
        for temporary in partial.values():
            temporary.unlink(missing_ok=True)
