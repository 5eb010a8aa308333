"""The nightly pipeline (DESIGN.md §2) with run bookkeeping:

pull → views → model (+ backtest: K, weights, recommended source) → fuse → regenerate →
forecast → score → persist → report.

Each stage is a function; :func:`run_nightly` runs them under a run row and the nightly lock.
Results are written in one transaction per stage and become visible when the run completes.
On any error the run's partial results are deleted, the run is marked failed with the error, and
the exception propagates (the CLI turns it into a non-zero exit). Earlier runs are never touched.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from sqlalchemy import Engine
from threadpoolctl import threadpool_limits

from adseg import __version__
from adseg.checks import header_columns
from adseg.consensus import (
    FUSERS,
    canonical_name,
    check_fuser_options,
    count_label_groups,
    describe_registered,
)
from adseg.forecast import FORECAST_CHOICES, ForecastResult, evaluate_sources
from adseg.fusion import Fusion, fuse
from adseg.interrupts import (
    Terminated,
    check_pending,
    error_text,
    first_line,
    note_completed_run,
    signals_deferred,
)
from adseg.metrics import ari
from adseg.model_stage import (
    BACKTEST_FUSERS,
    MODEL_SOURCE,
    Delivery,
    backtest_split,
    choose_k,
    fit_model_view,
    make_backtest,
    weights_from_backtest,
)
from adseg.selection import Backtest, mape_by_band, recommend
from adseg.store import reads
from adseg.store import results as store

log = logging.getLogger("adseg.pipeline")

SINGLE_VIEW_SOURCES = {"win_rate": "win_rate", "ecpm": "ecpm_cost", "text": "text"}
"""Single-view segmentation sources → the view whose base clustering they use."""
PRIMARY_FUSER = "rcc"

DEFAULT_SET_MAX_ADVERTISERS = {"lta": 2000, "trce": 2000}
"""Above this many advertisers the *default* fuser set leaves these fusers out: their cost grows
about with the cube of n, from seconds at 1,268 advertisers to minutes or more at 5,000
(timings: docs/algorithms/pipeline.md). Naming
them (``--fuser lta``) runs them at any size; the primary fuser is never left out."""

Progress = Callable[[str], None]


@dataclass
class Windows:
    """Training and evaluation windows (inclusive dates)."""

    train_start: dt.date
    train_end: dt.date
    eval_start: dt.date
    eval_end: dt.date

    def validate(self) -> None:
        if self.train_start > self.train_end:
            raise ValueError(
                f"--train-start {self.train_start} is after --train-end {self.train_end}."
            )
        if self.eval_start > self.eval_end:
            raise ValueError(f"--eval-start {self.eval_start} is after --eval-end {self.eval_end}.")
        if self.eval_start <= self.train_end:
            raise ValueError(
                f"the evaluation window ({self.eval_start}..) must start after the training window "
                f"ends ({self.train_end})."
            )

    def as_columns(self) -> dict[str, dt.date]:
        return asdict(self)


@dataclass
class NightlyConfig:
    """Everything a run is parameterised by (recorded in the run row)."""

    fusers: tuple[str, ...] | None = None  # None = the default set (fusers_for_size)
    primary_fuser: str = PRIMARY_FUSER
    n_segments: int | None = None  # None = from the views' cluster counts (choose_n_segments)
    seed: int = 0
    supply: str = "both"
    supply_model: str = "ses"  # forecast supply: "ses", "mean" or "seasonal_naive"
    supply_engine: str = "numpy"  # the SES fits: "numpy" (all at once) or "statsmodels"
    spend_price: str = "cost"  # expected paid eCPM from the "cost" or the "market" samples
    methods: tuple[str, ...] = ("segment", "blended")
    alphas: tuple[float, ...] = (0.01, 0.05, 0.1)
    single_view_alpha: float = 0.05
    min_samples: int = 20
    truth_path: str | None = None
    blas_threads: int | None = 1
    n_jobs: int = field(default_factory=lambda: min(2, os.cpu_count() or 1))
    # {fuser: {parameter: value}}, constructor arguments beside n_clusters and random_state
    # (``--fuser-option rcc.normalize=true``), checked and keyed by canonical name on creation
    fuser_options: dict = field(default_factory=dict)
    # True: the fusers get the paper's views only, equally weighted (the model view stays a
    # source); False: the model view too, each clustering weighted by its backtest score
    paper_fusion: bool = False
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.fuser_options:
            self.fuser_options = check_fuser_options(self.fuser_options)

    def fuser_names(self) -> list[str]:
        """Registered fusers to run, the primary first if not named, each under its canonical
        name (``spcc`` is stored and reported as ``sccbg``: one fuser, one source name from run
        to run). Raises ValueError for an unknown name, one fuser named twice, or a fuser
        option for a fuser not among them."""
        names = list(dict.fromkeys(self.fusers)) if self.fusers else _unique_fusers()
        unknown = [n for n in names if n not in FUSERS]
        if unknown:
            raise ValueError(
                f"unknown fuser(s) {', '.join(unknown)}; registered: {describe_registered()}."
            )
        if self.primary_fuser not in FUSERS:
            raise ValueError(
                f"unknown primary fuser {self.primary_fuser!r}; registered: "
                f"{describe_registered()}."
            )
        if self.primary_fuser not in names:
            names.insert(0, self.primary_fuser)
        first = {}
        for name in names:  # an alias (spcc = sccbg) would run the same fuser twice
            if (other := first.setdefault(FUSERS[name], name)) != name:
                raise ValueError(
                    f"fusers {other} and {name} are the same fuser (one is an alias of the "
                    "other, or the --primary); name it once."
                )
        names = [canonical_name(name) for name in names]
        idle = [f for f in self.fuser_options if f not in names]
        if idle:  # a forgotten --fuser: options that change nothing must not pass in silence
            raise ValueError(
                f"--fuser-option for {', '.join(idle)}, which this command does not run "
                f"(it runs {', '.join(names)}): name it with --fuser too."
            )
        return names

    def primary(self) -> str:
        """The primary fuser's canonical name (:meth:`fuser_names` validates it)."""
        return canonical_name(self.primary_fuser)


def fusers_for_size(config: NightlyConfig, n_advertisers: int) -> tuple[list[str], list[str]]:
    """(fusers to run, fusers left out) for ``n_advertisers``: the configured list as given, or
    the default set minus the fusers over their DEFAULT_SET_MAX_ADVERTISERS limit."""
    names = config.fuser_names()
    if config.fusers:  # named by the user: run exactly those
        return names, []
    limits = DEFAULT_SET_MAX_ADVERTISERS
    left_out = [
        name
        for name in names
        if name != config.primary() and name in limits and n_advertisers > limits[name]
    ]
    for name in left_out:
        if name in config.fuser_options:
            log.warning("fuser %s is left out by size: its --fuser-option is not used", name)
        log.info(
            "fuser %s left out of the default set: %d advertisers > %d (its cost grows about "
            "with n³); name it with --fuser %s to run it anyway",
            name,
            n_advertisers,
            limits[name],
            name,
        )
    return [n for n in names if n not in left_out], left_out


def _unique_fusers() -> list[str]:
    return list(dict.fromkeys(map(canonical_name, FUSERS)))


def default_windows(engine: Engine, train_days: int = 7, eval_days: int = 7) -> Windows:
    """The last ``train_days + eval_days`` delivery days in the database, split train | eval.

    A database with fewer days (a pilot, a small sample) gets all of them, split in half — the
    earlier (larger) half trains — rather than a training window that lies before the data."""
    span = reads.delivery_date_range(engine)
    if span is None:
        raise ValueError("the database has no delivery rows: ingest data first (`adseg ingest`).")
    first, last = span
    available = (last - first).days + 1
    if available < 2:
        raise ValueError(
            f"the database has delivery for one day only ({last}); the nightly needs a training "
            "and an evaluation window: ingest at least two days."
        )
    if available < train_days + eval_days:
        eval_days = available // 2
        train_days = available - eval_days
    eval_start = last - dt.timedelta(days=eval_days - 1)
    train_end = eval_start - dt.timedelta(days=1)
    train_start = train_end - dt.timedelta(days=train_days - 1)
    return Windows(train_start, train_end, eval_start, last)


# --- stages (pure functions on frames/arrays, plus the pull) --------------------------------


@dataclass
class PulledData:
    advertiser_ids: np.ndarray
    names: pd.Series
    descriptions: list[str]
    win_samples: list[np.ndarray]
    cost_samples: list[np.ndarray]
    train_delivery: pd.DataFrame
    eval_delivery: pd.DataFrame
    n_left_out: int = 0  # advertisers in the database that ``pull(only=...)`` left out
    backtest: Backtest | None = None  # the training window split in time (model selection)


def pull(engine: Engine, windows: Windows, only: pd.Index | None = None) -> PulledData:
    """Stage 1: advertisers, training-window samples (one query), both windows' delivery, all
    read from one snapshot of the database (an ingest committing meanwhile is not half seen).
    ``only``: read just these advertisers (a stored run's own), counting the others left out."""
    with reads.snapshot(engine) as conn:
        adv = reads.advertisers(conn)
        if adv.empty:
            raise ValueError(_NO_ADVERTISERS)
        n_left_out = 0
        if only is not None:
            keep = adv["advertiser_id"].isin(only)
            n_left_out = int((~keep).sum())
            adv = adv[keep].reset_index(drop=True)
        ids = adv["advertiser_id"].to_numpy(dtype=object)
        win, cost = reads.price_samples(conn, ids, windows.train_start, windows.train_end)
        train = reads.delivery(conn, windows.train_start, windows.train_end)
        evaluation = reads.delivery(conn, windows.eval_start, windows.eval_end)
        split = backtest_split(windows.train_start, windows.train_end)
        if split is not None:
            fit_win, fit_cost = reads.price_samples(conn, ids, windows.train_start, split[0])
    if n_left_out:  # their delivery rows too
        train = train[train["advertiser_id"].isin(only)].reset_index(drop=True)
        evaluation = evaluation[evaluation["advertiser_id"].isin(only)].reset_index(drop=True)
    _require_window_data(windows, sum(len(s) for s in win), len(evaluation))
    texts = adv["description"].tolist()
    backtest = None
    if split is not None:
        backtest = make_backtest(fit_win, fit_cost, train, split[1], ids, texts)
    return PulledData(
        ids,
        adv.set_index("advertiser_id")["name"],
        texts,
        win,
        cost,
        train,
        evaluation,
        n_left_out,
        backtest,
    )


_NO_ADVERTISERS = "the database has no advertisers: ingest data first (`adseg ingest`)."


def check_run_inputs(engine: Engine, windows: Windows, config: NightlyConfig) -> None:
    """Refuse data that cannot make a run before its run row is written (three COUNT queries):
    no advertisers, no auction samples in the training window, no delivery in the evaluation
    window, or more --segments than advertisers. ``pull`` checks the data it reads again. Warns
    when the evaluation window ends after the data (one more query: the delivery dates)."""
    counts = reads.window_counts(
        engine, (windows.train_start, windows.train_end), (windows.eval_start, windows.eval_end)
    )
    if counts["advertisers"] == 0:
        raise ValueError(_NO_ADVERTISERS)
    if counts["advertisers"] == 1:
        raise ValueError(
            "the database has one advertiser; segmenting needs at least two (a KS view compares "
            "pairs): ingest the others first."
        )
    _require_window_data(windows, counts["train_auctions"], counts["eval_delivery"])
    last = reads.delivery_date_range(engine)[1]
    if windows.eval_end > last:  # given by hand: the report would name days it never scored
        warnings.warn(
            f"the evaluation window {windows.eval_start}..{windows.eval_end} ends after the "
            f"last delivery day in the database ({last}): only the days up to {last} are scored",
            stacklevel=2,
        )
    if config.n_segments is not None:
        _check_n_segments(config.n_segments, counts["advertisers"])


def _require_window_data(windows: Windows, n_train_samples: int, n_eval_delivery: int) -> None:
    """Raise ValueError naming the window when the evaluation window has no delivery rows or the
    training window no auction samples."""
    # without dates the windows are the last 14 calendar days of the data, which may lie in a gap
    other = (
        " (windows given by no dates are the last 14 calendar days of the delivery data, 7 + 7;"
        " choose others with --train-start/--train-end/--eval-start/--eval-end)"
    )
    if n_eval_delivery == 0:
        raise ValueError(
            f"no delivery rows in the evaluation window {windows.eval_start}..{windows.eval_end}"
            + other
        )
    if n_train_samples == 0:
        raise ValueError(
            f"no auction samples in the training window {windows.train_start}.."
            f"{windows.train_end}" + other
        )


def build_views(data: PulledData, config: NightlyConfig):
    """Stage 2: base clusterings of every view (KS graphs per α, text)."""
    from adseg.views import ViewConfig, build_base_clusterings

    view_config = ViewConfig(alphas=tuple(config.alphas), min_samples=config.min_samples)
    views = build_base_clusterings(
        data.win_samples,
        data.cost_samples,
        data.descriptions,
        config=view_config,
        random_state=config.seed,
    )
    if views.columns.empty:
        raise ValueError(
            f"no view could be built from the training window's {len(data.advertiser_ids):,} "
            f"advertiser(s): too few have ≥ {config.min_samples} win-rate or eCPM samples, or a "
            "usable description (see the warnings above); widen the training window or lower "
            "--min-samples"
        )
    return views


def choose_n_segments(columns: pd.DataFrame, labels: np.ndarray, requested: int | None) -> int:
    """The number of consensus segments: as requested, else the median cluster count of the
    KS-view base clusterings (the views that measure what the forecast uses); one segment when
    those views find no difference between advertisers. A requested count above the number of
    distinct label rows is refused naming --segments (no fuser can tell those advertisers apart;
    the median is never above it). Cost O(n m log n) for that count."""
    n = labels.shape[0]
    if requested is not None:
        _check_n_segments(requested, n)
        distinct, noted = count_label_groups(labels)
        if requested > distinct:
            raise ValueError(
                f"--segments {requested} is more than the base clusterings can tell apart: the "
                f"{n} advertisers fall in {distinct} group{'s' if distinct != 1 else ''} with "
                f"identical labels in every view{noted}; "
                f"ask for at most {distinct}."
            )
        return requested
    ks = columns[~columns["view"].isin(("text", MODEL_SOURCE))]["n_clusters"]
    k = int(np.median(ks)) if len(ks) else int(np.median(columns["n_clusters"]))
    return int(min(max(k, 1), n))


def _check_n_segments(requested: int, n_advertisers: int) -> int:
    """``requested`` if it lies in 1..n_advertisers, else ValueError naming --segments."""
    if not 1 <= requested <= n_advertisers:
        raise ValueError(f"--segments must be between 1 and {n_advertisers}; got {requested}.")
    return requested


def _forecast_choices(config: NightlyConfig) -> dict[str, str]:
    """The configuration's forecast options (forecast.FORECAST_CHOICES), by name."""
    return {name: getattr(config, name) for name in FORECAST_CHOICES}


def attach_excluded(labels: np.ndarray, samples: list[np.ndarray]) -> np.ndarray:
    """Give each advertiser left out of a KS view (label -1, too few samples) the segment whose
    pooled samples are closest to its own by the KS statistic; advertisers with no sample at all
    stay -1 (the forecast then uses the global c.d.f.).

    Cost: one KS matrix over (excluded advertisers + K segment pools) — small next to the view."""
    from adseg.landscape import ks_statistic_matrix

    out = labels.copy()
    sizes = np.array([len(s) for s in samples])
    excluded = np.flatnonzero((labels < 0) & (sizes > 0))
    segments = np.unique(labels[labels >= 0])
    if excluded.size == 0 or segments.size == 0:
        return out
    order = np.argsort(labels, kind="stable")
    starts = np.searchsorted(labels[order], segments)
    ends = np.searchsorted(labels[order], segments, side="right")
    pools = [
        np.concatenate([samples[i] for i in order[a:b]]) for a, b in zip(starts, ends, strict=True)
    ]
    stats = ks_statistic_matrix([samples[i] for i in excluded] + pools)
    nearest = np.argmin(stats[: excluded.size, excluded.size :], axis=1)
    out[excluded] = segments[nearest]
    return out


def single_view_segmentations(
    labels: np.ndarray,
    columns: pd.DataFrame,
    n_segments: int,
    alpha: float,
    samples: dict[str, list[np.ndarray]] | None = None,
) -> dict[str, np.ndarray]:
    """The paper's single-view sources: each KS view's clustering at ``alpha``; for text, the
    text clustering whose cluster count is closest to ``n_segments``. With ``samples`` (view →
    per-advertiser samples), advertisers left out of a KS view join their nearest segment
    (:func:`attach_excluded`), so a single-view source segments everyone it can."""
    out = {}
    for source, view in SINGLE_VIEW_SOURCES.items():
        cols = columns[columns["view"] == view]
        if cols.empty:
            continue
        if view == "text":
            j = int(cols.iloc[(cols["n_clusters"] - n_segments).abs().argsort().iloc[0]].name)
        else:
            match = cols[cols["parameter"].astype(str) == f"alpha={alpha:g}"]
            j = int((match if not match.empty else cols).index[0])
        column = labels[:, j]
        if samples is not None and view in samples:
            column = attach_excluded(column, samples[view])
        out[source] = column
    return out


def read_truth(path: str | Path) -> pd.Series:
    """A truth file (a simulator's truth.csv: advertiser_id, segment; other columns ignored) as
    advertiser_id → segment code (int, from 0). Segment values may be any text or numbers.

    Raises FileNotFoundError / ValueError naming the file (and the rows) when it is unusable."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"truth file {path} is a folder; give the truth.csv file.")
    if not path.is_file():
        raise FileNotFoundError(f"truth file {path} does not exist.")
    try:  # the header as a row: pandas would rename a repeated name ("segment.1") unseen
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, header=None)
    except (UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        reason = " ".join(str(exc).split())  # pandas' messages span lines: one line for the user
        raise ValueError(f"truth file {path}: cannot be read ({reason}).") from None
    names = [str(name).strip() for name in raw.iloc[0]]  # trimmed, as ingest trims its headers
    truth = raw.iloc[1:].set_axis(names, axis=1).reset_index(drop=True)
    missing, repeated = header_columns(names, ("advertiser_id", "segment"))
    if missing:
        raise ValueError(f"truth file {path}: missing column(s) {', '.join(missing)}.")
    if repeated:
        raise ValueError(
            f"truth file {path}: column(s) named twice in the header: {', '.join(repeated)}."
        )
    ids, segments = truth["advertiser_id"].str.strip(), truth["segment"].str.strip()
    for bad, rule in (
        ((ids == "") | (segments == ""), "empty advertiser_id or segment"),
        (ids.duplicated(keep="first"), "advertiser_id repeated"),
    ):
        if bad.any():
            rows = ", ".join(str(i + 1) for i in np.flatnonzero(bad.to_numpy())[:5])
            raise ValueError(f"truth file {path}: row(s) {rows}: {rule}.")
    codes, _ = pd.factorize(segments)
    return pd.Series(codes, index=ids.to_numpy(), name="segment")


def truth_segmentation(truth: pd.Series, advertiser_ids: np.ndarray) -> np.ndarray:
    """(n,) int64 true segment of each advertiser (``read_truth``'s codes); -1 if absent."""
    mapped = pd.Series(advertiser_ids).map(truth)
    return mapped.fillna(-1).to_numpy(dtype=np.int64)


def truth_aris(truth: np.ndarray, segmentations: dict[str, np.ndarray]) -> dict[str, float]:
    """Each source's adjusted Rand index against the true segments (4 decimals), over the
    advertisers the truth names (``truth`` ≥ 0; -1 = not named); arrays aligned by advertiser."""
    known = truth >= 0
    return {
        source: round(ari(truth[known], labels[known]), 4)
        for source, labels in segmentations.items()
        if source != "truth"
    }


def forecast(data: PulledData, segmentations: dict[str, np.ndarray], config: NightlyConfig):
    """Stages 6–8: regenerate segment c.d.f.s, forecast the evaluation window, score (MAPE)."""
    return evaluate_sources(
        data.win_samples,
        data.cost_samples,
        segmentations,
        data.train_delivery,
        data.eval_delivery,
        data.advertiser_ids,
        methods=config.methods,
        random_state=config.seed,
        **_forecast_choices(config),
    )


# --- the run -------------------------------------------------------------------------------


@dataclass
class NightlyResult:
    run_id: int
    result: ForecastResult
    timings: dict[str, float]
    n_segments: int
    clusters_per_view: pd.DataFrame
    consistency: pd.DataFrame
    truth_ari: dict[str, float]
    fusers_left_out: list[str] = field(default_factory=list)
    primary_fuser: str = PRIMARY_FUSER  # the source whose segments are the product
    recommended_source: str | None = None  # chosen by backtest (adseg.selection)
    recommendation_reason: str = ""
    mape_by_band: pd.DataFrame | None = None


@contextmanager
def _locked_run(
    engine: Engine,
    kind: str,
    windows: Windows,
    config: NightlyConfig,
    parameters: dict,
    timings: dict,
):
    """Take the nightly lock, create a 'running' run row and yield its id. On any error the run
    is marked failed (its partial results deleted) and the error re-raised with the run's id as
    its ``failed_run_id``; the lock is released. If the run cannot be marked failed (the server
    went away), the lock is left naming the run, so that the next run takes it over and fails
    the run then. Raises store.RunLockedError before writing anything if the lock is held.

    The block completes the run itself (:func:`_complete`) as its last write; the lock is
    released after that commit. An error or a stop that comes after it leaves the run completed,
    with its results, and is raised with the run's id as its ``completed_run_id`` (a stop also
    once this block is over: interrupts.note_completed_run); a crash between the two leaves a
    stale lock naming a completed run, which the next run takes over and leaves completed."""
    holder = run_id = None
    marked = True
    note_completed_run(None)
    try:
        check_pending()  # a stop whose exception was lost is honoured before anything is written
        # a stop signal waits until the lock is held and the run row exists and the lock names
        # it (one transaction): between them it left a lock or a 'running' run nothing cleared
        with signals_deferred():
            holder = store.acquire_lock(engine, "nightly")
            run_id = store.create_run(
                engine,
                kind,
                parameters=parameters,
                seed=config.seed,
                windows=windows.as_columns(),
                code_version=__version__,
                lock=("nightly", holder),
            )
        if orphans := store.fail_orphaned_runs(engine, exclude=run_id):
            log.warning("marked failed the runs no process finishes: %s", orphans)
        # one BLAS thread by default: on a shared machine, multi-threaded BLAS spin-waits and the
        # dense eigensolvers run up to 20× slower under load (docs/algorithms/pipeline.md)
        with threadpool_limits(limits=config.blas_threads):
            yield run_id
    except BaseException as exc:
        if run_id is not None:
            message = error_text(exc)
            if stage := getattr(exc, "stage", None):  # a stop: where it landed
                message += f" (during stage {stage})"
            log.debug("%s", traceback.format_exc())
            _free_frames(exc)
            status: list[str | None] = []
            marked = _cleanup(
                f"mark run {run_id} failed",
                lambda: status.append(store.fail_run(engine, run_id, message, timings)),
            )
            # the caller reports the error, and what became of the run: the database's word
            if status == ["completed"]:
                exc.completed_run_id = run_id
                log.info("run %s had completed (its results are kept): %s", run_id, message)
            else:
                exc.failed_run_id = run_id  # the CLI: exit 1, "run N failed", not "bad input"
                log.info("run %s failed: %s", run_id, message)
        raise
    finally:
        if holder is not None and marked:
            _cleanup(
                f"release the lock of run {run_id}",
                lambda: store.release_lock(engine, "nightly", holder),
            )
        elif holder is not None:  # this process no longer holds it: the next run takes it over
            store.forget_lock(engine, "nightly")


def _free_frames(exc: BaseException) -> None:
    """Clear the locals of the finished frames in ``exc``'s traceback (and in those of the
    exceptions it chains), before the clean-up writes: whatever only they held is freed now, not
    when the exception is. A stop that lands inside SQLAlchemy after the driver ran a statement
    but before its result is set up (an INSERT of the forecast stage) makes SQLAlchemy invalidate
    the connection, hard-closing it instead of rolling back; SQLite closes such a connection only
    once its statements are freed (sqlite3_close_v2), and its cursor was referenced from the
    traceback: its write transaction held the database, and marking the run failed waited out
    the busy timeout (30 s) and failed with 'database is locked', leaving the run 'running' and
    the lock held (2 stops in 46). The executing frames (the caller's) are left as they are."""
    pending, seen = [exc], set()
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        pending += [current.__cause__, current.__context__]


def _cleanup(what: str, step: Callable[[], None]) -> bool:
    """A clean-up step after a run ended, which must not replace the run's own error with its
    own: when the database server went away mid-run, marking the run failed fails too, and the
    user saw that second error without "run N failed". A lock and a run row left behind are
    taken over by the next run on this host (the process is gone) or cleared by `adseg db
    unlock`."""
    try:
        step()
    except Exception as exc:
        log.warning("could not %s: %s", what, error_text(exc))
        return False
    return True


def _parameters(config: NightlyConfig) -> dict:
    """The run row's parameters: the config, fuser names canonical (:meth:`fuser_names`)."""
    params = {k: v for k, v in asdict(config).items() if k != "extra"} | config.extra
    if config.primary_fuser in FUSERS:
        params["primary_fuser"] = config.primary()
    return params


def run_nightly(
    engine: Engine,
    windows: Windows | None = None,
    config: NightlyConfig | None = None,
    progress: Progress | None = None,
) -> NightlyResult:
    """Run the whole pipeline under the nightly lock; see the module docstring for guarantees.
    Raises store.RunLockedError if another nightly is running (nothing is written then)."""
    config = config or NightlyConfig()
    windows = windows or default_windows(engine)
    windows.validate()
    names = config.fuser_names()
    timings: dict[str, float] = {}
    params = _parameters(config) | {"fusers": names}
    check_run_inputs(engine, windows, config)
    with _locked_run(engine, "nightly", windows, config, params, timings) as run_id:
        return _run_stages(engine, run_id, windows, config, timings, progress)


@contextmanager
def _timed(timings: dict, stage: str, progress: Progress | None):
    """Time a stage into ``timings`` (seconds) and log it; announce it to ``progress``. A stop
    signal whose exception was lost stops the run here (interrupts.check_pending)."""
    check_pending()
    if progress:
        progress(stage)
    t0 = time.perf_counter()
    try:
        yield
    except (KeyboardInterrupt, Terminated) as exc:
        # a stop's text says nothing of where it landed: the run's row names the stage
        if not hasattr(exc, "stage"):
            exc.stage = stage
        raise
    check_pending()
    timings[stage] = round(time.perf_counter() - t0, 3)
    log.info("stage %s: %.1f s", stage, timings[stage])


class ModelStage(NamedTuple):
    """What the model stage decided (see :func:`model_stage`)."""

    k: int  # the model view's segments (by backtest)
    fuser_k: int  # the fusers' segments (--segments, else the KS views' median: the paper's)
    labels: np.ndarray  # (n, m + 1) base clusterings, the model view's last
    columns: pd.DataFrame
    model_labels: np.ndarray
    weights: np.ndarray  # (m + 1,) per-clustering fusion weights
    backtest: pd.DataFrame | None  # per source: backtest MAPEs and score
    recommended: str
    reason: str
    k_scores: dict
    notes: list
    delivery_cap: float = 0.0  # the cap on the delivery evidence (by backtest; 0: none)
    cap_scores: dict = {}  # noqa: RUF012 (a NamedTuple default, never mutated)


def _with_model_column(labels, columns, model, k: int):
    """Base clusterings with the model view's labels appended as a column of view "model"."""
    row = {
        "view": MODEL_SOURCE,
        "parameter": f"K={k}",
        "n_clusters": int(np.unique(model[model >= 0]).size),
        "n_excluded": int((model < 0).sum()),
        "seconds": np.nan,
    }
    frame = (
        pd.DataFrame([row])
        if columns.empty
        else pd.concat([columns, pd.DataFrame([row])], ignore_index=True)
    )
    return np.column_stack([labels, model]).astype(np.int64), frame


def model_stage(data: PulledData, config: NightlyConfig, views, names: list[str]) -> ModelStage:
    """The model view (its K by backtest), the fusion weights learned on the backtest, and the
    recommended source: everything chosen inside the training window (adseg.selection)."""
    requested = config.n_segments
    if data.backtest is not None:  # scored with the run's own forecast options
        data = replace(data, backtest=replace(data.backtest, spend_price=config.spend_price))
    fuser_k = choose_n_segments(views.columns, views.labels, requested)
    choices = choose_k(data.backtest, len(data.advertiser_ids), requested, config.seed)
    model, notes = fit_model_view(
        data.win_samples,
        data.descriptions,
        choices.k,
        config.seed,
        Delivery.of(data.train_delivery, data.advertiser_ids),
        choices.delivery_cap,
    )
    labels, columns = views.labels, views.columns
    if not config.paper_fusion:
        labels, columns = _with_model_column(labels, columns, model, choices.k)
    weights, scores = np.ones(labels.shape[1]), None
    primary = config.primary()
    recommended, reason = primary, "no backtest: the primary fuser"
    if choices.fit_labels is not None:
        try:
            weights, scores = _backtest_sources(data.backtest, config, names, choices, columns)
            recommended, reason = recommend(scores)
        except ValueError as exc:
            notes.append(f"backtest failed ({error_text(exc)}): equal weights, primary fuser")
    if any("did not converge" in n for n in notes):  # the paper's source, not a doubtful one
        recommended, reason = primary, "the model view did not converge: the primary fuser"
    log.info("recommended source: %s (%s)", recommended, reason)
    return ModelStage(
        choices.k,
        fuser_k,
        labels,
        columns,
        model,
        weights,
        scores,
        recommended,
        reason,
        choices.k_scores,
        choices.notes + notes,
        choices.delivery_cap,
        choices.cap_scores,
    )


def _view_sources(views, k: int, config, win_samples, cost_samples, model) -> dict:
    """The single-view sources (:func:`single_view_segmentations`) and the model view's."""
    sources = single_view_segmentations(
        views.labels,
        views.columns,
        k,
        config.single_view_alpha,
        {"win_rate": win_samples, "ecpm_cost": cost_samples},
    )
    sources[MODEL_SOURCE] = model
    return sources


def _backtest_sources(backtest: Backtest, config, names, choices, columns):
    """(fusion weights of ``columns``, backtest scores by source): the views and the fusers
    that ``BACKTEST_FUSERS`` names are rebuilt on the backtest's first part and scored on its
    held-out days, each base clustering as a source of its own and every source besides."""
    from adseg.views import ViewConfig, build_base_clusterings

    bt = build_base_clusterings(
        backtest.win_samples,
        backtest.cost_samples,
        backtest.descriptions,
        config=ViewConfig(alphas=tuple(config.alphas), min_samples=config.min_samples),
        random_state=config.seed,
    )
    bt_labels, bt_columns = _with_model_column(bt.labels, bt.columns, choices.fit_labels, choices.k)
    per_column = backtest.score(
        {f"column {j}": bt_labels[:, j] for j in range(bt_labels.shape[1])},
        random_state=config.seed,
    )["score"]
    keys = bt_columns["view"].astype(str) + "/" + bt_columns["parameter"].astype(str)
    keyed = pd.Series(
        per_column.reindex([f"column {j}" for j in range(len(keys))]).to_numpy(), index=keys
    )
    bt_k = choose_n_segments(bt.columns, bt.labels, None)
    if config.n_segments is not None:
        bt_k = config.n_segments
    sources = _view_sources(
        bt, bt_k, config, backtest.win_samples, backtest.cost_samples, choices.fit_labels
    )
    bt_weights = weights_from_backtest(bt_columns, bt_columns, keyed)
    if config.paper_fusion:  # the paper's views, equally weighted, as the run's fusers get them
        bt_labels, bt_weights = bt.labels, np.ones(bt.labels.shape[1])
    fusion = fuse(
        bt_labels,
        [f for f in names if f in BACKTEST_FUSERS],
        min(bt_k, count_label_groups(bt_labels, bt_weights)[0]),  # as the run's fusers
        config.seed,
        primary="",  # a fuser failing on the backtest is not a failed run
        n_jobs=config.n_jobs,
        options=config.fuser_options,
        weights=bt_weights,
    )
    sources.update(fusion.segmentations)
    scores = backtest.score(sources, random_state=config.seed)
    if config.paper_fusion:
        return np.ones(len(columns)), scores
    return weights_from_backtest(columns, bt_columns, keyed), scores


def _run_stages(engine, run_id, windows, config, timings, progress) -> NightlyResult:
    from adseg.views import clusters_per_view, view_consistency

    log.info(
        "run %s: train %s..%s, evaluate %s..%s",
        run_id,
        windows.train_start,
        windows.train_end,
        windows.eval_start,
        windows.eval_end,
    )
    with _timed(timings, "pull", progress):
        data = pull(engine, windows)
    log.info("pulled %s advertisers", f"{len(data.advertiser_ids):,}")
    with _timed(timings, "views", progress):
        views = build_views(data, config)
    names, left_out = fusers_for_size(config, views.labels.shape[0])
    with _timed(timings, "model", progress):
        chosen = model_stage(data, config, views, names)
        labels, columns = chosen.labels, chosen.columns
        store.write_base_clusterings(engine, run_id, data.advertiser_ids, labels, columns)
    n_segments = chosen.fuser_k
    if config.n_segments is None:  # the model view may leave some of its K segments empty
        n_segments = min(n_segments, count_label_groups(labels, chosen.weights)[0])
    log.info("fusing into %d segments with %s", n_segments, ", ".join(names))
    with _timed(timings, "fuse", progress):
        fusion = fuse(
            labels,
            names,
            n_segments,
            config.seed,
            config.primary(),
            progress,
            n_jobs=config.n_jobs,
            options=config.fuser_options,
            weights=chosen.weights,
        )
        segmentations = _view_sources(
            views, n_segments, config, data.win_samples, data.cost_samples, chosen.model_labels
        )
        segmentations.update(fusion.segmentations)
        if config.truth_path:
            named = read_truth(config.truth_path)
            truth = truth_segmentation(named, data.advertiser_ids)
            if (unknown := named.index[~named.index.isin(data.advertiser_ids)]).size:
                log.warning(
                    "truth file %s names %d advertiser(s) not in this run (e.g. %s): ignored",
                    config.truth_path,
                    unknown.size,
                    ", ".join(map(str, unknown[:3])),
                )
            if not (truth >= 0).any():
                raise ValueError(
                    f"truth file {config.truth_path} names none of the {truth.size:,} advertisers "
                    "of the training window."
                )
            if (missing := int((truth < 0).sum())) > 0:
                log.warning(
                    "truth file %s has no segment for %d of %d advertisers: the truth source "
                    "forecasts them from the global c.d.f. and the ARIs leave them out",
                    config.truth_path,
                    missing,
                    truth.size,
                )
            segmentations["truth"] = truth
        store.write_segments(engine, run_id, data.advertiser_ids, segmentations)
    with _timed(timings, "forecast", progress):
        result = forecast(data, segmentations, config)
        store.write_forecast_results(engine, run_id, result)
    truth_ari = {}
    if "truth" in segmentations:
        truth_ari = truth_aris(segmentations["truth"], segmentations)
    timings["total"] = round(sum(timings.values()), 3)
    timings["fusers"] = fusion.seconds
    counts = np.array([len(s) for s in data.win_samples])
    bands = mape_by_band(result.forecasts, data.advertiser_ids, counts)
    resolved = {
        "n_segments": n_segments,
        "fuser_errors": fusion.errors,
        "fuser_notes": fusion.notes,
        "truth_ari": truth_ari,
        "fusers_left_out": left_out,
        **_model_record(chosen, columns),
        "mape_by_band": bands.to_dict(orient="records"),
    }
    _complete(engine, run_id, timings, resolved)
    return NightlyResult(
        run_id,
        result,
        timings,
        n_segments,
        clusters_per_view(views),
        view_consistency(views),
        truth_ari,
        left_out,
        config.primary(),
        chosen.recommended,
        chosen.reason,
        bands,
    )


def _model_record(chosen: ModelStage, columns: pd.DataFrame) -> dict:
    """The run record of the model stage's choices (JSON-ready)."""
    backtest = None
    if chosen.backtest is not None:
        backtest = chosen.backtest.rename_axis("source").reset_index().to_dict(orient="records")
    return {
        "recommended_source": chosen.recommended,
        "recommendation_reason": chosen.reason,
        "model": {
            "k": chosen.k,
            "k_backtest": chosen.k_scores,
            "delivery_cap": chosen.delivery_cap,
            "delivery_cap_backtest": {f"{c:g}": v for c, v in chosen.cap_scores.items()},
            "notes": chosen.notes,
        },
        "column_weights": [
            {"view": str(v), "parameter": str(p), "weight": float(w)}
            for v, p, w in zip(columns["view"], columns["parameter"], chosen.weights, strict=True)
        ],
        "backtest": backtest,
    }


# --- single stages on an existing run (the CLI's views / segment / forecast) ------------------


def run_views(
    engine: Engine, windows: Windows, config: NightlyConfig, progress: Progress | None = None
):
    """Pull + views as a run of kind 'views' (under the nightly lock); returns (run_id, views)."""
    windows.validate()
    check_run_inputs(engine, windows, config)
    timings: dict[str, float] = {}
    with _locked_run(engine, "views", windows, config, _parameters(config), timings) as run_id:
        with _timed(timings, "pull", progress):
            data = pull(engine, windows)
        with _timed(timings, "views", progress):
            views = build_views(data, config)
            store.write_base_clusterings(
                engine, run_id, data.advertiser_ids, views.labels, views.columns
            )
        _complete(engine, run_id, timings)
        return run_id, views


def _complete(engine: Engine, run_id: int, timings: dict, resolved: dict | None = None) -> None:
    """Mark the run completed (store.complete_run), and note that for the stops that may come
    before the command has said so (interrupts.note_completed_run)."""
    store.complete_run(engine, run_id, timings, resolved)
    note_completed_run(run_id)


def _stage_on_run(engine: Engine, run_id: int, stage: str, work) -> dict:
    """Run ``work(run) -> (result, parameters, details)`` on an existing completed run under the
    nightly lock. ``work`` writes its own results in one transaction; ``parameters`` (None:
    unchanged) go into the run's parameters, and the command's time into its timings as
    ``"adseg <stage>": {"total": seconds, **details}`` (the latest such command; the timings of
    the run's own stages are kept)."""
    with _nightly_lock(engine):
        # read under the lock: a `db prune` between a read and the lock deleted the run (review)
        run = store.get_run(engine, run_id)
        if run["status"] != "completed":
            raise store.RunNotFoundError(f"run {run_id} is {run['status']}, not completed.")
        t0 = time.perf_counter()
        out, parameters, details = work(run)
        timings = dict(run["timings"])
        timings[f"adseg {stage}"] = {"total": round(time.perf_counter() - t0, 3), **details}
        store.set_timings(engine, run_id, timings, parameters)
        return out


@contextmanager
def _nightly_lock(engine: Engine):
    """Hold the nightly lock for the block (store.RunLockedError if another process holds it):
    the lock under which every run is made, remade or deleted."""
    holder = None
    try:
        check_pending()  # a stop whose exception was lost is honoured before anything is written
        with signals_deferred():  # a stop between taking the lock and `try` leaked the lock
            holder = store.acquire_lock(engine, "nightly")
        yield
    except BaseException as exc:
        _free_frames(exc)  # before releasing the lock: see _free_frames
        raise
    finally:
        if holder is not None:
            # what the block did is committed: a lock that cannot be released now (SQLite's
            # write lock held by another process beyond the busy timeout) must not turn that
            # into an error (e.g. `db prune` exiting 75, 'retry', after its deletion committed);
            # this host's next run takes it over
            _cleanup(
                "release the nightly lock (this host's next run takes it over)",
                lambda: store.release_lock(engine, "nightly", holder),
            )


def prune_runs(
    engine: Engine, keep: int, *, dry_run: bool = False, vacuum: bool = False
) -> tuple[store.Pruned, tuple[int, int, bool] | str | None]:
    """Delete the runs older than the ``keep`` newest reportable ones, with their results
    (:func:`adseg.store.results.prune_runs`), under the nightly lock so that no run being made
    or remade is touched; with ``vacuum``, then shrink a SQLite file under the same lock (a
    nightly starting meanwhile would wait beyond its busy timeout for the VACUUM's write lock).
    Returns (what was pruned, the VACUUM's (bytes before, after, blocked by a reader), or its
    error text — the prune is committed by then, so a failed VACUUM is no failed prune — or
    None when not asked or not SQLite). ``dry_run`` counts without the lock, deletes nothing."""
    if dry_run:
        return store.prune_runs(engine, keep, dry_run=True), None
    from sqlalchemy.exc import DatabaseError

    from adseg.store.engine import vacuum_sqlite

    with _nightly_lock(engine):
        pruned = store.prune_runs(engine, keep)
        shrunk: tuple[int, int, bool] | str | None = None
        if vacuum and engine.dialect.name == "sqlite":
            try:
                shrunk = vacuum_sqlite(engine)
            except DatabaseError as exc:  # SQLite's own words ("database is locked")
                shrunk = first_line(str(exc.orig or exc))
        return pruned, shrunk


def _run_windows(run: dict) -> Windows:
    """The windows a stored run was made with."""
    w = run["windows"]
    if None in w["eval"]:
        raise ValueError(f"run {run['run_id']} has no evaluation window.")
    return Windows(*(dt.date.fromisoformat(d) for d in (*w["train"], *w["eval"])))


def run_segment(
    engine: Engine, run_id: int, config: NightlyConfig, progress: Progress | None = None
) -> dict:
    """Segment a run again from its stored base clusterings: the fusers' consensus and the
    single-view sources (win_rate, ecpm, text), as the nightly makes them, at the chosen number of
    segments (by default the run's own: :func:`_segments_asked`). Those sources' segments are
    replaced and their forecasts and scores (made with the old segments) deleted;
    ``"unscored"`` in the result lists the sources that had some.

    The single-view sources attach advertisers left out of a KS view by their training-window
    samples (:func:`attach_excluded`), read again: one auction query over the training window.
    The run's parameters record the fusers and the resolved number of segments, as a nightly's do.
    """

    def work(run):
        stored = run["parameters"] or {}
        asked = replace(config, n_segments=_segments_asked(config, stored))
        ids, labels, columns = store.read_base_clusterings(engine, run_id)
        k = choose_n_segments(columns, labels, asked.n_segments)
        names, left_out = fusers_for_size(config, labels.shape[0])
        fusion = fuse(
            labels,
            names,
            k,
            config.seed,
            config.primary(),
            progress,
            options=config.fuser_options,
            weights=_stored_weights(stored, columns),
        )
        fused, errors = fusion.segmentations, fusion.errors
        train_start, train_end = (dt.date.fromisoformat(d) for d in run["windows"]["train"])
        win, cost = reads.price_samples(engine, ids, train_start, train_end)
        segmentations = single_view_segmentations(
            labels, columns, k, config.single_view_alpha, {"win_rate": win, "ecpm_cost": cost}
        )
        segmentations.update(fused)
        # a fuser that failed keeps no segments from before (the nightly leaves it out too), and
        # one a run stored under an alias (spcc, before names were made canonical) is remade
        # under its canonical name: neither may be scored beside the new segments
        aliases = [
            f
            for f in stored.get("fusers") or []
            if f in FUSERS and f != canonical_name(f) and canonical_name(f) in fused
        ]
        dropped = [*errors, *aliases]
        had = set(store.read_segments(engine, run_id, list(errors)))  # failed, and had segments
        unscored = store.write_segments(engine, run_id, ids, segmentations, drop=dropped)
        truth = store.read_segments(engine, run_id, ["truth"]).get("truth")
        new_aris = {}
        if truth is not None:  # the nightly's --truth: score the new segments against it too
            truth = truth.reindex(ids).fillna(-1).to_numpy(dtype=np.int64)
            new_aris = truth_aris(truth, segmentations)
        parameters = _segment_parameters(
            stored,
            asked,
            list(fused),
            k,
            dropped=dropped,
            truth_ari=new_aris,
            fusion=fusion,
            ran=names,
        )
        parameters["resolved"]["fusers_left_out"] = left_out
        # the bands of replaced or dropped segments described scores that are gone
        gone = set(segmentations) | set(dropped)
        parameters["resolved"]["mape_by_band"] = [
            row
            for row in parameters["resolved"].get("mape_by_band") or []
            if row.get("source") not in gone
        ]
        out = {
            "segments": fused,
            "single_view": {s: v for s, v in segmentations.items() if s not in fused},
            "n_segments": k,
            "errors": errors,
            "left_out": left_out,
            "unscored": unscored,
            "dropped": [d for d in errors if d in had],
        }
        return out, parameters, {"fusers": fusion.seconds}

    return _stage_on_run(engine, run_id, "segment", work)


def _stored_weights(stored: dict, columns: pd.DataFrame) -> np.ndarray | None:
    """The fusion weights the run's nightly learned (its backtest), for its stored base
    clusterings; None (equal weights) for a run made before them."""
    rows = (stored.get("resolved") or {}).get("column_weights") or []
    if len(rows) != len(columns):
        return None
    return np.array([float(r["weight"]) for r in rows])


def _segments_asked(config: NightlyConfig, stored: dict) -> int | None:
    """The number of segments `adseg segment` asks for: ``config.n_segments`` when given, else
    the one the run's parameters record as asked (its nightly's --segments, or the last
    segment's), else the number its nightly chose (by backtest), else None (the views'
    median). Without this a nightly made with --segments 4 was re-segmented at the median and
    lost its 4 from the record."""
    if config.n_segments is not None:
        return config.n_segments
    recorded = stored.get("n_segments")
    if recorded is None:
        recorded = (stored.get("resolved") or {}).get("n_segments")
    return None if recorded is None else int(recorded)


def _segment_parameters(
    stored: dict,
    config: NightlyConfig,
    fused: list[str],
    k: int,
    *,
    dropped: Sequence[str] = (),
    truth_ari: dict[str, float] | None = None,
    fusion: Fusion | None = None,
    ran: Sequence[str] = (),
) -> dict:
    """A run's parameters after ``adseg segment``: the fusers whose segments it now holds (those
    kept from before, then the new; a source stored under an alias of a remade fuser is gone), a
    primary fuser among them, the new number of segments (and the K each fuser was asked for in
    ``resolved.n_segments_by_fuser``: a fuser not re-run keeps its K, one in ``dropped`` has
    none); the truth ARIs of the replaced and dropped segmentations are replaced by
    ``truth_ari`` (the new segments' own, when the run has a truth segmentation); so are the
    errors and notes (``resolved.fuser_errors`` / ``fuser_notes``) of the fusers ``ran`` now, by
    ``fusion``'s, while those of fusers not re-run still describe the segments they kept; so are
    their ``fuser_options``."""
    renamed = {f: canonical_name(f) for f in dropped if f in FUSERS and f != canonical_name(f)}
    fusers = list(dict.fromkeys([*(renamed.get(f, f) for f in stored.get("fusers") or []), *fused]))
    primary = renamed.get(stored.get("primary_fuser"), stored.get("primary_fuser"))
    resolved = dict(stored.get("resolved") or {})
    # each fuser's K: fusers not re-run keep the segments (and K) they had
    by_fuser = resolved.get("n_segments_by_fuser") or dict.fromkeys(
        stored.get("fusers") or [], resolved.get("n_segments")
    )
    gone = set(dropped)
    by_fuser = {f: n for f, n in by_fuser.items() if f not in gone}
    resolved["n_segments_by_fuser"] = by_fuser | dict.fromkeys(fused, k)
    if resolved.get("truth_ari") or truth_ari:
        replaced = set(fused) | set(SINGLE_VIEW_SOURCES) | gone
        kept = {s: v for s, v in (resolved.get("truth_ari") or {}).items() if s not in replaced}
        resolved["truth_ari"] = kept | (truth_ari or {})
    redone = set(ran) | gone
    for key, new in (
        ("fuser_errors", fusion.errors if fusion else {}),
        ("fuser_notes", fusion.notes if fusion else {}),
    ):
        kept = {f: v for f, v in (resolved.get(key) or {}).items() if f not in redone}
        resolved[key] = kept | new
    # each fuser's options: those it now ran with, or those of the run that made its segments
    options = {f: v for f, v in (stored.get("fuser_options") or {}).items() if f not in redone}
    options |= {f: v for f, v in config.fuser_options.items() if f in redone}
    resolved |= _revisited_recommendation(resolved, set(fused), gone, k)
    return {
        "fusers": fusers,
        "fuser_options": options,
        "primary_fuser": primary if primary in fusers and primary not in gone else config.primary(),
        "n_segments": config.n_segments,
        "segment_seed": config.seed,  # the run's "seed" made its views
        "resolved": resolved | {"n_segments": k},
    }


def _revisited_recommendation(resolved: dict, remade: set, gone: set, k: int) -> dict:
    """The recommendation after ``adseg segment``: the backtest judged the segments the nightly
    made, so a recommended fuser whose segments are remade says so, and one that is dropped
    is no longer recommended (the report then leads with the primary fuser)."""
    source = resolved.get("recommended_source")
    if source in gone:
        return {
            "recommended_source": None,
            "recommendation_reason": f"the backtest chose {source}, which `adseg segment` dropped",
        }
    if source in remade:
        reason = str(resolved.get("recommendation_reason") or "").split("; its segments were")[0]
        return {
            "recommendation_reason": f"{reason}; its segments were remade by `adseg segment` "
            f"(K = {k}) after the backtest chose it"
        }
    return {}


def run_forecast(engine: Engine, run_id: int, config: NightlyConfig):
    """Regenerate, forecast and score every stored segmentation of a run (replacing results).

    Only the run's own advertisers (those its segmentations cover) are forecast: one ingested
    since the run was made would be scored under every source as "in no segment", so the MAPEs
    would move and the report count more advertisers than the run segmented. Such
    advertisers are left out with a warning."""

    def work(run):
        stored = store.read_segments(engine, run_id)
        if not stored:
            raise ValueError(
                f"run {run_id} has no segments yet (run `adseg segment --run {run_id}`)."
            )
        own = pd.Index(set().union(*(seg.index for seg in stored.values())))
        data = pull(engine, _run_windows(run), only=own)
        if newer := data.n_left_out:
            warnings.warn(
                f"{newer:,} advertiser{'s' if newer != 1 else ''} ingested since run {run_id} "
                "was made left out of its forecasts (a new `adseg nightly` includes them)",
                stacklevel=2,
            )
        segmentations = {  # in the nightly's order, so the tables print as the nightly's do
            src: stored[src].reindex(data.advertiser_ids).fillna(-1).to_numpy(dtype=np.int64)
            for src in sorted(stored, key=_source_position(run))
        }
        result = forecast(data, segmentations, config)
        store.write_forecast_results(engine, run_id, result)
        # the bands of the new scores: the nightly's described forecasts that are now replaced
        counts = np.array([len(s) for s in data.win_samples])
        bands = mape_by_band(result.forecasts, data.advertiser_ids, counts)
        resolved = dict((run["parameters"] or {}).get("resolved") or {})
        resolved["mape_by_band"] = bands.to_dict(orient="records")
        parameters = _forecast_choices(config) | {"forecast_seed": config.seed}
        return result, parameters | {"resolved": resolved}, {}

    return _stage_on_run(engine, run_id, "forecast", work)


# --- reports -------------------------------------------------------------------------------


def _source_position(run: dict):
    """A sort key putting sources in the order the nightly prints them: the single views, the
    run's fusers, then truth, own, global and any other (alphabetically)."""
    fusers = list((run.get("parameters") or {}).get("fusers") or [])
    order = [*SINGLE_VIEW_SOURCES, MODEL_SOURCE, *fusers, "truth", "own", "global"]
    rank = {s: i for i, s in enumerate(dict.fromkeys(order))}
    return lambda source: (rank.get(source, len(rank)), source)


def _in_source_order(frame: pd.DataFrame, run: dict) -> pd.DataFrame:
    """``frame``'s rows with its sources in the nightly's order (:func:`_source_position`)."""
    position = frame["source"].map(_source_position(run))
    ordered = frame.assign(_position=position).sort_values("_position", kind="stable")
    return ordered.drop(columns="_position").reset_index(drop=True)


def load_report_data(engine: Engine, run_id: int):
    """Everything a report of run ``run_id`` shows, read back from the store. Only completed runs
    are reported (a running or failed run has no visible results)."""
    # one snapshot: read table by table, a report raced by `db prune` could show the run as
    # completed with no results, and one raced by `forecast --run` could mix old and new
    with reads.snapshot(engine) as conn:
        return _report_data(conn, run_id)


def _report_data(conn, run_id: int):
    """:func:`load_report_data`'s reads, on one connection (a snapshot)."""
    from adseg.report import ReportData
    from adseg.views import BaseClusterings, clusters_per_view, view_consistency

    run = store.get_run(conn, run_id)
    if run["status"] != "completed":
        raise store.RunNotFoundError(
            f"run {run_id} is {run['status']}"
            + (f" ({run['error']})" if run.get("error") else "")
            + "; only completed runs have a report."
        )
    saved = store.read_forecast_results(conn, run_id)
    segments = store.read_segments(conn, run_id)
    sizes = (
        pd.concat(
            [
                seg.value_counts()
                .rename_axis("segment")
                .reset_index(name="n_advertisers")
                .assign(source=src)
                for src, seg in segments.items()
            ],
            ignore_index=True,
        )
        if segments
        else None
    )
    views = None
    try:
        ids, labels, columns = store.read_base_clusterings(conn, run_id)
        columns = columns.copy()
        alpha = columns["parameter"].str.extract(r"alpha=([0-9.eE+-]+)")[0]
        columns["alpha"] = pd.to_numeric(alpha, errors="coerce")
        views = BaseClusterings(labels, columns)
    except store.RunNotFoundError:
        pass
    names = reads.advertisers(conn).set_index("advertiser_id")["name"].to_dict()
    kwargs = {}
    if sizes is not None:
        kwargs["segment_sizes"] = _in_source_order(
            sizes[["source", "segment", "n_advertisers"]], run
        )
    return ReportData(
        run=run,
        mape=_in_source_order(saved["mape"], run),
        segment_cdfs=saved["segment_cdfs"],
        forecasts=saved["forecasts"],
        consistency=None if views is None else view_consistency(views),
        clusters_per_view=None if views is None else clusters_per_view(views),
        advertiser_names=names,
        **kwargs,
    )
