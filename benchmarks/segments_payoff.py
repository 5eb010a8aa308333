"""Do the segments pay off? The nightly over the 20-run protocol of nightly_seeds (10 pipeline
seeds on the family's marketplace, 10 other marketplaces with pipeline seed 0), on two
generative families (the default log-normal world and the gamma family of
``adseg.simulate.family_config``), recording per run the recommended source (chosen by backtest
inside the training window), every source's MAPE, and MAPE by advertiser size band.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/segments_payoff.py \
        [--families default gamma] [--seeds 10 --markets 10]

Writes benchmarks/results/segments_payoff.md (and .csv / _bands.csv). Fusers: rcc and l2 (the
ones the backtest also runs; the others cost minutes over 40 runs and are not candidates).
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
from adseg.simulate import family_config, simulate_marketplace, write_marketplace  # noqa: E402
from adseg.store import migrate  # noqa: E402
from adseg.store import results as store  # noqa: E402
from adseg.store.engine import make_engine  # noqa: E402
from adseg.store.load import write_batch  # noqa: E402
from adseg_research.bench import machine_summary, write_results  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "segments_payoff.md"
FUSERS = ("rcc", "l2")
SOURCES = (
    "recommended",
    "model",
    "rcc",
    "l2",
    "win_rate",
    "ecpm",
    "text",
    "truth",
    "own",
    "global",
)


def one_run(tmp: Path, family: str, market_seed: int, seed: int, size=None, **config):
    """One marketplace, one nightly: (rows per source and method, rows per band, run info).
    ``size``: advertisers (default: the family's); ``config``: NightlyConfig fields."""
    name = f"{family}{market_seed}" + (f"_{size}" if size else "")
    folder, db = tmp / name, tmp / f"{name}.db"
    if not db.exists():
        fields = {"n_advertisers": size} if size else {}
        market = simulate_marketplace(family_config(family, seed=market_seed, **fields))
        write_marketplace(market, folder)
        engine = make_engine(f"sqlite:///{db}")
        migrate.upgrade(engine)
        write_batch(engine, read_directory(folder))
        engine.dispose()
    engine = make_engine(f"sqlite:///{db}")
    config = pipeline.NightlyConfig(
        fusers=FUSERS, supply="actual", seed=seed, truth_path=str(folder / "truth.csv"), **config
    )
    t0 = time.perf_counter()
    result = run_nightly(engine, config=config)
    wall = time.perf_counter() - t0
    run = store.get_run(engine, result.run_id)
    model = run["parameters"]["resolved"]["model"]
    engine.dispose()
    rec = result.recommended_source
    mape = result.result.mape
    mape = mape[mape["supply_mode"] == "actual"].copy()
    mape["ari"] = mape["source"].map(result.truth_ari)
    rows = pd.concat([mape, mape[mape["source"] == rec].assign(source="recommended")])
    bands = result.mape_by_band
    bands = bands[bands["supply_mode"] == "actual"]
    bands = pd.concat([bands, bands[bands["source"] == rec].assign(source="recommended")])
    info = dict(family=family, market_seed=market_seed, seed=seed, recommended=rec, wall_s=wall)
    info["k"], info["model_k"] = result.n_segments, model["k"]
    info["delivery_cap"] = model.get("delivery_cap")
    info["views_s"] = (run.get("timings") or {}).get("views")
    keep = ["source", "method", "impressions_mape", "spend_mape", "n_segments", "ari"]
    return rows[keep].assign(**info), bands.assign(**info), info


def summary(frame: pd.DataFrame) -> str:
    """Markdown: per source, segment and blended MAPE mean ± std over the runs, mean ARI."""
    lines = [
        "| source | impressions, segment | spend, segment | impressions, blended | "
        "spend, blended | ARI |",
        "|---|---|---|---|---|---|",
    ]
    for source in [s for s in SOURCES if s in set(frame["source"])]:
        part = frame[frame["source"] == source]
        cells = [source]
        for method in ("segment", "blended"):
            m = part[part["method"] == method]
            for what in ("impressions_mape", "spend_mape"):
                v = 100 * m[what]
                cells.append(f"{v.mean():.2f} ± {v.std():.2f} %")
        ari = part[part["method"] == "segment"]["ari"]
        cells.append("" if ari.isna().all() else f"{ari.mean():.3f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def criteria(frame: pd.DataFrame) -> str:
    """Markdown: the issue's ratios, from the means over the runs."""
    mean = frame.groupby(["source", "method"])[["impressions_mape", "spend_mape"]].mean()

    def m(source, method, what):
        return float(mean.loc[(source, method), what])

    lines = ["| criterion | impressions | spend | target |", "|---|---|---|---|"]
    for method, target in (("blended", 1.05), ("segment", 1.3)):
        cells = [f"recommended / truth, {method}"]
        for what in ("impressions_mape", "spend_mape"):
            r = m("recommended", method, what) / m("truth", method, what)
            cells.append(f"{r:.3f} ({'met' if r <= target else 'NOT met'})")
        lines.append("| " + " | ".join(cells) + f" | ≤ {target} |")
    cells = ["recommended segment − own samples (pp)"]
    for what in ("impressions_mape", "spend_mape"):
        d = 100 * (m("recommended", "segment", what) - m("own", "segment", what))
        cells.append(f"{d:+.2f} ({'met' if d < 0 else 'NOT met'})")
    lines.append("| " + " | ".join(cells) + " | < 0 |")
    views = [s for s in ("win_rate", "ecpm", "text", "model") if (s, "segment") in mean.index]
    best = min(views, key=lambda s: m(s, "segment", "impressions_mape"))
    d = 100 * (m("rcc", "segment", "impressions_mape") - m(best, "segment", "impressions_mape"))
    lines.append(
        f"| rcc segment − best input view ({best}), impressions (pp) | {d:+.2f} "
        f"({'met' if d <= 0 else 'NOT met'}) | | ≤ 0 |"
    )
    return "\n".join(lines)


def band_table(bands: pd.DataFrame, method: str) -> str:
    """Markdown: impressions MAPE by size band, mean over runs, per source."""
    part = bands[bands["method"] == method]
    names = ["0", "1-4", "5-19", "20-99", ">=100"]
    wide = part.groupby(["source", "band"])["impressions_mape"].mean().unstack()
    lines = [
        "| source | " + " | ".join(f"{b} samples" for b in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for source in [s for s in SOURCES if s in wide.index]:
        cells = [f"{100 * wide.loc[source].get(b, np.nan):.1f} %" for b in names]
        lines.append(f"| {source} | " + " | ".join(cells) + " |")
    per = part[part["source"] == "own"].groupby("band")["n_advertisers"].mean()
    lines.append(
        "| advertisers (mean) | " + " | ".join(f"{per.get(b, 0):.0f}" for b in names) + " |"
    )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", nargs="+", default=["default", "gamma"])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--markets", type=int, default=10)
    ap.add_argument("--output", type=Path, default=RESULTS)
    args = ap.parse_args()
    frames, band_frames, infos, t0 = [], [], [], time.perf_counter()
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families:
            base = family_config(family).seed
            plan = [(base, s) for s in range(args.seeds)]
            plan += [(base + m, 0) for m in range(1, args.markets + 1)]
            for market_seed, seed in plan:
                rows, bands, info = one_run(Path(tmp), family, market_seed, seed)
                frames.append(rows)
                band_frames.append(bands)
                infos.append(info)
                print(info, flush=True)
    frame = pd.concat(frames, ignore_index=True)
    bands = pd.concat(band_frames, ignore_index=True)
    runs = pd.DataFrame(infos)
    threads = os.environ.get("OPENBLAS_NUM_THREADS")
    command = (f"OPENBLAS_NUM_THREADS={threads} " if threads else "") + shlex.join(
        [".venv/bin/python", "benchmarks/segments_payoff.py", *sys.argv[1:]]
    )
    lines = [
        "# Segments that pay off: the recommended source against the true segments",
        "",
        f"Measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {platform.node()}; "
        f"{machine_summary()}; load average {load0:.1f} before; "
        f"{len(runs)} runs in {time.perf_counter() - t0:.0f} s wall.",
        "",
        f"Command: `{command}`",
        "",
        "Per family: its marketplace with pipeline seeds 0..9 and 10 other marketplaces "
        "(seed + 1..10) with pipeline seed 0. Fusers rcc, l2; supply = actual. `recommended` "
        "is, per run, the source the backtest chose (training window only).",
        "",
    ]
    for family in args.families:
        f = frame[frame["family"] == family]
        r = runs[runs["family"] == family]
        chosen = r["recommended"].value_counts().to_dict()
        lines += [
            f"## Family `{family}`",
            "",
            f"Recommended: {chosen}; the model view's K (by backtest): "
            f"{sorted(r['model_k'].tolist()) if 'model_k' in r else 'not recorded'}; the cap on "
            f"the delivery evidence (by backtest, requests; 0 = none): "
            f"{r['delivery_cap'].value_counts().sort_index().to_dict()}; the fusers' "
            f"K (the KS views' median): {sorted(r['k'].tolist())}; nightly wall "
            f"median {r['wall_s'].median():.1f} s.",
            "",
            criteria(f),
            "",
            summary(f),
            "",
            "Impressions MAPE by training-sample band, segment method:",
            "",
            band_table(bands[bands["family"] == family], "segment"),
            "",
            "The same, blended:",
            "",
            band_table(bands[bands["family"] == family], "blended"),
            "",
        ]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.output.with_suffix(".csv"), index=False)
    bands.to_csv(args.output.with_name(args.output.stem + "_bands.csv"), index=False)
    write_results(args.output, "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
