"""Exit codes, and which exception ends a command with which one: the policy of the whole
command line in one place (`handle_errors`, `_database_failure` and its SQLSTATE tables, `_fail`).
"""

from __future__ import annotations

import errno
import functools
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import typer

from adseg.cli.console import err, out
from adseg.interrupts import (
    Terminated,
    check_pending,
    error_text,
    exit_code,
)

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
EXIT_TEMPFAIL = 75  # EX_TEMPFAIL: the lock is held, a server (database, dask scheduler) cannot be
# reached; retry
EXIT_INTERRUPTED = 130  # 128 + SIGINT: Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as the shell reports `yes | head -1`'s yes
# a file that could not be written for the machine's sake, not the user's: EXIT_FAILED
_MACHINE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO})


def _reader_gone() -> None:
    """The reader of stdout went away (`adseg … | head`): stop quietly with the status of a Unix
    tool that SIGPIPE ended (rich would exit 1, which here means "the run failed"). stdout goes to
    /dev/null so that the final flush at exit does not fail again (Python's documented recipe)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    raise SystemExit(EXIT_BROKEN_PIPE)


out.on_broken_pipe = _reader_gone


class CliError(Exception):
    """A failure to report as one line and an exit code (no traceback)."""

    def __init__(self, message: str, code: int = EXIT_BAD_INPUT, details: list[str] | None = None):
        super().__init__(message)
        self.code = code
        self.details = details or []


_stop_reported = False
"""Whether a command has printed the line of the stop that ended it (see entry_point)."""


STOPPED_RUN = (
    "stopped (a run in progress is marked failed, its partial results deleted; nothing "
    "half-written is kept)"
)
"""What a stop leaves of a command that creates a run (``nightly``, ``views``)."""
STOPPED_STORED_RUN = (
    "stopped (the run stays completed with the results of its last commit; nothing "
    "half-written is kept)"
)
"""What a stop leaves of a command that adds to a completed run (``segment``, ``forecast``)."""
STOPPED_WRITE = "stopped (rolled back: nothing was written)"
"""What a stop before its commit leaves of a command that writes one transaction (``ingest``,
``db prune``)."""
STOPPED = "stopped (nothing half-written is kept)"
"""What a stop leaves of any other command (files are written whole or not at all)."""


def handle_errors(fn: Callable | None = None, *, stopped: str = STOPPED) -> Callable:
    """Turn known exceptions into a one-line reason on stderr and a non-zero exit code;
    ``stopped``: what the line of a stop (Ctrl-C, SIGTERM, SIGHUP) says the command left.
    ``@handle_errors`` or ``@handle_errors(stopped=...)``."""
    if fn is None:
        return functools.partial(handle_errors, stopped=stopped)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            # imported inside: a stop during these (slow, first) imports is a stop like any
            # other, not a traceback; the stop clause comes first, before these names are needed
            from adseg.app.execution import SchedulerUnreachable
            from adseg.app.runs import RunFailed
            from adseg.ingest import IngestError
            from adseg.store.errors import DatabaseError

            check_pending()  # a stop whose exception was lost in the imports: before any work
            out = fn(*args, **kwargs)
        except (KeyboardInterrupt, Terminated) as exc:
            if (run_id := getattr(exc, "completed_run_id", None)) is not None:
                _stopped_after_completion(exc, run_id)  # `views`: the run it completed stays
            _fail_stopped(exc, stopped)
        except BrokenPipeError:
            _reader_gone()
        except CliError as exc:
            _fail(str(exc), exc.code, exc.details)
        except RunFailed as exc:
            _fail(*_run_failure(exc))
        except IngestError as exc:
            n = len(exc.problems)
            if n == 1:  # one line, naming the file, as every other error is
                _fail(f"ingest rejected: {exc.problems[0]}; nothing was written", EXIT_BAD_INPUT)
            _fail(
                f"ingest rejected ({n} problems); nothing was written",
                EXIT_BAD_INPUT,
                [str(p) for p in exc.problems],
            )
        except DatabaseError as exc:
            _fail(*_database_failure(exc))
        except SchedulerUnreachable as exc:
            _fail(str(exc), EXIT_TEMPFAIL)
        except ValueError as exc:
            _fail(str(exc), EXIT_BAD_INPUT)
        except OSError as exc:  # a file we were asked to read or write: say which, and why
            if exc.errno is None or exc.strerror is None:  # ours, with its own message
                _fail(str(exc), EXIT_BAD_INPUT)
            where = f"{exc.filename}: " if exc.filename else ""
            # a full disk, a quota or a failing device is the machine, not the input: 1, as
            # SQLite's "database or disk is full" is (a path or permission the user gave: 2)
            code = EXIT_FAILED if exc.errno in _MACHINE_ERRNOS else EXIT_BAD_INPUT
            _fail(f"{where}{exc.strerror}", code)
        try:
            check_pending()  # a stop whose exception was lost still exits as stopped
        except (KeyboardInterrupt, Terminated) as exc:
            # the command has done all its work: "nothing half-written is kept" would be untrue
            _fail_stopped(exc, "stopped after the command had finished (what it wrote is kept)")
        return out

    return wrapper


def _run_failure(exc) -> tuple[str, int]:
    """The line and exit code of an app.runs.RunFailed: "run N failed: <why>" (the run's row says
    so too) and 1, or 75 when its cause is a database server that went away (retry later); a
    run that completed before the error says that it is kept."""
    from adseg.app.execution import SchedulerUnreachable
    from adseg.store.errors import DatabaseError

    cause = exc.__cause__
    if exc.completed:
        return f"run {exc.run_id} completed and is kept, but then: {error_text(cause)}", EXIT_FAILED
    if isinstance(cause, DatabaseError):
        message, code = _database_failure(cause)
        return f"run {exc.run_id} failed: {message}", code if code == EXIT_TEMPFAIL else EXIT_FAILED
    if isinstance(cause, SchedulerUnreachable):
        return f"run {exc.run_id} failed: {cause}", EXIT_TEMPFAIL
    if isinstance(cause, ValueError):  # the checks' own words, as before a run
        return f"run {exc.run_id} failed: {cause}", EXIT_FAILED
    return str(exc), EXIT_FAILED


def _fail_stopped(exc: BaseException, what: str) -> None:
    """End a command that ``exc`` (a stop) ended, with its one line, ``what`` it left behind,
    and 128 + the signal's number."""
    global _stop_reported
    _stop_reported = True  # the entry point adds no line of its own
    _fail(f"{error_text(exc)}: {what}", exit_code(exc))


_DATABASE_HINTS = {  # SQLite's messages for a database file the user must fix (exit 2)
    "file is not a database": " (the --database-url file is not an SQLite database)",
    "attempt to write a readonly database": (
        " (this user may not write the database file, its folder, or the -wal / -shm files "
        "beside it: a -shm left by a reader of a read-only file stays read-only)"
    ),
    "unable to open database file": " (check the --database-url path and its permissions)",
}


_UNREACHABLE = (  # psycopg's messages when no database session could be opened
    "connection failed:",
    "connection to server",  # a Unix socket that is not there: no server running
    "failed to resolve host",
    "connection timeout expired",
    "could not connect",
    "server closed the connection",
)


_BAD_OPTION = re.compile(  # libpq's messages for an option it cannot use (configuration: 2)
    # "invalid <option> value": sslmode, target_session_attrs, gssencmode, channel_binding, ...
    r"invalid connection option|invalid \w+ value|bad value for|invalid port number"
)
_SECURITY_MISMATCH = (  # the server was reached, but not as the URL's options demand: no retry
    "does not support SSL",  # sslmode=require / verify-* against a server without SSL
    "channel binding",  # channel_binding=require without SSL, or a server that cannot
    "certificate",  # a root certificate missing, or one that does not verify the server
    "GSSAPI encryption",  # gssencmode=require
)


_REFUSED = " (check the user, password and database of the URL)"
_BY_SQLSTATE = (  # (SQLSTATE prefixes, hint, exit code), the first match wins
    (
        ("53300",),  # too_many_connections
        " (the server has no connection free for this user or database; retry later)",
        EXIT_TEMPFAIL,
    ),
    (
        ("57P01", "57P02", "57P03"),  # admin_shutdown, crash_shutdown, cannot_connect_now
        " (the server is starting up or shutting down, or ended the session; retry later)",
        EXIT_TEMPFAIL,
    ),
    (("08",), " (the connection to the server failed; retry later)", EXIT_TEMPFAIL),
    (("28", "3D000"), _REFUSED, EXIT_BAD_INPUT),  # login refused, no such database
    (
        ("42501",),  # insufficient_privilege
        " (the URL's user lacks a privilege it needs, e.g. CREATE on schema public for "
        "`db upgrade`: grant it, or use the URL of a user that has it)",
        EXIT_BAD_INPUT,
    ),
)
_FATAL_SQLSTATES = (  # a refused login's message (the server's, in English) -> its SQLSTATE
    ("too many connections for", "53300"),
    ("sorry, too many clients already", "53300"),
    ("remaining connection slots are reserved", "53300"),
    ("the database system is starting up", "57P03"),
    ("the database system is shutting down", "57P03"),
    ("the database system is in recovery mode", "57P03"),
    ("the database system is not yet accepting connections", "57P03"),
    ("terminating connection due to administrator command", "57P01"),
    ("password authentication failed", "28P01"),
    ("no pg_hba.conf entry", "28000"),
    ("permission denied for database", "42501"),
)


def _database_failure(exc) -> tuple[str, int]:
    """(message, exit code) for a database error. A server that cannot be reached, or turns us
    away for now (too many connections, starting up or shutting down, a lost connection), is
    temporary (75: retry later); one that refuses us (wrong password, no such database or role,
    a missing privilege) or an SQLite file that is not usable is configuration (2); anything
    else is a failure (1). PostgreSQL's errors are told apart by SQLSTATE; a refused login has
    none in psycopg (libpq gives only the text), so its SQLSTATE is read off the message."""
    orig = exc.orig
    reason = str(orig).strip().splitlines()[0] if orig else type(exc).__name__
    message = f"database error: {reason}"
    if hint := _DATABASE_HINTS.get(reason):
        return message + hint, EXIT_BAD_INPUT
    reason = reason.removeprefix("connection is bad: ")  # psycopg 3.3 wraps libpq's reason
    if _BAD_OPTION.match(reason):
        return message + " (check the query options of the database URL)", EXIT_BAD_INPUT
    if reason in ("database is locked", "database table is locked"):  # SQLite, after 30 s
        return (
            message + " (another process holds the SQLite database's write lock, e.g. an ingest "
            "or a nightly; retry when it has finished)",
            EXIT_TEMPFAIL,
        )
    if getattr(exc, "connection_invalidated", False):  # lost mid-session, often no SQLSTATE
        return message + " (the connection to the server was lost; retry later)", EXIT_TEMPFAIL
    state = getattr(orig, "sqlstate", None) or getattr(
        getattr(orig, "diag", None), "sqlstate", None
    )
    if not state and orig is not None and "FATAL:" in str(orig):
        state = next((code for words, code in _FATAL_SQLSTATES if words in str(orig)), None)
    for prefixes, hint, code in _BY_SQLSTATE if isinstance(state, str) else ():
        if state.startswith(prefixes):
            return message + hint, code
    if reason.startswith(_UNREACHABLE):
        if "FATAL:" in reason:  # the server answered and refused the session
            return message + _REFUSED, EXIT_BAD_INPUT
        if any(words in reason for words in _SECURITY_MISMATCH):  # retrying would loop
            return (
                message + " (the server cannot meet the URL's sslmode / channel_binding / "
                "certificate options: check the query options of the database URL)",
                EXIT_BAD_INPUT,
            )
        return message + " (is the server running and reachable? retry later)", EXIT_TEMPFAIL
    return message, EXIT_FAILED


def _fail(message: str, code: int, details: list[str] | None = None) -> None:
    err.print(f"error: {message}", markup=False)
    for line in details or []:
        err.print(f"  {line}", markup=False)
    raise typer.Exit(code)


def _stopped_after_completion(
    exc: BaseException,
    run_id: int,
    reports: dict[str, Path | None] | None = None,
    written: list[str] | None = None,
) -> None:
    """End a command that a stop ended after its run was completed: the run is complete and stays
    so, and the line says that (not handle_errors' "marked failed"), and which ``reports`` asked
    for are not among those ``written``."""
    reports, written = reports or {}, written or []
    missing = [f.upper() for f, p in reports.items() if p is not None and f not in written]
    kept = f"stopped after run {run_id} completed (its results are kept"
    if missing:
        kept += (
            f"; the {' and '.join(missing)} report was not written: "
            f"`adseg report --run {run_id}` writes it"
        )
    _fail_stopped(exc, f"{kept})")
