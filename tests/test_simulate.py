"""Tests of the simulated marketplace (adseg.simulate): format, determinism, and the properties the
forecasting evaluation relies on — heavy-tailed sample counts, segments that the KS statistic can
see, and delivery that agrees with the true landscape within sampling error."""

from __future__ import annotations

import gzip
import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import ks_2samp

from adseg.simulate import (
    FAULT_KINDS,
    Marketplace,
    MarketplaceConfig,
    family_config,
    simulate_marketplace,
    true_landscape,
    write_marketplace,
)
from adseg.simulate.landscape import _mixture_cdf

SMALL = MarketplaceConfig(
    n_advertisers=60, n_segments=6, days=4, train_days=2, median_train_samples=20.0, seed=11
)
SAMPLES = Path(__file__).resolve().parents[1] / "sample_campaigns"


@pytest.fixture(scope="module")
def small() -> Marketplace:
    return simulate_marketplace(SMALL)


@pytest.fixture(scope="module")
def default() -> Marketplace:
    """The default marketplace (1,268 advertisers, 14 days): a few seconds."""
    return simulate_marketplace()


def _read(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def _clean_train(market: Marketplace) -> pd.DataFrame:
    """Training-window auctions of advertisers without injected faults."""
    a = market.auctions
    faulty = set(market.truth.loc[market.truth["fault_kind"] != "", "advertiser_id"])
    start = pd.Timestamp(market.config.start_date, tz="UTC")
    train_end = start + pd.Timedelta(days=market.config.train_days)
    return a[(a["ts"] < train_end) & ~a["advertiser_id"].isin(faulty)]


# ----------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_advertisers": 0}, "n_advertisers"),
        ({"days": 5, "train_days": 5}, "train_days"),
        ({"start_date": "2026-13-01"}, "start_date"),
        ({"fault_share": 1.5}, "fault_share"),
        ({"median_daily_supply": float("nan")}, "median_daily_supply"),
        # a Python int beyond float64 used to crash np.isfinite with a TypeError traceback
        ({"seed": 10**20}, r"seed must be in \[0, 2\*\*63\)"),
        ({"n_advertisers": 10**20}, "n_advertisers must be in"),
        ({"days": 367}, r"days must be in \[2, 366\]"),
        # days ingest would refuse as placeholders (it used to write them, then refuse them)
        ({"start_date": "2099-12-01", "days": 60, "train_days": 30}, "2099-12-31"),
        ({"start_date": "1999-12-30"}, "2000-01-01"),
        ({"price_family": "weibull"}, "price_family must be one of 'lognormal', 'gamma'"),
        ({"segment_size_concentration": 0.0}, "segment_size_concentration must be > 0"),
        ({"segment_size_concentration": float("inf")}, "segment_size_concentration"),
    ],
)
def test_config_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MarketplaceConfig(**kwargs)


def test_simulate_rejects_wrong_config_type():
    with pytest.raises(TypeError, match="MarketplaceConfig"):
        simulate_marketplace({"n_advertisers": 3})


# ----------------------------------------------------------------------------- determinism


def _write_bytes(market: Marketplace, out: Path) -> dict[str, bytes]:
    paths = write_marketplace(market, out)
    return {name: p.read_bytes() for name, p in paths.items()}


def test_same_seed_gives_byte_identical_files(tmp_path, small):
    first = _write_bytes(small, tmp_path / "a")
    second = _write_bytes(simulate_marketplace(SMALL), tmp_path / "b")
    assert set(first) == {"advertisers", "auctions", "delivery", "truth", "config"}
    for name in first:
        assert first[name] == second[name], name


def test_different_seed_gives_different_files(tmp_path, small):
    first = _write_bytes(small, tmp_path / "a")
    other = MarketplaceConfig(**{**SMALL.__dict__, "seed": SMALL.seed + 1})
    second = _write_bytes(simulate_marketplace(other), tmp_path / "b")
    for name in ("advertisers", "auctions", "delivery", "truth"):
        assert first[name] != second[name], name


def test_gzip_header_has_no_mtime_and_no_name(tmp_path, small):
    paths = write_marketplace(small, tmp_path)
    for table in ("advertisers", "auctions", "delivery"):
        head = paths[table].read_bytes()[:10]
        assert head[:2] == b"\x1f\x8b"
        assert head[3] & 0x08 == 0, "FNAME flag set"
        assert head[4:8] == b"\x00\x00\x00\x00", "mtime not 0"


def test_a_write_that_fails_midway_leaves_the_folder_as_it_was(tmp_path, small, monkeypatch):
    """Ctrl-C during `sample generate` left a truncated auctions.csv.gz, which `make demo` then
    took for a marketplace on every later run; a stop while regenerating mixed old and new
    tables. Every file is now written under a temporary name and renamed at the end."""
    from adseg import tempfiles

    old = _write_bytes(small, tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    real_create = tempfiles.create_beside
    created = []

    def stopped_after_two_files(path, *args):
        if len(created) == 2:
            raise KeyboardInterrupt
        created.append(path.name)
        return real_create(path, *args)

    monkeypatch.setattr(tempfiles, "create_beside", stopped_after_two_files)
    other = MarketplaceConfig(**{**SMALL.__dict__, "seed": SMALL.seed + 1})
    with pytest.raises(KeyboardInterrupt):
        write_marketplace(simulate_marketplace(other), tmp_path)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no partial file left
    files = {t: f"{t}.csv.gz" for t in ("advertisers", "auctions", "delivery")}
    files |= {"truth": "truth.csv", "config": "config.json"}
    assert {name: (tmp_path / file).read_bytes() for name, file in files.items()} == old


def test_a_link_planted_under_a_temporary_name_is_not_written_through(tmp_path, small):
    """The temporary names were predictable (.config.json.partial): a symbolic link planted
    there in a shared folder had its target overwritten, and config.json became that link."""
    victim = tmp_path / "victim.txt"
    victim.write_text("data")
    out = tmp_path / "market"
    out.mkdir()
    for name in ("config.json", "truth.csv", "advertisers.csv.gz"):
        (out / f".{name}.partial").symlink_to(victim)
        (out / f".{name}.tmp").symlink_to(victim)
    paths = write_marketplace(small, out)
    assert victim.read_text() == "data"
    assert not any(path.is_symlink() for path in paths.values())


def test_a_linked_marketplace_file_is_written_through(tmp_path, small):
    """A file that is a symbolic link keeps being one: its target gets the new table."""
    elsewhere = tmp_path / "archive"
    elsewhere.mkdir()
    (elsewhere / "truth.csv").write_text("old")
    out = tmp_path / "market"
    out.mkdir()
    (out / "truth.csv").symlink_to(elsewhere / "truth.csv")
    paths = write_marketplace(small, out)
    assert (out / "truth.csv").is_symlink()
    assert (elsewhere / "truth.csv").read_bytes() == paths["truth"].read_bytes() != b"old"


# ----------------------------------------------------------------------------- format


def test_files_follow_the_ingest_format(tmp_path, small):
    paths = write_marketplace(small, tmp_path)
    adv = _read(paths["advertisers"])
    auc = _read(paths["auctions"])
    dlv = _read(paths["delivery"])
    truth = _read(paths["truth"])
    assert list(adv.columns) == ["advertiser_id", "name", "description"]
    assert list(auc.columns) == [
        "auction_id",
        "advertiser_id",
        "ts",
        "bid_ecpm",
        "market_price_ecpm",
        "won",
        "paid_ecpm",
    ]
    assert list(dlv.columns) == [
        "advertiser_id",
        "date",
        "bid_requests",
        "bid_ecpm",
        "impressions",
        "spend",
    ]
    assert adv["advertiser_id"].is_unique and adv["advertiser_id"].str.len().max() <= 64
    assert auc["auction_id"].is_unique and auc["auction_id"].str.len().max() <= 64
    assert set(auc["advertiser_id"]) <= set(adv["advertiser_id"])
    assert set(dlv["advertiser_id"]) == set(adv["advertiser_id"])
    assert list(truth["advertiser_id"]) == list(adv["advertiser_id"])
    assert auc["ts"].str.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ").all()
    assert dlv["date"].str.fullmatch(r"\d{4}-\d\d-\d\d").all()
    assert set(auc["won"]) <= {"true", "false"}
    price = re.compile(r"\d+\.\d\d")
    for col in ("bid_ecpm", "market_price_ecpm"):
        assert auc[col].str.fullmatch(price).all(), col
    won = auc["won"] == "true"
    assert auc.loc[won, "paid_ecpm"].str.fullmatch(price).all()
    assert (auc.loc[~won, "paid_ecpm"] == "").all()
    req = dlv["bid_requests"].astype(np.int64)
    imp = dlv["impressions"].astype(np.int64)
    assert (req >= 0).all() and (imp >= 0).all() and (imp <= req).all()
    spend = dlv["spend"].astype(np.float64)
    assert np.isfinite(spend).all() and (spend >= 0).all()
    assert len(dlv) == SMALL.n_advertisers * SMALL.days
    # Rows are sorted by advertiser, then time: a stable order for byte-identical files.
    assert (auc["advertiser_id"] + auc["ts"]).is_monotonic_increasing


def test_clean_rows_follow_the_auction_rules(small):
    a = small.auctions
    faulty = set(small.truth.loc[small.truth["fault_kind"] != "", "advertiser_id"])
    clean = a[~a["advertiser_id"].isin(faulty)]
    rule = clean["advertiser_id"].map(small.truth.set_index("advertiser_id")["auction_rule"])
    won = clean["won"].to_numpy()
    np.testing.assert_array_equal(won, clean["bid_ecpm"] >= clean["market_price_ecpm"] - 1e-9)
    paid, mp, bid = (clean[c].to_numpy() for c in ("paid_ecpm", "market_price_ecpm", "bid_ecpm"))
    assert np.isnan(paid[~won]).all()
    assert np.all(paid[won] <= bid[won] + 1e-9) and np.all(paid[won] >= mp[won] - 1e-9)
    second = won & (rule == "second_price").to_numpy()
    np.testing.assert_allclose(paid[second], mp[second])
    reserve = clean["advertiser_id"].map(small.truth.set_index("advertiser_id")["reserve_ecpm"])
    assert np.all(mp >= reserve.to_numpy() - 1e-9)


def test_tiny_sample_is_hand_checkable():
    tiny = SAMPLES / "tiny"
    adv = _read(tiny / "advertisers.csv")
    auc = _read(tiny / "auctions.csv")
    assert 3 <= len(adv) <= 5 and 20 <= len(auc) <= 100
    tricky = adv["description"].str.contains(",") & adv["description"].str.contains('"')
    tricky &= adv["description"].str.contains("\n") & adv["description"].map(str.isascii).eq(False)
    assert tricky.sum() == 1
    assert (_read(tiny / "truth.csv")["fault_kind"] == "").all()


def test_committed_small_sample_is_a_regenerated_marketplace():
    small = SAMPLES / "small"
    sizes = sum(p.stat().st_size for p in small.iterdir())
    assert sizes < 3_000_000
    with gzip.open(small / "auctions.csv.gz", "rt", encoding="utf-8") as fh:
        auc = pd.read_csv(io.StringIO(fh.read()), dtype=str, keep_default_na=False)
    truth = _read(small / "truth.csv")
    assert 200 <= len(truth) <= 400 and len(auc) > 10_000
    assert set(auc["advertiser_id"]) <= set(truth["advertiser_id"])


# ----------------------------------------------------------------------------- properties


def test_faults_are_injected_and_visible(default):
    truth = default.truth
    kinds = truth.loc[truth["fault_kind"] != "", "fault_kind"]
    assert set(kinds) == set(FAULT_KINDS)
    assert 0.04 <= len(kinds) / len(truth) <= 0.08
    a = default.auctions.merge(truth[["advertiser_id", "fault_kind"]], on="advertiser_id")
    unit = a[a["fault_kind"] == "unit_market"]
    assert (unit["market_price_ecpm"] > 1000 * unit["bid_ecpm"]).mean() > 0.2
    clean = a[a["fault_kind"] == ""]
    assert clean["market_price_ecpm"].max() < 1000


@pytest.mark.slow
def test_sample_counts_span_two_orders_of_magnitude(default):
    counts = default.truth["train_samples_logged"].to_numpy()
    lo, hi = np.quantile(counts, [0.01, 0.99])
    assert hi / max(lo, 1) >= 100, (lo, hi)
    assert np.mean(counts < 20) >= 0.10  # many small advertisers: why pooling helps
    assert counts.max() >= 2000
    # ... and the total stays in the budget the nightly pipeline was sized for.
    assert 200_000 <= len(default.auctions) <= 600_000
    supply = default.truth["median_daily_supply"].to_numpy()
    assert np.quantile(supply, 0.99) / np.quantile(supply, 0.01) >= 1000


@pytest.mark.slow
def test_within_segment_ks_is_smaller_than_between(default):
    """Two-sample KS statistics of market prices: pairs from one segment vs pairs from two."""
    clean = _clean_train(default)
    seg = default.truth.set_index("advertiser_id")["segment"]
    groups = {k: v.to_numpy() for k, v in clean.groupby("advertiser_id")["market_price_ecpm"]}
    big = np.array([k for k, v in groups.items() if v.size >= 200])
    rng = np.random.default_rng(0)
    segs = seg[big].to_numpy()
    within, between = [], []
    pairs = rng.integers(0, big.size, (4000, 2))
    same = segs[pairs[:, 0]] == segs[pairs[:, 1]]
    distinct = pairs[:, 0] != pairs[:, 1]
    for i, j in pairs[same & distinct][:150]:  # loop over ≤ 150 sampled pairs (scipy per pair)
        within.append(ks_2samp(groups[big[i]], groups[big[j]]).statistic)
    for i, j in pairs[~same][:150]:
        between.append(ks_2samp(groups[big[i]], groups[big[j]]).statistic)
    within, between = np.array(within), np.array(between)
    assert within.size >= 50 and between.size == 150
    # Measured at the default seed: within median ≈ 0.08, between ≈ 0.74 (same vertical, other
    # segment ≈ 0.27).
    assert np.median(within) < 0.15
    assert np.median(between) > 4 * np.median(within)
    assert np.mean(within < np.median(between)) > 0.95


def _landscape_cells(market):
    """Clean logged training auctions per distinct (advertiser, bid) — about 7 per advertiser —
    with rows, wins and paid sum, and true_landscape's (win rate, paid eCPM) at each."""
    clean = _clean_train(market)
    cells = (
        clean.assign(paid=clean["paid_ecpm"].fillna(0.0))
        .groupby(["advertiser_id", "bid_ecpm"], sort=True)
        .agg(rows=("won", "size"), wins=("won", "sum"), paid_sum=("paid", "sum"))
        .reset_index()
    )
    truth = market.truth.set_index("advertiser_id").loc[cells["advertiser_id"]].reset_index()
    win, ecpm = true_landscape(truth, cells["bid_ecpm"].to_numpy())
    return cells, win, ecpm


def _assert_calibrated(cells, win, ecpm):
    """The logged win share agrees with the true win rate overall and within its deciles (a
    z-test per decile), and the logged mean paid eCPM with the true conditional mean."""
    rows, wins = cells["rows"].to_numpy(), cells["wins"].to_numpy()
    assert abs(wins.sum() / rows.sum() - (win * rows).sum() / rows.sum()) < 0.01
    bins = np.minimum((win * 10).astype(int), 9)
    for b in np.unique(bins):  # loop over ≤ 10 bins
        sel = bins == b
        expected = (win[sel] * rows[sel]).sum()
        se = np.sqrt((win[sel] * (1 - win[sel]) * rows[sel]).sum())
        assert abs(wins[sel].sum() - expected) < 4 * se + 0.01 * rows[sel].sum(), b
    expected_paid = (np.nan_to_num(ecpm) * wins).sum()
    assert abs(cells["paid_sum"].sum() - expected_paid) / expected_paid < 0.02


def test_true_landscape_matches_the_logged_sample(default):
    """Win rate of clean logged auctions vs the true F at the day's bid (z-test per bin)."""
    # Base distribution; the market levels vary by ±3% a day, well inside the tolerance below.
    cells, win, ecpm = _landscape_cells(default)
    _assert_calibrated(cells, win, ecpm)


def test_delivery_matches_true_win_rate_times_supply():
    """Impressions ~ Binomial(supply, F(bid)) and spend = Σ paid / 1000: recompute F and the
    expected paid eCPM from truth alone (market levels fixed so the day's F is the base F)."""
    cfg = MarketplaceConfig(n_advertisers=300, n_segments=10, market_day_sigma=0.0, seed=5)
    market = simulate_marketplace(cfg)
    d = market.delivery
    n, days = cfg.n_advertisers, cfg.days
    bids = d["bid_ecpm"].to_numpy().reshape(n, days)
    win, ecpm = true_landscape(market.truth, bids)
    supply = d["bid_requests"].to_numpy().reshape(n, days).astype(np.float64)
    imp = d["impressions"].to_numpy().reshape(n, days).astype(np.float64)
    expected = supply * win
    var = supply * win * (1 - win)
    ok = var > 0
    z = (imp[ok] - expected[ok]) / np.sqrt(var[ok])
    assert abs(z.mean()) < 0.1 and 0.9 < z.std() < 1.1, (z.mean(), z.std())
    assert np.all(imp[~ok] == expected[~ok])
    # Summed over the evaluation window the relative error is tiny for the typical advertiser.
    ev = slice(cfg.train_days, days)
    rel = np.abs(imp[:, ev].sum(1) - expected[:, ev].sum(1)) / np.maximum(expected[:, ev].sum(1), 1)
    assert np.median(rel) < 0.01
    spend = d["spend"].to_numpy().reshape(n, days)
    pos = imp > 1000
    ratio = spend[pos] * 1000 / (imp[pos] * ecpm[pos])
    assert abs(np.median(ratio) - 1) < 0.005 and np.quantile(np.abs(ratio - 1), 0.99) < 0.05


def test_true_landscape_validates_input(small):
    with pytest.raises(ValueError, match="rows"):
        true_landscape(small.truth, np.ones(3))
    with pytest.raises(ValueError, match="finite"):
        true_landscape(small.truth, np.full(len(small.truth), np.nan))


def _pooled_impressions(market: Marketplace, groups: np.ndarray) -> np.ndarray:
    """Evaluation-window impressions forecast Σ_d supply_d · F̂_g(b_d), F̂_g the empirical c.d.f.
    of the training-window market prices pooled over each advertiser's group (one sort by
    (group, price); one searchsorted for all advertiser-days)."""
    cfg = market.config
    n, train = cfg.n_advertisers, cfg.train_days
    a = market.auctions
    a = a[a["ts"] < pd.Timestamp(cfg.start_date, tz="UTC") + pd.Timedelta(days=train)]
    adv = pd.Index(market.truth["advertiser_id"]).get_indexer(a["advertiser_id"])
    ticks = np.round(a["market_price_ecpm"].to_numpy() * 100).astype(np.int64)
    g = groups[adv].astype(np.int64)
    key = np.sort(g * 2**40 + ticks)
    counts = np.bincount(g, minlength=groups.max() + 1)
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    d = market.delivery
    bids = np.round(d["bid_ecpm"].to_numpy().reshape(n, -1)[:, train:] * 100).astype(np.int64)
    supply = d["bid_requests"].to_numpy().reshape(n, -1)[:, train:]
    gq = np.repeat(groups, bids.shape[1]).astype(np.int64)
    below = np.searchsorted(key, gq * 2**40 + bids.ravel(), side="right") - start[gq]
    rate = np.where(counts[gq] > 0, below / np.maximum(counts[gq], 1), 0.0)
    return (supply.ravel() * rate).reshape(n, -1).sum(axis=1)


def test_segment_pooling_beats_own_samples_for_small_advertisers():
    """The point of the sample: with few samples, the true segment's pool forecasts impressions
    far better than the advertiser's own samples; a global pool is far worse; the truth is the
    floor. (benchmarks/sample_pooling.py measures the full table on the default marketplace.)"""
    from adseg.metrics import mape

    market = simulate_marketplace(MarketplaceConfig(n_advertisers=400, n_segments=15, seed=3))
    truth = market.truth
    n, train = len(truth), market.config.train_days
    actual = truth["eval_impressions"].to_numpy().astype(np.float64)
    n_train = truth["train_samples_logged"].to_numpy()
    small = (n_train < 30) & (actual > 0)
    assert small.sum() >= 80
    own = _pooled_impressions(market, np.arange(n))
    seg = _pooled_impressions(market, truth["segment"].to_numpy())
    glob = _pooled_impressions(market, np.zeros(n, dtype=np.int64))
    bids = market.delivery["bid_ecpm"].to_numpy().reshape(n, -1)[:, train:]
    supply = market.delivery["bid_requests"].to_numpy().reshape(n, -1)[:, train:]
    oracle = (supply * true_landscape(truth, bids)[0]).sum(axis=1)
    ok = actual > 0
    m_own, m_seg = mape(actual[small], own[small]), mape(actual[small], seg[small])
    # Measured (seed 3): small advertisers (n=114) own ≈ 0.36, segment ≈ 0.12; global ≈ 0.60.
    assert m_seg < 0.5 * m_own, (m_seg, m_own)
    assert mape(actual[ok], glob[ok]) > 3 * mape(actual[ok], seg[ok])
    assert mape(actual[ok], oracle[ok]) < 0.3 * mape(actual[ok], seg[ok])


def test_config_json_round_trips(tmp_path, small):
    """config.json is valid JSON and rebuilds the configuration that wrote it."""

    paths = write_marketplace(small, tmp_path)
    raw = json.loads(paths["config"].read_text(encoding="utf-8"))
    rebuilt = MarketplaceConfig(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
    )
    assert rebuilt == small.config


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--days", "3", "--train-days", "7"],
            "--train-days must be in [1, --days); got 7 with --days=3.",
        ),
        (["--days", "1"], "--days must be in [2, 366]; got 1."),
        (["--advertisers", "0"], "--advertisers must be in [1, 100,000]; got 0."),
        (["--segments", "0"], "--segments must be ≥ 1; got 0."),
        (  # config.json said 31 segments, the truth held 19 (QA)
            ["--advertisers", "30", "--segments", "31"],
            "--segments must be ≤ --advertisers (30); got 31.",
        ),
    ],
)
def test_sample_generate_names_the_options_and_writes_nothing(tmp_path, args, message):
    from typer.testing import CliRunner

    from adseg.cli import app

    out = tmp_path / "market"
    result = CliRunner().invoke(app, ["sample", "generate", "--out", str(out), *args])
    assert result.exit_code == 2
    assert f"error: {message}" in result.output
    assert "Config" not in result.output and not out.exists()


def test_sample_generate_trains_on_half_the_days_by_default(tmp_path):
    from typer.testing import CliRunner

    from adseg.cli import app

    for days, train_days in ((5, 3), (14, 7)):
        out = tmp_path / f"market{days}"
        args = ["sample", "generate", "--out", str(out), "--advertisers", "5", "--segments", "2"]
        result = CliRunner().invoke(app, [*args, "--days", str(days), "--quiet"])
        assert result.exit_code == 0, result.output
        config = json.loads((out / "config.json").read_text(encoding="utf-8"))
        assert (config["days"], config["train_days"]) == (days, train_days)


def test_sample_generate_refuses_a_folder_that_is_not_empty(tmp_path):
    """It wrote into any folder: an inbox named by mistake had its files replaced by simulated
    ones, and a file left beside ours (advertisers.csv beside advertisers.csv.gz) made the
    folder fail to ingest (QA). A folder that is not empty is refused, unless --force."""
    from typer.testing import CliRunner

    from adseg.cli import app

    out = tmp_path / "inbox"
    out.mkdir()
    (out / "advertisers.csv").write_text("real data\n")
    args = ["sample", "generate", "--out", str(out), "--advertisers", "5", "--segments", "2"]
    result = CliRunner().invoke(app, [*args, "--quiet"])
    assert result.exit_code == 2, result.output
    assert f"--out {out} is not empty (advertisers.csv)" in result.output
    assert [p.name for p in out.iterdir()] == ["advertisers.csv"]
    assert (out / "advertisers.csv").read_text() == "real data\n"
    # --force writes beside other files, but not beside another form of a table file: the
    # folder would then fail to ingest ('two files for table advertisers'), so it was a sample
    # that could not be loaded, written with exit 0 (QA)
    result = CliRunner().invoke(app, [*args, "--quiet", "--force"])
    assert result.exit_code == 2, result.output
    assert f"--out {out} holds advertisers.csv: beside the .csv.gz files" in result.output
    assert [p.name for p in out.iterdir()] == ["advertisers.csv"]
    (out / "advertisers.csv").rename(out / "notes.csv")
    result = CliRunner().invoke(app, [*args, "--quiet", "--force"])
    assert result.exit_code == 0, result.output
    assert (out / "config.json").exists() and (out / "notes.csv").read_text() == "real data\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(app, [*args[:2], "--out", str(empty), *args[4:], "--quiet"])
    assert result.exit_code == 0, result.output


# ----------------------------------------------------------------------------- the gamma family

GAMMA = family_config("gamma", n_advertisers=300, n_segments=10, seed=5)


@pytest.fixture(scope="module")
def gamma_market() -> Marketplace:
    return simulate_marketplace(GAMMA)


def test_family_config_presets():
    assert family_config("default") == MarketplaceConfig()
    gamma = family_config("gamma")
    assert gamma.price_family == "gamma"
    assert (gamma.n_advertisers, gamma.n_segments, gamma.segment_size_concentration) == (
        1200,
        25,
        1.0,
    )
    assert gamma.text_mix == (0.3, 0.1, 0.35, 0.25)
    assert (gamma.median_train_samples, gamma.sample_count_sigma) == (30.0, 1.5)
    # overrides replace the preset's fields and keep the others
    small = family_config("gamma", n_advertisers=50, seed=3)
    assert (small.n_advertisers, small.seed, small.price_family) == (50, 3, "gamma")
    assert small.vertical_price_range == gamma.vertical_price_range
    with pytest.raises(ValueError, match="name must be one of 'default', 'gamma'; got 'weibull'"):
        family_config("weibull")
    with pytest.raises(ValueError, match="segment_size_concentration must be > 0"):
        family_config("gamma", segment_size_concentration=-1.0)
    with pytest.raises(TypeError):
        family_config("gamma", no_such_field=1)


def test_default_family_files_keep_their_columns_and_keys(tmp_path, small):
    """The second family adds a truth column and config keys only where it is used, so the
    default family's files (and the committed samples) keep their bytes."""
    assert "price_family" not in small.truth.columns
    paths = write_marketplace(small, tmp_path)
    raw = json.loads(paths["config"].read_text(encoding="utf-8"))
    assert "price_family" not in raw and "segment_size_concentration" not in raw
    committed = json.loads((SAMPLES / "small" / "config.json").read_text(encoding="utf-8"))
    assert set(raw) == set(committed)


def test_gamma_family_is_deterministic(tmp_path, gamma_market):
    again = simulate_marketplace(GAMMA)
    for name in ("advertisers", "auctions", "delivery", "truth"):
        pd.testing.assert_frame_equal(getattr(gamma_market, name), getattr(again, name))
    first = _write_bytes(gamma_market, tmp_path / "a")
    assert first == _write_bytes(again, tmp_path / "b")
    other = simulate_marketplace(family_config("gamma", n_advertisers=300, n_segments=10, seed=6))
    prices = gamma_market.auctions["market_price_ecpm"]
    assert not prices.equals(other.auctions["market_price_ecpm"])
    # truth names the family; config.json rebuilds the configuration, family fields included
    assert set(gamma_market.truth["price_family"]) == {"gamma"}
    raw = json.loads(first["config"].decode("utf-8"))
    assert raw["price_family"] == "gamma" and raw["segment_size_concentration"] == 1.0
    rebuilt = MarketplaceConfig(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
    )
    assert rebuilt == GAMMA


def test_gamma_market_prices_follow_the_exact_cdf():
    """KS distance of each advertiser's logged market prices (≈ 8,000 each, no faults, no daily
    market moves) from the exact c.d.f. on the tick grid, P(mp ≤ k) = 1[k ≥ r]·F(k·t) with F the
    gamma mixture: within the 1 % level of the one-sample KS test, while the log-normal mixture
    of the same parameters is rejected (the test can tell the families apart)."""
    cfg = family_config(
        "gamma",
        n_advertisers=16,
        n_segments=8,
        days=2,
        train_days=1,
        median_train_samples=4000.0,
        sample_count_sigma=0.0,
        fault_share=0.0,
        market_day_sigma=0.0,
        seed=21,
    )
    market = simulate_marketplace(cfg)
    truth = market.truth.set_index("advertiser_id")
    assert (truth["reserve_ecpm"] > 0).any()  # the reserve atom is covered
    for adv, rows in market.auctions.groupby("advertiser_id"):  # loop over 16 advertisers
        row = truth.loc[adv]
        ticks = np.sort(np.round(rows["market_price_ecpm"].to_numpy() / cfg.tick).astype(int))
        grid = np.arange(1, ticks.max() + 1)
        params = [row[c] for c in ("mu1", "sigma1", "mu2", "sigma2", "weight2")]
        reserve = round(row["reserve_ecpm"] / cfg.tick)
        ecdf = np.searchsorted(ticks, grid, side="right") / ticks.size
        distance = {}  # √n · sup |F_n − F| for each family's exact c.d.f.
        for family in ("gamma", "lognormal"):
            exact = np.where(grid >= reserve, _mixture_cdf(grid * cfg.tick, *params, family), 0.0)
            distance[family] = np.abs(ecdf - exact).max() * np.sqrt(ticks.size)
        assert ticks.size > 5000
        # Measured at this seed: gamma ≤ 1.3, log-normal ≥ 3.3.
        assert distance["gamma"] < 1.63, (adv, distance)
        assert distance["lognormal"] > 2.5, (adv, distance)


def test_gamma_true_landscape_matches_the_logged_sample(gamma_market):
    """Win rate and paid eCPM of clean logged auctions vs true_landscape at the day's bid."""
    cells, win, ecpm = _landscape_cells(gamma_market)
    truth = gamma_market.truth.set_index("advertiser_id").loc[cells["advertiser_id"]].reset_index()
    assert cells["rows"].sum() > 5000
    _assert_calibrated(cells, win, ecpm)
    # The truth's price_family column is what makes the landscape gamma: read as log-normal,
    # the same parameters give another landscape.
    lognormal, _ = true_landscape(truth.drop(columns="price_family"), cells["bid_ecpm"].to_numpy())
    assert np.abs(lognormal - win).max() > 0.05
    mixed = truth.assign(price_family=np.where(np.arange(len(truth)) % 2, "gamma", "lognormal"))
    with pytest.raises(ValueError, match="price_family"):
        true_landscape(mixed, cells["bid_ecpm"].to_numpy())


def test_gamma_delivery_matches_true_win_rate_times_supply():
    """Delivered impressions ~ Binomial(supply, F(bid)) with F from true_landscape (gamma)."""
    cfg = family_config("gamma", n_advertisers=200, n_segments=8, market_day_sigma=0.0, seed=8)
    market = simulate_marketplace(cfg)
    d = market.delivery
    n, days = cfg.n_advertisers, cfg.days
    win, ecpm = true_landscape(market.truth, d["bid_ecpm"].to_numpy().reshape(n, days))
    supply = d["bid_requests"].to_numpy().reshape(n, days).astype(np.float64)
    imp = d["impressions"].to_numpy().reshape(n, days).astype(np.float64)
    var = supply * win * (1 - win)
    ok = var > 0
    z = (imp[ok] - supply[ok] * win[ok]) / np.sqrt(var[ok])
    assert abs(z.mean()) < 0.1 and 0.9 < z.std() < 1.1, (z.mean(), z.std())
    spend = d["spend"].to_numpy().reshape(n, days)
    pos = imp > 1000
    ratio = spend[pos] * 1000 / (imp[pos] * ecpm[pos])
    assert abs(np.median(ratio) - 1) < 0.005


def test_sample_generate_family_option(tmp_path, monkeypatch):
    """--family picks the preset; the options given override its fields; a bad name is one
    line and exit 2."""
    from typer.testing import CliRunner

    import adseg.simulate
    from adseg.cli import app

    made = []
    tiny = simulate_marketplace(
        MarketplaceConfig(n_advertisers=3, n_segments=1, days=2, train_days=1, seed=1)
    )

    def fake_simulate(config):  # records the configuration; writes a tiny market quickly
        made.append(config)
        return tiny

    monkeypatch.setattr(adseg.simulate, "simulate_marketplace", fake_simulate)
    runner = CliRunner()
    result = runner.invoke(
        app, ["sample", "generate", "--out", str(tmp_path / "a"), "--family", "gamma", "--quiet"]
    )
    assert result.exit_code == 0, result.output
    assert made[-1] == family_config("gamma")
    args = ["--advertisers", "50", "--days", "6", "--seed", "9"]
    out = tmp_path / "b"
    result = runner.invoke(
        app, ["sample", "generate", "--out", str(out), "--family", "gamma", *args, "--quiet"]
    )
    assert result.exit_code == 0, result.output
    assert made[-1] == family_config("gamma", n_advertisers=50, days=6, train_days=3, seed=9)
    result = runner.invoke(app, ["sample", "generate", "--out", str(tmp_path / "c"), "--quiet"])
    assert result.exit_code == 0, result.output
    assert made[-1] == MarketplaceConfig()
    result = runner.invoke(
        app, ["sample", "generate", "--out", str(tmp_path / "d"), "--family", "weibull"]
    )
    assert result.exit_code == 2
    assert "error: --family must be one of default, gamma; got 'weibull'." in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "d").exists()
