"""The CSV report: :func:`render_csv`, one row per (advertiser, source, method, supply mode),
safe to open in a spreadsheet."""

from __future__ import annotations

import io
import re

import numpy as np

from adseg.report.data import _FORECAST_COLUMNS, ReportData

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
