"""The nightly pipeline on the default sample marketplace: MAPE by source and per-stage timings.

Generates the default marketplace (1,268 advertisers, 40 segments, 7 + 7 days, fixed seed) into a
temporary folder, ingests it into a fresh SQLite database (not timed as part of the pipeline: the
issue's target is "database already loaded"), runs `adseg nightly` with every registered fuser and
both supply modes, and writes benchmarks/results/nightly_default.md.

    .venv/bin/python benchmarks/nightly_default.py
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import math
import multiprocessing
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd

from adseg import pipeline
from adseg.app.nightly import run_nightly
from adseg.ingest import read_directory
from adseg.report import PAPER_MAPE
from adseg.simulate import MarketplaceConfig, simulate_marketplace, write_marketplace
from adseg.store import migrate
from adseg.store import results as store
from adseg.store.engine import make_engine
from adseg.store.load import write_batch
from adseg_research.bench import blas_kernel, recorded_command, write_results

RESULTS = Path(__file__).parent / "results" / "nightly_default.md"


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the fuser workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _peak_mib() -> tuple[float, float]:
    """Peak resident memory (MiB) of this process and of its largest finished child (Linux: KiB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return own / 1024, child / 1024


def _prepare(tmp: Path, n_advertisers: int) -> tuple[float, float, int]:
    """Generate the marketplace and ingest it into tmp/adseg.db: (generate s, ingest s, rows)."""
    t0 = time.perf_counter()
    write_marketplace(
        simulate_marketplace(MarketplaceConfig(n_advertisers=n_advertisers)), tmp / "m"
    )
    t_generate = time.perf_counter() - t0
    engine = make_engine(f"sqlite:///{tmp / 'adseg.db'}")
    migrate.upgrade(engine)
    t0 = time.perf_counter()
    summary = write_batch(engine, read_directory(tmp / "m"))
    engine.dispose()
    return t_generate, time.perf_counter() - t0, summary.rows


class TreeMemory:
    """The peak of the summed resident memory (MiB) of this process and all its descendants,
    sampled from /proc every ``interval`` seconds in a background thread; the samples are kept
    (monotonic seconds, this process's MiB, the tree's MiB) for peaks by stage. Also the peak
    of the tree's summed proportional set size (``pss_peak``): each page shared by k of its
    processes (the libraries, and what forked workers still share with this process) counted
    1/k in each, so that the sum is the tree's physical memory, which the summed resident
    memory overstates by counting a shared page once per process. Reading it walks every
    page table (~35 CPU s over a 20,000-advertiser run if read every 0.2 s), so it is read
    only near the resident peak: when the tree's resident sum is within ``pss_near`` of its
    peak so far, at most every ``pss_interval`` seconds; the proportional sum never exceeds the
    resident one, so a peak of it lies where the resident sum is high."""

    def __init__(self, interval: float = 0.2, pss_interval: float = 1.0, pss_near: float = 0.9):
        self.interval, self.peak, self.pss_peak, self.samples = interval, 0.0, 0.0, []
        self.pss_interval, self.pss_near, self._pss_at = pss_interval, pss_near, -math.inf
        self._stop = threading.Event()

    def start(self) -> TreeMemory:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            tree, own, pids = _tree_rss_mib(os.getpid())
            now = time.perf_counter()
            self.samples.append((now, own, tree))
            self.peak = max(self.peak, tree)
            if tree >= self.pss_near * self.peak and now - self._pss_at >= self.pss_interval:
                self._pss_at = now
                self.pss_peak = max(self.pss_peak, sum(map(_pss_mib, pids)))

    def by_stage(self, start: float, timings: dict) -> str:
        """Peak MiB (this process / the tree) in each stage, the stages taken to follow each
        other from ``start`` (perf_counter seconds) for their recorded wall seconds."""
        parts, t = [], start
        for stage, seconds in timings.items():
            if stage in ("total", "fusers") or not isinstance(seconds, (int, float)):
                continue
            inside = [(own, tree) for at, own, tree in self.samples if t <= at < t + seconds]
            t += seconds
            if inside:
                own, tree = max(o for o, _ in inside), max(tr for _, tr in inside)
                parts.append(f"{stage} {own:,.0f} / {tree:,.0f}")
        return ", ".join(parts)


def _tree_rss_mib(root: int) -> tuple[float, float, set[int]]:
    """(summed VmRSS (MiB) of ``root`` and its descendants, ``root``'s own, their pids)."""
    parents, rss = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        parents[int(entry.name)] = int(fields.get("PPid", "0").strip())
        rss[int(entry.name)] = int(fields.get("VmRSS", "0 kB").split()[0]) / 1024
    tree, grown = {root}, True
    while grown:
        more = {pid for pid, ppid in parents.items() if ppid in tree} - tree
        tree |= more
        grown = bool(more)
    return sum(rss.get(pid, 0.0) for pid in tree), rss.get(root, 0.0), tree


def _pss_mib(pid: int) -> float:
    """The proportional set size (MiB) of ``pid`` (/proc/PID/smaps_rollup; 0 if it is gone)."""
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0.0
    for line in rollup.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return 0.0


class LocalCluster:
    """A dask.distributed scheduler and ``n_workers`` worker processes (one thread each, no
    memory manager, as the embedded engine's) started with the ``dask`` command as children of
    this process, so that the tree's memory counts them; stopped when the block ends."""

    def __init__(self, n_workers: int, folder: Path):
        self.n_workers, self.folder, self.procs = n_workers, folder, []

    def __enter__(self) -> str:
        dask = str(Path(sys.executable).with_name("dask"))
        scheduler_file = self.folder / "scheduler.json"
        scheduler_file.unlink(missing_ok=True)
        log = open(self.folder / "cluster.log", "w")  # noqa: SIM115 - closed with the block
        self.log = log
        self.procs.append(
            subprocess.Popen(
                [
                    dask,
                    "scheduler",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--no-dashboard",
                    "--scheduler-file",
                    str(scheduler_file),
                ],
                stdout=log,
                stderr=log,
            )
        )
        for _ in range(600):
            if scheduler_file.exists():
                break
            time.sleep(0.1)
        for _ in range(self.n_workers):
            self.procs.append(
                subprocess.Popen(
                    [
                        dask,
                        "worker",
                        "--scheduler-file",
                        str(scheduler_file),
                        "--nworkers",
                        "1",
                        "--nthreads",
                        "1",
                        "--memory-limit",
                        "0",
                        "--resources",
                        "adseg_slot=1",  # one stage task at a time (execution.SLOT)
                        "--no-dashboard",
                    ],
                    stdout=log,
                    stderr=log,
                )
            )
        from distributed import Client

        with Client(scheduler_file=str(scheduler_file)) as client:
            client.wait_for_workers(self.n_workers, timeout=120)
            return client.scheduler.address

    def __exit__(self, *exc) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in self.procs:
            proc.wait(timeout=60)
        self.log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--advertisers", type=int, default=1268)
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--fuser", action="append", help="fuser(s) to run (repeatable; default: the nightly's)"
    )
    parser.add_argument(
        "--database",
        type=Path,
        help="a folder holding adseg.db (ingested) and m/truth.csv (the marketplace): reuse it "
        "instead of generating and ingesting (at 100,000 advertisers those take ~20 min)",
    )
    parser.add_argument("--scheduler", help="a dask scheduler's address (adseg nightly's)")
    parser.add_argument(
        "--local-cluster",
        type=int,
        metavar="N",
        help="start a dask scheduler and N worker processes here (children of this process, "
        "counted in its memory) and run the nightly on them with --scheduler",
    )
    args = parser.parse_args()
    if args.local_cluster and args.scheduler:
        parser.error("--local-cluster starts its own scheduler: give one or the other")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.database:
            tmp, (t_generate, t_ingest, n_rows) = args.database, (float("nan"),) * 3
        else:  # generation and ingest in a child process: the pipeline's memory is alone
            with multiprocessing.get_context("fork").Pool(1) as pool:
                t_generate, t_ingest, n_rows = pool.apply(_prepare, (tmp, args.advertisers))
        engine = make_engine(f"sqlite:///{tmp / 'adseg.db'}")
        load0 = os.getloadavg()[0]
        c0 = _cpu()
        monitor = TreeMemory().start()
        cluster = LocalCluster(args.local_cluster, tmp) if args.local_cluster else None
        with cluster or contextlib.nullcontext(args.scheduler) as scheduler:
            t_started = time.perf_counter()
            result = run_nightly(
                engine,
                config=pipeline.NightlyConfig(
                    fusers=tuple(args.fuser) if args.fuser else None,
                    supply="both",
                    truth_path=str(tmp / "m" / "truth.csv"),
                    scheduler=scheduler,
                ),
            )
            wall = time.perf_counter() - t_started
        cpu = _cpu() - c0  # the cluster's processes are children waited for by now
        tree_peak = monitor.stop()
        load1 = os.getloadavg()[0]
        run = store.get_run(engine, result.run_id)
    peak_own, peak_child = _peak_mib()
    mape = result.result.mape
    default = args.advertisers == MarketplaceConfig().n_advertisers
    command = f"`{recorded_command('nightly_default.py', sys.argv[1:])}`"
    title = "the default sample marketplace"
    if not default:
        title = f"a {args.advertisers:,}-advertiser sample marketplace"
    lines = [
        f"# The nightly pipeline on {title}",
        "",
        f"Measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {platform.node()} "
        f"({os.cpu_count()} cores, Python {platform.python_version()}); load average "
        f"{load0:.1f} before and {load1:.1f} after the run (the machine is shared: wall-clock "
        "times are upper bounds; CPU time is this process's and its fuser worker processes'). "
        f"BLAS: {blas_kernel()}.",
        "",
        f"Command: {command} (`make demo` runs the same pipeline on the default marketplace: "
        "`adseg nightly --truth data/marketplace/truth.csv`).",
        "",
        (
            f"Marketplace: {args.advertisers} advertisers, generated in {t_generate:.1f} s; "
            f"ingest of {n_rows:,} rows in {t_ingest:.1f} s. "
            if not args.database
            else f"Marketplace: {args.advertisers} advertisers, generated and ingested before "
            f"(`adseg sample generate`, `adseg ingest`) into {args.database}. "
        )
        + f"Segments chosen: {result.n_segments} (median cluster count of the KS views).",
        "",
        f"Pipeline (database already loaded): **{wall:.1f} s wall, {cpu:.1f} s CPU**.",
        "",
        "Engine: "
        + (
            f"a dask.distributed cluster started on this machine for the run, a scheduler and "
            f"{args.local_cluster} worker processes of one thread (`dask scheduler`, `dask "
            "worker`, children of the benchmark: counted in the memory below, their CPU in the "
            "CPU time; the wall time is from all its workers up to the run's end)."
            if args.local_cluster
            else f"the dask.distributed scheduler at {args.scheduler}."
            if args.scheduler
            else "the nightly's own (in this process below 5,000 advertisers, else an "
            "embedded cluster of its n_jobs worker processes)."
        ),
        "",
        f"Peak resident memory: **{tree_peak:,.0f} MiB summed over the whole process tree** "
        "during the pipeline (this process and every descendant, /proc sampled every 0.2 s); "
        f"{peak_own:,.0f} MiB peak in the main process, {peak_child:,.0f} MiB in the largest "
        "finished child (generation and ingest ran in a child process before the pipeline). "
        f"Summed proportional set size (a page shared by k processes counted 1/k in each: the "
        f"tree's physical memory; read at most once a second, while the resident sum is within "
        f"10 % of its peak): **{monitor.pss_peak:,.0f} MiB** at its peak.",
        "",
        "Peak resident memory by stage, MiB (this process / the whole tree): "
        + monitor.by_stage(t_started, run["timings"]),
        "",
        "Per-stage seconds (wall): "
        + ", ".join(f"{k} {v}" for k, v in run["timings"].items() if k != "fusers"),
        "",
        "Per-fuser seconds (wall): "
        + ", ".join(f"{k} {v}" for k, v in run["timings"]["fusers"].items()),
        "",
    ]
    for mode in ("actual", "forecast"):
        sub = mape[mape["supply_mode"] == mode]
        wide = sub.pivot(
            index="source", columns="method", values=["impressions_mape", "spend_mape"]
        )
        wide = wide[[(m, k) for k in ("segment", "blended") for m in wide.columns.levels[0]]]
        wide.columns = [f"{a.replace('_mape', '')} MAPE ({b})" for a, b in wide.columns]
        wide = (100 * wide).round(2)
        wide["segments"] = sub.groupby("source")["n_segments"].first()
        wide["ARI vs truth"] = pd.Series(result.truth_ari).round(3)
        order = [s for s in dict.fromkeys(sub["source"])]
        lines += [f"## MAPE (%) by source, supply = {mode}", "", wide.loc[order].to_markdown(), ""]
    lines += [
        "## The paper's Tables 6–7 (1,268 real advertisers, one week), for comparison",
        "",
        (PAPER_MAPE.set_index("source") * 100).round(2).to_markdown(),
        "",
        "## Views (the paper's Tables 4 and 5 for this data)",
        "",
        result.clusters_per_view.to_markdown(index=False),
        "",
        result.consistency.to_markdown(index=False),
        "",
    ]
    write_results(args.output, "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
