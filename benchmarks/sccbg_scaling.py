"""SCCBG (SPCC) scaling: time and peak memory against the number of items.

SCCBG works on the n × k instance–cluster bipartite graph (k = total base clusters), never on an
n × n matrix, so time and memory should grow linearly in n at fixed k. Three series:

A. ``pool_usps`` as distributed (n = 11,000, 20 pool columns drawn with a fixed seed, c = 10),
   default settings: the real-data target (< 2 minutes).
B. ``texture`` features (5,500 × 40, c = 11) replicated r times with Gaussian jitter (σ = 0.05 ×
   each feature's std) so the copies differ, 20 k-means runs with k = c per size (the paper's
   k_b = c protocol, k ≈ 220): n = 5,500 … 110,000. Each size is fitted with ``compress=False``
   (every row computed: the honest linear-scaling curve); the largest size also with the default
   ``compress=True`` (identical label rows fused, exact).
C. pool rows replicated to n ≥ 100,000 (pool_lung ×500 = 101,500 items; pool_usps ×10 =
   110,000 with the same 20 columns as A) with the default ``compress=True``: replicated rows
   collapse onto the original pool's distinct rows.

Each fit runs in its own subprocess, which reports wall time and peak RSS (``ru_maxrss``) and its
RSS just before the fit (data loaded), so sizes do not share an allocator high-water mark.

Usage: ``nice -n 10 .venv/bin/python benchmarks/sccbg_scaling.py [--quick]``.
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
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # 2 shared cores: threads only contend
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results" / "sccbg_scaling.md"

from adseg_research.bench import recorded_command, write_results  # noqa: E402

CACHE = Path("/tmp/adseg_sccbg_cache")
SEED = 0


def _rss_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def make_labels(source: str, reps: int) -> tuple[Path, int]:
    """Write the base clusterings (n, 20) and classes for one case to the cache; returns the
    path and c."""
    from adseg_research.datasets import load_dataset
    from adseg_research.ensemble import kmeans_ensemble

    CACHE.mkdir(exist_ok=True)
    path = CACHE / f"scaling_{source}_x{reps}_seed{SEED}.npz"
    ds = load_dataset(source.removesuffix("-jitter"))
    c = ds.n_classes
    if path.exists():
        return path, c
    rng = np.random.default_rng(SEED)
    if ds.members is not None:
        cols = rng.choice(ds.members.shape[1], 20, replace=False)
        labels = np.tile(ds.members[:, cols], (reps, 1))
        y = np.tile(ds.y, reps)
    else:
        X = np.tile(ds.X, (reps, 1))
        X = X + rng.normal(scale=0.05 * ds.X.std(axis=0), size=X.shape)
        y = np.tile(ds.y, reps)
        labels = kmeans_ensemble(X, 20, c, random_state=SEED)
    perm = rng.permutation(y.size)  # shuffled items, recorded seed
    np.savez(path, labels=labels[perm], y=y[perm])
    return path, c


def worker(path: str, c: int, compress: bool) -> None:
    """Child process: one fit, JSON on stdout."""
    from adseg.consensus.sccbg import SCCBG
    from adseg.metrics import clustering_accuracy, nmi

    z = np.load(path)
    labels, y = z["labels"], z["y"]
    before = _rss_mib()
    t, cpu = time.perf_counter(), time.process_time()
    f = SCCBG(c, compress=compress, random_state=SEED).fit(labels)
    seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            dict(
                n=int(labels.shape[0]),
                k=int(f.cluster_ids_.shape[0]),
                unique_rows=f.n_unique_rows_,
                compress=compress,
                seconds=seconds,
                cpu_seconds=cpu,
                rss_before_mib=before,
                peak_rss_mib=peak,
                acc=clustering_accuracy(y, f.labels_),
                nmi=nmi(y, f.labels_),
                n_iter=f.n_iter_,
                path=f.labels_path_,
                load=os.getloadavg()[0],
            )
        )
    )


def row_path(source: str, reps: int, compress: bool) -> Path:
    return CACHE / f"scalrow_{source}_x{reps}_c{int(compress)}_seed{SEED}.json"


def run_case(source: str, reps: int, compress: bool, log, resume: bool = False) -> dict:
    stored = row_path(source, reps, compress)
    if resume and stored.exists():
        row = json.loads(stored.read_text())
        log(f"{source} ×{reps} compress={compress}: reusing {stored}")
        return row
    path, c = make_labels(source, reps)
    cmd = [sys.executable, __file__, "--worker", str(path), str(c), str(int(compress))]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"worker failed for {source} ×{reps}: {proc.stderr[-2000:]}")
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    row.update(source=source, reps=reps)
    stored.write_text(json.dumps(row))
    log(f"{source} ×{reps} compress={compress}: {row} ({time.perf_counter() - t:.0f}s)")
    return row


def table(rows: list[dict]) -> list[str]:
    out = [
        "| data | n | k | distinct rows | compress | wall s | CPU s | peak RSS (MiB) | RSS before |"
        " ACC | NMI | iters | labels path | load (1 min) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['source']} ×{r['reps']} | {r['n']:,} | {r['k']} | {r['unique_rows']:,} |"
            f" {r['compress']} | {r['seconds']:.1f} | {r['cpu_seconds']:.1f} |"
            f" {r['peak_rss_mib']:.0f} | {r['rss_before_mib']:.0f} | {r['acc']:.3f} |"
            f" {r['nmi']:.3f} | {r['n_iter']} | {r['path']} | {r['load']:.1f} |"
        )
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="sizes up to 22,000 only")
    p.add_argument("--output", type=Path, default=None, help=f"default {RESULTS.name}")
    p.add_argument("--resume", action="store_true", help="reuse rows stored under " + str(CACHE))
    p.add_argument(
        "--cases",
        nargs="*",
        help="run only these cases, each SOURCE:REPLICAS:COMPRESS(0/1), e.g. pool_lung:500:1",
    )
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), bool(int(sys.argv[4])))
        return
    args = p.parse_args(argv)
    if args.output is None:  # a smoke run never replaces the recorded results
        args.output = RESULTS.with_name("sccbg_scaling_quick.md") if args.quick else RESULTS
    t0 = time.perf_counter()

    def log(msg):
        print(f"[{time.perf_counter() - t0:6.0f}s] {msg}", flush=True)

    cases = [("pool_usps", 1, True)]
    sizes = (1, 4) if args.quick else (1, 4, 10, 20)
    cases += [("texture-jitter", r, False) for r in sizes]
    cases += [("texture-jitter", sizes[-1], True)]
    if not args.quick:
        cases += [("pool_lung", 500, True), ("pool_usps", 10, True)]
    if args.cases:
        chosen = [(s, int(r), bool(int(c))) for s, r, c in (x.split(":") for x in args.cases)]
        not_run = [x for x in cases if x not in chosen]
        cases = chosen
    else:
        not_run = []
    series_a, series_b, series_c = [], [], []
    for i, (source, reps, compress) in enumerate(cases):
        row = run_case(source, reps, compress, log, resume=args.resume)
        if source.startswith("pool_"):
            (series_a if reps == 1 else series_c).append(row)
        else:
            series_b.append(row)
        # Rewrite the report after every case so a cut-short run still leaves its numbers.
        write_report(args, series_a, series_b, series_c, cases[i + 1 :] + not_run)


def write_report(args, series_a, series_b, series_c, pending) -> None:
    b_off = [r for r in series_b if not r["compress"]]
    ratio = [
        (
            b["n"] / a["n"],
            b["cpu_seconds"] / a["cpu_seconds"],
            b["peak_rss_mib"] / a["peak_rss_mib"],
        )
        for a, b in zip(b_off[:-1], b_off[1:], strict=True)
    ]
    mem = subprocess.run(["free", "-g"], capture_output=True, text=True).stdout.strip()
    command = recorded_command("sccbg_scaling.py", sys.argv[1:])
    out = [
        "# SCCBG (SPCC) scaling: time and peak memory vs number of items",
        "",
        f"Date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M UTC}. Machine: {platform.platform()},"
        f" nproc={os.cpu_count()}, OpenBLAS 1 thread; load (1/5/15 min) at end:"
        f" {' '.join(f'{x:.2f}' for x in os.getloadavg())} (2 cores shared by several"
        " engineers: timings are noisy; the per-run 1-minute load is in the last column).",
        "",
        "```",
        mem,
        "```",
        "",
        f"Command: `{command.strip()}`",
        "",
        "Defaults throughout: γ = 1e-4, SCCBG with learned W, c = class count, 20 base",
        "clusterings. Peak RSS is the fitting subprocess's high-water mark (includes Python,",
        "numpy and the loaded labels; `RSS before` is the baseline just before the fit). CPU s is",
        "the process CPU time of the fit (single-threaded BLAS, so ≈ the wall time on an idle",
        "core); it is the robust number here, wall time depends on the machine's load.",
        "",
        "## A. pool_usps (n = 11,000, 20 pool columns, as distributed; items shuffled)",
        "",
        *table(series_a),
        "",
        "## B. texture, replicated with jitter, k-means base clusterings (k_b = c = 11)",
        "",
        *table(series_b),
        "",
        "Growth between consecutive sizes with compress=False (n ratio → CPU-time ratio, peak-RSS"
        " ratio): "
        + "; ".join(f"×{a:.1f} → ×{b:.2f} time, ×{m:.2f} memory" for a, b, m in ratio)
        + ".",
        "",
    ]
    if series_c:
        out += [
            "## C. pool rows replicated (n ≥ 100,000), default compress=True",
            "",
            *table(series_c),
            "",
            "Replicated rows are identical label rows, so compression fuses them onto the",
            "original pool's distinct rows: the cost is that of a problem with that many rows",
            "plus O(n k) to expand the outputs. Compression is exact (the tests check that",
            "compress on and off agree), but replication itself changes the problem: C = YᵀY",
            "counts items, so the coupling term grows with the replication factor.",
            "",
        ]
    out += [
        "No n × n array is allocated anywhere (an n × n float64 matrix at n = 110,000 would be",
        f"{110_000**2 * 8 / 2**30:.0f} GiB). Memory is about 8–10 dense (distinct rows × k)",
        "float64 arrays plus the n × k outputs `graph_`, `edge_weights_`, `min_edge_weights_`.",
        "",
    ]
    if pending:
        out += [
            "**Not (yet) run:** "
            + "; ".join(f"{s} ×{r} compress={c}" for s, r, c in pending)
            + " — not in this report (still running when it was written, or stopped for lack"
            " of time on the shared machine).",
            "",
        ]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    write_results(args.output, "\n".join(out))
    print("\n".join(out))


if __name__ == "__main__":
    main()
