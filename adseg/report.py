"""Reports of one run: a self-contained HTML page for analysts, a JSON summary, a CSV of forecasts.

Everything here takes a :class:`ReportData` of plain frames and dicts (what the store reads back
for a run, or what :func:`adseg.forecast.evaluate_sources` returned) and returns a string; nothing
touches the database or the file system.

* :func:`render_html` — MAPE by source (the paper's Tables 6–7 beside it), κ of the blended
  estimate, per-segment win-rate and eCPM-cost c.d.f. plots (the paper's Figure 1, the largest
  ``max_segments`` segments of the primary source), segment sizes, the views' consistency
  (Table 5) and clusters per view (Table 4), forecast-vs-actual scatter plots (log-log) and the
  worst-forecast advertisers. Plots are matplotlib (Agg, no pyplot state) PNGs inlined as base64
  ``data:`` URIs; no external asset, script or style sheet is referenced. Every string that comes
  from data (advertiser names and ids, source names, run metadata) goes through ``html.escape``.
* :func:`render_json` — the schema in :data:`JSON_SCHEMA` (stable; NaN and ±inf → null).
* :func:`render_csv` — one row per (advertiser, source, method, supply mode).
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "CSV_COLUMNS",
    "JSON_SCHEMA",
    "JSON_SCHEMA_VERSION",
    "JSON_SOURCE_KEYS",
    "JSON_TOP_LEVEL_KEYS",
    "PAPER_MAPE",
    "ReportData",
    "render",
    "render_csv",
    "render_html",
    "render_json",
]

REFERENCE_SOURCES = ("own", "global")

#: The paper's forecasting MAPE (Tables 6–7; 1,268 advertisers, one week), for comparison only.
PAPER_MAPE = pd.DataFrame(
    {
        "source": ["win c.d.f.", "eCPM c.d.f.", "textual", "consensus (L2)", "proposed (RCC)"],
        "impressions_mape": [0.1810, 0.2031, 0.3098, 0.1787, 0.1596],
        "spend_mape": [0.1234, 0.1356, 0.2578, 0.1278, 0.0964],
    }
)

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


# --------------------------------------------------------------------------------------------
# JSON
# --------------------------------------------------------------------------------------------


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


def _supply_modes(mape: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(mape["supply_mode"])) if len(mape) else []


def _resolved(data: ReportData) -> dict:
    return (data.run.get("parameters") or {}).get("resolved") or {}


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


# --------------------------------------------------------------------------------------------
# CSV
# --------------------------------------------------------------------------------------------


_FORMULA_START = re.compile(r"(?:^|(?<=[\r\n]))(?=[=+\-@\t\r])")
"""Where a spreadsheet would start reading a formula: at the start of the text, or of a line in
it, before = + - @ tab or CR."""


def _csv_safe(text: str) -> str:
    """Neutralise spreadsheet formulas (OWASP CSV injection): a leading = + - @ tab or CR gets a
    leading apostrophe, so a name like ``=HYPERLINK(...)`` is shown, not evaluated; so does one
    after a line break in the text (a reader that splits the record there sees a line that
    starts with it)."""
    return _FORMULA_START.sub("'", text)


class _RowsEndingInNewline:
    """A text sink for csv.writer with lineterminator "\r\n" that ends each row in "\n". The
    csv module quotes a field that holds a character of its line terminator (besides the
    delimiter and the quote): with "\n" alone, a field holding a lone CR was left unquoted, and
    a spreadsheet or csv.reader split the record there. Each row comes in one write."""

    def __init__(self, sink: io.StringIO):
        self._sink = sink

    def write(self, row: str) -> int:
        return self._sink.write(row.removesuffix("\r\n") + "\n")


def render_csv(data: ReportData) -> str:
    """Per-advertiser forecasts and actuals for every source, method and supply mode, columns
    :data:`CSV_COLUMNS` (advertiser_name empty when unknown; names and ids that a spreadsheet
    would read as a formula are prefixed with an apostrophe; a field that holds a CR or LF is
    quoted; rows end in LF). Rows sorted by source, method, supply mode, advertiser."""
    f = data.forecasts
    missing = [c for c in _FORECAST_COLUMNS if c not in f.columns]
    if missing:
        raise ValueError(f"forecasts lacks column(s) {missing}.")
    out = f[list(_FORECAST_COLUMNS)].copy()
    names = data.advertiser_names or {}
    out.insert(
        1,
        "advertiser_name",
        [_csv_safe(str(names[a])) if a in names else "" for a in out["advertiser_id"]],
    )
    counts = out["impressions_actual"]
    if counts.notna().all() and (counts == counts.round()).all():  # a count, not 1798540.0
        out["impressions_actual"] = counts.round().astype(np.int64)
    out = out.sort_values(["source", "method", "supply_mode", "advertiser_id"], kind="stable")
    out["advertiser_id"] = [_csv_safe(str(a)) for a in out["advertiser_id"]]
    # no float_format: the shortest text that reads back as the same float (1253623688.246912,
    # not %.10g's 1253623688), so spend reconciles with billing to the micro
    text = io.StringIO()
    out.to_csv(_RowsEndingInNewline(text), index=False, lineterminator="\r\n")
    return text.getvalue()


# --------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _fmt(x: Any, kind: str = "") -> str:
    if x is None or (isinstance(x, float | np.floating) and not math.isfinite(x)):
        if isinstance(x, float | np.floating) and math.isinf(x):
            return "∞" if x > 0 else "−∞"
        return "—"
    if kind == "pct":
        return f"{100 * float(x):.2f}%"
    if isinstance(x, float | np.floating):
        return f"{float(x):,.0f}" if abs(x) >= 1000 else f"{float(x):.4g}"
    if isinstance(x, int | np.integer) and not isinstance(x, bool | np.bool_):
        return f"{int(x):,}" if abs(x) >= 10000 else str(int(x))
    return str(x)


def fuser_outcomes(parameters) -> tuple[dict[str, str], dict[str, list[str]]]:
    """A run's fusers that failed and were skipped (name → error) and those that warned (name →
    notes): ``resolved.fuser_errors`` / ``fuser_notes`` of its parameters, empty when absent."""
    resolved = parameters.get("resolved") if isinstance(parameters, dict) else None
    resolved = resolved if isinstance(resolved, dict) else {}
    return resolved.get("fuser_errors") or {}, resolved.get("fuser_notes") or {}


def _fuser_remarks(parameters: dict) -> list[str]:
    """Paragraphs for the fusers that failed and were skipped (no source in the tables) or
    warned (:func:`fuser_outcomes`), escaped."""
    errors, notes = fuser_outcomes(parameters)
    lines = [
        f"<b>{_e(name)}</b> failed and was skipped: {_e(error)}" for name, error in errors.items()
    ]
    lines += [
        f"<b>{_e(name)}</b>: {_e('; '.join(map(str, found)))}" for name, found in notes.items()
    ]
    return [f'<p class="note">Fusers — {line}.</p>' for line in lines]


def _table(frame: pd.DataFrame, formats: Mapping[str, str] | None = None, cls: str = "") -> str:
    """An HTML table of ``frame`` with every header and cell escaped."""
    formats = formats or {}
    head = "".join(f"<th>{_e(c)}</th>" for c in frame.columns)
    body = []
    for row in frame.itertuples(index=False, name=None):  # rows of a small display table
        cells = "".join(
            f"<td>{_e(_fmt(v, formats.get(c, '')))}</td>"
            for c, v in zip(frame.columns, row, strict=True)
        )
        body.append(f"<tr>{cells}</tr>")
    cls_attr = f' class="{_e(cls)}"' if cls else ""
    return f"<table{cls_attr}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _png(fig) -> str:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="plot" src="data:image/png;base64,{data}">'


def _cdf_plot_note(data: ReportData, source: str, max_segments: int) -> str:
    """What the c.d.f. plot shows, counting the segments the source has (a source with 5 segments
    shows 5, not "the 12 largest")."""
    n = data.segment_cdfs.loc[data.segment_cdfs["source"] == source, "segment"].nunique()
    if n == 0:
        return ""
    if n <= max_segments:
        which = "its segment" if n == 1 else f"all {n} of its segments"
    else:
        which = f"the {int(max_segments)} largest of its {n} segments"
    return f'<p class="note">Pooled c.d.f.s of {which} (the paper\'s Figure 1).</p>'


def _cdf_plot(data: ReportData, source: str, max_segments: int) -> str:
    from matplotlib.figure import Figure

    cdfs = data.segment_cdfs[data.segment_cdfs["source"] == source]
    if cdfs.empty:
        return "<p>No segment c.d.f.s for this source.</p>"
    sizes = data.segment_sizes[data.segment_sizes["source"] == source]
    if len(sizes):
        order = sizes.sort_values(["n_advertisers", "segment"], ascending=[False, True])
        top = order["segment"].head(max_segments).tolist()
        n_adv = dict(zip(sizes["segment"], sizes["n_advertisers"], strict=True))
    else:
        top = sorted(cdfs["segment"].unique())[:max_segments]
        n_adv = {}
    fig = Figure(figsize=(11, 4.2))
    axes = fig.subplots(1, 2)
    titles = {"win": "win rate (market-price c.d.f.)", "cost": "eCPM cost c.d.f."}
    colors = [f"C{i % 10}" for i in range(len(top))]
    for ax, kind in zip(axes, ("win", "cost"), strict=True):
        sub = cdfs[cdfs["kind"] == kind]
        for seg, color in zip(top, colors, strict=True):  # ≤ max_segments lines
            line = sub[sub["segment"] == seg]
            if line.empty:
                continue
            style = "-" if top.index(seg) < 10 else "--"
            label = f"segment {seg}" + (f" ({n_adv[seg]} adv.)" if seg in n_adv else "")
            ax.plot(line["bid"], line["cdf"], style, color=color, lw=1.4, label=label)
        ax.set_xlabel("eCPM bid")
        ax.set_ylabel("F(bid)")
        ax.set_title(titles[kind])
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    if axes[1].get_legend_handles_labels()[0]:  # matplotlib warns on an empty legend
        axes[1].legend(fontsize=7, loc="lower right")
    return _png(fig)


def _scatter_plot(data: ReportData, source: str) -> str:
    from matplotlib.figure import Figure

    f = data.forecasts
    f = f[f["source"] == source]
    modes = _supply_modes(data.mape)
    mode = "actual" if "actual" in modes or not modes else "forecast"
    f = f[f["supply_mode"] == mode]
    if f.empty:
        return "<p>No forecasts for this source.</p>"
    fig = Figure(figsize=(11, 4.6))
    axes = fig.subplots(1, 2)
    for ax, what in zip(axes, ("impressions", "spend"), strict=True):
        lo, hi = math.inf, -math.inf
        for meth, marker in (("segment", "o"), ("blended", "x")):
            g = f[f["method"] == meth]
            y, yhat = g[f"{what}_actual"].to_numpy(float), g[f"{what}_forecast"].to_numpy(float)
            ok = (y > 0) & (yhat > 0)
            if not ok.any():
                continue
            ax.scatter(y[ok], yhat[ok], s=9, alpha=0.5, marker=marker, label=meth)
            lo = min(lo, y[ok].min(), yhat[ok].min())
            hi = max(hi, y[ok].max(), yhat[ok].max())
        if math.isfinite(lo):
            ax.plot([lo, hi], [lo, hi], "k-", lw=0.8, label="forecast = actual")
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_xlabel(f"actual {what}")
        ax.set_ylabel(f"forecast {what}")
        ax.set_title(f"{what}: forecast vs actual ({mode} supply)")
        ax.grid(alpha=0.3, which="both")
        if ax.get_legend_handles_labels()[0]:  # nothing plotted when every value is zero
            ax.legend(fontsize=8)
    return _png(fig)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1200px;
color:#222;line-height:1.4}
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
.meta td{text-align:left}.note{color:#555;font-size:.9em}img{max-width:100%}
.warn{color:#8a4b00;font-weight:bold}
"""


def _mape_pivot(mape: pd.DataFrame, mode: str) -> tuple[pd.DataFrame, dict[str, str]]:
    """One row per source: MAPE of the segment and blended methods side by side, sorted by the
    segment method's impressions MAPE."""
    m = mape[mape["supply_mode"] == mode]
    out = m.drop_duplicates("source")[["source"]].reset_index(drop=True)
    formats = {}
    for meth in ("segment", "blended"):
        sub = m[m["method"] == meth].set_index("source")
        for what in ("impressions", "spend"):
            col = f"{what} MAPE ({meth})"
            if len(sub):
                out[col] = out["source"].map(sub[f"{what}_mape"])
                formats[col] = "pct"
    first = m.drop_duplicates("source").set_index("source")
    for c in ("n_segments", "n_advertisers", "n_zero_impressions", "n_zero_spend"):
        if c in first.columns:
            out[c] = out["source"].map(first[c])
    if "n_missing_forecast" in first.columns and first["n_missing_forecast"].fillna(0).any():
        out["n_missing_forecast"] = out["source"].map(first["n_missing_forecast"])
    blended = m[m["method"] == "blended"].set_index("source")
    for c in ("kappa_win", "kappa_cost"):
        if c in blended.columns and len(blended):
            # a blended row always has a κ: stored NULL is κ = ∞ (the pure segment c.d.f.)
            out[c.replace("kappa_", "κ ")] = out["source"].map(blended[c].fillna(math.inf))
    sort_col = next((c for c in out.columns if c.startswith("impressions MAPE")), "source")
    return out.sort_values(sort_col, kind="stable", na_position="last"), formats


def render_html(data: ReportData, *, max_segments: int = 12, n_worst: int = 20) -> str:
    """A self-contained HTML page (inline CSS and base64 PNGs, no scripts, no external links).

    max_segments : number of the primary source's largest segments plotted.
    n_worst : number of advertisers listed in the worst-forecasts table.
    """
    run = data.run
    primary = data.resolved_primary_source()
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>adseg run {_e(run.get('run_id', ''))}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>adseg run {_e(run.get('run_id', ''))}</h1>",
        *_summary_html(data, primary),
    ]
    meta = {
        "status": run.get("status"),
        "windows": json.dumps(_plain(run.get("windows") or {})),
        "seed": run.get("seed"),
        "code version": run.get("code_version"),
        "primary source": primary,
    }
    parts.append(
        _table(pd.DataFrame({"run": list(meta), "value": list(meta.values())}), cls="meta")
    )
    params = run.get("parameters") or {}

    parts.append("<h2>Forecast error (MAPE) by segmentation source</h2>")
    parts.append(
        '<p class="note">Impressions = supply × win rate at the bid; spend = impressions × '
        "expected paid eCPM at the bid / 1000, summed over the evaluation window. "
        "<b>segment</b> = the paper's method (pooled segment c.d.f.s); <b>blended</b> = each "
        "advertiser's own c.d.f. shrunk toward its segment's with weight n/(n+κ), κ chosen on the "
        "training window. Sources <b>own</b> (no segmentation) and <b>global</b> (one segment) "
        "are references. Zero actuals are left out of the MAPE and counted.</p>"
    )
    rid = _e(run.get("run_id", "ID"))
    unscored = data.unscored_sources()
    if len(data.mape):
        if unscored:
            parts.append(
                '<p class="warn">Not scored: '
                + ", ".join(f"<b>{_e(s)}</b>" for s in unscored)
                + " — their segments were remade (<code>adseg segment</code>) after this run's "
                f"last forecast, which removed their scores: <code>adseg forecast --run {rid}"
                "</code> scores them.</p>"
            )
        for mode in _supply_modes(data.mape):  # one table per supply mode
            parts.append(f"<h3>{_e(mode)} supply</h3>")
            parts.append(_table(*_mape_pivot(data.mape, mode)))
    elif unscored:
        parts.append(
            f'<p class="warn">No forecasts were scored for this run yet: <code>adseg forecast '
            f"--run {rid}</code> scores its segments.</p>"
        )
    else:
        parts.append(
            '<p class="warn">No forecasts were scored for this run yet: <code>adseg segment '
            f"--run {rid}</code> then <code>adseg forecast --run {rid}</code>.</p>"
        )
    parts.extend(_fuser_remarks(params))
    parts.append("<h3>The paper's MAPE</h3>")
    parts.append(
        '<p class="note">The paper\'s numbers (Tables 6–7; 1,268 advertisers, one week), '
        "for orientation only — a different marketplace:</p>"
    )
    # display names, as the run's own tables have (not the column name impressions_mape)
    shown = {"impressions_mape": "impressions MAPE", "spend_mape": "spend MAPE"}
    paper = PAPER_MAPE.rename(columns=shown)
    parts.append(_table(paper, dict.fromkeys(shown.values(), "pct")))

    if primary is not None:
        parts.append(f"<h2>Segment bid landscapes — {_e(primary)}</h2>")
        parts.append(_cdf_plot_note(data, primary, max_segments))
        parts.append(_cdf_plot(data, primary, max_segments))

        sizes = data.segment_sizes[data.segment_sizes["source"] == primary]
        if len(sizes):
            sizes = sizes.sort_values("n_advertisers", ascending=False, kind="stable")
            parts.append(f"<h2>Segment sizes — {_e(primary)}</h2>")
            parts.append(
                f'<p class="note">{len(sizes)} segments; '
                f"{int(sizes['n_advertisers'].sum())} advertisers.</p>"
            )
            parts.append(_table(sizes.drop(columns="source")))

    if data.consistency is not None and len(data.consistency):
        parts.append("<h2>Consistency of the views (Table 5)</h2>")
        pct = {
            c: "pct"
            for c in data.consistency.columns
            if c in ("agree", "disagree", "tpn", "fpn", "TPN", "FPN")
        }
        parts.append(_table(data.consistency, pct))
    if data.clusters_per_view is not None and len(data.clusters_per_view):
        parts.append("<h2>Clusters per view (Table 4)</h2>")
        parts.append(_table(data.clusters_per_view))

    if primary is not None and len(data.forecasts):
        parts.append(f"<h2>Forecast vs actual — {_e(primary)}</h2>")
        parts.append(_scatter_plot(data, primary))
        parts.append(_worst_table(data, primary, n_worst))

    timings = timing_rows(run.get("timings") or {})
    if timings:
        parts.append("<h2>Timings</h2>")
        parts.append(_table(pd.DataFrame(timings, columns=["stage", "seconds"])))
    if params:
        parts.append("<h2>Parameters</h2>")
        values = [json.dumps(_plain(v)) for v in params.values()]
        frame = pd.DataFrame({"parameter": list(params), "value": values})
        parts.append(_table(frame, cls="meta"))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _summary_html(data: ReportData, primary: str | None) -> list[str]:
    """The page's opening: the recommended (or primary) source, its MAPE beside the references',
    why it was chosen, and its MAPE by advertiser size band."""
    resolved = _resolved(data)
    source = resolved.get("recommended_source") or primary
    if source is None or not len(data.mape):
        return []
    mode = "actual" if "actual" in _supply_modes(data.mape) else "forecast"
    rows = data.mape[(data.mape["supply_mode"] == mode)]
    scored = set(rows["source"])  # a reference recommended is shown once, not twice
    shown = [s for s in dict.fromkeys((source, "own", "global", "truth")) if s in scored]
    table = rows[rows["source"].isin(shown)].pivot_table(
        index="source", columns="method", values=["impressions_mape", "spend_mape"], sort=False
    )
    table.columns = [f"{what.removesuffix('_mape')} ({method})" for what, method in table.columns]
    table = table.reindex(shown).reset_index()
    how = "recommended" if resolved.get("recommended_source") else "primary"
    out = [
        "<h2>Summary</h2>",
        f"<p>The {how} source is <b>{_e(source)}</b>"
        + (
            f": {_e(resolved['recommendation_reason'])}."
            if resolved.get("recommendation_reason")
            else "."
        )
        + f" MAPE with {_e(mode)} supply, beside the references:</p>",
        _table(table, dict.fromkeys(table.columns[1:], "pct")),
    ]
    for note in (resolved.get("model") or {}).get("notes") or []:
        out.append(f'<p class="warn">{_e(note)}</p>')
    bands = pd.DataFrame(resolved.get("mape_by_band") or [])
    if len(bands):
        part = bands[(bands["source"] == source) & (bands["supply_mode"] == mode)]
        part = part[["method", "band", "n_advertisers", "impressions_mape", "spend_mape"]]
        out += [
            f"<h3>{_e(source)}: MAPE by advertiser size (training samples)</h3>",
            _table(part, {"impressions_mape": "pct", "spend_mape": "pct"}),
        ]
    return out


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


def _worst_table(data: ReportData, source: str, n_worst: int) -> str:
    f = data.forecasts
    modes = _supply_modes(data.mape)
    mode = "actual" if "actual" in modes or not modes else "forecast"
    f = f[(f["source"] == source) & (f["method"] == "segment") & (f["supply_mode"] == mode)]
    f = f[f["impressions_actual"] > 0]
    if f.empty:
        return ""
    ape = (f["impressions_forecast"] - f["impressions_actual"]).abs() / f["impressions_actual"]
    worst = f.assign(impressions_ape=ape).nlargest(n_worst, "impressions_ape")
    names = data.advertiser_names or {}
    table = pd.DataFrame(
        {
            "advertiser": worst["advertiser_id"].to_numpy(),
            "name": [names.get(a, "") for a in worst["advertiser_id"]],
            "impressions (forecast)": worst["impressions_forecast"].to_numpy(),
            "impressions (actual)": worst["impressions_actual"].to_numpy(),
            "error": worst["impressions_ape"].to_numpy(),
            "spend (forecast)": worst["spend_forecast"].to_numpy(),
            "spend (actual)": worst["spend_actual"].to_numpy(),
        }
    )
    return f"<h3>Largest impression errors ({_e(mode)} supply, segment method)</h3>" + _table(
        table, {"error": "pct"}
    )


def render(data: ReportData, fmt: str) -> str:
    """Dispatch on ``fmt`` ∈ {"html", "json", "csv"} (for the CLI's ``--format``)."""
    renderers = {"html": render_html, "json": render_json, "csv": render_csv}
    if fmt not in renderers:
        raise ValueError(f"format must be one of {sorted(renderers)}; got {fmt!r}.")
    return renderers[fmt](data)
