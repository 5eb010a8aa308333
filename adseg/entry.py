"""The ``adseg`` console command's first lines (and ``python -m adseg``'s).

Importing the command line takes about half a second (SQLAlchemy, Typer, rich). A stop in that
time met Python's default handlers: SIGTERM or SIGHUP ended the process without its ``error:``
line, and Ctrl-C printed a KeyboardInterrupt traceback. Here the stop signals become exceptions
before anything slow is imported. And once the command has finished, stops are ignored while
the interpreter shuts down: a SIGTERM in that last fraction of a second made a completed run's
process die by the signal, its exit status saying "stopped".
"""

from __future__ import annotations

import signal
import sys

from adseg.interrupts import (
    STOP_SIGNALS,
    Terminated,
    error_text,
    exit_code,
    handled_stops,
    raise_for_signal,
)


def main() -> None:
    """Run the ``adseg`` command line with stop signals as exceptions from its first instant;
    exits with the command's status (128 + the signal's number when a stop ended it). A stop
    signal the process was started ignoring (``nohup``: SIGHUP) stays ignored throughout."""
    for signum in handled_stops():
        signal.signal(signum, raise_for_signal)
    try:
        from adseg.cli import entry_point

        entry_point()
    except (KeyboardInterrupt, Terminated) as exc:  # before or after the command's own handling
        _ignore_stops()
        sys.stderr.write(f"error: {error_text(exc)}: stopped\n")
        sys.exit(exit_code(exc))
    except SystemExit:
        _ignore_stops()
        raise


def _ignore_stops() -> None:
    """The command is over: a stop now must not turn its outcome into 'stopped'. (Ignored, not
    deferred: the process ends within a fraction of a second.)"""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
