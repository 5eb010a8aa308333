"""The execution engine (DESIGN.md §4): a dask.distributed client for the heavy stages' tasks.

:func:`dask_client` gives a client connected to an existing scheduler (``adseg nightly
--scheduler ADDRESS``, ``$ADSEG_DASK_SCHEDULER``), or, without one, to an embedded cluster on this
machine that lives as long as the ``with`` block: one worker process per job, one thread each.
Tasks get arrays and plain values, never a database connection; the caller submits them and
awaits their futures (``adseg.fusion``). A scheduler that cannot be reached is
:class:`SchedulerUnreachable` (the command line's exit 75).

Start-up cost of the embedded cluster (2 workers, measured on a loaded 2-core machine):
importing distributed ~1 s once per process, then ~0.2 s to start and ~0.05 s to close with
forked workers, against ~1 s + ~3 s (each worker imports numpy, scikit-learn and adseg) +
~0.9 s with spawned ones. Hence forked workers: they also inherit the fusers registered in this
process. A stop (Ctrl-C, SIGTERM, SIGHUP) or an error leaving the block kills the workers at
once; a kill -9 of this process ends them too (each watches a pipe to its parent, whose write
end no sibling keeps: :func:`_no_fork_while_a_worker_is_made`,
:func:`_drop_siblings_lifelines`).
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import signal
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, closing, contextmanager, suppress
from typing import NamedTuple

from adseg.interrupts import (
    STOP_SIGNALS,
    TERMINATING,
    check_pending,
    handled_stops,
    signals_deferred,
)

SCHEDULER_ENV = "ADSEG_DASK_SCHEDULER"
WORKERLESS_GRACE_S = 60.0
"""How long tasks may wait on an engine with no worker (one restarting, one joining an
external scheduler) before the stage fails with SchedulerUnreachable."""
CONNECT_TIMEOUT_S = 5
"""How long a connection to a scheduler is tried before it counts as unreachable."""


class SchedulerUnreachable(Exception):
    """The dask scheduler at ``address`` could not be reached (or went away): retry later."""

    def __init__(self, address: str, reason: str):
        self.address = address
        super().__init__(f"the dask scheduler {address} cannot be reached ({reason})")


def _distributed():
    """The distributed package, imported (~1 s, the first time), its own log lines (a cluster
    started, a worker closed) at WARNING and above: they are not the run's."""
    import distributed

    engine_log = logging.getLogger("distributed")
    engine_log.setLevel(max(engine_log.level, logging.WARNING))  # quieter if made so: kept
    return distributed


def connect(address: str):
    """A distributed.Client connected to the scheduler at ``address`` (``tcp://host:8786``),
    tried for CONNECT_TIMEOUT_S seconds; SchedulerUnreachable if it cannot be."""
    Client = _distributed().Client  # noqa: N806 - the class

    try:
        return Client(address, timeout=f"{CONNECT_TIMEOUT_S}s", set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:  # refused, timed out, a bad address
        reason = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SchedulerUnreachable(address, reason) from None


def check_scheduler(address: str) -> None:
    """Raise SchedulerUnreachable unless the scheduler at ``address`` answers now (a command
    checks before it takes the nightly lock)."""
    connect(address).close()


@contextmanager
def dask_client(scheduler: str | None, n_workers: int) -> Iterator:
    """A distributed.Client for the block: on ``scheduler`` when given (SchedulerUnreachable if
    it cannot be reached), else on an embedded cluster of ``n_workers`` forked worker processes
    of one thread each, which ends with the block (see the module docstring for its cost)."""
    if scheduler:
        client = connect(scheduler)
        try:
            yield client
        finally:
            client.close()
        return
    if _shared is not None:  # inside shared_engine(): one embedded cluster for every stage
        yield _start_shared(n_workers)
        return
    with _embedded_cluster(n_workers) as client:
        yield client


def _start_shared(n_workers: int):
    """The client of shared_engine's embedded cluster, started now with ``n_workers`` if it
    is not up yet."""
    if _shared.client is None:
        _shared.client = _shared.stack.enter_context(_embedded_cluster(n_workers))
    return _shared.client


class _Shared:
    def __init__(self, stack: ExitStack):
        self.stack, self.client = stack, None


_shared: _Shared | None = None


@contextmanager
def shared_engine(start_workers: int = 0) -> Iterator[None]:
    """Inside, the embedded cluster that the first stage needing the engine starts stays up
    for the next stages, and closes (or, leaving by an error or a stop, has its workers killed)
    as the block ends: a nightly starts one cluster, not one per stage (starting clusters one
    after another in a process can lose the workers of a later one; docs/architecture.md).
    ``start_workers`` > 0 starts the cluster now, with that many workers: forked before the
    command holds its data, they share none of it (a process tree's summed resident memory
    counts shared pages once per process)."""
    global _shared
    if _shared is not None:  # nested: the outer block's cluster
        yield
        return
    with ExitStack() as stack:
        _shared = _Shared(stack)
        try:
            if start_workers > 0:
                _shared.client = stack.enter_context(_embedded_cluster(start_workers))
            yield
        finally:
            _shared = None


@contextmanager
def _embedded_cluster(n_workers: int) -> Iterator:
    """A LocalCluster of ``n_workers`` processes and its client. Made with stop signals
    deferred: the cluster's threads, which fork the workers, inherit the blocked mask, so a
    worker starts with them blocked until :func:`dask_setup` has set its handlers (a stop then
    lands in this process's main thread, once the cluster is there to be stopped)."""
    import dask

    distributed = _distributed()
    cluster = client = None
    engine_log = logging.getLogger("distributed")
    _no_fork_while_a_worker_is_made()
    with dask.config.set({"distributed.worker.multiprocessing-method": "fork"}):
        try:
            with signals_deferred():
                cluster = distributed.LocalCluster(
                    n_workers=n_workers,
                    threads_per_worker=1,
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address=None,
                    # its HTTP routes (health, metrics) on a free local port, not on :8787
                    scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
                    memory_limit=0,  # as the worker processes before: no memory manager
                    silence_logs=logging.CRITICAL,
                    preload=[__name__],  # dask_setup, in each worker
                )
                client = distributed.Client(cluster, set_as_default=False)
            yield client
        except BaseException:
            # a running task would delay a graceful close; the cluster's warnings as it loses
            # the workers (results lost, workers restarted until it closes) say nothing of use
            engine_log.setLevel(logging.ERROR)
            _kill_workers(cluster)
            raise
        finally:
            try:
                # deferred: closing drops objects whose weakref callbacks run in this thread,
                # where a stop's exception would be lost with an "Exception ignored" traceback
                with signals_deferred():
                    if client is not None:
                        client.close()
                    if cluster is not None:
                        cluster.close()
                    del client, cluster
                    gc.collect()
            finally:
                # for good: a connection of the closed cluster that its threads drop late
                # logs "Stream is closed", which is not the command's to say
                _silence_engine_logs()


_making_a_worker = threading.Lock()
"""Held while the engine makes a worker's process object, and by each hooked fork of this
process (:func:`_no_fork_while_a_worker_is_made`)."""


@functools.cache
def _no_fork_while_a_worker_is_made() -> None:
    """From now on, no fork of this process lands while the engine makes a worker's process
    object (distributed's ``AsyncProcess``, which opens the worker's parent-alive pipe).

    The cluster makes its workers' process objects on its event loop and forks each worker from
    a thread of its own, so one worker could be forked while a sibling's object was half made:
    its pipe open, its ``_keep_child_alive`` not yet set. That worker kept the sibling's write
    end, out of :func:`_drop_siblings_lifelines`' reach. Here the making holds a lock that
    every fork running Python's at-fork hooks takes first (``os.fork``, multiprocessing's fork
    start; a subprocess that execs at once runs none and needs none), installed for good, once
    per process. Cost: one lock per such fork and per worker made, uncontended but for such a
    race."""
    from distributed.process import AsyncProcess

    make = AsyncProcess.__init__

    @functools.wraps(make)
    def made_whole(self, *args, **kwargs):
        with _making_a_worker:
            make(self, *args, **kwargs)

    AsyncProcess.__init__ = made_whole
    os.register_at_fork(
        before=_making_a_worker.acquire,
        after_in_parent=_making_a_worker.release,
        after_in_child=_making_a_worker.release,
    )


def run_tasks(tasks, scheduler: str | None, n_workers: int, poll: float = 0.1):
    """Submit ``tasks``, (name, function, arguments) each, to the engine and yield (name,
    outcome) as each finishes, outcome() returning the function's result or raising the task's
    exception. Arguments and results travel by pickle: arrays and plain values.

    Whatever ends the loop (Ctrl-C, SIGTERM, an error raised by the caller)
    cancels the futures, and an embedded cluster's workers are killed as it closes. Futures are
    polled, not awaited in the engine's own wait: a stop signal's exception is raised in the
    sleep between polls, and one whose exception was lost still stops the stage
    (interrupts.check_pending). A future cancelled meanwhile (not by this loop) is a scheduler
    that went away: SchedulerUnreachable, for every task."""
    with dask_client(scheduler, n_workers) as client:
        yield from _finished(client, _submit(client, tasks), scheduler, poll)


def _submit(client, tasks, priority: int = 0) -> dict:
    """{name: future} of ``tasks`` submitted to ``client``, the first at ``priority``, each
    next one lower (the engine starts them in this order when it has to choose). This
    process's freed heap goes back to the system first: it is about to wait on the workers,
    whose memory adds to its own."""
    trim_memory()
    futures = {}
    resources = {SLOT: 1} if _declares_slots(client) else None
    with warnings.catch_warnings():  # each task's data goes once: the hint is moot
        warnings.filterwarnings("ignore", "Sending large graph", UserWarning)
        for rank, (name, function, args) in enumerate(tasks):
            futures[name] = client.submit(
                _trimmed,
                function,
                *args,
                pure=False,
                priority=priority - rank,
                resources=resources,
            )
    return futures


SLOT = "adseg_slot"
"""The worker resource a stage's task holds until it ends, where every worker declares one
(``dask worker --resources adseg_slot=1``): a worker then runs one stage task at a time even
while that task has seceded to wait on its nested parts (:class:`NestedParts`, which need no
slot). Without it a waiting KS view let its worker start another view beside it (the tree went
past 8 GiB at 100,000 advertisers). The embedded cluster nests nothing and declares none."""


def _declares_slots(client) -> bool:
    """Whether every worker of ``client``'s cluster declares a :data:`SLOT` (and there is one):
    stage tasks then ask for it; on workers without it they ask for nothing, as before."""
    workers = client.scheduler_info().get("workers", {}).values()
    return bool(workers) and all(SLOT in w.get("resources", {}) for w in workers)


def _trimmed(function, *args):
    """function(*args), then the memory its worker freed handed back to the system
    (glibc's malloc_trim; elsewhere nothing): a worker's resident memory between tasks is then
    that of what it holds, not the peak of its last task. Before it, the worker's allocator
    is set as :func:`tune_malloc` says."""
    tune_malloc()
    try:
        return function(*args)
    finally:
        trim_memory()


MALLOC_MMAP_THRESHOLD = 32 << 20
"""glibc's mmap threshold in engine workers: its largest dynamic value (on 64-bit)."""


def tune_malloc() -> None:
    """Undo, in this process, the allocator setting that dask's nannies give the workers they
    spawn (``MALLOC_TRIM_THRESHOLD_=65536``, ``distributed.nanny.pre-spawn-environ``). Setting
    the trim threshold also fixes glibc's mmap threshold at 128 KiB, so that every larger numpy
    temporary is a fresh mapping whose pages fault in zeroed: the KS kernels ran 3× slower in
    such a worker (docs/algorithms/ks.md). Sets the mmap threshold to 32 MiB and the trim
    threshold to twice that; each task's end trims the heap anyway (:func:`trim_memory`). A
    no-op where there is no glibc, and in the embedded cluster's workers: forked, they keep the
    command's allocator as it was set up (glibc read that variable once, in the command).
    Cost: microseconds."""
    libc = _glibc()
    if _forked_worker or libc is None:
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's malloc.h
    libc.mallopt(m_mmap_threshold, MALLOC_MMAP_THRESHOLD)
    libc.mallopt(m_trim_threshold, 2 * MALLOC_MMAP_THRESHOLD)


@functools.cache
def _glibc():
    """This process's glibc (ctypes), loaded once; None where there is none."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim, libc.mallopt  # noqa: B018 - both must exist
    except (OSError, AttributeError):
        return None
    return libc


_forked_worker = False
"""Set by :func:`dask_setup` in the embedded cluster's (forked) workers."""


def trim_memory() -> None:
    """Return the freed heap of this process to the system (glibc malloc_trim; a no-op where
    there is none). Cost: milliseconds."""
    if (libc := _glibc()) is not None:
        libc.malloc_trim(0)


def close_engine() -> None:
    """Inside :func:`shared_engine`: close its embedded cluster (and prefetch connections)
    now, for the stages that follow and need no engine (the forecast); a later stage that
    does need one starts another."""
    if _shared is not None:
        _shared.client = None
        _shared.stack.close()


def _finished(client, futures: dict, scheduler: str | None, poll: float = 0.1):
    """Yield (name, outcome) of ``futures`` as each finishes (see :func:`run_tasks`); those
    not finished when the loop ends are cancelled."""
    try:
        running, workerless = dict(futures), _Workerless(client, scheduler)
        while running:
            check_pending()
            done = [name for name, future in running.items() if future.done()]
            if not done:
                time.sleep(poll)
                workerless.check()
            for name in done:
                if (future := running.pop(name)).status == "cancelled":
                    raise SchedulerUnreachable(
                        _where(scheduler), "the connection was lost during the run"
                    )
                yield name, future.result
    finally:
        pending = [f for f in futures.values() if not f.done()]
        if pending:
            client.cancel(pending)


def _where(scheduler: str | None) -> str:
    """The engine a stage ran on, as SchedulerUnreachable names it."""
    return scheduler or "of the embedded cluster"


class _Workerless:
    """Raises SchedulerUnreachable once the engine has had no worker for ``grace`` seconds
    while tasks wait: they would wait forever. Asks the scheduler at most once a second."""

    def __init__(self, client, scheduler: str | None, grace=WORKERLESS_GRACE_S, clock=None):
        self.client, self.scheduler, self.grace = client, scheduler, grace
        self.clock = clock or time.monotonic
        self.asked = self.since = None

    def check(self) -> None:
        now = self.clock()
        if self.asked is not None and now - self.asked < 1.0:
            return
        self.asked = now
        if self.client.scheduler_info().get("workers"):
            self.since = None
        elif self.since is None:
            self.since = now
        elif now - self.since > self.grace:
            raise SchedulerUnreachable(
                _where(self.scheduler), f"it has had no worker for {self.grace:g} s"
            )


PREFETCH_PRIORITY = -1000
"""Engine priority of prefetched parts: below any stage's own tasks, which go first."""


def part_runner(scheduler: str | None, n_workers: int) -> PartRunner:
    """A ``run_parts`` for the core's stages (``adseg.views.build_base_clusterings``,
    ``adseg.selection.select_model_k``): see :class:`PartRunner`."""
    return PartRunner(scheduler, n_workers)


class PartRunner:
    """Runs a list of (name, function, arguments) as tasks of the engine (:func:`run_tasks`)
    and returns their results in order. Each task's warnings and the log records of the
    ``adseg`` loggers are caught in the worker and replayed here, so that the run's log and
    warnings are those of the in-process path. The first task to fail raises its exception (the
    others are cancelled).

    :meth:`prefetch` submits parts that a later stage will ask for and returns a ``run_parts``
    that collects them: the engine runs them while this process does other work."""

    def __init__(self, scheduler: str | None, n_workers: int):
        self.scheduler, self.n_workers = scheduler, n_workers

    def __call__(self, parts) -> list:
        tasks = _part_tasks(parts)
        return _collected(parts, run_tasks(tasks, self.scheduler, min(self.n_workers, len(tasks))))

    def prefetch(self, parts):
        """A ``run_parts`` that returns the results of ``parts``, submitted now
        (:func:`prefetch_tasks`); it must be given the same parts (names in order). Outside
        :func:`shared_engine`, the runner itself: the parts run when asked for."""
        if _shared is None:
            return self
        finished = prefetch_tasks(_part_tasks(parts), self.scheduler, self.n_workers)
        names = [name for name, *_ in parts]

        def collect(asked) -> list:
            if [name for name, *_ in asked] != names:
                raise ValueError(f"prefetched parts {names} asked for as {asked!r}")
            return _collected(parts, finished())

        return collect


NESTED_PRIORITY = 1000
"""Engine priority of the parts a running task starts (:class:`NestedParts`): they go first,
so that the task that waits on them, and the memory it holds, ends soon."""

SCATTER_MIN_BYTES = 1 << 20
"""Arguments of nested parts from this size on are scattered to the workers (sent straight
from the worker that starts them) rather than sent with the task through the scheduler."""


class NestedParts:
    """A ``run_parts`` for the parts that a task of the engine starts (a KS view's blocks and
    cuts, ``adseg.views.ks.ks_view``): run as tasks of the same engine at ``priority``, while
    the starting task waits outside its worker's thread slot, so every worker can take them.
    Outside a worker (the in-process path), here in order. Their log records and warnings are
    replayed in the starting task. Large array arguments travel worker to worker, not through
    the scheduler.

    The starting task secedes from its worker's slot on its first call and does not rejoin:
    rejoining waits for a free slot, behind whatever long task took it meanwhile; what it does
    after its parts (assembling their results) runs beside the worker's next task."""

    def __init__(self, priority: int = NESTED_PRIORITY):
        self.priority = priority

    def __call__(self, parts) -> list:
        try:
            from distributed import get_client, get_worker, secede

            get_worker()
        except (ImportError, ValueError):  # not in a worker
            return [function(*args) for _, function, args in parts]
        client = get_client()
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Sending large graph", UserWarning)
            shipped = _scattered(client, [args for _, _, args in parts])
            futures = [
                client.submit(
                    _trimmed,
                    _captured,
                    function,
                    args,
                    key=f"{name}-{uuid.uuid4().hex}",
                    pure=False,
                    priority=self.priority,
                )
                for (name, function, _), args in zip(parts, shipped, strict=True)
            ]
        if not getattr(_task_thread, "seceded", False):
            secede()
            _task_thread.seceded = True  # for this thread's life: it ends with the task
        results = client.gather(futures)
        held = {worker for where in client.who_has(futures).values() for worker in where}
        del futures
        logging.getLogger("adseg.engine").debug(
            "%d nested parts ran on %d worker(s)", len(parts), len(held)
        )
        return _replayed(parts, {name: r for (name, *_), r in zip(parts, results, strict=True)})


_task_thread = threading.local()


def _scattered(client, arguments: list[tuple]) -> list[tuple]:
    """The parts' arguments with each large array or sparse matrix (:data:`SCATTER_MIN_BYTES`
    or more) replaced by the future of a copy held by a worker: all scattered in one call, each
    object once however many parts share it."""
    large = {}
    for args in arguments:
        for value in args:
            if _nbytes(value) >= SCATTER_MIN_BYTES:
                large.setdefault(id(value), value)
    if not large:
        return arguments
    futures = dict(zip(large, client.scatter(list(large.values()), direct=True), strict=True))
    return [tuple(futures.get(id(v), v) for v in args) for args in arguments]


def _nbytes(value) -> int:
    """Bytes of an array's or a sparse matrix's data; 0 for anything else."""
    if hasattr(value, "nnz") and hasattr(value, "data"):  # scipy.sparse
        return value.data.nbytes
    return getattr(value, "nbytes", 0) or 0


def _scattered(client, value):
    """A future of ``value`` held by a worker when it is a large array or sparse matrix, else
    ``value`` itself."""
    size = getattr(value, "nbytes", None)
    if size is None and hasattr(value, "data") and hasattr(value, "nnz"):  # scipy.sparse
        size = value.data.nbytes
    if size is None or size < SCATTER_MIN_BYTES:
        return value
    return client.scatter(value, direct=True)


def _part_tasks(parts) -> list:
    """The engine tasks of ``parts``: each function run under :func:`_captured`."""
    return [(name, _captured, (function, args)) for name, function, args in parts]


def _collected(parts, finished) -> list:
    """The values of ``parts`` in order, from ``finished`` ((name, outcome) as each task ends;
    closed on the way out, which cancels the rest), replayed here (:func:`_replayed`)."""
    results = {}
    with closing(finished) as done:
        for name, outcome in done:
            results[name] = outcome()
    return _replayed(parts, results)


def prefetch_tasks(tasks, scheduler: str | None, n_workers: int):
    """Submit ``tasks`` now at :data:`PREFETCH_PRIORITY` and return a callable that yields
    (name, outcome) as each finishes (as :func:`run_tasks` does): the engine runs them while
    this process does other work. Inside :func:`shared_engine`, on its embedded cluster (started
    with ``n_workers`` if it is not up) or, with a scheduler, on a connection of its own that
    the block closes; elsewhere the tasks are submitted only when the callable is called.
    Dropping the callable uncollected releases the tasks."""
    if _shared is None:
        return lambda: run_tasks(tasks, scheduler, n_workers)
    if scheduler:
        client = _shared.stack.enter_context(closing(connect(scheduler)))
    else:
        client = _start_shared(n_workers)
    futures = _submit(client, tasks, PREFETCH_PRIORITY)
    return lambda: _finished(client, futures, scheduler)


def _replayed(parts, results: dict) -> list:
    """The values of ``parts`` from ``results`` ({name: (value, warnings, log records)}), in
    order, each part's log records and warnings replayed here."""
    values = []
    for name, *_ in parts:
        value, caught, records = results[name]
        for record in records:  # as the logger here would have emitted them
            if (logger := logging.getLogger(record.name)).isEnabledFor(record.levelno):
                logger.handle(record)
        for w in caught:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        values.append(value)
    return values


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        record.msg, record.args = record.getMessage(), None  # plain text: it travels by pickle
        record.exc_info = record.exc_text = None
        self.records.append(record)


def _captured(function, args):
    """(function(*args), its warnings, the adseg log records it emitted): a task of
    :func:`part_runner`, run in a worker."""
    handler, logger = _Records(), logging.getLogger("adseg")
    saved = logger.handlers[:], logger.propagate, logger.level
    # only to the collector: a forked worker inherits the command's handlers, which would
    # print each line a second time; every level: the caller keeps those its loggers emit
    logger.handlers[:], logger.propagate = [handler], False
    logger.setLevel(logging.DEBUG)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.simplefilter("ignore", ResourceWarning)  # a finalizer's, not the task's
            value = function(*args)
    finally:
        logger.handlers[:], logger.propagate = saved[:2]
        logger.setLevel(saved[2])
    kept = [_Warning(w.message, w.category, w.filename, w.lineno) for w in caught]
    return value, kept, handler.records


class _Warning(NamedTuple):
    message: Warning | str
    category: type
    filename: str
    lineno: int


def _kill_workers(cluster) -> None:
    """SIGKILL each worker process of ``cluster`` (None: nothing yet); the cluster reaps them
    as it closes."""
    if cluster is None:
        return
    for nanny in list(cluster.workers.values()):
        if pid := getattr(nanny, "pid", None):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def dask_setup(worker=None) -> None:
    """Run by each embedded worker process as it starts (a dask preload): Ctrl-C (SIGINT to the
    whole process group) is this process's parent's to handle — it marks the run failed and
    kills the workers — so a worker ignores it; SIGTERM and SIGHUP get their default actions
    back (the parent's handlers are inherited by fork) unless the parent ignores them
    (``nohup``: a hang-up that spares the run spares its workers); then the stop signals the
    worker was forked with blocked are unblocked. Its allocator is the command's, as it was
    forked (:func:`tune_malloc` leaves it). It first lets go of its siblings' lifelines
    (:func:`_drop_siblings_lifelines`). The engine's own log lines below CRITICAL go nowhere:
    forked, it inherits the command's stderr handler, and as the cluster closes a worker whose
    heartbeat meets the closed scheduler logs an ERROR with a traceback on the command's
    stderr (a CI run's quiet `nightly … | head` printed one). What a task raises, or a worker
    lost, reaches the command through its futures."""
    global _forked_worker
    _forked_worker = True
    _silence_engine_logs()
    _drop_siblings_lifelines()
    for signum in set(handled_stops()) & set(TERMINATING):
        signal.signal(signum, signal.SIG_DFL)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def _silence_engine_logs() -> None:
    """Drop every record below CRITICAL of the engine's loggers in this process: distributed's
    and tornado's, each one that has a level of its own (tornado.application's ERROR) too."""
    loggers = logging.root.manager.loggerDict
    for name in [n for n in loggers if n.split(".")[0] in ("distributed", "tornado")]:
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _drop_siblings_lifelines() -> None:
    """Close, in a forked worker, the write ends of the other workers' parent-alive pipes.

    Each worker exits when its pipe's write end, held by this process's parent, closes (a kill
    -9 of the parent). The cluster makes its workers' pipes before it forks them, so a worker
    inherits its siblings' write ends: two workers then keep each other alive for good once the
    parent is gone. The write ends are the ``_keep_child_alive`` connections of distributed's
    ``AsyncProcess`` objects (the worker's own one is already closed); they are looked for among
    all the objects the worker inherited, since a fork can come between a process object's
    making and the nanny's reference to it. Cost: one pass over the worker's objects (a list of
    that many references), once as the worker starts."""
    from distributed.process import AsyncProcess

    for obj in gc.get_objects():
        if isinstance(obj, AsyncProcess):
            lifeline = getattr(obj, "_keep_child_alive", None)
            if lifeline is not None and not lifeline.closed:
                lifeline.close()
