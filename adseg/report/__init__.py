"""Reports of one run: a self-contained HTML page for analysts, a JSON summary, a CSV of forecasts.

Everything here takes a :class:`ReportData` of plain frames and dicts (what the store reads back
for a run, or what :func:`adseg.forecast.evaluate_sources` returned) and returns a string; nothing
touches the database or the file system.

* :func:`render_html` (``html``, with ``plots``) — MAPE by source, c.d.f. and scatter plots,
  segment sizes, the views' tables, the worst forecasts; every string from data escaped.
* :func:`render_json` (``json``) — the schema in :data:`JSON_SCHEMA` (stable; NaN, ±inf → null).
* :func:`render_csv` (``csv``) — one row per (advertiser, source, method, supply mode).
* ``data`` — :class:`ReportData` and the run-record readers the three share.
"""

from __future__ import annotations

from adseg.report.csv import render_csv
from adseg.report.data import (
    CSV_COLUMNS,
    PAPER_MAPE,
    REFERENCE_SOURCES,
    ReportData,
    fuser_outcomes,
    timing_rows,
)
from adseg.report.html import render_html
from adseg.report.json import (
    JSON_SCHEMA,
    JSON_SCHEMA_VERSION,
    JSON_SOURCE_KEYS,
    JSON_TOP_LEVEL_KEYS,
    render_json,
)

__all__ = [
    "CSV_COLUMNS",
    "JSON_SCHEMA",
    "JSON_SCHEMA_VERSION",
    "JSON_SOURCE_KEYS",
    "JSON_TOP_LEVEL_KEYS",
    "PAPER_MAPE",
    "REFERENCE_SOURCES",
    "ReportData",
    "fuser_outcomes",
    "render",
    "render_csv",
    "render_html",
    "render_json",
    "timing_rows",
]


def render(data: ReportData, fmt: str) -> str:
    """Dispatch on ``fmt`` ∈ {"html", "json", "csv"} (for the CLI's ``--format``)."""
    renderers = {"html": render_html, "json": render_json, "csv": render_csv}
    if fmt not in renderers:
        raise ValueError(f"format must be one of {sorted(renderers)}; got {fmt!r}.")
    return renderers[fmt](data)
