"""Simulate, ingest and pull at scale (issue 40): wall time, CPU seconds and peak RSS of each.

Each stage runs as its own process under ``nice`` (``python -m adseg …`` for the simulator and
ingest, a small script calling :func:`adseg.app.inputs.pull` for the pull), watched every 0.2 s:
its peak resident set is the kernel's VmHWM of the process (read at its end through wait4's
``ru_maxrss``), and a watchdog kills a stage whose resident set passes ``--rss-cap-gib`` (the
machine is shared: a stage that needs 30 GiB is recorded as killed, not run into the swapless
wall). ``--code DIR`` runs the stages on another copy of the ``adseg`` package (PYTHONPATH),
for a before/after on the same machine.

    nice .venv/bin/python benchmarks/ingest_100k.py --advertisers 20000 --work /tmp/w20k
    nice .venv/bin/python benchmarks/ingest_100k.py --advertisers 100000 --work /tmp/w100k

Prints one Markdown table row per stage and appends it (with the command and the machine) to
``--log`` (default benchmarks/results/ingest_100k_runs.md); the results page
benchmarks/results/ingest_100k.md is written by hand from those rows.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from adseg_research.isolated import proc_kib

LOG = Path(__file__).parent / "results" / "ingest_100k_runs.md"

_PULL = """
import sys
import adseg
print("adseg from", adseg.__file__)
from adseg.app.inputs import default_windows, pull
from adseg.store.engine import make_engine
engine = make_engine(sys.argv[1])
data = pull(engine, default_windows(engine))
n_win = sum(len(s) for s in data.win_samples)
n_cost = sum(len(s) for s in data.cost_samples)
print(f"pulled {len(data.advertiser_ids)} advertisers, {n_win:,} win-rate, {n_cost:,} eCPM samples")
"""


def _watch(pid: int, cap_kib: float, state: dict) -> None:
    """Kill ``pid`` when its resident set passes ``cap_kib``; polls every 0.2 s."""
    while state.get("running"):
        rss = proc_kib("VmRSS", f"/proc/{pid}/status")
        if rss == rss and rss > cap_kib:  # NaN: the process has gone
            state["killed_at_kib"] = rss
            os.kill(pid, 9)
            return
        time.sleep(0.2)


def run_stage(name: str, argv: list[str], env: dict, cap_gib: float, cwd: Path) -> dict:
    """Run one stage in ``cwd``; its wall seconds, CPU seconds, peak RSS (GiB), exit status,
    output tail. ``cwd`` matters: ``python -m`` and ``-c`` put it first on sys.path, before
    PYTHONPATH, so a before/after run must start in the folder holding the package it runs."""
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        ["nice", "-n", "5", *argv],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    state = {"running": True}
    watcher = threading.Thread(
        target=_watch, args=(proc.pid, cap_gib * 1024**2, state), daemon=True
    )
    watcher.start()
    output = proc.stdout.read().decode("utf-8", "replace")
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    state["running"] = False
    proc.returncode = os.waitstatus_to_exitcode(status)
    killed = state.get("killed_at_kib")
    return {
        "stage": name,
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_gib": usage.ru_maxrss / 1024**2,
        "rc": proc.returncode,
        "killed": f"killed above {cap_gib:g} GiB" if killed else "",
        "load_1min": load,
        "tail": output.strip().splitlines()[-2:],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--advertisers", type=int, required=True)
    parser.add_argument("--work", type=Path, required=True, help="folder for files and the DB")
    parser.add_argument("--code", type=Path, help="a folder holding another adseg package")
    parser.add_argument("--label", default="after")
    parser.add_argument("--stages", default="simulate,ingest,pull")
    parser.add_argument("--rss-cap-gib", type=float, default=12.0)
    parser.add_argument("--log", type=Path, default=LOG)
    args = parser.parse_args(argv)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cwd = Path(__file__).resolve().parent.parent
    if args.code:
        cwd = args.code.resolve()
        env["PYTHONPATH"] = str(cwd)
    work = args.work.resolve()
    files, db = work / "files", work / "adseg.db"
    url = f"sqlite:///{db}"
    py = [sys.executable]
    stages = args.stages.split(",")
    rows = []
    if "simulate" in stages:
        shutil.rmtree(files, ignore_errors=True)
        cmd = [*py, "-m", "adseg", "sample", "generate", "--advertisers", str(args.advertisers)]
        rows.append(run_stage("simulate", [*cmd, "--out", str(files)], env, args.rss_cap_gib, cwd))
    if "ingest" in stages:
        db.unlink(missing_ok=True)
        upgrade = [*py, "-m", "adseg", "db", "upgrade", "--database-url", url]
        subprocess.run(upgrade, env=env, cwd=cwd, check=True)
        cmd = [*py, "-m", "adseg", "ingest", str(files), "--database-url", url, "--quiet"]
        rows.append(run_stage("ingest", cmd, env, args.rss_cap_gib, cwd))
    if "pull" in stages:
        rows.append(run_stage("pull", [*py, "-c", _PULL, url], env, args.rss_cap_gib, cwd))
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"| {when} | {args.label} | {args.advertisers:,} | {r['stage']} | {r['wall_s']:.1f} | "
        f"{r['cpu_s']:.1f} | {r['peak_gib']:.2f} | {r['load_1min']:.2f} | {r['rc']} "
        f"{r['killed']} | {' / '.join(r['tail'])[:160]} |"
        for r in rows
    ]
    print("\n".join(lines))
    with open(args.log, "a", encoding="utf-8") as log:
        log.write("\n".join(lines) + "\n")
    peak_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"(harness peak RSS {peak_self:.0f} MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
