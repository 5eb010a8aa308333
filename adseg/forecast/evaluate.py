"""Forecast the evaluation window under every segmentation source and score it (MAPE)."""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from adseg.forecast.blend import Landscape, expected_cost
from adseg.forecast.ecdf import SampleSet, _compact_labels, _label_values
from adseg.forecast.frames import _as_ids, _check_delivery, _dates
from adseg.forecast.kappa import DEFAULT_KAPPA_GRID, KappaSelector
from adseg.forecast.supply import FORECAST_CHOICES, supply_for_rows
from adseg.metrics import mape_with_count
from adseg.units import MICROS

KINDS = ("win", "cost")


def reference_segmentations(n: int) -> dict[str, np.ndarray]:
    """The two references: ``own`` (every advertiser its own segment, i.e. no segmentation) and
    ``global`` (all advertisers in one segment)."""
    return {"own": np.arange(n, dtype=np.int64), "global": np.zeros(n, dtype=np.int64)}


# --------------------------------------------------------------------------------------------
# Forecast and score
# --------------------------------------------------------------------------------------------


@dataclass
class ForecastResult:
    """What :func:`evaluate_sources` returns (plain frames, ready to persist or report).

    forecasts : one row per (source, method, supply_mode, advertiser) with eval delivery —
        advertiser_id, source, method, supply_mode, impressions_forecast, impressions_actual,
        spend_forecast, spend_actual (window totals; spend in currency units).
    mape : one row per (source, supply_mode, method) — source, supply_mode, method,
        impressions_mape, spend_mape (fractions: 0.16 = 16%; NaN if every actual is zero),
        n_advertisers (scored, i.e. with a forecast and eval delivery), n_zero_impressions,
        n_zero_spend (zero actuals left out of the MAPE), n_segments, kappa_win, kappa_cost
        (NaN for method "segment"), n_missing_forecast (no supply forecast: no training delivery).
    segment_cdfs : source, segment (the label value), kind ("win" | "cost"), bid, cdf — each
        segment's pooled c.d.f. on a common bid grid per kind (reference "own" left out).
    segment_sizes : source, segment, n_advertisers, n_win_samples, n_cost_samples.
    kappa : source, kind, kappa, loss_own (κ=0), loss_segment (κ=∞), loss_best — the held-out
        c.d.f. errors of the training-window split behind each κ.
    supply : advertiser_id, alpha, level, mean, n_days of the supply forecast (None if unused).
    timings : seconds per stage.
    parameters : the evaluation's settings (supply, methods, kappa, supply_model, supply_engine,
        spend_price, cdf_grid_size, random_state), for the run record.
    """

    forecasts: pd.DataFrame
    mape: pd.DataFrame
    segment_cdfs: pd.DataFrame
    segment_sizes: pd.DataFrame
    kappa: pd.DataFrame
    supply: pd.DataFrame | None
    timings: dict[str, float]
    parameters: dict = field(default_factory=dict)


def segment_sizes(
    win: SampleSet, cost: SampleSet, segments: ArrayLike, source: str = ""
) -> pd.DataFrame:
    """Per segment label: number of advertisers and of pooled win / cost samples. ``win`` and
    ``cost`` must hold the same n advertisers."""
    if win.n_owners != cost.n_owners:
        raise ValueError(
            f"win and cost must hold the same advertisers; got {win.n_owners} and "
            f"{cost.n_owners} sample arrays."
        )
    codes, k = _compact_labels(segments, win.n_owners)
    has = codes >= 0
    return pd.DataFrame(
        {
            "source": source,
            "segment": _label_values(segments),
            "n_advertisers": np.bincount(codes[has], minlength=k),
            "n_win_samples": np.bincount(codes[has], weights=win.counts[has], minlength=k).astype(
                np.int64
            ),
            "n_cost_samples": np.bincount(codes[has], weights=cost.counts[has], minlength=k).astype(
                np.int64
            ),
        }
    )


def cdf_grid(samples: SampleSet, size: int = 101, upper_quantile: float = 0.995) -> np.ndarray:
    """Bid grid for tabulating c.d.f.s: ``size`` points from 0 to the largest advertiser's
    ``upper_quantile`` among the advertisers whose price scale is typical: on the log scale,
    within 5 scaled MADs of the advertisers' median. The far tail is dropped so that a few
    outliers do not flatten every plot; the quantile of all samples pooled does not do that when
    the outliers are advertisers with many samples (two of 120 logging prices ×1000, a unit
    error, would put the top about 1,000× above the median price, and every curve at 0.99 by
    the first grid step). O(N log N) for N samples (one sort)."""
    has = samples.counts > 0
    if not has.any():
        return np.linspace(0.0, 1.0, size)
    order = np.lexsort((samples.values, samples.owner))  # by advertiser, then by value
    starts = (np.cumsum(samples.counts) - samples.counts)[has]
    at = starts + np.floor(upper_quantile * (samples.counts[has] - 1)).astype(np.int64)
    tops = samples.values[order][at]  # each advertiser's upper_quantile (lower order statistic)
    tops = tops[tops > 0]
    if tops.size == 0:
        return np.linspace(0.0, 1.0, size)
    logs = np.log(tops)
    centre = np.median(logs)
    spread = 1.4826 * np.median(np.abs(logs - centre))
    typical = tops[np.abs(logs - centre) <= 5.0 * spread + 1e-12]
    return np.linspace(0.0, float(typical.max()), size)


def segment_cdf_table(
    samples: SampleSet, segments: ArrayLike, grid: ArrayLike, *, kind: str, source: str = ""
) -> pd.DataFrame:
    """Tidy table of each segment's pooled c.d.f. on ``grid``: source, segment, kind, bid, cdf.
    Segments without samples of this kind are left out. Size K · len(grid) rows."""
    codes, k = _compact_labels(segments, samples.n_owners)
    ecdf = samples.pool(codes, k)
    grid = np.asarray(grid, dtype=np.float64)
    tab = ecdf.tabulate(grid)
    keep = ecdf.counts > 0
    labels = _label_values(segments)[keep]
    return pd.DataFrame(
        {
            "source": source,
            "segment": np.repeat(labels, grid.size),
            "kind": kind,
            "bid": np.tile(grid, labels.size),
            "cdf": tab[keep].ravel(),
        }
    )


def score_forecasts(forecasts: pd.DataFrame) -> pd.DataFrame:
    """MAPE of impressions and spend per (source, supply_mode, method) of a forecasts frame
    (columns as in :class:`ForecastResult`). Rows with a NaN (non-finite) impressions or spend
    forecast — forecasts adseg could not make, e.g. no supply history with supply "forecast" — are
    left out of both MAPEs and counted in n_missing_forecast (``mape_with_count`` itself refuses
    NaN); zero actuals are left out by ``mape_with_count`` and counted."""
    rows = []
    for (src, mode, meth), g in forecasts.groupby(
        ["source", "supply_mode", "method"], sort=False
    ):  # loop over sources, not advertisers
        ok = np.isfinite(g["impressions_forecast"].to_numpy(np.float64)) & np.isfinite(
            g["spend_forecast"].to_numpy(np.float64)
        )
        g = g[ok]
        imp_mape, imp_zero = _safe_mape(g["impressions_actual"], g["impressions_forecast"])
        sp_mape, sp_zero = _safe_mape(g["spend_actual"], g["spend_forecast"])
        rows.append(
            {
                "source": src,
                "supply_mode": mode,
                "method": meth,
                "impressions_mape": imp_mape,
                "spend_mape": sp_mape,
                "n_advertisers": int(len(g)),
                "n_zero_impressions": imp_zero,
                "n_zero_spend": sp_zero,
                "n_missing_forecast": int((~ok).sum()),
            }
        )
    return pd.DataFrame(rows)


def _safe_mape(y, y_hat) -> tuple[float, int]:
    y = np.asarray(y, dtype=np.float64)
    if y.size == 0 or not np.any(y != 0):
        return math.nan, int(np.sum(y == 0))
    return mape_with_count(y, np.asarray(y_hat, dtype=np.float64))


def evaluate_sources(
    win_samples: Sequence[ArrayLike],
    cost_samples: Sequence[ArrayLike],
    segmentations: Mapping[str, ArrayLike],
    train_delivery: pd.DataFrame | None,
    eval_delivery: pd.DataFrame,
    advertiser_ids: ArrayLike,
    *,
    supply: Literal["actual", "forecast", "both"] = "actual",
    methods: Sequence[str] = ("segment", "blended"),
    kappa: float | Literal["cv"] = "cv",
    kappa_grid: ArrayLike = DEFAULT_KAPPA_GRID,
    add_references: bool = True,
    supply_model: Literal["ses", "mean", "seasonal_naive"] = "ses",
    supply_engine: Literal["numpy", "statsmodels"] = "numpy",
    spend_price: Literal["cost", "market"] = "cost",
    cdf_grid_size: int = 101,
    random_state=0,
) -> ForecastResult:
    """Forecast the evaluation window's impressions and spend under every segmentation source and
    score them (pipeline steps 6–8).

    Parameters
    ----------
    win_samples, cost_samples : n 1-D arrays each, in ``advertiser_ids`` order: training-window
        market prices (eCPM) and paid eCPM of won auctions. Empty arrays allowed.
    segmentations : source name → (n,) int labels (-1 = advertiser in no segment → global c.d.f.).
    train_delivery : training-window delivery (advertiser_id, date, bid_requests, bid_ecpm, ...);
        needed for ``supply`` "forecast"/"both"; also gives each advertiser's median training bid
        as an extra point of the κ selection. May be None for ``supply="actual"``.
    eval_delivery : evaluation-window delivery, one row per (advertiser_id, date) with
        bid_requests, bid_ecpm, impressions, spend (currency; whole micros, as stored: the
        actual totals are summed in micros, exactly). Only advertisers with rows are forecast.
    advertiser_ids : (n,) unique ids; the order of the sample lists and segmentations.
    supply : "actual" (the window's bid requests), "forecast" (from train_delivery), "both".
    supply_model : the "forecast" supply: "ses" (default), "mean", "seasonal_naive" — see
        :func:`supply_for_rows`. supply_engine : "numpy" or "statsmodels" for "ses".
    spend_price : expected paid eCPM at the bid from the eCPM-cost samples ("cost", the paper's
        eCPM cost c.d.f.; default) or from the market-price samples ("market": E[price | price ≤
        bid], the second-price charge — not censored at each advertiser's own historical bid,
        which the cost samples are: they exist only for auctions won at that bid).
    methods : any of "segment" (the paper: segment c.d.f. only) and "blended" (empirical Bayes).
    kappa : "cv" (per source and kind by :func:`select_kappa`) or a fixed κ ≥ 0 for "blended"
        (any real number: int, float, numpy scalar, inf; not a bool).
    add_references : also evaluate ``reference_segmentations(n)`` ("own", "global") unless
        ``segmentations`` already has those names.
    random_state : seed of the κ selection's sample split.

    Time: O(N log N + S (N + R log N)) for S sources, N samples, R eval rows; a few seconds for
    the default marketplace (measurements: docs/algorithms/forecasting.md).
    """
    t0 = time.perf_counter()
    ids = _as_ids(advertiser_ids)
    _check_sample_counts(win_samples, cost_samples, ids.size)
    options = _Options.checked(
        supply=supply,
        methods=methods,
        kappa=kappa,
        kappa_grid=kappa_grid,
        supply_model=supply_model,
        supply_engine=supply_engine,
        spend_price=spend_price,
        cdf_grid_size=cdf_grid_size,
        random_state=random_state,
    )
    if "forecast" in options.modes and train_delivery is None:
        raise ValueError("supply='forecast' needs train_delivery (the training window's supply).")
    ev = _checked_eval_delivery(eval_delivery, ids)
    sources, own_reference = _checked_sources(segmentations, ids.size, add_references)
    samples = {
        "win": SampleSet(win_samples, name="win_samples"),
        "cost": SampleSet(cost_samples, name="cost_samples"),
    }
    inputs = _Inputs(ids, samples, sources, own_reference, options, t0)
    return _evaluate(inputs, train_delivery, ev)


@dataclass(frozen=True)
class _Options:
    """:func:`evaluate_sources`' settings, checked; ``modes`` are the supply modes scored and
    ``kappa`` is "cv" or a float."""

    supply: str
    modes: list[str]
    methods: Sequence[str]
    kappa: float | str
    kappa_grid: ArrayLike
    supply_model: str
    supply_engine: str
    spend_price: str
    cdf_grid_size: int
    random_state: object

    @classmethod
    def checked(cls, **given) -> _Options:
        """The settings given, checked in the order the errors are reported."""
        for name in ("supply", "supply_model", "supply_engine", "spend_price"):
            if given[name] not in FORECAST_CHOICES[name]:
                raise ValueError(
                    f"{name} must be one of {FORECAST_CHOICES[name]}; got {given[name]!r}."
                )
        modes = ["actual", "forecast"] if given["supply"] == "both" else [given["supply"]]
        methods = given["methods"]
        bad = [m for m in methods if m not in ("segment", "blended")]
        if bad or not methods:
            raise ValueError(f"methods must be among 'segment', 'blended'; got {list(methods)}.")
        return cls(modes=modes, **{**given, "kappa": _check_kappa(given["kappa"])})

    def parameters(self) -> dict:
        """The settings as :attr:`ForecastResult.parameters` records them."""
        return {
            "supply": self.supply,
            "methods": list(self.methods),
            "kappa": self.kappa if self.kappa == "cv" else float(self.kappa),
            "supply_model": self.supply_model,
            "supply_engine": self.supply_engine,
            "spend_price": self.spend_price,
            "cdf_grid_size": int(self.cdf_grid_size),
            "random_state": self.random_state,
        }


def _check_sample_counts(win_samples, cost_samples, n: int) -> None:
    if len(win_samples) != n or len(cost_samples) != n:
        raise ValueError(
            f"win_samples and cost_samples must have one array per advertiser ({n}); got "
            f"{len(win_samples)} and {len(cost_samples)}."
        )


def _checked_eval_delivery(eval_delivery: pd.DataFrame, ids: np.ndarray) -> pd.DataFrame:
    """The evaluation window's delivery, checked (:func:`_check_delivery`) and not empty."""
    ev = _check_delivery(
        eval_delivery,
        "eval_delivery",
        ids,
        need=("bid_requests", "bid_ecpm", "impressions", "spend"),
    )
    if len(ev) == 0:
        raise ValueError("eval_delivery has no rows: nothing to forecast or score.")
    return ev


def _checked_sources(
    segmentations: Mapping[str, ArrayLike], n: int, add_references: bool
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The sources to score (``segmentations``, plus the references unless named already), each
    checked, and the reference "own" array (not tabulated when it is the one added here)."""
    sources: dict[str, np.ndarray] = dict(segmentations)
    if not sources and not add_references:
        raise ValueError("segmentations is empty.")
    references = reference_segmentations(n)
    if add_references:
        for name, seg in references.items():
            sources.setdefault(name, seg)
    for name, seg in sources.items():
        _compact_labels(seg, n, name=f"segmentations[{name!r}]")
    return sources, references["own"]


@dataclass
class _Inputs:
    """One evaluation's checked inputs: ``ids`` (n,), ``samples`` {"win"|"cost": SampleSet},
    ``sources`` {name: (n,) labels}, ``own_reference`` (see ``_checked_sources``), the options
    and ``t0``, the ``time.perf_counter()`` it started at."""

    ids: np.ndarray
    samples: dict[str, SampleSet]
    sources: dict[str, np.ndarray]
    own_reference: np.ndarray
    options: _Options
    t0: float


@dataclass
class _EvalRows:
    """The evaluation window per delivery row — ``adv`` (R,) advertiser index, ``bid`` (R,) eCPM,
    ``supply`` {mode: (R,) bid requests} — and per scored advertiser (those with rows, in index
    order): ``scored`` (S,) their indices, ``pos`` (R,) each row's place among them, and the
    actual ``impressions`` and ``spend`` (S,) totals (currency)."""

    adv: np.ndarray
    bid: np.ndarray
    supply: dict[str, np.ndarray]
    scored: np.ndarray
    pos: np.ndarray
    impressions: np.ndarray
    spend: np.ndarray


def _evaluate(
    inputs: _Inputs, train_delivery: pd.DataFrame | None, ev: pd.DataFrame
) -> ForecastResult:
    """:func:`evaluate_sources` after its checks: index the samples, forecast the supply if
    asked, tabulate the segments' c.d.f.s, prepare the κ selection, forecast every source and
    score it, timing each stage."""
    samples, n, opts = inputs.samples, inputs.ids.size, inputs.options
    own = {k: s.pool(np.arange(n), n) for k, s in samples.items()}
    pooled = {k: s.pool(np.zeros(n, dtype=np.int64), 1) for k, s in samples.items()}
    timings = {"index_samples": time.perf_counter() - inputs.t0}
    train_bids = _train_bids(train_delivery, inputs.ids)
    rows = _eval_rows(ev, inputs.ids)
    supply_frame = None
    if "forecast" in opts.modes:
        t = time.perf_counter()
        rows.supply["forecast"], supply_frame = supply_for_rows(
            train_delivery,
            inputs.ids,
            rows.adv,
            _dates(ev["date"], "eval_delivery"),
            model=opts.supply_model,
            engine=opts.supply_engine,
        )
        timings["supply_forecast"] = time.perf_counter() - t

    t = time.perf_counter()
    cdf_tables, size_tables = _segment_tables(inputs)
    timings["segment_cdfs"] = time.perf_counter() - t

    t = time.perf_counter()
    selectors = {}
    if "blended" in opts.methods and opts.kappa == "cv":
        selectors = {
            k: KappaSelector(opts.kappa_grid, random_state=opts.random_state).fit(s, train_bids)
            for k, s in samples.items()
        }
    timings["kappa_prepare"] = time.perf_counter() - t

    t = time.perf_counter()
    out_frames, kappa_rows, kappa_used = [], [], {}
    for name, seg in inputs.sources.items():  # loop over sources
        segment_lands = {
            k: Landscape.build(s, seg, math.inf, own=own[k], pooled=pooled[k])
            for k, s in samples.items()
        }
        for meth in opts.methods:
            lands = _method_landscapes(name, seg, meth, segment_lands, opts, selectors, kappa_rows)
            kappa_used[(name, meth)] = (lands["win"].kappa, lands["cost"].kappa)
            out_frames += _forecast_frames(inputs, rows, name, seg, meth, lands)
    timings["forecast"] = time.perf_counter() - t

    forecasts = pd.concat(out_frames, ignore_index=True)
    scores = _scores(forecasts, kappa_used)
    timings["total"] = time.perf_counter() - inputs.t0
    return ForecastResult(
        forecasts=forecasts.drop(columns="n_segments"),
        mape=scores,
        segment_cdfs=pd.concat(cdf_tables, ignore_index=True)
        if cdf_tables
        else pd.DataFrame(columns=["source", "segment", "kind", "bid", "cdf"]),
        segment_sizes=pd.concat(size_tables, ignore_index=True),
        kappa=pd.DataFrame(
            kappa_rows,
            columns=["source", "kind", "kappa", "loss_own", "loss_segment", "loss_best"],
        ),
        supply=supply_frame,
        timings=timings,
        parameters=opts.parameters(),
    )


def _train_bids(train_delivery: pd.DataFrame | None, ids: np.ndarray) -> np.ndarray | None:
    """(n,) each advertiser's median training-window bid (NaN without delivery), or None
    without training delivery or its bid_ecpm column."""
    if train_delivery is None:
        return None
    tr = _check_delivery(train_delivery, "train_delivery", ids, need=("bid_requests",))
    if "bid_ecpm" not in tr.columns:
        return None
    med = tr.groupby("advertiser_id")["bid_ecpm"].median()
    return med.reindex(ids).to_numpy(np.float64)


def _eval_rows(ev: pd.DataFrame, ids: np.ndarray) -> _EvalRows:
    """The evaluation window's rows and actual totals (see :class:`_EvalRows`); the supply is
    the actual one (the caller adds the forecast)."""
    row_adv = pd.Index(ids).get_indexer(ev["advertiser_id"])
    scored = np.unique(row_adv)
    pos = np.searchsorted(scored, row_adv)
    # delivered spend is whole micros: summed as integers it is exact and reconciles with
    # billing (a float sum gave 880.1107870000001 for 880.110787); a finer input is rounded
    spend_micros = np.rint(ev["spend"].to_numpy(np.float64) * MICROS)
    return _EvalRows(
        adv=row_adv,
        bid=ev["bid_ecpm"].to_numpy(np.float64),
        supply={"actual": ev["bid_requests"].to_numpy(np.float64)},
        scored=scored,
        pos=pos,
        impressions=np.bincount(pos, weights=ev["impressions"].to_numpy(np.float64)),
        spend=np.bincount(pos, weights=spend_micros) / MICROS,
    )


def _segment_tables(inputs: _Inputs) -> tuple[list[pd.DataFrame], list[pd.DataFrame]]:
    """Per source: its segments' pooled c.d.f.s on a common grid per kind (the added reference
    "own" left out: n tiny c.d.f.s, not worth persisting or plotting) and its segment sizes."""
    samples = inputs.samples
    grids = {k: cdf_grid(s, inputs.options.cdf_grid_size) for k, s in samples.items()}
    cdf_tables, size_tables = [], []
    for name, seg in inputs.sources.items():  # loop over sources
        size_tables.append(segment_sizes(samples["win"], samples["cost"], seg, name))
        if name == "own" and seg is inputs.own_reference:
            continue
        for kind, s in samples.items():
            cdf_tables.append(segment_cdf_table(s, seg, grids[kind], kind=kind, source=name))
    return cdf_tables, size_tables


def _method_landscapes(
    name: str,
    seg: np.ndarray,
    meth: str,
    segment_lands: dict[str, Landscape],
    opts: _Options,
    selectors: dict[str, KappaSelector],
    kappa_rows: list[dict],
) -> dict[str, Landscape]:
    """The win and cost landscapes of one source under method ``meth``: the segment c.d.f.s
    ("segment"), or blended with κ chosen by ``selectors`` (its choice appended to
    ``kappa_rows``) or fixed ("blended")."""
    lands = {}
    for kind in segment_lands:
        if meth == "segment":
            lands[kind] = segment_lands[kind]
            continue
        if opts.kappa == "cv":
            kap, curve = selectors[kind].select(seg)
            kappa_rows.append(_kappa_row(name, kind, kap, curve))
        else:
            kap = float(opts.kappa)
        lands[kind] = segment_lands[kind].with_kappa(kap)
    return lands


def _forecast_frames(
    inputs: _Inputs, rows: _EvalRows, name: str, seg: np.ndarray, meth: str, lands: dict
) -> list[pd.DataFrame]:
    """One source's forecasts under one method, a frame per supply mode: impressions = supply ×
    win rate at the bid, spend = impressions × expected paid eCPM / 1000, summed per scored
    advertiser beside the actual totals."""
    win_rate = lands["win"].cdf(rows.adv, rows.bid)
    if inputs.options.spend_price == "cost":
        ecost = expected_cost(lands["win"], lands["cost"], rows.adv, rows.bid)
    else:  # the cost landscape replaced by the market prices themselves
        ecost = expected_cost(lands["win"], lands["win"], rows.adv, rows.bid)
    n_seg = int(_label_values(seg).size)
    frames = []
    for mode in inputs.options.modes:
        imp_rows = rows.supply[mode] * win_rate
        spend_rows = imp_rows * ecost / 1000.0
        frames.append(
            pd.DataFrame(
                {
                    "advertiser_id": inputs.ids[rows.scored],
                    "source": name,
                    "method": meth,
                    "supply_mode": mode,
                    "impressions_forecast": np.bincount(rows.pos, weights=imp_rows),
                    "impressions_actual": rows.impressions,
                    "spend_forecast": np.bincount(rows.pos, weights=spend_rows),
                    "spend_actual": rows.spend,
                    "n_segments": n_seg,
                }
            )
        )
    return frames


def _scores(forecasts: pd.DataFrame, kappa_used: dict[tuple[str, str], tuple]) -> pd.DataFrame:
    """The MAPE frame of :class:`ForecastResult`: :func:`score_forecasts` with each source's
    number of segments and the blended method's κs (NaN for "segment")."""
    scores = score_forecasts(forecasts)
    nseg = forecasts.groupby(["source"], sort=False)["n_segments"].first()
    scores.insert(8, "n_segments", scores["source"].map(nseg).astype(np.int64))
    scores["kappa_win"] = [
        kappa_used[(s, m)][0] if m == "blended" else math.nan
        for s, m in zip(scores["source"], scores["method"], strict=True)
    ]
    scores["kappa_cost"] = [
        kappa_used[(s, m)][1] if m == "blended" else math.nan
        for s, m in zip(scores["source"], scores["method"], strict=True)
    ]
    cols = [*scores.columns[:9], "kappa_win", "kappa_cost", "n_missing_forecast"]
    return scores[cols]


def _check_kappa(kappa) -> float | str:
    """``kappa`` as "cv" or a float ≥ 0 (inf allowed). Any real number is accepted (numpy scalars
    included); a bool is refused, not read as 0 or 1."""
    if isinstance(kappa, str) and kappa == "cv":
        return kappa
    if isinstance(kappa, bool | np.bool_) or not isinstance(kappa, numbers.Real):
        raise TypeError(f"kappa must be 'cv' or a real number >= 0; got {kappa!r}.")
    if not kappa >= 0:  # also refuses NaN
        raise ValueError(f"kappa must be 'cv' or a number >= 0; got {kappa!r}.")
    return float(kappa)


def _kappa_row(source: str, kind: str, kap: float, curve: pd.DataFrame) -> dict:
    if curve.empty:
        return dict(source=source, kind=kind, kappa=kap, loss_own=math.nan,
                    loss_segment=math.nan, loss_best=math.nan)  # fmt: skip
    loss = curve["loss"].to_numpy()
    kg = curve["kappa"].to_numpy()
    at = {v: loss[kg == v][0] if np.any(kg == v) else math.nan for v in (0.0, math.inf)}
    return dict(source=source, kind=kind, kappa=kap, loss_own=at[0.0],
                loss_segment=at[math.inf], loss_best=float(loss.min()))  # fmt: skip
