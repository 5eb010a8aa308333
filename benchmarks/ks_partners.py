"""KS views on a random partner design (``ks_partners``) against every pair compared: the
nightly's MAPE, segment counts, ARI against the planted segments, and the view stage's time
and graph size, on both generative families (the default log-normal world and gamma).

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/ks_partners.py \
        [--size 3000] [--partners all 1000 300] [--families default gamma] [--markets 1]

Writes benchmarks/results/ks_partners.md (and .csv). Fusers: rcc and l2, as segments_payoff.py.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from segments_payoff import one_run  # noqa: E402

import adseg.views.ks  # noqa: E402
from adseg_research.bench import machine_summary, write_results  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "ks_partners.md"
SOURCES = ("recommended", "model", "rcc", "l2", "win_rate", "ecpm", "truth")


def run_all(args) -> pd.DataFrame:
    adseg.views.ks.SAMPLED_MIN_N = 2  # the design at any size (the nightly: from 5,000)
    frames = []
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families:
            for market in range(args.markets):
                for partners in args.partners:
                    value = None if partners == "all" else int(partners)
                    t0 = time.perf_counter()
                    rows, _, info = one_run(
                        Path(tmp), family, market, 0, size=args.size, ks_partners=value
                    )
                    rows = rows[rows["source"].isin(SOURCES)].assign(
                        partners=partners, wall_s=round(time.perf_counter() - t0, 1)
                    )
                    frames.append(rows.assign(views_s=info.get("views_s")))
                    print(family, market, partners, info["recommended"], info["k"], flush=True)
                    pd.concat(frames).to_csv(RESULTS.with_suffix(".csv"), index=False)
    return pd.concat(frames)


def render(frame: pd.DataFrame, command: str) -> str:
    frame = frame.copy()
    for col in ("impressions_mape", "spend_mape"):
        frame[col] = (100 * frame[col]).round(2)
    order = list(dict.fromkeys(frame["partners"]))
    table = frame.pivot_table(
        index=["family", "source", "method"],
        columns="partners",
        values=["impressions_mape", "spend_mape"],
        aggfunc="mean",
    ).reindex(columns=order, level=1)
    counts = (
        frame[frame["method"] == "segment"]
        .pivot_table(index=["family", "source"], columns="partners", values=["n_segments", "ari"])
        .reindex(columns=order, level=1)
    )
    runs = frame.groupby(["family", "partners"], sort=False)[["k", "wall_s"]].first()
    return "\n".join(
        [
            "# KS views on a random partner design against all pairs",
            "",
            f"Measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {machine_summary()}.",
            "",
            f"Command: `{command}`",
            "",
            "`partners` = `NightlyConfig.ks_partners` (`all` = None: every pair compared), applied"
            " at this size (`views.ks.SAMPLED_MIN_N` lowered to 2; the nightly applies it from"
            " 5,000 advertisers on).",
            "MAPE in %, mean over the markets; supply = actual; fusers rcc and l2.",
            "",
            "## MAPE by source",
            "",
            table.to_markdown(),
            "",
            "## Segments and ARI against the planted segments (segment method)",
            "",
            counts.round(3).to_markdown(),
            "",
            "## Runs (k = the fusers' segment count; wall = whole nightly incl. generation)",
            "",
            runs.to_markdown(),
        ]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=3000)
    ap.add_argument("--partners", nargs="+", default=["all", "1000", "300"])
    ap.add_argument("--families", nargs="+", default=["default", "gamma"])
    ap.add_argument("--markets", type=int, default=1)
    args = ap.parse_args()
    command = "OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/ks_partners.py " + shlex.join(
        sys.argv[1:]
    )
    frame = run_all(args)
    write_results(RESULTS, render(frame, command.strip()))


if __name__ == "__main__":
    main()
