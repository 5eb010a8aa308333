"""Run bookkeeping: the nightly lock, the run row of a new run, a stage run again on a stored
run, and the clean-up when either ends by an error or a stop.

* :func:`locked_run`: take the lock, write a 'running' run row, yield its id; on an error mark
  the run failed (its partial results deleted) and release the lock.
* :func:`stage_on_run`: run a stage again on a completed run under the lock.
* :func:`nightly_lock`: the lock alone (`db prune`); :func:`timed`: a stage's time and progress.
Every run is made, remade or deleted under the one nightly lock (a row in the store).
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict
from typing import TYPE_CHECKING

from threadpoolctl import threadpool_limits

from adseg import __version__
from adseg.consensus import FUSERS
from adseg.interrupts import (
    Terminated,
    check_pending,
    error_text,
    note_completed_run,
    signals_deferred,
)
from adseg.pipeline import NightlyConfig, Progress, Windows
from adseg.store import results as store

if TYPE_CHECKING:
    from adseg.store.engine import Engine

log = logging.getLogger("adseg.pipeline")  # the run's log lines keep the name jobs grep for


class RunFailed(Exception):
    """A run whose row was written failed: the row says why and its partial results are
    deleted (``completed`` False), or the error came after it completed and the run is kept
    (``completed`` True). ``run_id``; the error itself is ``__cause__``."""

    def __init__(self, run_id: int, cause: BaseException, completed: bool = False):
        what = "completed and is kept, but then" if completed else "failed"
        super().__init__(f"run {run_id} {what}: {error_text(cause)}")
        self.run_id, self.completed = run_id, completed


@contextmanager
def locked_run(
    engine: Engine,
    kind: str,
    windows: Windows,
    config: NightlyConfig,
    parameters: dict,
    timings: dict,
):
    """Take the nightly lock, create a 'running' run row and yield its id; the lock is released
    at the end. Raises store.RunLockedError before writing anything if the lock is held.

    On an error the run is marked failed (its partial results deleted) and :class:`RunFailed`
    is raised from the error; a stop is re-raised as it is, carrying the run's id as its
    ``failed_run_id`` (its exit code is the signal's). If the run cannot be marked failed (the
    server went away), the lock is left naming the run, so that the next run takes it over and
    fails the run then.

    The block completes the run itself (:func:`mark_completed`) as its last write; the lock is
    released after that commit. An error that comes after it leaves the run completed, with its
    results: RunFailed with ``completed`` True; a stop then carries ``completed_run_id`` (also
    once this block is over: interrupts.note_completed_run). A crash between the two leaves a
    stale lock naming a completed run, which the next run takes over and leaves completed."""
    holder = run_id = None
    marked = True
    note_completed_run(None)
    try:
        check_pending()  # a stop whose exception was lost is honoured before anything is written
        # a stop signal waits until the lock is held and the run row exists and the lock names
        # it (one transaction): between them it left a lock or a 'running' run nothing cleared
        with signals_deferred():
            holder = store.acquire_lock(engine, "nightly")
            run_id = store.create_run(
                engine,
                kind,
                parameters=parameters,
                seed=config.seed,
                windows=windows.as_columns(),
                code_version=__version__,
                lock=("nightly", holder),
            )
        if orphans := store.fail_orphaned_runs(engine, exclude=run_id):
            log.warning("marked failed the runs no process finishes: %s", orphans)
        # one BLAS thread by default: on a shared machine, multi-threaded BLAS spin-waits and the
        # dense eigensolvers run up to 20× slower under load (docs/algorithms/pipeline.md)
        with threadpool_limits(limits=config.blas_threads):
            yield run_id
    except BaseException as exc:
        if run_id is not None:
            message = error_text(exc)
            if stage := getattr(exc, "stage", None):  # a stop: where it landed
                message += f" (during stage {stage})"
            log.debug("%s", traceback.format_exc())
            _free_frames(exc)
            status: list[str | None] = []
            marked = _cleanup(
                f"mark run {run_id} failed",
                lambda: status.append(store.fail_run(engine, run_id, message, timings)),
            )
            # the caller reports the error, and what became of the run: the database's word
            completed = status == ["completed"]
            if completed:
                log.info("run %s had completed (its results are kept): %s", run_id, message)
            else:
                log.info("run %s failed: %s", run_id, message)
            if isinstance(exc, Exception):
                raise RunFailed(run_id, exc, completed=completed) from exc
            # a stop stays a stop (its exit code is the signal's); it carries the run's id
            if completed:
                exc.completed_run_id = run_id
            else:
                exc.failed_run_id = run_id
        raise
    finally:
        if holder is not None and marked:
            _cleanup(
                f"release the lock of run {run_id}",
                lambda: store.release_lock(engine, "nightly", holder),
            )
        elif holder is not None:  # this process no longer holds it: the next run takes it over
            store.forget_lock(engine, "nightly")


def _free_frames(exc: BaseException) -> None:
    """Clear the locals of the finished frames in ``exc``'s traceback (and in those of the
    exceptions it chains), before the clean-up writes: whatever only they held is freed now, not
    when the exception is. A stop that lands inside SQLAlchemy after the driver ran a statement
    but before its result is set up (an INSERT of the forecast stage) makes SQLAlchemy invalidate
    the connection, hard-closing it instead of rolling back; SQLite closes such a connection only
    once its statements are freed (sqlite3_close_v2), and its cursor was referenced from the
    traceback: its write transaction held the database, and marking the run failed waited out
    the busy timeout (30 s) and failed with 'database is locked', leaving the run 'running' and
    the lock held (2 stops in 46). The executing frames (the caller's) are left as they are."""
    pending, seen = [exc], set()
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        pending += [current.__cause__, current.__context__]


def _cleanup(what: str, step: Callable[[], None]) -> bool:
    """A clean-up step after a run ended, which must not replace the run's own error with its
    own: when the database server went away mid-run, marking the run failed fails too, and the
    user saw that second error without "run N failed". A lock and a run row left behind are
    taken over by the next run on this host (the process is gone) or cleared by `adseg db
    unlock`."""
    try:
        step()
    except Exception as exc:
        log.warning("could not %s: %s", what, error_text(exc))
        return False
    return True


def run_parameters(config: NightlyConfig) -> dict:
    """The run row's parameters: the config, fuser names canonical (:meth:`fuser_names`)."""
    params = {k: v for k, v in asdict(config).items() if k != "extra"} | config.extra
    if config.primary_fuser in FUSERS:
        params["primary_fuser"] = config.primary()
    return params


@contextmanager
def timed(timings: dict, stage: str, progress: Progress | None):
    """Time a stage into ``timings`` (seconds) and log it; announce it to ``progress``. A stop
    signal whose exception was lost stops the run here (interrupts.check_pending)."""
    check_pending()
    if progress:
        progress(stage)
    t0 = time.perf_counter()
    try:
        yield
    except (KeyboardInterrupt, Terminated) as exc:
        # a stop's text says nothing of where it landed: the run's row names the stage
        if not hasattr(exc, "stage"):
            exc.stage = stage
        raise
    check_pending()
    timings[stage] = round(time.perf_counter() - t0, 3)
    log.info("stage %s: %.1f s", stage, timings[stage])


def mark_completed(
    engine: Engine, run_id: int, timings: dict, resolved: dict | None = None
) -> None:
    """Mark the run completed (store.complete_run), and note that for the stops that may come
    before the command has said so (interrupts.note_completed_run)."""
    store.complete_run(engine, run_id, timings, resolved)
    note_completed_run(run_id)


def stage_on_run(engine: Engine, run_id: int, stage: str, work) -> dict:
    """Run ``work(run) -> (result, parameters, details)`` on an existing completed run under the
    nightly lock. ``work`` writes its own results in one transaction; ``parameters`` (None:
    unchanged) go into the run's parameters, and the command's time into its timings as
    ``"adseg <stage>": {"total": seconds, **details}`` (the latest such command; the timings of
    the run's own stages are kept)."""
    with nightly_lock(engine):
        # read under the lock: a `db prune` between a read and the lock deleted the run
        run = store.get_run(engine, run_id)
        if run["status"] != "completed":
            raise store.RunNotFoundError(f"run {run_id} is {run['status']}, not completed.")
        t0 = time.perf_counter()
        out, parameters, details = work(run)
        timings = dict(run["timings"])
        timings[f"adseg {stage}"] = {"total": round(time.perf_counter() - t0, 3), **details}
        store.set_timings(engine, run_id, timings, parameters)
        return out


@contextmanager
def nightly_lock(engine: Engine):
    """Hold the nightly lock for the block (store.RunLockedError if another process holds it):
    the lock under which every run is made, remade or deleted."""
    holder = None
    try:
        check_pending()  # a stop whose exception was lost is honoured before anything is written
        with signals_deferred():  # a stop between taking the lock and `try` leaked the lock
            holder = store.acquire_lock(engine, "nightly")
        yield
    except BaseException as exc:
        _free_frames(exc)  # before releasing the lock: see _free_frames
        raise
    finally:
        if holder is not None:
            # what the block did is committed: a lock that cannot be released now (SQLite's
            # write lock held by another process beyond the busy timeout) must not turn that
            # into an error (e.g. `db prune` exiting 75, 'retry', after its deletion committed);
            # this host's next run takes it over
            _cleanup(
                "release the nightly lock (this host's next run takes it over)",
                lambda: store.release_lock(engine, "nightly", holder),
            )
