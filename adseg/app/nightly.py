"""The nightly run (DESIGN.md §2): pull → views → model (+ backtest: K, weights, recommended
source) → fuse → regenerate → forecast → score → persist, under a run row and the nightly lock.

The stages are :mod:`adseg.pipeline`'s functions, looked up there when they run (a test may
replace one). Results are written in one transaction per stage and become visible when the run
completes. On any error the run's partial results are deleted, the run is marked failed with
the error, and the exception propagates (the CLI turns it into a non-zero exit). Earlier runs are
never touched. Cost: that of the stages (docs/algorithms/pipeline.md), plus one write per stage.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from adseg import pipeline
from adseg.app.execution import close_engine, shared_engine
from adseg.app.inputs import check_run_inputs, default_windows, pull
from adseg.app.runs import locked_run, mark_completed, run_parameters, timed
from adseg.forecast import ForecastResult
from adseg.fusion import Fusion, fuse
from adseg.pipeline import (
    PRIMARY_FUSER,
    ModelStage,
    NightlyConfig,
    Progress,
    PulledData,
    Windows,
    fusers_for_size,
)
from adseg.selection import mape_by_band
from adseg.store import results as store

if TYPE_CHECKING:
    from adseg.store.engine import Engine

log = logging.getLogger("adseg.pipeline")  # the run's log lines keep the name jobs grep for


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
    params = run_parameters(config) | {"fusers": names}
    n_advertisers = check_run_inputs(engine, windows, config)
    # one embedded cluster for the stages that use the engine; started before the pull when
    # they will (its forked workers then share none of the run's data)
    early = config.n_jobs if pipeline.embedded_engine(config, n_advertisers) else 0
    with locked_run(engine, "nightly", windows, config, params, timings) as run_id:
        with shared_engine(start_workers=early):
            return _run_stages(engine, run_id, windows, config, timings, progress)


def _run_stages(engine, run_id, windows, config, timings, progress) -> NightlyResult:
    """The stages of run ``run_id``, each timed into ``timings``; completes the run."""
    log.info(
        "run %s: train %s..%s, evaluate %s..%s",
        run_id,
        windows.train_start,
        windows.train_end,
        windows.eval_start,
        windows.eval_end,
    )
    with timed(timings, "pull", progress):
        data = pull(engine, windows)
    log.info("pulled %s advertisers", f"{len(data.advertiser_ids):,}")
    with timed(timings, "views", progress):
        prefetched = pipeline.prefetch_model_parts(data, config)  # run after the views' parts
        views = pipeline.build_views(data, config)
    names, left_out = fusers_for_size(config, views.labels.shape[0])
    with timed(timings, "model", progress):
        chosen = pipeline.model_stage(data, config, views, names, prefetched)
        store.write_base_clusterings(
            engine, run_id, data.advertiser_ids, chosen.labels, chosen.columns
        )
    n_segments = pipeline.fusion_segments(chosen.fuser_k, chosen.labels, chosen.weights, config)
    log.info("fusing into %d segments with %s", n_segments, ", ".join(names))
    with timed(timings, "fuse", progress):
        fusion, segmentations = _fuse_stage(
            data, views, chosen, names, n_segments, config, progress
        )
        store.write_segments(engine, run_id, data.advertiser_ids, segmentations)
    close_engine()  # the forecast needs none: its workers' memory goes back now
    with timed(timings, "forecast", progress):
        result = pipeline.forecast(data, segmentations, config)
        store.write_forecast_results(engine, run_id, result)
    stages = {"data": data, "views": views, "chosen": chosen, "fusion": fusion, "k": n_segments}
    return _finish(engine, run_id, config, timings, stages, segmentations, result, left_out)


def _fuse_stage(
    data: PulledData,
    views,
    chosen: ModelStage,
    names: list[str],
    n_segments: int,
    config: NightlyConfig,
    progress: Progress | None,
) -> tuple[Fusion, dict[str, np.ndarray]]:
    """(the fusion, every source's (n,) segments): the fusers' consensus of ``chosen``'s base
    clusterings, the single-view and model-view sources, and the truth file's when given."""
    fusion = fuse(
        chosen.labels,
        names,
        n_segments,
        config.seed,
        config.primary(),
        progress,
        n_jobs=config.n_jobs,
        options=config.fuser_options,
        weights=chosen.weights,
        scheduler=config.scheduler,
        started=chosen.started.get(n_segments),
    )
    segmentations = pipeline.view_sources(
        views, n_segments, config, data.win_samples, data.cost_samples, chosen.model_labels
    )
    segmentations.update(fusion.segmentations)
    if config.truth_path:
        segmentations["truth"] = _truth_source(config.truth_path, data.advertiser_ids)
    return fusion, segmentations


def _truth_source(path: str, advertiser_ids: np.ndarray) -> np.ndarray:
    """(n,) true segment of each advertiser from the truth file (-1: not named); logs the
    advertisers it names outside the run and those it misses. ValueError if it names none."""
    named = pipeline.read_truth(path)
    truth = pipeline.truth_segmentation(named, advertiser_ids)
    if (unknown := named.index[~named.index.isin(advertiser_ids)]).size:
        log.warning(
            "truth file %s names %d advertiser(s) not in this run (e.g. %s): ignored",
            path,
            unknown.size,
            ", ".join(map(str, unknown[:3])),
        )
    if not (truth >= 0).any():
        raise ValueError(
            f"truth file {path} names none of the {truth.size:,} advertisers "
            "of the training window."
        )
    if (missing := int((truth < 0).sum())) > 0:
        log.warning(
            "truth file %s has no segment for %d of %d advertisers: the truth source "
            "forecasts them from the global c.d.f. and the ARIs leave them out",
            path,
            missing,
            truth.size,
        )
    return truth


def _finish(
    engine: Engine,
    run_id: int,
    config: NightlyConfig,
    timings: dict,
    stages: dict,
    segmentations: dict[str, np.ndarray],
    result: ForecastResult,
    left_out: list[str],
) -> NightlyResult:
    """Score against the truth, record what the run resolved, complete the run, and return
    what the command prints. ``stages``: the stages' outputs by name (the pulled data, the
    views, the model stage's choices, the fusion, and k: the fusers' number of segments)."""
    from adseg.views import clusters_per_view, view_consistency

    data, views, chosen, fusion = (stages[k] for k in ("data", "views", "chosen", "fusion"))
    n_segments = stages["k"]

    truth_ari = {}
    if "truth" in segmentations:
        truth_ari = pipeline.truth_aris(segmentations["truth"], segmentations)
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
        **_model_record(chosen, chosen.columns),
        "mape_by_band": bands.to_dict(orient="records"),
    }
    mark_completed(engine, run_id, timings, resolved)
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
