"""The HTML report: :func:`render_html`, a self-contained page for analysts.

Its sections: the summary (the recommended source's MAPE beside the references'), MAPE by source
(the paper's Tables 6–7 beside it), κ of the blended estimate, per-segment win-rate and eCPM-cost
c.d.f. plots of the largest ``max_segments`` segments of the primary source (the paper's
Figure 1), segment sizes, the views' consistency (Table 5) and clusters per view (Table 4),
forecast-vs-actual scatter plots and the worst-forecast advertisers, timings and parameters.
No external asset, script or style sheet is referenced. Every string that comes from data
(advertiser names and ids, source names, run metadata) goes through ``html.escape``.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from adseg.report.data import (
    PAPER_MAPE,
    ReportData,
    _plain,
    _resolved,
    _supply_modes,
    fuser_outcomes,
    timing_rows,
)
from adseg.report.plots import _cdf_plot, _cdf_plot_note, _scatter_plot


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
    primary = data.resolved_primary_source()
    parts = [
        *_opening_html(data, primary),
        *_mape_html(data),
        *_segments_html(data, primary, max_segments),
        *_views_html(data),
        *_forecasts_html(data, primary, n_worst),
        *_run_record_html(data.run),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _opening_html(data: ReportData, primary: str | None) -> list[str]:
    """The page's head, its title, the summary and the run's metadata table."""
    run = data.run
    meta = {
        "status": run.get("status"),
        "windows": json.dumps(_plain(run.get("windows") or {})),
        "seed": run.get("seed"),
        "code version": run.get("code_version"),
        "primary source": primary,
    }
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>adseg run {_e(run.get('run_id', ''))}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>adseg run {_e(run.get('run_id', ''))}</h1>",
        *_summary_html(data, primary),
        _table(pd.DataFrame({"run": list(meta), "value": list(meta.values())}), cls="meta"),
    ]


def _mape_html(data: ReportData) -> list[str]:
    """MAPE by source, one table per supply mode (or why there is none), the fusers that failed
    or warned, and the paper's MAPE for orientation."""
    run = data.run
    parts = [
        "<h2>Forecast error (MAPE) by segmentation source</h2>",
        '<p class="note">Impressions = supply × win rate at the bid; spend = impressions × '
        "expected paid eCPM at the bid / 1000, summed over the evaluation window. "
        "<b>segment</b> = the paper's method (pooled segment c.d.f.s); <b>blended</b> = each "
        "advertiser's own c.d.f. shrunk toward its segment's with weight n/(n+κ), κ chosen on the "
        "training window. Sources <b>own</b> (no segmentation) and <b>global</b> (one segment) "
        "are references. Zero actuals are left out of the MAPE and counted.</p>",
    ]
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
    parts.extend(_fuser_remarks(run.get("parameters") or {}))
    return parts + _paper_mape_html()


def _paper_mape_html() -> list[str]:
    """The paper's MAPE table (Tables 6–7), under display names as the run's own tables have
    (not the column name impressions_mape)."""
    shown = {"impressions_mape": "impressions MAPE", "spend_mape": "spend MAPE"}
    paper = PAPER_MAPE.rename(columns=shown)
    return [
        "<h3>The paper's MAPE</h3>",
        '<p class="note">The paper\'s numbers (Tables 6–7; 1,268 advertisers, one week), '
        "for orientation only — a different marketplace:</p>",
        _table(paper, dict.fromkeys(shown.values(), "pct")),
    ]


def _segments_html(data: ReportData, primary: str | None, max_segments: int) -> list[str]:
    """The primary source's segment c.d.f. plots and its segment sizes."""
    if primary is None:
        return []
    parts = [
        f"<h2>Segment bid landscapes — {_e(primary)}</h2>",
        _cdf_plot_note(data, primary, max_segments),
        _cdf_plot(data, primary, max_segments),
    ]
    sizes = data.segment_sizes[data.segment_sizes["source"] == primary]
    if len(sizes):
        sizes = sizes.sort_values("n_advertisers", ascending=False, kind="stable")
        parts.append(f"<h2>Segment sizes — {_e(primary)}</h2>")
        parts.append(
            f'<p class="note">{len(sizes)} segments; '
            f"{int(sizes['n_advertisers'].sum())} advertisers.</p>"
        )
        parts.append(_table(sizes.drop(columns="source")))
    return parts


def _views_html(data: ReportData) -> list[str]:
    """The views' consistency (Table 5) and clusters per view (Table 4), where the run has them."""
    parts = []
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
    return parts


def _forecasts_html(data: ReportData, primary: str | None, n_worst: int) -> list[str]:
    """The primary source's forecast-vs-actual plots and its worst-forecast advertisers."""
    if primary is None or not len(data.forecasts):
        return []
    return [
        f"<h2>Forecast vs actual — {_e(primary)}</h2>",
        _scatter_plot(data, primary),
        _worst_table(data, primary, n_worst),
    ]


def _run_record_html(run: Mapping[str, Any]) -> list[str]:
    """The run's timings and parameters, last on the page."""
    parts = []
    timings = timing_rows(run.get("timings") or {})
    if timings:
        parts.append("<h2>Timings</h2>")
        parts.append(_table(pd.DataFrame(timings, columns=["stage", "seconds"])))
    params = run.get("parameters") or {}
    if params:
        parts.append("<h2>Parameters</h2>")
        values = [json.dumps(_plain(v)) for v in params.values()]
        frame = pd.DataFrame({"parameter": list(params), "value": values})
        parts.append(_table(frame, cls="meta"))
    return parts


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
