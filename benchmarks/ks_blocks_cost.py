"""KS blocks: what each block, cut and the view's own work cost, and whether those costs predict
the view's time on a dask.distributed cluster of 2 and 4 local workers.

One KS view of a loaded marketplace (the nightly's training window and ``--min-samples``) is
built three ways: here, each part (KS block, cut) run in turn and timed with the bytes it would
receive and return; then as one engine task (as the nightly runs it) on a ``LocalCluster`` of
each ``--workers`` count, the view's blocks and cuts as nested tasks
(``adseg.app.execution.NestedParts``). The prediction for W workers on C cores: the view's own
work (all but its parts), plus each round of parts list-scheduled, longest first, on
min(W, C) slots from their measured seconds. ``--double`` builds a view of twice the
advertisers: the win-rate and the eCPM-cost samples side by side.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ks_blocks_cost.py --database /tmp/n100 \
        [--view win_rate] [--double] [--workers 2 4] [--output benchmarks/results/ks_blocks_cost.md]

Writes the tables to --output (markdown) and the per-part rows beside it (.csv).
"""

from __future__ import annotations

import argparse
import heapq
import os
import shlex
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adseg.app.execution import NestedParts  # noqa: E402
from adseg.app.inputs import default_windows, pull  # noqa: E402
from adseg.pipeline import NightlyConfig, views_config  # noqa: E402
from adseg.store.engine import make_engine  # noqa: E402
from adseg.views import ks_view  # noqa: E402
from adseg_research.bench import machine_summary, write_results  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "ks_blocks_cost.md"


def nbytes(value) -> int:
    """Bytes of the arrays in ``value`` (nested tuples and lists, sparse matrices)."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if sp.issparse(value):
        return value.data.nbytes + value.indices.nbytes + value.indptr.nbytes
    if isinstance(value, tuple | list):
        return sum(nbytes(v) for v in value)
    return 0


def timed_runner(records: list):
    """A ``run_parts`` that runs each part here, in turn, recording its seconds and bytes."""
    calls = [0]

    def run(parts):
        calls[0] += 1
        out = []
        for name, function, args in parts:
            t0 = time.perf_counter()
            result = function(*args)
            row = {"call": calls[0], "part": name, "seconds": time.perf_counter() - t0}
            row |= {"bytes_in": nbytes(args), "bytes_out": nbytes(result)}
            if name.startswith("KS block"):
                values_a, offsets_a, values_b, offsets_b, i = args[:5]
                row |= {"values": values_a.size + values_b.size}
                row |= {"advertisers": offsets_a.size + offsets_b.size - 2}
                row |= {"pairs": i.size, "kept": len(result[0])}
                row |= {"bytes_samples": nbytes(args[:4])}
            else:
                row |= {"nnz": args[0].nnz, "clusters": int(result.n_clusters)}
            records.append(row)
            out.append(result)
        return out

    return run


def lpt(seconds, slots: int) -> float:
    """Makespan of the tasks' seconds list-scheduled longest first on ``slots`` slots."""
    ends = [0.0] * max(slots, 1)
    for s in sorted(seconds, reverse=True):
        heapq.heapreplace(ends, ends[0] + s)
    return max(ends)


class WorkerMemory:
    """Peak resident MiB of this process's children (the cluster's workers), each and summed,
    sampled every 0.5 s."""

    def __init__(self):
        import psutil

        self.me, self.stop = psutil.Process(), threading.Event()
        self.peak_each = self.peak_sum = 0.0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.wait(0.5):
            rss = []
            for child in self.me.children(recursive=True):
                try:
                    rss.append(child.memory_info().rss / 2**20)
                except Exception:  # noqa: BLE001 - a worker that just ended
                    continue
            if rss:
                self.peak_each = max(self.peak_each, max(rss))
                self.peak_sum = max(self.peak_sum, sum(rss))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def on_cluster(samples, view, config, workers: int) -> tuple[dict, pd.DataFrame]:
    """The view as one task of a LocalCluster of ``workers`` processes: seconds and memory,
    and the engine's task stream (one row per task: its part, worker, start and end)."""
    from distributed import Client, LocalCluster, get_task_stream

    kw = dict(threads_per_worker=1, processes=True, memory_limit=0, dashboard_address=None)
    with LocalCluster(n_workers=workers, **kw) as cluster, Client(cluster) as client:
        with WorkerMemory() as memory, get_task_stream(client) as stream:
            t0 = time.perf_counter()
            future = client.submit(ks_view, samples, view, config, 0, NestedParts(), pure=False)
            result = future.result()
            seconds = time.perf_counter() - t0
            t_submit = time.time() - seconds
    tasks = pd.DataFrame(
        [
            {
                "workers": workers,
                "part": str(t["key"]).rsplit("-", 1)[0],
                "worker": t["worker"],
                "start": min(s["start"] for s in t["startstops"] if s["action"] == "compute")
                - t_submit,
                "stop": max(s["stop"] for s in t["startstops"] if s["action"] == "compute")
                - t_submit,
            }
            for t in stream.data
            if any(s["action"] == "compute" for s in t["startstops"])
        ]
    )
    run = {
        "workers": workers,
        "seconds": seconds,
        "worker_peak_mib": memory.peak_each,
        "workers_sum_mib": memory.peak_sum,
        "labels": result.labels,
    }
    return run, tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", type=Path, required=True)
    parser.add_argument("--view", choices=["win_rate", "ecpm_cost"], default="win_rate")
    parser.add_argument("--double", action="store_true")
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    engine = make_engine(f"sqlite:///{args.database / 'adseg.db'}")
    data = pull(engine, default_windows(engine))
    engine.dispose()
    samples = data.win_samples if args.view == "win_rate" else data.cost_samples
    if args.double:
        samples = list(data.win_samples) + list(data.cost_samples)
    del data
    config = views_config(NightlyConfig())
    records: list[dict] = []
    t0 = time.perf_counter()
    here = ks_view(samples, args.view, config, 0, run_parts=timed_runner(records))
    total = time.perf_counter() - t0
    parts = pd.DataFrame(records)
    own = total - parts["seconds"].sum()
    cores = os.cpu_count() or 1
    runs, streams = [], []
    for workers in args.workers:
        run, stream = on_cluster(samples, args.view, config, workers)
        streams.append(stream)
        assert np.array_equal(run.pop("labels"), here.labels), "labels differ from here"
        slots = min(workers, cores)
        rounds = parts.groupby("call")["seconds"].apply(lambda s, k=slots: lpt(s, k))
        run |= {"slots": slots, "predicted_seconds": own + rounds.sum()}
        runs.append(run)
        print(run, flush=True)
    write(args, samples, parts, total, own, pd.DataFrame(runs), pd.concat(streams))


def phases(stream: pd.DataFrame) -> pd.DataFrame:
    """The task stream by phase: the view's task, the first round of blocks, the refill's
    blocks (a block's name seen a second time), the cuts: tasks, workers used, first start,
    last end, and the tasks' compute seconds summed (busy_s)."""
    stream = stream.sort_values(["workers", "start"]).reset_index(drop=True)
    name = stream["part"]
    phase = np.where(name.str.startswith("KS block"), "blocks", "cuts")
    phase = np.where(name.str.startswith("ks_view"), "view task", phase)
    again = stream.groupby(["workers", "part"]).cumcount() > 0
    stream["phase"] = np.where((phase == "blocks") & again, "refill blocks", phase)
    stream["busy"] = stream["stop"] - stream["start"]
    return stream.groupby(["workers", "phase"], sort=False).agg(
        tasks=("part", "size"),
        workers_used=("worker", "nunique"),
        first_start_s=("start", "min"),
        last_end_s=("stop", "max"),
        busy_s=("busy", "sum"),
    )


def write(args, samples, parts, total, own, runs, stream) -> None:
    """The markdown and the per-part csv."""
    n = len(samples)
    values = sum(np.asarray(s).size for s in samples)
    blocks = parts[parts["part"].str.startswith("KS block")]
    cuts = parts[~parts["part"].str.startswith("KS block")]
    fit, *_ = np.linalg.lstsq(blocks[["pairs", "values"]].to_numpy(float), blocks["seconds"], None)
    command = "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ks_blocks_cost.py " + shlex.join(
        sys.argv[1:]
    )
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    doubled = " (win-rate and eCPM-cost samples side by side)" if args.double else ""
    lines = [
        f"# KS blocks: per-part costs and the view on 2 and 4 workers ({n:,} advertisers)",
        "",
        f"Machine: {machine_summary()}; measured {stamp}.",
        "",
        f"Command: `{command}`",
        "",
        f"View {args.view}{doubled}:"
        f" {n:,} advertisers, {values:,} sample values; the nightly's settings (ks_partners,"
        f" ks_block_values, α). Built here with every part in turn: **{total:.1f} s**, of which"
        f" the parts {parts['seconds'].sum():.1f} s and the view's own work (drawing and"
        f" sorting the pairs, splitting them into blocks, assembling the graphs) {own:.1f} s.",
        "",
        "## Parts, by round (call 1: the drawn pairs' blocks; 2: the refill's; last: the cuts)",
        "",
        parts.groupby("call")
        .agg(
            parts=("part", "size"),
            seconds=("seconds", "sum"),
            longest=("seconds", "max"),
            mib_in=("bytes_in", lambda b: b.sum() / 2**20),
            mib_out=("bytes_out", lambda b: b.sum() / 2**20),
        )
        .round(2)
        .to_markdown(),
        "",
        f"KS blocks: {len(blocks)}; seconds per block ≈ {fit[0] * 1e9:.1f} ns per pair +"
        f" {fit[1] * 1e9:.1f} ns per sample value (least squares over the blocks);"
        f" {blocks['pairs'].sum():,} pairs compared, {blocks['kept'].sum():,} kept.",
        "",
        "Cuts:",
        "",
        cuts[["part", "seconds", "nnz", "clusters", "bytes_in"]].round(2).to_markdown(index=False),
        "",
        "## On a LocalCluster (the view one task, its parts nested tasks)",
        "",
        runs.round(1).to_markdown(index=False),
        "",
        "Labels identical to the view built here in every run. predicted_seconds = the view's"
        " own work + each round's parts list-scheduled (longest first) on `slots` = min(workers,"
        " cores) from the seconds measured here.",
        "",
        "The engine's task stream by phase (seconds from the view's submission; busy_s: the"
        " tasks' compute seconds summed):",
        "",
        phases(stream).round(1).to_markdown(),
    ]
    write_results(args.output, "\n".join(lines) + "\n")
    parts.to_csv(args.output.with_suffix(".csv"), index=False)
    stream.to_csv(args.output.with_name(args.output.stem + "_stream.csv"), index=False)


if __name__ == "__main__":
    main()
