"""RCEC time and peak memory against the number of items n (pool_usps, replicated rows).

Each size runs in its own subprocess, which reports wall seconds of ``fit``, the peak resident set
size of the process (resource.getrusage(RUSAGE_SELF).ru_maxrss, so it includes the interpreter and
the data, ~100–200 MiB) and the peak of memory allocated during ``fit`` (tracemalloc, which counts
numpy buffers). Two regimes:

* ``replicated``: the n = 11,000 rows of pool_usps (``--clusterings`` columns drawn with the seed)
  tiled to n and shuffled. RCEC solves on the distinct label rows (identical rows have identical
  rows in X*, module doc), so the solver's work stays that of ≈ 6.7k rows and only the O(n)
  bookkeeping and the final k-means on the n × c embedding grow.
* ``distinct``: the same, with every label replaced by a random label of its clustering with
  probability ``--noise`` (0.05), so that the copies of a row mostly differ and the number R of
  distinct rows grows with n (≈ 0.5–0.65 n here; a row survives unchanged with probability
  0.95^10 ≈ 0.6) — where the solver's O(R K²) per iteration and O(R K) memory show. Fewer
  clusterings by default (10), to keep it within the shared machine's budget.

No n × n array is formed: an n×n float64 co-association matrix would need 8n² bytes (0.97 GB at
n = 11,000, 24 GB at n = 55,000, beyond this 23 GB machine).

    .venv/bin/python benchmarks/rcec_scaling.py            # ≈ 15 min on the loaded 2-core box
    .venv/bin/python benchmarks/rcec_scaling.py --quick
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"
STEM = "rcec_scaling"

from adseg_research.bench import write_results  # noqa: E402


def ensemble(regime: str, n: int, n_clusterings: int, noise: float, seed: int):
    from adseg_research.datasets import load_dataset

    data = load_dataset("pool_usps")
    rng = np.random.default_rng(seed)
    cols = rng.choice(data.members.shape[1], n_clusterings, replace=False)
    reps = -(-n // data.y.size)
    labels = np.tile(data.members[:, cols], (reps, 1))[:n]
    y = np.tile(data.y, reps)[:n]
    if regime == "distinct":
        k = labels.max(axis=0) + 1
        flip = rng.random(labels.shape) < noise
        random_labels = (rng.random(labels.shape) * k[None, :]).astype(np.int64)
        labels = np.where(flip, random_labels, labels)
    perm = rng.permutation(n)
    return labels[perm], y[perm]


def worker(regime: str, n: int, n_clusterings: int, noise: float, seed: int, solver: str) -> None:
    from adseg.consensus.rcec import RCEC
    from adseg.metrics import nmi

    labels, y = ensemble(regime, n, n_clusterings, noise, seed)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    fuser = RCEC(n_clusters=10, solver=solver, random_state=seed)
    tracemalloc.start()
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fuser.fit(labels)
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    traced = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    out = {
        "regime": regime,
        "solver": solver,
        "n": n,
        "clusterings": n_clusterings,
        "distinct_rows": int(fuser.X_unique_.shape[0]),
        "K": int(fuser.columns_.shape[0]),
        "n_iter": fuser.n_iter_,
        "converged": bool(fuser.converged_),
        "beta": fuser.beta_,
        "suppressed": len(fuser.suppressed_clusters_),
        "seconds": seconds,
        "cpu_seconds": cpu,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_before_fit_mib": rss_before,
        "traced_peak_mib": traced,
        "nmi": nmi(y, fuser.labels_),
        "load": os.getloadavg()[0],
    }
    print("RESULT " + json.dumps(out), flush=True)


def main(argv=None) -> None:
    global STEM
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="sizes 11,000 and 22,000 only")
    p.add_argument("--sizes", nargs="+", type=int, default=[11000, 22000, 33000, 55000])
    p.add_argument("--distinct-sizes", nargs="+", type=int, default=[5500, 11000, 22000, 55000])
    p.add_argument("--clusterings", type=int, default=20)
    p.add_argument("--distinct-clusterings", type=int, default=10)
    p.add_argument("--noise", type=float, default=0.05)
    p.add_argument("--solver", default="multiplicative", choices=["multiplicative", "fista"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--worker", nargs=4, metavar=("REGIME", "N", "CLUSTERINGS", "SOLVER"))
    p.add_argument(
        "--from-csv", action="store_true", help="only rebuild the markdown from the last run's CSV"
    )
    args = p.parse_args(argv)
    if args.from_csv:
        import pandas as pd

        meta = json.loads((RESULTS / f"{STEM}.json").read_text())
        rows = pd.read_csv(RESULTS / f"{STEM}.csv").to_dict("records")
        write(rows, meta["command"], meta["minutes"], meta.get("date"))
        return
    if args.worker:
        regime, n, m, solver = args.worker
        worker(regime, int(n), int(m), args.noise, args.seed, solver)
        return
    if args.quick:
        args.sizes, args.distinct_sizes = [11000, 22000], [5500, 11000]
        STEM = "rcec_scaling_quick"  # never overwrite the full run's results
    command = " ".join([".venv/bin/python", "benchmarks/rcec_scaling.py", *(argv or sys.argv[1:])])
    runs = [("replicated", n, args.clusterings) for n in args.sizes]
    runs += [("distinct", n, args.distinct_clusterings) for n in args.distinct_sizes]
    rows = []
    t_start = time.time()
    for regime, n, m in runs:
        cmd = [sys.executable, __file__, "--worker", regime, str(n), str(m), args.solver]
        cmd += ["--seed", str(args.seed), "--noise", str(args.noise)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        found = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode or not found:
            rows.append({"regime": regime, "n": n, "clusterings": m, "error": proc.stderr[-300:]})
        else:
            rows.append(json.loads(found[-1][7:]))
        print(rows[-1], flush=True)
        write(rows, command, (time.time() - t_start) / 60)


def write(rows: list[dict], command: str, minutes: float, date: str | None = None) -> None:
    """The results of a run that took ``minutes`` (so far) as .csv, .json and .md."""
    import pandas as pd

    RESULTS.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(rows)
    frame.to_csv(RESULTS / f"{STEM}.csv", index=False)
    date = date or f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M UTC}"
    meta = {"command": command, "minutes": minutes, "date": date}
    (RESULTS / f"{STEM}.json").write_text(json.dumps(meta))
    lines = [
        "# RCEC scaling: time and peak memory against n",
        "",
        f"Command: `{command}` — {date}, "
        f"{os.cpu_count()} CPUs (shared by ~8 engineers), "
        f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB RAM, "
        f"total {minutes:.1f} min. Each row is one subprocess; `load` is the "
        "1-minute load average when the fit ended — at load ≫ 2 the wall time is inflated by the "
        "other jobs on the machine (compare cpu s).",
        "",
        "Data: pool_usps (11,000 items, 10 classes) columns drawn with the seed, rows tiled to n "
        "and shuffled; `distinct` also replaces each label by a random one with probability 0.05 "
        "so that copies of a row mostly differ. R = distinct label rows the solver works on, "
        "K = input clusters. Peak RSS = whole process (interpreter + data + fit); traced = peak "
        "of memory allocated during fit (tracemalloc, numpy buffers included).",
        "",
        "| regime | n | clusterings | R | K | iterations | fit s | cpu s | peak RSS MiB | "
        "RSS before fit MiB | traced peak MiB | NMI | load |",
        "|---" * 13 + "|",
    ]
    for r in rows:
        if isinstance(r.get("error"), str):
            lines.append(
                f"| {r['regime']} | {r['n']} | {r['clusterings']} | error: "
                f"{r['error'][-120:]!r} |" + " |" * 9
            )
            continue
        lines.append(
            f"| {r['regime']} | {r['n']:,} | {r['clusterings']} | {r['distinct_rows']:,} "
            f"| {r['K']} | {r['n_iter']} | {r['seconds']:.1f} | {r['cpu_seconds']:.1f} | "
            f"{r['peak_rss_mib']:.0f} | {r['rss_before_fit_mib']:.0f} | {r['traced_peak_mib']:.0f} "
            f"| {r['nmi']:.3f} | {r['load']:.1f} |"
        )
    lines += [
        "",
        "An n×n float64 co-association matrix (what rcc/l2 hold, several of them for rcc) would be "
        + ", ".join(
            f"{8 * n * n / 2**30:.1f} GiB at n = {n:,}" for n in sorted({r["n"] for r in rows})
        )
        + ".",
    ]
    write_results(RESULTS / f"{STEM}.md", "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
