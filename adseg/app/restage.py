"""The CLI's single stages: `adseg views` (pull + views as a run of its own), and `segment` and
`forecast` run again on a stored, completed run, under the nightly lock.

* :func:`run_views`: a new run of kind 'views' (its base clusterings only).
* :func:`run_segment`: the fusers and single-view sources again from the run's stored base
  clusterings (other fusers, another K); their old forecasts and scores are deleted.
* :func:`run_forecast`: regenerate, forecast and score every stored segmentation again.
The run's parameters and timings record what was remade (``"adseg segment"`` / ``"adseg
forecast"`` timings). Cost: that of the stages run again, plus one read of the run's samples.
"""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from adseg import pipeline
from adseg.app.inputs import check_run_inputs, pull
from adseg.app.reports import source_position
from adseg.app.runs import locked_run, mark_completed, run_parameters, stage_on_run, timed
from adseg.consensus import FUSERS, canonical_name
from adseg.fusion import Fusion, fuse
from adseg.pipeline import (
    SINGLE_VIEW_SOURCES,
    NightlyConfig,
    Progress,
    Windows,
    forecast_choices,
    fusers_for_size,
)
from adseg.selection import mape_by_band
from adseg.store import reads
from adseg.store import results as store

if TYPE_CHECKING:
    from adseg.store.engine import Engine


def run_views(
    engine: Engine, windows: Windows, config: NightlyConfig, progress: Progress | None = None
):
    """Pull + views as a run of kind 'views' (under the nightly lock); returns (run_id, views)."""
    windows.validate()
    check_run_inputs(engine, windows, config)
    timings: dict[str, float] = {}
    with locked_run(engine, "views", windows, config, run_parameters(config), timings) as run_id:
        with timed(timings, "pull", progress):
            data = pull(engine, windows)
        with timed(timings, "views", progress):
            views = pipeline.build_views(data, config)
            store.write_base_clusterings(
                engine, run_id, data.advertiser_ids, views.labels, views.columns
            )
        mark_completed(engine, run_id, timings)
        return run_id, views


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
    samples (:func:`adseg.pipeline.attach_excluded`), read again: one auction query over the
    training window. The run's parameters record the fusers and the resolved number of segments,
    as a nightly's do.
    """

    def work(run):
        stored = run["parameters"] or {}
        asked = replace(config, n_segments=_segments_asked(config, stored))
        ids, labels, columns = store.read_base_clusterings(engine, run_id)
        k = pipeline.choose_n_segments(columns, labels, asked.n_segments)
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
            scheduler=config.scheduler,
        )
        fused, errors = fusion.segmentations, fusion.errors
        segmentations = _single_views_again(engine, run, ids, labels, columns, k, config)
        segmentations.update(fused)
        dropped = [*errors, *_aliases_remade(stored, fused)]
        had = set(store.read_segments(engine, run_id, list(errors)))  # failed, and had segments
        unscored = store.write_segments(engine, run_id, ids, segmentations, drop=dropped)
        parameters = _segment_record(
            engine, run_id, ids, stored, asked, segmentations, fusion, names, k, dropped
        )
        parameters["resolved"]["fusers_left_out"] = left_out
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

    return stage_on_run(engine, run_id, "segment", work)


def _single_views_again(engine, run: dict, ids, labels, columns, k: int, config) -> dict:
    """The single-view sources of a stored run's base clusterings at ``k`` segments, its
    advertisers left out of a KS view attached by their training-window samples (read again)."""
    train_start, train_end = (dt.date.fromisoformat(d) for d in run["windows"]["train"])
    win, cost = reads.price_samples(engine, ids, train_start, train_end)
    return pipeline.single_view_segmentations(
        labels, columns, k, config.single_view_alpha, {"win_rate": win, "ecpm_cost": cost}
    )


def _aliases_remade(stored: dict, fused: dict) -> list[str]:
    """The fusers a run stored under an alias (spcc, before names were made canonical) that are
    now remade under their canonical name. With the fusers that failed (which keep no segments
    from before: the nightly leaves them out too) they are dropped: neither may be scored beside
    the new segments."""
    return [
        f
        for f in stored.get("fusers") or []
        if f in FUSERS and f != canonical_name(f) and canonical_name(f) in fused
    ]


def _segment_record(
    engine, run_id, ids, stored, asked, segmentations, fusion, names, k, dropped
) -> dict:
    """The run's parameters after ``adseg segment`` (:func:`_segment_parameters`), with the new
    segments' truth ARIs when the run has a truth segmentation, and without the bands of the
    replaced or dropped segments (they described scores that are gone)."""
    truth = store.read_segments(engine, run_id, ["truth"]).get("truth")
    new_aris = {}
    if truth is not None:  # the nightly's --truth: score the new segments against it too
        truth = truth.reindex(ids).fillna(-1).to_numpy(dtype=np.int64)
        new_aris = pipeline.truth_aris(truth, segmentations)
    parameters = _segment_parameters(
        stored,
        asked,
        list(fusion.segmentations),
        k,
        dropped=dropped,
        truth_ari=new_aris,
        fusion=fusion,
        ran=names,
    )
    gone = set(segmentations) | set(dropped)
    parameters["resolved"]["mape_by_band"] = [
        row
        for row in parameters["resolved"].get("mape_by_band") or []
        if row.get("source") not in gone
    ]
    return parameters


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
            for src in sorted(stored, key=source_position(run))
        }
        result = pipeline.forecast(data, segmentations, config)
        store.write_forecast_results(engine, run_id, result)
        # the bands of the new scores: the nightly's described forecasts that are now replaced
        counts = np.array([len(s) for s in data.win_samples])
        bands = mape_by_band(result.forecasts, data.advertiser_ids, counts)
        resolved = dict((run["parameters"] or {}).get("resolved") or {})
        resolved["mape_by_band"] = bands.to_dict(orient="records")
        parameters = forecast_choices(config) | {"forecast_seed": config.seed}
        return result, parameters | {"resolved": resolved}, {}

    return stage_on_run(engine, run_id, "forecast", work)
