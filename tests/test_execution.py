"""adseg.app.execution: the fusers as dask.distributed tasks, on a scheduler or embedded."""

from __future__ import annotations

import contextlib
import os
import socket
import sys

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from adseg.cli import app
from adseg.fusion import fuse, fuser_tasks
from adseg.ingest import read_directory
from adseg.simulate import MarketplaceConfig, simulate_marketplace, write_marketplace
from adseg.store import results as store
from adseg.store.load import write_batch

runner = CliRunner()
FUSERS = ("rcc", "l2", "sccbg")
_QUIET = {"dashboard_address": None, "scheduler_kwargs": {"dashboard_address": "127.0.0.1:0"}}
"""A test cluster's HTTP routes on a free local port (:8787 may be taken)."""


@pytest.fixture(scope="module")
def market_dir(tmp_path_factory):
    """A small marketplace: 200 advertisers, 12 segments, 7 + 7 days (built once)."""
    out = tmp_path_factory.mktemp("market")
    write_marketplace(
        simulate_marketplace(MarketplaceConfig(n_advertisers=200, n_segments=12, seed=7)), out
    )
    return out


@pytest.fixture(scope="module")
def scheduler():
    """The address of a dask.distributed cluster started here: a scheduler and 2 worker
    processes (spawned: nothing of this process is inherited), one thread each."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, **_QUIET) as cluster:
        yield cluster.scheduler_address


def _free_port() -> int:
    """A local TCP port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_nightly_on_a_scheduler_equals_the_in_process_nightly(
    engine, db_url, market_dir, scheduler
):
    """The same nightly with its fusers (and its backtest's) fitted one after another in this
    process, and as tasks on a dask.distributed cluster (a scheduler and 2 worker processes),
    through the app and through `adseg nightly --scheduler`: the same segments of every source
    and the same MAPE."""
    from adseg.app.nightly import run_nightly
    from adseg.pipeline import NightlyConfig

    write_batch(engine, read_directory(market_dir))
    config = dict(fusers=FUSERS, seed=0, supply="actual", truth_path=str(market_dir / "truth.csv"))
    local_run = run_nightly(engine, config=NightlyConfig(**config, n_jobs=1)).run_id
    dask_run = run_nightly(engine, config=NightlyConfig(**config, scheduler=scheduler)).run_id
    args = ["nightly", "--database-url", db_url, "--supply", "actual", "--seed", "0", "-q"]
    args += ["--truth", str(market_dir / "truth.csv"), "--scheduler", scheduler]
    for name in FUSERS:
        args += ["--fuser", name]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    cli_run = max(store.list_runs(engine)["run_id"].tolist())
    assert store.get_run(engine, cli_run)["parameters"]["scheduler"] == scheduler

    local = store.read_segments(engine, local_run)
    mape = store.read_forecast_results(engine, local_run)["mape"]
    assert set(local) >= {*FUSERS, "truth"} and not mape.empty
    for run_id in (dask_run, cli_run):
        remote = store.read_segments(engine, run_id)
        assert set(remote) == set(local)
        for source in local:
            pd.testing.assert_series_equal(local[source], remote[source], obj=source)
        theirs = store.read_forecast_results(engine, run_id)["mape"]
        pd.testing.assert_frame_equal(mape, theirs)


def test_fusers_on_a_scheduler_equal_those_fitted_here(scheduler):
    """fuse() itself: labels and notes through the scheduler equal the in-process fits."""
    labels = np.random.default_rng(0).integers(0, 8, size=(300, 10))
    here = fuse(labels, list(FUSERS), 8, 0, "rcc", n_jobs=1)
    there = fuse(labels, list(FUSERS), 8, 0, "rcc", scheduler=scheduler)
    assert list(there.segmentations) == list(FUSERS) and there.errors == {}
    for name in FUSERS:
        np.testing.assert_array_equal(here.segmentations[name], there.segmentations[name])
    assert here.notes == there.notes


def test_views_and_model_fits_on_the_engine_equal_those_made_here(scheduler, caplog):
    """The nightly's parts run as engine tasks (adseg.app.execution.part_runner): the views
    and the model view's candidate fits through the scheduler equal those made in this
    process, and the workers' warnings and adseg log lines are replayed here."""
    import logging

    from adseg.app.execution import part_runner
    from adseg.mixture import model_features
    from adseg.selection import _fit_with_k
    from adseg.views import ViewConfig, build_base_clusterings

    rng = np.random.default_rng(2)
    win = [rng.lognormal(0.5 * (k % 3), 0.4, 25) for k in range(120)]
    cost = [rng.lognormal(0.5 * (k % 4), 0.4, 25) for k in range(120)]
    descriptions = [None] * 120  # the text view warns and is skipped
    config = ViewConfig(n_init=2)
    run_parts = part_runner(scheduler, 2)
    with pytest.warns(RuntimeWarning, match="text view"):
        here = build_base_clusterings(win, cost, descriptions, config, random_state=3)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="adseg"), pytest.warns(RuntimeWarning, match="text"):
        there = build_base_clusterings(win, cost, descriptions, config, 3, run_parts=run_parts)
    np.testing.assert_array_equal(here.labels, there.labels)
    timeless = [c for c in here.columns if "seconds" not in c]
    pd.testing.assert_frame_equal(here.columns[timeless], there.columns[timeless])
    said = [r.getMessage() for r in caplog.records if r.name == "adseg.views"]
    assert any(m.startswith("view win_rate: KS distances of 120 advertisers") for m in said)
    assert any(m.startswith("view ecpm_cost alpha=0.05:") for m in said)

    views, _ = model_features(win, descriptions, n_bins=8)
    from adseg.model_stage import estimator

    tasks = [(f"K={k}", _fit_with_k, (estimator(0), k, views)) for k in (2, 3)]
    for mine, theirs in zip([f(*a) for _, f, a in tasks], run_parts(tasks), strict=True):
        np.testing.assert_array_equal(mine.labels_, theirs.labels_)


def test_a_large_part_is_shipped_without_dask_performance_hints(scheduler):
    """A task's arrays of tens of MiB (a 20,000-advertiser view's samples) go without
    distributed's "Sending large graph" warning, which a nightly's user would see."""
    import warnings

    from adseg.app.execution import part_runner

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert part_runner(scheduler, 2)([("big", len, (np.zeros(3_000_000),))]) == [3_000_000]


def _log_a_line(text: str) -> str:
    import logging

    logging.getLogger("adseg.views").warning(text)
    return text


def test_a_forked_workers_log_lines_are_printed_once(tmp_path):
    """The embedded cluster's workers are forked and inherit the command's log handlers: a
    task's adseg log line goes to the collector only, and is printed once, by the replay."""
    import logging

    from adseg.app.execution import part_runner

    handler = logging.FileHandler(tmp_path / "log.txt")
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        assert part_runner(None, 2)([("a", _log_a_line, ("line from a task",))]) == [
            "line from a task"
        ]
    finally:
        root.removeHandler(handler)
        handler.close()
    assert (tmp_path / "log.txt").read_text().count("line from a task") == 1


def _log_as_the_engine(text: str) -> str:
    import logging

    logging.getLogger("distributed.worker").error(text)
    logging.getLogger("tornado.application").error(text)
    return text


def test_a_forked_workers_engine_log_lines_do_not_reach_the_command(tmp_path):
    """A worker whose heartbeat met the closing scheduler logged "Failed to communicate with
    scheduler during heartbeat" and its traceback through the command's inherited stderr
    handler (a CI run's quiet nightly printed it). The engine's lines stay in the worker; the
    adseg lines of its tasks are still replayed."""
    import logging

    from adseg.app.execution import part_runner

    handler = logging.FileHandler(tmp_path / "log.txt")
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        parts = [("a", _log_as_the_engine, ("engine line",)), ("b", _log_a_line, ("ours",))]
        assert part_runner(None, 2)(parts) == ["engine line", "ours"]
    finally:
        root.removeHandler(handler)
        handler.close()
    text = (tmp_path / "log.txt").read_text()
    assert "engine line" not in text and text.count("ours") == 1


def test_tasks_on_an_engine_left_without_workers_fail_instead_of_waiting():
    """A cluster whose workers are gone (and not restarted) would keep the stage's tasks
    waiting forever: after the grace time with no worker, SchedulerUnreachable (exit 75). A
    worker seen meanwhile starts the count again; the scheduler is asked once a second."""
    from adseg.app.execution import SchedulerUnreachable, _Workerless

    class Client:
        def __init__(self, answers):
            self.answers, self.asked = list(answers), 0

        def scheduler_info(self):
            self.asked += 1
            return {"workers": self.answers.pop(0)}

    now = [0.0]
    client = Client([{}, {"w": {}}, {}, {}, {}])
    watch = _Workerless(client, None, grace=10.0, clock=lambda: now[0])
    for t in (0.0, 0.5, 2.0, 4.0, 9.0):  # none at 0, one at 2: the count starts again at 4
        now[0] = t
        watch.check()
    assert client.asked == 4
    now[0] = 15.0
    with pytest.raises(SchedulerUnreachable, match="no worker for 10 s"):
        watch.check()


def test_a_failing_part_on_the_engine_raises_its_error(scheduler):
    """The first part to fail raises its own exception here (the others are cancelled)."""
    from adseg.app.execution import part_runner

    with pytest.raises(ValueError, match="invalid literal"):
        part_runner(scheduler, 2)([("ok", abs, (-1,)), ("bad", int, ("x",))])


@pytest.mark.parametrize("how", ["option", "environment"])
@pytest.mark.parametrize("command", ["nightly", "segment"])
def test_an_unreachable_scheduler_is_exit_75_and_one_line(engine, db_url, market_dir, how, command):
    """As a database server that cannot be reached: one line naming it, exit 75, and nothing
    written (no run row; the lock free)."""
    write_batch(engine, read_directory(market_dir))
    address = f"tcp://127.0.0.1:{_free_port()}"
    args = [command, "--database-url", db_url]
    if command == "segment":
        args += ["--run", "1", "--seed", "0"]  # a seed given: the run is not read first
    env = {"ADSEG_DASK_SCHEDULER": address} if how == "environment" else {}
    if how == "option":
        args += ["--scheduler", address]
    res = runner.invoke(app, args, env=env)
    assert res.exit_code == 75, res.output
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"error: the dask scheduler {address} cannot be reached (")
    assert "Traceback" not in res.output
    if command == "nightly":
        assert store.list_runs(engine).empty and store.lock_holder(engine) is None


def test_what_is_shipped_to_the_workers_is_arrays_and_plain_values(monkeypatch):
    """The tasks' arguments, as built and as submitted to the engine: arrays, numbers, text and
    dicts of them; never a database engine, connection or session."""
    import distributed

    from adseg.app import execution

    def plain(value) -> bool:
        if isinstance(value, dict):
            return all(isinstance(k, str) and plain(v) for k, v in value.items())
        if isinstance(value, list | tuple):
            return all(plain(v) for v in value)
        return value is None or isinstance(value, np.ndarray | str | int | float | bool)

    labels = np.random.default_rng(0).integers(0, 4, size=(60, 5))
    weights = np.ones(5)
    options = {"rcc": {"normalize": True}}
    tasks = fuser_tasks(["l2", "rcc"], labels, 4, 0, options, weights)
    assert [name for name, _ in tasks] == ["rcc", "l2"]  # the slowest first
    assert all(plain(args) for _, args in tasks)

    shipped = []
    real_submit = distributed.Client.submit

    def recording_submit(self, func, *args, **kwargs):
        assert func is execution._trimmed  # the task's function by reference, then its data
        shipped.append(args[1:])
        return real_submit(self, func, *args, **kwargs)

    monkeypatch.setattr(distributed.Client, "submit", recording_submit)
    fusion = fuse(labels, ["l2", "rcc"], 4, 0, "rcc", n_jobs=2, options=options, weights=weights)
    assert set(fusion.segmentations) == {"l2", "rcc"}
    assert len(shipped) == 2 and all(plain(args) for args in shipped)


def test_the_embedded_cluster_leaves_no_process_behind():
    """Its worker processes end with the stage (those of a cluster a test started stay)."""
    import multiprocessing

    before = set(multiprocessing.active_children())
    labels = np.random.default_rng(0).integers(0, 4, size=(60, 5))
    fuse(labels, ["l2", "rcc"], 4, 0, "rcc", n_jobs=2)
    assert set(multiprocessing.active_children()) <= before


def _pipe_write_ends(pid: int | str) -> set[str]:
    """The pipes (as /proc names them, ``pipe:[inode]``: both ends alike) whose write end
    ``pid`` holds open."""
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            with open(f"/proc/{pid}/fdinfo/{fd}") as info:
                flags = next(int(line.split()[1], 8) for line in info if line.startswith("flags:"))
            if link.startswith("pipe:") and flags & os.O_ACCMODE == os.O_WRONLY:
                found.add(link)
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs Linux's /proc")
def test_no_embedded_worker_holds_another_workers_lifeline():
    """A worker exits when the write end of its pipe from this process closes (a kill -9 of
    this process). The cluster made all the pipes before forking, and each worker inherited its
    siblings' write ends: two workers kept each other alive after the kill (a CI run: both still
    running 5 s later)."""
    from adseg.app.execution import dask_client

    with dask_client(None, 4) as client:
        lifelines = {
            nanny.process.pid: os.readlink(
                f"/proc/self/fd/{nanny.process.process._keep_child_alive.fileno()}"
            )
            for nanny in client.cluster.workers.values()
        }
        assert len(lifelines) == 4
        held = {
            pid: _pipe_write_ends(pid) & (set(lifelines.values()) - {own})
            for pid, own in lifelines.items()
        }
    assert held == {pid: set() for pid in lifelines}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_fork_waits_while_a_workers_process_object_is_half_made(monkeypatch):
    """The cluster forks each worker from a thread while it makes the next worker's process
    object on its loop. A worker forked while that object was half made (its parent-alive pipe
    open, the write end not yet set) kept the write end (the test above: 1 start in 15)."""
    import asyncio
    import gc
    import threading
    import time

    import distributed.process

    from adseg.app.execution import _making_a_worker, _no_fork_while_a_worker_is_made

    _no_fork_while_a_worker_is_made()
    context = distributed.process.get_mp_context()
    pipe_open = threading.Event()

    class SlowPipes:
        """The context, its pipes handed over 0.5 s after they are open."""

        def __getattr__(self, name):
            return getattr(context, name)

        def Pipe(self, duplex=True):  # noqa: N802 - multiprocessing's name
            ends = context.Pipe(duplex)
            pipe_open.set()
            time.sleep(0.5)
            return ends

    monkeypatch.setattr(distributed.process, "get_mp_context", SlowPipes)
    made = []

    async def make():  # as the cluster does, on an event loop; never started
        made.append(distributed.process.AsyncProcess(target=print))

    maker = threading.Thread(target=asyncio.run, args=(make(),))
    maker.start()
    assert pipe_open.wait(timeout=30)
    read, write = os.pipe()
    if (pid := os.fork()) == 0:  # the child counts the half-made process objects it has
        try:
            half = sum(
                issubclass(type(o), distributed.process.AsyncProcess)
                and not hasattr(o, "_keep_child_alive")
                for o in gc.get_objects()
            )
            free = _making_a_worker.acquire(blocking=False)  # the child may make workers too
            os.write(write, bytes([half, free]))
        finally:
            os._exit(0)
    os.close(write)
    seen = os.read(read, 2)
    os.close(read)
    os.waitpid(pid, 0)
    maker.join(timeout=30)
    assert seen == bytes([0, 1]) and len(made) == 1


def test_a_shared_engine_is_one_cluster_for_every_stage_and_ends_with_its_block():
    """Inside shared_engine the stages get the same embedded cluster (started at once with
    start_workers, else by the first stage); its workers end with the block."""
    import multiprocessing

    from adseg.app.execution import dask_client, shared_engine

    before = set(multiprocessing.active_children())
    labels = np.random.default_rng(0).integers(0, 4, size=(60, 5))
    for start in (2, 0):
        with shared_engine(start_workers=start):
            with dask_client(None, 2) as first:
                pass
            here = fuse(labels, ["l2", "rcc"], 4, 0, "rcc", n_jobs=2)
            with dask_client(None, 2) as second:
                assert second is first and len(first.scheduler_info()["workers"]) == 2
        assert set(multiprocessing.active_children()) <= before
        alone = fuse(labels, ["l2", "rcc"], 4, 0, "rcc", n_jobs=1)
        for name in ("l2", "rcc"):
            np.testing.assert_array_equal(here.segmentations[name], alone.segmentations[name])


def test_close_engine_ends_the_shared_cluster_before_its_block_ends():
    """close_engine() inside shared_engine: the workers are gone at once; a stage after it that
    needs the engine gets a new cluster; outside a block it does nothing."""
    import multiprocessing

    from adseg.app.execution import close_engine, dask_client, shared_engine

    before = set(multiprocessing.active_children())
    close_engine()
    with shared_engine(start_workers=2):
        with dask_client(None, 2) as first:
            assert len(first.scheduler_info()["workers"]) == 2
        close_engine()
        assert set(multiprocessing.active_children()) <= before
        with dask_client(None, 2) as second:
            assert second is not first and len(second.scheduler_info()["workers"]) == 2
    assert set(multiprocessing.active_children()) <= before


def test_a_scheduler_lost_during_the_stage_is_unreachable(monkeypatch):
    """A scheduler that goes away while the fusers run: SchedulerUnreachable (a run's exit 75),
    not a fuser's failure to skip."""
    import threading

    from distributed import LocalCluster

    from adseg import fusion
    from adseg.app.execution import SchedulerUnreachable

    def slow(*args):  # a local function: shipped by value to the spawned worker
        import time

        time.sleep(60)

    monkeypatch.setattr(fusion, "_fit_one", slow)
    labels = np.random.default_rng(0).integers(0, 4, size=(60, 5))
    cluster = LocalCluster(n_workers=1, threads_per_worker=1, **_QUIET)
    closing = threading.Timer(1, cluster.close)
    closing.start()
    try:
        with pytest.raises(SchedulerUnreachable, match="connection was lost during the run"):
            fuse(labels, ["l2", "rcc"], 4, 0, "rcc", scheduler=cluster.scheduler_address)
    finally:
        closing.join()


def test_prefetched_parts_are_those_the_stage_asks_for(scheduler):
    """A prefetched batch returns its parts' results in order, with their log lines replayed
    when collected; asked for as other parts it refuses; outside shared_engine it is the
    runner itself (the parts run when asked for)."""
    import logging

    from adseg.app.execution import part_runner, shared_engine

    parts = [("a", _logged_sum, (1, 2)), ("b", _logged_sum, (3, 4))]
    for address in (scheduler, None):
        runner = part_runner(address, 2)
        with shared_engine():
            collect = runner.prefetch(parts)
            assert collect is not runner
            with _records("adseg.test") as records:
                assert collect(parts) == [3, 7]
            assert [r.getMessage() for r in records] == ["sum 3", "sum 7"]
            with pytest.raises(ValueError, match="prefetched parts"):
                runner.prefetch(parts)(parts[::-1])
        assert runner.prefetch(parts) is runner
    logging.getLogger("adseg.test").handlers.clear()


def _logged_sum(a, b):
    import logging

    logging.getLogger("adseg.test").warning("sum %d", a + b)
    return a + b


class _records:
    """The records the ``name`` logger handles inside the block."""

    def __init__(self, name):
        import logging

        self.logger, self.records = logging.getLogger(name), []
        self.handler = logging.Handler()
        self.handler.emit = self.records.append

    def __enter__(self):
        self.logger.addHandler(self.handler)
        return self.records

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)


def test_the_nightly_on_the_embedded_engine_equals_the_in_process_nightly(
    engine, market_dir, monkeypatch, tmp_path
):
    """Above the engine's size threshold (lowered here) the views, the prefetched model parts,
    the model view's fit (beside the backtest's scoring) and the fusers (started as soon as the
    backtest has given their weights) run on the embedded cluster: the same segments and MAPE
    as in process."""
    from adseg import pipeline
    from adseg.app.nightly import run_nightly

    write_batch(engine, read_directory(market_dir))
    config = dict(fusers=FUSERS, seed=0, supply="actual")
    local_run = run_nightly(engine, config=pipeline.NightlyConfig(**config, n_jobs=1)).run_id
    monkeypatch.setattr(pipeline, "ENGINE_MIN_N", 1)
    started = []

    def start_fusion(*args, **kwargs):  # the run's fusers start inside the model stage
        started.append(real_start(*args, **kwargs))
        return started[-1]

    real_start = pipeline.start_fusion
    monkeypatch.setattr(pipeline, "start_fusion", start_fusion)
    fitted_in = tmp_path / "model_view_pids"
    real_fit = pipeline.fit_model_view

    def fit_model_view(*args):  # the workers are forked from this process: they have it
        with fitted_in.open("a") as out:
            out.write(f"{os.getpid()}\n")
        return real_fit(*args)

    monkeypatch.setattr(pipeline, "fit_model_view", fit_model_view)
    engine_run = run_nightly(engine, config=pipeline.NightlyConfig(**config, n_jobs=2)).run_id
    assert len(started) == 1 and started[0] is not None
    pids = [int(pid) for pid in fitted_in.read_text().split()]
    assert len(pids) == 1 and pids[0] != os.getpid()  # once, in a worker
    local, there = store.read_segments(engine, local_run), store.read_segments(engine, engine_run)
    assert set(local) == set(there)
    for source in local:
        pd.testing.assert_series_equal(local[source], there[source], obj=source)
    pd.testing.assert_frame_equal(
        store.read_forecast_results(engine, local_run)["mape"],
        store.read_forecast_results(engine, engine_run)["mape"],
    )


def test_a_ks_views_blocks_and_cuts_run_as_tasks_of_the_engine(scheduler, caplog):
    """A sampled KS view run as a part of the engine starts its KS blocks and its cuts as tasks
    of the same engine (execution.NestedParts: the view's task waits outside its worker's
    slot); its labels and columns equal the view computed here, and the blocks' log line is
    replayed here."""
    import logging

    from adseg.app.execution import NestedParts, part_runner
    from adseg.views import ViewConfig, ks_view
    from adseg.views.ks import SAMPLED_MIN_N

    rng = np.random.default_rng(4)
    n = SAMPLED_MIN_N  # the sampled design: in the workers too (their module is not patched)
    samples = [rng.lognormal(0.4 * (k % 5), 0.3, 15) for k in range(n)]
    config = ViewConfig(ks_partners=30, ks_block_values=20_000, n_init=1, k_range=(1, 10))
    here = ks_view(samples, "win_rate", config, 6)
    parts = [("win_rate", ks_view, (samples, "win_rate", config, 6, NestedParts()))]
    with caplog.at_level(logging.DEBUG, logger="adseg"):
        (there,) = part_runner(scheduler, 2)(parts)
    np.testing.assert_array_equal(here.labels, there.labels)
    timeless = [c for c in here.columns if "seconds" not in c]
    pd.testing.assert_frame_equal(here.columns[timeless], there.columns[timeless])
    said = [r.getMessage() for r in caplog.records if r.name == "adseg.views"]
    assert any(m.startswith("KS blocks:") and "in 36 blocks of 8 row ranges" in m for m in said)
    nested = [r.getMessage() for r in caplog.records if r.name == "adseg.engine"]
    assert "36 nested parts ran on 2 worker(s)" in nested  # the blocks, on both workers
    assert "3 nested parts ran on" in " ".join(nested)  # the cuts, one per α


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_engine_tasks_undo_the_page_faults_of_dasks_malloc_setting():
    """dask's nannies spawn workers with MALLOC_TRIM_THRESHOLD_=65536, which pins glibc's mmap
    threshold at 128 KiB: each 1 MiB numpy temporary is then mapped afresh and faults in 256
    zeroed pages. execution.tune_malloc (run before every engine task) sets the thresholds
    back, and the same temporaries reuse the heap."""
    import subprocess

    code = (
        "import resource, numpy as np\n"
        "from adseg.app.execution import tune_malloc\n"
        "def faults():\n"
        "    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "    for _ in range(50):\n"
        "        a = np.ones(1 << 17)\n"
        "        del a\n"
        "    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before\n"
        "untuned = faults()\n"
        "tune_malloc()\n"
        "faults()\n"
        "print(untuned, faults())\n"
    )
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": "65536"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    untuned, tuned = map(int, out.stdout.split())
    assert untuned >= 50 * 200  # every array's pages faulted in afresh
    assert tuned < 50 * 20


def _stamped(path, word: str) -> None:
    with open(path, "a", encoding="utf-8") as out:
        out.write(word + "\n")


def _waits_on_a_nested_part(path) -> None:
    """A stage task that, like a large KS view, secedes to wait on a part of its own."""
    import time

    from adseg.app.execution import NestedParts

    _stamped(path, "view start")
    NestedParts()([("inner", time.sleep, (0.5,))])
    _stamped(path, "view end")


def test_a_task_waiting_on_its_nested_parts_keeps_its_workers_slot(tmp_path):
    """On workers that declare an adseg_slot each holds one stage task at a time: a stage task
    that secedes to wait on its nested parts lets them run in its worker, but not the next
    stage task, which would hold its own data beside the first's (without the resource the
    next task ran between the two lines)."""
    from distributed import LocalCluster

    from adseg.app.execution import SLOT, run_tasks

    path = tmp_path / "order.txt"
    tasks = [("view", _waits_on_a_nested_part, (path,)), ("next", _stamped, (path, "next"))]
    kw = {"resources": {SLOT: 1}}
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, **_QUIET, **kw) as c:
        for _, outcome in run_tasks(tasks, c.scheduler_address, 1):
            assert outcome() is None
    assert path.read_text().split("\n")[:3] == ["view start", "view end", "next"]
