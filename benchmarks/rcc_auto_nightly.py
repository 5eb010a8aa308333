"""rcc's normalisations on the nightly's own base clusterings: the default ("auto"), True and "l1"
against l2, by forecast MAPE and ARI vs the true segments, over marketplaces and seeds.

The Table 2 sets and the k-means pools are not the product's ensembles; this runs the nightly
pipeline (benchmarks/nightly_seeds.py's ``one_run``: a fresh SQLite database per marketplace,
actual supply, the paper's pooled segment c.d.f.s) with four fusers: rcc, l2, and rcc with
``normalize=True`` and ``"l1"``, registered for this process only as "rcc-normalised" and "rcc-l1"
(the fuser workers are forked, so they see the registration). Runs: the default marketplace
with pipeline seeds 0..S-1 and marketplaces +1..+M with seed 0, as nightly_seeds.py.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/rcc_auto_nightly.py   # 10 runs, ~4 min

Writes benchmarks/results/rcc_auto_nightly.md (and .csv, one row per run and source).
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import nightly_seeds  # noqa: E402

from adseg.consensus import FUSERS  # noqa: E402
from adseg.consensus.rcc import RCC  # noqa: E402
from adseg_research.bench import machine_summary, recorded_command, write_results  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "rcc_auto_nightly.md"
SOURCES = ("rcc", "rcc-normalised", "rcc-l1", "l2")


def _rcc_with(form: bool | str) -> type[RCC]:
    """RCC with ``normalize=form`` as its default, for the pipeline's ``cls(n_clusters,
    random_state)``."""

    class _RCC(RCC):
        def __init__(self, n_clusters: int = 2, *, normalize=form, random_state=None):
            super().__init__(n_clusters, normalize=normalize, random_state=random_state)

    return _RCC


def _paired(frame: pd.DataFrame, metric: str, a: str, b: str) -> str:
    """Mean of a − b over the runs (percentage points) with a 95% t interval, and the runs where
    a is lower."""
    wide = frame.pivot_table(index=["market_seed", "seed"], columns="source", values=metric)
    d = 100 * (wide[a] - wide[b]).to_numpy()
    return f"{nightly_seeds.t_interval(d, 2)}, {a} lower in {int((d < 0).sum())} / {d.size}"


def main() -> None:
    args = nightly_seeds.run_arguments(__doc__.splitlines()[0], RESULTS).parse_args()
    FUSERS["rcc-normalised"], FUSERS["rcc-l1"] = _rcc_with(True), _rcc_with("l1")
    nightly_seeds.FUSERS = SOURCES
    plan = nightly_seeds.run_plan(args.seeds, args.markets)
    frames, t0, load0 = [], time.perf_counter(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for market_seed, seed in plan:
            frames.append(nightly_seeds.one_run(Path(tmp), market_seed, seed))
            print(f"market {market_seed} seed {seed} done", flush=True)
    frame = pd.concat(frames, ignore_index=True)
    frame = frame[(frame["method"] == "segment") & frame["source"].isin(SOURCES)]
    frame.to_csv(args.output.with_suffix(".csv"), index=False)
    wall = time.perf_counter() - t0
    rows = []
    for source in SOURCES:
        s = frame[frame["source"] == source]
        imp, spend = 100 * s["impressions_mape"], 100 * s["spend_mape"]
        rows.append(
            f"| {source} | {imp.mean():.2f} ± {imp.std(ddof=1):.2f} | "
            f"{spend.mean():.2f} ± {spend.std(ddof=1):.2f} | {s['ari'].mean():.3f} |"
        )
    pairs = [
        f"| {a} − {b} | {_paired(frame, 'impressions_mape', a, b)} | "
        f"{_paired(frame, 'spend_mape', a, b)} |"
        for a, b in (
            ("rcc", "rcc-normalised"),
            ("rcc-l1", "rcc-normalised"),
            ("rcc", "l2"),
            ("rcc-normalised", "l2"),
        )
    ]
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = "\n".join(
        [
            "# rcc's normalisations on the nightly's views: MAPE and ARI over runs",
            "",
            f"Measured {now}; {machine_summary()}; load average {load0:.1f} before, "
            f"{os.getloadavg()[0]:.1f} after; {len(plan)} runs in {wall:.0f} s wall.",
            "",
            f"Command: `{recorded_command('rcc_auto_nightly.py', sys.argv[1:])}`",
            "",
            "Runs: the default marketplace with pipeline seeds 0..S-1 and the next marketplaces "
            "with seed 0 (as nightly_seeds.md); actual supply, segment c.d.f.s (the paper's "
            'method). rcc = the default, `RCC(normalize="auto")` since 2026-11-25; '
            'rcc-normalised / rcc-l1 = `RCC(normalize=True / "l1")`.',
            "",
            "| source | impressions MAPE % | spend MAPE % | ARI vs truth |",
            "|---|---|---|---|",
            *rows,
            "",
            "Paired by run, percentage points (negative = the first is better), 95% t interval:",
            "",
            "| difference | impressions | spend |",
            "|---|---|---|",
            *pairs,
            "",
        ]
    )
    write_results(args.output, text)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
