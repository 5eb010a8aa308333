"""Fuser fits for a run: each fuser on the base clusterings, in this process or one worker
process per fuser (``n_jobs``), with its warnings kept as notes and stop signals honoured.
Memory: each worker holds its own fuser's arrays."""

from __future__ import annotations

import logging
import signal
import sys
import time
import warnings
from collections.abc import Callable
from contextlib import closing
from typing import NamedTuple

import numpy as np
from threadpoolctl import threadpool_limits

from adseg.consensus import FUSERS
from adseg.interrupts import (
    STOP_SIGNALS,
    TERMINATING,
    check_pending,
    first_line,
    handled_stops,
    signals_deferred,
)

log = logging.getLogger("adseg.pipeline")

SLOW_FIRST = ("lta", "rcc", "trce", "sccbg", "rcec", "l2")
"""Fusers by measured cost on the default marketplace, slowest first (scheduling order only)."""

Progress = Callable[[str], None]


def _fit_one(
    name: str, labels: np.ndarray, n_segments: int, seed: int, options: dict, weights=None
):
    """One fuser's labels, wall seconds and notes (runs in a worker process when n_jobs > 1);
    ``options`` are its constructor arguments beside n_clusters and random_state.

    The notes are the fit's warnings, each once (a solver at its iteration limit, k-means
    finding fewer distinct clusters), a line when the fuser solved a reduced problem at this
    size (``_reduction_notes``), and a line when the labels hold fewer segments than asked:
    the caller logs them and records them in the run's row, where a worker's warnings
    would otherwise be lost."""
    cls = FUSERS[name]
    if weights is not None and "weights" in cls().get_params():
        options = {**options, "weights": weights}  # fusers without per-clustering weights: none
    t0 = time.perf_counter()
    with threadpool_limits(limits=1), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fuser = cls(n_clusters=n_segments, random_state=seed, **options).fit(labels)
    result = fuser.labels_
    seconds = round(time.perf_counter() - t0, 3)
    notes = [first_line(str(w.message)).strip() for w in caught] + _reduction_notes(fuser)
    found = np.unique(result[result >= 0]).size
    if found < n_segments:
        # k-means's own words for the same fact: "Number of distinct clusters (51) found
        # smaller than n_clusters (55)"; one line for it is enough
        notes = [note for note in notes if not note.startswith("Number of distinct clusters")]
        notes.append(f"{found} segments, fewer than the {n_segments} asked")
    return result, seconds, list(dict.fromkeys(notes))


def _reduction_notes(fuser) -> list[str]:
    """A line for the run's record when the fit solved a reduced problem at this size (rcc on
    micro-clusters above ``max_cells`` distinct label rows, l2 from the sparse factor above
    ``max_dense`` items), naming the threshold; none otherwise."""
    if getattr(fuser, "reduced_", False):
        return [
            f"reduced: solved on {fuser.n_micro_clusters_:,} micro-clusters of the "
            f"{fuser.n_cells_:,} distinct label rows (max_cells={fuser.max_cells:,})"
        ]
    if getattr(fuser, "sparse_", False):
        return [
            f"reduced: eigenvectors from the sparse co-association factor "
            f"({fuser.n_items_:,} items > max_dense={fuser.max_dense:,})"
        ]
    return []


class Fusion(NamedTuple):
    """What :func:`fuse` returns, by fuser name: the segmentations of those that succeeded (in
    the order asked), their wall seconds, the errors of the alternatives that failed, and the
    notes of those that succeeded with warnings (see ``_fit_one``)."""

    segmentations: dict[str, np.ndarray]
    seconds: dict[str, float]
    errors: dict[str, str]
    notes: dict[str, list[str]]


def fuse(
    labels: np.ndarray,
    names: list[str],
    n_segments: int,
    seed: int,
    primary: str,
    progress: Progress | None = None,
    n_jobs: int = 1,
    options: dict | None = None,
    weights: np.ndarray | None = None,
) -> Fusion:
    """Stage 3: every fuser on the base clusterings (a :class:`Fusion`); a failing alternative
    fuser is recorded and skipped, a failing primary fuser raises, a fuser's notes are logged.

    ``options`` ({fuser: {parameter: value}}, checked by :func:`check_fuser_options`) are
    passed to the fusers' constructors; ``weights`` (one per base clustering) to those that
    take per-clustering weights. ``n_jobs`` > 1 runs the fusers in that many worker
    processes (each with one BLAS thread): they are independent, and the slowest (lta, rcc)
    dominate, so two cores nearly halve the stage. Memory: each worker holds its own fuser's
    n×n arrays."""
    segmentations, seconds, errors, notes = {}, {}, {}, {}
    options = options or {}

    def record(name, outcome):
        try:
            segmentations[name], seconds[name], found = outcome()
        except Exception as exc:
            if name == primary:
                if type(exc) is ValueError:
                    # the fuser's own words name none of the run ("n_clusters must be smaller
                    # than n_items=4 for TRCE"): say which fuser, and its terms here
                    raise ValueError(
                        f"primary fuser {name} ({n_segments} segments asked of "
                        f"{labels.shape[0]} advertisers): {exc}"
                    ) from exc
                raise
            errors[name] = f"{type(exc).__name__}: {exc}"
            log.warning("fuser %s failed and is skipped: %s", name, errors[name])
            return
        log.info("fuser %s: %.1f s", name, seconds[name])  # a job log heard nothing per fuser
        if found:
            notes[name] = found
            for note in found:
                log.warning("fuser %s: %s", name, note)

    if n_jobs <= 1 or len(names) <= 1:
        for name in names:
            if progress:
                progress(f"fusing with {name}")
            record(
                name,
                lambda name=name: _fit_one(
                    name, labels, n_segments, seed, options.get(name, {}), weights
                ),
            )
        return Fusion(segmentations, seconds, errors, notes)
    if progress:
        progress(f"fusing with {', '.join(names)} ({n_jobs} processes)")
    # slowest first, so the two workers finish close together (costs measured at n = 1,268)
    slow_first = sorted(names, key=lambda n: SLOW_FIRST.index(n) if n in SLOW_FIRST else 0)
    # closing(): a failing primary fuser raised by record() stops the other workers at once
    fits = _fit_in_processes(slow_first, labels, n_segments, seed, n_jobs, options, weights)
    with closing(fits) as finished:
        for name, outcome in finished:
            record(name, outcome)
    in_order = {n: segmentations[n] for n in names if n in segmentations}
    return Fusion(in_order, seconds, errors, {n: notes[n] for n in names if n in notes})


def _fit_in_processes(
    names,
    labels,
    n_segments: int,
    seed: int,
    n_jobs: int,
    options: dict,
    weights=None,
    poll: float = 0.5,
):
    """Fit the fusers ``names`` (with their ``options``) in at most ``n_jobs`` worker processes
    at a time; yields (name, outcome) as each finishes, outcome() returning (labels, seconds) or
    raising the worker's exception.

    One process and one pipe per fuser, not a multiprocessing.Pool: a Pool's idle workers wait
    for tasks holding a lock they share, and a stop signal sent to the whole process group (a
    terminal's hang-up, systemd's control-group kill, ``kill -- -PGID``) kills such a worker
    while it holds it; the Pool's terminate() then waits for that lock for ever, and the run
    hung holding the nightly lock. Here nothing is shared: whatever ends the loop (Ctrl-C,
    SIGTERM, a failing primary fuser raised by the caller) kills and reaps the workers still
    running. Each worker is forked with stop signals deferred: raised in an at-fork hook, a
    stop's exception was swallowed there with an 'Exception ignored' traceback on stderr.
    Results are awaited in short polls so that a stop signal whose exception was lost
    nonetheless still stops the stage (interrupts.check_pending)."""
    import multiprocessing
    from multiprocessing.connection import wait

    waiting, running = list(names), {}
    try:
        while waiting or running:
            while waiting and len(running) < n_jobs:
                name = waiting.pop(0)
                receive, send = multiprocessing.Pipe(duplex=False)
                args = (send, name, labels, n_segments, seed, options.get(name, {}), weights)
                worker = multiprocessing.Process(target=_fuser_worker, args=args, daemon=True)
                # deferred: a stop raised in an at-fork hook printed a traceback. The worker is
                # counted as running inside: a stop delivered as the block ends left it out of
                # those killed below, computing on (until this process exited)
                with signals_deferred():
                    worker.start()
                    running[receive] = (name, worker)
                send.close()  # the worker's end: EOF here once the worker is gone
            check_pending()
            for receive in wait(list(running), timeout=poll):
                name, worker = running.pop(receive)
                yield name, _worker_outcome(name, receive, worker)
    finally:
        for receive, (_, worker) in running.items():
            worker.kill()
            worker.join()
            receive.close()


def _worker_outcome(name: str, receive, worker) -> Callable:
    """The outcome of a finished worker (see ``_fit_in_processes``); closes its pipe."""
    try:
        status, payload = receive.recv()
    except EOFError:  # it died without a word (killed, out of memory)
        status, payload = "died", None
    finally:
        receive.close()
    worker.join()
    if status == "died":
        status = "error"
        payload = RuntimeError(f"the {name} worker process died (exit code {worker.exitcode})")
    if status == "error":

        def outcome():
            raise payload

        return outcome
    return lambda: payload


def _fuser_worker(
    send, name: str, labels: np.ndarray, n_segments: int, seed: int, options: dict, weights=None
) -> None:
    """A worker process's body: one fuser's (labels, seconds), or its exception, sent back."""
    _worker_init()
    try:
        message = ("ok", _fit_one(name, labels, n_segments, seed, options, weights))
    except Exception as exc:
        message = ("error", exc)
    try:
        send.send(message)
    except Exception as exc:  # an exception that does not pickle
        send.send(("error", RuntimeError(f"{type(message[1]).__name__}: {message[1]}; {exc}")))
    finally:
        send.close()


def _worker_init() -> None:
    """In each fuser worker: Ctrl-C (SIGINT to the whole process group) is the parent's to
    handle — it marks the run failed and kills the workers — so a worker ignores it rather
    than print its own traceback; SIGTERM and SIGHUP get their default actions back (the parent's
    handlers are inherited by fork) unless the parent ignores them (``nohup``: a hang-up that
    spares the run must spare its workers); and on Linux the worker is killed if the parent
    dies (kill -9), so no orphan keeps computing."""
    for signum in set(handled_stops()) & set(TERMINATING):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # forked inside signals_deferred(): the parent's blocked mask is inherited
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    if sys.platform == "linux":
        import ctypes

        try:
            # SIGKILL, not SIGTERM: a worker of a process started with SIGTERM ignored keeps it
            # ignored (above), and an orphan would compute on
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
