"""The JSON report: :func:`render_json`, schema :data:`JSON_SCHEMA` (stable; NaN and ±inf →
null), shown in docs/report-json.md."""

from __future__ import annotations

import json

import pandas as pd

from adseg.report.data import ReportData, _plain, _resolved, _supply_modes

JSON_SCHEMA_VERSION = 4
JSON_TOP_LEVEL_KEYS = (
    "schema_version",
    "run_id",
    "status",
    "windows",
    "parameters",
    "seed",
    "code_version",
    "timings",
    "supply_mode",
    "sources",
    "blended",
    "supply_forecast",
    "kappa",
    "consistency",
    "clusters_per_view",
    "unscored_sources",
    "recommended_source",
    "recommendation",
    "mape_by_band",
)
JSON_SOURCE_KEYS = (
    "impressions_mape",
    "spend_mape",
    "n_advertisers",
    "n_segments",
    "n_zero_impressions",
    "n_zero_spend",
    "n_missing_forecast",
)
JSON_SCHEMA = """\
render_json schema, version 4 (version 3 had no "recommended_source", "recommendation" and
"mape_by_band", version 2 no "unscored_sources", version 1 no "n_missing_forecast"). Numbers are
JSON numbers; NaN, +inf and -inf are null.
{
  "schema_version": 4,
  "run_id":       run id (as given: string or integer),
  "status":       run status string, or null,
  "windows":      object as given in the run metadata, e.g.
                  {"train": ["2026-01-01", "2026-01-14"], "eval": ["2026-01-15", "2026-01-21"]},
  "parameters":   object of run parameters (as given),
  "seed":         integer or null,
  "code_version": string or null,
  "timings":      {stage: seconds}, plus "fusers": {fuser: seconds} (the fuse
                  stage's fusers); "total" is the nightly's own. The latest
                  `adseg segment` / `adseg forecast` on the run adds
                  "adseg segment": {"total": seconds, "fusers": {fuser: seconds}} /
                  "adseg forecast": {"total": seconds},
  "supply_mode":  "actual" or "forecast": the supply behind "sources" and "blended"
                  ("actual" whenever the run scored it),
  "sources":      {source: ENTRY}  the paper's method (pure segment c.d.f.s) per source,
  "blended":      {source: ENTRY}  the empirical-Bayes blended estimate per source,
  "supply_forecast": {"segment": {source: ENTRY}, "blended": {source: ENTRY}}
                  the same with SES-forecast supply, when the run scored both supply modes;
                  {} otherwise,
  "kappa":        {source: {"win": κ, "cost": κ}}  the blended estimate's shrinkage constants;
                  null = κ infinite (the pure segment c.d.f.),
  "consistency":  [{column: value}, ...]  the views' consistency (Table 5), records as given,
  "clusters_per_view": [{column: value}, ...]  clusters per view and α (Table 4), as given,
  "unscored_sources": [source, ...]  sources whose segments have no scores (remade by
                  `adseg segment` since the run's last forecast: `adseg forecast --run`
                  scores them); they are missing from "sources" and "blended",
  "recommended_source": source chosen by backtest on the training window, or null
                  (a run made before version 4),
  "recommendation": {"reason": text, "backtest": [{"source": s, "score": fraction,
                  "impressions_mape_segment": ..., "impressions_mape_blended": ...,
                  "spend_mape_segment": ..., "spend_mape_blended": ...}, ...] or null,
                  "model": {"k": K, "k_backtest": {K: score}, "notes": [text]},
                  "column_weights": [{"view", "parameter", "weight"}, ...]}, or null,
  "mape_by_band": [{"source", "method", "supply_mode", "band", "n_advertisers",
                  "impressions_mape", "spend_mape"}, ...]  per training-sample band
                  ("0", "1-4", "5-19", "20-99", ">=100"); [] for a run before version 4
}
ENTRY = {"impressions_mape": fraction (0.16 = 16%) or null, "spend_mape": fraction or null,
         "n_advertisers": advertisers with a forecast (zero actuals included: an
                          impressions MAPE averages n_advertisers − n_zero_impressions
                          of them, a spend MAPE n_advertisers − n_zero_spend),
         "n_segments": segments in the source,
         "n_zero_impressions": zero actuals left out of the impressions MAPE,
         "n_zero_spend": zero actuals left out of the spend MAPE,
         "n_missing_forecast": advertisers left out of both MAPEs because they have no
                               forecast (no training delivery to forecast supply from;
                               0 with actual supply)}
Sources "own" (each advertiser its own segment: no segmentation) and "global" (one segment)
are the references.
"""


def _entries(mape: pd.DataFrame, method: str, mode: str) -> dict[str, dict]:
    rows = mape[(mape["method"] == method) & (mape["supply_mode"] == mode)]
    return {
        str(r["source"]): {k: _plain(r.get(k, None)) for k in JSON_SOURCE_KEYS}
        for _, r in rows.iterrows()  # one row per source
    }


def _records(frame: pd.DataFrame | None) -> list[dict]:
    if frame is None:
        return []
    return [_plain(r) for r in frame.to_dict(orient="records")]


def _recommendation(data: ReportData) -> dict:
    """The JSON's recommended_source, recommendation and mape_by_band (from the run record)."""
    resolved = _resolved(data)
    source = resolved.get("recommended_source")
    detail = None
    if source is not None:
        detail = {
            "reason": resolved.get("recommendation_reason"),
            "backtest": resolved.get("backtest"),
            "model": resolved.get("model"),
            "column_weights": resolved.get("column_weights"),
        }
    return {
        "recommended_source": source,
        "recommendation": _plain(detail) if detail else None,
        "mape_by_band": _plain(resolved.get("mape_by_band") or []),
    }


def render_json(data: ReportData) -> str:
    """The run's summary as JSON, schema :data:`JSON_SCHEMA` (top-level keys exactly
    :data:`JSON_TOP_LEVEL_KEYS`; each source entry exactly :data:`JSON_SOURCE_KEYS`)."""
    run = data.run
    modes = _supply_modes(data.mape)
    primary = "actual" if "actual" in modes or not modes else "forecast"
    supply_forecast: dict = {}
    if primary == "actual" and "forecast" in modes:
        supply_forecast = {
            "segment": _entries(data.mape, "segment", "forecast"),
            "blended": _entries(data.mape, "blended", "forecast"),
        }
    kappa: dict = {}
    if "kappa_win" in data.mape.columns:
        blended = data.mape[data.mape["method"] == "blended"]
        for _, r in blended.drop_duplicates("source").iterrows():  # one row per source
            kappa[str(r["source"])] = {
                "win": _plain(r["kappa_win"]),
                "cost": _plain(r["kappa_cost"]),
            }
    doc = {
        "schema_version": JSON_SCHEMA_VERSION,
        "run_id": _plain(run.get("run_id")),
        "status": _plain(run.get("status")),
        "windows": _plain(run.get("windows") or {}),
        "parameters": _plain(run.get("parameters") or {}),
        "seed": _plain(run.get("seed")),
        "code_version": _plain(run.get("code_version")),
        "timings": _plain(run.get("timings") or {}),
        "supply_mode": primary,
        "sources": _entries(data.mape, "segment", primary),
        "blended": _entries(data.mape, "blended", primary),
        "supply_forecast": supply_forecast,
        "kappa": kappa,
        "consistency": _records(data.consistency),
        "clusters_per_view": _records(data.clusters_per_view),
        "unscored_sources": data.unscored_sources(),
        **_recommendation(data),
    }
    assert tuple(doc) == JSON_TOP_LEVEL_KEYS
    return json.dumps(doc, indent=2, allow_nan=False, ensure_ascii=False) + "\n"
