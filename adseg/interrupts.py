"""Stopping a run cleanly: termination signals as exceptions, and the line a stopped run gets.

A scheduler stops a job with SIGTERM (systemd, ``kill``) or SIGHUP (a closed terminal); by default
Python then dies at once, leaving its run "running", the nightly lock held and fuser workers
orphaned. The CLI turns these signals into :class:`Terminated` in the main thread, so the same
clean-up as for Ctrl-C (KeyboardInterrupt) runs: the pipeline marks the run failed, deletes its
partial results, releases the lock and terminates its workers.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager

TERMINATING = (signal.SIGTERM, signal.SIGHUP)


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
    first = next((line for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {first}"


def _raise_terminated(signum: int, frame) -> None:
    raise Terminated(signum)


@contextmanager
def signals_as_exceptions():
    """While inside: SIGTERM and SIGHUP raise :class:`Terminated` in the main thread; the previous
    handlers are restored on the way out (so that a test process keeps its own)."""
    previous = {signum: signal.signal(signum, _raise_terminated) for signum in TERMINATING}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def exit_code(exc: BaseException) -> int:
    """128 + the signal number, as a shell reports a process a signal ended."""
    signum = exc.signum if isinstance(exc, Terminated) else signal.SIGINT
    return 128 + int(signum)
