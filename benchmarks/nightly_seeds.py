"""How much of the nightly's MAPE table is the data and the seed: the pipeline over several
marketplaces and pipeline seeds, MAPE per source as mean ± std, rcc against l2 paired by run.

One marketplace and one seed (benchmarks/nightly_default.py, `make demo`) is one draw: the KS
views' spectral discretisation and every fuser start from seeded k-means, and a different CPU's
BLAS rounds differently, so the same command gives other segments on another machine. This
script measures the spread instead of one draw.

Per run: the default marketplace (1,268 advertisers, 7 + 7 days) generated with marketplace seed
m, ingested into a fresh SQLite database, then `app.nightly.run_nightly` with pipeline seed s,
actual supply, the fast fusers (rcc, l2, rcec, sccbg; lta and trce cost minutes and are left out),
the truth as a reference. Runs: the default marketplace with pipeline seeds 0..S-1, and
marketplaces 1..M (seed = default + m) with pipeline seed 0.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/nightly_seeds.py [--seeds 5 --markets 5]

Writes benchmarks/results/nightly_seeds.md (and .csv, one row per run, source and method).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adseg import pipeline  # noqa: E402
from adseg.app.nightly import run_nightly  # noqa: E402
from adseg.ingest import read_directory  # noqa: E402
from adseg.simulate import MarketplaceConfig, simulate_marketplace, write_marketplace  # noqa: E402
from adseg.store import migrate  # noqa: E402
from adseg.store.engine import make_engine  # noqa: E402
from adseg.store.load import write_batch  # noqa: E402
from adseg_research.bench import machine_summary, write_results  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "nightly_seeds.md"
FUSERS = ("rcc", "l2", "rcec", "sccbg")
SOURCE_ORDER = ("win_rate", "ecpm", "text", *FUSERS, "truth", "own", "global")


def one_run(tmp: Path, market_seed: int, seed: int) -> pd.DataFrame:
    """One marketplace, one pipeline run: rows (source, method, impressions_mape, spend_mape,
    n_segments, ari) with the run's seeds. Cost: about 30 s on one core (rcc dominates)."""
    folder = tmp / f"m{market_seed}"
    db = tmp / f"m{market_seed}.db"
    if not db.exists():
        write_marketplace(simulate_marketplace(MarketplaceConfig(seed=market_seed)), folder)
        engine = make_engine(f"sqlite:///{db}")
        migrate.upgrade(engine)
        write_batch(engine, read_directory(folder))
    engine = make_engine(f"sqlite:///{db}")
    config = pipeline.NightlyConfig(
        fusers=FUSERS, supply="actual", seed=seed, truth_path=str(folder / "truth.csv")
    )
    result = run_nightly(engine, config=config)
    engine.dispose()
    mape = result.result.mape
    mape = mape[mape["supply_mode"] == "actual"].copy()
    mape["ari"] = mape["source"].map(result.truth_ari)
    mape["market_seed"], mape["seed"] = market_seed, seed
    keep = ["market_seed", "seed", "source", "method", "impressions_mape", "spend_mape"]
    return mape[keep + ["n_segments", "ari"]]


def summary_table(frame: pd.DataFrame, method: str) -> str:
    """Markdown: per source, MAPE mean ± std over the runs (percent) and the mean ARI."""
    part = frame[frame["method"] == method]
    rows = []
    for source in [s for s in SOURCE_ORDER if s in set(part["source"])]:
        s = part[part["source"] == source]
        imp, spend = 100 * s["impressions_mape"], 100 * s["spend_mape"]
        ari = s["ari"].mean()
        rows.append(
            f"| {source} | {imp.mean():.1f} ± {imp.std(ddof=1):.1f} | "
            f"{spend.mean():.1f} ± {spend.std(ddof=1):.1f} | {s['n_segments'].mean():.0f} | "
            + ("—" if np.isnan(ari) else f"{ari:.3f}")
            + " |"
        )
    head = "| source | impressions MAPE % | spend MAPE % | segments | ARI vs truth |"
    return "\n".join([head, "|---|---|---|---|---|", *rows])


def t_interval(d: np.ndarray, digits: int) -> str:
    """ "mean [low, high]" of paired differences ``d`` (one per run), a 95% t interval."""
    from scipy import stats

    half = stats.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size)
    return f"{d.mean():+.{digits}f} [{d.mean() - half:+.{digits}f}, {d.mean() + half:+.{digits}f}]"


def run_arguments(description: str, output: Path) -> argparse.ArgumentParser:
    """The options every run-plan benchmark shares: --seeds, --markets, --output."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--seeds", type=int, default=5, help="pipeline seeds on the default market")
    ap.add_argument("--markets", type=int, default=5, help="other marketplaces (pipeline seed 0)")
    ap.add_argument("--output", type=Path, default=output)
    return ap


def run_plan(seeds: int, markets: int) -> list[tuple[int, int]]:
    """(marketplace seed, pipeline seed) per run: the default marketplace with pipeline seeds
    0..seeds-1, then the next ``markets`` marketplaces with pipeline seed 0."""
    if seeds < 0 or markets < 0 or seeds + markets < 2:
        raise SystemExit("error: --seeds and --markets must give at least two runs (≥ 0 each)")
    default_seed = MarketplaceConfig().seed
    plan = [(default_seed, s) for s in range(seeds)]
    return plan + [(default_seed + m, 0) for m in range(1, markets + 1)]


def paired_table(frame: pd.DataFrame, method: str, baseline: str = "l2") -> str:
    """Markdown: rcc − other source per run (percentage points), mean with a 95% t interval and
    the runs where rcc is lower (better)."""

    part = frame[frame["method"] == method]
    wide = part.pivot_table(
        index=["market_seed", "seed"], columns="source", values=["impressions_mape", "spend_mape"]
    )
    lines = [
        "| rcc − source | impressions (pp) | rcc better | spend (pp) | rcc better |",
        "|---|---|---|---|---|",
    ]
    others = [s for s in SOURCE_ORDER if s != "rcc" and s in set(part["source"])]
    for other in others:
        cells = [other]
        for metric in ("impressions_mape", "spend_mape"):
            d = 100 * (wide[(metric, "rcc")] - wide[(metric, other)]).dropna().to_numpy()
            cells += [t_interval(d, 1), f"{int((d < 0).sum())} / {d.size}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    args = run_arguments(__doc__.splitlines()[0], RESULTS).parse_args()
    default_seed = MarketplaceConfig().seed
    plan = run_plan(args.seeds, args.markets)
    frames, t0 = [], time.perf_counter()
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for market_seed, seed in plan:
            t = time.perf_counter()
            frames.append(one_run(Path(tmp), market_seed, seed))
            rcc = frames[-1].query("source == 'rcc' and method == 'segment'")
            l2 = frames[-1].query("source == 'l2' and method == 'segment'")
            print(
                f"market {market_seed} seed {seed}: rcc {100 * rcc['impressions_mape'].iloc[0]:.1f}"
                f" / l2 {100 * l2['impressions_mape'].iloc[0]:.1f} % impressions MAPE"
                f" ({time.perf_counter() - t:.0f} s)",
                flush=True,
            )
    frame = pd.concat(frames, ignore_index=True)
    threads = os.environ.get("OPENBLAS_NUM_THREADS")
    command = (f"OPENBLAS_NUM_THREADS={threads} " if threads else "") + shlex.join(
        [".venv/bin/python", "benchmarks/nightly_seeds.py", *sys.argv[1:]]
    )
    lines = [
        "# The nightly's MAPE over marketplaces and seeds",
        "",
        f"Measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {platform.node()}; "
        f"{machine_summary()}; load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after; "
        f"{len(plan)} runs in {time.perf_counter() - t0:.0f} s wall.",
        "",
        f"Command: `{command}`",
        "",
        f"Runs: the default marketplace (seed {default_seed}) with pipeline seeds "
        f"0..{args.seeds - 1}, and {args.markets} other marketplaces (seeds {default_seed + 1}.."
        f"{default_seed + args.markets}) with pipeline seed 0. Fusers {', '.join(FUSERS)}; "
        "supply = actual (the paper's setting). One row per run, source and method in "
        f"`{args.output.with_suffix('.csv').name}`.",
        "",
        "## MAPE by source, the paper's method (pooled segment c.d.f.s), mean ± std over runs",
        "",
        summary_table(frame, "segment"),
        "",
        "## rcc against every other source, paired by run (segment method)",
        "",
        "Differences of MAPE in percentage points (negative = rcc better), mean and 95% t "
        "interval over the runs; 'rcc better' counts the runs where rcc's MAPE is lower.",
        "",
        paired_table(frame, "segment"),
        "",
        "## The same with the blended estimate (own c.d.f. shrunk toward the segment's)",
        "",
        summary_table(frame, "blended"),
        "",
    ]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.output.with_suffix(".csv"), index=False)
    write_results(args.output, "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
