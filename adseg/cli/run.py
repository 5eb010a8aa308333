"""The pipeline's commands: `adseg nightly`, and `views`, `segment`, `forecast` (a stage run
again on a stored run), registered on the root app in ``adseg.cli``."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from adseg.cli.connect import _engine, _require_schema
from adseg.cli.console import err, out
from adseg.cli.errors import (
    EXIT_FAILED,
    EXIT_TEMPFAIL,
    STOPPED_RUN,
    STOPPED_STORED_RUN,
    CliError,
    _fail,
    _stopped_after_completion,
    handle_errors,
)
from adseg.cli.options import (
    RUN_ID,
    DatabaseUrl,
    EvalEnd,
    EvalStart,
    FuserOption,
    KsPartners,
    MinSamples,
    Quiet,
    RunSeed,
    Scheduler,
    Seed,
    SpendPrice,
    Supply,
    SupplyEngine,
    SupplyModel,
    TrainEnd,
    TrainStart,
    _check_scheduler,
    _forecast_options,
    _fuser_options,
)
from adseg.cli.output import _check_outputs, _counted, _pct, show_progress
from adseg.cli.report import _write_report
from adseg.interrupts import (
    Terminated,
    check_pending,
    error_text,
)


def _windows(engine, train_start, train_end, eval_start, eval_end):
    from adseg.app.inputs import default_windows
    from adseg.pipeline import Windows

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
    logging.getLogger("asyncio").setLevel(logging.WARNING)  # the engine's event loops


NightlyFusers = Annotated[
    list[str] | None,
    typer.Option(
        "--fuser",
        help="Fuser(s) to run (repeatable); default: every registered one, except lta and "
        "trce above 2,000 advertisers (their cost grows about with n³) and sccbg above 50,000.",
    ),
]
Primary = Annotated[str, typer.Option(help="The fuser whose segments are the product.")]
NightlySegments = Annotated[
    int | None,
    typer.Option(
        help="Number of segments of the model view and the fusers (default: the model "
        "view's by backtest on the training window, the fusers' the median cluster count "
        "of the KS views).",
        min=1,
    ),
]
PaperFusion = Annotated[
    bool,
    typer.Option(
        "--paper-fusion",
        help="Fuse the paper's views only, equally weighted (default: the model view too, "
        "each clustering weighted by its backtest score). The model view stays a source.",
    ),
]
Truth = Annotated[
    Path | None,
    typer.Option(help="truth.csv of a simulated marketplace: adds a 'truth' source."),
]
ReportHtml = Annotated[Path | None, typer.Option(help="Also write the HTML report to this file.")]
ReportJson = Annotated[Path | None, typer.Option(help="Also write the JSON report to this file.")]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")]


@handle_errors(stopped=STOPPED_RUN)
def nightly(
    train_start: TrainStart = None,
    train_end: TrainEnd = None,
    eval_start: EvalStart = None,
    eval_end: EvalEnd = None,
    fuser: NightlyFusers = None,
    primary: Primary = "rcc",
    fuser_option: FuserOption = None,
    segments: NightlySegments = None,
    paper_fusion: PaperFusion = False,
    supply: Supply = "both",
    supply_model: SupplyModel = "ses",
    supply_engine: SupplyEngine = "numpy",
    spend_price: SpendPrice = "cost",
    seed: Seed = 0,
    min_samples: MinSamples = 20,
    ks_partners: KsPartners = 1000,
    truth: Truth = None,
    report_html: ReportHtml = None,
    report_json: ReportJson = None,
    scheduler: Scheduler = None,
    database_url_: DatabaseUrl = None,
    quiet: Quiet = False,
    verbose: Verbose = False,
) -> None:
    """The nightly job: pull → views → model (backtest) → fuse → forecast → score → report.

    Exit codes: 0 done, 1 the run failed (recorded in its run row) or completed but a report
    file could not be written, 2 bad input, 75 another
    nightly run holds the lock, another process has held the SQLite database's write lock for
    30 s, the database server cannot be reached, turns the login away for now or goes away
    during the run, or the --scheduler cannot be reached (retry later),
    130 / 143 / 129 stopped by Ctrl-C / SIGTERM / SIGHUP, 141 the reader of a report written to
    standard output went away."""
    from adseg.pipeline import NightlyConfig

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
        ks_partners=ks_partners or None,
        truth_path=str(truth) if truth else None,
        fuser_options=options,
        paper_fusion=paper_fusion,
        scheduler=scheduler,
        **forecast_options,
    )
    config.fuser_names()  # validate names before taking the lock
    if truth is not None:
        _check_truth(engine, truth)
    _check_scheduler(scheduler)
    result = _run_nightly(engine, windows, config, reports, quiet)
    _finish_nightly(engine, result, windows, reports, quiet)


def _check_truth(engine, truth: Path) -> None:
    """Refuse (CliError, at the door: a bad file must not become a failed run) a --truth file
    that cannot be read or names none of the database's advertisers."""
    from adseg.pipeline import read_truth
    from adseg.store.load import known_advertiser_ids

    try:
        named = read_truth(truth)
    except (FileNotFoundError, ValueError) as exc:
        raise CliError(f"--truth: {exc}") from None
    if not named.index.isin(list(known_advertiser_ids(engine))).any():
        raise CliError(
            f"--truth: {truth} names none of the database's advertisers (is it the truth "
            "file of the marketplace this database was loaded from?)"
        )


def _run_nightly(engine, windows, config, reports: dict[str, Path | None], quiet: bool):
    """``run_nightly``, its failures turned into the command's line and exit code: 75 for a
    held lock, the stop's for a stop (a run completed before it stays), handle_errors' for a
    failed run (app.runs.RunFailed), bad data or an unwritable database, 1 for any other."""
    from adseg.app.nightly import run_nightly
    from adseg.app.runs import RunFailed
    from adseg.store.errors import DatabaseError
    from adseg.store.results import RunLockedError

    progress = (lambda stage: err.print(f"[dim]… {stage}[/dim]")) if show_progress(quiet) else None
    try:
        return run_nightly(engine, windows, config, progress)
    except RunLockedError as exc:
        _fail(str(exc), EXIT_TEMPFAIL)
    except (KeyboardInterrupt, Terminated) as exc:
        if (run_id := getattr(exc, "completed_run_id", None)) is None:
            raise  # the run is marked failed: handle_errors' line
        _stopped_after_completion(exc, run_id, reports, [])
    except (RunFailed, ValueError, OSError, DatabaseError):
        raise  # a failed run, bad data, a file, the database: handle_errors' line and code
    except Exception as exc:  # before the run row was written; the job needs a code and a line
        _fail(f"nightly run failed: {error_text(exc)}", EXIT_FAILED)


def _finish_nightly(engine, result, windows, reports: dict[str, Path | None], quiet: bool):
    """Print the run's tables (unless ``quiet``) and write each report file asked for that can
    be written, whatever the others; exit 1 naming those that could not (the run is stored)."""
    written: list[str] = []
    unwritten: list[str] = []
    try:
        if not quiet:
            print_nightly(result, windows)
        for fmt, path in reports.items():
            if path is None:
                continue
            if (problem := _write_nightly_report(engine, result.run_id, fmt, path)) is not None:
                unwritten.append(problem)
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


def _write_nightly_report(engine, run_id: int, fmt: str, path: Path) -> str | None:
    """Write run ``run_id``'s ``fmt`` report to ``path``; None when written, else the sentence
    saying it was not (with the command that writes it again)."""
    try:
        _write_report(engine, run_id, fmt, path)
    except BrokenPipeError:
        raise  # `--report-html /dev/stdout | head`: handle_errors ends quietly (141)
    except OSError as exc:  # checked at the door; a full disk can still happen
        again = f"adseg report --run {run_id} --format {fmt} -o {shlex.quote(str(path))}"
        return (
            f"the {fmt.upper()} report could not be written: {path}: {exc.strerror} "
            f"(`{again}` writes it again)"
        )
    return None


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
        # a zero actual has no percentage error: MAPE averages the others, and the table says
        # how many it left out rather than count them among its advertisers
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


@handle_errors(stopped=STOPPED_RUN)
def views_command(
    train_start: TrainStart = None,
    train_end: TrainEnd = None,
    eval_start: EvalStart = None,
    eval_end: EvalEnd = None,
    seed: Seed = 0,
    min_samples: MinSamples = 20,
    ks_partners: KsPartners = 1000,
    database_url_: DatabaseUrl = None,
    quiet: Quiet = False,
) -> None:
    """Build the base clusterings of every view for a window; print the paper's Tables 4 and 5.

    The clusterings are stored as a run of kind 'views' (for `adseg segment --run`). Table 4:
    clusters per view and α; Table 5: win-rate/eCPM consistency."""
    from adseg.app.restage import run_views
    from adseg.pipeline import NightlyConfig
    from adseg.store.results import RunLockedError
    from adseg.views import clusters_per_view, view_consistency

    engine = _engine(database_url_)
    _require_schema(engine)
    windows = _windows(engine, train_start, train_end, eval_start, eval_end)
    config = NightlyConfig(seed=seed, min_samples=min_samples, ks_partners=ks_partners or None)
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
    ``empty`` ("Table 4: no KS view was built …"), not headers over nothing (as `views` without
    its KS views would print)."""
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


@handle_errors(stopped=STOPPED_STORED_RUN)
def segment_command(
    run: Annotated[
        int, typer.Option("--run", help="Run whose base clusterings to fuse.", **RUN_ID)
    ],
    fuser: Annotated[
        list[str] | None,
        typer.Option(
            "--fuser",
            help="Fuser(s) (repeatable); default: every registered one, except lta and trce "
            "above 2,000 advertisers and sccbg above 50,000.",
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
    scheduler: Scheduler = None,
    database_url_: DatabaseUrl = None,
    quiet: Quiet = False,
) -> None:
    """Segment a run again from its stored base clusterings (other fusers, other K).

    Makes each fuser's consensus and the single-view sources (win_rate, ecpm, text) at the chosen
    number of segments; `adseg forecast --run` scores them."""
    from adseg.app.restage import run_segment
    from adseg.pipeline import NightlyConfig
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
        scheduler=scheduler,
    )
    config.fuser_names()
    _check_scheduler(scheduler)
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


@handle_errors(stopped=STOPPED_STORED_RUN)
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
    from adseg.app.restage import run_forecast
    from adseg.pipeline import NightlyConfig
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
