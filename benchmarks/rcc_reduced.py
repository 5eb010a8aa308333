"""rcc and l2 on the reduced problem (issue 40) against the full solve, and their cost at scale.

Three parts, rows appended to results/rcc_reduced.csv as they come; results/rcc_reduced.md is
re-rendered from all stored rows.

* table2: the Table 2 sets (adseg_research.bench_table2.table2_ensembles: 40 k-means runs per
  ensemble, items shuffled with seed + repetition), ``--reps`` ensembles each. The sets are small,
  so the reduction is forced: "rcc reduced (g/4)" is RCC with max_cells = max(K + 1, g // 4),
  g the ensemble's distinct label rows; "rcc full" is max_cells=None. Both at the other defaults
  (normalize="auto"), same seed.
* pools: pool_binalpha, pool_semeion, pool_mf, pool_mnist, ``--draws`` draws each, the protocol
  of benchmarks/fuser_peers.py (draw d: rng = np.random.default_rng(d), 20 of the 100 columns by
  rng.choice without replacement, items permuted by rng.permutation). Methods: rcc full, rcc
  reduced (g/4), rcc at its defaults where g > 2000 (max_cells=2000; at or below it the default
  is the full solve), l2 dense (max_dense=None) and l2 sparse (max_dense=1). ``--parts
  spread`` adds the full rcc at seed + 100 on the same draws (the difference two full fits show
  by their seed alone, the yardstick for the reduced one's), ``--parts g10`` rcc reduced ten-fold
  (max_cells = g // 10).
* scale: synthetic planted label matrices (n items, K = 20 planted clusters, m = 20 columns of
  20–39 labels, each label replaced by a random one with probability 0.3, seed 0) at n = 20,000
  and 100,000: rcc and l2 at their defaults (both reduced there), one subprocess per row.

seconds = wall time of fit; peak_mib = tracemalloc's peak of the fit (numpy's allocations);
maxrss_mib (scale only) = the child process's peak resident memory during the fit (VmHWM after
resetting it through /proc/self/clear_refs; the interpreter, its libraries and the label matrix
included: rss_before_mib is the resident memory before the fit).
Run with one BLAS thread and nice (the machine is shared; the load average is recorded):

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/rcc_reduced.py
    .venv/bin/python benchmarks/rcc_reduced.py --render      # tables from the stored rows only
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from adseg.consensus.l2 import L2CC  # noqa: E402
from adseg.consensus.rcc import RCC  # noqa: E402
from adseg.metrics import clustering_accuracy, nmi  # noqa: E402
from adseg_research.isolated import proc_kib  # noqa: E402

RESULTS = Path(__file__).parent / "results"
CSV = RESULTS / "rcc_reduced.csv"
MD = RESULTS / "rcc_reduced.md"
TABLE2 = ("cstr", "glass", "ionosphere", "iris", "reuters10", "soybean", "wine", "zoo")
POOLS = ("pool_binalpha", "pool_semeion", "pool_mf", "pool_mnist")
SCALE_N = (20000, 100000)
NOTES = "## Notes (hand-written)"


def _methods(k: int, g: int, seed: int, pools: bool) -> dict:
    small = max(k + 1, g // 4)
    out = {
        "rcc full": lambda: RCC(k, max_cells=None, random_state=seed),
        "rcc reduced (g/4)": lambda: RCC(k, max_cells=small, random_state=seed),
    }
    if pools and g > 2000:  # below, the default is the full solve
        out["rcc default"] = lambda: RCC(k, random_state=seed)
    if pools:
        out["l2 dense"] = lambda: L2CC(k, max_dense=None, random_state=seed)
        out["l2 sparse"] = lambda: L2CC(k, max_dense=1, random_state=seed)
    return out


def _fit_row(make, labels: np.ndarray, y: np.ndarray) -> dict:
    fuser = make()
    tracemalloc.start()
    t0 = time.perf_counter()
    fuser.fit(labels)
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return {
        "acc": clustering_accuracy(y, fuser.labels_),
        "nmi": nmi(y, fuser.labels_),
        "seconds": round(seconds, 3),
        "peak_mib": round(peak, 1),
        "n_cells": getattr(fuser, "n_cells_", None),
        "n_solved": getattr(fuser, "n_micro_clusters_", None),
        "reduced": bool(getattr(fuser, "reduced_", getattr(fuser, "sparse_", False))),
        "load": round(os.getloadavg()[0], 2),
    }


COLUMNS = ["part", "set", "rep", "n", "k", "g", "method", "acc", "nmi", "seconds", "peak_mib"]
COLUMNS += ["n_cells", "n_solved", "reduced", "load", "maxrss_mib", "rss_before_mib"]


def _append(row: dict) -> None:
    frame = pd.DataFrame([row]).reindex(columns=COLUMNS)
    frame.to_csv(CSV, mode="a", header=not CSV.exists(), index=False)
    print(json.dumps(row), flush=True)


def _run_ensemble(part, name, rep, labels, y, k, pools):
    g = np.unique(labels, axis=0).shape[0]
    for method, make in _methods(k, g, rep, pools).items():
        row = {"part": part, "set": name, "rep": rep, "n": labels.shape[0], "k": k, "g": g}
        row["method"] = method
        _append(row | _fit_row(make, labels, y))


def run_table2(reps: int) -> None:
    from adseg_research.bench_table2 import table2_ensembles

    for name in TABLE2:
        ensembles, k = table2_ensembles(name, n_repetitions=reps)
        for ens in ensembles:
            _run_ensemble("table2", name, ens.repetition, ens.labels, ens.y, k, pools=False)


EXTRA = {
    "spread": (
        "rcc full (seed + 100)",
        lambda k, g, seed: RCC(k, max_cells=None, random_state=seed + 100),
    ),
    "g10": (
        "rcc reduced (g/10)",
        lambda k, g, seed: RCC(k, max_cells=max(k + 1, g // 10), random_state=seed),
    ),
}
"""Extra pool parts, one method each on the same draws: "spread", the full rcc at another seed
(how far two full fits differ by their seed alone); "g10", a ten-fold reduction."""


def run_pools(draws: range, extra: str | None = None) -> None:
    from adseg_research.datasets import load_dataset

    for name in POOLS:
        ds = load_dataset(name)
        members, y = np.asarray(ds.members), np.asarray(ds.y)
        k = int(np.unique(y).size)
        for d in draws:
            rng = np.random.default_rng(d)
            cols = rng.choice(members.shape[1], size=20, replace=False)
            order = rng.permutation(members.shape[0])
            labels = members[order][:, cols]
            if extra is None:
                _run_ensemble("pools", name, d, labels, y[order], k, pools=True)
                continue
            method, make = EXTRA[extra]
            g = np.unique(labels, axis=0).shape[0]
            row = {"part": "pools", "set": name, "rep": d, "n": labels.shape[0], "k": k, "g": g}
            row["method"] = method
            fuser = make(k, g, d)
            _append(row | _fit_row(lambda fuser=fuser: fuser, labels, y[order]))


def planted(n: int, k: int = 20, m: int = 20, p: float = 0.3, seed: int = 0):
    """(labels (n, m), truth (n,)): the scale part's synthetic label matrix (module docstring)."""
    rng = np.random.RandomState(seed)
    y = rng.randint(0, k, n)
    labels = np.empty((n, m), dtype=np.int64)
    for v in range(m):
        kv = rng.randint(k, 2 * k)
        col = rng.permutation(kv)[y % kv]
        flip = rng.rand(n) < p
        col[flip] = rng.randint(0, kv, flip.sum())
        labels[:, v] = col
    return labels, y


def scale_row(n: int, method: str) -> None:
    """One scale row, in this (child) process: prints the row as JSON."""
    labels, y = planted(n)
    make = {"rcc": lambda: RCC(20, random_state=0), "l2": lambda: L2CC(20, random_state=0)}
    g = np.unique(labels, axis=0).shape[0]
    row = {"part": "scale", "set": "planted", "rep": 0, "n": n, "k": 20, "g": g}
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS (Linux)
    before = proc_kib("VmRSS") / 1024
    row |= {"method": f"{method} default"} | _fit_row(make[method], labels, y)
    row["maxrss_mib"] = round(proc_kib("VmHWM") / 1024, 1)
    row["rss_before_mib"] = round(before, 1)
    print(json.dumps(row), flush=True)


def run_scale() -> None:
    for n in SCALE_N:
        for method in ("l2", "rcc"):
            cmd = [sys.executable, __file__, "--scale-row", str(n), method]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            _append(json.loads(out.strip().splitlines()[-1]))


def _mean_std(s: pd.Series, digits: int = 3) -> str:
    return f"{s.mean():.{digits}f} ± {s.std(ddof=0):.{digits}f}"


def render() -> None:
    rows = pd.read_csv(CSV)
    lines = [
        "# rcc and l2 on the reduced problem against the full solve (issue 40)",
        "",
        "Generated by `benchmarks/rcc_reduced.py` (protocol in its docstring). Command: "
        "`OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 .venv/bin/python "
        "benchmarks/rcc_reduced.py` (one BLAS thread; the machine is shared, `load` = its "
        "1-minute load average beside each row, 2 cores).",
        "",
    ]
    for part, title in (("table2", "Table 2 sets"), ("pools", "Pools (20 of 100 columns)")):
        sub = rows[rows["part"] == part]
        if sub.empty:
            continue
        lines += [f"## {title}", "", _accuracy_table(sub), ""]
    sub = rows[rows["part"] == "scale"]
    if not sub.empty:
        lines += ["## Scale (synthetic planted, K = 20, m = 20)", ""]
        cols = ["method", "n", "g", "n_solved", "seconds", "peak_mib", "rss_before_mib"]
        cols += ["maxrss_mib", "acc", "load"]
        lines += [_markdown(sub[cols])]
    notes = ""
    if MD.exists() and NOTES in MD.read_text():  # the hand-written analysis survives a re-render
        notes = MD.read_text()[MD.read_text().index(NOTES) :]
    MD.write_text("\n".join(lines) + "\n" + ("\n" + notes if notes else ""))


METHOD_ORDER = ["rcc full", "rcc full (seed + 100)", "rcc default", "rcc reduced (g/4)"]
METHOD_ORDER += ["rcc reduced (g/10)", "l2 dense", "l2 sparse"]


def _accuracy_table(sub: pd.DataFrame) -> str:
    out = []
    order = {name: i for i, name in enumerate(dict.fromkeys(sub["set"]))}
    sub = sub.assign(_s=sub["set"].map(order), _m=sub["method"].map(METHOD_ORDER.index))
    sub = sub.sort_values(["_s", "_m"], kind="stable")
    for (name, method), grp in sub.groupby(["set", "method"], sort=False):
        full = sub[(sub["set"] == name) & (sub["method"] == "rcc full")].set_index("rep")["acc"]
        diff = grp.set_index("rep")["acc"] - full.reindex(grp["rep"]).to_numpy()
        solved = grp["n_solved"]
        out.append(
            {
                "set": name,
                "n": int(grp["n"].iloc[0]),
                "g (mean)": round(grp["g"].mean()),
                "method": method,
                "solved on (mean)": round(solved.mean()) if solved.notna().any() else "",
                "reps": len(grp),
                "ACC": _mean_std(grp["acc"]),
                "ACC − full rcc": _mean_std(diff) if method.startswith("rcc") else "",
                "NMI": _mean_std(grp["nmi"]),
                "seconds": _mean_std(grp["seconds"], 1),
                "peak MiB": _mean_std(grp["peak_mib"], 0),
            }
        )
    return _markdown(pd.DataFrame(out))


def _markdown(frame: pd.DataFrame) -> str:
    head = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join("" if pd.isna(v) else str(v) for v in r) + " |" for r in frame.values]
    return "\n".join([head, rule, *body])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", default=["table2", "pools", "scale"])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--draws", type=int, default=3)
    parser.add_argument("--first-draw", type=int, default=0, help="pools: draws from this one on")
    parser.add_argument("--render", action="store_true")
    parser.add_argument("--scale-row", nargs=2, metavar=("N", "METHOD"))
    args = parser.parse_args()
    if args.scale_row:
        scale_row(int(args.scale_row[0]), args.scale_row[1])
        return
    if not args.render:
        draws = range(args.first_draw, args.first_draw + args.draws)
        runs = {"table2": lambda: run_table2(args.reps), "pools": lambda: run_pools(draws)}
        for extra in EXTRA:
            runs[extra] = lambda extra=extra: run_pools(draws, extra)
        runs["scale"] = run_scale
        for part in args.parts:
            runs[part]()
    render()


if __name__ == "__main__":
    main()
