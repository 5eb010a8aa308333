"""Runs, the nightly lock, and the results of a run: writes (one transaction each) and reads.

A run's results become visible to readers only when the run's status is 'completed'
(:func:`latest_completed_run`, :func:`load_results` check it). A run that fails has its partial
results deleted and its row marked 'failed' with the error — earlier runs are never touched. A
completed run's results are deleted only by :func:`prune_runs`.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import Connection, Engine, Float, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from adseg.store.models import (
    BaseClusteringColumn,
    BaseClusteringLabel,
    Forecast,
    Metric,
    Run,
    RunLock,
    Segment,
    SegmentCdf,
)
from adseg.store.reads import query_frame, reading_connection, sorted_frame

log = logging.getLogger(__name__)

RESULT_TABLES = (BaseClusteringLabel, BaseClusteringColumn, Segment, SegmentCdf, Forecast, Metric)
INSERT_CHUNK = 20_000


class RunLockedError(RuntimeError):
    """Another run holds the lock."""


class RunNotFoundError(LookupError):
    """No such run (or it is not completed)."""


class RunLostError(RuntimeError):
    """The run was marked failed by another process while it ran (its lock was cleared with
    ``adseg db unlock --force``): it may not complete, and its results are not kept."""


# --- runs ----------------------------------------------------------------------------------


def create_run(
    engine: Engine,
    kind: str,
    *,
    parameters: dict,
    seed: int | None,
    windows: dict,
    code_version: str,
    lock: tuple[str, str] | None = None,
) -> int:
    """Insert a 'running' run row in its own transaction; returns its id. ``lock`` = (name,
    holder): the lock this process holds names the run in the same transaction, so no process
    can die between the two and leave a 'running' run that no lock names (neither a stale-lock
    takeover nor `adseg db unlock` could then fail it)."""
    with engine.begin() as conn:
        run_id = conn.execute(
            insert(Run)
            .values(
                kind=kind,
                status="running",
                started_at=_now(),
                parameters=_jsonable(parameters),
                seed=seed,
                code_version=code_version,
                timings={},
                **windows,
            )
            .returning(Run.run_id)
        ).scalar_one()
        if lock is not None:
            name, holder = lock
            named = conn.execute(
                update(RunLock)
                .where(RunLock.name == name, RunLock.holder == holder)
                .values(run_id=run_id)
            )
            if named.rowcount != 1:  # rolled back with the run row
                raise RunLostError(f"the {name} lock is no longer held by {holder}")
        return run_id


def set_timings(
    engine: Engine, run_id: int, timings: dict[str, float], parameters: dict | None = None
) -> None:
    """Replace a completed run's timings after a stage command (``adseg segment``/``forecast``);
    ``parameters`` (what the stage ran with) are merged into the run's parameters, key by key."""
    with engine.begin() as conn:
        values: dict[str, Any] = {"timings": _jsonable(timings)}
        if parameters:
            stored = conn.scalar(select(Run.parameters).where(Run.run_id == run_id)) or {}
            values["parameters"] = {**stored, **_jsonable(parameters)}
        conn.execute(update(Run).where(Run.run_id == run_id).values(**values))


def complete_run(
    engine: Engine, run_id: int, timings: dict[str, float], resolved: dict | None = None
) -> None:
    """Mark the run completed: its results become visible. ``resolved`` (what the run decided
    itself, e.g. the number of segments) is added to its parameters under "resolved".

    Only a run still 'running' completes: one that another process marked failed meanwhile
    (``adseg db unlock --force`` on a live holder) raises RunLostError instead, so that the
    caller fails it again and deletes what it wrote after that."""
    with engine.begin() as conn:
        params = conn.scalar(select(Run.parameters).where(Run.run_id == run_id)) or {}
        if resolved:
            params = {**params, "resolved": _jsonable(resolved)}
        done = conn.execute(
            update(Run)
            .where(Run.run_id == run_id, Run.status == "running")
            .values(
                status="completed",
                finished_at=_now(),
                timings=_jsonable(timings),
                parameters=params,
            )
        )
        if done.rowcount != 1:
            raise RunLostError(
                f"run {run_id} was marked failed by another process while it ran (its lock was "
                "cleared: `adseg db unlock --force`?); its results are not kept"
            )


def fail_run(engine: Engine, run_id: int, error: str, timings: dict[str, float]) -> str | None:
    """Mark a 'running' run failed with the error and delete its partial results, in one
    transaction; returns the run's status afterwards ('failed'; None when no such run).

    A run already marked failed (by ``adseg db unlock --force`` while it ran) keeps the reason
    and finish time that process wrote: only what it wrote since is deleted. A completed run is
    left as it is, results included, and 'completed' is returned: its process ended after
    committing it (a stop or a crash before the lock was released), and a completed run's
    results are deleted only by :func:`prune_runs`."""
    with engine.begin() as conn:
        # the update first: on PostgreSQL it waits for a completion being committed, and then
        # the status read next is the committed one
        conn.execute(
            update(Run)
            .where(Run.run_id == run_id, Run.status == "running")
            .values(
                status="failed", finished_at=_now(), error=error[:4000], timings=_jsonable(timings)
            )
        )
        status = conn.scalar(select(Run.status).where(Run.run_id == run_id))
        if status == "failed":
            for table in RESULT_TABLES:
                conn.execute(delete(table).where(table.run_id == run_id))
        return status


@dataclass(frozen=True)
class Pruned:
    """What :func:`prune_runs` removed (or, dry, would remove): the runs by id and status, the
    result rows by table, the oldest run kept (None when there are no more reportable runs than
    asked to keep) and the older runs left because they are still 'running'."""

    runs: dict[int, str]
    rows: dict[str, int]
    first_kept: int | None
    running: list[int] = field(default_factory=list)


def prune_runs(engine: Engine, keep: int, *, dry_run: bool = False) -> Pruned:
    """Delete every run older than the ``keep`` newest reportable runs (completed, with scored
    forecasts: what ``adseg report`` can show, as :func:`latest_completed_run` with
    ``with_forecasts`` picks), completed or failed, with all its results, in one transaction.
    Runs from the oldest kept one on stay whatever their kind and status (a `views` run does not
    take one of the ``keep`` places: counted, a views run after the nightlies would leave no run
    to report), and a 'running' run is never touched. Call it holding the nightly lock, under
    which every run is made and remade (``adseg segment`` / ``forecast``), so that no run being
    written can be deleted. ``dry_run``: count, delete nothing.

    Cost: one indexed delete per results table (a run's rows are keyed by its id first).
    SQLite keeps the file's size and reuses the freed pages for later runs (VACUUM shrinks it)."""
    if keep < 1:
        raise ValueError(f"keep must be at least 1 (the latest reportable run stays), not {keep}.")
    newest_reportable = (
        select(Run.run_id)
        .where(Run.status == "completed", _has_forecasts())
        .order_by(Run.run_id.desc())
        .limit(keep)
        .subquery()
    )
    with engine.begin() as conn:
        kept = conn.execute(select(func.count(), func.min(newest_reportable.c.run_id))).one()
        if kept[0] < keep:  # no more reportable runs than asked to keep: nothing is old enough
            return Pruned({}, {}, None)
        first_kept = int(kept[1])
        older = select(Run.run_id, Run.status).where(Run.run_id < first_kept)
        found = conn.execute(older.order_by(Run.run_id)).all()
        runs = {run_id: status for run_id, status in found if status != "running"}
        running = [run_id for run_id, status in found if status == "running"]
        old = (Run.run_id < first_kept, Run.status != "running")
        doomed = select(Run.run_id).where(*old)
        rows: dict[str, int] = {}
        for table in RESULT_TABLES:
            in_doomed = table.run_id.in_(doomed)
            if dry_run:
                count = conn.scalar(select(func.count()).select_from(table).where(in_doomed))
            else:
                count = conn.execute(delete(table).where(in_doomed)).rowcount
            rows[table.__tablename__] = int(count or 0)
        if not dry_run:
            conn.execute(delete(Run).where(*old))
    return Pruned(runs, rows, first_kept, running)


def fail_orphaned_runs(engine: Engine, *, exclude: int | None = None) -> list[int]:
    """Mark failed (partial results deleted) every run still 'running' but ``exclude`` (the
    caller's own). Call it only while holding the nightly lock, under which every run is made:
    any other 'running' run then belongs to no live process (e.g. one killed before its run was
    named in its lock, which would otherwise stay 'running' for good).
    Returns their ids."""
    stmt = select(Run.run_id).where(Run.status == "running")
    if exclude is not None:
        stmt = stmt.where(Run.run_id != exclude)
    with engine.connect() as conn:
        orphans = conn.scalars(stmt).all()
    why = "abandoned: its process ended and no lock named the run"
    return [run_id for run_id in orphans if fail_run(engine, run_id, why, {}) == "failed"]


def get_run(engine: Engine | Connection, run_id: int) -> dict[str, Any]:
    with reading_connection(engine) as conn:
        row = conn.execute(select(Run).where(Run.run_id == run_id)).mappings().first()
    if row is None:
        raise RunNotFoundError(f"run {run_id} does not exist.")
    return _run_dict(row["Run"] if "Run" in row else row)


def latest_completed_run(
    engine: Engine, kind: str | None = None, *, with_forecasts: bool = False
) -> int:
    """The newest completed run (of ``kind``; with ``with_forecasts``, only one that has scored
    forecasts — what a report is about, so a later views-only run does not hide the nightly)."""
    stmt = select(Run.run_id).where(Run.status == "completed")
    if kind:
        stmt = stmt.where(Run.kind == kind)
    if with_forecasts:
        stmt = stmt.where(_has_forecasts())
    with engine.connect() as conn:
        run_id = conn.scalar(stmt.order_by(Run.run_id.desc()).limit(1))
    if run_id is None:
        what = "completed run with forecasts" if with_forecasts else "completed run"
        raise RunNotFoundError(f"no {what} in the database yet (run `adseg nightly`).")
    return run_id


def _has_forecasts():
    """The condition that a run has scored forecasts: what a report is about. One definition for
    :func:`latest_completed_run` and :func:`prune_runs`, which must never delete the run a
    report picks."""
    return select(Metric.run_id).where(Metric.run_id == Run.run_id).exists()


def list_runs(engine: Engine, limit: int = 20) -> pd.DataFrame:
    """The ``limit`` newest runs, newest first: run_id, kind, status, started_at, finished_at,
    error, parameters (a dict)."""
    cols = [
        Run.run_id,
        Run.kind,
        Run.status,
        Run.started_at,
        Run.finished_at,
        Run.error,
        Run.parameters,
    ]
    with engine.connect() as conn:
        stmt = select(*cols).order_by(Run.run_id.desc()).limit(limit)
        return query_frame(conn, stmt, [c.key for c in cols])


def _run_dict(run: Run) -> dict[str, Any]:
    def iso(d):
        return None if d is None else d.isoformat()

    return {
        "run_id": run.run_id,
        "kind": run.kind,
        "status": run.status,
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
        "windows": {
            "train": [iso(run.train_start), iso(run.train_end)],
            "eval": [iso(run.eval_start), iso(run.eval_end)],
        },
        "parameters": run.parameters or {},
        "seed": run.seed,
        "code_version": run.code_version,
        "timings": run.timings or {},
        "error": run.error,
    }


# --- the lock ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LockHolder:
    """A lock row. ``run_status``: once the lock was taken over or cleared, the status its run
    was left in ('failed', or 'completed' when its process ended after completing it; None
    before, or when the lock named no run)."""

    name: str
    run_id: int | None
    holder: str
    acquired_at: dt.datetime
    run_status: str | None = None

    def run_outcome(self) -> str:
        """What taking over or clearing the lock did to its run, for a message ('' if none)."""
        if self.run_id is None:
            return ""
        if self.run_status == "completed":
            return f"run {self.run_id} had completed and is kept"
        return f"run {self.run_id} marked failed"


def acquire_lock(engine: Engine, name: str = "nightly", run_id: int | None = None) -> str:
    """Take the named lock or raise RunLockedError naming the holder. A lock left by a process
    of this host that no longer exists (a crash, a kill -9) is stale and taken over."""
    holder = _this_process()
    for _ in range(2):
        # this process's threads see a lock row and its _held_here entry change together
        with _held_here_guard:
            try:
                with engine.begin() as conn:
                    conn.execute(
                        insert(RunLock).values(
                            name=name, run_id=run_id, holder=holder, acquired_at=_now()
                        )
                    )
            except IntegrityError:
                current = lock_holder(engine, name)
                stale = current is not None and _is_stale(engine, current)
                if stale:
                    current = _abandon(engine, current)
            else:
                _held_here.add(_lock_key(engine, name))
                return holder
        if current is None:
            continue
        if stale:
            run = f"; its {current.run_outcome()}" if current.run_id is not None else ""
            # the caller may be any command (a prune, a segment): say so, it changed a run
            log.warning(
                "took over the %s lock of %s, whose process has ended%s", name, current.holder, run
            )
            continue
        run = "no run yet" if current.run_id is None else f"run {current.run_id}"
        # not stale: its process exists on this host, or it is another host's, which cannot
        # be checked; either way only --force clears it, so the message names --force (plain
        # `adseg db unlock` would refuse)
        if _on_this_host(current):
            # a gone process of this host would have been taken over above: it is alive
            hint = (
                "its process is running on this host; only if that process id now belongs to "
                "another program, `adseg db unlock --force` clears the lock"
            )
        else:
            hint = (
                "held from another host, which cannot be checked from here; if that process is "
                "gone, `adseg db unlock --force` clears the lock"
            )
        raise RunLockedError(
            f"another {name} run is in progress ({run}, held by {current.holder} since "
            f"{current.acquired_at:%Y-%m-%d %H:%M:%S} UTC); try again when it has finished "
            f"({hint})"
        )
    raise RunLockedError(f"could not take the {name} lock")


def lock_holder(engine: Engine, name: str = "nightly") -> LockHolder | None:
    cols = (RunLock.name, RunLock.run_id, RunLock.holder, RunLock.acquired_at)
    with engine.connect() as conn:
        row = conn.execute(select(*cols).where(RunLock.name == name)).first()
    if row is None:
        return None
    name, run_id, holder, acquired_at = row
    return LockHolder(name, run_id, holder, _as_utc(acquired_at))


def forget_lock(engine: Engine, name: str) -> None:
    """Stop counting the lock as held by this process without deleting its row: the next
    acquire (here, or by a later process) finds it stale, takes it over and fails its run."""
    _held_here.discard(_lock_key(engine, name))


def release_lock(engine: Engine, name: str, holder: str) -> None:
    with _held_here_guard:
        with engine.begin() as conn:
            conn.execute(delete(RunLock).where(RunLock.name == name, RunLock.holder == holder))
        if holder == _this_process():
            _held_here.discard(_lock_key(engine, name))


def _abandon(engine: Engine, stale: LockHolder, why: str = "", *, ended: bool = True) -> LockHolder:
    """Clear a lock whose process is gone (``ended``) or is being cleared by force; its run (if
    any) is marked failed, results deleted, unless it had completed (:func:`fail_run`). Returns
    the lock with its run's status."""
    status = None
    if stale.run_id is not None:
        # a forced clear does not know that the process ended: it may be running still
        what = "ended without finishing the run" if ended else "lost its lock before finishing"
        why = f"abandoned: process {stale.holder} {what}{why}"
        status = fail_run(engine, stale.run_id, why, {})
    release_lock(engine, stale.name, stale.holder)
    return replace(stale, run_status=status)


def clear_lock(engine: Engine, name: str = "nightly", *, force: bool = False) -> LockHolder | None:
    """Clear a lock left behind (``adseg db unlock``): returns the holder cleared, None if the
    lock was free. A holder on this host whose process still exists, or one on another host
    (which cannot be checked), is cleared only with ``force`` (RunLockedError otherwise): its
    process id may have been reused by an unrelated process. The holder's run is marked failed
    and its partial results deleted, as when a crashed holder is taken over (a run that had
    completed is kept: the holder's ``run_status`` says which)."""
    with _held_here_guard:  # judge and clear with this process's locks standing still
        return _clear_lock(engine, name, force)


def _clear_lock(engine: Engine, name: str, force: bool) -> LockHolder | None:
    current = lock_holder(engine, name)
    if current is None:
        return None
    pid = current.holder.rpartition(":")[2]
    here = _on_this_host(current)
    stale = _is_stale(engine, current)
    if here and not force and not stale:
        raise RunLockedError(
            f"the {name} lock is held by process {pid} on this host, which still exists; if it "
            f"is a running adseg, stop it (kill -TERM {pid}) rather than clear its lock; if its "
            "id now belongs to another program (a restarted container), clear it with --force"
        )
    if not here and not force:
        raise RunLockedError(
            f"the {name} lock is held by {current.holder} (another host, since "
            f"{current.acquired_at:%Y-%m-%d %H:%M:%S} UTC) and adseg cannot tell whether that "
            "process still runs; if it does not, clear the lock with --force"
        )
    return _abandon(engine, current, " (lock cleared by `adseg db unlock`)", ended=stale)


_held_here: set[tuple[str, str]] = set()
"""(database, lock name) of the locks this process holds now (acquired, not yet released)."""

_held_here_guard = threading.RLock()
"""Held while this process inserts or deletes a lock row and updates ``_held_here`` with it, and
while it judges a lock row stale and takes it over, so that its threads never see one without
the other. Without it a second thread could read the row a first one had just committed before
the first added its entry, judge this process's own live lock stale (``_is_stale``: same
process id, not held here), take it over, and both runs would fail with RunLostError (a race
that shows under load). Reentrant: taking a stale lock over releases it inside ``acquire_lock``."""


def _this_process() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _lock_key(engine: Engine, name: str) -> tuple[str, str]:
    return engine.url.render_as_string(hide_password=True), name


def _on_this_host(lock: LockHolder) -> bool:
    """Whether ``lock``'s holder ("host:pid") is a process of this host."""
    return lock.holder.rpartition(":")[0] == socket.gethostname()


def _is_stale(engine: Engine, lock: LockHolder) -> bool:
    """Whether ``lock``'s holder is certainly gone: a process of this host that no longer
    exists, or one with this process's own id that this process does not hold (a container
    restarted in a fresh PID namespace gets the same ids, adseg often pid 1)."""
    pid = lock.holder.rpartition(":")[2]
    if not _on_this_host(lock) or not pid.isdigit():
        return False  # another machine's process: we cannot tell, so respect it
    if int(pid) == os.getpid():
        return _lock_key(engine, lock.name) not in _held_here
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


# --- results writes (each in one transaction) ----------------------------------------------


def write_base_clusterings(
    engine: Engine, run_id: int, advertiser_ids, labels: np.ndarray, columns: pd.DataFrame
) -> None:
    """Persist a run's base clusterings: one row per column (view, parameter, n_clusters,
    n_excluded, seconds) and one per (column, advertiser) with its label (-1 = left out)."""
    ids = np.asarray(advertiser_ids, dtype=object)
    n, m = labels.shape
    col_rows = [
        {
            "run_id": run_id,
            "column_index": j,
            "view": str(columns["view"].iloc[j]),
            "parameter": str(columns["parameter"].iloc[j]),
            "n_clusters": int(columns["n_clusters"].iloc[j]),
            "n_excluded": int(columns["n_excluded"].iloc[j]),
            "seconds": _float_or_none(columns["seconds"].iloc[j]) if "seconds" in columns else None,
        }
        for j in range(m)
    ]
    labels_frame = pd.DataFrame(
        {
            "run_id": run_id,
            "column_index": np.repeat(np.arange(m), n),
            "advertiser_id": np.tile(ids, m),
            "label": labels.T.ravel().astype(int),
        }
    )
    with engine.begin() as conn:
        conn.execute(delete(BaseClusteringLabel).where(BaseClusteringLabel.run_id == run_id))
        conn.execute(delete(BaseClusteringColumn).where(BaseClusteringColumn.run_id == run_id))
        conn.execute(insert(BaseClusteringColumn), col_rows)
        _insert_frame(conn, BaseClusteringLabel, labels_frame)


def write_segments(
    engine: Engine, run_id: int, advertiser_ids, segmentations: dict, drop: Sequence[str] = ()
) -> list[str]:
    """Persist (replace) the given sources' segments of a run, and delete those of the sources
    in ``drop`` (a fuser that failed to remake its own, a source stored under a fuser's alias).
    Their c.d.f.s, forecasts and scores, made with the segments replaced, are deleted in the same
    transaction (a report must not show one segmentation's sizes beside another's MAPE).
    Returns the replaced sources that had such results (``adseg forecast`` scores them again)."""
    ids = np.asarray(advertiser_ids, dtype=object)
    frames = [
        pd.DataFrame(
            {
                "run_id": run_id,
                "source": src,
                "advertiser_id": ids,
                "segment": np.asarray(seg, dtype=int),
            }
        )
        for src, seg in segmentations.items()
    ]
    sources = list(segmentations)
    with engine.begin() as conn:
        stale = conn.scalars(
            select(Metric.source)
            .where(Metric.run_id == run_id, Metric.source.in_(sources))
            .distinct()
        ).all()
        removed = [*sources, *drop]
        for table in (Segment, SegmentCdf, Forecast, Metric):
            conn.execute(delete(table).where(table.run_id == run_id, table.source.in_(removed)))
        for frame in frames:
            _insert_frame(conn, Segment, frame)
    return sorted(stale)


def write_forecast_results(engine: Engine, run_id: int, result) -> None:
    """Persist (replace) a ForecastResult: segment c.d.f.s, forecasts and metrics, in one
    transaction."""
    cdfs = result.segment_cdfs.rename(columns={"bid": "bid_ecpm"}).assign(run_id=run_id)
    forecasts = result.forecasts.assign(run_id=run_id)
    metric_cols = [c.name for c in Metric.__table__.columns]
    mape = result.mape.assign(run_id=run_id)
    for col in ("n_missing_forecast", "n_zero_impressions", "n_zero_spend"):
        if col not in mape:
            mape[col] = 0
    for col in ("kappa_win", "kappa_cost"):
        if col not in mape:
            mape[col] = np.nan
    # κ may be infinite (pure segment c.d.f.): stored as NULL, like "not applicable"
    mape = mape.replace([np.inf, -np.inf], np.nan)
    with engine.begin() as conn:
        for table in (SegmentCdf, Forecast, Metric):
            conn.execute(delete(table).where(table.run_id == run_id))
        _insert_frame(conn, SegmentCdf, cdfs[[c.name for c in SegmentCdf.__table__.columns]])
        _insert_frame(conn, Forecast, forecasts[[c.name for c in Forecast.__table__.columns]])
        _insert_frame(conn, Metric, mape[metric_cols])


def _insert_frame(conn, model, frame: pd.DataFrame) -> None:
    """Insert ``frame``'s rows (columns named as ``model``'s; NaN and None as NULL) through the
    driver's executemany of one parameterised INSERT, as ingest does: the Core insert of dicts
    spent 1.2 s per 93,000 result rows of a 2,000-advertiser run, mostly in per-row parameter
    processing (0.5 s this way; same rows read back)."""
    if frame.empty:
        return
    columns = [str(c) for c in frame.columns]
    known = {c.name for c in model.__table__.columns}
    if unknown := sorted(set(columns) - known):  # identifiers are the model's, never input
        raise ValueError(f"{model.__tablename__} has no column(s) {', '.join(unknown)}")
    marker = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    sql = (
        f"INSERT INTO {model.__tablename__} ({', '.join(columns)}) "  # noqa: S608
        f"VALUES ({', '.join([marker] * len(columns))})"
    )
    clean = frame.astype(object).where(frame.notna(), None)
    rows = list(clean.itertuples(index=False, name=None))
    for start in range(0, len(rows), INSERT_CHUNK):
        conn.exec_driver_sql(sql, rows[start : start + INSERT_CHUNK])


# --- results reads -------------------------------------------------------------------------


def _frame(
    engine: Engine | Connection, model, run_id: int, sources: Sequence[str] | None = None
) -> pd.DataFrame:
    """A run's rows of ``model``'s table, sorted by its primary key in Python (the same order on
    every database: without it the rows came in the database's order, which differs between
    SQLite and PostgreSQL and changes after an update). Float columns are float64 even when
    every value is NULL (pandas would otherwise make an all-None column of dtype object, and
    arithmetic and nlargest on it fail: a run whose every forecast is empty). ``sources``:
    only these sources' rows (a table with a source column)."""
    cols = [c for c in model.__table__.columns if c.name != "run_id"]
    stmt = select(*cols).where(model.run_id == run_id)
    if sources is not None:
        stmt = stmt.where(model.source.in_(list(sources)))
    with reading_connection(engine) as conn:
        frame = query_frame(conn, stmt, [c.name for c in cols])
    floats = [c.name for c in cols if isinstance(c.type, Float)]
    frame = sorted_frame(frame, [c.name for c in cols if c.primary_key])
    return frame.astype(dict.fromkeys(floats, np.float64))


def read_base_clusterings(
    engine: Engine | Connection, run_id: int
) -> tuple[np.ndarray, np.ndarray, pd.DataFrame]:
    """(advertiser_ids (n,), labels (n, m), columns frame) of a run's base clusterings."""
    columns = _frame(engine, BaseClusteringColumn, run_id).sort_values("column_index")
    labels = _frame(engine, BaseClusteringLabel, run_id)
    if columns.empty:
        raise RunNotFoundError(f"run {run_id} has no base clusterings (run `adseg views`).")
    wide = labels.pivot(index="advertiser_id", columns="column_index", values="label")
    wide = wide.sort_index()[columns["column_index"].to_numpy()]
    return (
        wide.index.to_numpy(dtype=object),
        wide.to_numpy(dtype=np.int64),
        columns.reset_index(drop=True),
    )


def read_segments(
    engine: Engine | Connection, run_id: int, sources: Sequence[str] | None = None
) -> dict[str, pd.Series]:
    """source → Series(advertiser_id → segment), of every source or of ``sources``."""
    frame = _frame(engine, Segment, run_id, sources)
    return {
        src: g.set_index("advertiser_id")["segment"].sort_index()
        for src, g in frame.groupby("source", sort=False)
    }


def read_forecast_results(engine: Engine | Connection, run_id: int) -> dict[str, pd.DataFrame]:
    return {
        "segment_cdfs": _frame(engine, SegmentCdf, run_id).rename(columns={"bid_ecpm": "bid"}),
        "forecasts": _frame(engine, Forecast, run_id),
        "mape": _frame(engine, Metric, run_id),
    }


# --- helpers -------------------------------------------------------------------------------


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _as_utc(moment: dt.datetime) -> dt.datetime:
    """A stored timestamp as aware UTC: SQLite gives back naive UTC, PostgreSQL an aware time in
    the session's time zone (a database set to Asia/Kolkata printed 09:21 "UTC" for 03:51)."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC)


def _float_or_none(x) -> float | None:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if np.isfinite(f) else None


def _jsonable(value):
    """JSON-safe copy: numpy scalars → Python, dates → ISO text, NaN/inf → None."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    return value
