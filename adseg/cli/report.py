"""`adseg report` and `adseg runs` (registered on the root app in ``adseg.cli``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from adseg.cli.connect import _engine, _require_schema
from adseg.cli.console import err, out
from adseg.cli.errors import CliError, handle_errors
from adseg.cli.options import RUN_ID, DatabaseUrl, Quiet
from adseg.cli.output import _check_outputs, _counted, _shorten, _write_atomic, _write_stdout


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
    from adseg.app.reports import load_report_data
    from adseg.report import render

    data = load_report_data(engine, run_id)
    if warn:
        _warn_unscored(run_id, data)
    return render(data, fmt)


def _warn_unscored(run_id: int, data) -> None:
    """Say (a warning: even with --quiet) that the report of ``data`` (a ReportData) lacks
    sources, and what scores them: after `adseg segment`, or for a `views` run, a report can look
    complete with none of the remade sources, or nothing at all."""
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
        # most 291"), and this is where jobs/README sends an operator for it
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
