"""What every report is made from: :class:`ReportData` (one run's results as plain frames and
dicts), the paper's MAPE for comparison, and the readers of a run record shared by the HTML,
JSON and CSV writers (its supply modes, resolved parameters, fuser outcomes and timings)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

REFERENCE_SOURCES = ("own", "global")

#: The paper's forecasting MAPE (Tables 6–7; 1,268 advertisers, one week), for comparison only.
PAPER_MAPE = pd.DataFrame(
    {
        "source": ["win c.d.f.", "eCPM c.d.f.", "textual", "consensus (L2)", "proposed (RCC)"],
        "impressions_mape": [0.1810, 0.2031, 0.3098, 0.1787, 0.1596],
        "spend_mape": [0.1234, 0.1356, 0.2578, 0.1278, 0.0964],
    }
)

CSV_COLUMNS = (
    "advertiser_id",
    "advertiser_name",
    "source",
    "method",
    "supply_mode",
    "impressions_forecast",
    "impressions_actual",
    "spend_forecast",
    "spend_actual",
)

_FORECAST_COLUMNS = CSV_COLUMNS[:1] + CSV_COLUMNS[2:]


def _empty(columns) -> pd.DataFrame:
    return pd.DataFrame({c: [] for c in columns})


@dataclass
class ReportData:
    """One run's results, as plain frames and dicts.

    run : run metadata — keys run_id, status, windows ({"train": [start, end], "eval": [...]}),
        parameters (dict), seed, code_version, timings ({stage: seconds}, groups nested); missing
        keys → null.
    mape : the MAPE frame of :class:`adseg.forecast.ForecastResult` (source, supply_mode, method,
        impressions_mape, spend_mape, n_advertisers, n_zero_impressions, n_zero_spend,
        n_segments, optional kappa_win, kappa_cost).
    segment_cdfs : source, segment, kind ("win" | "cost"), bid, cdf.
    segment_sizes : source, segment, n_advertisers (optional n_win_samples, n_cost_samples).
    consistency : the views' consistency (Table 5), any columns (e.g. view_a, view_b, agree,
        disagree); None = not computed.
    clusters_per_view : clusters per view (Table 4), any columns (e.g. view, alpha, n_clusters).
    forecasts : per-advertiser forecasts (advertiser_id, source, method, supply_mode,
        impressions_forecast, impressions_actual, spend_forecast, spend_actual).
    advertiser_names : advertiser_id → name (advertiser-supplied text: escaped on output).
    primary_source : the source whose c.d.f.s and scatter plots the HTML shows; default: the run
        parameter "primary_fuser" (or "fuser") if scored, else the first non-reference source of
        ``mape``.
    """

    run: Mapping[str, Any]
    mape: pd.DataFrame
    segment_cdfs: pd.DataFrame = field(
        default_factory=lambda: _empty(["source", "segment", "kind", "bid", "cdf"])
    )
    segment_sizes: pd.DataFrame = field(
        default_factory=lambda: _empty(["source", "segment", "n_advertisers"])
    )
    consistency: pd.DataFrame | None = None
    clusters_per_view: pd.DataFrame | None = None
    forecasts: pd.DataFrame = field(default_factory=lambda: _empty(_FORECAST_COLUMNS))
    advertiser_names: Mapping[Any, str] | None = None
    primary_source: str | None = None

    @classmethod
    def from_result(cls, run: Mapping[str, Any], result, **kwargs) -> ReportData:
        """From an :class:`adseg.forecast.ForecastResult` plus run metadata; ``kwargs`` fill the
        other fields (consistency, clusters_per_view, advertiser_names, primary_source)."""
        return cls(
            run=run,
            mape=result.mape,
            segment_cdfs=result.segment_cdfs,
            segment_sizes=result.segment_sizes,
            forecasts=result.forecasts,
            **kwargs,
        )

    def unscored_sources(self) -> list[str]:
        """Sources with segments (``segment_sizes``) but no row in ``mape``: remade by
        `adseg segment` since the run's last forecast, which removed their old scores."""
        scored = set(self.mape["source"]) if "source" in self.mape else set()
        return [s for s in dict.fromkeys(self.segment_sizes["source"]) if s not in scored]

    def resolved_primary_source(self) -> str | None:
        sources = list(dict.fromkeys(self.mape["source"])) if len(self.mape) else []
        if self.primary_source is not None:
            return self.primary_source
        params = self.run.get("parameters") or {}
        if (params.get("resolved") or {}).get("recommended_source") in sources:
            return params["resolved"]["recommended_source"]
        for key in ("primary_fuser", "fuser"):
            if params.get(key) in sources:
                return params[key]
        named = [s for s in sources if s not in REFERENCE_SOURCES]
        return (named or sources or [None])[0]


def _plain(x: Any) -> Any:
    """JSON-ready: numpy scalars → Python, NaN/inf → None, timestamps → ISO strings."""
    if isinstance(x, Mapping):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple | np.ndarray | pd.Series):
        return [_plain(v) for v in list(x)]
    if isinstance(x, bool | np.bool_):
        return bool(x)
    if isinstance(x, int | np.integer):
        return int(x)
    if isinstance(x, float | np.floating):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, pd.Timestamp | np.datetime64):
        return pd.Timestamp(x).isoformat()
    if x is None or isinstance(x, str):
        return x
    if x is pd.NaT or (not isinstance(x, list | dict) and pd.isna(x)):
        return None
    if hasattr(x, "isoformat"):
        return x.isoformat()
    return str(x)


def _supply_modes(mape: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(mape["supply_mode"])) if len(mape) else []


def _resolved(data: ReportData) -> dict:
    return (data.run.get("parameters") or {}).get("resolved") or {}


def fuser_outcomes(parameters) -> tuple[dict[str, str], dict[str, list[str]]]:
    """A run's fusers that failed and were skipped (name → error) and those that warned (name →
    notes): ``resolved.fuser_errors`` / ``fuser_notes`` of its parameters, empty when absent."""
    resolved = parameters.get("resolved") if isinstance(parameters, dict) else None
    resolved = resolved if isinstance(resolved, dict) else {}
    return resolved.get("fuser_errors") or {}, resolved.get("fuser_notes") or {}


def timing_rows(timings: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """A run's timings as (stage, seconds) rows, nested groups flattened into "group / name"
    (``{"fusers": {"rcc": 1.0}}`` → ``("fusers / rcc", 1.0)``); a group's own "total" is shown
    under the group's name."""
    rows: list[tuple[str, Any]] = []
    for key, value in timings.items():
        if isinstance(value, Mapping):
            rows.extend(timing_rows(value, f"{prefix}{key} / "))
        elif key == "total" and prefix:
            rows.append((prefix.removesuffix(" / "), value))
        else:
            rows.append((f"{prefix}{key}", value))
    return rows
