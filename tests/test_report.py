"""Reports: HTML (self-contained, escaped), JSON (stable schema, NaN → null), CSV (round-trips)."""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from adseg.forecast import evaluate_sources
from adseg.report import (
    CSV_COLUMNS,
    JSON_SCHEMA,
    JSON_SOURCE_KEYS,
    JSON_TOP_LEVEL_KEYS,
    ReportData,
    render,
    render_csv,
    render_html,
    render_json,
    timing_rows,
)

# pandas 3's default float parser round-trips and deprecates the option pandas 2 needs for it
EXACT_FLOATS = {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}
EVIL = '<script>alert("x")</script> & Co'


def _market(n=60, seed=0):
    rng = np.random.default_rng(seed)
    seg = rng.integers(0, 4, n)
    win = [rng.lognormal(0.5 * seg[i], 0.4, rng.integers(0, 30)) for i in range(n)]
    cost = [w[w < np.exp(0.5 * seg[i] + 0.3)] for i, w in enumerate(win)]
    ids = np.array([f"a{i}" for i in range(n)])
    days = pd.date_range("2026-02-01", periods=10)
    adv, day = np.repeat(np.arange(n), 10), np.tile(np.arange(10), n)
    supply = rng.integers(100, 10_000, adv.size)
    imps = (supply * rng.uniform(0.2, 0.6, adv.size)).round()
    imps[adv == 0] = 0  # an advertiser with zero actuals
    frame = pd.DataFrame(
        {
            "advertiser_id": ids[adv],
            "date": days[day],
            "bid_requests": supply,
            "bid_ecpm": np.exp(0.5 * seg[adv] + 0.3),
            "impressions": imps,
            "spend": imps * 1.5 / 1000,
        }
    )
    return win, cost, seg, ids, frame[day < 7], frame[day >= 7]


@pytest.fixture(scope="module")
def data() -> ReportData:
    win, cost, seg, ids, train, ev = _market()
    res = evaluate_sources(win, cost, {"rcc": seg, "text": seg % 2}, train, ev, ids, supply="both")
    names = {a: f"Advertiser {a}" for a in ids}
    names["a3"] = EVIL
    run = {
        "run_id": 42,
        "status": "completed",
        "windows": {"train": ["2026-02-01", "2026-02-07"], "eval": ["2026-02-08", "2026-02-10"]},
        "parameters": {"fuser": "rcc", "alphas": [0.01, 0.05, 0.1], "note": "<b>bold</b>"},
        "seed": 7,
        "code_version": "0.1.0+test",
        "timings": {"forecast": 0.5, "total": 1.25},
    }
    consistency = pd.DataFrame(
        {"view_a": ["win"], "view_b": ["ecpm"], "agree": [0.7421], "disagree": [0.2579]}
    )
    clusters = pd.DataFrame(
        {"view": ["win", "win", "ecpm"], "alpha": [0.01, 0.05, 0.01], "n_clusters": [65, 47, 73]}
    )
    return ReportData.from_result(
        run, res, advertiser_names=names, consistency=consistency, clusters_per_view=clusters
    )


def test_html_is_self_contained_and_escapes_advertiser_text(data):
    page = render_html(data, n_worst=100)  # every advertiser in the worst-forecasts table
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    # the advertiser's name must not be live markup; its escaped form is shown
    assert "<script>" not in page and "<script" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; Co" in page
    assert "<b>bold</b>" not in page and "&lt;b&gt;bold&lt;/b&gt;" in page
    # no external assets: no http(s) links, every image inline
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:|//)", page)
    imgs = re.findall(r'<img [^>]*src="([^"]+)"', page)
    assert len(imgs) == 2 and all(s.startswith("data:image/png;base64,") for s in imgs)
    for section in ("MAPE", "Segment bid landscapes", "Segment sizes", "Table 5", "Table 4"):
        assert section in page
    assert "74.21%" in page  # the consistency table shows percentages
    # the paper's table has its own heading and display names (it showed impressions_mape, QA)
    paper = page[page.index("<h3>The paper's MAPE</h3>") :]
    assert "<th>impressions MAPE</th><th>spend MAPE</th>" in paper.split("</table>")[0]
    assert "impressions_mape" not in page and "<th></th>" not in page  # every header named


def test_html_escapes_a_hostile_source_name_and_run_id():
    mape = pd.DataFrame(
        {
            "source": ["<img src=x onerror=alert(1)>"],
            "supply_mode": ["actual"],
            "method": ["segment"],
            "impressions_mape": [0.1],
            "spend_mape": [np.nan],
            "n_advertisers": [3],
            "n_segments": [1],
            "n_zero_impressions": [0],
            "n_zero_spend": [0],
        }
    )
    page = render_html(ReportData(run={"run_id": "<i>r</i>"}, mape=mape))
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<i>r</i>" not in page


def test_html_names_the_fusers_that_failed_or_warned_escaped(data):
    """A fuser that failed was simply missing from the tables, and one that warned (sccbg with
    fewer segments than asked) showed nothing but a JSON blob among the parameters."""
    resolved = {
        "fuser_errors": {"l2": "ValueError: <b>no</b> luck"},
        "fuser_notes": {"sccbg": ["51 segments, fewer than the 55 asked", "x < y"]},
    }
    run = {**data.run, "parameters": {"resolved": resolved}}
    page = render_html(ReportData(run=run, mape=data.mape))
    assert "Fusers — <b>l2</b> failed and was skipped: ValueError: &lt;b&gt;no&lt;/b&gt; luck" in (
        page
    )
    assert "Fusers — <b>sccbg</b>: 51 segments, fewer than the 55 asked; x &lt; y." in page
    assert "Fusers —" not in render_html(data)  # nothing to say: no paragraph


def test_html_of_a_run_without_forecasts_says_how_to_make_them():
    page = render_html(ReportData(run={"run_id": "<b>7</b>"}, mape=pd.DataFrame()))
    assert "No forecasts were scored for this run yet" in page
    assert "adseg forecast --run &lt;b&gt;7&lt;/b&gt;" in page and "<b>7</b>" not in page


def test_json_schema_keys_are_stable(data):
    doc = json.loads(render_json(data))
    assert tuple(doc) == JSON_TOP_LEVEL_KEYS
    assert set(doc) == {
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
    }
    assert doc["schema_version"] == 4 and doc["run_id"] == 42 and doc["supply_mode"] == "actual"
    assert set(doc["sources"]) == {"rcc", "text", "own", "global"}
    for block in (doc["sources"], doc["blended"], *doc["supply_forecast"].values()):
        for entry in block.values():
            assert set(entry) == {
                "impressions_mape",
                "spend_mape",
                "n_advertisers",
                "n_segments",
                "n_zero_impressions",
                "n_zero_spend",
                "n_missing_forecast",
            }
            assert tuple(entry) == JSON_SOURCE_KEYS
    assert set(doc["supply_forecast"]) == {"segment", "blended"}
    assert doc["sources"]["rcc"]["n_zero_impressions"] == 1
    assert doc["sources"]["rcc"]["n_segments"] == 4
    assert set(doc["kappa"]["rcc"]) == {"win", "cost"}
    assert doc["clusters_per_view"][0] == {"view": "win", "alpha": 0.01, "n_clusters": 65}
    # the documented schema names every key
    for key in JSON_TOP_LEVEL_KEYS + JSON_SOURCE_KEYS:
        assert f'"{key}"' in JSON_SCHEMA


def test_the_docs_show_the_json_schema_as_it_is():
    page = Path(__file__).resolve().parents[1] / "docs" / "report-json.md"
    assert JSON_SCHEMA in page.read_text(encoding="utf-8")


def _stored_style_mape(**extra) -> pd.DataFrame:
    """A metrics frame as the store gives it back: κ = ∞ stored as NULL (NaN)."""
    return pd.DataFrame(
        {
            "source": ["s", "s", "s", "s"],
            "supply_mode": ["actual", "actual", "forecast", "forecast"],
            "method": ["segment", "blended"] * 2,
            "impressions_mape": [0.1, 0.2, 0.3, 0.4],
            "spend_mape": [0.1, 0.2, 0.3, 0.4],
            "n_advertisers": [3, 3, 2, 2],
            "n_segments": [1, 1, 1, 1],
            "n_zero_impressions": [0, 0, 0, 0],
            "n_zero_spend": [0, 0, 0, 0],
            "kappa_win": [np.nan, np.nan, np.nan, np.nan],
            "kappa_cost": [np.nan, 2.5, np.nan, 2.5],
            **extra,
        }
    )


def test_html_shows_an_infinite_kappa_as_infinity_not_as_not_applicable():
    """A blended row's NULL κ is κ = ∞ (the JSON schema says so); the HTML showed "—"."""
    page = render_html(ReportData(run={"run_id": 1}, mape=_stored_style_mape()))
    tables = page[page.index("<h2>Forecast error") :]  # after the summary, which shows no κ
    row = re.search(r"<tr><td>s</td>.*?</tr>", tables, re.S).group(0)
    assert "∞" in row and "2.5" in row


def test_advertisers_without_a_supply_forecast_are_counted_in_every_report():
    """They were recorded in the metrics table only: 2 advertisers scored of 3, no reason given."""
    mape = _stored_style_mape(n_missing_forecast=[0, 0, 1, 1])
    doc = json.loads(render_json(ReportData(run={"run_id": 1}, mape=mape)))
    assert doc["supply_forecast"]["segment"]["s"]["n_missing_forecast"] == 1
    assert doc["sources"]["s"]["n_missing_forecast"] == 0
    page = render_html(ReportData(run={"run_id": 1}, mape=mape))
    assert "n_missing_forecast" in page


def test_json_nan_and_inf_become_null():
    mape = pd.DataFrame(
        {
            "source": ["s", "s"],
            "supply_mode": ["actual", "actual"],
            "method": ["segment", "blended"],
            "impressions_mape": [np.nan, 0.2],
            "spend_mape": [0.1, np.inf],
            "n_advertisers": [2, 2],
            "n_segments": [1, 1],
            "n_zero_impressions": [2, 2],
            "n_zero_spend": [0, 0],
            "kappa_win": [np.nan, np.inf],
            "kappa_cost": [np.nan, 3.0],
        }
    )
    text = render_json(ReportData(run={"run_id": "r1", "seed": np.int64(3)}, mape=mape))
    assert "NaN" not in text and "Infinity" not in text
    doc = json.loads(text)
    assert doc["sources"]["s"]["impressions_mape"] is None
    assert doc["blended"]["s"]["spend_mape"] is None
    assert doc["kappa"] == {"s": {"win": None, "cost": 3.0}}
    assert doc["seed"] == 3 and doc["supply_forecast"] == {} and doc["consistency"] == []


def test_csv_round_trips_through_pandas(data):
    text = render_csv(data)
    back = pd.read_csv(
        io.StringIO(text),
        dtype={"advertiser_id": str},
        keep_default_na=False,
        **EXACT_FLOATS,
    )
    assert tuple(back.columns) == CSV_COLUMNS
    f = data.forecasts
    assert len(back) == len(f)
    key = ["source", "method", "supply_mode", "advertiser_id"]
    merged = back.merge(f, on=key, suffixes=("", "_orig"), validate="one_to_one")
    assert len(merged) == len(f)
    for c in ("impressions_forecast", "impressions_actual", "spend_forecast", "spend_actual"):
        # exact: the CSV used to round to 10 significant digits (spend 1253623688.246912 → …688)
        np.testing.assert_array_equal(merged[c], merged[f"{c}_orig"])
    assert set(back.loc[back.advertiser_id == "a3", "advertiser_name"]) == {EVIL}
    assert set(back.loc[back.advertiser_id == "a5", "advertiser_name"]) == {"Advertiser a5"}
    assert set(back["source"]) == {"rcc", "text", "own", "global"}
    line = text.splitlines()[1].split(",")
    assert "." not in line[CSV_COLUMNS.index("impressions_actual")]  # a count: 1798540, not .0


def test_csv_neutralises_spreadsheet_formulas():
    f = pd.DataFrame(
        {
            "advertiser_id": ["x", "@SUM(A1)"],
            "source": ["s", "s"],
            "method": ["segment"] * 2,
            "supply_mode": ["actual"] * 2,
            "impressions_forecast": [1.0, 1.0],
            "impressions_actual": [2.0, 2.0],
            "spend_forecast": [0.1, 0.1],
            "spend_actual": [math.pi, 1253623688.246912],
        }
    )
    d = ReportData(run={}, mape=pd.DataFrame(), forecasts=f, advertiser_names={"x": "=1+2"})
    text = render_csv(d)
    back = pd.read_csv(io.StringIO(text), dtype={"advertiser_id": str}, **EXACT_FLOATS)
    back = back.set_index("advertiser_id")
    assert back.loc["x", "advertiser_name"] == "'=1+2"
    assert back.loc["x", "spend_actual"] == math.pi
    assert ",1253623688.246912\n" in text  # every digit, no exponent
    assert "'@SUM(A1)" in back.index  # ids are user-supplied strings too


def test_csv_quotes_line_breaks_and_neutralises_formulas_after_them():
    """A name holding a lone CR was written unquoted (rows end in LF, and the csv module quotes
    only its line terminator's characters): a spreadsheet or csv.reader split the record there,
    and ``=HYPERLINK(1)`` after the CR became a formula cell without its apostrophe."""
    import csv

    names = {"a": "Acme\r=HYPERLINK(1)", "b": "two\nlines\n@SUM(A1)", "c": "x\r\n+1", "d": "p"}
    amounts = dict.fromkeys(CSV_COLUMNS[5:], 1.0)
    keys = {"source": "s", "method": "segment", "supply_mode": "actual"}
    forecasts = pd.DataFrame({"advertiser_id": list(names), **keys, **amounts})
    data = ReportData(run={}, mape=pd.DataFrame(), forecasts=forecasts, advertiser_names=names)
    text = render_csv(data)
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert [len(row) for row in rows] == [len(CSV_COLUMNS)] * 5
    shown = {"a": "Acme\r'=HYPERLINK(1)", "b": "two\nlines\n'@SUM(A1)", "c": "x\r\n'+1", "d": "p"}
    assert {row[0]: row[1] for row in rows[1:]} == shown
    back = pd.read_csv(io.StringIO(text), keep_default_na=False)
    assert dict(zip(back["advertiser_id"], back["advertiser_name"], strict=True)) == shown
    assert not [line for line in re.split(r"\r\n|\r|\n", text) if re.match("[=+@-]", line)]
    assert text.count("\r\n") == 1  # rows end in LF; the CR LF is c's, inside its quotes


def test_render_dispatch_and_unknown_format(data):
    assert render(data, "json") == render_json(data)
    with pytest.raises(ValueError, match="format"):
        render(data, "pdf")


def test_primary_source_defaults_to_the_fuser_then_first_named(data):
    assert data.resolved_primary_source() == "rcc"
    d = ReportData(run={"parameters": {"primary_fuser": "text"}}, mape=data.mape)
    assert d.resolved_primary_source() == "text"
    d = ReportData(run={"parameters": {}}, mape=data.mape[data.mape.source != "rcc"])
    assert d.resolved_primary_source() == "text"


def test_pipeline_style_metadata_dates_and_nested_timings(data):
    import datetime as dt

    run = {
        "run_id": 3,
        "status": "completed",
        "windows": {"train_start": dt.date(2026, 3, 2), "eval_end": dt.date(2026, 3, 15)},
        "parameters": {"primary_fuser": "rcc", "methods": ("segment", "blended")},
        "seed": 0,
        "code_version": "0.1.0",
        "timings": {"pull": 0.1, "fusers": {"rcc": 0.5, "l2": 0.25}, "notes": {"x": [1, 2]}},
    }
    d = ReportData(run=run, mape=data.mape, forecasts=data.forecasts)
    doc = json.loads(render_json(d))
    assert doc["windows"] == {"train_start": "2026-03-02", "eval_end": "2026-03-15"}
    assert doc["timings"]["fusers"] == {"rcc": 0.5, "l2": 0.25}
    assert doc["parameters"]["methods"] == ["segment", "blended"]
    page = render_html(d)
    assert "2026-03-02" in page and "rcc" in page


def test_nested_timings_are_table_rows_not_dict_text(data):
    """The HTML timings table showed the nested fuser seconds as a Python dict's text."""
    timings = {
        "pull": 0.1,
        "total": 0.9,
        "fusers": {"rcc": 0.5, "l2": 0.25},
        "adseg segment": {"total": 2.0, "fusers": {"<rcc>": 1.5}},
    }
    assert timing_rows(timings) == [
        ("pull", 0.1),
        ("total", 0.9),
        ("fusers / rcc", 0.5),
        ("fusers / l2", 0.25),
        ("adseg segment", 2.0),
        ("adseg segment / fusers / <rcc>", 1.5),
    ]
    page = render_html(ReportData(run={"timings": timings}, mape=data.mape))
    section = page[page.index("<h2>Timings</h2>") :]
    assert "<td>fusers / l2</td><td>0.25</td>" in section
    assert "adseg segment / fusers / &lt;rcc&gt;" in section and "{" not in section


def test_scatter_of_all_zero_deliveries_draws_without_warnings():
    """Every actual and forecast zero (nothing delivered): no point to plot on a log axis, and
    no matplotlib warning about an empty legend reaches the user."""
    import warnings

    from adseg.report.plots import _scatter_plot

    f = pd.DataFrame(
        {
            "advertiser_id": ["x", "y"],
            "source": ["rcc", "rcc"],
            "method": ["segment", "segment"],
            "supply_mode": ["actual", "actual"],
            "impressions_forecast": [0.0, 0.0],
            "impressions_actual": [0.0, 0.0],
            "spend_forecast": [0.0, 0.0],
            "spend_actual": [0.0, 0.0],
        }
    )
    d = ReportData(run={}, mape=pd.DataFrame({"supply_mode": ["actual"]}), forecasts=f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _scatter_plot(d, "rcc").startswith("<img")


def test_the_cli_table_says_how_many_advertisers_had_no_supply_forecast(capsys):
    from adseg.cli import _print_mape_tables

    _print_mape_tables(_stored_style_mape(n_missing_forecast=[0, 0, 1, 1]))
    text = " ".join(capsys.readouterr().out.split())
    assert "1 advertiser with no training delivery to forecast supply from" in text
    assert "delivered nothing" not in text
    # zero actuals are left out of MAPE: the table counted them among its advertisers silently
    _print_mape_tables(_stored_style_mape(n_zero_impressions=[1, 1, 0, 0], n_zero_spend=[2] * 4))
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "advertisers delivered nothing in the evaluation window (1 with no impressions and 2 "
        "with no spend): left out of that MAPE" in text
    )


# the options every command shows in --help, beyond the ones docs/cli.md covers for all commands
_DOCUMENTED_COMMANDS = (
    ("nightly",),
    ("views",),
    ("segment",),
    ("forecast",),
    ("report",),
    ("runs",),
    ("sample", "generate"),
    ("db", "upgrade"),
    ("db", "unlock"),
)


def _cli_command(*names: str):
    import typer

    from adseg.cli import app

    command = typer.main.get_command(app)
    for name in names:
        command = command.commands[name]
    return command


@pytest.mark.parametrize("names", _DOCUMENTED_COMMANDS, ids=" ".join)
def test_the_cli_reference_documents_every_option_of_the_analysts_commands(names):
    """An option only --help knows of (nightly's --verbose, sample generate's --train-days
    were) is one a new analyst never finds in the command reference."""
    reference = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
    text = reference.read_text(encoding="utf-8")
    everywhere = {"--help", "--database-url", "--quiet"}
    options = [
        opt
        for param in _cli_command(*names).params
        for opt in param.opts
        if opt.startswith("--") and opt not in everywhere
    ]
    missing = [opt for opt in options if not re.search(re.escape(opt) + r"(?![\w-])", text)]
    assert not missing, f"adseg {' '.join(names)}: docs/cli.md does not mention {missing}"


def test_db_unlock_force_help_names_both_cases_the_readme_gives():
    """--force also clears a lock of a live process of this host (its id reused by another
    program): the error of `db unlock` says so, and the help said only "another host"."""
    [force] = [p for p in _cli_command("db", "unlock").params if "--force" in p.opts]
    assert "another host" in force.help and "this host" in force.help


def test_the_cdf_plot_note_says_how_many_segments_it_draws():
    """It said "the 12 largest segments" of a source with 5 (QA)."""
    from adseg.report.plots import _cdf_plot_note

    def note(n_segments, max_segments=12):
        cdfs = pd.DataFrame({"source": "rcc", "segment": np.arange(n_segments)})
        return _cdf_plot_note(
            ReportData(run={}, mape=pd.DataFrame(), segment_cdfs=cdfs), "rcc", max_segments
        )

    assert "all 5 of its segments" in note(5)
    assert "the 12 largest of its 30 segments" in note(30)
    assert "its segment " in note(1) and note(0) == ""


def test_html_and_json_lead_with_the_recommended_source(data):
    """A run's recommendation (its reason escaped) opens the page, with the MAPE by size band;
    the parameter dump comes last; the JSON names the source."""
    resolved = {
        "recommended_source": "rcc",
        "recommendation_reason": "lowest backtest <MAPE>",
        "mape_by_band": [
            {"source": "rcc", "method": "segment", "supply_mode": "actual", "band": "1-4",
             "n_advertisers": 3, "impressions_mape": 0.25, "spend_mape": 0.5},
        ],
    }  # fmt: skip
    run = {**data.run, "parameters": {"seed": 3, "resolved": resolved}}
    report = ReportData(run=run, mape=data.mape)
    page = render_html(report)
    summary = page.index("<h2>Summary</h2>")
    assert summary < page.index("<h2>Forecast error") < page.index("<h2>Parameters</h2>")
    assert "<b>rcc</b>: lowest backtest &lt;MAPE&gt;" in page
    assert "MAPE by advertiser size" in page
    doc = json.loads(render_json(report))
    assert doc["recommended_source"] == "rcc"
    assert doc["recommendation"]["reason"] == "lowest backtest <MAPE>"
    assert doc["mape_by_band"][0]["band"] == "1-4"
    plain = json.loads(render_json(data))  # a run made before the recommendation
    assert plain["recommended_source"] is None and plain["mape_by_band"] == []
