"""Stopping a run cleanly: termination signals as exceptions, and the line a stopped run gets.

A scheduler stops a job with SIGTERM (systemd, ``kill``) or SIGHUP (a closed terminal); by default
Python then dies at once, leaving its run "running", the nightly lock held and fuser workers
orphaned. The CLI turns these signals into :class:`Terminated` in the main thread, so the same
clean-up as for Ctrl-C (KeyboardInterrupt) runs: the pipeline marks the run failed, deletes its
partial results, releases the lock and terminates its workers.

A stop signal the process was started ignoring stays ignored, as Python itself leaves an ignored
SIGINT alone: ``nohup adseg nightly`` must outlive the terminal it was started from (SIGHUP), and a
job a script started in the background (``&``, SIGINT ignored) must not be stopped by a Ctrl-C
meant for the foreground.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

TERMINATING = (signal.SIGTERM, signal.SIGHUP)
STOP_SIGNALS = (signal.SIGINT, *TERMINATING)


class Terminated(BaseException):
    """A termination signal (SIGTERM from a scheduler, systemd, ``kill``), raised in the main
    thread by the CLI's handler so that an interrupted run is cleaned up as on Ctrl-C: marked
    failed, its partial results deleted, the lock released, the fuser workers stopped. A
    BaseException, like KeyboardInterrupt, so that no ``except Exception`` swallows it."""

    def __init__(self, signum: int):
        self.signum = int(signum)
        super().__init__(f"terminated by {signal.Signals(signum).name}")


def error_text(exc: BaseException) -> str:
    """The one line a failed run's row (and the user) gets for ``exc``."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted by SIGINT (Ctrl-C)"
    if isinstance(exc, Terminated):
        return str(exc)
    # the first line: a database error's message goes on with the SQL and its parameters
    return f"{type(exc).__name__}: {first_line(str(exc))}"


def first_line(text: str) -> str:
    """The first line of ``text`` that is not blank ('' when none)."""
    return next((line for line in text.splitlines() if line.strip()), "")


_pending: int | None = None
"""The stop signal last received by :func:`raise_for_signal` (None: none since the last
signals_as_exceptions() block ended)."""


def handled_stops() -> tuple[int, ...]:
    """SIGINT, SIGTERM and SIGHUP, less those ignored now (SIG_IGN: ``nohup`` ignores SIGHUP, a
    shell ignores SIGINT in a background job), which every stop handler here leaves ignored."""
    return tuple(s for s in STOP_SIGNALS if signal.getsignal(s) is not signal.SIG_IGN)


_completed_run: int | None = None
"""The run this command has committed as completed, once it has (:func:`note_completed_run`)."""


def note_completed_run(run_id: int | None) -> None:
    """Note that the run ``run_id`` is committed as completed (None: no run is, yet): a stop
    raised from now on carries its id as ``completed_run_id``, wherever it lands (releasing the
    lock, returning to the command line), so that the line the command ends with says that the
    run and its results are kept, not that a run in progress is marked failed. Forgotten when
    a signals_as_exceptions() block begins or ends."""
    global _completed_run
    _completed_run = run_id


def _exception_for(signum: int) -> BaseException:
    exc = KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)
    if _completed_run is not None:
        exc.completed_run_id = _completed_run
    return exc


def raise_for_signal(signum: int, frame) -> None:
    """The stop handler: remember the signal (:func:`check_pending`) and raise its exception."""
    global _pending
    _pending = signum
    raise _exception_for(signum)


def check_pending() -> None:
    """Raise the exception of a signal received earlier, if any: a handler's exception is lost
    when the signal lands inside code whose exceptions Python only prints ("Exception ignored
    in …": an at-fork hook as multiprocessing starts its workers, a __del__, a weakref callback),
    and the run would then carry on as if never stopped. Called between stages and while
    waiting for the fuser workers; once a stop is under way nothing calls it, so it raises at
    most once where it matters."""
    if _pending is not None:
        raise _exception_for(_pending)


@contextmanager
def signals_as_exceptions():
    """While inside: SIGTERM and SIGHUP raise :class:`Terminated` and SIGINT KeyboardInterrupt
    in the main thread, and each is remembered for :func:`check_pending`; the previous handlers
    are restored on the way out (so that a test process keeps its own), and what was remembered
    is forgotten then. An ignored signal stays ignored (:func:`handled_stops`).

    A stop remembered before the block is kept: the entry point installs the same handler
    before the slow imports, and a stop whose exception was lost there (an import compiling its
    module) must still stop the command, not be forgotten as the command begins."""
    global _pending
    note_completed_run(None)
    previous = {signum: signal.signal(signum, raise_for_signal) for signum in handled_stops()}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _pending = None
        note_completed_run(None)


@contextmanager
def signals_deferred():
    """While inside, SIGINT, SIGTERM and SIGHUP wait and are delivered on the way out: for a
    few steps that must not be cut in two, such as renaming a set of finished files into place.
    Keep the inside short.

    Blocking them in this thread is not enough: ``kill`` signals the process, and the kernel
    then hands the signal to any thread that does not block it (OpenBLAS's and Arrow's workers
    block nothing), whose C handler makes Python run the handler in the main thread at once —
    inside. So in the main thread, where Python runs its handlers, the handlers are also
    replaced by one that only notes the signal, which is raised again on the way out. In
    another thread the handlers cannot be replaced, nor do they run there: only the mask."""
    noted: list[int] = []
    previous_handlers = {}
    if threading.current_thread() is threading.main_thread():
        try:
            for signum in handled_stops():  # an ignored one stays ignored
                # None: a handler not installed from Python, which could not be put back
                if signal.getsignal(signum) is not None:
                    previous_handlers[signum] = signal.signal(signum, lambda s, _: noted.append(s))
        except BaseException:  # a stop that arrived just before: those swapped go back first
            _restore_handlers(previous_handlers)
            raise
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        stop = _restore_handlers(previous_handlers)
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)  # those blocked here arrive
        if stop is not None:
            raise stop
        for signum in dict.fromkeys(noted):
            signal.raise_signal(signum)  # to this thread: its own handler raises, or it ends


def _restore_handlers(previous: dict) -> BaseException | None:
    """Put ``previous`` handlers back, every one of them, and return the first exception one of
    them raised meanwhile. ``signal.signal`` first runs the handlers of signals that arrived (in
    any thread; another thread may run its C handler late), and a handler already put back
    raises there: that stopped the loop, and left the others, and the mask, as they were inside
    the block — SIGTERM blocked in the main thread for good (a test run saw it)."""
    stop = None
    for signum, handler in previous.items():
        while True:  # the call that ran a raising handler did not swap this one yet
            try:
                signal.signal(signum, handler)
                break
            except BaseException as exc:
                stop = stop or exc
    return stop


def exit_code(exc: BaseException) -> int:
    """128 + the signal number, as a shell reports a process a signal ended."""
    signum = exc.signum if isinstance(exc, Terminated) else signal.SIGINT
    return 128 + int(signum)
