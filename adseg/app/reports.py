"""What a report of a stored run shows, read back from the store in one snapshot
(:func:`load_report_data` → :class:`adseg.report.ReportData`), its sources in the order the
nightly prints them (:func:`source_position`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from adseg.model_stage import MODEL_SOURCE
from adseg.pipeline import SINGLE_VIEW_SOURCES
from adseg.store import reads
from adseg.store import results as store

if TYPE_CHECKING:
    from adseg.store.engine import Engine


def source_position(run: dict):
    """A sort key putting sources in the order the nightly prints them: the single views, the
    run's fusers, then truth, own, global and any other (alphabetically)."""
    fusers = list((run.get("parameters") or {}).get("fusers") or [])
    order = [*SINGLE_VIEW_SOURCES, MODEL_SOURCE, *fusers, "truth", "own", "global"]
    rank = {s: i for i, s in enumerate(dict.fromkeys(order))}
    return lambda source: (rank.get(source, len(rank)), source)


def in_source_order(frame: pd.DataFrame, run: dict) -> pd.DataFrame:
    """``frame``'s rows with its sources in the nightly's order (:func:`source_position`)."""
    position = frame["source"].map(source_position(run))
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
        kwargs["segment_sizes"] = in_source_order(
            sizes[["source", "segment", "n_advertisers"]], run
        )
    return ReportData(
        run=run,
        mape=in_source_order(saved["mape"], run),
        segment_cdfs=saved["segment_cdfs"],
        forecasts=saved["forecasts"],
        consistency=None if views is None else view_consistency(views),
        clusters_per_view=None if views is None else clusters_per_view(views),
        advertiser_names=names,
        **kwargs,
    )
