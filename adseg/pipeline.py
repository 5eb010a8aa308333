"""The nightly's stages as functions on frames and arrays (DESIGN.md §2), and what a run is
parameterised by:

views → model (+ backtest: K, weights, recommended source) → fuse → regenerate → forecast →
score. Nothing here opens the database: the pull, the run rows, the lock and the writes are the
app layer's (:mod:`adseg.app`: ``nightly`` runs these stages under a run row, ``restage`` runs
some of them again on a stored run).

* :class:`Windows`, :class:`NightlyConfig`: the training / evaluation windows and the options.
* :class:`PulledData`: what the pull reads (per advertiser: samples, description; delivery).
* :func:`build_views`, :func:`model_stage`, :func:`single_view_segmentations`,
  :func:`forecast`: the stages; :func:`read_truth` / :func:`truth_aris`: the simulator's truth.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from adseg.checks import header_columns
from adseg.consensus import (
    FUSERS,
    canonical_name,
    check_fuser_options,
    count_label_groups,
    describe_registered,
)
from adseg.forecast import FORECAST_CHOICES, evaluate_sources
from adseg.fusion import fuse, start_fusion
from adseg.interrupts import error_text
from adseg.metrics import ari
from adseg.model_stage import (
    BACKTEST_FUSERS,
    MODEL_SOURCE,
    Delivery,
    candidate_parts,
    choose_k,
    fit_model_view,
    weights_from_backtest,
)
from adseg.selection import Backtest, recommend

log = logging.getLogger("adseg.pipeline")

SINGLE_VIEW_SOURCES = {"win_rate": "win_rate", "ecpm": "ecpm_cost", "text": "text"}
"""Single-view segmentation sources → the view whose base clustering they use."""
PRIMARY_FUSER = "rcc"

DEFAULT_SET_MAX_ADVERTISERS = {"lta": 2000, "trce": 2000, "sccbg": 50_000}
"""Above this many advertisers the *default* fuser set leaves these fusers out, for the reason
:data:`DEFAULT_SET_WHY` gives (timings: docs/algorithms/pipeline.md). Naming them
(``--fuser lta``) runs them at any size; the primary fuser is never left out."""

DEFAULT_SET_WHY = {
    "lta": "its cost grows about with n³",
    "trce": "its cost grows about with n³",
    "sccbg": "it takes about 3 GiB and 3.5 CPU minutes at 100,000, more than the nightly's "
    "8 GiB budget holds beside the rest",
}
"""Why each fuser of :data:`DEFAULT_SET_MAX_ADVERTISERS` is left out above its limit."""

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
    # KS views: random partners per advertiser above this size (ViewConfig.ks_partners); None:
    # every pair compared at any size
    ks_partners: int | None = 1000
    truth_path: str | None = None
    blas_threads: int | None = 1
    n_jobs: int = field(default_factory=lambda: min(2, os.cpu_count() or 1))
    # a dask scheduler's address: the fusers run there (None: on this machine, n_jobs processes)
    scheduler: str | None = None
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
            "fuser %s left out of the default set: %d advertisers > %d (%s); name it with "
            "--fuser %s to run it anyway",
            name,
            n_advertisers,
            limits[name],
            DEFAULT_SET_WHY[name],
            name,
        )
    return [n for n in names if n not in left_out], left_out


def _unique_fusers() -> list[str]:
    return list(dict.fromkeys(map(canonical_name, FUSERS)))


# --- stages (pure functions on frames and arrays) ------------------------------------------


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


def require_window_data(windows: Windows, n_train_samples: int, n_eval_delivery: int) -> None:
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


def views_config(config: NightlyConfig):
    """The views' parameters of a run (a ``views.ViewConfig``)."""
    from adseg.views import ViewConfig

    return ViewConfig(
        alphas=tuple(config.alphas),
        min_samples=config.min_samples,
        ks_partners=config.ks_partners,
    )


ENGINE_MIN_N = 5000
"""From this many advertisers (or with a scheduler) a stage's independent parts, the views and
the model view's candidate fits, run as tasks of the execution engine; below it they take
seconds, less than starting the engine's workers."""


def engine_parts(config: NightlyConfig, n_advertisers: int):
    """The ``run_parts`` of a stage's independent parts: the execution engine's
    (``adseg.app.execution.part_runner``: on ``config.scheduler``, else on ``config.n_jobs``
    worker processes from :data:`ENGINE_MIN_N` advertisers), or None: in this process, in
    order. Either way the results are the same."""
    if not config.scheduler and not embedded_engine(config, n_advertisers):
        return None
    from adseg.app.execution import part_runner

    return part_runner(config.scheduler, config.n_jobs)


def engine_blocks(config: NightlyConfig, n_advertisers: int, prefetched: bool = False):
    """The ``block_parts`` of the views (a KS view's blocks and cuts): with a scheduler,
    ``adseg.app.execution.NestedParts`` (tasks of their own, for a cluster with more workers
    than a stage has tasks); else None: in the view's task, in turn. On the embedded engine
    the stage's tasks already fill its workers, and nesting made the 100,000 nightly slower
    and heavier (docs/algorithms/ks.md, "KS blocks"). The labels are the same either way.
    Those of ``prefetched`` views go after the stage's own tasks, before other prefetched
    ones. ``n_advertisers``: as :func:`engine_parts`."""
    if not config.scheduler or engine_parts(config, n_advertisers) is None:
        return None
    from adseg.app.execution import NESTED_PRIORITY, PREFETCH_PRIORITY, NestedParts

    return NestedParts(PREFETCH_PRIORITY // 2 if prefetched else NESTED_PRIORITY)


def embedded_engine(config: NightlyConfig, n_advertisers: int) -> bool:
    """Whether a run of ``n_advertisers`` runs its parts on an embedded cluster (no
    scheduler, ``n_jobs`` > 1, from :data:`ENGINE_MIN_N` advertisers)."""
    return not config.scheduler and config.n_jobs > 1 and n_advertisers >= ENGINE_MIN_N


def build_views(data: PulledData, config: NightlyConfig):
    """Stage 2: base clusterings of every view (KS graphs per α, text)."""
    from adseg.views import build_base_clusterings

    view_config = views_config(config)
    views = build_base_clusterings(
        data.win_samples,
        data.cost_samples,
        data.descriptions,
        config=view_config,
        random_state=config.seed,
        run_parts=engine_parts(config, len(data.advertiser_ids)),
        block_parts=engine_blocks(config, len(data.advertiser_ids)),
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
        check_n_segments(requested, n)
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


def check_n_segments(requested: int, n_advertisers: int) -> int:
    """``requested`` if it lies in 1..n_advertisers, else ValueError naming --segments."""
    if not 1 <= requested <= n_advertisers:
        raise ValueError(f"--segments must be between 1 and {n_advertisers}; got {requested}.")
    return requested


def forecast_choices(config: NightlyConfig) -> dict[str, str]:
    """The configuration's forecast options (forecast.FORECAST_CHOICES), by name."""
    return {name: getattr(config, name) for name in FORECAST_CHOICES}


def attach_excluded(labels: np.ndarray, samples: list[np.ndarray]) -> np.ndarray:
    """Give each advertiser left out of a KS view (label -1, too few samples) the segment whose
    pooled samples are closest to its own by the KS statistic; advertisers with no sample at all
    stay -1 (the forecast then uses the global c.d.f.).

    Cost: the excluded advertisers' distinct samples searched in each of the K sorted segment
    pools (``adseg.landscape.ks_statistic_against``); nothing (excluded + K)²."""
    from adseg.landscape import ks_statistic_against

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
    stats = ks_statistic_against([samples[i] for i in excluded], pools)
    nearest = np.argmin(stats, axis=1)
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
        **forecast_choices(config),
    )


# --- the model stage (model view, backtest, fusion weights, recommended source) --------------


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
    cap_scores: dict = {}  # a shared default, never mutated
    # the run's fuser fits started during the stage (fusion.start_fusion), by their number of
    # segments; for fuse(started=) when the fuse stage asks for that number
    started: dict = {}  # a shared default, never mutated


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


class Prefetched(NamedTuple):
    """The ``run_parts`` of the model stage's engine parts started early
    (:func:`prefetch_model_parts`); None: run when the stage gets to them."""

    model_fits: Callable | None = None  # the model view's candidate fits (choose_k)
    backtest_views: Callable | None = None  # the views on the backtest's first part


def prefetch_model_parts(data: PulledData, config: NightlyConfig) -> Prefetched:
    """Submit the model stage's engine parts that need only the pulled data, the model view's
    candidate fits and the backtest's views, at a priority below the views stage's: the engine
    runs them once it has no view left to build, while this process assembles the views and does
    its own share. Nothing is started when the run's parts run in this process or there is no
    backtest. The results are those of the stage's own calls (the same parts)."""
    n = len(data.advertiser_ids)
    runner = engine_parts(config, n)
    if runner is None or data.backtest is None:
        return Prefetched()
    from adseg.views import view_parts

    bt = data.backtest
    fits = candidate_parts(bt, n, config.n_segments, config.seed)
    blocks = engine_blocks(config, n, prefetched=True)
    parts = view_parts(
        bt.win_samples, bt.cost_samples, bt.descriptions, views_config(config), config.seed, blocks
    )
    if _same_texts(data):  # the run's text view is the backtest's (_text_from_run)
        parts = [part for part in parts if part[0] != "text"]
    return Prefetched(runner.prefetch(fits), runner.prefetch(parts))


def _same_texts(data: PulledData) -> bool:
    """Whether the backtest's descriptions are the run's: its text view, made from them alone
    with the same settings and seed, is then the run's text view."""
    return data.backtest is not None and list(data.backtest.descriptions) == list(data.descriptions)


def _text_from_run(views, run_parts) -> Callable:
    """A ``run_parts`` for the backtest's views that answers the text part with the run's text
    view (``views``' text columns: the same descriptions, settings and seed give the same
    result, not computed twice) and the others with ``run_parts`` (None: here, in order)."""
    from adseg.views import BaseClusterings

    text = views.columns.index[views.columns["view"] == "text"].to_numpy()
    run_text = BaseClusterings(
        views.labels[:, text], views.columns.loc[text].reset_index(drop=True)
    )

    def answered(parts) -> list:
        others = [part for part in parts if part[0] != "text"]
        if run_parts is None:
            results = iter([function(*args) for _, function, args in others])
        else:
            results = iter(run_parts(others))
        return [run_text if part[0] == "text" else next(results) for part in parts]

    return answered


def model_stage(
    data: PulledData,
    config: NightlyConfig,
    views,
    names: list[str],
    prefetched: Prefetched = Prefetched(),  # noqa: B008 - an immutable tuple
) -> ModelStage:
    """The model view (its K by backtest), the fusion weights learned on the backtest, and the
    recommended source: everything chosen inside the training window (adseg.selection). On the
    engine, the model view's fit runs while this process scores the backtest's clusterings."""
    requested = config.n_segments
    if data.backtest is not None:  # scored with the run's own forecast options
        data = replace(data, backtest=replace(data.backtest, spend_price=config.spend_price))
    fuser_k = choose_n_segments(views.columns, views.labels, requested)
    n = len(data.advertiser_ids)
    fits_runner = prefetched.model_fits or engine_parts(config, n)
    choices = choose_k(data.backtest, n, requested, config.seed, fits_runner)
    base = _BaseClusterings(views, choices.k, config, model_view_fit(data, config, choices))
    bt_views = prefetched.backtest_views or engine_parts(config, n)
    if _same_texts(data):
        bt_views = _text_from_run(views, bt_views)
    weights, scores = np.ones(base.n_columns), None
    primary = config.primary()
    recommended, reason, failed = primary, "no backtest: the primary fuser", []
    started = {}

    def start(weights):  # the run's fusers, fitted while the backtest's are fitted and scored
        labels = base.labels()
        k = fusion_segments(fuser_k, labels, weights, config)
        started[k] = start_fusion(
            labels,
            names,
            k,
            config.seed,
            config.n_jobs,
            config.fuser_options,
            weights,
            config.scheduler,
        )

    if choices.fit_labels is not None:
        try:
            weights, scores = _backtest_sources(
                data.backtest, config, names, choices, base.keys, bt_views, start
            )
            recommended, reason = recommend(scores)
        except ValueError as exc:
            base.raise_failed_fit()  # the model view's own error is not the backtest's
            started.clear()  # fitted with the weights just dropped: released
            failed.append(f"backtest failed ({error_text(exc)}): equal weights, primary fuser")
    labels, columns, model, notes = base.assembled()
    notes = notes + failed
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
        started,
    )


def model_view_fit(data: PulledData, config: NightlyConfig, choices) -> Callable:
    """A callable giving the model view's (labels, notes) (:func:`fit_model_view` on the
    training window at ``choices.k``): on the engine, started now, when the run has one and a
    backtest for this process to score meanwhile; else fitted here when called."""
    args = (
        data.win_samples,
        data.descriptions,
        choices.k,
        config.seed,
        Delivery.of(data.train_delivery, data.advertiser_ids),
        choices.delivery_cap,
    )
    runner = engine_parts(config, len(data.advertiser_ids))
    if runner is None or choices.fit_labels is None:
        return lambda: fit_model_view(*args)
    parts = [("model view", fit_model_view, args)]
    collect = runner.prefetch(parts)
    return lambda: collect(parts)[0]


class _BaseClusterings:
    """The run's base clusterings: the views' columns, then the model view's (unless the
    paper's fusion), whose labels come from ``fit`` (:func:`model_view_fit`) the first time
    they are asked for. ``keys`` (view, parameter) are known before: the backtest's weights
    need only them."""

    def __init__(self, views, k: int, config: NightlyConfig, fit: Callable):
        self.views, self.k, self.paper, self.fit = views, k, config.paper_fusion, fit
        self.keys = views.columns[["view", "parameter"]]
        if not self.paper:
            model_key = pd.DataFrame([{"view": MODEL_SOURCE, "parameter": f"K={k}"}])
            self.keys = pd.concat([self.keys, model_key], ignore_index=True)
        self.n_columns = len(self.keys)
        self._done, self._error = None, None

    def assembled(self) -> tuple:
        """(labels (n, m [+ 1]), columns frame, model labels (n,), the fit's notes)."""
        if self._error is not None:
            raise self._error
        if self._done is None:
            try:
                model, notes = self.fit()
            except Exception as exc:
                self._error = exc
                raise
            labels, columns = self.views.labels, self.views.columns
            if not self.paper:
                labels, columns = _with_model_column(labels, columns, model, self.k)
            self._done = (labels, columns, model, notes)
        return self._done

    def labels(self) -> np.ndarray:
        return self.assembled()[0]

    def raise_failed_fit(self) -> None:
        """Raise the model view's fit's error, if it failed."""
        if self._error is not None:
            raise self._error


def fusion_segments(fuser_k: int, labels: np.ndarray, weights, config: NightlyConfig) -> int:
    """The fusers' number of segments: ``fuser_k``, but no more than the groups of advertisers
    with distinct (weighted) base clusterings unless ``--segments`` asks (the model view may
    leave some of its K segments empty)."""
    if config.n_segments is not None:
        return fuser_k
    return min(fuser_k, count_label_groups(labels, weights)[0])


def view_sources(views, k: int, config, win_samples, cost_samples, model) -> dict:
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


def _backtest_sources(
    backtest: Backtest, config, names, choices, columns, views_runner=None, on_weights=None
):
    """(fusion weights of ``columns``, backtest scores by source): the views and the fusers
    that ``BACKTEST_FUSERS`` names are rebuilt on the backtest's first part and scored on its
    held-out days, each base clustering as a source of its own and every source besides.
    ``views_runner``: the views' ``run_parts`` (prefetched, or answering the text view from the
    run's), else the engine's.
    ``on_weights``: called with the weights as soon as they are known (from the base
    clusterings' scores, before the backtest's own fusers are fitted and scored)."""
    from adseg.views import build_base_clusterings

    bt = build_base_clusterings(
        backtest.win_samples,
        backtest.cost_samples,
        backtest.descriptions,
        config=views_config(config),
        random_state=config.seed,
        run_parts=views_runner or engine_parts(config, len(backtest.advertiser_ids)),
        block_parts=engine_blocks(config, len(backtest.advertiser_ids)),
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
    weights = np.ones(len(columns))
    if not config.paper_fusion:
        weights = weights_from_backtest(columns, bt_columns, keyed)
    if on_weights is not None:
        on_weights(weights)
    bt_k = choose_n_segments(bt.columns, bt.labels, None)
    if config.n_segments is not None:
        bt_k = config.n_segments
    sources = view_sources(
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
        scheduler=config.scheduler,
    )
    sources.update(fusion.segmentations)
    return weights, backtest.score(sources, random_state=config.seed)
