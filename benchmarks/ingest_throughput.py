"""Ingest throughput into SQLite (and PostgreSQL when $ADSEG_TEST_POSTGRES_URL is set).

Writes N synthetic auction rows (plus advertisers and delivery) as CSV.gz, then times
(a) read + validate and (b) the transactional upsert write: first load, a re-load of the same
files (every row unchanged: compared, not written) and a load of files in which every row has a
new value (every row updated).
Result: benchmarks/results/ingest_throughput.md (``--output`` to write elsewhere; a hand-written
section of the file is kept).

    .venv/bin/python benchmarks/ingest_throughput.py --rows 300000
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from adseg.ingest import read_directory
from adseg.store import migrate
from adseg.store.engine import make_engine
from adseg.store.load import write_batch
from adseg_research.bench import write_results

RESULTS = Path(__file__).parent / "results" / "ingest_throughput.md"


def make_files(
    directory: Path, rows: int, advertisers: int, seed: int = 0, revision: int = 0
) -> None:
    """The three ingest files; ``revision`` r > 0 keeps every key and changes a value of every
    row (descriptions, bids and delivery bids raised by r)."""
    rng = np.random.default_rng(seed)
    ids = np.array([f"adv-{i:05d}" for i in range(advertisers)])
    description = "synthetic" if revision == 0 else f"synthetic, revision {revision}"
    pd.DataFrame({"advertiser_id": ids, "name": ids, "description": description}).to_csv(
        directory / "advertisers.csv.gz", index=False
    )
    start = np.datetime64("2026-03-01T00:00:00")
    ts = start + rng.integers(0, 14 * 86400, rows).astype("timedelta64[s]")
    market = np.round(rng.lognormal(0.5, 0.6, rows), 2)
    bid = np.round(rng.lognormal(0.6, 0.3, rows), 2)
    won = bid >= market
    bid += revision  # the outcome (won, paid) stays that of the first revision
    pd.DataFrame(
        {
            "auction_id": [f"a{i:09d}" for i in range(rows)],
            "advertiser_id": ids[rng.integers(0, advertisers, rows)],
            "ts": pd.to_datetime(ts).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "bid_ecpm": bid,
            "market_price_ecpm": market,
            "won": np.where(won, "true", "false"),
            "paid_ecpm": np.where(won, market.astype(str), ""),
        }
    ).to_csv(directory / "auctions.csv.gz", index=False)
    days = pd.date_range("2026-03-01", periods=14).strftime("%Y-%m-%d")
    grid = pd.MultiIndex.from_product([ids, days], names=["advertiser_id", "date"]).to_frame(
        index=False
    )
    grid["bid_requests"] = 10000
    grid["bid_ecpm"] = 1.5 + revision
    grid["impressions"] = 4000
    grid["spend"] = 5.0
    grid.to_csv(directory / "delivery.csv.gz", index=False)


def measure(url: str, directory: Path, changed: Path) -> list[dict]:
    engine = make_engine(url)
    migrate.upgrade(engine)
    out = []
    passes = {
        "first load": directory,
        "re-load (all unchanged)": directory,
        "load (all updated)": changed,
    }
    for attempt, files in passes.items():
        t0 = time.perf_counter()
        batch = read_directory(files)
        t_read = time.perf_counter() - t0
        c0 = time.process_time()
        summary = write_batch(engine, batch)
        cpu_write = time.process_time() - c0
        auctions = batch.rows()["auctions"]
        out.append(
            {
                "database": engine.dialect.name,
                "pass": attempt,
                "auction rows": auctions,
                "all rows": summary.rows,
                "updated": sum(t.updated for t in summary.tables),
                "unchanged": sum(t.unchanged for t in summary.tables),
                "read+validate s": round(t_read, 2),
                "write s": round(summary.seconds, 2),
                "write rows/s": int(summary.rows / summary.seconds),
                "write CPU s (this process)": round(cpu_write, 2),
                "write rows per CPU s": int(summary.rows / max(cpu_write, 1e-9)),
                "end-to-end rows/s": int(summary.rows / (summary.seconds + t_read)),
            }
        )
    engine.dispose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--advertisers", type=int, default=1268)
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"default {RESULTS}")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        files, changed = tmp / "files", tmp / "changed"
        files.mkdir()
        changed.mkdir()
        make_files(files, args.rows, args.advertisers)
        make_files(changed, args.rows, args.advertisers, revision=1)
        rows = measure(f"sqlite:///{tmp / 'bench.db'}", files, changed)
        if url := os.environ.get("ADSEG_TEST_POSTGRES_URL"):
            from sqlalchemy import text

            eng = make_engine(url)
            with eng.begin() as conn:
                conn.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
                conn.execute(text("CREATE SCHEMA public"))
            eng.dispose()
            rows += measure(url, files, changed)
    table = pd.DataFrame(rows)
    postgres = " (with ADSEG_TEST_POSTGRES_URL set for the PostgreSQL rows)" if url else ""
    load = os.getloadavg()
    mem = subprocess.run(["free", "-g"], capture_output=True, text=True).stdout.split("\n")[1]
    text_out = (
        "# Ingest throughput\n\n"
        f"Measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {platform.node()}: "
        f"{os.cpu_count()} cores, memory `{' '.join(mem.split()[:2])} GiB`, Python "
        f"{platform.python_version()}, load average {load[0]:.1f} (the machine is shared; "
        "timings are noisy).\n\n"
        f"Command: `.venv/bin/python benchmarks/ingest_throughput.py --rows {args.rows} "
        f"--advertisers {args.advertisers}`{postgres}.\n\n"
        "Target: at least 50,000 auction rows/s into SQLite (write, in one transaction).\n"
        "Wall-clock rates depend on how busy the shared 2-core machine is; 'rows per CPU s' "
        "counts only this process's CPU time (for SQLite the database engine runs in-process, "
        "so it is the whole cost; for PostgreSQL the server's CPU is not included).\n\n"
        + table.to_markdown(index=False)
        + "\n"
    )
    write_results(args.output, text_out)
    print(text_out)


if __name__ == "__main__":
    main()
