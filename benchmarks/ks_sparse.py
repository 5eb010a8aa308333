"""The KS view stage, dense against sparse (adseg.views.ks_view, both views, every α).

For each marketplace size N (adseg.simulate, ``n_advertisers=N``, seed 11; training-window
market prices and paid eCPMs; ViewConfig defaults, so advertisers with ≥ 5 samples of a kind
enter its view), each path runs in a fresh subprocess: its peak resident memory (VmHWM, reset
once the samples are loaded, whose RSS is reported apart as the baseline) is the stage's own:
* dense: ncut.SPARSE_MIN_N raised above N, the path every size took before (n_v × n_v distance
  matrix, dense graphs, LDLᵀ Bethe-Hessian count);
* sparse: ncut.SPARSE_MIN_N lowered to 2, the block-built CSR graphs and the sparse cut (every
  pair compared: ``ks_partners=None``);
* sampled (``--paths sparse sampled``): as sparse, on ViewConfig's default random partner design
  (``ks_partners``).
Recorded per path: wall seconds of the stage, peak RSS, and per column the graph's linked pairs
(n_edges), the clusters found, and the ARI between the path's labels and the sparse path's
(dense's for the sparse path).

Usage:
    OPENBLAS_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/ks_sparse.py
    ... benchmarks/ks_sparse.py --sizes 5000 --dense-max 5000 --output ks_sparse_5000
Writes benchmarks/results/<output>.md (default ks_sparse) and .csv.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from adseg_research.bench import machine_summary, recorded_command, write_results
from adseg_research.isolated import proc_kib

RESULTS = Path(__file__).parent / "results"


def marketplace_samples(n_advertisers: int, seed: int = 11) -> tuple[list, list]:
    """Training-window market prices and paid eCPMs per advertiser (n each, empty allowed)."""
    from adseg.simulate import MarketplaceConfig, simulate_marketplace

    market = simulate_marketplace(MarketplaceConfig(n_advertisers=n_advertisers, seed=seed))
    auctions = market.auctions
    ts = pd.to_datetime(auctions["ts"])
    end = ts.min().normalize() + pd.Timedelta(days=market.config.train_days)
    groups = auctions[(ts < end).to_numpy()].groupby("advertiser_id")
    ids = market.advertisers["advertiser_id"].to_numpy()
    empty = np.empty(0)
    win = [groups.get_group(i)["market_price_ecpm"].to_numpy(float) if i in groups.groups
           else empty for i in ids]  # fmt: skip
    cost = [groups.get_group(i)["paid_ecpm"].dropna().to_numpy(float) if i in groups.groups
            else empty for i in ids]  # fmt: skip
    return win, cost


def worker(samples_path: str, mode: str, out_path: str) -> None:
    """One path in this (fresh) process: both KS views, every α; writes labels and metadata."""
    from threadpoolctl import threadpool_limits

    import adseg.views.ncut as ncut
    from adseg.views import ViewConfig, ks_view

    with open(samples_path, "rb") as f:
        win, cost = pickle.load(f)
    baseline = proc_kib("VmRSS") / 1024
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) restarts from here
    ncut.SPARSE_MIN_N = 10**9 if mode == "dense" else 2
    # dense / sparse: every pair compared; sampled: the default random partner design
    config = ViewConfig() if mode == "sampled" else ViewConfig(ks_partners=None)
    t0 = time.perf_counter()
    with threadpool_limits(limits=1):
        views = [ks_view(s, v, config, random_state=i) for i, (s, v) in
                 enumerate(((win, "win_rate"), (cost, "ecpm_cost")))]  # fmt: skip
    seconds = time.perf_counter() - t0
    peak = proc_kib("VmHWM") / 1024
    columns = pd.concat([v.columns for v in views], ignore_index=True)
    labels = np.concatenate([v.labels for v in views], axis=1)
    np.save(out_path + ".npy", labels)
    summary = {"seconds": seconds, "peak_mib": peak, "baseline_mib": baseline,
               "columns": columns.to_dict(orient="list")}  # fmt: skip
    Path(out_path + ".json").write_text(json.dumps(summary, default=float))


def run_path(samples_path: Path, mode: str, workdir: Path, timeout: float) -> dict | None:
    """Run ``worker`` in a subprocess; None if it failed or ran past ``timeout`` seconds."""
    out = str(workdir / mode)
    cmd = [sys.executable, __file__, "--worker", str(samples_path), mode, out]
    try:
        done = subprocess.run(cmd, timeout=timeout, capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        print(f"  {mode}: over {timeout:.0f} s, stopped", flush=True)
        return None
    if done.returncode != 0:
        print(f"  {mode} failed:\n{done.stderr[-2000:]}", flush=True)
        return None
    result = json.loads(Path(out + ".json").read_text())
    result["labels"] = np.load(out + ".npy")
    return result


def measure(n: int, run_dense: bool, timeout: float, paths=("sparse",)) -> list[dict]:
    """Both paths at one size; one row per (path, column)."""
    from adseg.metrics import ari

    t0 = time.perf_counter()
    win, cost = marketplace_samples(n)
    print(f"N = {n}: simulated in {time.perf_counter() - t0:.0f} s", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "samples.pkl"
        with open(path, "wb") as f:
            pickle.dump((win, cost), f)
        modes = (("dense",) if run_dense else ()) + tuple(paths)
        results = {m: run_path(path, m, Path(tmp), timeout) for m in modes}
    for mode, res in results.items():
        if res is None:
            rows.append({"N": n, "path": mode, "status": "failed or timed out"})
            continue
        print(f"  {mode}: {res['seconds']:.1f} s, peak {res['peak_mib']:.0f} MiB", flush=True)
        cols = pd.DataFrame(res["columns"])
        for j, col in cols.iterrows():
            other = results.get("sparse" if mode != "sparse" else "dense")
            agree = np.nan
            if other is not None:
                a, b = res["labels"][:, j], other["labels"][:, j]
                agree = ari(a[a >= 0], b[a >= 0])
            rows.append({
                "N": n, "path": mode, "status": "ok", "stage_seconds": res["seconds"],
                "peak_mib": res["peak_mib"], "baseline_mib": res["baseline_mib"],
                "view": col["view"], "alpha": col["alpha"],
                "n_v": n - int(col["n_excluded"]), "n_edges": int(col["n_edges"]),
                "density": 2 * col["n_edges"] / max(1, (n - col["n_excluded"]) ** 2),
                "n_clusters": int(col["n_clusters"]), "ks_seconds": col["ks_seconds"],
                "ari_vs_other_path": agree,
            })  # fmt: skip
    return rows


def report(frame: pd.DataFrame, command: str, started: str) -> str:
    """The results page: the per-path summary, then the per-column table."""
    ok = frame[frame["status"] == "ok"]
    summary = ok.groupby(["N", "path"], sort=False).agg(
        stage_seconds=("stage_seconds", "first"), ks_seconds=("ks_seconds", "sum"),
        peak_mib=("peak_mib", "first"), baseline_mib=("baseline_mib", "first"),
        nnz_max=("n_edges", "max"), min_ari=("ari_vs_other_path", "min"),
    ).reset_index()  # fmt: skip
    summary["ks_seconds"] /= 3  # the distance time is shared out over the 3 α columns of a view
    failed = frame[frame["status"] != "ok"]
    lines = [
        "# KS view stage: dense against sparse graphs",
        "",
        f"Measured {started} on {machine_summary()}.",
        "",
        f"Command: `{command}`",
        "",
        "Both KS views, α = 0.01 / 0.05 / 0.1, ViewConfig defaults, one BLAS thread; each path in"
        " a fresh subprocess. peak_mib = the subprocess's peak RSS during the stage (VmHWM, reset"
        " before it), baseline_mib = its RSS with the samples loaded, before the stage."
        " ks_seconds = distance (dense) or block-built graph (sparse) time, both views."
        " nnz_max = linked pairs i < j of the densest graph (α = 0.01). min_ari = the lowest"
        " ARI between the two paths' labels over the 6 columns. Wall-clock"
        " times on a shared 2-core machine are upper bounds.",
        "",
        summary.to_markdown(index=False, floatfmt=".3g"),
        "",
        "## Per column",
        "",
        ok.drop(columns=["status", "peak_mib", "baseline_mib", "stage_seconds"]).to_markdown(
            index=False, floatfmt=".4g"
        ),
    ]
    if len(failed):
        lines += ["", "Not measured: " + ", ".join(f"N = {r.N} {r.path} ({r.status})"
                                               for r in failed.itertuples())]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 10000, 20000])
    parser.add_argument("--dense-max", type=int, default=10000,
                        help="run the dense path up to this N (default 10,000)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per path")
    parser.add_argument("--output", default="ks_sparse")
    parser.add_argument("--paths", nargs="+", default=["sparse"], choices=["sparse", "sampled"])
    args = parser.parse_args(argv)
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    rows = []
    for n in args.sizes:  # loop over marketplace sizes
        rows += measure(n, n <= args.dense_max, args.timeout, args.paths)
        frame = pd.DataFrame(rows)
        frame.to_csv(RESULTS / f"{args.output}.csv", index=False)
        command = recorded_command("ks_sparse.py", (argv or sys.argv[1:]))
        write_results(RESULTS / f"{args.output}.md", report(frame, command, started))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(*sys.argv[2:5])
    else:
        main()
