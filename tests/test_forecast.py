"""Segment c.d.f.s, blended (empirical-Bayes) landscapes, supply forecast, impressions, spend,
MAPE."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from adseg.forecast import (
    GroupedECDF,
    KappaSelector,
    Landscape,
    SampleSet,
    evaluate_sources,
    expected_cost,
    fit_ses,
    forecast_supply,
    reference_segmentations,
    samples_by_advertiser,
    score_forecasts,
    segment_cdf_table,
    select_kappa,
    shrinkage_weights,
    supply_for_rows,
)

# --------------------------------------------------------------------------------------------
# a small synthetic marketplace (lognormal market prices per segment, second-price auctions)
# --------------------------------------------------------------------------------------------


def market(
    n=240,
    k=6,
    days_train=14,
    days_eval=7,
    mean_samples=25.0,
    advertiser_spread=0.05,
    seed=0,
):
    """Advertisers in k segments; advertiser i's market prices ~ lognormal(mu_i, sigma_s) with
    mu_i = mu_s + N(0, advertiser_spread). Training samples: few per advertiser (Poisson, many
    with < 10). Eval delivery: actual impressions ~ Binomial(supply, F_i(bid)), spend =
    impressions · E[m | m ≤ bid] / 1000 (second price), both from the TRUE distribution."""
    rng = np.random.default_rng(seed)
    seg = rng.integers(0, k, n)
    mu_s = np.linspace(0.5, 2.5, k)
    sig_s = np.linspace(0.3, 0.6, k)
    mu = mu_s[seg] + rng.normal(0, advertiser_spread, n)
    sig = sig_s[seg]
    counts = rng.poisson(mean_samples, n)
    counts[: n // 10] = 0  # some advertisers with no samples at all
    bid_train = np.exp(mu + 0.4 * sig)
    win = [rng.lognormal(mu[i], sig[i], counts[i]) for i in range(n)]
    cost = [w[w <= bid_train[i]] for i, w in enumerate(win)]
    ids = np.array([f"adv{i:04d}" for i in range(n)])
    days = pd.date_range("2026-01-01", periods=days_train + days_eval)
    base_supply = rng.lognormal(8, 0.7, n)
    adv = np.repeat(np.arange(n), days.size)
    day = np.tile(np.arange(days.size), n)
    supply = rng.poisson(base_supply[adv] * (1 + 0.1 * rng.standard_normal(adv.size)).clip(0.5))
    bid = bid_train[adv] * np.exp(rng.normal(0, 0.1, adv.size))
    z = (np.log(bid) - mu[adv]) / sig[adv]
    p_win = stats.norm.cdf(z)
    # E[m | m ≤ b] for a lognormal
    cond = np.exp(mu[adv] + sig[adv] ** 2 / 2) * stats.norm.cdf(z - sig[adv]) / p_win
    imps = rng.binomial(supply, p_win)
    spend = imps * cond / 1000
    frame = pd.DataFrame(
        {
            "advertiser_id": ids[adv],
            "date": days[day],
            "bid_requests": supply,
            "bid_ecpm": bid,
            "impressions": imps,
            "spend": spend,
        }
    )
    train = frame[day < days_train].reset_index(drop=True)
    ev = frame[day >= days_train].reset_index(drop=True)
    return dict(win=win, cost=cost, seg=seg, ids=ids, train=train, eval=ev)


# --------------------------------------------------------------------------------------------
# pooled c.d.f.s
# --------------------------------------------------------------------------------------------


def _ecdf(sample, x):
    s = np.sort(np.asarray(sample, dtype=np.float64))
    return np.searchsorted(s, x, side="right") / s.size


def test_pooled_segment_cdf_equals_ecdf_of_concatenated_samples():
    rng = np.random.default_rng(1)
    # rounded values: many ties across advertisers and segments
    samples = [np.round(rng.lognormal(1, 0.5, rng.integers(0, 40)), 1) for _ in range(30)]
    groups = rng.integers(0, 4, 30)
    groups[:3] = -1  # left out of every group
    ecdf = GroupedECDF.from_samples(samples, groups)
    x = np.concatenate([np.unique(np.concatenate(samples)), rng.uniform(-1, 15, 200)])
    for g in range(4):
        pooled = np.concatenate([s for s, gi in zip(samples, groups, strict=True) if gi == g])
        np.testing.assert_array_equal(ecdf.cdf(g, x), _ecdf(pooled, x))
        ref = stats.ecdf(pooled).cdf.evaluate(x)
        np.testing.assert_allclose(ecdf.cdf(g, x), ref, rtol=0, atol=1e-12)
        below = pooled[None, :] <= x[:, None]
        with np.errstate(invalid="ignore"):
            cm = (below * pooled).sum(1) / below.sum(1)
        np.testing.assert_allclose(ecdf.conditional_mean(g, x), cm, rtol=1e-12)
        np.testing.assert_allclose(
            ecdf.partial_mean(g, x), (below * pooled).sum(1) / pooled.size, rtol=1e-12
        )
    assert ecdf.counts.sum() == sum(s.size for s, g in zip(samples, groups, strict=True) if g >= 0)


def test_a_pool_holds_its_keys_and_makes_values_and_running_sums_on_demand():
    """8 bytes per sample until a mean is asked for: the values are read back from the keys
    (sorted by group, then value) and the running sums are made once, on the first mean."""
    rng = np.random.default_rng(4)
    samples = [np.round(rng.lognormal(1, 0.5, rng.integers(0, 30)), 2) for _ in range(25)]
    groups = rng.integers(-1, 3, 25)
    ecdf = GroupedECDF.from_samples(samples, groups)
    arrays = [v for v in vars(ecdf).values() if isinstance(v, np.ndarray)]
    n = int(ecdf.counts.sum())
    assert sum(a.nbytes for a in arrays if a.size == n) == 8 * n  # the keys alone
    expected = np.concatenate(
        [np.sort(np.concatenate([s for s, gi in zip(samples, groups, strict=True) if gi == g]))
         for g in range(3)]
    )  # fmt: skip
    np.testing.assert_array_equal(ecdf.values, expected)
    assert "_prefix" not in vars(ecdf)
    ecdf.partial_mean(0, 3.0)
    first = vars(ecdf)["_prefix"]
    ecdf.conditional_mean(1, 3.0)
    assert vars(ecdf)["_prefix"] is first


def test_a_group_after_a_huge_one_keeps_its_digits():
    """One running sum over all groups, differenced, put the second group's means 5 % off."""
    small = np.array([0.013, 0.027, 0.031])
    ecdf = GroupedECDF.from_samples([np.full(10, 1e12), np.array([]), small])
    x = np.array([0.015, 0.028, 1.0])
    np.testing.assert_allclose(ecdf.conditional_mean(2, x), [0.013, 0.02, small.mean()], rtol=1e-14)
    np.testing.assert_allclose(
        ecdf.partial_mean(2, x), [0.013 / 3, 0.04 / 3, small.sum() / 3], rtol=1e-14
    )
    assert ecdf.partial_mean(0, 1e12) == 1e12 and np.isnan(ecdf.partial_mean(1, 1.0))


def test_cdf_of_empty_group_is_nan_and_tabulate_shape():
    ecdf = GroupedECDF.from_samples([np.array([1.0, 2.0]), np.array([])])
    assert np.isnan(ecdf.cdf(1, 1.5))
    assert ecdf.cdf(0, 1.5) == 0.5
    tab = ecdf.tabulate(np.linspace(0, 3, 7))
    assert tab.shape == (2, 7) and np.isnan(tab[1]).all()
    with pytest.raises(IndexError):
        ecdf.cdf(2, 1.0)


def test_win_rate_is_monotone_in_bid_for_both_methods():
    m = market(n=80, seed=2)
    ss = SampleSet(m["win"])
    grid = np.linspace(0, 40, 301)
    for kappa in (math.inf, 0.0, 7.0):
        lsc = Landscape.build(ss, m["seg"], kappa)
        f = lsc.cdf(np.repeat(np.arange(80), grid.size), np.tile(grid, 80)).reshape(80, -1)
        assert np.all(np.diff(f, axis=1) >= -1e-15)
        assert np.all((f >= 0) & (f <= 1))


def test_no_segmentation_reference_equals_each_advertisers_own_ecdf():
    m = market(n=50, seed=3)
    ss = SampleSet(m["win"])
    own_ref = reference_segmentations(50)["own"]
    lsc = Landscape.build(ss, own_ref, math.inf)
    x = np.linspace(0, 30, 97)
    for i in np.nonzero(ss.counts > 0)[0]:
        np.testing.assert_array_equal(lsc.cdf(i, x), _ecdf(m["win"][i], x))
    # an advertiser without samples is its own empty segment → the global pooled c.d.f.
    i0 = int(np.nonzero(ss.counts == 0)[0][0])
    np.testing.assert_array_equal(lsc.cdf(i0, x), _ecdf(np.concatenate(m["win"]), x))


def test_label_minus_one_gets_the_global_cdf():
    samples = [np.array([1.0, 2.0]), np.array([3.0]), np.array([10.0])]
    lsc = Landscape.build(SampleSet(samples), np.array([0, 0, -1]), math.inf)
    x = np.array([0.5, 1.5, 2.5, 5.0, 11.0])
    np.testing.assert_array_equal(lsc.cdf(2, x), _ecdf([1, 2, 3, 10], x))
    np.testing.assert_array_equal(lsc.cdf(0, x), _ecdf([1, 2, 3], x))


def test_segment_cdf_table_tidy_and_matches_pooled():
    rng = np.random.default_rng(4)
    samples = [rng.normal(5, 1, 20) for _ in range(6)]
    seg = np.array([7, 7, 3, 3, 3, -1])
    grid = np.linspace(0, 10, 11)
    tab = segment_cdf_table(SampleSet(samples), seg, grid, kind="win", source="s")
    assert list(tab.columns) == ["source", "segment", "kind", "bid", "cdf"]
    assert sorted(tab["segment"].unique()) == [3, 7]
    got = tab[tab.segment == 7]["cdf"].to_numpy()
    np.testing.assert_array_equal(got, _ecdf(np.concatenate(samples[:2]), grid))


# --------------------------------------------------------------------------------------------
# blended estimate
# --------------------------------------------------------------------------------------------


def test_shrinkage_weights_limits():
    w = shrinkage_weights([0, 1, 10, 1e9], 10.0)
    np.testing.assert_allclose(w, [0, 1 / 11, 0.5, 1e9 / (1e9 + 10)])
    assert np.all(shrinkage_weights([0, 5], math.inf) == 0)
    np.testing.assert_array_equal(shrinkage_weights([0, 5], 0.0), [0, 1])
    with pytest.raises(ValueError):
        shrinkage_weights([1], -1.0)


def test_blended_tends_to_own_cdf_with_many_samples_and_to_segment_with_few():
    rng = np.random.default_rng(5)
    big = rng.lognormal(2.0, 0.4, 200_000)
    others = [rng.lognormal(1.0, 0.4, 50) for _ in range(4)]
    samples = [big, np.array([]), rng.lognormal(2.0, 0.4, 1), *others]
    seg = np.zeros(len(samples), dtype=int)
    ss = SampleSet(samples)
    lsc = Landscape.build(ss, seg, 10.0)
    x = np.linspace(0, 20, 41)
    # n → ∞: own c.d.f. (w = 200000 / 200010)
    assert np.max(np.abs(lsc.cdf(0, x) - _ecdf(big, x))) < 1e-3
    # n = 0: the segment's pooled c.d.f.
    pooled = np.concatenate(samples)
    np.testing.assert_allclose(lsc.cdf(1, x), _ecdf(pooled, x), atol=1e-15)
    # n = 1 is close to the segment (w = 1/11)
    w = 1 / 11
    np.testing.assert_allclose(
        lsc.cdf(2, x), w * _ecdf(samples[2], x) + (1 - w) * _ecdf(pooled, x), atol=1e-15
    )
    # κ = ∞ is the paper's segment method exactly
    np.testing.assert_array_equal(lsc.with_kappa(math.inf).cdf(0, x), _ecdf(pooled, x))


def test_select_kappa_large_for_homogeneous_segments_small_for_distinct_advertisers():
    rng = np.random.default_rng(6)
    n = 120
    # all advertisers of a segment share one distribution: pooling is right, κ large
    seg = np.repeat(np.arange(4), n // 4)
    same = [rng.lognormal(seg[i] * 0.5, 0.4, 30) for i in range(n)]
    k_same, curve = select_kappa(SampleSet(same), seg, random_state=0)
    assert k_same >= 100
    assert list(curve.columns) == ["kappa", "loss"]
    # advertisers differ a lot inside a segment and have many samples: own c.d.f., κ small
    distinct = [rng.lognormal(rng.normal(0, 1.0), 0.2, 400) for _ in range(n)]
    k_distinct, _ = select_kappa(SampleSet(distinct), seg, random_state=0)
    assert k_distinct <= 10
    # deterministic for a seed
    assert select_kappa(SampleSet(same), seg, random_state=0)[0] == k_same


def test_kappa_selector_never_reads_evaluation_data_and_handles_no_samples():
    sel = KappaSelector(random_state=0).fit(SampleSet([np.array([]), np.array([1.0])]))
    kappa, curve = sel.select(np.array([0, 0]))
    assert kappa == math.inf and curve.empty


# --------------------------------------------------------------------------------------------
# impressions and spend on hand-computed cases
# --------------------------------------------------------------------------------------------


def _delivery(rows):
    return pd.DataFrame(
        rows,
        columns=["advertiser_id", "date", "bid_requests", "bid_ecpm", "impressions", "spend"],
    )


def test_impressions_and_spend_hand_computed():
    # segment 0 = advertisers a, b pooled: market prices {1, 2, 3, 4, 6, 8}; costs {1, 2, 3, 5}
    win = [np.array([1.0, 3.0, 6.0]), np.array([2.0, 4.0, 8.0]), np.array([9.0])]
    cost = [np.array([1.0, 3.0]), np.array([2.0, 5.0]), np.array([])]
    seg = {"s": np.array([0, 0, 1])}
    ev = _delivery(
        [
            ("a", "2026-01-08", 1000, 3.5, 400, 0.8),  # F(3.5) = 3/6; E[c | c ≤ 3.5] = 2
            ("a", "2026-01-09", 600, 5.0, 300, 0.9),  # F(5) = 4/6; E[c | c ≤ 5] = 11/4
            ("b", "2026-01-08", 100, 0.5, 10, 0.01),  # F(0.5) = 0 → no impressions
            ("c", "2026-01-08", 200, 10.0, 0, 0.0),  # F(10) = 1; segment 1 has no cost
            # samples → the global cost c.d.f.: E[c | c ≤ 10] over {1, 3, 2, 5} = 2.75
        ]
    )
    res = evaluate_sources(
        win, cost, seg, None, ev, np.array(["a", "b", "c"]), methods=("segment",),
        add_references=False,
    )  # fmt: skip
    f = res.forecasts.set_index("advertiser_id")
    imp_a = 1000 * 3 / 6 + 600 * 4 / 6
    spend_a = (1000 * 3 / 6 * 2 + 600 * 4 / 6 * 11 / 4) / 1000
    assert f.loc["a", "impressions_forecast"] == pytest.approx(imp_a)
    assert f.loc["a", "spend_forecast"] == pytest.approx(spend_a)
    assert f.loc["a", "impressions_actual"] == 700
    assert f.loc["a", "spend_actual"] == 1.7  # summed in micros: a float sum is 1.7000000000000002
    assert f.loc["b", "impressions_forecast"] == 0 and f.loc["b", "spend_forecast"] == 0
    assert f.loc["c", "impressions_forecast"] == pytest.approx(200)
    assert f.loc["c", "spend_forecast"] == pytest.approx(200 * 2.75 / 1000)
    row = res.mape.iloc[0]
    # c has zero actual impressions and spend: left out and counted
    assert row["n_zero_impressions"] == 1 and row["n_zero_spend"] == 1
    assert row["n_advertisers"] == 3 and row["n_segments"] == 2
    exp_imp = np.mean([abs(700 - imp_a) / 700, abs(10 - 0) / 10])
    exp_sp = np.mean([abs(1.7 - spend_a) / 1.7, abs(0.01 - 0) / 0.01])
    assert row["impressions_mape"] == pytest.approx(exp_imp)
    assert row["spend_mape"] == pytest.approx(exp_sp)


def test_expected_cost_fallbacks():
    win = SampleSet([np.array([2.0, 4.0])])
    cost = SampleSet([np.array([3.0])])
    w = Landscape.build(win, np.array([0]))
    c = Landscape.build(cost, np.array([0]))
    # bid 3.5: cost sample 3 ≤ bid → 3; bid 2.5: no cost ≤ bid → E[m | m ≤ 2.5] = 2;
    # bid 1: nothing ≤ bid → the bid itself
    np.testing.assert_allclose(expected_cost(w, c, [0, 0, 0], [3.5, 2.5, 1.0]), [3.0, 2.0, 1.0])


def test_blended_expected_cost_is_the_mixture_conditional_mean():
    own = np.array([1.0, 5.0])
    other = np.array([2.0, 3.0, 4.0, 10.0])
    cost = SampleSet([own, other])
    win = SampleSet([own, other])
    seg = np.array([0, 0])
    c = Landscape.build(cost, seg, 2.0)
    w_i = 2 / (2 + 2.0)
    pooled = np.concatenate([own, other])
    b = 4.5
    num = w_i * own[own <= b].sum() / own.size + (1 - w_i) * pooled[pooled <= b].sum() / pooled.size
    den = w_i * np.mean(own <= b) + (1 - w_i) * np.mean(pooled <= b)
    got = expected_cost(Landscape.build(win, seg, 2.0), c, [0], [b])
    assert got[0] == pytest.approx(num / den)


def test_score_forecasts_excludes_and_counts_zero_actuals():
    f = pd.DataFrame(
        {
            "advertiser_id": ["a", "b", "c", "d"],
            "source": "s",
            "method": "segment",
            "supply_mode": "actual",
            "impressions_forecast": [110.0, 5.0, 50.0, np.nan],
            "impressions_actual": [100.0, 0.0, 100.0, 10.0],
            "spend_forecast": [1.0, 1.0, 1.0, 1.0],
            "spend_actual": [0.0, 0.0, 2.0, 1.0],
        }
    )
    s = score_forecasts(f).iloc[0]
    assert s["impressions_mape"] == pytest.approx((0.1 + 0.5) / 2)
    assert s["spend_mape"] == pytest.approx(0.5)
    assert s["n_zero_impressions"] == 1 and s["n_zero_spend"] == 2
    assert s["n_missing_forecast"] == 1 and s["n_advertisers"] == 3
    # every actual zero → NaN, not an exception
    f["impressions_actual"] = 0.0
    assert np.isnan(score_forecasts(f).iloc[0]["impressions_mape"])


# --------------------------------------------------------------------------------------------
# supply forecast
# --------------------------------------------------------------------------------------------


def test_fit_ses_agrees_with_statsmodels():
    from statsmodels.tsa.holtwinters import SimpleExpSmoothing

    rng = np.random.default_rng(7)
    t = np.arange(21)
    series = np.stack(
        [
            1000 + rng.normal(0, 50, t.size),  # noise around a level: small α
            np.cumsum(rng.normal(0, 30, t.size)) + 800,  # random walk: α near 1
            500 + 10 * t + rng.normal(0, 20, t.size),  # trend
            2000 * (1 + 0.2 * np.sin(2 * np.pi * t / 7)) + rng.normal(0, 40, t.size),  # weekly
            rng.lognormal(7, 0.3, t.size),
        ]
    )
    alpha, level = fit_ses(series)
    for i, y in enumerate(series):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sm = SimpleExpSmoothing(y, initialization_method="known", initial_level=y[0]).fit()
        sm_alpha = sm.params["smoothing_level"]
        sm_level = float(sm.forecast(1)[0])
        # statsmodels minimises the same SSE; ours is never worse and the forecasts agree
        assert abs(alpha[i] - sm_alpha) < 0.02, (i, alpha[i], sm_alpha)
        assert level[i] == pytest.approx(sm_level, rel=5e-3), (i, level[i], sm_level)
        sse_ours = _sse(y, alpha[i])
        assert sse_ours <= sm.sse * (1 + 1e-6)


def _sse(y, a):
    lev, s = y[0], 0.0
    for v in y:
        s += (v - lev) ** 2
        lev += a * (v - lev)
    return s


def test_fit_ses_missing_days_carry_the_level():
    rng = np.random.default_rng(8)
    y = rng.lognormal(6, 0.2, (3, 12))
    holes = y.copy()
    holes[0, [0, 3, 4]] = np.nan
    holes[1, 5] = np.nan
    holes[2, :] = np.nan
    a, lev = fit_ses(holes)
    for i in range(2):
        a_ref, lev_ref = fit_ses(y[i][np.isfinite(holes[i])][None, :])
        assert a[i] == pytest.approx(a_ref[0]) and lev[i] == pytest.approx(lev_ref[0])
    assert np.isnan(a[2]) and np.isnan(lev[2])


def test_ses_takes_the_midpoint_alpha_when_the_days_do_not_determine_it():
    """With two training days (the README's 4-day database, split in half) the one-step SSE is
    (y1 - y0)^2 for every α: the forecast was day 1 alone (α = 0), ignoring day 2; statsmodels
    returned another arbitrary α. Now both engines give α = 0.5, whose level is the two days'
    mean; a series that only moves on its last day is the same case."""
    nan = np.nan
    y = np.array(
        [
            [1000.0, 2000.0, nan, nan],
            [nan, 100.0, nan, 200.0],
            [5.0, nan, nan, nan],
            [100.0, 100.0, 100.0, 300.0],
            [100.0, 120.0, 90.0, 130.0],  # determined: left to the optimiser
        ]
    )
    alpha, level = fit_ses(y)
    np.testing.assert_array_equal(alpha[:4], 0.5)
    np.testing.assert_allclose(level[:4], [1500.0, 150.0, 5.0, 200.0])
    assert alpha[4] != 0.5 and _sse(y[4], alpha[4]) < _sse(y[4], 0.5)
    train = pd.DataFrame(
        {
            "advertiser_id": ["a", "a", "b", "b"],
            "date": ["2026-01-05", "2026-01-06"] * 2,
            "bid_requests": [100, 200, 1000, 2000],
        }
    )
    for engine in ("numpy", "statsmodels"):
        frame = forecast_supply(train, np.array(["a", "b"]), engine=engine)
        np.testing.assert_allclose(frame["alpha"], 0.5)
        np.testing.assert_allclose(frame["level"], [150.0, 1500.0])


def test_forecast_supply_numpy_and_statsmodels_engines_agree():
    m = market(n=12, seed=9)
    a = forecast_supply(m["train"], m["ids"])
    b = forecast_supply(m["train"], m["ids"], engine="statsmodels")
    assert list(a.columns) == ["advertiser_id", "alpha", "level", "mean", "n_days"]
    np.testing.assert_allclose(a["level"], b["level"], rtol=1e-2)
    assert (a["n_days"] == 14).all()


def test_supply_for_rows_mean_and_seasonal_naive_hand_computed():
    # 2026-01-05 is a Monday; training Mon..Sun twice for "a"; "b" misses its Tuesdays; "c" none
    days = pd.date_range("2026-01-05", periods=14)
    rows = [("a", d, 100 + i, 1.0, 0, 0.0) for i, d in enumerate(days)]
    rows += [("b", d, 50.0, 1.0, 0, 0.0) for d in days if d.day_of_week != 1]
    train = pd.DataFrame(
        rows,
        columns=["advertiser_id", "date", "bid_requests", "bid_ecpm", "impressions", "spend"],
    )
    ids = np.array(["a", "b", "c"])
    eval_days = pd.to_datetime(["2026-01-19", "2026-01-20", "2026-01-25"])  # Mon, Tue, Sun
    row_adv = np.array([0, 0, 0, 1, 1, 2])
    row_dates = eval_days[[0, 1, 2, 0, 1, 0]]
    naive, frame = supply_for_rows(train, ids, row_adv, row_dates, model="seasonal_naive")
    # a: the latest same weekday (second week: 107, 108, 113); b: Tuesday missing → its mean
    np.testing.assert_array_equal(naive[:5], [107, 108, 113, 50, 50])
    assert np.isnan(naive[5])
    mean, _ = supply_for_rows(train, ids, row_adv, row_dates, model="mean")
    np.testing.assert_allclose(mean[:5], [106.5, 106.5, 106.5, 50, 50])
    ses, _ = supply_for_rows(train, ids, row_adv, row_dates, model="ses")
    np.testing.assert_allclose(ses[:3], frame["level"].iloc[0])
    assert frame["n_days"].tolist() == [14, 12, 0]
    with pytest.raises(ValueError, match="supply_model"):
        supply_for_rows(train, ids, row_adv, row_dates, model="arima")


def test_spend_price_market_uses_the_market_price_conditional_mean():
    win = [np.array([1.0, 3.0, 6.0])]
    cost = [np.array([1.5])]
    ev = _delivery([("a", "2026-01-08", 1000, 4.0, 500, 1.0)])
    common = dict(methods=("segment",), add_references=False)
    by_cost = evaluate_sources(win, cost, {"s": [0]}, None, ev, ["a"], **common)
    by_market = evaluate_sources(
        win, cost, {"s": [0]}, None, ev, ["a"], spend_price="market", **common
    )
    # F(4) = 2/3; cost: E[c | c ≤ 4] = 1.5; market: E[m | m ≤ 4] = 2
    assert by_cost.forecasts["spend_forecast"][0] == pytest.approx(1000 * 2 / 3 * 1.5 / 1000)
    assert by_market.forecasts["spend_forecast"][0] == pytest.approx(1000 * 2 / 3 * 2 / 1000)


# --------------------------------------------------------------------------------------------
# the whole evaluation
# --------------------------------------------------------------------------------------------


def test_evaluate_sources_frames_and_determinism():
    m = market(n=150, seed=10)
    segs = {"truth": m["seg"], "random": np.random.default_rng(0).integers(0, 6, 150)}
    args = (m["win"], m["cost"], segs, m["train"], m["eval"], m["ids"])
    res = evaluate_sources(*args, supply="both", random_state=3)
    assert list(res.forecasts.columns) == [
        "advertiser_id",
        "source",
        "method",
        "supply_mode",
        "impressions_forecast",
        "impressions_actual",
        "spend_forecast",
        "spend_actual",
    ]
    assert list(res.mape.columns) == [
        "source",
        "supply_mode",
        "method",
        "impressions_mape",
        "spend_mape",
        "n_advertisers",
        "n_zero_impressions",
        "n_zero_spend",
        "n_segments",
        "kappa_win",
        "kappa_cost",
        "n_missing_forecast",
    ]
    assert set(res.mape["source"]) == {"truth", "random", "own", "global"}
    assert len(res.mape) == 4 * 2 * 2
    assert len(res.forecasts) == 4 * 2 * 2 * 150
    assert set(res.segment_cdfs["source"]) == {"truth", "random", "global"}  # "own" left out
    assert set(res.segment_cdfs["kind"]) == {"win", "cost"}
    assert (res.segment_sizes.groupby("source")["n_advertisers"].sum() == 150).all()
    assert set(res.kappa["source"]) == {"truth", "random", "own", "global"}
    assert res.supply is not None and len(res.supply) == 150
    assert res.parameters["supply"] == "both" and res.parameters["random_state"] == 3
    again = evaluate_sources(*args, supply="both", random_state=3)
    pd.testing.assert_frame_equal(res.mape, again.mape)
    seg_rows = res.mape[res.mape.method == "segment"]
    assert seg_rows[["kappa_win", "kappa_cost"]].isna().all().all()


def test_pooled_segments_beat_own_samples_for_small_advertisers():
    """The paper's premise: with few samples per advertiser, the true segments' pooled c.d.f.s
    forecast better than each advertiser's own samples, and better than random segments."""
    m = market(n=400, k=6, mean_samples=8, seed=11)
    segs = {"truth": m["seg"], "random": np.random.default_rng(1).integers(0, 6, 400)}
    res = evaluate_sources(m["win"], m["cost"], segs, m["train"], m["eval"], m["ids"])
    t = res.mape[res.mape.supply_mode == "actual"].set_index(["source", "method"])
    for col in ("impressions_mape", "spend_mape"):
        assert t.loc[("truth", "segment"), col] < t.loc[("own", "segment"), col]
        assert t.loc[("truth", "segment"), col] < t.loc[("random", "segment"), col]
        assert t.loc[("truth", "segment"), col] < t.loc[("global", "segment"), col]
        # shrinkage never does much worse than the pure segment when segments are right
        assert t.loc[("truth", "blended"), col] < t.loc[("truth", "segment"), col] * 1.1
        # ...and rescues a poor segmentation towards the advertisers' own samples
        assert t.loc[("random", "blended"), col] < t.loc[("random", "segment"), col]


def test_blended_beats_segment_when_advertisers_differ_within_segments():
    m = market(n=300, k=3, mean_samples=200, advertiser_spread=0.4, seed=12)
    res = evaluate_sources(
        m["win"], m["cost"], {"truth": m["seg"]}, m["train"], m["eval"], m["ids"]
    )
    t = res.mape[res.mape.supply_mode == "actual"].set_index(["source", "method"])
    assert (
        t.loc[("truth", "blended"), "impressions_mape"]
        < t.loc[("truth", "segment"), "impressions_mape"]
    )


def test_bad_inputs_get_clear_errors():
    m = market(n=20, seed=13)
    segs = {"s": m["seg"]}
    ok = (m["win"], m["cost"], segs, m["train"], m["eval"], m["ids"])
    with pytest.raises(ValueError, match="one array per advertiser"):
        evaluate_sources(m["win"][:-1], *ok[1:])
    with pytest.raises(ValueError, match=r"segmentations\['s'\]"):
        evaluate_sources(m["win"], m["cost"], {"s": m["seg"][:-1]}, *ok[3:])
    bad = m["eval"].copy()
    bad.loc[3, "advertiser_id"] = "nobody"
    with pytest.raises(ValueError, match="not in advertiser_ids"):
        evaluate_sources(*ok[:4], bad, m["ids"])
    bad = m["eval"].copy()
    bad.loc[2, "bid_ecpm"] = -1.0
    with pytest.raises(ValueError, match="bid_ecpm"):
        evaluate_sources(*ok[:4], bad, m["ids"])
    with pytest.raises(ValueError, match="lacks column"):
        evaluate_sources(*ok[:4], m["eval"].drop(columns="spend"), m["ids"])
    with pytest.raises(ValueError, match="train_delivery"):
        evaluate_sources(m["win"], m["cost"], segs, None, m["eval"], m["ids"], supply="forecast")
    with pytest.raises(ValueError, match="supply"):
        evaluate_sources(*ok, supply="guess")
    with pytest.raises(ValueError, match="no rows"):
        evaluate_sources(*ok[:4], m["eval"].iloc[:0], m["ids"])
    with pytest.raises(ValueError, match="non-finite"):
        evaluate_sources([np.array([np.nan])] + m["win"][1:], *ok[1:])


def test_samples_by_advertiser_splits_in_id_order():
    auctions = pd.DataFrame(
        {
            "advertiser_id": ["b", "a", "b", "b"],
            "market_price_ecpm": [1.0, 2.0, 3.0, 4.0],
            "won": [True, False, False, True],
            "paid_ecpm": [1.0, np.nan, np.nan, 4.5],
        }
    )
    win, cost = samples_by_advertiser(auctions, ["a", "b", "c"])
    assert [w.tolist() for w in win] == [[2.0], [1.0, 3.0, 4.0], []]
    assert [c.tolist() for c in cost] == [[], [1.0, 4.5], []]
    with pytest.raises(ValueError, match="not in advertiser_ids"):
        samples_by_advertiser(auctions, ["a"])
    as_ints = samples_by_advertiser(auctions.assign(won=[1, 0, 0, 1]), ["a", "b", "c"])
    assert [c.tolist() for c in as_ints[1]] == [[], [1.0, 4.5], []]
    # text (or NaN) is refused: astype(bool) took "false" for won, and the lost auctions' NaN
    # prices then failed far away as "cost_samples[0] holds non-finite values" (QA)
    for won in (["true", "false", "false", "true"], [1.0, np.nan, 0.0, 1.0], [1, 2, 0, 1]):
        with pytest.raises(ValueError, match="auctions.won must be booleans"):
            samples_by_advertiser(auctions.assign(won=won), ["a", "b"])


SMALL = Path(__file__).resolve().parents[1] / "sample_campaigns" / "small"


@pytest.mark.skipif(not (SMALL / "auctions.csv.gz").exists(), reason="sample not committed")
def test_simulated_marketplace_true_segments_beat_the_references():
    """On the committed simulated marketplace (250 advertisers, 20 latent segments, first-price
    bidders and logging faults included): the true segments' pooled landscapes forecast the
    evaluation week better than each advertiser's own samples and than one global landscape, and
    the blended estimate rescues a coarse segmentation (the vertical alone)."""
    advertisers = pd.read_csv(SMALL / "advertisers.csv.gz")
    auctions = pd.read_csv(SMALL / "auctions.csv.gz")
    delivery = pd.read_csv(SMALL / "delivery.csv.gz")
    truth = pd.read_csv(SMALL / "truth.csv").set_index("advertiser_id")
    ids = advertisers["advertiser_id"].to_numpy()
    days = np.sort(delivery["date"].unique())
    train_end = days[6]  # a 7-day training window, then a 7-day evaluation window
    in_train = auctions["ts"].str.slice(0, 10) <= train_end
    win, cost = samples_by_advertiser(auctions[in_train], ids)
    segs = {
        "truth": truth.loc[ids, "segment"].to_numpy(),
        "vertical": pd.factorize(truth.loc[ids, "vertical"])[0],
    }
    res = evaluate_sources(
        win,
        cost,
        segs,
        delivery[delivery["date"] <= train_end],
        delivery[delivery["date"] > train_end],
        ids,
        supply="both",
    )
    t = res.mape.set_index(["source", "supply_mode", "method"])
    for mode in ("actual", "forecast"):
        for col in ("impressions_mape", "spend_mape"):
            truth_seg = t.loc[("truth", mode, "segment"), col]
            assert truth_seg < t.loc[("own", mode, "segment"), col]
            assert truth_seg < t.loc[("global", mode, "segment"), col]
            assert truth_seg < t.loc[("vertical", mode, "segment"), col]
            assert (
                t.loc[("vertical", mode, "blended"), col]
                < t.loc[("vertical", mode, "segment"), col]
            )
    assert t.loc[("truth", "actual", "segment"), "n_advertisers"] == len(ids)


# --------------------------------------------------------------------------------------------
# QA findings: zero segments, bad dates, NaN queries, κ types, index and length checks
# --------------------------------------------------------------------------------------------


def test_all_minus_one_segmentation_gives_every_advertiser_the_global_cdf():
    """-1 = no segment → the global pooled c.d.f.; with every label -1 there are zero segments,
    which used to raise IndexError in Landscape.build (and so in select_kappa and
    evaluate_sources)."""
    samples = SampleSet([[1.0], [2.0]])
    none = Landscape.build(samples, [-1, -1])
    glob = Landscape.build(samples, [0, 0])
    x = np.array([0.5, 1.0, 1.5, 2.0])
    adv = np.array([0, 1, 0, 1])
    np.testing.assert_array_equal(none.cdf(adv, x), [0.0, 0.5, 0.5, 1.0])
    np.testing.assert_array_equal(none.cdf(adv, x), glob.cdf(adv, x))
    assert none.segment.n_groups == 0

    four = SampleSet([[1.0, 2, 3, 4], [2.0, 3, 4, 5]])
    kap_none, curve_none = select_kappa(four, [-1, -1], random_state=0)
    kap_glob, curve_glob = select_kappa(four, [7, 7], random_state=0)
    assert kap_none == kap_glob
    pd.testing.assert_frame_equal(curve_none, curve_glob)

    m = market(n=30, seed=21)
    none_seg = np.full(30, -1)
    res = evaluate_sources(m["win"], m["cost"], {"none": none_seg}, m["train"], m["eval"], m["ids"])
    f = res.forecasts.set_index(["source", "method", "advertiser_id"]).sort_index()
    for meth in ("segment", "blended"):
        np.testing.assert_allclose(
            f.loc[("none", meth), ["impressions_forecast", "spend_forecast"]].to_numpy(),
            f.loc[("global", meth), ["impressions_forecast", "spend_forecast"]].to_numpy(),
        )
    t = res.mape.set_index(["source", "method"])
    assert t.loc[("none", "segment"), "n_segments"] == 0
    assert np.isfinite(t.loc[("none", "segment"), "impressions_mape"])
    assert (res.segment_sizes["source"] != "none").all()  # no segment, no size row


def _supply_frame(dates):
    return pd.DataFrame(
        {
            "advertiser_id": [1] * len(dates),
            "date": dates,
            "bid_requests": [100.0, 110.0, 5000.0, 105.0][: len(dates)],
        }
    )


@pytest.mark.parametrize("bad", [None, np.nan, "", "not a date", "2024-02-30"])
def test_missing_or_unparseable_delivery_dates_are_rejected_with_their_rows(bad):
    """A NaT used to sort after every day and pass for the latest one (the 5000 bid requests
    became the SES level)."""
    frame = _supply_frame(["2024-01-01", "2024-01-02", bad, "2024-01-03"])
    with pytest.raises(ValueError, match=r"train_delivery column 'date' .* row\(s\) 3 \("):
        forecast_supply(frame, [1])
    with pytest.raises(ValueError, match=r"train_delivery column 'date'"):
        supply_for_rows(frame, [1], [0], np.array(["2024-01-04"], dtype="datetime64[D]"))


def test_bad_eval_delivery_dates_and_values_name_the_frame_and_rows_from_one():
    m = market(n=20, seed=22)
    args = (m["win"], m["cost"], {"s": m["seg"]}, m["train"])
    bad = m["eval"].copy()
    bad["date"] = bad["date"].astype(str)
    bad.loc[[4, 9], "date"] = None
    with pytest.raises(ValueError, match=r"eval_delivery column 'date' has 2 .* row\(s\) 5, 10 "):
        evaluate_sources(*args, bad, m["ids"])
    bad = m["train"].copy()
    bad["date"] = bad["date"].astype(str)
    bad.loc[1, "date"] = "yesterday"
    with pytest.raises(ValueError, match=r"train_delivery column 'date' .* row\(s\) 2 "):
        evaluate_sources(*args[:3], bad, m["eval"], m["ids"], supply="forecast")
    # the other delivery checks count rows from 1 too (they counted from 0)
    bad = m["eval"].copy()
    bad.loc[2, "bid_ecpm"] = -1.0
    with pytest.raises(ValueError, match=r"'bid_ecpm' must be finite and >= 0; row 3 \("):
        evaluate_sources(*args, bad, m["ids"])
    with pytest.raises(ValueError, match="row_dates has 1 missing"):
        supply_for_rows(
            m["train"], m["ids"], [0, 1], np.array(["2026-01-20", "NaT"], dtype="datetime64[D]"),
            model="seasonal_naive",
        )  # fmt: skip


def test_nan_queries_propagate_nan():
    ecdf = GroupedECDF.from_samples([np.array([1.0, 3.0])])
    assert np.isnan(ecdf.cdf(0, np.nan))
    assert np.isnan(ecdf.conditional_mean(0, np.nan))
    assert np.isnan(ecdf.partial_mean(0, np.nan))
    got = ecdf.cdf(0, [np.nan, -np.inf, 2.0, np.inf])
    assert np.isnan(got[0]) and got[1:].tolist() == [0.0, 0.5, 1.0]
    with pytest.raises(ValueError, match="NaN"):
        ecdf.count_le(0, [1.0, np.nan])
    assert ecdf.count_le(0, [np.inf, -np.inf]).tolist() == [2, 0]
    win = Landscape.build(SampleSet([[1.0, 3.0], [2.0]]), [0, 0], 1.0)
    cost = Landscape.build(SampleSet([[1.0], [2.0]]), [0, 0], 1.0)
    assert np.isnan(win.cdf([0, 1], np.nan)).all()
    assert np.isnan(win.partial_mean([0, 1], np.nan)).all()
    got = expected_cost(win, cost, [0, 1], [np.nan, 2.5])
    assert np.isnan(got[0]) and np.isfinite(got[1])


def test_fixed_kappa_accepts_any_real_number_and_refuses_bools():
    win = [np.array([1.0, 3.0, 6.0]), np.array([2.0, 4.0])]
    cost = [np.array([1.0]), np.array([2.0])]
    ev = _delivery([("a", "2026-01-08", 1000, 3.5, 400, 0.8), ("b", "2026-01-08", 10, 3.0, 5, 0.1)])
    common = dict(methods=("blended",), add_references=False)
    seg = {"s": [0, 0]}
    ref = evaluate_sources(win, cost, seg, None, ev, ["a", "b"], kappa=5.0, **common)
    for kap in (np.int64(5), np.float32(5.0), 5, np.uint8(5)):
        got = evaluate_sources(win, cost, seg, None, ev, ["a", "b"], kappa=kap, **common)
        pd.testing.assert_frame_equal(got.forecasts, ref.forecasts)
        assert got.parameters["kappa"] == 5.0 and type(got.parameters["kappa"]) is float
    inf = evaluate_sources(win, cost, seg, None, ev, ["a", "b"], kappa=np.inf, **common)
    assert inf.mape["kappa_win"].iloc[0] == math.inf
    for kap in (True, np.bool_(False), "CV", None):
        with pytest.raises(TypeError, match="kappa must be 'cv' or a real number"):
            evaluate_sources(win, cost, seg, None, ev, ["a", "b"], kappa=kap, **common)
    for kap in (-1, np.float64(np.nan), -np.inf):
        with pytest.raises(ValueError, match="kappa must be 'cv' or a number >= 0"):
            evaluate_sources(win, cost, seg, None, ev, ["a", "b"], kappa=kap, **common)


def test_fit_ses_rejects_a_degenerate_grid_and_no_days():
    y = np.array([[1.0, 2.0, 3.0]])
    with pytest.raises(ValueError, match="n_grid must be an integer ≥ 2"):
        fit_ses(y, n_grid=1)
    with pytest.raises(ValueError, match="n_refine must be an integer ≥ 0"):
        fit_ses(y, n_refine=-1)
    with pytest.raises(TypeError, match="n_grid must be an integer"):
        fit_ses(y, n_grid=5.5)
    with pytest.raises(ValueError, match=r"y has no days \(shape \(2, 0\)\)"):
        fit_ses(np.empty((2, 0)))
    alpha, level = fit_ses(y, n_grid=2, n_refine=0)  # the smallest valid search still works
    assert alpha.shape == level.shape == (1,) and np.isfinite(level).all()


def test_landscape_refuses_out_of_range_or_fractional_advertiser_indices():
    lsc = Landscape.build(SampleSet([[1.0], [2.0]]), [0, 1])
    assert lsc.cdf(1, 1.5).tolist() == [0.0]
    for adv in (-1, 2, [0, 5]):
        with pytest.raises(IndexError, match=r"adv must be advertiser indices in 0\.\.1"):
            lsc.cdf(adv, 1.5)
        with pytest.raises(IndexError, match="adv must be advertiser indices"):
            lsc.partial_mean(adv, 1.5)
        with pytest.raises(IndexError, match="adv must be advertiser indices"):
            expected_cost(lsc, lsc, adv, 1.5)
    with pytest.raises(TypeError, match="adv must hold integers"):
        lsc.cdf(0.5, 1.5)


def test_pool_refuses_fractional_group_labels():
    samples = SampleSet([[1.0], [2.0]])
    with pytest.raises(TypeError, match="groups must hold integers; got 0.7"):
        samples.pool(np.array([0.7, 1.2]))
    whole = samples.pool(np.array([0.0, 1.0]))  # integral floats are fine
    assert whole.counts.tolist() == [1, 1]
    with pytest.raises(TypeError, match="group must hold integers"):
        whole.cdf(0.5, 1.0)


def test_kappa_selection_refuses_bids_of_the_wrong_length():
    four = SampleSet([[1.0, 2, 3, 4], [2.0, 3, 4, 5]])
    with pytest.raises(ValueError, match=r"bids must have one value per advertiser, shape \(2,\)"):
        select_kappa(four, [0, 0], bids=[1.0, 2.0, 3.0], random_state=0)
    with pytest.raises(ValueError, match="bids must have one value per advertiser"):
        KappaSelector().fit(SampleSet([[], []]), bids=[1.0])
    kap, _ = select_kappa(four, [0, 0], bids=[2.5, np.nan], random_state=0)
    assert kap >= 0


def test_segment_sizes_refuses_sample_sets_of_different_advertisers():
    from adseg.forecast import segment_sizes

    with pytest.raises(
        ValueError, match="win and cost must hold the same advertisers; got 2 and 1"
    ):
        segment_sizes(SampleSet([[1.0], [2.0]]), SampleSet([[1.0]]), [0, 0])


def test_forecasts_that_could_not_be_made_are_left_out_and_counted():
    """README: an empty forecast is one adseg could not make (no supply history, with supply
    "forecast"). Such rows are NaN in the forecasts frame, left out of the MAPE (which itself
    refuses NaN) and counted in n_missing_forecast."""
    win = [np.array([1.0, 3.0, 6.0]), np.array([2.0, 4.0])]
    cost = [np.array([1.0]), np.array([2.0])]
    train = _delivery(
        [("a", "2026-01-01", 900, 3.0, 0, 0.0), ("a", "2026-01-02", 1100, 3.0, 0, 0.0)]
    )
    ev = _delivery([("a", "2026-01-08", 1000, 3.5, 400, 0.8), ("b", "2026-01-08", 10, 3.0, 5, 0.1)])
    res = evaluate_sources(
        win, cost, {"s": [0, 0]}, train, ev, ["a", "b"], supply="forecast", methods=("segment",),
        add_references=False,
    )  # fmt: skip
    f = res.forecasts.set_index("advertiser_id")
    assert np.isnan(f.loc["b", "impressions_forecast"]) and np.isnan(f.loc["b", "spend_forecast"])
    row = res.mape.iloc[0]
    assert row["n_missing_forecast"] == 1 and row["n_advertisers"] == 1
    assert row["impressions_mape"] == pytest.approx(
        abs(400 - f.loc["a", "impressions_forecast"]) / 400
    )
    # a NaN spend forecast beside a finite impressions forecast is left out of both MAPEs too
    frame = res.forecasts.copy()
    frame.loc[frame["advertiser_id"] == "b", "impressions_forecast"] = 5.0
    s = score_forecasts(frame).iloc[0]
    assert s["n_missing_forecast"] == 1 and s["n_advertisers"] == 1
    assert np.isfinite(s["spend_mape"])


def test_the_cdf_grid_ignores_advertisers_logging_prices_in_the_wrong_unit():
    """The grid's top was the 0.995 quantile of all samples pooled: two of 120 advertisers
    logging prices ×1000 (the simulator's unit_market fault) put it at ~2,300 eCPM against a
    median price near 2, and every segment's curve was at 0.99 by the first step (QA). The top
    is now the largest typical advertiser's 0.995 quantile: the same with or without them, and
    at or above every typical advertiser's."""
    from adseg.forecast import cdf_grid

    rng = np.random.default_rng(0)
    typical = [rng.lognormal(0.6, 0.5, 2000) for _ in range(118)]
    faulty = [rng.lognormal(0.6, 0.5, 2000) * 1000 for _ in range(2)]
    clean = cdf_grid(SampleSet(typical))
    np.testing.assert_array_equal(cdf_grid(SampleSet(typical + faulty)), clean)
    assert clean[-1] >= max(np.quantile(s, 0.995, method="lower") for s in typical)
    assert clean[-1] < 20 and clean.size == 101 and clean[0] == 0.0
    for empty in ([np.array([]), np.array([])], [np.zeros(3)]):
        assert cdf_grid(SampleSet(empty))[-1] == 1.0


def test_a_landscape_without_own_cdfs_is_for_kappa_infinity_alone():
    """with_own=False (the κ selector's folds) makes no own c.d.f.s: the segment estimate is the
    same, and a finite κ, which would read them, is refused."""
    samples = SampleSet([np.array([1.0, 3.0]), np.array([2.0]), np.array([5.0, 6.0])])
    seg = np.array([0, 0, 1])
    full = Landscape.build(samples, seg, math.inf)
    bare = Landscape.build(samples, seg, math.inf, with_own=False)
    assert bare.own is None
    x = np.array([0.5, 2.0, 5.5])
    np.testing.assert_array_equal(bare.cdf([0, 1, 2], x), full.cdf([0, 1, 2], x))
    assert bare.with_kappa(math.inf).own is None
    with pytest.raises(ValueError, match="with_own=False"):
        Landscape.build(samples, seg, 3.0, with_own=False)
    with pytest.raises(ValueError, match="without own"):
        bare.with_kappa(3.0)
    assert samples.owner.dtype == samples.rank.dtype == samples.by_value.dtype == np.int32
