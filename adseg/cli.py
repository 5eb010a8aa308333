"""The ``adseg`` command line (Typer): argument parsing and printing only.

Every command takes ``--database-url`` (or $ADSEG_DATABASE_URL) and ``--quiet``; bad input exits
non-zero with a one-line reason on standard error, and writes nothing.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from adseg import __version__
from adseg.config import database_url, mask_url

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1

app = typer.Typer(
    help="adseg: segment advertisers by robust consensus clustering and forecast their delivery.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Database schema: migrate and inspect.", no_args_is_help=True)
app.add_typer(db_app, name="db")

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        envvar="ADSEG_DATABASE_URL",
        help="SQLAlchemy URL (default: sqlite:///adseg.db in the working directory).",
        show_envvar=True,
    ),
]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress output (for jobs).")]


class CliError(Exception):
    """A failure to report as one line and an exit code (no traceback)."""

    def __init__(self, message: str, code: int = EXIT_BAD_INPUT, details: list[str] | None = None):
        super().__init__(message)
        self.code = code
        self.details = details or []


def handle_errors(fn: Callable) -> Callable:
    """Turn known exceptions into a one-line reason on stderr and a non-zero exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from sqlalchemy.exc import OperationalError, ProgrammingError

        from adseg.ingest import IngestError

        try:
            return fn(*args, **kwargs)
        except CliError as exc:
            _fail(str(exc), exc.code, exc.details)
        except IngestError as exc:
            n = len(exc.problems)
            _fail(
                f"ingest rejected ({n} problem{'s' if n != 1 else ''}); nothing was written",
                EXIT_BAD_INPUT,
                [str(p) for p in exc.problems],
            )
        except (OperationalError, ProgrammingError) as exc:
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig else type(exc).__name__
            _fail(f"database error: {reason}", EXIT_FAILED)
        except (ValueError, FileNotFoundError, FileExistsError) as exc:
            _fail(str(exc), EXIT_BAD_INPUT)

    return wrapper


def _fail(message: str, code: int, details: list[str] | None = None) -> None:
    err.print(f"error: {message}", markup=False)
    for line in details or []:
        err.print(f"  {line}", markup=False)
    raise typer.Exit(code)


def show_progress(quiet: bool) -> bool:
    """Progress bars only for a person at a terminal."""
    return not quiet and sys.stderr.isatty()


def _engine(url_flag: str | None):
    from adseg.store.engine import make_engine

    return make_engine(database_url(url_flag))


def _require_schema(engine) -> None:
    from adseg.store import migrate

    current = migrate.current_revision(engine)
    if current != migrate.head_revision():
        raise CliError(
            f"database schema is at {current or 'nothing'}, not {migrate.head_revision()}: "
            "run `adseg db upgrade` first",
            EXIT_BAD_INPUT,
        )


def version_callback(value: bool) -> None:
    if value:
        out.print(f"adseg {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool | None,
        typer.Option("--version", callback=version_callback, is_eager=True, help="Show version."),
    ] = None,
) -> None:
    """adseg: segment advertisers by robust consensus clustering and forecast their delivery."""


# --- db ------------------------------------------------------------------------------------


@db_app.command("upgrade")
@handle_errors
def db_upgrade(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
    database_url_: DatabaseUrl = None,
    quiet: Quiet = False,
) -> None:
    """Create or migrate the database schema (Alembic) to the newest revision."""
    from adseg.store import migrate

    url = database_url(database_url_)
    engine = _engine(url)
    before = migrate.current_revision(engine)
    migrate.upgrade(engine, revision)
    after = migrate.current_revision(engine)
    if not quiet:
        out.print(f"database {mask_url(url)}: {before or 'empty'} -> {after}", markup=False)


@db_app.command("current")
@handle_errors
def db_current(database_url_: DatabaseUrl = None) -> None:
    """Print the schema revision of the database and whether it is up to date."""
    from adseg.store import migrate

    url = database_url(database_url_)
    engine = _engine(url)
    current = migrate.current_revision(engine)
    head = migrate.head_revision()
    state = "up to date" if current == head else f"behind (newest is {head})"
    out.print(f"{mask_url(url)}: {current or 'empty'} ({state})", markup=False)


@db_app.command("summary")
@handle_errors
def db_summary(database_url_: DatabaseUrl = None) -> None:
    """Print the row count of each table and the delivery date range."""
    from adseg.store import reads

    engine = _engine(database_url_)
    _require_schema(engine)
    print_counts(reads.table_counts(engine), reads.delivery_date_range(engine))


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
        typer.Argument(help="Folder with advertisers/auctions/delivery .csv, .csv.gz or .parquet"),
    ],
    database_url_: DatabaseUrl = None,
    quiet: Quiet = False,
) -> None:
    """Validate and load ingest files; all or nothing, idempotent (upserts on natural keys)."""
    from adseg.ingest import read_directory
    from adseg.store.load import known_advertiser_ids

    engine = _engine(database_url_)
    _require_schema(engine)
    batch = read_directory(directory, known_advertiser_ids(engine))
    summary = _write_with_progress(engine, batch, quiet)
    if quiet:
        return
    table = Table(title=f"ingest {directory}")
    for col in ("table", "rows", "inserted", "updated"):
        table.add_column(col, justify="left" if col == "table" else "right")
    for t in summary.tables:
        table.add_row(t.table, f"{t.rows:,}", f"{t.inserted:,}", f"{t.updated:,}")
    out.print(table)
    rate = summary.rows / summary.seconds if summary.seconds > 0 else float("inf")
    out.print(f"{summary.rows:,} rows in {summary.seconds:.2f} s ({rate:,.0f} rows/s)")


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


if __name__ == "__main__":  # pragma: no cover
    app()
