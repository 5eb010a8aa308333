"""The ``adseg`` command line (Typer): the root app, its callback and the entry point; each
command group lives in its own module and is registered here.

Every command that uses the database takes ``--database-url`` (or $ADSEG_DATABASE_URL), every
command ``--quiet`` where it prints results; bad input exits
non-zero with a one-line reason on standard error, and writes nothing.

Modules: ``errors`` (exit codes, exceptions → exit codes), ``options`` (shared options),
``output`` (printing helpers, output files), ``console``, ``connect`` (the database); the command
groups ``db``, ``ingest``, ``sample``, ``run`` (nightly, views, segment, forecast), ``report``
(report, runs), ``bench``.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from adseg import __version__
from adseg.cli import bench, db, errors, ingest, report, run, sample
from adseg.cli.console import err, out
from adseg.cli.db import _id_ranges
from adseg.cli.errors import EXIT_FAILED, EXIT_INTERRUPTED, CliError, handle_errors
from adseg.cli.options import _fuser_options
from adseg.cli.output import _check_output, _pct, _write_atomic, _write_stdout
from adseg.cli.report import _utc_text
from adseg.cli.run import _print_bands, _print_mape_tables
from adseg.interrupts import error_text, signals_as_exceptions

__all__ = [  # what other code and the tests import from adseg.cli
    "CliError",
    "_check_output",
    "_fuser_options",
    "_id_ranges",
    "_pct",
    "_print_bands",
    "_print_mape_tables",
    "_utc_text",
    "_write_atomic",
    "_write_stdout",
    "app",
    "entry_point",
    "handle_errors",
]

app = typer.Typer(
    help="adseg: segment advertisers by robust consensus clustering and forecast their delivery.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
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


# the command groups, in the order of the help's command list
app.add_typer(db.db_app, name="db")
app.command("ingest")(ingest.ingest)
app.add_typer(sample.sample_app, name="sample")
app.command("nightly")(run.nightly)
app.command("views")(run.views_command)
app.command("segment")(run.segment_command)
app.command("forecast")(run.forecast_command)
app.command("report")(report.report)
app.command("runs")(report.runs)
app.add_typer(bench.bench_app, name="bench")


def entry_point(args: list[str] | None = None) -> None:
    """The ``adseg`` command (and ``python -m adseg``): the Typer app, with usage errors (an
    unknown option, a value of the wrong type) as one ``error:`` line like every other error,
    instead of a boxed panel that wraps at 80 columns in a job log."""
    errors._stop_reported = False
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
    if result == EXIT_INTERRUPTED and not errors._stop_reported:
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
