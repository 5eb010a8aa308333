"""Time and peak memory of rcc and l2 against n, on pool_mnist (20 of its k-means base
clusterings, K = 10), one subprocess per (method, n) so that each peak is its own.

    .venv/bin/python benchmarks/rcc_scaling.py                  # n = 1000, 2000, 5000
    .venv/bin/python benchmarks/rcc_scaling.py --sizes 1000 --quick

Writes benchmarks/results/rcc_scaling.md and .csv (``--quick``: rcc_scaling_quick.*; a
hand-written section of the .md is kept). For n < 5000 the items are a seeded random
subset of pool_mnist's 5,000. Peak memory: ``ru_maxrss`` of the child (whole process: Python,
libraries, the label matrix and every n×n array) and the tracemalloc peak of the fit alone
(numpy's allocations, i.e. the n×n arrays and temporaries). The load average is recorded beside
each timing: the machine is shared, and timings are only comparable at similar load.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"

from adseg_research.bench import recorded_command, write_results  # noqa: E402


def child(method: str, n: int, n_cols: int, seed: int, params: dict) -> dict:
    import numpy as np

    from adseg.consensus.l2 import L2CC
    from adseg.consensus.rcc import RCC
    from adseg.metrics import clustering_accuracy
    from adseg_research.datasets import load_dataset

    ds = load_dataset("pool_mnist")
    rng = np.random.default_rng(seed)
    items = np.sort(rng.choice(ds.y.size, size=min(n, ds.y.size), replace=False))
    labels, y = ds.members[items, :n_cols], ds.y[items]
    k = int(np.unique(y).size)
    fuser = (RCC if method == "rcc" else L2CC)(k, random_state=seed, **params)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    t0, c0 = time.perf_counter(), time.process_time()
    fuser.fit(labels)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    out = {
        "method": method,
        "params": json.dumps(params),
        "n": int(labels.shape[0]),
        "n_clusterings": n_cols,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "tracemalloc_peak_mib": peak / 2**20,
        "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "maxrss_before_fit_mib": rss0 / 1024,
        "nxn_array_mib": labels.shape[0] ** 2 * 8 / 2**20,
        "acc": clustering_accuracy(y, fuser.labels_),
    }
    if method == "rcc":
        out.update(
            n_iter=fuser.n_iter_, converged=bool(fuser.converged_), n_cells=int(fuser.n_cells_)
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 5000])
    ap.add_argument("--methods", nargs="+", default=["l2", "rcc"])
    ap.add_argument("--clusterings", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--params", default="{}", help="JSON keyword arguments for the fuser")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument(
        "--quick", action="store_true", help="n = 1000 only (default output rcc_scaling_quick.md)"
    )
    ap.add_argument("--output", type=Path, default=None, help="default results/rcc_scaling.md")
    ap.add_argument("--child", nargs=2, metavar=("METHOD", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    params = json.loads(args.params)
    if args.child:
        res = child(args.child[0], int(args.child[1]), args.clusterings, args.seed, params)
        print(json.dumps(res))
        return
    if args.quick:
        args.sizes = [1000]
    if args.output is None:  # a smoke run never replaces the recorded results
        args.output = RESULTS / f"rcc_scaling{'_quick' if args.quick else ''}.md"
    rows = []
    for n in args.sizes:
        for method in args.methods:
            load0 = os.getloadavg()[0]
            cmd = [sys.executable, __file__, "--child", method, str(n)]
            cmd += ["--clusterings", str(args.clusterings), "--seed", str(args.seed)]
            cmd += ["--params", args.params]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                row = json.loads(proc.stdout.strip().splitlines()[-1])
            except subprocess.TimeoutExpired:
                row = {"method": method, "n": n, "error": f"timeout after {args.timeout:.0f} s"}
            except (json.JSONDecodeError, IndexError):
                row = {"method": method, "n": n, "error": proc.stderr.strip()[-300:]}
            row["load_before_after"] = f"{load0:.1f}/{os.getloadavg()[0]:.1f}"
            row["date"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
            row["blas_threads"] = os.environ.get("OPENBLAS_NUM_THREADS", "default")
            print(json.dumps(row), flush=True)
            rows.append(row)
    frame = pd.DataFrame(rows)
    csv = args.output.with_suffix(".csv")
    if csv.exists():  # keep other runs (other params / sizes); replace identical keys
        old = pd.read_csv(csv)
        frame["params"] = frame.get("params", pd.Series([json.dumps(params)] * len(frame)))
        key = ["method", "n", "params"]
        old = old[~old.set_index(key).index.isin(frame.set_index(key).index)]
        frame = pd.concat([old, frame], ignore_index=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(csv, index=False)
    write_results(args.output, render(frame, sys.argv[1:]))
    print(f"wrote {args.output}")


def render(frame: pd.DataFrame, argv: list[str]) -> str:
    cols = [
        "method",
        "params",
        "n",
        "n_cells",
        "seconds",
        "cpu_seconds",
        "n_iter",
        "converged",
        "acc",
        "tracemalloc_peak_mib",
        "maxrss_mib",
        "nxn_array_mib",
        "load_before_after",
        "blas_threads",
        "date",
        "error",
    ]
    cols = [c for c in cols if c in frame.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in frame.sort_values(["method", "params", "n"]).iterrows():
        cells = []
        for c in cols:
            v = r[c]
            if isinstance(v, float):
                cells.append("" if pd.isna(v) else f"{v:.3f}" if c in ("acc",) else f"{v:.1f}")
            else:
                cells.append("" if v is None or (isinstance(v, float) and pd.isna(v)) else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    mem = subprocess.run("free -g | sed -n 2p", shell=True, capture_output=True, text=True).stdout
    host = f"{platform.platform()}, nproc {os.cpu_count()}"
    return "\n".join(
        [
            "# rcc and l2: time and peak memory against n (pool_mnist, 20 base clusterings, K=10)",
            "",
            "Generated by `benchmarks/rcc_scaling.py` (one subprocess per row). `seconds` = wall"
            " time of `fit`; `cpu_seconds` = CPU time of the process during `fit` (BLAS pinned to"
            " one thread, so this is close to the wall time on an idle machine). `tracemalloc_peak`"
            " = the fit's own allocations (numpy arrays); `maxrss` = the whole child process."
            " `nxn_array_mib` = one dense n×n float64 array: l2 holds one; rcc works on the g ="
            " `n_cells` distinct label rows and holds four g×g arrays (M̃, E, Λ, W) plus the"
            " n×n co-association it reduces (before the cell reduction of 2026-11-21 it held"
            " four n×n arrays).",
            "",
            *lines,
            "",
            f"Last command: `{recorded_command('rcc_scaling.py', argv)}`",
            "",
            f"Machine: {host}, memory (free -g): {mem.strip()}",
            "The machine is shared by ~8 engineers; the load average beside each row says how busy"
            " it was. Timings at load ≫ nproc are several times the idle-machine cost.",
            "",
        ]
    )


if __name__ == "__main__":
    main()
