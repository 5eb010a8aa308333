"""The model view (adseg.mixture) and model selection by backtest (adseg.selection)."""

from __future__ import annotations

import dataclasses
import datetime as dt

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.metrics import adjusted_rand_score

from adseg.forecast import samples_by_advertiser
from adseg.mixture import MixtureSegmentation, bin_edges, binned_counts, model_features
from adseg.model_stage import backtest_split, make_backtest
from adseg.selection import (
    column_weights,
    mape_by_band,
    parsimonious_choice,
    select_model_k,
    size_band,
)
from adseg.simulate import MarketplaceConfig, simulate_marketplace


def planted(n_per=60, k=6, bins=30, samples=(50, 120), seed=0):
    """Counts of n_per · k items from k well-separated categorical distributions."""
    rng = np.random.default_rng(seed)
    theta = rng.dirichlet(np.full(bins, 0.3), size=k)
    truth = np.repeat(np.arange(k), n_per)
    sizes = rng.integers(*samples, size=truth.size)
    counts = np.array([rng.multinomial(m, theta[z]) for z, m in zip(truth, sizes, strict=True)])
    return counts, truth


def test_em_recovers_planted_segments():
    counts, truth = planted()
    fit = MixtureSegmentation(6, random_state=0).fit([counts])
    assert adjusted_rand_score(truth, fit.labels_) >= 0.95
    assert fit.converged_


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_objective_never_decreases(seed):
    counts, _ = planted(n_per=30, k=5, samples=(1, 40), seed=seed)
    words = sp.random(counts.shape[0], 50, density=0.1, random_state=seed, format="csr")
    words.data = np.ceil(words.data * 3)
    fit = MixtureSegmentation(8, max_count=30, n_init=2, random_state=seed).fit([counts, words])
    trace = np.asarray(fit.objective_)
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[:-1]))


def test_items_without_samples_are_placed_by_their_words():
    counts, truth = planted(n_per=40, k=3)
    rng = np.random.default_rng(1)
    vocab = rng.dirichlet(np.full(20, 0.2), size=3)
    words = np.array([rng.multinomial(12, vocab[z]) for z in truth])
    blind = counts.copy()
    blind[::4] = 0  # a quarter of the items have no sample, only words
    fit = MixtureSegmentation(3, random_state=0).fit([blind, words])
    assert adjusted_rand_score(truth[::4], fit.labels_[::4]) >= 0.9


def test_labels_are_equivariant_to_the_order_of_items():
    counts, _ = planted(n_per=25, k=4, samples=(2, 60))
    perm = np.random.default_rng(3).permutation(counts.shape[0])
    a = MixtureSegmentation(4, random_state=0).fit([counts]).labels_
    b = MixtureSegmentation(4, random_state=0).fit([counts[perm]]).labels_
    np.testing.assert_array_equal(a[perm], b)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_components": 0}, "n_components"),
        ({"n_components": 1000}, "more than"),
        ({"view_weights": [1.0, -1.0]}, "view_weights"),
        ({"max_count": 0}, "max_count"),
        ({"smoothing": float("nan")}, "smoothing"),
        ({"n_init": 0}, "n_init"),
    ],
)
def test_bad_parameters_are_named(kwargs, match):
    counts, _ = planted(n_per=5, k=2)
    with pytest.raises(ValueError, match=match):
        MixtureSegmentation(**{"n_components": 2, **kwargs}).fit([counts])


def test_binning_matches_numpy_histogram():
    rng = np.random.default_rng(0)
    samples = [rng.lognormal(size=m) for m in (0, 3, 50, 200)]
    edges = bin_edges(samples, 10)
    counts = binned_counts(samples, edges).toarray()
    full = np.concatenate([[-np.inf], edges, [np.inf]])
    for row, s in zip(counts, samples, strict=True):
        # bins are [e_j, e_{j+1}): numpy's are too, but for its last bin
        expected = np.array(
            [np.sum((s >= lo) & (s < hi)) for lo, hi in zip(full[:-1], full[1:], strict=True)]
        )
        np.testing.assert_array_equal(row, expected)


def test_size_bands():
    assert list(size_band([0, 1, 4, 5, 19, 20, 99, 100, 5000])) == [
        "0", "1-4", "1-4", "5-19", "5-19", "20-99", "20-99", ">=100", ">=100"
    ]  # fmt: skip


def test_mape_by_band_agrees_with_a_direct_computation():
    frame = pd.DataFrame(
        {
            "advertiser_id": ["a", "b", "c", "d"],
            "source": "s",
            "method": "segment",
            "supply_mode": "actual",
            "impressions_forecast": [110.0, 90.0, 50.0, 10.0],
            "impressions_actual": [100.0, 100.0, 100.0, 0.0],
            "spend_forecast": [1.0, 1.0, 1.0, 1.0],
            "spend_actual": [2.0, 1.0, 1.0, 1.0],
        }
    )
    out = mape_by_band(frame, ["a", "b", "c", "d"], [3, 4, 300, 0]).set_index("band")
    assert out.loc["1-4", "impressions_mape"] == pytest.approx(0.1)
    assert out.loc["1-4", "n_advertisers"] == 2
    assert out.loc[">=100", "impressions_mape"] == pytest.approx(0.5)
    assert np.isnan(out.loc["0", "impressions_mape"])  # its only actual is zero
    assert out.loc["1-4", "spend_mape"] == pytest.approx(0.25)


def test_parsimonious_choice_and_weights():
    assert parsimonious_choice({10: 0.20, 20: 0.1503, 40: 0.150, 80: 0.149}) == 20
    assert parsimonious_choice({10: np.nan, 20: 0.3}) == 20
    w = column_weights([0.1, 0.2, np.nan])
    np.testing.assert_allclose(w, [1.0, 1 / 16, 0.0])
    np.testing.assert_allclose(column_weights([0.0, 0.2, 0.0]), [1.0, 0.0, 1.0])


def test_backtest_split_holds_out_the_last_days():
    start = dt.date(2026, 3, 2)
    assert backtest_split(start, start) is None
    assert backtest_split(start, start + dt.timedelta(days=6)) == (
        dt.date(2026, 3, 6),
        dt.date(2026, 3, 7),
    )
    assert backtest_split(start, start + dt.timedelta(days=1)) == (start, start + dt.timedelta(1))


@pytest.fixture(scope="module")
def planted_market():
    """A marketplace of 10 well-separated segments, many samples each, and its backtest."""
    cfg = MarketplaceConfig(
        n_advertisers=300,
        n_segments=10,
        seed=7,
        median_train_samples=150,
        sample_count_sigma=0.3,
        segment_price_sigma=0.4,
        qualifier_price_sigma=0.4,
        advertiser_price_sigma=0.0,
        fault_share=0.0,
    )
    market = simulate_marketplace(cfg)
    ids = market.advertisers["advertiser_id"].to_numpy(object)
    auctions = market.auctions.assign(day=pd.to_datetime(market.auctions["ts"]).dt.date)
    delivery = market.delivery.assign(date=pd.to_datetime(market.delivery["date"]).dt.date)
    first = dt.date.fromisoformat(cfg.start_date)
    last_train = first + dt.timedelta(days=cfg.train_days - 1)
    fit_end, held = backtest_split(first, last_train)
    train = delivery[delivery["date"] <= last_train].reset_index(drop=True)
    win, cost = samples_by_advertiser(auctions[auctions["day"] <= fit_end], ids)
    texts = market.advertisers["description"].tolist()
    truth = pd.factorize(market.truth["segment"])[0]
    return make_backtest(win, cost, train, held, ids, texts), truth, market


def test_backtest_chooses_about_the_planted_number_of_segments(planted_market):
    backtest, truth, _ = planted_market
    k, scores, fits = select_model_k(
        backtest, [4, 6, 8, 10, 12, 15, 20, 30], MixtureSegmentation(random_state=0), 40
    )
    planted = np.unique(truth).size
    assert 0.8 * planted <= k <= 1.2 * planted, scores
    assert adjusted_rand_score(truth, fits[k].labels_) >= 0.9


def test_model_features_are_equivariant_to_the_order_of_advertisers(planted_market):
    backtest, _, _ = planted_market
    perm = np.random.default_rng(0).permutation(len(backtest.win_samples))
    a, edges_a = model_features(backtest.win_samples, backtest.descriptions)
    b, edges_b = model_features(
        [backtest.win_samples[i] for i in perm], [backtest.descriptions[i] for i in perm]
    )
    np.testing.assert_array_equal(edges_a, edges_b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.toarray()[perm], y.toarray())


def test_the_backtest_scores_spend_with_the_runs_spend_price(planted_market):
    backtest, truth, _ = planted_market
    cost = backtest.score({"truth": truth})
    market = dataclasses.replace(backtest, spend_price="market").score({"truth": truth})
    impressions = [c for c in cost.columns if c.startswith("impressions")]
    pd.testing.assert_frame_equal(cost[impressions], market[impressions])
    assert not np.allclose(cost["spend_mape_blended"], market["spend_mape_blended"])


def test_segment_win_rates_read_the_binned_price_distribution():
    from adseg.mixture import segment_win_rates

    edges = np.array([1.0, 2.0, 4.0])  # bins [0,1) [1,2) [2,4) [4,8]
    theta = np.array([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
    bids = np.array([0.0, 0.5, 1.0, 3.0, 8.0, 9.0])
    got = segment_win_rates(np.log(theta), edges, 8.0, bids)
    expected = np.array(
        [
            [0.0, 0.05, 0.1, 0.3 + 0.15, 1.0, 1.0],
            [0.0, 0.125, 0.25, 0.5 + 0.125, 1.0, 1.0],
        ]
    ).T
    np.testing.assert_allclose(got, expected, atol=1e-12)


def test_delivery_likelihood_is_binomial_and_capped():
    from scipy.stats import binom

    from adseg.mixture import delivery_log_likelihood, segment_win_rates

    edges = np.array([1.0, 2.0, 4.0])
    log_theta = np.log(np.array([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]]))
    requests, wins, bids = (
        np.array([40.0, 0.0, 1000.0]),
        np.array([12.0, 0.0, 500.0]),
        np.array([3.0, 3.0, 1.5]),
    )
    got = delivery_log_likelihood(log_theta, edges, 8.0, requests, wins, bids, max_count=100)
    rate = segment_win_rates(log_theta, edges, 8.0, bids)
    direct = binom.logpmf(wins[0], requests[0], rate[0]) - binom.logpmf(wins[0], requests[0], 0.5)
    # below the cap: the binomial up to a constant per advertiser
    np.testing.assert_allclose(got[0] - got[0, 0], direct - direct[0])
    assert np.all(got[1] == 0)  # no requests, no evidence
    # above the cap: scaled to 100 requests
    full = delivery_log_likelihood(log_theta, edges, 8.0, requests, wins, bids, max_count=1e9)
    np.testing.assert_allclose(got[2], full[2] * 100 / 1000)
    assert np.all(delivery_log_likelihood(log_theta, edges, 8.0, requests, wins, bids, 0) == 0)


def test_delivery_places_advertisers_without_samples(planted_market):
    """Advertisers whose samples are withheld (and words too) are placed by their wins at their
    bid: with the delivery evidence they land in their planted segment far more often."""
    from adseg.model_stage import Delivery, place

    backtest, truth, market = planted_market
    rng = np.random.default_rng(0)
    hidden = rng.choice(len(truth), 60, replace=False)
    win = [np.array([]) if i in set(hidden) else s for i, s in enumerate(backtest.win_samples)]
    texts = ["" if i in set(hidden) else t for i, t in enumerate(backtest.descriptions)]
    views, edges = model_features(win, texts)
    fit = MixtureSegmentation(10, random_state=0).fit(views)
    delivery = Delivery.of(backtest.fit_delivery, backtest.advertiser_ids)
    top = max(float(np.max(s)) for s in win if s.size)
    plain = place(fit, views, edges, top, delivery, 0.0)
    np.testing.assert_array_equal(plain, fit.labels_)
    placed = place(fit, views, edges, top, delivery, 100.0)
    shown = np.setdiff1d(np.arange(len(truth)), hidden)
    # the segment of each label, read from the advertisers that kept their samples
    owner = {
        k: np.bincount(truth[shown][fit.labels_[shown] == k]).argmax()
        for k in range(10)
        if np.any(fit.labels_[shown] == k)
    }
    right = lambda lab: np.mean([owner.get(lab[i], -1) == truth[i] for i in hidden])  # noqa: E731
    assert right(placed) >= 0.6 > right(plain) + 0.3, (right(placed), right(plain))
