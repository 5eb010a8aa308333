"""Where one sccbg fit spends its wall time, step by step (issue 40: "under 2 minutes").

Fits ``SCCBG(80)`` once on ``fusers_100k.nightly_like(n)`` with ``n_jobs`` threads and one BLAS
thread, and times every call of the fit's four steps (``w_step``, ``h_matrix``, ``s_step``,
``spectral``; the rest is the set-up, the co-association and the labels). Per outer iteration
it reports the W-step's and S-step's seconds, the S-step's sweeps, S's non-zero share after it
and ρ; then the totals by step. The BLAS library's kernel is named beside the machine, and a kernel
forced by ``OPENBLAS_CORETYPE`` is in the recorded command: the same code took 85–98 s with
OpenBLAS's SkylakeX kernels and 103–126 s with its AVX2 (Haswell) kernels on an AVX-512 VM, and
199 s on an AVX2-only VM (docs/algorithms/sccbg.md).

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/sccbg_steps.py --size 100000 --n-jobs 2
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fusers_100k import make, nightly_like  # noqa: E402

import adseg.consensus.sccbg as sccbg  # noqa: E402
from adseg.metrics import nmi  # noqa: E402
from adseg_research.bench import machine_summary, recorded_command, write_results  # noqa: E402

STEPS = ("w_step", "h_matrix", "s_step", "spectral")


def timed_fit(n: int, n_jobs: int) -> tuple[list[tuple[str, float, dict]], dict]:
    """(calls: (step, seconds, details) in call order, the fit's totals) of one fit."""
    labels, truth = nightly_like(n)
    calls = []

    def timing(name, step):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            out = step(*args, **kwargs)
            details = {}
            if name == "s_step":
                S = out[0]
                details = {"sweeps": out[1], "rho": args[6], "nnz": np.count_nonzero(S) / S.size}
            calls.append((name, time.perf_counter() - start, details))
            return out

        return timed

    originals = {name: getattr(sccbg, name) for name in STEPS}
    for name, step in originals.items():
        setattr(sccbg, name, timing(name, step))
    try:
        start, cpu = time.perf_counter(), time.process_time()
        fitted = make("sccbg", 80, False, n_jobs).fit(labels)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    finally:
        for name, step in originals.items():
            setattr(sccbg, name, step)
    totals = {
        "wall": wall,
        "cpu": cpu,
        "n_iter": fitted.n_iter_,
        "distinct_rows": fitted.n_unique_rows_,
        "nmi": nmi(truth, fitted.labels_),
    }
    return calls, totals


def report(out: Path, n: int, n_jobs: int, calls, totals, argv) -> None:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    by_step = defaultdict(float)
    for name, seconds, _ in calls:
        by_step[name] += seconds
    rest = totals["wall"] - sum(by_step.values())
    lines = [
        f"# sccbg at n = {n:,}, step by step (issue 40)",
        "",
        f"Date: {stamp}. Machine: {machine_summary()}.",
        "",
        f"Command: `{recorded_command('sccbg_steps.py', argv)}`",
        "",
        f"One fit of `SCCBG(80, n_jobs={n_jobs})` on `nightly_like({n})`: "
        f"{totals['distinct_rows']:,} distinct rows, **{totals['wall']:.1f} s wall**, "
        f"{totals['cpu']:.1f} CPU s, {totals['n_iter']} iterations, NMI {totals['nmi']:.4f}.",
        "",
        "| step | calls | wall s |",
        "|---|---|---|",
    ]
    for name in STEPS:
        count = sum(1 for c in calls if c[0] == name)
        lines.append(f"| `{name}` | {count} | {by_step[name]:.1f} |")
    lines += [f"| the rest | | {rest:.1f} |", "", "Per outer iteration (W-step 0: skipped):", ""]
    lines += [
        "| iteration | W-step s | S-step s | sweeps | S non-zero | ρ |",
        "|---|---|---|---|---|---|",
    ]
    iteration, w_seconds = 0, 0.0
    for name, seconds, details in calls:
        if name == "w_step":
            w_seconds = seconds
        elif name == "s_step":
            iteration += 1
            lines.append(
                f"| {iteration} | {w_seconds:.2f} | {seconds:.2f} | {details['sweeps']} |"
                f" {100 * details['nnz']:.2f} % | {details['rho']:g} |"
            )
            w_seconds = 0.0
    write_results(out, "\n".join(lines) + "\n")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=100_000, help="advertisers n")
    p.add_argument("--n-jobs", type=int, default=2, help="sccbg's threads")
    p.add_argument("--output", type=Path, default=None)
    args = p.parse_args(argv)
    out = args.output or ROOT / "benchmarks" / "results" / f"sccbg_steps_{args.size}.md"
    calls, totals = timed_fit(args.size, args.n_jobs)
    report(out, args.size, args.n_jobs, calls, totals, sys.argv[1:] if argv is None else argv)
    print(f"{totals['wall']:.1f} s wall, {totals['cpu']:.1f} CPU s; wrote {out}")


if __name__ == "__main__":
    main()
