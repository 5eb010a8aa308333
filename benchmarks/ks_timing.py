"""Timing of the exact all-pairs KS statistic (adseg.landscape.ks_statistic_matrix).

For each case: n advertisers, their sample sizes, the pooled grid size G (distinct prices) and
P = Σ_i |U_i| (distinct prices per advertiser, summed), the wall time and the peak traced memory
(tracemalloc: numpy's allocations, the n×n result included) of ks_statistic_matrix, and the
speed-up over a plain Python loop of scipy.stats.ks_2samp over all n(n-1)/2 pairs, extrapolated
from a random subsample of pairs (both scipy's default call, which also computes an exact p-value
for samples up to 10,000, and method="asymp", the cheapest scipy call). The subsample also checks
exactness: max |ours − scipy| over the sampled pairs.

Cases (prices in eCPM, quantised to 0.01 unless said):
* sim-win / sim-cost: the simulated marketplace (adseg.simulate defaults: 1,268 advertisers,
  heavy-tailed sample counts), training-window market prices and paid eCPMs.
* realistic-1268: 1,268 advertisers, log-normal sample counts (median 50, log-sd 1.3, clipped to
  [2, 6000]), log-normal prices around segment levels.
* uniform-n×m: n advertisers × m samples each (the 5,000 × 1,000 target).
* fine-grid: as realistic-1268 with prices quantised to 0.0001 (G in the 10⁵s).
* method="grid" on realistic-1268, for comparison (every pair on the pooled grid).

Usage:
    .venv/bin/python benchmarks/ks_timing.py            # full (≈ 10 min on the shared machine)
    .venv/bin/python benchmarks/ks_timing.py --quick    # smaller, ≈ 1 min
Writes benchmarks/results/ks_timing.md and .csv (``--quick``: ks_timing_quick.*; ``--output``
to change the stem).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import sys
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from adseg.landscape import ks_statistic_matrix
from adseg_research.bench import write_results

ROOT = Path(__file__).resolve().parents[1]


def heavy_tailed(n, rng, *, median=50.0, sigma=1.3, max_size=6000, decimals=2, n_levels=40):
    sizes = np.clip(np.round(np.exp(rng.normal(np.log(median), sigma, n))), 2, max_size)
    levels = rng.normal(np.log(1.5), 0.6, n_levels)
    seg = rng.integers(0, n_levels, n)
    return [
        np.round(rng.lognormal(levels[s] + rng.normal(0, 0.05), 0.5, int(k)), decimals)
        for s, k in zip(seg, sizes, strict=True)
    ]


def uniform(n, m, rng, decimals=2):
    levels = rng.normal(np.log(1.5), 0.6, n)
    return [np.round(rng.lognormal(mu, 0.5, m), decimals) for mu in levels]


def simulated():
    from adseg.simulate import MarketplaceConfig, simulate_marketplace

    market = simulate_marketplace(MarketplaceConfig())
    truth = market.truth.set_index("advertiser_id")
    auctions = market.auctions
    ts = pd.to_datetime(auctions["ts"])
    end = ts.min().normalize() + pd.Timedelta(days=market.config.train_days)
    train = auctions[(ts < end).to_numpy()]
    ids = market.advertisers["advertiser_id"].to_numpy()
    groups = train.groupby("advertiser_id")
    empty = np.empty(0)
    win = [groups.get_group(i)["market_price_ecpm"].to_numpy(float) if i in groups.groups
           else empty for i in ids]  # fmt: skip
    cost = [groups.get_group(i)["paid_ecpm"].dropna().to_numpy(float) if i in groups.groups
            else empty for i in ids]  # fmt: skip
    descriptions = market.advertisers["description"].tolist()
    return win, cost, descriptions, truth.loc[ids, "segment"].to_numpy()


def views_on_simulator(win, cost, descriptions, truth):
    """build_base_clusterings with the default ViewConfig: per-column time, clusters, ARI."""
    from adseg.metrics import ari
    from adseg.views import ViewConfig, build_base_clusterings, clusters_per_view, view_consistency

    frames = {}
    for blas_threads in (1, None):
        t0 = time.perf_counter()
        config = ViewConfig(blas_threads=blas_threads)
        base = build_base_clusterings(win, cost, descriptions, config, random_state=0)
        total = time.perf_counter() - t0
        cols = base.columns[["view", "parameter", "n_clusters", "n_excluded", "seconds"]].copy()
        cols["seconds"] = cols["seconds"].round(2)
        ok = base.labels >= 0
        cols["ari_vs_truth"] = [
            round(ari(truth[ok[:, j]], base.labels[ok[:, j], j]), 3)
            for j in range(base.labels.shape[1])
        ]
        frames[blas_threads] = (cols, total)
    return frames, clusters_per_view(base), view_consistency(base)


def scipy_loop(samples, n_pairs, rng, ours, method="auto"):
    """Seconds per pair of a plain ks_2samp loop on random pairs, and max |ours − scipy|."""
    usable = np.flatnonzero([len(s) > 0 for s in samples])
    i = rng.choice(usable, n_pairs)
    j = rng.choice(usable, n_pairs)
    out = np.empty(n_pairs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        t0 = time.perf_counter()
        for k in range(n_pairs):  # the baseline being measured: one call per pair
            out[k] = stats.ks_2samp(samples[i[k]], samples[j[k]], method=method).statistic
        per_pair = (time.perf_counter() - t0) / n_pairs
    return per_pair, float(np.max(np.abs(out - ours[i, j])))


def load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def run_case(name, samples, method, n_pairs, rng, results, **kwargs):
    sizes = np.array([len(s) for s in samples])
    nonempty = [s for s in samples if len(s)]
    pooled = np.concatenate(nonempty)
    grid = np.unique(pooled).size
    points = sum(np.unique(s).size for s in nonempty)
    load_before = load()
    tracemalloc.start()
    t0 = time.perf_counter()
    d = ks_statistic_matrix(samples, method=method, **kwargs)
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    n = len(samples)
    all_pairs = n * (n - 1) / 2
    row = {
        "case": name,
        "method": method + ("" if kwargs.get("precision", "auto") == "auto" else " float64"),
        "n": n,
        "samples_median": float(np.median(sizes)),
        "samples_max": int(sizes.max()),
        "samples_total": int(sizes.sum()),
        "grid_G": grid,
        "points_P": points,
        "seconds": round(seconds, 2),
        "peak_MiB": round(peak, 1),
        "result_MiB": round(n * n * 8 / 2**20, 1),
        "load_before": load_before,
    }
    if n_pairs:
        per_auto, err_auto = scipy_loop(samples, n_pairs, rng, d, "auto")
        per_asymp, err_asymp = scipy_loop(samples, max(n_pairs // 2, 10), rng, d, "asymp")
        row.update(
            {
                "scipy_pairs_sampled": n_pairs,
                "scipy_us_per_pair": round(per_auto * 1e6, 1),
                "scipy_all_pairs_s": round(per_auto * all_pairs, 0),
                "speedup_vs_scipy": round(per_auto * all_pairs / seconds, 0),
                "speedup_vs_scipy_asymp": round(per_asymp * all_pairs / seconds, 0),
                "max_abs_diff_vs_scipy": err_auto,
                "max_abs_diff_vs_scipy_asymp": err_asymp,
            }
        )
    row["load_after"] = load()
    results.append(row)
    print(row, flush=True)
    del d


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller cases (≈ 1 min)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pairs", type=int, default=3000, help="scipy pairs sampled per case")
    parser.add_argument("--no-sim", action="store_true", help="skip the simulated marketplace")
    parser.add_argument(
        "--output", default=None, help="stem of the .md and .csv (default results/ks_timing)"
    )
    args = parser.parse_args(argv)
    if args.output is None:  # a smoke run never replaces the recorded results
        args.output = str(
            ROOT / "benchmarks" / "results" / f"ks_timing{'_quick' if args.quick else ''}"
        )
    rng = np.random.default_rng(args.seed)
    results: list[dict] = []
    pairs = args.pairs if not args.quick else min(args.pairs, 500)

    views = None
    if not args.no_sim:
        win, cost, descriptions, truth = simulated()
        run_case("sim-win (simulator, 1268)", win, "points", pairs, rng, results)
        run_case("sim-cost (simulator, 1268)", cost, "points", pairs, rng, results)
        views = views_on_simulator(win, cost, descriptions, truth)
        print(views, flush=True)
    real = heavy_tailed(1268 if not args.quick else 400, rng)
    run_case(f"realistic-{len(real)}", real, "points", pairs, rng, results)
    run_case(f"realistic-{len(real)}", real, "points", 0, rng, results, precision="float64")
    run_case(f"realistic-{len(real)}", real, "grid", 0, rng, results)
    fine = heavy_tailed(len(real), rng, decimals=4)
    run_case(f"fine-grid-{len(fine)} (tick 0.0001)", fine, "points", pairs, rng, results)
    shapes = [(1268, 1000), (2000, 1000), (5000, 1000)] if not args.quick else [(500, 300)]
    for n, m in shapes:
        samples = uniform(n, m, rng)
        run_case(f"uniform-{n}x{m}", samples, "points", pairs if n <= 2000 else pairs // 3,
                 rng, results)  # fmt: skip
        if n == shapes[0][0]:
            run_case(f"uniform-{n}x{m}", samples, "points", 0, rng, results, precision="float64")
        del samples

    frame = pd.DataFrame(results)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out.with_suffix(".csv"), index=False)
    write_markdown(frame, out.with_suffix(".md"), args, argv, views)
    print(f"wrote {out.with_suffix('.md')} and {out.with_suffix('.csv')}")
    return 0


def write_markdown(frame: pd.DataFrame, path: Path, args, argv, views=None) -> None:
    def sh(cmd: str) -> str:
        try:
            return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()  # noqa: S602
        except OSError:
            return "?"

    command = " ".join(["python benchmarks/ks_timing.py", *(argv or sys.argv[1:])])
    cols = ["case", "method", "n", "samples_median", "samples_max", "samples_total", "grid_G",
            "points_P", "seconds", "peak_MiB", "result_MiB", "scipy_us_per_pair",
            "scipy_all_pairs_s", "speedup_vs_scipy", "speedup_vs_scipy_asymp",
            "max_abs_diff_vs_scipy", "max_abs_diff_vs_scipy_asymp", "load_before",
            "load_after"]  # fmt: skip
    cols = [c for c in cols if c in frame]
    table = frame[cols].to_markdown(index=False) if _has_tabulate() else frame[cols].to_string()
    text = f"""# KS timing — exact all-pairs two-sample KS statistics

Command: `{command}` (from the repository root, with the project's virtualenv).
Date: {dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")}. Machine: `nproc` = {sh("nproc")},
{platform.processor() or platform.machine()}, memory: `{sh("free -g | sed -n 2p")}`.
numpy {np.__version__}, scipy {__import__("scipy").__version__}.

**The machine is shared by about eight engineers on 2 cores**: the load average before and after
each case is in the table; with a load of 10 a single-threaded job gets a fraction of a core, so the
seconds are upper bounds of what the code needs on an idle core (scipy's per-pair time was measured
under the same load, so the speed-up ratios are fairer than the absolute times).

Columns: `grid_G` distinct pooled values; `points_P` = Σ_i (distinct values of advertiser i), the
work is ≈ n · P_effective element operations; `peak_MiB` traced peak of numpy allocations during
the call (the n×n float64 result, `result_MiB`, included; the default `memory_mb=256` bounds the
column-block tables);
`scipy_us_per_pair` a plain loop of `scipy.stats.ks_2samp(a, b)` (default method: exact p-values up
to 10,000 samples) on random pairs, `scipy_all_pairs_s` that extrapolated to n(n−1)/2 pairs,
`speedup_vs_scipy` = scipy_all_pairs_s / seconds, `speedup_vs_scipy_asymp` the same against
`ks_2samp(..., method="asymp")` (the cheapest scipy call); `max_abs_diff_vs_scipy` over the sampled
pairs (0 = bit-identical statistics); `..._asymp` against the asymptotic call, which returns the raw
float difference k/m − l/n instead of the nearest float to the exact rational (≤ 1 ulp apart).

{table}

Targets (issue 4): 1,268 advertisers with realistic heavy-tailed samples < 5 s per view;
5,000 advertisers × 1,000 samples < 60 s. `points` is the default (float32 scan snapped to the
exact rational, float64 for pairs with lcm > 2²¹); `points float64` the same scan in float64
throughout (bit-identical result); `grid` the alternative method (every pair on the pooled grid
with a running max; n² G / 2 element operations) kept as a cross-check.
"""
    if views is not None:
        frames, table4, table5 = views
        cols1, total1 = frames[1]
        cols_n, total_n = frames[None]
        cols1 = cols1.rename(columns={"seconds": "seconds_1_blas_thread"})
        cols1["seconds_default_blas"] = cols_n["seconds"]
        text += f"""
## The views on the simulated marketplace (adseg.views.build_base_clusterings, defaults)

ViewConfig() defaults: α ∈ (0.01, 0.05, 0.1), min_samples 5, the number of clusters of each KS
graph from its Bethe Hessian clipped to [2, 80] (isolated advertisers are singletons), k-means
discretisation (10 starts), text k ∈ (10, 20, 40). Total {total1:.1f} s with one BLAS thread
(`blas_threads=1`, the default), {total_n:.1f} s with the process's default BLAS threading
(`blas_threads=None`): BLAS/OpenMP threads spin-wait on the loaded 2 cores in the partial
eigendecompositions and k-means. Seconds per KS column include a third of that view's KS time.
`ari_vs_truth`: ARI against the simulator's 40 true segments over the advertisers labelled in that
column.

{_md(cols1)}

Table 4 (clusters per view and α). Paper, 1,268 real advertisers: win rate 65 / 47 / 32, eCPM
73 / 51 / 40 at α = 0.01 / 0.05 / 0.1. Our counts are lower and rise with α (a sparser graph
splits more) where the paper's fall. The eigengap would pick fewer still (3 / 11 / 12 and
7 / 7 / 8 on this marketplace; `k_selection="eigengap"`), see the adseg/views package docstring.

{_md(table4)}

Table 5 (consistency of the win-rate and eCPM clusterings, Rand index from the contingency table).
Paper: agree (TPN) 74.21 %, disagree (FPN) 25.79 %.

{_md(table5.round(4))}
"""
    write_results(path, text)


def _md(frame: pd.DataFrame) -> str:
    return frame.to_markdown(index=False) if _has_tabulate() else frame.to_string(index=False)


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    raise SystemExit(main())
