"""adseg.interrupts: stop signals as exceptions, and a stop whose exception was swallowed."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from sqlalchemy import func, select

from adseg.interrupts import (
    Terminated,
    check_pending,
    exit_code,
    signals_as_exceptions,
    signals_deferred,
)
from adseg.store import results as store


def _swallowed(signum: int) -> None:
    """Deliver ``signum`` where its exception is lost, as in an at-fork hook or a __del__
    (Python prints "Exception ignored in …" and carries on)."""
    try:
        os.kill(os.getpid(), signum)
        signal.pthread_sigmask(signal.SIG_BLOCK, [])  # a bytecode boundary: the handler runs
    except BaseException:  # noqa: BLE001 - the point: some code swallows it
        pass


@pytest.mark.parametrize(
    ("signum", "expected"),
    [(signal.SIGTERM, Terminated), (signal.SIGHUP, Terminated), (signal.SIGINT, KeyboardInterrupt)],
)
def test_a_swallowed_stop_is_raised_again_at_the_next_check(signum, expected):
    with signals_as_exceptions():
        check_pending()  # nothing received yet
        _swallowed(signum)
        with pytest.raises(expected) as caught:
            check_pending()
    assert exit_code(caught.value) == 128 + signum
    check_pending()  # leaving the block forgets it (the next command starts clean)


def test_the_handlers_raise_at_once_and_are_restored():
    before = signal.getsignal(signal.SIGTERM)
    with signals_as_exceptions():
        with pytest.raises(Terminated, match="terminated by SIGTERM"):
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize("another_thread", [False, True], ids=["main-only", "another-thread"])
def test_a_deferred_stop_arrives_on_the_way_out_whichever_thread_takes_it(another_thread):
    """`kill` signals the process and the kernel hands it to any thread not blocking it (an
    OpenBLAS or Arrow worker): blocked in the main thread only, the handler still ran there at
    once, inside the block. The handlers in place before the block are back after it."""
    import threading
    import time

    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    if another_thread:
        other.start()
    steps = []
    try:
        with signals_as_exceptions():
            handler = signal.getsignal(signal.SIGTERM)
            with pytest.raises(Terminated):
                with signals_deferred():
                    os.kill(os.getpid(), signal.SIGTERM)
                    for _ in range(10_000):  # until another thread has taken it (at most 10 s)
                        if not another_thread or signal.SIGTERM not in signal.sigpending():
                            break
                        time.sleep(0.001)
                    signal.pthread_sigmask(signal.SIG_BLOCK, [])  # a bytecode boundary
                    steps.append("inside, after the signal")
                # a thread the test did not start (Arrow's, after a Parquet test) may take the
                # signal and run its C handler only after the block: then it is raised here
                for _ in range(10_000):
                    time.sleep(0.001)
            assert steps == ["inside, after the signal"]
            assert signal.getsignal(signal.SIGTERM) is handler
    finally:
        stop.set()
        if another_thread:
            other.join()


def test_a_stop_raised_while_the_handlers_are_put_back_leaves_nothing_blocked(monkeypatch):
    """Putting a handler back first runs the handlers of signals that arrived, and one already
    put back raises there: a SIGTERM taken by another thread whose C handler ran late did that
    on the way out of the block. The loop stopped, and SIGTERM stayed blocked in the main
    thread (and SIGHUP's handler the block's) for the rest of the process: a later test's
    subprocess inherited the mask and could not be stopped. Here the raise is made certain."""
    real_signal = signal.signal
    raised = []

    def signal_with_a_late_stop(signum, handler):
        if signum == signal.SIGHUP and handler is not None and not raised:
            raised.append(signum)
            raise Terminated(signal.SIGTERM)  # what the pending check does, before the swap
        return real_signal(signum, handler)

    with signals_as_exceptions():
        handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        with pytest.raises(Terminated), signals_deferred():
            monkeypatch.setattr(signal, "signal", signal_with_a_late_stop)
        monkeypatch.setattr(signal, "signal", real_signal)
        assert raised == [signal.SIGHUP]
        assert {s: signal.getsignal(s) for s in handlers} == handlers
        assert not {signal.SIGTERM, signal.SIGHUP} & signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_a_stop_raised_while_the_block_begins_leaves_the_handlers_as_they_were(monkeypatch):
    """The same on the way in: a stop that arrived just before the block raises while the
    handlers are being swapped, and those swapped so far (SIGINT's) go back."""
    real_signal = signal.signal

    def signal_with_an_early_stop(signum, handler):
        if signum == signal.SIGTERM:
            raise Terminated(signal.SIGTERM)
        return real_signal(signum, handler)

    with signals_as_exceptions():
        handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        monkeypatch.setattr(signal, "signal", signal_with_an_early_stop)
        with pytest.raises(Terminated), signals_deferred():
            pytest.fail("the block must not run")  # pragma: no cover
        monkeypatch.setattr(signal, "signal", real_signal)
        assert {s: signal.getsignal(s) for s in handlers} == handlers
        assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_fusing_stops_on_a_stop_whose_exception_was_swallowed():
    """The fuser workers' results are awaited in short polls, so a SIGTERM lost while the pool
    forked (its at-fork hooks swallow exceptions) still stops the stage."""
    import numpy as np

    from adseg import fusion

    labels = np.repeat(np.arange(4), 10)[:, None].repeat(3, axis=1)
    with signals_as_exceptions():
        _swallowed(signal.SIGTERM)
        with pytest.raises(Terminated):
            fusion.fuse(labels, ["rcc", "l2"], 4, seed=0, primary="rcc", n_jobs=2)


_FORK_STOP_SCRIPT = """
import os, signal, sys
import numpy as np
from adseg import fusion
from adseg.interrupts import Terminated, signals_as_exceptions

def worker_state(name, labels, n_segments, seed, options, weights=None):  # in a worker (fork)
    with open(f"/proc/{os.getpid()}/task/{os.getpid()}/status") as status:  # its main thread
        blocked = int(next(line for line in status if line.startswith("SigBlk:")).split()[1], 16)
    state = [bool(blocked >> (s - 1) & 1) for s in (signal.SIGTERM, signal.SIGHUP)]
    state.append(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
    return np.array(state), 0.0, []

fusion._fit_one = worker_state
sent = []

def stop_once_in_the_parent():  # a SIGTERM that lands while a worker is being forked
    if not sent:
        sent.append(1)
        os.kill(os.getpid(), signal.SIGTERM)

labels = np.repeat(np.arange(3), 10)[:, None].repeat(2, axis=1)
with signals_as_exceptions():
    finished = fusion.fuse(labels, ["rcc", "l2"], 3, 0, "rcc", n_jobs=2).segmentations
print("worker: SIGTERM blocked, SIGHUP blocked, SIGTERM default:", finished["rcc"].tolist())
os.register_at_fork(after_in_parent=stop_once_in_the_parent)
try:
    with signals_as_exceptions():
        fusion.fuse(labels, ["rcc", "l2"], 3, 0, "rcc", n_jobs=2)
except Terminated:
    print("stopped")
    sys.exit(143)
"""


def test_a_stop_while_a_fuser_worker_is_forked_is_a_stop_without_a_stray_traceback():
    """A SIGTERM landing in an at-fork hook while a worker started raised there, where Python
    swallows it with an 'Exception ignored in …' traceback on stderr (QA: 1 nightly in 6); the
    poll then still stopped the stage. Workers are now forked with stop signals deferred, so the
    stop is raised after the fork, once; and the worker unblocks the mask it inherits (that of
    its main thread, which takes the signals, is what is checked)."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", _FORK_STOP_SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 143, proc.stderr
    assert "worker: SIGTERM blocked, SIGHUP blocked, SIGTERM default: [False, False, True]" in (
        proc.stdout
    )
    assert "stopped" in proc.stdout
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr


_GROUP_STOP_SCRIPT = """
import sys, time
import numpy as np
from adseg import fusion
from adseg.consensus import FUSERS
from adseg.consensus.l2 import L2CC
from adseg.interrupts import Terminated, signals_as_exceptions

class Slow(L2CC):
    def _fit(self, labels):
        time.sleep(60)

FUSERS["slow"] = Slow
labels = np.repeat(np.arange(4), 10)[:, None].repeat(3, axis=1)
with signals_as_exceptions():
    try:
        print("fusing", flush=True)
        fusion.fuse(labels, ["slow", "l2"], 4, seed=0, primary="slow", n_jobs=2)
    except Terminated:
        sys.exit(143)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_sent_to_the_whole_process_group_while_fusing_ends_the_run(signum):
    """A terminal's hang-up or systemd's control-group kill signals the workers too. With a
    multiprocessing.Pool, a worker idle in the pool's queue (l2 done, the slow fuser still
    running) died holding the queue's lock and the parent hung for ever in Pool.terminate()."""
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-c", _GROUP_STOP_SCRIPT], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert proc.stdout.readline() == b"fusing\n"
        time.sleep(3)  # the l2 worker is done; the slow one sleeps
        os.killpg(proc.pid, signum)
        assert proc.wait(timeout=30) == 143
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_stop_during_the_commands_first_imports_is_a_stop_not_a_traceback(monkeypatch, capsys):
    """SIGTERM 0.8 s into a command landed in handle_errors' imports, before its `try`: a
    50-line traceback and exit 1 instead of one line and 143."""
    import builtins

    import typer

    from adseg.cli import handle_errors

    real_import = builtins.__import__

    def stopped_import(name, *args, **kwargs):
        if name == "adseg.ingest":
            raise Terminated(signal.SIGTERM)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", stopped_import)
    with pytest.raises(typer.Exit) as caught:
        handle_errors(lambda: None)()
    assert caught.value.exit_code == 143
    assert "stopped" in capsys.readouterr().err


def _adseg(prelude: str, *args: str, **run):
    """The adseg command line with ``args``, through its entry point as the installed command
    runs it, in a new Python process that first runs ``prelude``: code that sends a stop signal
    at the moment a test chooses. Returns the finished process (text output captured)."""
    import subprocess
    import sys

    script = f"{prelude}\nimport sys\nsys.argv = ['adseg', *{list(args)!r}]\n"
    script += "from adseg.entry import main\nmain()\n"
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, **run
    )


_STOP_WHILE_IMPORTING = """
import builtins, os, signal
real_import = builtins.__import__
sent = []

def stopping_import(name, *args, **kwargs):
    if name == "{module}" and not sent:  # adseg.cli: the slow half second (SQLAlchemy, Typer)
        sent.append(name)
        try:
            os.kill(os.getpid(), signal.{signal})
        except BaseException:
            if not {swallowed}:  # lost, as where Python only prints or drops an exception
                raise
    return real_import(name, *args, **kwargs)

builtins.__import__ = stopping_import
"""


def _stop_while_importing(name: str, module: str = "adseg.cli", swallowed: bool = False) -> str:
    """A prelude for :func:`_adseg`: the signal ``name`` as ``module`` is first imported, its
    exception ``swallowed`` or not."""
    return _STOP_WHILE_IMPORTING.format(signal=name, module=module, swallowed=swallowed)


_STOP_AS_THE_INTERPRETER_ENDS = """
import atexit, os, signal
atexit.register(lambda: os.kill(os.getpid(), signal.SIGTERM))  # after the command, at exit
"""


@pytest.mark.parametrize(
    "name, code, line",
    [
        ("SIGTERM", 143, "error: terminated by SIGTERM: stopped"),
        ("SIGINT", 130, "error: interrupted by SIGINT (Ctrl-C): stopped"),
    ],
)
def test_a_stop_while_the_command_line_is_imported_is_one_line(name, code, line):
    """The handlers were installed once the command line was imported (half a second):
    a SIGTERM before ended the process without its error line, a Ctrl-C printed a traceback."""
    proc = _adseg(_stop_while_importing(name), "--version")
    assert (proc.returncode, proc.stderr) == (code, line + "\n")


def test_a_stop_after_the_command_has_finished_keeps_its_exit_status():
    """The handlers were restored as the command returned: a SIGTERM while the interpreter shut
    down killed the process, and a completed run's exit status said 'stopped' (-15 here)."""
    proc = _adseg(_STOP_AS_THE_INTERPRETER_ENDS, "--version")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.startswith("adseg ")


def test_a_ctrl_c_while_the_arguments_are_parsed_gets_its_line(monkeypatch, capsys):
    """Typer turns a KeyboardInterrupt outside the command (while it parses the arguments) into
    exit 130 without a word; the entry point now prints the stop's line, once."""
    import typer.core

    from adseg.cli import entry_point

    def interrupted(self, ctx, args):
        raise KeyboardInterrupt

    monkeypatch.setattr(typer.core.TyperGroup, "parse_args", interrupted)
    with pytest.raises(SystemExit) as stopped:
        entry_point(["runs"])
    assert stopped.value.code == 130
    assert capsys.readouterr().err == "error: interrupted by SIGINT (Ctrl-C): stopped\n"


def test_a_stop_inside_a_command_still_gets_one_line(monkeypatch, capsys, tmp_path):
    """The line the command printed is not repeated by the entry point."""
    import adseg.cli
    import adseg.cli.report

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(adseg.cli.report, "_engine", interrupted)  # where `runs` looks it up
    with pytest.raises(SystemExit) as stopped:
        adseg.cli.entry_point(["runs", "--database-url", f"sqlite:///{tmp_path / 'x.db'}"])
    assert stopped.value.code == 130
    err = capsys.readouterr().err
    assert err.count("error:") == 1
    assert "interrupted by SIGINT (Ctrl-C): stopped (nothing half-written is kept)" in err


@pytest.fixture
def hang_up_ignored():
    """SIGHUP ignored, as ``nohup`` starts a command; the test process's handler is put back."""
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    yield
    signal.signal(signal.SIGHUP, before)


def test_a_signal_ignored_before_stays_ignored_inside_both_blocks(hang_up_ignored):
    """`nohup adseg nightly` ignores SIGHUP so that the run outlives its terminal; the handlers
    replaced that and a closed terminal stopped the run."""
    with signals_as_exceptions():
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGHUP)
        signal.pthread_sigmask(signal.SIG_BLOCK, [])  # a bytecode boundary: nothing raises
        check_pending()
        with signals_deferred():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)
        check_pending()
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN  # the others are handled
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN


_NOHUP_FUSING_SCRIPT = """
import sys, time
import numpy as np
from adseg import fusion
from adseg.consensus import FUSERS
from adseg.consensus.l2 import L2CC
from adseg.interrupts import signals_as_exceptions

class Slow(L2CC):
    def _fit(self, labels):
        time.sleep(4)
        return super()._fit(labels)

FUSERS["slow"] = Slow
labels = np.repeat(np.arange(4), 10)[:, None].repeat(3, axis=1)
with signals_as_exceptions():
    print("fusing", flush=True)
    fused, _, errors, _ = fusion.fuse(labels, ["slow", "l2"], 4, seed=0, primary="slow", n_jobs=2)
    print("fused", sorted(fused), errors, flush=True)
"""


def test_a_hang_up_under_nohup_spares_the_run_and_its_fuser_workers():
    """Under nohup a closed terminal's SIGHUP (sent to the whole process group) must change
    nothing: the parent raised Terminated (exit 143) and the workers, given SIGHUP's default
    action back, died."""
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-c", _NOHUP_FUSING_SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )
    try:
        assert proc.stdout.readline() == b"fusing\n"
        time.sleep(2)  # the workers run; the slow one sleeps
        os.killpg(proc.pid, signal.SIGHUP)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()
        assert out.decode() == "fused ['l2', 'slow'] {}\n"  # both fusers, no error
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_the_entry_point_leaves_an_ignored_hang_up_ignored():
    """A SIGHUP while the command line is imported, under nohup: the command goes on."""
    proc = _adseg(
        _stop_while_importing("SIGHUP"),
        "--version",
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.startswith("adseg ")


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:  # gone meanwhile
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (dead, waiting for its parent to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_the_workers_of_a_process_started_ignoring_sigterm_die_with_it():
    """The workers' parent-death signal was SIGTERM, which a worker of a process started with
    SIGTERM ignored keeps ignoring: after a kill -9 of the parent they computed on, orphaned
    (QA: an lta worker still running 20 s later)."""
    import subprocess
    import sys
    import time

    script = _NOHUP_FUSING_SCRIPT.replace("time.sleep(4)", "time.sleep(60)")
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN),
    )
    workers = []
    try:
        assert proc.stdout.readline() == b"fusing\n"
        for _ in range(100):  # the slow worker starts within a few seconds
            if workers := _children(proc.pid):
                break
            time.sleep(0.1)
        assert workers
        proc.kill()
        proc.wait()
        for _ in range(50):
            alive = [w for w in workers if _running(w)]
            if not alive:
                break
            time.sleep(0.1)
        assert alive == []
    finally:
        for worker in workers:
            try:
                os.kill(worker, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# --- stops at the moments that decide what is written: real processes, then the database ----

SAMPLES = Path(__file__).resolve().parents[1] / "sample_campaigns"
NIGHTLY = ("nightly", "--fuser", "l2", "--primary", "l2", "--supply", "actual")


@pytest.fixture
def small_market(engine):
    """``engine``'s database (SQLite, and PostgreSQL when configured) with the small sample
    marketplace loaded (250 advertisers, 7 + 7 days)."""
    from adseg.ingest import read_directory
    from adseg.store.load import write_batch

    write_batch(engine, read_directory(SAMPLES / "small"))
    return engine


def _rows(engine, table: str) -> int:
    from sqlalchemy import text

    with engine.connect() as conn:
        return conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()  # noqa: S608


def _stopped_on_line(args: list[str], line: str, signum: int, delay: float) -> tuple[int, str]:
    """Run ``python -m adseg ARGS`` and send it ``signum`` ``delay`` seconds after the first line
    of its standard error that holds ``line`` (never, if it ends first); returns its exit status
    and its standard error."""
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "adseg", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        said = []
        for got in proc.stderr:
            said.append(got)
            if line in got:
                time.sleep(delay)
                proc.send_signal(signum)
                break
        said.append(proc.stderr.read())
        return proc.wait(timeout=300), "".join(said)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


_STOP_ONCE_COMPLETED = """
import os, signal
from adseg.store import results
real = results.{step}

def step_then_stop(*args, **kwargs):  # the run's completion, or the lock's release after it
    real(*args, **kwargs)
    os.kill(os.getpid(), signal.{signal})

results.{step} = step_then_stop
"""


@pytest.mark.parametrize(
    "step, name",
    [
        ("complete_run", "SIGTERM"),
        ("complete_run", "SIGINT"),
        ("complete_run", "SIGKILL"),
        ("release_lock", "SIGHUP"),
    ],
)
def test_a_stop_right_after_a_run_completed_keeps_its_results(small_market, db_url, step, name):
    """A stop after the run was committed as completed, before its lock was released. The run's
    error path deleted its results and left it 'completed' (SIGTERM, SIGINT: "a run in progress
    is marked failed"); after a SIGKILL the next nightly took the lock over, said "its run N
    marked failed", deleted the results and left the run 'completed'. A stop as the lock was
    released said "marked failed" too. Now the run keeps them, and each line says what the
    database holds."""
    prelude = _STOP_ONCE_COMPLETED.format(step=step, signal=name)
    proc = _adseg(prelude, *NIGHTLY, "--database-url", db_url)
    [run_id] = store.list_runs(small_market)["run_id"]
    if name == "SIGKILL":
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        assert store.lock_holder(small_market).run_id == run_id  # a stale lock, nothing wrong
        again = _adseg("", *NIGHTLY, "--database-url", db_url)
        assert again.returncode == 0, again.stderr
        assert f"its run {run_id} had completed and is kept" in again.stderr
    else:
        assert proc.returncode == 128 + getattr(signal, name), proc.stderr
        kept = f": stopped after run {run_id} completed (its results are kept)\n"
        assert proc.stderr.endswith(kept)
        assert proc.stderr.count("error:") == 1 and "marked failed" not in proc.stderr
    assert store.lock_holder(small_market) is None
    assert store.get_run(small_market, run_id)["status"] == "completed"
    assert not store.read_forecast_results(small_market, run_id)["mape"].empty


def test_stops_after_each_stage_leave_every_completed_run_with_its_results(small_market, db_url):
    """A sweep of stops (SIGKILL, SIGTERM, SIGINT, SIGHUP in turn) at a few delays after each
    stage's log line — the forecast stage's is logged just before the run completes — each
    nightly followed by the next, which takes over a lock a killed one left, then one left to
    finish. Every completed run has its results, every other run is failed without any, and
    what each process said of a run is what the database holds."""
    import re

    plan = [(stage, delay) for stage in ("pull", "views", "fuse") for delay in (0.0, 0.01)]
    plan += [("forecast", delay) for delay in (0.0, 0.004, 0.008, 0.015)]
    stops = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    args = [*NIGHTLY, "-v", "--database-url", db_url]
    said = []
    for i, (stage, delay) in enumerate(plan):
        signum = stops[i % len(stops)]
        code, err = _stopped_on_line(args, f"stage {stage}:", signum, delay)
        assert code in (0, 128 + signum, -signal.SIGKILL), err
        [run_id] = re.findall(r"INFO adseg\.pipeline: run (\d+): train", err)
        said.append((int(run_id), code, err))
    last = _adseg("", *NIGHTLY, "--database-url", db_url)
    assert last.returncode == 0, last.stderr

    runs = store.list_runs(small_market, limit=100)
    status = dict(zip(runs["run_id"].tolist(), runs["status"], strict=True))
    rows = {run_id: 0 for run_id in status}
    with small_market.connect() as conn:
        for table in store.RESULT_TABLES:
            by_run = select(table.run_id, func.count()).group_by(table.run_id)
            for run_id, count in conn.execute(by_run):
                rows[run_id] += count
    for run_id in status:
        scored = not store.read_forecast_results(small_market, run_id)["mape"].empty
        expected = ("completed", True, True) if scored else ("failed", False, False)
        assert (status[run_id], scored, rows[run_id] > 0) == expected, run_id
    assert store.lock_holder(small_market) is None
    for run_id, code, err in said:  # a stop once the work was done may say just "stopped"
        if status[run_id] == "completed":
            assert "a run in progress is marked failed" not in err, err
        else:
            assert code != 0 and "stopped after" not in err, err
            assert code == -signal.SIGKILL or "a run in progress is marked failed" in err, err
    text = "".join(err for *_, err in said) + last.stderr
    for run_id in re.findall(r"its run (\d+) had completed and is kept", text):
        assert status[int(run_id)] == "completed"
    for run_id in re.findall(r"its run (\d+) marked failed", text):
        assert status[int(run_id)] == "failed"


_STOP_AS_THE_INGEST_COMMITS = """
import os, signal
from sqlalchemy.engine.default import DefaultDialect
from adseg.store import load
armed, real_lock, real_commit = [], load._lock_for_ingest, DefaultDialect.do_commit

def lock_and_arm(conn):  # the ingest's transaction has begun
    armed.append(1)
    real_lock(conn)

def commit_then_stop(self, dbapi_connection):  # lands as the driver's commit returns
    real_commit(self, dbapi_connection)
    if armed:
        armed.clear()
        os.kill(os.getpid(), signal.{signal})

load._lock_for_ingest = lock_and_arm
DefaultDialect.do_commit = commit_then_stop
"""


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_stop_as_the_ingest_commits_says_that_the_data_is_written(engine, db_url, name):
    """A stop landing as the ingest's commit returned exited with "nothing half-written is
    kept" though every row was committed. Now it exits with the signal's code after the summary
    table and a line that says the rows are written."""
    tiny = str(SAMPLES / "tiny")
    proc = _adseg(
        _STOP_AS_THE_INGEST_COMMITS.format(signal=name), "ingest", tiny, "--database-url", db_url
    )
    assert proc.returncode == 128 + getattr(signal, name), proc.stderr
    assert "67 rows read and validated in" in proc.stdout  # after the summary table
    assert proc.stderr.endswith(
        ": stopped after the ingest was committed (written: advertisers 4, auctions 47, "
        "delivery 16 rows)\n"
    )
    assert proc.stderr.count("error:") == 1
    assert (_rows(engine, "advertisers"), _rows(engine, "auctions")) == (4, 47)


_STOP_AS_THE_INGEST_RETURNS = """
import os, signal
from adseg.store import load
real_write = load.write_batch

def write_then_stop(*args, **kwargs):  # a handler run late: after write_batch has returned
    summary = real_write(*args, **kwargs)
    os.kill(os.getpid(), signal.{signal})
    return summary

load.write_batch = write_then_stop
"""


@pytest.mark.parametrize("name", ["SIGINT", "SIGHUP"])
def test_a_stop_landing_after_the_ingest_returned_says_that_the_data_is_written(
    engine, db_url, name
):
    """A stop raised outside the commit's deferred block, after write_batch had returned (its
    C handler ran late, in another thread of a loaded machine), carried no summary: the command
    said "nothing half-written is kept" and printed no table (a CI run saw stdout empty)."""
    tiny = str(SAMPLES / "tiny")
    proc = _adseg(
        _STOP_AS_THE_INGEST_RETURNS.format(signal=name), "ingest", tiny, "--database-url", db_url
    )
    assert proc.returncode == 128 + getattr(signal, name), proc.stderr
    assert "67 rows read and validated in" in proc.stdout
    assert proc.stderr.endswith(
        ": stopped after the ingest was committed (written: advertisers 4, auctions 47, "
        "delivery 16 rows)\n"
    )
    assert (_rows(engine, "advertisers"), _rows(engine, "auctions")) == (4, 47)


_STOP_AS_THE_INGEST_TABLE_PRINTS = """
import os, signal
from rich.table import Table
real_add_row, sent = Table.add_row, []

def add_row_then_stop(self, *cells, **kwargs):  # the stop of a commit, run late by Python
    real_add_row(self, *cells, **kwargs)
    if not sent:
        sent.append(1)
        os.kill(os.getpid(), signal.{signal})

Table.add_row = add_row_then_stop
"""


@pytest.mark.parametrize("name", ["SIGINT", "SIGHUP"])
def test_a_stop_landing_as_the_ingest_table_prints_still_prints_it_whole(engine, db_url, name):
    """Python runs a signal's handler when the main thread next checks, which may be after the
    commit has returned and the summary table has begun (a CI run printed nothing to stdout).
    The table is printed whole all the same, and the stop is reported after it."""
    tiny = str(SAMPLES / "tiny")
    proc = _adseg(
        _STOP_AS_THE_INGEST_TABLE_PRINTS.format(signal=name),
        *("ingest", tiny, "--database-url", db_url),
    )
    assert proc.returncode == 128 + getattr(signal, name), proc.stderr
    for table in ("advertisers", "auctions", "delivery"):
        assert table in proc.stdout
    assert "67 rows read and validated in" in proc.stdout
    assert proc.stderr.endswith(
        ": stopped after the ingest was committed (written: advertisers 4, auctions 47, "
        "delivery 16 rows)\n"
    )
    assert (_rows(engine, "advertisers"), _rows(engine, "auctions")) == (4, 47)


def test_stops_timed_on_the_ingest_commit_are_reported_as_the_database_holds_them(
    engine, db_url, tmp_path
):
    """Stops sent as the SQLite write-ahead log starts growing (the ingest's pages go there
    as it commits) and a few milliseconds later: whichever side of the commit one lands, the
    line and the exit status say what the database holds."""
    import shutil
    import subprocess
    import sys
    import time

    if not db_url.startswith("sqlite"):
        pytest.skip("times the stop on SQLite's write-ahead log")
    engine.dispose()  # no connection of this process keeps a -wal file open
    database = Path(db_url.removeprefix("sqlite:///"))
    empty = tmp_path / "empty.db"
    shutil.copy(database, empty)
    wal = Path(f"{database}-wal")
    trials = [(signal.SIGTERM, 0.0), (signal.SIGINT, 0.001), (signal.SIGHUP, 0.003)]
    for signum, delay in [*trials, (signal.SIGTERM, 0.01)]:
        shutil.copy(empty, database)
        cmd = [sys.executable, "-m", "adseg", "ingest", str(SAMPLES / "small"), "--database-url"]
        proc = subprocess.Popen([*cmd, db_url], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        while proc.poll() is None and not (wal.exists() and wal.stat().st_size > 0):
            time.sleep(0.0005)
        time.sleep(delay)
        proc.send_signal(signum)
        out, err = (text.decode() for text in proc.communicate(timeout=300))
        written = _rows(engine, "auctions")
        engine.dispose()
        assert written in (0, 49_666), err
        if written:
            assert "inserted" in out and "nothing was written" not in err, err
            assert proc.returncode == 0 or (
                proc.returncode == 128 + signum and "stopped after the ingest was committed" in err
            ), err
        else:
            assert proc.returncode == 128 + signum and "nothing was written" in err, err
            assert "inserted" not in out


@pytest.mark.parametrize("module", ["adseg.cli", "adseg.store.load"])
def test_a_stop_whose_exception_an_import_lost_stops_the_ingest_before_it_writes(
    engine, db_url, module
):
    """A SIGTERM can land where Python drops its exception (seen as a module was compiled
    during an import, PYTHONDONTWRITEBYTECODE set). Lost while the command line was imported,
    it was forgotten as the command began: the ingest ran to the end, exit 0. Lost inside the
    command, it was raised only after the ingest had committed: the table, then exit 143 and
    "nothing half-written is kept". It is now honoured before anything is written."""
    tiny = str(SAMPLES / "tiny")
    prelude = _stop_while_importing("SIGTERM", module, swallowed=True)
    proc = _adseg(prelude, "ingest", tiny, "--database-url", db_url)
    assert proc.returncode == 143, proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: terminated by SIGTERM: stopped (")
    assert "rolled back: nothing was written" in proc.stderr and proc.stdout == ""
    assert _rows(engine, "auctions") == 0
