"""`adseg db`: upgrade, current, unlock, prune, summary."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from adseg.cli.connect import _engine, _require_schema
from adseg.cli.console import err, out
from adseg.cli.errors import EXIT_TEMPFAIL, CliError, _fail, handle_errors
from adseg.cli.options import RUN_ID, DatabaseUrl, Quiet
from adseg.cli.output import _counted
from adseg.store.url import SQLITE_SIDE_FILES, database_url, mask_url, sqlite_file

db_app = typer.Typer(help="Database schema: migrate and inspect.", no_args_is_help=True)


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
    # not check_known: a revision this adseg does not know is what this command is asked for,
    # so it must print it, not refuse
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

    A lock of a process on this host that has ended is taken over by the next run anyway, and
    this clears it too. A holder on another host (a container that was replaced, a machine that
    rebooted) cannot be checked from here: clear its lock with --force once it has stopped."""
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
    from adseg.app.prune import prune_runs
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
