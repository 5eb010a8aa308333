"""`adseg ingest` (registered on the root app in ``adseg.cli``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from adseg.cli.connect import _engine, _require_schema
from adseg.cli.console import err, out
from adseg.cli.errors import STOPPED_WRITE, _fail_stopped, handle_errors
from adseg.cli.options import DatabaseUrl, Quiet
from adseg.cli.output import _counted, show_progress
from adseg.interrupts import Terminated, check_pending, signals_deferred


@handle_errors(stopped=STOPPED_WRITE)
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
    stopped, committed = None, []
    try:
        summary = _write_with_progress(engine, batch, quiet, committed.append)
    except (KeyboardInterrupt, Terminated) as exc:
        # whether the batch is written is the commit's to say (on_commit), not the place the
        # stop landed: a stop whose handler ran late lands after write_batch has returned
        if not committed:
            raise  # before the commit: nothing was written (handle_errors' line)
        summary, stopped = committed[0], exc  # the batch is written; the table says what
    printed = quiet
    while not printed:  # a stop landing late (Python runs handlers when it can) waits for it
        try:
            with signals_deferred():
                _print_ingested(directory, summary, read_seconds)
                printed = True
        except (KeyboardInterrupt, Terminated) as exc:
            stopped = stopped or exc
    try:
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
    # both parts: the write's rate alone would read as the whole command's
    out.print(
        f"{_counted(summary.rows, 'row')} read and validated in {read_seconds:.2f} s, written in "
        f"{summary.seconds:.2f} s ({rate:,.0f} rows/s)"
    )


def _write_with_progress(engine, batch, quiet: bool, on_commit):
    """write_batch with a progress bar on stderr (unless ``quiet``); ``on_commit`` as there."""
    from rich.progress import Progress

    from adseg.store.load import write_batch

    if not show_progress(quiet):
        return write_batch(engine, batch, on_commit=on_commit)
    with Progress(console=err, transient=True) as progress:
        tasks = {
            t: progress.add_task(f"loading {t}", total=n) for t, n in batch.rows().items() if n
        }
        return write_batch(engine, batch, lambda t, n: progress.advance(tasks[t], n), on_commit)
