"""The ``adseg`` command line (Typer): argument parsing and printing only.

Every command that uses the database takes ``--database-url`` (or $ADSEG_DATABASE_URL), every
command ``--quiet`` where it prints results; bad input exits
non-zero with a one-line reason on standard error, and writes nothing.
"""

from __future__ import annotations

import datetime as dt
import errno
import functools
import math
import os
import re
import shlex
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from adseg import __version__
from adseg.config import SQLITE_SIDE_FILES, database_url, mask_url, sqlite_file
from adseg.interrupts import (
    Terminated,
    check_pending,
    error_text,
    exit_code,
    signals_as_exceptions,
)

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
EXIT_TEMPFAIL = 75  # EX_TEMPFAIL: the lock is held, the database server cannot be reached; retry
EXIT_INTERRUPTED = 130  # 128 + SIGINT: Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as the shell reports `yes | head -1`'s yes
# a file that could not be written for the machine's sake, not the user's: EXIT_FAILED
_MACHINE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO})


def _conventional_help() -> None:
    """Typer's help (0.2x) prints a type beside every option: '<bool>' beside a flag, as if it
    took a value, and a run id's full range '[1<=x<=9223372036854775807]' (the databases' BIGINT,
    which nobody reaches). Here a flag shows no type and a bound at that limit is left out of the
    help; parsing and validation stay Typer's (the bound is still enforced). A Typer without
    these hooks keeps its own help."""
    import typer.core

    option = getattr(typer.core, "TyperOption", None)
    type_of = getattr(option, "display_type_rich", None)
    range_of = getattr(option, "_get_number_range_help_str", None)
    describe = getattr(typer.core, "describe_number_range", None)
    if type_of is not None:

        def display_type_rich(self, *args, **kwargs):
            if getattr(self, "is_bool_flag", False):
                return None
            return type_of(self, *args, **kwargs)

        option.display_type_rich = display_type_rich
    if range_of is not None and describe is not None:

        def number_range_help(self, *args, **kwargs):
            if getattr(self, "max", None) == RUN_ID["max"]:
                return describe(self.min, None)
            return range_of(self, *args, **kwargs)

        option._get_number_range_help_str = number_range_help


app = typer.Typer(
    help="adseg: segment advertisers by robust consensus clustering and forecast their delivery.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)
db_app = typer.Typer(help="Database schema: migrate and inspect.", no_args_is_help=True)
app.add_typer(db_app, name="db")

# tables stay readable when piped to a file or a job log (rich assumes 80 columns there)
out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 132)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def _reader_gone() -> None:
    """The reader of stdout went away (`adseg … | head`): stop quietly with the status of a Unix
    tool that SIGPIPE ended (rich would exit 1, which here means "the run failed"). stdout goes to
    /dev/null so that the final flush at exit does not fail again (Python's documented recipe)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    raise SystemExit(EXIT_BROKEN_PIPE)


out.on_broken_pipe = _reader_gone

DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        envvar="ADSEG_DATABASE_URL",
        help="SQLAlchemy URL (default: sqlite:///adseg.db in the working directory).",
        show_envvar=True,
    ),
]
Quiet = Annotated[
    bool,
    typer.Option("--quiet", "-q", help="Print errors and warnings only: no progress, no results."),
]
MinSamples = Annotated[
    int,
    typer.Option(help="Fewer samples than this: left out of a KS view (label -1).", min=1),
]
RUN_ID = {"min": 1, "max": 2**63 - 1}  # the databases' BIGINT range (larger cannot be bound)
_conventional_help()
# numpy and scikit-learn take seeds in [0, 2**32); checked here, before a run row is written
Seed = Annotated[int, typer.Option(help="Seed of every random step.", min=0, max=2**32 - 1)]
Supply = Annotated[
    str,
    typer.Option(
        help="Supply behind the forecasts: actual (the window's bid requests, as the paper), "
        "forecast (from the training window) or both."
    ),
]
SupplyModel = Annotated[
    str,
    typer.Option(
        help="Forecast supply by ses (simple exponential smoothing), mean (of the training "
        "days) or seasonal_naive (the same weekday's latest day); pick by backtest."
    ),
]
SupplyEngine = Annotated[
    str,
    typer.Option(
        help="Fit SES with numpy (all advertisers at once, the default) or statsmodels "
        "(SimpleExpSmoothing per advertiser, ~4 ms each; the same model)."
    ),
]
SpendPrice = Annotated[
    str,
    typer.Option(
        help="Expected paid eCPM from the cost samples (the paper's eCPM cost c.d.f.) or the "
        "market prices (E[price | price <= bid], not censored by each advertiser's own bid)."
    ),
]


RunSeed = Annotated[
    int | None,
    typer.Option(
        help="Seed of every random step (default: the run's own seed).", min=0, max=2**32 - 1
    ),
]


def _forecast_options(**options: str) -> dict[str, str]:
    """``options`` (names of :data:`adseg.forecast.FORECAST_CHOICES`) checked at the door, before
    a run is made: CliError naming the option (``--supply-model``) and its choices."""
    from adseg.forecast import FORECAST_CHOICES

    for name, value in options.items():
        choices = FORECAST_CHOICES[name]
        if value not in choices:
            raise CliError(
                f"--{name.replace('_', '-')} must be {', '.join(choices[:-1])} or "
                f"{choices[-1]}; got {value!r}"
            )
    return options


FuserOption = Annotated[
    list[str] | None,
    typer.Option(
        "--fuser-option",
        metavar="FUSER.PARAM=VALUE",
        help="A fuser's parameter (repeatable), e.g. rcc.normalize=true (rcc's normalised form "
        'alone: half its default\'s time). VALUE is JSON (true, 1e-5, "l1") or else text.',
    ),
]


def _fuser_options(texts: list[str] | None) -> dict[str, dict]:
    """``--fuser-option FUSER.PARAM=VALUE`` values as {fuser: {parameter: value}}, checked by
    :func:`adseg.consensus.check_fuser_options` before any work; CliError naming the option.
    VALUE is read as JSON where it parses (true/True, 3, 1e-5, [0.1, 1]), else kept as text."""
    from adseg.consensus import check_fuser_options

    options: dict[str, dict] = {}
    for text in texts or []:
        name, dot, rest = text.partition(".")
        param, equals, value = rest.partition("=")
        if not (dot and equals and name.strip() and param.strip()):
            raise CliError(
                f"--fuser-option must be FUSER.PARAM=VALUE, e.g. rcc.normalize=true; got {text!r}"
            )
        options.setdefault(name.strip(), {})[param.strip()] = _option_value(value)
    try:
        return check_fuser_options(options)
    except ValueError as exc:
        raise CliError(f"--fuser-option: {exc}") from None


_OPTION_WORDS = {"true": True, "false": False, "none": None}


def _option_value(text: str):
    """A ``--fuser-option`` VALUE: true/false/none in any case, else JSON, else the text."""
    import json

    word = text.strip().lower()
    if word in _OPTION_WORDS:
        return _OPTION_WORDS[word]
    try:
        return json.loads(text)
    except ValueError:
        return text


class CliError(Exception):
    """A failure to report as one line and an exit code (no traceback)."""

    def __init__(self, message: str, code: int = EXIT_BAD_INPUT, details: list[str] | None = None):
        super().__init__(message)
        self.code = code
        self.details = details or []


_stop_reported = False
"""Whether a command has printed the line of the stop that ended it (see entry_point)."""


def handle_errors(fn: Callable) -> Callable:
    """Turn known exceptions into a one-line reason on stderr and a non-zero exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            # imported inside: a stop during these (slow, first) imports is a stop like any
            # other, not a traceback; the stop clause comes first, before these names are needed
            from sqlalchemy.exc import DatabaseError

            from adseg.ingest import IngestError

            check_pending()  # a stop whose exception was lost in the imports: before any work
            out = fn(*args, **kwargs)
        except (KeyboardInterrupt, Terminated) as exc:
            if (run_id := getattr(exc, "completed_run_id", None)) is not None:
                _stopped_after_completion(exc, run_id)  # `views`: the run it completed stays
            _fail_stopped(
                exc,
                "stopped (a run in progress is marked failed, its partial results deleted; "
                "nothing half-written is kept)",
            )
        except BrokenPipeError:
            _reader_gone()
        except CliError as exc:
            _fail(str(exc), exc.code, exc.details)
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
            message, code = _database_failure(exc)
            if (run_id := getattr(exc, "failed_run_id", None)) is not None:
                # its row says so too; a server that went away mid-run is still "retry later"
                _fail(
                    f"run {run_id} failed: {message}",
                    code if code == EXIT_TEMPFAIL else EXIT_FAILED,
                )
            _fail(message, code)
        except ValueError as exc:
            if (run_id := getattr(exc, "failed_run_id", None)) is not None:
                _fail(f"run {run_id} failed: {exc}", EXIT_FAILED)  # its row says so too
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
        if any(words in reason for words in _SECURITY_MISMATCH):  # retrying would loop (QA)
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


def show_progress(quiet: bool) -> bool:
    """Progress bars only for a person at a terminal."""
    return not quiet and sys.stderr.isatty()


def _engine(url_flag: str | None, *, create: bool = False, writes: bool = True):
    """The engine for the URL. Only ``db upgrade`` may create a SQLite file: elsewhere a missing
    file is a mistyped URL, and connecting would leave an empty database behind. ``writes``:
    the command may write the database (see ``make_engine``: a SQLite file in a folder this
    user cannot write is refused for writing, read without locks for reading)."""
    from adseg.store.engine import make_engine

    url = database_url(url_flag)
    file = sqlite_file(url)
    if not create and file is not None and not file.exists():
        raise CliError(
            f"no SQLite database at {file}: `adseg db upgrade` creates it "
            "(or check --database-url / $ADSEG_DATABASE_URL)"
        )
    return make_engine(url, writes=writes)


def _require_schema(engine) -> None:
    from adseg.store import migrate

    current = migrate.check_known(engine)
    if current is None:
        raise CliError(
            "the database has no adseg schema yet (an empty database, or another "
            "application's): run `adseg db upgrade` first",
            EXIT_BAD_INPUT,
        )
    if current != migrate.head_revision():
        raise CliError(
            f"database schema is at {current}, not {migrate.head_revision()}: "
            "run `adseg db upgrade` first",
            EXIT_BAD_INPUT,
        )


def version_callback(value: bool) -> None:
    if value:
        out.print(f"adseg {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    version: Annotated[
        bool | None,
        typer.Option("--version", callback=version_callback, is_eager=True, help="Show version."),
    ] = None,
) -> None:
    """adseg: segment advertisers by robust consensus clustering and forecast their delivery."""
    import logging
    import warnings

    warnings.showwarning = _show_warning
    # psycopg logs "error ignored terminating <psycopg.Copy [BAD]>" when a COPY is cut off with
    # the connection: a second line beside the error the command itself reports (1 run in 8)
    logging.getLogger("psycopg").setLevel(logging.ERROR)
    ctx.with_resource(signals_as_exceptions())  # until the command returns


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings (a skipped view, a solver at its iteration limit) as one line for the user, not
    Python's file:line and source excerpt."""
    err.print(f"warning: {message}", markup=False)


# --- db ------------------------------------------------------------------------------------


@db_app.command("upgrade")
@handle_errors
def db_upgrade(
    revision: Annotated[str, typer.Argument(help="Target revision.", metavar="REVISION")] = "head",
    no_create: Annotated[
        bool,
        typer.Option(
            "--no-create",
            help="Refuse a SQLite file that does not exist instead of creating it (scheduled "
            "jobs: a mistyped URL must not start a new, empty database).",
        ),
    ] = False,
    database_url_: DatabaseUrl = None,
    quiet: Quiet = False,
) -> None:
    """Create or migrate the database schema (Alembic) to REVISION (default: the newest)."""
    from adseg.store import migrate

    url = database_url(database_url_)
    file = sqlite_file(url)
    if no_create and file is not None and not file.exists():
        raise CliError(
            f"no SQLite database at {file} (--no-create): check --database-url / "
            "$ADSEG_DATABASE_URL, or create it once with `adseg db upgrade`"
        )
    new_file = file is not None and _create_new_file(file)
    engine = None
    try:
        engine = _engine(url, create=True)
        before = migrate.upgrade(engine, revision)
        after = migrate.current_revision(engine)
    except BaseException:
        if new_file:  # a failed upgrade leaves no empty database behind
            if engine is not None:
                engine.dispose()
            for suffix in ("", *SQLITE_SIDE_FILES):
                file.with_name(file.name + suffix).unlink(missing_ok=True)
        raise
    if not quiet:
        out.print(f"database {mask_url(url)}: {before or 'empty'} -> {after}", markup=False)


def _create_new_file(file: Path) -> bool:
    """Create ``file`` empty (SQLite takes an empty file as a new database) and return True, or
    return False if it exists. Atomic (O_EXCL), so of two `db upgrade` at once on a new database
    only the one that created the file deletes it when its upgrade fails: deleting on "the file
    was missing when I looked" would delete the other's freshly migrated database."""
    try:
        os.close(os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        return False
    except OSError as exc:
        raise CliError(f"cannot create the SQLite database {file}: {exc.strerror}") from None
    return True


def _other_table_forms(folder: Path) -> list[str]:
    """Names of the table files in ``folder`` in a form `sample generate` does not write
    (``advertisers.csv`` beside the ``advertisers.csv.gz`` it writes)."""
    from adseg.ingest import SUFFIXES, TABLES

    return [
        f"{table}{suffix}"
        for table in TABLES
        for suffix in SUFFIXES
        if suffix != ".csv.gz" and os.path.lexists(folder / f"{table}{suffix}")
    ]


@db_app.command("current")
@handle_errors
def db_current(
    database_url_: DatabaseUrl = None,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            help="Print only the revision id (nothing when the database has no schema yet).",
        ),
    ] = False,
) -> None:
    """Print the schema revision of the database and whether it is up to date."""
    from adseg.store import migrate

    url = database_url(database_url_)
    engine = _engine(url, writes=False)
    # not check_known: a revision this adseg does not know is what this command is asked for
    # (it refused to print it)
    current = migrate.current_revision(engine)
    head = migrate.head_revision()
    if quiet:  # for scripts: `test "$(adseg db current -q)" = "$EXPECTED"`
        if current:
            out.print(current, markup=False)
        return
    if current == head:
        state = f"{current}, up to date"
    elif current is not None and current not in migrate.known_revisions():
        state = f"{current}, unknown to this adseg (newest {head}): a newer adseg migrated it"
    else:
        state = f"{current or 'no schema'}, behind the newest {head}: run `adseg db upgrade`"
    out.print(f"{mask_url(url)}: {state}", markup=False)


@db_app.command("unlock")
@handle_errors
def db_unlock(
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Also clear a lock held by another host (adseg cannot check it), or by a "
            "process of this host that still exists (its id now another program's).",
        ),
    ] = False,
    database_url_: DatabaseUrl = None,
    quiet: Quiet = False,
) -> None:
    """Clear the nightly lock a stopped process left behind (its run is marked failed).

    A lock of a process on this host that has ended is taken over by the next run anyway; this
    is for a holder on another host (a container that was replaced, a machine that rebooted)."""
    from adseg.store.results import RunLockedError, clear_lock

    engine = _engine(database_url_)
    _require_schema(engine)
    try:
        cleared = clear_lock(engine, "nightly", force=force)
    except RunLockedError as exc:
        raise CliError(str(exc)) from None
    if quiet:
        return
    if cleared is None:
        out.print("the nightly lock is not held", markup=False)
        return
    run = "" if cleared.run_id is None else f"; {cleared.run_outcome()}"
    out.print(f"cleared the nightly lock of {cleared.holder}{run}", markup=False)


@db_app.command("prune")
@handle_errors
def db_prune(
    keep: Annotated[
        int,
        typer.Option(
            "--keep",
            **RUN_ID,
            help="How many of the newest reportable runs (completed, with forecasts) to keep, "
            "with every later run.",
            show_default=False,
        ),
    ],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be removed; remove nothing.")
    ] = False,
    vacuum: Annotated[
        bool,
        typer.Option(
            "--vacuum",
            help="SQLite: then shrink the file (VACUUM; needs free disk space about its size).",
        ),
    ] = False,
    database_url_: DatabaseUrl = None,
    quiet: Quiet = False,
) -> None:
    """Delete old runs and their results: every run, completed or failed, older than the
    `--keep` newest reportable runs.

    A reportable run is a completed one with forecasts (what `adseg report` shows; a `views` run
    is not one). Runs from the oldest kept one on stay whatever their kind and status, and a run
    still marked running is never deleted. Takes the nightly lock (exit 75 while a nightly,
    `views`, `segment` or `forecast` runs). SQLite reuses the freed space for later runs;
    `--vacuum` gives it back to the disk."""
    from adseg.pipeline import prune_runs
    from adseg.store.results import RunLockedError

    engine = _engine(database_url_, writes=not dry_run)  # a dry run only counts
    _require_schema(engine)
    try:
        pruned, shrunk = prune_runs(engine, keep, dry_run=dry_run, vacuum=vacuum)
    except RunLockedError as exc:
        _fail(str(exc), EXIT_TEMPFAIL)
    if not quiet:
        out.print(_pruned_line(pruned, keep, dry_run), markup=False)
    if vacuum and (dry_run or engine.dialect.name != "sqlite"):
        why = "a dry run changes nothing" if dry_run else "PostgreSQL's autovacuum reuses the space"
        err.print(f"note: --vacuum not run: {why}", markup=False)
    elif isinstance(shrunk, str):  # the runs are removed all the same: not a failed command
        err.print(
            f"warning: the runs are removed, but VACUUM failed: {shrunk}; `adseg db prune "
            f"--keep {keep} --vacuum` tries again",
            markup=False,
        )
    elif shrunk is not None:
        before, after, blocked = shrunk
        if not quiet:
            out.print(f"vacuumed: {before / 2**20:,.1f} MiB -> {after / 2**20:,.1f} MiB on disk")
        if blocked:
            err.print(
                "warning: another process is reading the database, so SQLite kept the old pages "
                "and the new copy in its -wal file; the file shrinks at the first checkpoint "
                "after that reader finishes (the next write, or this command again)",
                markup=False,
            )


def _pruned_line(pruned, keep: int, dry_run: bool) -> str:
    """One line on what `db prune` removed (or would remove) and what it kept."""
    if pruned.first_kept is None:
        return (
            f"nothing to remove: no more than {_counted(keep, 'reportable run')} (completed, "
            "with forecasts) in the database"
        )
    running = ""
    if pruned.running:
        running = f", and {_id_ranges(pruned.running)}, still marked running"
    if not pruned.runs:
        return f"nothing to remove: no run older than run {pruned.first_kept}{running}"
    statuses = list(pruned.runs.values())
    by_status = ", ".join(
        f"{statuses.count(status)} {status}"
        for status in ("completed", "failed")
        if status in statuses
    )
    verb = "would remove" if dry_run else "removed"
    return (
        f"{verb} {_counted(len(statuses), 'run')} ({_id_ranges(list(pruned.runs))}: "
        f"{by_status}) and their {_counted(sum(pruned.rows.values()), 'result row')}; kept run "
        f"{pruned.first_kept} and every later run (from the --keep {keep} newest reportable)"
        f"{running}"
    )


def _id_ranges(ids: list[int]) -> str:
    """'run 3', 'runs 1–4', 'runs 1–2, 4, 6–9' for ascending run ids."""
    spans: list[list[int]] = []
    for run_id in ids:
        if spans and run_id == spans[-1][1] + 1:
            spans[-1][1] = run_id
        else:
            spans.append([run_id, run_id])
    text = ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in spans)
    return f"run{'' if len(ids) == 1 else 's'} {text}"


def _counted(count: int, noun: str) -> str:
    """'1 run', '2 runs', '20,000 result rows'."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


@db_app.command("summary")
@handle_errors
def db_summary(database_url_: DatabaseUrl = None, quiet: Quiet = False) -> None:
    """Print the row count of each table and the delivery date range (``--quiet``: print
    nothing, only check that the database can be read)."""
    from adseg.store import reads

    engine = _engine(database_url_, writes=False)
    _require_schema(engine)
    counts, date_range = reads.table_counts(engine), reads.delivery_date_range(engine)
    if not quiet:
        print_counts(counts, date_range)


def print_counts(counts: dict[str, int], date_range) -> None:
    table = Table(title="adseg database")
    table.add_column("table")
    table.add_column("rows", justify="right")
    for name, n in counts.items():
        table.add_row(name, f"{n:,}")
    out.print(table)
    if date_range:
        out.print(f"delivery dates: {date_range[0]} .. {date_range[1]}")


# --- ingest --------------------------------------------------------------------------------


@app.command("ingest")
@handle_errors
def ingest(
    directory: Annotated[
        Path,
        typer.Argument(
            help="Folder with advertisers/auctions/delivery .csv, .csv.gz or .parquet",
            metavar="DIRECTORY",
        ),
    ],
    database_url_: DatabaseUrl = None,
    quiet: Quiet = False,
) -> None:
    """Validate and load ingest files; all or nothing, idempotent (upserts on natural keys)."""
    from adseg.ingest import read_directory
    from adseg.store.load import known_advertiser_ids

    engine = _engine(database_url_)
    _require_schema(engine)
    started = time.perf_counter()
    batch = read_directory(directory, known_advertiser_ids(engine))
    read_seconds = time.perf_counter() - started
    stopped = None
    try:
        summary = _write_with_progress(engine, batch, quiet)
    except (KeyboardInterrupt, Terminated) as exc:
        if (summary := getattr(exc, "committed", None)) is None:
            raise  # before the commit: nothing was written (handle_errors' line)
        stopped = exc  # during the commit: the batch is written, and the table says what
    try:
        if not quiet:
            _print_ingested(directory, summary, read_seconds)
        check_pending()
    except (KeyboardInterrupt, Terminated) as exc:
        stopped = stopped or exc
    if stopped is not None:  # the batch is written all the same: say so, not "nothing kept"
        counts = ", ".join(f"{t.table} {t.rows:,}" for t in summary.tables)
        _fail_stopped(stopped, f"stopped after the ingest was committed (written: {counts} rows)")


def _print_ingested(directory: Path, summary, read_seconds: float) -> None:
    """The ingest's table: each table's rows, inserted, updated and unchanged; then the times."""
    table = Table(title=f"ingest {escape(str(directory))}")
    for col in ("table", "rows", "inserted", "updated", "unchanged"):
        table.add_column(col, justify="left" if col == "table" else "right")
    for t in summary.tables:
        counts = (t.rows, t.inserted, t.updated, t.unchanged)
        table.add_row(t.table, *(f"{c:,}" for c in counts))
    out.print(table)
    rate = summary.rows / summary.seconds if summary.seconds > 0 else float("inf")
    # both parts: the write's rate alone read as the command's (QA: 37.5 s of 48 s)
    out.print(
        f"{_counted(summary.rows, 'row')} read and validated in {read_seconds:.2f} s, written in "
        f"{summary.seconds:.2f} s ({rate:,.0f} rows/s)"
    )


def _write_with_progress(engine, batch, quiet: bool):
    from rich.progress import Progress

    from adseg.store.load import write_batch

    if not show_progress(quiet):
        return write_batch(engine, batch)
    with Progress(console=err, transient=True) as progress:
        tasks = {
            t: progress.add_task(f"loading {t}", total=n) for t, n in batch.rows().items() if n
        }
        return write_batch(engine, batch, lambda t, n: progress.advance(tasks[t], n))


# --- sample --------------------------------------------------------------------------------

sample_app = typer.Typer(help="The simulated sample marketplace.", no_args_is_help=True)
app.add_typer(sample_app, name="sample")


_SAMPLE_OPTIONS = {
    "n_advertisers": "--advertisers",
    "days": "--days",
    "train_days": "--train-days",
    "n_segments": "--segments",
    "seed": "--seed",
}


def _option_names(message: str, options: dict[str, str]) -> str:
    """Rewrite a library message for a CLI user: its field names become the option names and a
    leading 'ClassName: ' goes."""
    message = re.sub(r"^\w+Config: ", "", message)
    return re.sub(r"\b(" + "|".join(options) + r")\b", lambda m: options[m.group(1)], message)


@sample_app.command("generate")
@handle_errors
def sample_generate(
    out_dir: Annotated[Path, typer.Option("--out", help="Folder to write the files into.")],
    family: Annotated[
        str,
        typer.Option(
            help="Generative family: 'default' (log-normal prices) or 'gamma' (gamma prices, "
            "flatter segment structure, noisier text; sample_campaigns/README.md). The options "
            "given override its values."
        ),
    ] = "default",
    advertisers: Annotated[
        int | None, typer.Option(help="Number of advertisers (default: the family's, 1268).")
    ] = None,
    days: Annotated[int, typer.Option(help="Days in all (training + evaluation).")] = 14,
    train_days: Annotated[
        int | None,
        typer.Option(help="Days of the training window (default: half of --days, rounded up)."),
    ] = None,
    segments: Annotated[
        int | None,
        typer.Option(
            help="Latent segments (default: the family's, 40, or --advertisers if fewer)."
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(help="Random seed (same seed → identical files; default 20260302)."),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Write into a folder that is not empty (replacing the files named alike).",
        ),
    ] = False,
    quiet: Quiet = False,
) -> None:
    """Write a simulated marketplace (advertisers, auctions, delivery .csv.gz, truth.csv and
    the config.json it was made with)."""
    import time

    from adseg.simulate import FAMILIES, family_config, simulate_marketplace, write_marketplace

    if family not in FAMILIES:
        raise CliError(f"--family must be one of {', '.join(FAMILIES)}; got {family!r}.")
    preset = family_config(family)
    if advertisers is None:
        advertisers = preset.n_advertisers
    if out_dir.exists() and not out_dir.is_dir():
        raise CliError(f"--out {out_dir} is a file; give a folder to write the files into")
    if segments is not None and advertisers >= 1 and segments > advertisers:
        # config.json would record segments no advertiser could be drawn into (QA)
        raise CliError(f"--segments must be ≤ --advertisers ({advertisers}); got {segments}.")
    if not force and out_dir.is_dir() and (found := sorted(p.name for p in out_dir.iterdir())):
        # an inbox named by mistake would have its data replaced by simulated data, and files
        # left beside ours (advertisers.csv beside advertisers.csv.gz) make it fail to ingest
        shown = ", ".join(found[:5]) + (", …" if len(found) > 5 else "")
        raise CliError(
            f"--out {out_dir} is not empty ({shown}): give a new or empty folder, or --force "
            "to write into it anyway"
        )
    if force and (clash := _other_table_forms(out_dir)):
        # ingest refuses a folder with two files for one table: the sample written beside
        # these could not be loaded from it
        them = "it" if len(clash) == 1 else "them"
        raise CliError(
            f"--out {out_dir} holds {', '.join(clash)}: beside the .csv.gz files written here, "
            f"ingest would find two files for one table; remove or move {them} first"
        )
    try:
        config = family_config(
            family,
            n_advertisers=advertisers,
            days=days,
            # the nightly's default windows split the data's days in half (train first)
            train_days=train_days if train_days is not None else (days + 1) // 2,
            n_segments=(
                segments if segments is not None else min(preset.n_segments, max(advertisers, 1))
            ),
            seed=seed if seed is not None else preset.seed,
        )
    except ValueError as exc:  # name the command's options, not the config's fields
        raise CliError(_option_names(str(exc), _SAMPLE_OPTIONS)) from None
    t0 = time.perf_counter()
    market = simulate_marketplace(config)
    paths = write_marketplace(market, out_dir)
    if not quiet:
        out.print(
            f"wrote {len(market.advertisers):,} advertisers, {len(market.auctions):,} auctions, "
            f"{len(market.delivery):,} delivery rows to {out_dir} "
            f"in {time.perf_counter() - t0:.1f} s",
            markup=False,
        )
        for name, path in paths.items():
            out.print(f"  {name}: {path}", markup=False)


# --- the pipeline ---------------------------------------------------------------------------

_WINDOWS_HELP = (
    "Give all four window dates or none (default: the last 14 days in the database, 7 + 7; "
    "fewer days are split in half)."
)


def _date_option(what: str):
    return Annotated[
        dt.datetime | None, typer.Option(formats=["%Y-%m-%d"], help=f"{what}. {_WINDOWS_HELP}")
    ]


TrainStart = _date_option("First day of the training window")
TrainEnd = _date_option("Last day of the training window")
EvalStart = _date_option("First day of the evaluation window")
EvalEnd = _date_option("Last day of the evaluation window")


def _windows(engine, train_start, train_end, eval_start, eval_end):
    from adseg.pipeline import Windows, default_windows

    given = [train_start, train_end, eval_start, eval_end]
    if all(d is None for d in given):
        return default_windows(engine)
    if any(d is None for d in given):
        raise CliError(
            "give all four of --train-start/--train-end/--eval-start/--eval-end, or none "
            "(default: the last 14 days in the database, 7 + 7; fewer days are split in half)"
        )
    windows = Windows(*(d.date() for d in given))
    windows.validate()
    return windows


def _setup_logging(quiet: bool, verbose: bool) -> None:
    import logging
    import time

    level = logging.WARNING if quiet else (logging.DEBUG if verbose else logging.INFO)
    ours = not logging.getLogger().handlers  # basicConfig leaves a configured root alone
    logging.basicConfig(
        level=level,
        format="%(asctime)sZ %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if ours:  # UTC, as the job log's own lines and `adseg runs`
        logging.getLogger().handlers[0].formatter.converter = time.gmtime
    logging.getLogger("alembic").setLevel(logging.WARNING)


@app.command("nightly")
@handle_errors
def nightly(
    train_start: TrainStart = None,
    train_end: TrainEnd = None,
    eval_start: EvalStart = None,
    eval_end: EvalEnd = None,
    fuser: Annotated[
        list[str] | None,
        typer.Option(
            "--fuser",
            help="Fuser(s) to run (repeatable); default: every registered one, except lta and "
            "trce above 2,000 advertisers (their cost grows about with n³).",
        ),
    ] = None,
    primary: Annotated[str, typer.Option(help="The fuser whose segments are the product.")] = "rcc",
    fuser_option: FuserOption = None,
    segments: Annotated[
        int | None,
        typer.Option(
            help="Number of segments of the model view and the fusers (default: chosen by "
            "backtest on the training window; the middle candidate when it is too short).",
            min=1,
        ),
    ] = None,
    supply: Supply = "both",
    supply_model: SupplyModel = "ses",
    supply_engine: SupplyEngine = "numpy",
    spend_price: SpendPrice = "cost",
    seed: Seed = 0,
    min_samples: MinSamples = 20,
    truth: Annotated[
        Path | None,
        typer.Option(help="truth.csv of a simulated marketplace: adds a 'truth' source."),
    ] = None,
    report_html: Annotated[
        Path | None, typer.Option(help="Also write the HTML report to this file.")
    ] = None,
    report_json: Annotated[
        Path | None, typer.Option(help="Also write the JSON report to this file.")
    ] = None,
    database_url_: DatabaseUrl = None,
    quiet: Quiet = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
) -> None:
    """The nightly job: pull → views → fuse → regenerate → forecast → score → persist → report.

    Exit codes: 0 done, 1 the run failed (recorded in its run row) or completed but a report
    file could not be written, 2 bad input, 75 another
    nightly run holds the lock, another process has held the SQLite database's write lock for
    30 s, or the database server cannot be reached, turns the login away for now or goes away
    during the run (retry later),
    130 / 143 / 129 stopped by Ctrl-C / SIGTERM / SIGHUP, 141 the reader of a report written to
    standard output went away."""
    from sqlalchemy.exc import DatabaseError

    from adseg.pipeline import NightlyConfig, run_nightly
    from adseg.store.results import RunLockedError

    _setup_logging(quiet, verbose)
    forecast_options = _forecast_options(
        supply=supply,
        supply_model=supply_model,
        supply_engine=supply_engine,
        spend_price=spend_price,
    )
    options = _fuser_options(fuser_option)
    reports = {"html": report_html, "json": report_json}
    # before the database is opened: its own descriptors are then not yet among /dev/fd/N
    _check_outputs(
        {f"--report-{fmt}": path for fmt, path in reports.items()},
        database_url_,
        inputs={"--truth": truth},
    )
    engine = _engine(database_url_)
    _require_schema(engine)
    windows = _windows(engine, train_start, train_end, eval_start, eval_end)
    config = NightlyConfig(
        fusers=tuple(fuser) if fuser else None,
        primary_fuser=primary,
        n_segments=segments,
        seed=seed,
        min_samples=min_samples,
        truth_path=str(truth) if truth else None,
        fuser_options=options,
        **forecast_options,
    )
    config.fuser_names()  # validate names before taking the lock
    if truth is not None:
        from adseg.pipeline import read_truth
        from adseg.store.load import known_advertiser_ids

        try:
            named = read_truth(truth)  # at the door: a bad file must not become a failed run
        except (FileNotFoundError, ValueError) as exc:
            raise CliError(f"--truth: {exc}") from None
        if not named.index.isin(list(known_advertiser_ids(engine))).any():
            raise CliError(
                f"--truth: {truth} names none of the database's advertisers (is it the truth "
                "file of the marketplace this database was loaded from?)"
            )
    progress = (lambda stage: err.print(f"[dim]… {stage}[/dim]")) if show_progress(quiet) else None
    try:
        result = run_nightly(engine, windows, config, progress)
    except RunLockedError as exc:
        _fail(str(exc), EXIT_TEMPFAIL)
    except (KeyboardInterrupt, Terminated) as exc:
        if (run_id := getattr(exc, "completed_run_id", None)) is None:
            raise  # the run is marked failed: handle_errors' line
        _stopped_after_completion(exc, run_id, reports, [])
    except (ValueError, FileNotFoundError, DatabaseError):
        raise  # bad data or an unwritable database: handle_errors gives the reason and code
    except Exception as exc:  # the run row has the error; the job needs a code and a line
        if (run_id := getattr(exc, "completed_run_id", None)) is not None:
            _fail(f"run {run_id} completed and is kept, but then: {error_text(exc)}", EXIT_FAILED)
        run_id = getattr(exc, "failed_run_id", None)
        what = "nightly run" if run_id is None else f"run {run_id}"
        _fail(f"{what} failed: {error_text(exc)}", EXIT_FAILED)
    written: list[str] = []
    unwritten: list[str] = []
    try:
        if not quiet:
            print_nightly(result, windows)
        for fmt, path in reports.items():  # each one that can be written, whatever the others
            if path is None:
                continue
            try:
                _write_report(engine, result.run_id, fmt, path)
            except BrokenPipeError:
                raise  # `--report-html /dev/stdout | head`: handle_errors ends quietly (141)
            except OSError as exc:  # checked at the door; a full disk can still happen
                again = (
                    f"adseg report --run {result.run_id} --format {fmt} -o {shlex.quote(str(path))}"
                )
                unwritten.append(
                    f"the {fmt.upper()} report could not be written: {path}: {exc.strerror} "
                    f"(`{again}` writes it again)"
                )
                continue
            written.append(fmt)
            if not quiet:
                out.print(f"{fmt.upper()} report: {path}", markup=False)
        check_pending()
    except (KeyboardInterrupt, Terminated) as exc:
        _stopped_after_completion(exc, result.run_id, reports, written)
    if unwritten:
        _fail(
            f"run {result.run_id} completed and its results are stored, but "
            + "; ".join(unwritten),
            EXIT_FAILED,
        )


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


def print_nightly(result, windows) -> None:
    """The MAPE table by source (supply = actual bid requests, as the paper), then timings."""
    mape = result.result.mape
    asked = result.n_segments
    header = (
        f"run {result.run_id}: train {windows.train_start}..{windows.train_end}, "
        f"evaluate {windows.eval_start}..{windows.eval_end}, {_counted(asked, 'segment')}"
    )
    found = mape.loc[mape["source"] == result.primary_fuser, "n_segments"]
    if len(found) and (reached := int(found.iloc[0])) != asked:  # sccbg may find fewer
        header += f" asked ({result.primary_fuser}, the primary fuser, found {reached})"
    out.print(header)
    if result.recommended_source:
        out.print(
            f"recommended source: [bold]{result.recommended_source}[/bold] "
            f"({result.recommendation_reason})"
        )
    _print_mape_tables(mape, result.truth_ari, result.recommended_source)
    _print_bands(result.mape_by_band, result.recommended_source)
    stages = {k: v for k, v in result.timings.items() if isinstance(v, float)}
    out.print("timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in stages.items()))
    _print_left_out(result.fusers_left_out)


def _print_bands(bands, source: str | None) -> None:
    """Impressions MAPE by training-sample band: the recommended source by method beside the
    references (own samples; one global segment), the run's first supply mode."""
    if bands is None or not len(bands) or source is None:
        return
    part = bands[bands["supply_mode"] == bands["supply_mode"].iloc[0]]
    wide = part.pivot_table(
        index="band",
        columns=["source", "method"],
        values="impressions_mape",
        sort=False,
        dropna=False,  # a band whose actuals are all zero shows n/a, not nothing
    )
    count = part[part["source"] == "own"].groupby("band", sort=False)["n_advertisers"].first()
    shown = [(source, "segment"), (source, "blended"), ("own", "segment"), ("global", "blended")]
    present = set(zip(part["source"], part["method"], strict=True))
    shown = [c for c in dict.fromkeys(shown) if c in present]
    table = Table(title=f"Impressions MAPE by advertiser size (training samples): {source}")
    table.add_column("band")
    table.add_column("advertisers", justify="right")
    for src, method in shown:
        table.add_column(f"{src} ({method})", justify="right")
    for band in wide.index:
        n = count.get(band)
        cells = [_pct(wide.loc[band, c]) for c in shown]
        table.add_row(band, "" if n is None else str(int(n)), *cells)
    out.print(table)


def _print_mape_tables(
    mape, truth_ari: dict[str, float] | None = None, recommended: str | None = None
) -> None:
    """One table per supply mode: each source's impressions and spend MAPE by method, its
    segment and advertiser counts, and (when given) its ARI against the true segments; the
    ``recommended`` source first, marked."""
    for mode in [m for m in ("actual", "forecast") if m in set(mape["supply_mode"])]:
        table = Table(title=f"MAPE by segmentation source (supply: {mode})")
        table.add_column("source")
        methods = [m for m in ("segment", "blended") if m in set(mape["method"])]
        for m in methods:
            suffix = "" if m == "segment" else f" ({m})"
            table.add_column(f"impressions{suffix}", justify="right")
            table.add_column(f"spend{suffix}", justify="right")
        table.add_column("segments", justify="right")
        table.add_column("advertisers", justify="right")
        if truth_ari:
            table.add_column("ARI vs truth", justify="right")
        sub = mape[mape["supply_mode"] == mode]
        sources = list(dict.fromkeys(sub["source"]))
        if recommended in sources:
            sources.remove(recommended)
            sources.insert(0, recommended)
        for source in sources:
            rows = sub[sub["source"] == source].set_index("method")
            cells = []
            for m in methods:
                if m in rows.index:
                    cells += [
                        _pct(rows.loc[m, "impressions_mape"]),
                        _pct(rows.loc[m, "spend_mape"]),
                    ]
                else:
                    cells += ["", ""]
            first = rows.iloc[0]
            extra = [str(int(first["n_segments"])), str(int(first["n_advertisers"]))]
            if truth_ari:
                ari_value = truth_ari.get(source)
                extra.append("" if ari_value is None else f"{ari_value:.3f}")
            name = f"{source} (recommended)" if source == recommended else source
            table.add_row(name, *cells, *extra)
        out.print(table)
        if "n_missing_forecast" in sub and (missing := int(sub["n_missing_forecast"].max())):
            out.print(
                f"{_counted(missing, 'advertiser')} with no training delivery "
                "to forecast supply from: left out of these MAPEs",
                markup=False,
            )
        # a zero actual has no percentage error: MAPE averages the others (QA: the table
        # counted them among its advertisers without a word)
        zero = {
            what: int(sub[f"n_zero_{what}"].max())
            for what in ("impressions", "spend")
            if f"n_zero_{what}" in sub
        }
        if any(zero.values()):
            said = " and ".join(f"{n:,} with no {what}" for what, n in zero.items() if n)
            out.print(
                f"advertisers delivered nothing in the evaluation window ({said}): left out of "
                "that MAPE (a zero actual has no percentage error)",
                markup=False,
            )


def _print_left_out(fusers: list[str]) -> None:
    """Say which fusers the default set left out for the run's size (nightly, segment)."""
    if fusers:
        out.print(
            f"left out of the default fusers at this size (cost ~ n³): {', '.join(fusers)}; "
            "name them with --fuser to run them",
            markup=False,
        )


def _shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, with an ellipsis when something was cut."""
    return text if len(text) <= width else text[: width - 1] + "…"


def _pct(x) -> str:
    """A share as a percentage; "n/a" when there is none (e.g. every actual was zero: NaN)."""
    try:
        value = float(x)
    except (TypeError, ValueError):
        return "n/a"
    return f"{100 * value:.2f}%" if math.isfinite(value) else "n/a"


@app.command("views")
@handle_errors
def views_command(
    train_start: TrainStart = None,
    train_end: TrainEnd = None,
    eval_start: EvalStart = None,
    eval_end: EvalEnd = None,
    seed: Seed = 0,
    min_samples: MinSamples = 20,
    database_url_: DatabaseUrl = None,
    quiet: Quiet = False,
) -> None:
    """Build the base clusterings of every view for a window; print the paper's Tables 4 and 5.

    The clusterings are stored as a run of kind 'views' (for `adseg segment --run`). Table 4:
    clusters per view and α; Table 5: win-rate/eCPM consistency."""
    from adseg.pipeline import NightlyConfig, run_views
    from adseg.store.results import RunLockedError
    from adseg.views import clusters_per_view, view_consistency

    engine = _engine(database_url_)
    _require_schema(engine)
    windows = _windows(engine, train_start, train_end, eval_start, eval_end)
    config = NightlyConfig(seed=seed, min_samples=min_samples)
    progress = (lambda stage: err.print(f"[dim]… {stage}[/dim]")) if show_progress(quiet) else None
    try:
        run_id, views = run_views(engine, windows, config, progress)
    except RunLockedError as exc:
        _fail(str(exc), EXIT_TEMPFAIL)
    if quiet:
        return
    out.print(
        f"run {run_id}: base clusterings of {views.labels.shape[0]:,} advertisers, "
        f"training window {windows.train_start}..{windows.train_end}"
    )
    _print_frame(
        views.columns[["view", "parameter", "n_clusters", "n_excluded"]], "base clusterings"
    )
    _print_frame(
        clusters_per_view(views),
        "Table 4: clusters per view and α",
        empty="no KS view was built (see the warnings above)",
    )
    _print_frame(
        view_consistency(views),
        "Table 5: win-rate vs eCPM consistency (share of advertiser pairs)",
        percent=("agree", "disagree"),
        empty="needs both KS views (win-rate and eCPM cost)",
    )


def _print_frame(
    frame, title: str, percent: tuple[str, ...] = (), empty: str | None = None
) -> None:
    """A frame as a terminal table: numbers right-aligned, ``percent`` columns as percentages
    (shares in [0, 1], as the paper's Table 5 prints them), other floats to 4 significant digits.
    An empty frame with ``empty`` given is one line, the title's label (before its colon) then
    ``empty`` ("Table 4: no KS view was built …"), not headers over nothing (`views` without its
    KS views printed those: QA)."""
    import pandas as pd

    if empty is not None and not len(frame):
        out.print(f"{title.split(':')[0]}: {empty}", markup=False)
        return

    table = Table(title=title)
    for col in frame.columns:
        numeric = pd.api.types.is_numeric_dtype(frame[col])  # pandas ≥ 3: text is "str", not object
        table.add_column(str(col), justify="right" if numeric else "left")
    for row in frame.itertuples(index=False):
        cells = []
        for col, value in zip(frame.columns, row, strict=True):
            if col in percent:
                cells.append(_pct(value))
            elif isinstance(value, float):
                cells.append(f"{value:.4g}")
            else:
                cells.append(escape(str(value)))
        table.add_row(*cells)
    out.print(table)


@app.command("segment")
@handle_errors
def segment_command(
    run: Annotated[
        int, typer.Option("--run", help="Run whose base clusterings to fuse.", **RUN_ID)
    ],
    fuser: Annotated[
        list[str] | None,
        typer.Option(
            "--fuser",
            help="Fuser(s) (repeatable); default: every registered one, except lta and trce "
            "above 2,000 advertisers.",
        ),
    ] = None,
    segments: Annotated[
        int | None,
        typer.Option(
            help="Number of segments (default: the run's own, as its nightly or last segment "
            "was asked; else the views' median).",
            min=1,
        ),
    ] = None,
    seed: RunSeed = None,
    fuser_option: FuserOption = None,
    database_url_: DatabaseUrl = None,
    quiet: Quiet = False,
) -> None:
    """Segment a run again from its stored base clusterings (other fusers, other K).

    Makes each fuser's consensus and the single-view sources (win_rate, ecpm, text) at the chosen
    number of segments; `adseg forecast --run` scores them."""
    from adseg.pipeline import NightlyConfig, run_segment
    from adseg.store.results import RunLockedError, RunNotFoundError

    options = _fuser_options(fuser_option)
    engine = _engine(database_url_)
    _require_schema(engine)
    names = tuple(fuser) if fuser else None
    config = NightlyConfig(
        fusers=names,
        primary_fuser=(names or ("rcc",))[0],
        n_segments=segments,
        seed=_run_seed(engine, run, seed),
        fuser_options=options,
    )
    config.fuser_names()
    try:
        done = run_segment(engine, run, config)
    except RunLockedError as exc:
        _fail(str(exc), EXIT_TEMPFAIL)
    except RunNotFoundError as exc:
        raise CliError(str(exc)) from None
    if not quiet:
        for name, labels in (done["segments"] | done["single_view"]).items():
            count = len(set(labels[labels >= 0].tolist()))
            out.print(f"{name}: {_counted(count, 'segment')}", markup=False)
        _print_left_out(done["left_out"])
    if done["dropped"]:  # the failure itself was logged as a warning when it happened
        err.print(
            f"warning: run {run} no longer holds the segments and scores of "
            f"{', '.join(done['dropped'])}: the fuser failed to remake them",
            markup=False,
        )
    if done["unscored"] and not quiet:  # what happened, as asked: not a warning
        err.print(
            f"note: the forecasts and scores of {', '.join(done['unscored'])} in run {run} were "
            f"made with the replaced segments and are removed; `adseg forecast --run {run}` "
            "scores the new ones",
            markup=False,
        )


def _run_seed(engine, run_id: int, seed: int | None) -> int:
    """The seed a stage run again on ``run_id`` uses: ``seed`` when given, else the run's own,
    so that `segment` and `forecast` without --seed remake what the nightly made."""
    from adseg.store.results import RunNotFoundError, get_run

    if seed is not None:
        return seed
    try:
        stored = get_run(engine, run_id)["seed"]
    except RunNotFoundError as exc:
        raise CliError(str(exc)) from None
    return 0 if stored is None else int(stored)


@app.command("forecast")
@handle_errors
def forecast_command(
    run: Annotated[
        int, typer.Option("--run", help="Run whose segments to forecast with.", **RUN_ID)
    ],
    supply: Supply = "both",
    supply_model: SupplyModel = "ses",
    supply_engine: SupplyEngine = "numpy",
    spend_price: SpendPrice = "cost",
    seed: RunSeed = None,
    database_url_: DatabaseUrl = None,
    quiet: Quiet = False,
) -> None:
    """Regenerate segment c.d.f.s, forecast the run's evaluation window and score every source."""
    from adseg.pipeline import NightlyConfig, run_forecast
    from adseg.store.results import RunLockedError, RunNotFoundError

    forecast_options = _forecast_options(
        supply=supply,
        supply_model=supply_model,
        supply_engine=supply_engine,
        spend_price=spend_price,
    )
    engine = _engine(database_url_)
    _require_schema(engine)
    config = NightlyConfig(seed=_run_seed(engine, run, seed), **forecast_options)
    try:
        result = run_forecast(engine, run, config)
    except RunLockedError as exc:
        _fail(str(exc), EXIT_TEMPFAIL)
    except RunNotFoundError as exc:
        raise CliError(str(exc)) from None
    if not quiet:
        out.print(f"run {run}: every stored segmentation forecast and scored again")
        _print_mape_tables(result.mape)


@app.command("report")
@handle_errors
def report(
    run: Annotated[
        int | None,
        typer.Option("--run", help="Run id (default: the latest with forecasts).", **RUN_ID),
    ] = None,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format", help="html | json | csv (default: from the --output suffix, else json)."
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="File (default: stdout).")
    ] = None,
    database_url_: DatabaseUrl = None,
    quiet: Quiet = False,
) -> None:
    """Render a run's report (HTML for analysts, JSON for machines, CSV of forecasts)."""
    from adseg.store.results import RunNotFoundError, latest_completed_run

    fmt = fmt or _format_of(output)
    if fmt not in REPORT_FORMATS.values():
        raise CliError(f"--format must be html, json or csv; got {fmt!r}")
    _check_outputs({"--output": output}, database_url_)
    engine = _engine(database_url_, writes=False)
    _require_schema(engine)
    try:
        run_id = run if run is not None else latest_completed_run(engine, with_forecasts=True)
        if output is None:
            _write_stdout(_render_report(engine, run_id, fmt, warn=True))
        else:
            _write_report(engine, run_id, fmt, output, warn=True)
            if not quiet:
                err.print(f"wrote {fmt} report of run {run_id} to {output}", markup=False)
    except RunNotFoundError as exc:
        raise CliError(str(exc)) from None


REPORT_FORMATS = {".html": "html", ".htm": "html", ".json": "json", ".csv": "csv"}


def _format_of(output: Path | None) -> str:
    """The report format an output file's suffix names (report.HTML → html); json otherwise."""
    suffix = output.suffix.lower() if output is not None else ""
    return REPORT_FORMATS.get(suffix, "json")


def _render_report(engine, run_id: int, fmt: str, *, warn: bool = False) -> str:
    """The report of ``run_id`` in ``fmt``; with ``warn``, a warning on standard error when some
    of the run's segments have no scores (the report cannot show them)."""
    from adseg.pipeline import load_report_data
    from adseg.report import render

    data = load_report_data(engine, run_id)
    if warn:
        _warn_unscored(run_id, data)
    return render(data, fmt)


def _warn_unscored(run_id: int, data) -> None:
    """Say (a warning: even with --quiet) that the report of ``data`` (a ReportData) lacks
    sources, and what scores them: after `adseg segment`, or for a `views` run, a report that
    looked complete had none of the remade sources, or nothing at all (QA)."""
    unscored, scored = data.unscored_sources(), len(data.mape) > 0
    if scored and not unscored:
        return
    if scored:
        what = (
            f"{', '.join(unscored)} {'have' if len(unscored) > 1 else 'has'} segments but no "
            "scores (remade by `adseg segment` since the run's last forecast), so the report "
            f"leaves {'them' if len(unscored) > 1 else 'it'} out"
        )
        then = f"`adseg forecast --run {run_id}` scores"
    else:
        what = "it has no forecasts yet"
        then = "" if unscored else f"`adseg segment --run {run_id}`, then "
        then += f"`adseg forecast --run {run_id}` scores"
    err.print(f"warning: run {run_id}: {what}; {then} {'them' if scored else 'it'}", markup=False)


def _write_report(engine, run_id: int, fmt: str, path: Path, *, warn: bool = False) -> None:
    """Render, then write atomically: a failed render leaves no file at all."""
    _write_atomic(path, _render_report(engine, run_id, fmt, warn=warn))


def _check_outputs(
    paths: dict[str, Path | None],
    url_flag: str | None,
    inputs: dict[str, Path | None] | None = None,
) -> None:
    """``_check_output`` for each report path, and two rules across them: no report may be
    written over the SQLite database (or its journal files) or over an input file of the command
    (``inputs``, by option: ``--truth``) — a typo such as ``-o adseg.db`` for ``adseg.json``
    would replace every run and every ingested row with a report — and two reports may not
    share one file (the second would silently replace the first). Files are compared by name and
    by identity (device and inode), so a descriptor (/dev/fd/3) or a hard link that is the
    database is caught too."""
    taken: dict[str | tuple[int, int], str] = {}
    for option, path in (inputs or {}).items():
        if path is not None:
            taken[os.path.realpath(path)] = f"the {option} file"
            if (identity := _file_identity(path)) is not None:
                taken[identity] = f"the {option} file"
    database = sqlite_file(database_url(url_flag))
    if database is not None:
        real = os.path.realpath(database)
        for suffix in ("", *SQLITE_SIDE_FILES):
            what = f"the database {database}{suffix}"
            taken[real + suffix] = what
            if (identity := _file_identity(Path(real + suffix))) is not None:
                taken[identity] = what
    for option, path in paths.items():
        _check_output(path, option)
        if path is None:
            continue
        fd = _descriptor_of(path)
        real = os.path.realpath(path) if fd is None else f"file descriptor {fd}"
        identity = _file_identity(path)
        for key in (real, identity):
            if key is not None and key in taken:
                raise CliError(f"{option} {path} is {taken[key]}; give the report another name")
        taken[real] = f"also given to {option}"
        if identity is not None:
            taken[identity] = f"also given to {option}"


def _file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the regular file ``path`` names (an open descriptor's file for
    /dev/fd/N), or None when there is none: a missing file, a terminal, a pipe."""
    fd = _descriptor_of(path)
    try:
        st = os.fstat(fd) if fd is not None else os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def _check_output(path: Path | None, option: str) -> None:
    """At the door, before any work: an output path must name a file, one we may write when it
    exists (as a shell redirection would require), and the nearest existing folder on its way
    must be a folder we may write in (the missing ones are created)."""
    if path is None:
        return
    if path.is_dir():
        raise CliError(f"{option} {path} is a folder; give a file name (e.g. {path / 'report'})")
    if (fd := _descriptor_of(path)) is not None:
        if not _open_for_writing(fd):
            raise CliError(f"{option} {path}: file descriptor {fd} is not open for writing")
        return
    if path.exists() and not os.access(path, os.W_OK):  # a link: its target's permissions
        # the report is renamed over a regular file, which only its folder's permissions allow:
        # without this a 0444 file, or another user's, was silently replaced (QA)
        raise CliError(f"{option} {path}: no permission to write it")
    if path.exists() and not path.is_file():  # a FIFO, a device: written in place
        return
    parent = Path(os.path.realpath(path)).parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise CliError(f"{option} {path}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CliError(f"{option} {path}: no permission to write in {parent}")


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path`` and rename it over ``path``, so a reader
    never sees half a file and a failure (disk full, no permission) leaves ``path`` as it was.
    A symbolic link is written through (its target is replaced, the link stays). /dev/stdout,
    /dev/stderr and /dev/fd/N are written to that open descriptor, at its offset, as a shell
    redirection would (reopening them would truncate a job log that stdout is appended to, and
    renaming over them would replace it); a FIFO or a device is written in place."""
    try:
        if (fd := _descriptor_of(path)) is not None:
            _write_descriptor(fd, text)
            return
        if path.exists() and not path.is_file():
            with open(path, "w", encoding="utf-8") as stream:
                stream.write(text)
            return
    except BrokenPipeError:
        raise  # the reader went away: a quiet 141, not an error naming a file
    except OSError as exc:  # /dev/full, a closed descriptor: name the path given
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    from adseg.tempfiles import create_beside

    given, path = path, Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    # a file rewritten keeps its permissions (a 0640 report stays 0640); its new text is never
    # readable by more users than the old file's while it is written
    mode = stat.S_IMODE(path.stat().st_mode) if path.is_file() else None
    tmp = None
    try:
        fd, tmp = create_beside(path, 0o666 if mode is None else 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            if mode is not None:
                os.fchmod(fd, mode)
            stream.write(text)
        tmp.replace(path)
    except OSError as exc:  # name the file the user gave, not the temporary one
        raise OSError(exc.errno, exc.strerror, str(given)) from exc
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


_STANDARD_STREAMS = {"/dev/stdout": 1, "/dev/stderr": 2}


def _descriptor_of(path: Path) -> int | None:
    """The already-open file descriptor that ``path`` names (/dev/stdout, /dev/stderr,
    /dev/fd/N, /proc/self/fd/N), or None for any other path."""
    text = os.path.normpath(os.path.abspath(path))
    if text in _STANDARD_STREAMS:
        return _STANDARD_STREAMS[text]
    match = re.fullmatch(r"/(?:dev/fd|proc/self/fd)/(\d+)", text)
    return int(match.group(1)) if match else None


def _open_for_writing(fd: int) -> bool:
    import fcntl

    try:
        mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    except OSError:  # not open at all
        return False
    return mode in (os.O_WRONLY, os.O_RDWR)


def _write_descriptor(fd: int, text: str) -> None:
    """All of ``text`` (UTF-8) to ``fd`` after what Python has buffered for stdout and stderr."""
    sys.stdout.flush()
    sys.stderr.flush()
    _write_all(functools.partial(os.write, fd), text)


def _write_stdout(text: str) -> None:
    """All of ``text`` (UTF-8) to standard output. ``sys.stdout.write`` is not enough: with
    PYTHONUNBUFFERED=1 (common in containers) it sits on the raw file, whose short writes it
    drops, so a report piped to a reader that quits early (`| head`) lost its tail and exited 0
    instead of 141 — and a short write for any other reason would lose data silently."""
    sys.stdout.flush()
    binary = getattr(sys.stdout, "buffer", None)
    if binary is None:  # a text-only stream (an embedding application's)
        sys.stdout.write(text)
        return
    _write_all(binary.write, text)
    binary.flush()


def _write_all(write: Callable[[memoryview], int | None], text: str) -> None:
    """``text`` as UTF-8 through ``write`` (os.write, a raw or buffered file's write), repeated
    until every byte is taken: a short write is retried with the rest, never dropped."""
    data = memoryview(text.encode("utf-8"))
    while data:
        data = data[write(data) or 0 :]


@app.command("runs")
@handle_errors
def runs(
    limit: Annotated[int, typer.Option(help="How many (newest first).", **RUN_ID)] = 20,
    database_url_: DatabaseUrl = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print only the run ids, one per line.")
    ] = False,
) -> None:
    """List recent runs with their status (and the error of failed ones, the fusers that failed
    or warned in completed ones)."""
    import pandas as pd

    from adseg.store.results import list_runs

    engine = _engine(database_url_, writes=False)
    _require_schema(engine)
    frame = list_runs(engine, limit)
    if quiet:  # for scripts: `adseg report --run $(adseg runs -q --limit 1)`
        for run_id in frame["run_id"]:
            out.print(str(run_id), markup=False, highlight=False)
        return
    notes = [_fuser_notes(p) for p in frame["parameters"]]
    table = Table(title="runs")
    columns = ["run", "kind", "status", "started (UTC)", "finished", "error"]
    for col in columns + ["fusers"] * any(notes):  # the column only when a run has something
        # an error is shown whole, folded over lines: its end says what to do ("ask for at
        # most 291"), and this is where jobs/README sends an operator for it (QA)
        table.add_column(col, overflow="fold" if col == "error" else "ellipsis")
    for row, note in zip(frame.itertuples(index=False), notes, strict=True):
        cells = [
            str(row.run_id),
            row.kind,
            row.status,
            _utc_text(row.started_at, "%Y-%m-%d %H:%M:%S"),
            _utc_text(row.finished_at, "%H:%M:%S"),
            "" if pd.isna(row.error) else escape(str(row.error)),  # NULL → NaN
        ]
        table.add_row(*cells, *[escape(_shorten(note, 60))] * any(notes))
    out.print(table)


def _fuser_notes(parameters) -> str:
    """What a run's row says of its fusers beyond success, in a few words: those that failed and
    were skipped, and those that warned ("sccbg: 2 notes"); '' for none. The details are in
    the run's parameters (resolved.fuser_errors, resolved.fuser_notes) and its reports."""
    from adseg.report import fuser_outcomes

    errors, notes = fuser_outcomes(parameters)
    failed = [f"{name} failed" for name in errors]
    warned = [f"{name}: {_counted(len(found), 'note')}" for name, found in notes.items()]
    return ", ".join(failed + warned)


def _utc_text(moment, fmt: str) -> str:
    """A stored timestamp in UTC ('' when missing). SQLite gives back naive UTC; PostgreSQL an
    aware timestamp in the session's time zone."""
    import pandas as pd

    if pd.isna(moment):
        return ""
    moment = pd.Timestamp(moment)
    if moment.tzinfo is not None:
        moment = moment.tz_convert("UTC")
    return moment.strftime(fmt)


# --- bench ---------------------------------------------------------------------------------

bench_app = typer.Typer(help="Benchmarks on the shared benchmark data.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


@bench_app.command("consensus")
@handle_errors
def bench_consensus(
    dataset: Annotated[
        list[str] | None, typer.Option("--dataset", help="Data set(s) (default: Table 2's eight).")
    ] = None,
    repetitions: Annotated[int, typer.Option(help="Ensembles per data set.", min=1)] = 10,
    clusterings: Annotated[int, typer.Option(help="k-means runs per ensemble.", min=1)] = 40,
    preprocessing: Annotated[
        list[str] | None, typer.Option(help="raw and/or standardized (repeatable).")
    ] = None,
    seed: Annotated[
        int, typer.Option(help="Base seed (repetition r uses seed + r).", min=0, max=2**32 - 1)
    ] = 0,
    method: Annotated[
        list[str] | None,
        typer.Option(
            "--method",
            help="Fuser column(s) to run (repeatable; default all: KC, l2, rcc, their "
            "unnormalised forms, rcc (normalised), rcc (l1)).",
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Also write the markdown table here.")
    ] = None,
    quiet: Quiet = False,
) -> None:
    """The paper's Table 2 protocol (seed 003): ACC of k-means, KC, l2 and rcc on the benchmark
    data sets in ../shared/datasets, items shuffled with recorded seeds."""
    from adseg.bench_table2 import (
        PREPROCESSING,
        TABLE2_DATASETS,
        check_table2_name,
        default_methods,
        format_table2,
        run_table2,
    )
    from adseg.datasets import datasets_dir

    methods = default_methods()
    if unknown := [m for m in method or [] if m not in methods]:
        raise CliError(
            f"--method {unknown[0]!r} is not a Table 2 column; choose from "
            + ", ".join(repr(m) for m in methods)
        )
    if unknown := [p for p in preprocessing or [] if p not in PREPROCESSING]:
        raise CliError(f"--preprocessing must be raw or standardized; got {unknown[0]!r}")
    # every check before the first fit: a bad name after a good one failed minutes in (QA)
    for option, values in (
        ("--dataset", dataset),
        ("--method", method),
        ("--preprocessing", preprocessing),
    ):
        if values and (twice := sorted({v for v in values if values.count(v) > 1})):
            raise CliError(f"{option} {twice[0]!r} is given twice (its runs would be pooled)")
    if seed + repetitions - 1 > 2**32 - 1:
        raise CliError(
            f"--seed + --repetitions - 1 must be at most 2**32 - 1 (repetition r uses seed + r); "
            f"got {seed} + {repetitions} - 1"
        )
    datasets_dir()  # a clear error when the shared data are absent
    names = dataset or list(TABLE2_DATASETS)
    for name in names:
        check_table2_name(name)
    _check_output(output, "--output")
    progress = None if quiet else (lambda line: err.print(f"[dim]… {line}[/dim]"))
    with _one_blas_thread():
        frame = run_table2(
            names,
            n_repetitions=repetitions,
            n_clusterings=clusterings,
            seed=seed,
            preprocessing=preprocessing or ["raw"],
            methods={m: methods[m] for m in method} if method else methods,
            progress=progress,
        )
    table = format_table2(frame)
    if not quiet:
        out.print(table, markup=False)
    if output is not None:
        _write_atomic(output, table + "\n")


def _one_blas_thread():
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1)


def entry_point(args: list[str] | None = None) -> None:
    """The ``adseg`` command (and ``python -m adseg``): the Typer app, with usage errors (an
    unknown option, a value of the wrong type) as one ``error:`` line like every other error,
    instead of a boxed panel that wraps at 80 columns in a job log."""
    global _stop_reported
    _stop_reported = False
    usage_error, click_exception = _click_exceptions()
    try:
        result = app(args=args, prog_name="adseg", standalone_mode=False)
    except usage_error as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # the help text itself
        else:
            path = exc.ctx.command_path if exc.ctx else _command_path(args)
            err.print(f"error: {exc.format_message()} (see '{path} --help')", markup=False)
        sys.exit(exc.exit_code)
    except click_exception as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except typer.Abort:
        err.print("error: aborted", markup=False)
        sys.exit(EXIT_FAILED)
    if result == EXIT_INTERRUPTED and not _stop_reported:
        # Typer turns a Ctrl-C outside the command (while it parses the arguments) into 130
        # without a word; every other stop has its line
        err.print(f"error: {error_text(KeyboardInterrupt())}: stopped", markup=False)
    sys.exit(result if isinstance(result, int) else 0)


def _command_path(args: list[str] | None) -> str:
    """'adseg' and the (sub)command names that lead ``args`` (default: the process's): for a usage
    error that click raises before it has a context to name (an option missing its value)."""
    command, path = typer.main.get_command(app), ["adseg"]
    for word in sys.argv[1:] if args is None else args:
        sub = getattr(command, "commands", {}).get(word)
        if sub is None:
            break
        command, path = sub, [*path, word]
    return " ".join(path)


def _click_exceptions() -> tuple[type, type]:
    """click's UsageError and ClickException, wherever this Typer keeps click (a dependency up to
    0.2x, vendored as typer._click since): both are bases of typer.BadParameter."""
    bases = {cls.__name__: cls for cls in typer.BadParameter.__mro__}
    return bases["UsageError"], bases["ClickException"]


if __name__ == "__main__":  # pragma: no cover
    from adseg.entry import main

    main()
