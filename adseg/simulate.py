"""The synthetic real-time-bidding marketplace behind ``sample_campaigns/``.

A pure module (numpy/pandas; no SQL, no CLI). ``simulate_marketplace(config)`` returns a
:class:`Marketplace` of frames in the ingest format of DESIGN.md §3 — ``advertisers``,
``auctions`` (the logged auction sample), ``delivery`` (daily totals) — plus ``truth``, the
generating parameters, which the pipeline never reads. ``write_marketplace(market, out_dir)``
writes ``advertisers.csv.gz``, ``auctions.csv.gz``, ``delivery.csv.gz`` and ``truth.csv``
byte-identically for the same configuration.

The model (segments, advertisers, auction rules, volume, bids, text, faults, delivery, price
families) is described in docs/algorithms/simulator.md and argued in
``sample_campaigns/README.md``. Cost: O(rows) time and memory for the auction sample (≈ 530 bytes
per row while simulating, ≈ 850 while writing CSV), plus O(Σ bid/tick) over advertiser-days for
the exact landscape sums, in chunks of ≤ 4 M points of ≈ 80 bytes.
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
import math
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import ndtr
from scipy.stats import gamma as gamma_dist

__all__ = [
    "FAULT_KINDS",
    "Marketplace",
    "MarketplaceConfig",
    "FAMILIES",
    "PRICE_FAMILIES",
    "family_config",
    "simulate_marketplace",
    "true_landscape",
    "write_marketplace",
]

MAX_ADVERTISERS = 100_000  # ~24 M logged auctions at the default sample rates
MAX_DAYS = 366
FAULT_KINDS = ("unit_market", "unit_paid", "bug_market", "bot_burst")
PRICE_FAMILIES = ("lognormal", "gamma")
_FAULT_VIEW = {
    "unit_market": "win_rate",
    "unit_paid": "ecpm",
    "bug_market": "win_rate",
    "bot_burst": "both",
}

# Text vocabulary. Verticals give the coarse topic, qualifiers the audience; a segment is one
# (vertical, qualifier) pair, so text alone tells verticals apart but mixes the segments inside one.
_VERTICALS: dict[str, list[str]] = {
    line.split(":")[0]: line.split(":")[1].split()
    for line in """
travel: travel flights hotels holidays resorts cruises tours trips airline vacation
auto: cars auto vehicles dealership tyres motors leasing garage suv parts
finance: bank loans insurance credit mortgage savings invest pension cards finance
fashion: fashion clothing shoes apparel dresses jeans accessories boutique wear bags
electronics: electronics laptops phones gadgets tv audio cameras computers tech gaming
food: food restaurant pizza grocery recipes delivery meals coffee snacks organic
health: health pharmacy clinic fitness wellness vitamins dental care medical gym
education: courses university school learning tutoring degree training online exam kids
realestate: homes apartments property rentals realty mortgage housing estate condos
entertainment: movies music streaming tickets concerts games shows events cinema tv
""".strip().splitlines()
}
_QUALIFIERS: dict[str, list[str]] = {
    "luxury": "luxury premium exclusive elite designer".split(),
    "budget": "cheap discount budget bargain affordable".split(),
    "local": "local neighbourhood city regional nearby".split(),
    "business": "enterprise business corporate b2b professional".split(),
    "family": "family kids parents children home".split(),
    "green": "eco sustainable green ethical natural".split(),
    "mobile": "app mobile smartphone digital instant".split(),
    "youth": "students young teens youth campus".split(),
}
_GENERIC = (
    "leading trusted online best quality solutions services official new brand customers "
    "worldwide award winning offers deals shop experience innovative great top store today "
    "free support your partner products since value choice easy fast"
).split()
_NAME_FIRST = (
    "North Bright Blue Silver Green Red Swift Oak Stone River Sun Star Iron Maple Cedar Nova "
    "Alpha Urban Prime Peak Müller Café Zürich São Ærø Łódź Crème Señor Björk Øre"
).split()
_NAME_SECOND = (
    "wind path field bridge line works hub point gate wave labs mark base craft view way side "
    "land port vale"
).split()
_LEGAL = ["Ltd", "GmbH", "Inc.", "S.A.", "& Co.", "LLC", "AB", "Oy", "B.V.", "plc"]


@dataclass(frozen=True)
class MarketplaceConfig:
    """Parameters of the simulated marketplace (defaults: the paper's 1,268 advertisers, a 7-day
    training window followed by a 7-day evaluation window).

    Attributes
    ----------
    n_advertisers, n_segments : population size and number of latent segments.
    days, train_days : total days simulated; the first ``train_days`` are the training window,
        the rest the evaluation window.
    seed : the one seed every random step derives from (``numpy.random.SeedSequence``; each stage
        draws from its own child stream).
    start_date : first day, ISO ``YYYY-MM-DD`` (a Monday by default); timestamps are UTC.
    price_decimals : prices are multiples of the exchange tick ``10**-price_decimals``.
    median_train_samples, sample_count_sigma : log-normal law of the expected number of logged
        auctions per advertiser over the training window.
    min_train_samples, max_train_samples : clip of that expectation.
    median_daily_supply, supply_sigma : log-normal law of the daily bid requests.
    vertical_price_range : the verticals' median market prices are spread log-evenly over this
        eCPM range.
    qualifier_price_sigma, segment_price_sigma : log-sd of the qualifier's shift of the vertical's
        price level, and of the segment's own deviation on top.
    segment_shape_sigma : log-sd of a segment's shape parameters around its vertical's.
    advertiser_price_sigma : log-sd of the advertiser-specific price scale inside a segment.
    market_day_sigma : log-sd of the per-(segment, day) market level.
    text_mix : probabilities of a description word being a vertical, qualifier, generic or
        misleading (another vertical's) word.
    first_price_share : share of advertisers in first-price auctions with bid shading.
    fault_share : share of advertisers with one injected logging fault.
    eval_bid_change_share : share of advertisers that move their bid level in the evaluation window.
    log_eval_days : also log auction samples on evaluation days (as a real log would); the
        pipeline reads the training window only.
    price_family : ``"lognormal"`` (component j of the market-price mixture is log-normal with
        log-mean ``mu_j`` and log-sd ``sigma_j``) or ``"gamma"`` (component j is a gamma
        distribution with mean ``exp(mu_j)`` and coefficient of variation ``sigma_j``: shape
        ``1 / sigma_j**2``, scale ``exp(mu_j) * sigma_j**2``). Both are scale families, so the
        advertiser's price scale and the daily market level shift ``mu_j`` in either.
    segment_size_concentration : the Dirichlet concentration α of the segment shares (smaller:
        more unequal segment sizes).
    """

    n_advertisers: int = 1268
    n_segments: int = 40
    days: int = 14
    train_days: int = 7
    seed: int = 20260302
    start_date: str = "2026-03-02"
    price_decimals: int = 2
    median_train_samples: float = 50.0
    sample_count_sigma: float = 1.3
    min_train_samples: float = 2.0
    max_train_samples: float = 6000.0
    median_daily_supply: float = 3e5
    supply_sigma: float = 1.8
    vertical_price_range: tuple[float, float] = (0.4, 5.0)
    qualifier_price_sigma: float = 0.15
    segment_price_sigma: float = 0.08
    segment_shape_sigma: float = 0.1
    advertiser_price_sigma: float = 0.06
    market_day_sigma: float = 0.03
    text_mix: tuple[float, float, float, float] = (0.45, 0.2, 0.25, 0.1)
    first_price_share: float = 0.2
    fault_share: float = 0.06
    eval_bid_change_share: float = 0.3
    log_eval_days: bool = True
    price_family: str = "lognormal"
    segment_size_concentration: float = 3.0

    def __post_init__(self) -> None:
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise ValueError(f"MarketplaceConfig: {msg}")

        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float):  # a Python int is finite (and may exceed float64)
                need(math.isfinite(value), f"{f.name} must be finite; got {value!r}.")
        need(
            1 <= int(self.n_advertisers) <= MAX_ADVERTISERS,
            f"n_advertisers must be in [1, {MAX_ADVERTISERS:,}]; got {self.n_advertisers}.",
        )
        need(int(self.n_segments) >= 1, f"n_segments must be ≥ 1; got {self.n_segments}.")
        # a sample is a few weeks of logs; supply trends compound over the days
        need(2 <= int(self.days) <= MAX_DAYS, f"days must be in [2, {MAX_DAYS}]; got {self.days}.")
        need(
            1 <= int(self.train_days) < int(self.days),
            f"train_days must be in [1, days); got {self.train_days} with days={self.days}.",
        )
        need(0 <= int(self.seed) < 2**63, f"seed must be in [0, 2**63); got {self.seed}.")
        try:
            first = dt.date.fromisoformat(self.start_date)
        except (TypeError, ValueError):
            need(False, f"start_date must be YYYY-MM-DD; got {self.start_date!r}.")
        last = first + dt.timedelta(days=int(self.days) - 1)
        # the dates adseg ingest accepts (it refuses years outside as exporters' placeholders)
        need(
            dt.date(2000, 1, 1) <= first and last <= dt.date(2099, 12, 31),
            f"the simulated days {first} … {last} must lie in 2000-01-01 … 2099-12-31.",
        )
        need(0 <= int(self.price_decimals) <= 4, "price_decimals must be in [0, 4].")
        vr = np.asarray(self.vertical_price_range, dtype=np.float64)
        need(
            vr.shape == (2,) and np.all(np.isfinite(vr)) and 0 < vr[0] <= vr[1],
            f"vertical_price_range must be (low, high) with 0 < low ≤ high; got {vr.tolist()}.",
        )
        mix = np.asarray(self.text_mix, dtype=np.float64)
        need(
            mix.shape == (4,) and np.all(np.isfinite(mix)) and np.all(mix >= 0) and mix.sum() > 0,
            f"text_mix must be 4 non-negative weights; got {self.text_mix!r}.",
        )
        need(self.median_train_samples > 0, "median_train_samples must be > 0.")
        need(0 < self.min_train_samples <= self.max_train_samples, "need 0 < min ≤ max samples.")
        need(self.median_daily_supply >= 1, "median_daily_supply must be ≥ 1.")
        for name in (
            "sample_count_sigma",
            "supply_sigma",
            "qualifier_price_sigma",
            "segment_price_sigma",
            "segment_shape_sigma",
            "advertiser_price_sigma",
        ):
            need(getattr(self, name) >= 0, f"{name} must be ≥ 0.")
        need(self.market_day_sigma >= 0, "market_day_sigma must be ≥ 0.")
        for name in ("first_price_share", "fault_share", "eval_bid_change_share"):
            need(0 <= getattr(self, name) <= 1, f"{name} must be in [0, 1].")
        need(
            isinstance(self.price_family, str) and self.price_family in PRICE_FAMILIES,
            f"price_family must be one of {', '.join(map(repr, PRICE_FAMILIES))}; "
            f"got {self.price_family!r}.",
        )
        need(
            self.segment_size_concentration > 0,
            f"segment_size_concentration must be > 0; got {self.segment_size_concentration!r}.",
        )

    @property
    def tick(self) -> float:
        """The exchange's price tick in eCPM."""
        return 10.0 ** -int(self.price_decimals)


# Named generative families: the fields each sets on top of MarketplaceConfig's defaults. "gamma"
# is a second world, built so that no segmentation method is flattered by the default's choices
# (sample_campaigns/README.md, "A second family: gamma", argues every value): gamma rather than
# log-normal prices, a flatter vertical price structure with larger segment-own deviations (the
# vertical × qualifier hierarchy explains less), more unequal segment sizes, noisier text and
# fewer, more dispersed samples per advertiser.
_FAMILIES: dict[str, dict[str, object]] = {
    "default": {},
    "gamma": {
        "price_family": "gamma",
        "n_advertisers": 1200,
        "n_segments": 25,
        "segment_size_concentration": 1.0,
        "vertical_price_range": (0.7, 2.8),
        "qualifier_price_sigma": 0.1,
        "segment_price_sigma": 0.35,
        "segment_shape_sigma": 0.3,
        "text_mix": (0.3, 0.1, 0.35, 0.25),
        "median_train_samples": 30.0,
        "sample_count_sigma": 1.5,
    },
}
FAMILIES = tuple(_FAMILIES)


def family_config(name: str = "default", **overrides) -> MarketplaceConfig:
    """The configuration of a named generative family, with fields overridden.

    Parameters
    ----------
    name : ``"default"`` (``MarketplaceConfig()``: log-normal prices, 1,268 advertisers, 40
        segments) or ``"gamma"`` (gamma prices, 1,200 advertisers, 25 segments of unequal size,
        a flatter price hierarchy, noisier text, sparser samples; see ``_FAMILIES``).
    **overrides : MarketplaceConfig fields that replace the family's values (an unknown field
        is a TypeError, a bad value a ValueError, as for ``MarketplaceConfig``).

    Returns
    -------
    MarketplaceConfig
    """
    if not isinstance(name, str) or name not in _FAMILIES:
        raise ValueError(
            f"family_config: name must be one of {', '.join(map(repr, FAMILIES))}; got {name!r}."
        )
    return MarketplaceConfig(**{**_FAMILIES[name], **overrides})


@dataclass
class Marketplace:
    """A simulated marketplace: the ingest frames and the hidden truth.

    ``advertisers`` (n rows), ``auctions`` (one row per logged auction, sorted by advertiser then
    time; price columns float64 in eCPM, ``paid_ecpm`` NaN when lost), ``delivery`` (n × days
    rows), ``truth`` (n rows; see ``sample_campaigns/README.md`` for the columns).
    """

    config: MarketplaceConfig
    advertisers: pd.DataFrame
    auctions: pd.DataFrame
    delivery: pd.DataFrame
    truth: pd.DataFrame


# ----------------------------------------------------------------------------- the true landscape


def _gamma_parts(mu, s) -> tuple[np.ndarray, np.ndarray]:
    """(shape, scale) of the gamma distribution with mean ``exp(mu)`` and coefficient of
    variation ``s`` (broadcasting arrays)."""
    s2 = np.square(s)
    return 1.0 / s2, np.exp(mu) * s2


def _mixture_cdf(x, mu1, s1, mu2, s2, w2, family: str = "lognormal") -> np.ndarray:
    """c.d.f. of the two-component market-price mixture at eCPM x > 0 (broadcasting arrays).

    ``family`` "lognormal": component j is log-normal with log-mean ``mu_j``, log-sd ``s_j``;
    "gamma": gamma with mean ``exp(mu_j)`` and coefficient of variation ``s_j``. ``w2`` is the
    weight of component 2. Returns the broadcast shape of the arguments, values in [0, 1].
    """
    if family == "gamma":
        a1, scale1 = _gamma_parts(mu1, s1)
        a2, scale2 = _gamma_parts(mu2, s2)
        return (1.0 - w2) * gamma_dist.cdf(x, a1, scale=scale1) + w2 * gamma_dist.cdf(
            x, a2, scale=scale2
        )
    lx = np.log(np.maximum(x, 1e-300))
    return (1.0 - w2) * ndtr((lx - mu1) / s1) + w2 * ndtr((lx - mu2) / s2)


def _grid_landscape(
    mu1: np.ndarray,
    s1: np.ndarray,
    mu2: np.ndarray,
    s2: np.ndarray,
    w2: np.ndarray,
    reserve_ticks: np.ndarray,
    first_price: np.ndarray,
    theta: np.ndarray,
    bid_ticks: np.ndarray,
    tick: float,
    chunk: int = 4_000_000,
    family: str = "lognormal",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact win rate, mean and variance of the paid eCPM given a win, at integer-tick bids.

    Every array argument is length q (one row per advertiser-day; ``mu``s already include the
    log price scale); ``family`` is the price family of every row (see ``_mixture_cdf``). The
    market price lives on ticks k = 1, 2, …; P(mp ≤ k) = 1[k ≥ r]·F(k·t), so
    the sums over k = 1..bid run over a ragged grid of Σ bid_ticks points, processed in chunks of
    about ``chunk`` points (memory ≈ 80 bytes per point). Returns (win_rate, mean_paid_ecpm,
    var_paid_ecpm); mean and variance are NaN where the win rate is 0.
    """
    q = bid_ticks.size
    win = np.zeros(q)
    m1 = np.zeros(q)
    m2 = np.zeros(q)
    lengths = np.maximum(bid_ticks.astype(np.int64), 0)
    ends = np.cumsum(lengths)
    start_row = 0
    while start_row < q:
        # Rows [start_row, stop_row) hold at most ~chunk grid points (at least one row).
        base = ends[start_row - 1] if start_row else 0
        stop_row = int(np.searchsorted(ends, base + chunk, side="right"))
        stop_row = max(stop_row, start_row + 1)
        rows_local = np.arange(start_row, stop_row)
        k_len = lengths[rows_local]
        rows = np.repeat(rows_local, k_len)
        offsets = np.cumsum(k_len) - k_len
        k = np.arange(k_len.sum()) - np.repeat(offsets, k_len) + 1
        args = (mu1[rows], s1[rows], mu2[rows], s2[rows], w2[rows])
        r = reserve_ticks[rows]
        g_hi = np.where(k >= r, _mixture_cdf(k * tick, *args, family), 0.0)
        g_lo = np.where((k - 1 >= r) & (k > 1), _mixture_cdf((k - 1) * tick, *args, family), 0.0)
        p = g_hi - g_lo
        shade = np.floor(theta[rows] * (bid_ticks[rows] - k) + 0.5)
        paid = np.where(first_price[rows], k + shade, k).astype(np.float64)
        n_local = stop_row - start_row
        idx = rows - start_row
        win[rows_local] = np.bincount(idx, weights=p, minlength=n_local)
        m1[rows_local] = np.bincount(idx, weights=p * paid, minlength=n_local)
        m2[rows_local] = np.bincount(idx, weights=p * paid * paid, minlength=n_local)
        start_row = stop_row
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(win > 0, m1 / win, np.nan)
        var = np.where(win > 0, np.maximum(m2 / win - mean**2, 0.0), np.nan)
    return win, mean * tick, var * tick * tick


def true_landscape(
    truth: pd.DataFrame, bid_ecpm, *, price_decimals: int = 2, log_market_level=0.0
) -> tuple[np.ndarray, np.ndarray]:
    """True win rate and expected paid eCPM given a win, per advertiser at given bids.

    ``truth``: the ``Marketplace.truth`` frame (or ``truth.csv``), n rows; ``bid_ecpm``: (n,) or
    (n, d) bids in eCPM (rounded down to the tick, as the exchange would); ``log_market_level``:
    scalar or broadcastable log market level (0 = the advertiser's base, time-invariant
    distribution). The price family is the frame's ``price_family`` column (one value for all
    rows), "lognormal" where there is none (the default family's truth has none). Returns two
    arrays shaped like ``bid_ecpm``; the expected paid eCPM is NaN where the win rate is 0. Exact
    on the tick grid; O(Σ bid/tick) time.
    """
    bids = np.asarray(bid_ecpm, dtype=np.float64)
    if bids.shape[0] != len(truth):
        raise ValueError(f"bid_ecpm has {bids.shape[0]} rows; truth has {len(truth)}.")
    if not np.all(np.isfinite(bids)) or np.any(bids < 0):
        raise ValueError("bid_ecpm must be finite and ≥ 0.")
    family = "lognormal"
    if "price_family" in truth.columns:
        found = sorted(set(truth["price_family"]))
        if len(found) > 1 or not set(found) <= set(PRICE_FAMILIES):
            raise ValueError(
                f"truth's price_family must be one of {', '.join(map(repr, PRICE_FAMILIES))}, "
                f"the same on every row; got {found!r}."
            )
        family = found[0] if found else family
    tick = 10.0 ** -int(price_decimals)
    shape = bids.shape
    cols = 1 if bids.ndim == 1 else shape[1]
    level = np.broadcast_to(np.asarray(log_market_level, dtype=np.float64), shape).reshape(-1)

    def col(name: str) -> np.ndarray:
        return np.repeat(truth[name].to_numpy(), cols)

    win, mean, _ = _grid_landscape(
        col("mu1") + level,
        col("sigma1").astype(np.float64),
        col("mu2") + level,
        col("sigma2").astype(np.float64),
        col("weight2").astype(np.float64),
        np.round(col("reserve_ecpm").astype(np.float64) / tick).astype(np.int64),
        col("auction_rule") == "first_price",
        col("shading").astype(np.float64),
        np.floor(bids.reshape(-1) / tick + 1e-9).astype(np.int64),
        tick,
        family=family,
    )
    return win.reshape(shape), mean.reshape(shape)


# ----------------------------------------------------------------------------- the simulation


def _streams(seed: int, names: tuple[str, ...]) -> dict[str, np.random.Generator]:
    """One independent generator per stage, so that changing one stage's draws (say the text)
    leaves every other stage's numbers as they were."""
    children = np.random.SeedSequence(int(seed)).spawn(len(names))
    return {name: np.random.default_rng(c) for name, c in zip(names, children, strict=True)}


def _mixture_quantile(u, mu1, s1, mu2, s2, w2, family: str = "lognormal") -> np.ndarray:
    """Quantile (eCPM) of the market-price mixture at probabilities ``u`` in (0, 1), by bisection
    on log x (60 halvings), broadcasting arrays; ``family`` as in ``_mixture_cdf``.

    The log-normal bracket is ±9 log-sds around the components' log-means (exact to 1e-15 in
    log). The gamma bracket is the two components' own quantiles at ``u`` (the mixture's
    quantile lies between them), widened by 1e-9 in log.
    """
    if family == "gamma":
        u_in = np.clip(u, 1e-300, 1.0 - 1e-16)
        a1, scale1 = _gamma_parts(mu1, s1)
        a2, scale2 = _gamma_parts(mu2, s2)
        q1 = np.log(np.maximum(gamma_dist.ppf(u_in, a1, scale=scale1), 1e-300))
        q2 = np.log(np.maximum(gamma_dist.ppf(u_in, a2, scale=scale2), 1e-300))
        lo = np.minimum(q1, q2) - 1e-9
        hi = np.maximum(q1, q2) + 1e-9
    else:
        lo = np.minimum(mu1 - 9 * s1, mu2 - 9 * s2)
        hi = np.maximum(mu1 + 9 * s1, mu2 + 9 * s2)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        below = _mixture_cdf(np.exp(mid), mu1, s1, mu2, s2, w2, family) < u
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return np.exp(0.5 * (lo + hi))


def _segments(cfg: MarketplaceConfig, rng: np.random.Generator) -> pd.DataFrame:
    """Per-segment vertical, qualifier, price mixture and reserve."""
    s = cfg.n_segments
    verticals = list(_VERTICALS)
    qualifiers = list(_QUALIFIERS)
    vertical = np.arange(s) % len(verticals)
    # Inside a vertical the qualifiers are distinct while there are enough of them.
    qualifier = np.empty(s, dtype=np.int64)
    for v in range(len(verticals)):  # loop over verticals (≤ 10)
        members = np.flatnonzero(vertical == v)
        perm = rng.permutation(len(qualifiers))
        qualifier[members] = perm[np.arange(members.size) % len(qualifiers)]
    # Prices are structured as in real markets. Each vertical has its own price level (spread over
    # [ln 0.4, ln 5] eCPM), shape (body width, competitive upper tail) and exchange reserve policy;
    # each audience qualifier shifts the level (luxury dearer, budget cheaper) and each segment adds
    # its own deviation of level and shape. Text that finds the vertical and, sometimes, the
    # qualifier thus carries real but partial price information.
    nv = len(verticals)
    lo, hi = np.log(np.asarray(cfg.vertical_price_range, dtype=np.float64))
    vertical_level = rng.permutation(np.linspace(lo, hi, nv))
    qualifier_shift = rng.normal(0.0, cfg.qualifier_price_sigma, len(qualifiers))
    v_sigma1 = rng.uniform(0.3, 0.65, nv)
    v_tail = rng.uniform(0.4, 1.2, nv)
    v_sigma2 = rng.uniform(0.2, 0.45, nv)
    v_weight2 = rng.uniform(0.0, 0.35, nv)
    v_reserve_q = rng.uniform(0.02, 0.25, nv)
    v_has_reserve = rng.random(nv) < 0.5
    jitter = cfg.segment_shape_sigma
    mu1 = (
        vertical_level[vertical]
        + qualifier_shift[qualifier]
        + rng.normal(0.0, cfg.segment_price_sigma, s)
    )
    sigma1 = v_sigma1[vertical] * np.exp(rng.normal(0.0, jitter, s))
    mu2 = mu1 + v_tail[vertical] * np.exp(rng.normal(0.0, jitter, s))
    sigma2 = v_sigma2[vertical] * np.exp(rng.normal(0.0, jitter, s))
    weight2 = np.clip(v_weight2[vertical] + rng.normal(0.0, 0.3 * jitter, s), 0.0, 0.45)
    # Half the verticals sell through exchanges whose reserve binds on 2–25% of the auctions.
    reserve_q = np.clip(v_reserve_q[vertical] * np.exp(rng.normal(0.0, jitter, s)), 0.01, 0.3)
    reserve = _mixture_quantile(reserve_q, mu1, sigma1, mu2, sigma2, weight2, cfg.price_family)
    reserve_ticks = np.where(v_has_reserve[vertical], np.floor(reserve / cfg.tick), 0)
    reserve_ticks = reserve_ticks.astype(np.int64)
    share = rng.dirichlet(np.full(s, float(cfg.segment_size_concentration)))
    return pd.DataFrame(
        {
            "segment": np.arange(s),
            "vertical": np.asarray(verticals, dtype=object)[vertical],
            "qualifier": np.asarray(qualifiers, dtype=object)[qualifier],
            "vertical_index": vertical,
            "qualifier_index": qualifier,
            "mu1": mu1,
            "sigma1": sigma1,
            "mu2": mu2,
            "sigma2": sigma2,
            "weight2": weight2,
            "reserve_ticks": reserve_ticks,
            "share": share,
        }
    )


def _text(
    cfg: MarketplaceConfig, seg: pd.DataFrame, segment: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Names and descriptions. Each description is 8–18 words drawn, with the probabilities of
    ``cfg.text_mix``, from the segment's vertical words, its qualifier words, generic words and the
    words of a per-advertiser misleading vertical, with commas and, for one advertiser in ten, a
    quoted slogan. Returns (names, descriptions, misleading vertical)."""
    n = segment.size
    verticals = list(_VERTICALS)
    first = np.asarray(_NAME_FIRST, dtype=object)[rng.integers(0, len(_NAME_FIRST), n)]
    second = np.asarray(_NAME_SECOND, dtype=object)[rng.integers(0, len(_NAME_SECOND), n)]
    legal = np.asarray(_LEGAL, dtype=object)[rng.integers(0, len(_LEGAL), n)]
    names = pd.Series(first) + pd.Series(second) + " " + pd.Series(legal)

    own_vi = seg["vertical_index"].to_numpy()[segment]
    own_qi = seg["qualifier_index"].to_numpy()[segment]
    mislead = (own_vi + rng.integers(1, len(verticals), n)) % len(verticals)

    max_len = 18
    length = rng.integers(8, max_len + 1, n)
    kind = rng.choice(4, size=(n, max_len), p=np.asarray(cfg.text_mix) / np.sum(cfg.text_mix))
    pick = rng.random((n, max_len))
    # Word tables padded to a rectangle so a (row, kind, pick) triple indexes one word.
    vocab_v = [_VERTICALS[v] for v in verticals]
    vocab_q = {q: _QUALIFIERS[q] for q in _QUALIFIERS}
    width = max(max(len(w) for w in vocab_v), max(len(w) for w in vocab_q.values()), len(_GENERIC))

    def table(lists: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
        arr = np.full((len(lists), width), "", dtype=object)
        sizes = np.array([len(x) for x in lists])
        for i, words in enumerate(lists):  # loop over ≤ 10 vocabularies
            arr[i, : len(words)] = words
        return arr, sizes

    vt, vsz = table(vocab_v)
    qnames = list(vocab_q)
    qt, qsz = table([vocab_q[q] for q in qnames])
    gt, gsz = table([_GENERIC])
    rows_v = np.where(kind == 3, mislead[:, None], own_vi[:, None])
    word_v = vt[rows_v, (pick * vsz[rows_v]).astype(int)]
    word_q = qt[own_qi[:, None], (pick * qsz[own_qi][:, None]).astype(int)]
    word_g = gt[0, (pick * gsz[0]).astype(int)]
    words = np.where(kind == 1, word_q, np.where(kind == 2, word_g, word_v))
    words = np.where(np.arange(max_len)[None, :] < length[:, None], words, "")

    # Punctuation: a comma after the 4th and the 8th word (when present), a full stop at the end.
    desc = pd.Series(names.to_numpy(), dtype=object) + ":"
    for j in range(max_len):  # loop over word positions (columns)
        col = pd.Series(words[:, j], dtype=object)
        sep = ", " if j in (4, 8) else " "
        present = col != ""
        desc = desc.where(~present, desc + (" " if j == 0 else sep) + col)
    slogan = rng.random(n) < 0.1
    slogan_word = gt[0, rng.integers(0, gsz[0], n)]
    desc = desc.where(~slogan, desc + ' — "' + pd.Series(slogan_word, dtype=object) + '" since 19')
    desc = desc.where(~slogan, desc + pd.Series(rng.integers(50, 100, n).astype(str)))
    desc = desc + "."
    return names.to_numpy(dtype=object), desc.to_numpy(dtype=object), mislead


def simulate_marketplace(config: MarketplaceConfig | None = None) -> Marketplace:
    """Simulate a marketplace (see docs/algorithms/simulator.md for the model).

    Parameters
    ----------
    config : MarketplaceConfig, default ``MarketplaceConfig()`` (1,268 advertisers, 14 days).

    Returns
    -------
    Marketplace with ``advertisers`` (n rows), ``auctions`` (≈ n · median_train_samples ·
    exp(sample_count_sigma²/2) · days / train_days rows, ≈ 0.3 M by default), ``delivery``
    (n · days rows) and ``truth`` (n rows).
    Deterministic in ``config``.
    """
    cfg = MarketplaceConfig() if config is None else config
    if not isinstance(cfg, MarketplaceConfig):
        raise TypeError(f"config must be a MarketplaceConfig; got {type(cfg).__name__}.")
    rng = _streams(
        cfg.seed,
        (
            "segments",
            "membership",
            "text",
            "volume",
            "bids",
            "market",
            "auctions",
            "faults",
            "delivery",
        ),
    )
    n, days, train = int(cfg.n_advertisers), int(cfg.days), int(cfg.train_days)
    tick = cfg.tick

    # --- segments and membership
    seg = _segments(cfg, rng["segments"])
    r_m = rng["membership"]
    segment = r_m.choice(cfg.n_segments, size=n, p=seg["share"].to_numpy())
    log_scale = r_m.normal(0.0, cfg.advertiser_price_sigma, n)
    first_price = r_m.random(n) < cfg.first_price_share
    theta = np.where(first_price, r_m.uniform(0.1, 0.5, n), 0.0)
    mu1 = seg["mu1"].to_numpy()[segment] + log_scale
    mu2 = seg["mu2"].to_numpy()[segment] + log_scale
    s1 = seg["sigma1"].to_numpy()[segment]
    s2 = seg["sigma2"].to_numpy()[segment]
    w2 = seg["weight2"].to_numpy()[segment]
    reserve_ticks = seg["reserve_ticks"].to_numpy()[segment]

    names, descriptions, mislead = _text(cfg, seg, segment, rng["text"])

    # --- volume: supply (bid requests) per day, and the logged sample rate
    r_v = rng["volume"]
    z_supply = r_v.standard_normal(n)
    base_supply = cfg.median_daily_supply * np.exp(cfg.supply_sigma * z_supply)
    weekday = (dt.date.fromisoformat(cfg.start_date).weekday() + np.arange(days)) % 7
    weekend_dip = r_v.uniform(0.0, 0.35, n)
    trend = r_v.normal(0.0, 0.01, n)
    day_noise = r_v.normal(0.0, 0.08, (n, days))
    profile = np.where(weekday[None, :] >= 5, 1.0 - weekend_dip[:, None], 1.0)
    supply_mean = (
        base_supply[:, None] * profile * np.exp(trend[:, None] * np.arange(days) + day_noise)
    )
    supply = r_v.poisson(np.maximum(supply_mean, 1.0)).astype(np.int64)
    rho = 0.5
    z_count = rho * z_supply + np.sqrt(1 - rho**2) * r_v.standard_normal(n)
    target = np.clip(
        cfg.median_train_samples * np.exp(cfg.sample_count_sigma * z_count),
        cfg.min_train_samples,
        cfg.max_train_samples,
    )
    rate = np.minimum(target / np.maximum(supply[:, :train].sum(axis=1), 1), 1.0)

    # --- bids
    r_b = rng["bids"]
    target_win = 0.05 + 0.9 * r_b.beta(2.0, 2.5, n)
    level = _mixture_quantile(target_win, mu1, s1, mu2, s2, w2, cfg.price_family)
    level = np.maximum(level, reserve_ticks * tick)
    changes = r_b.random(n) < cfg.eval_bid_change_share
    eval_shift = np.where(changes, r_b.normal(0.0, 0.2, n), 0.0)
    bid_sigma = r_b.uniform(0.03, 0.15, n)
    day_shift = np.where(np.arange(days)[None, :] >= train, eval_shift[:, None], 0.0)
    bid = level[:, None] * np.exp(day_shift + bid_sigma[:, None] * r_b.standard_normal((n, days)))
    # Bidding under the floor never wins; a DSP knows the floor, so bids start at the reserve.
    bid_ticks = np.maximum(np.round(bid / tick), np.maximum(reserve_ticks, 1)[:, None])
    bid_ticks = bid_ticks.astype(np.int64)

    # --- daily market level per segment
    log_g = rng["market"].normal(0.0, cfg.market_day_sigma, (cfg.n_segments, days))
    log_g_adv = log_g[segment]  # (n, days)

    # --- delivery from the full auctions (exact landscape on the tick grid per advertiser-day)
    rep = np.repeat
    win, mean_paid, var_paid = _grid_landscape(
        rep(mu1, days) + log_g_adv.ravel(),
        rep(s1, days),
        rep(mu2, days) + log_g_adv.ravel(),
        rep(s2, days),
        rep(w2, days),
        rep(reserve_ticks, days),
        rep(first_price, days),
        rep(theta, days),
        bid_ticks.ravel(),
        tick,
        family=cfg.price_family,
    )
    win = np.clip(win.reshape(n, days), 0.0, 1.0)
    mean_paid = np.nan_to_num(mean_paid.reshape(n, days))
    sd_paid = np.sqrt(np.nan_to_num(var_paid.reshape(n, days)))
    r_d = rng["delivery"]
    impressions = r_d.binomial(supply, win)
    spend = (
        impressions * mean_paid + np.sqrt(impressions) * sd_paid * r_d.standard_normal((n, days))
    ) / 1000.0
    spend = np.round(np.maximum(spend, 0.0), 6)

    # --- the logged auction sample
    r_a = rng["auctions"]
    log_days = days if cfg.log_eval_days else train
    counts = r_a.binomial(supply[:, :log_days], rate[:, None])  # (n, log_days)
    adv = np.repeat(np.repeat(np.arange(n), log_days), counts.ravel())
    day = np.repeat(np.tile(np.arange(log_days), n), counts.ravel())
    m = adv.size
    second = r_a.integers(0, 86400, m)
    upper = r_a.random(m) < w2[adv]
    if cfg.price_family == "gamma":
        shape, scale = _gamma_parts(
            np.where(upper, mu2[adv], mu1[adv]) + log_g_adv[adv, day],
            np.where(upper, s2[adv], s1[adv]),
        )
        x = r_a.standard_gamma(shape) * scale
    else:
        z = r_a.standard_normal(m)
        log_x = np.where(upper, mu2[adv] + s2[adv] * z, mu1[adv] + s1[adv] * z)
        x = np.exp(log_x + log_g_adv[adv, day])
    mp = np.maximum(np.ceil(x / tick), np.maximum(reserve_ticks[adv], 1))
    mp = mp.astype(np.int64)
    b = bid_ticks[adv, day]
    won = b >= mp
    shade = np.floor(theta[adv] * (b - mp) + 0.5).astype(np.int64)
    paid = np.where(first_price[adv], mp + shade, mp)
    paid = np.where(won, paid, -1)

    # --- faults
    r_f = rng["faults"]
    n_faulty = int(round(cfg.fault_share * n))
    faulty = np.sort(r_f.choice(n, size=n_faulty, replace=False)) if n_faulty else np.array([], int)
    fault_kind = np.full(n, "", dtype=object)
    fault_kind[faulty] = np.asarray(FAULT_KINDS, dtype=object)[np.arange(n_faulty) % 4]
    path_share = np.where(fault_kind != "", r_f.uniform(0.3, 0.8, n), 0.0)
    on_path = r_f.random(m) < path_share[adv]
    kind_row = fault_kind[adv]
    mp_logged = np.where((kind_row == "unit_market") & on_path, mp * 1000, mp)
    paid = np.where((kind_row == "unit_paid") & on_path & won, paid * 1000, paid)
    mp_logged = np.where((kind_row == "bug_market") & ~won, b, mp_logged)
    path_share = np.where(fault_kind == "bug_market", 1.0, path_share)

    # Bot bursts: extra rows in one hour of one training day with very cheap clearing prices.
    bots = np.flatnonzero(fault_kind == "bot_burst")
    train_counts = counts[:, :train].sum(axis=1)
    n_bot = np.maximum(20, 2 * train_counts[bots])
    bot_day = r_f.integers(0, train, bots.size)
    bot_hour = r_f.integers(0, 24, bots.size)
    b_adv = np.repeat(bots, n_bot)
    b_day = np.repeat(bot_day, n_bot)
    b_sec = np.repeat(bot_hour * 3600, n_bot) + r_f.integers(0, 3600, b_adv.size)
    b_bid = bid_ticks[b_adv, b_day]
    b_mp = np.maximum(1, np.floor(r_f.uniform(0.0, 0.3, b_adv.size) * level[b_adv] / tick))
    b_mp = b_mp.astype(np.int64)
    b_won = b_bid >= b_mp
    path_share[bots] = n_bot / np.maximum(n_bot + train_counts[bots], 1)

    adv = np.concatenate([adv, b_adv])
    day = np.concatenate([day, b_day])
    second = np.concatenate([second, b_sec])
    b = np.concatenate([b, b_bid])
    mp_logged = np.concatenate([mp_logged, b_mp])
    won = np.concatenate([won, b_won])
    paid = np.concatenate([paid, np.where(b_won, b_mp, -1)])

    order = np.lexsort((second, day, adv))
    adv, day, second = adv[order], day[order], second[order]
    b, mp_logged, won, paid = b[order], mp_logged[order], won[order], paid[order]
    seq = np.arange(adv.size) - np.searchsorted(adv, adv, side="left")

    adv_ids = _advertiser_ids(n)
    start = pd.Timestamp(cfg.start_date, tz="UTC")
    ts = start + pd.to_timedelta(day * 86400 + second, unit="s")
    auctions = pd.DataFrame(
        {
            "auction_id": _auction_ids(adv, seq, n),
            "advertiser_id": adv_ids[adv],
            "ts": ts,
            "bid_ecpm": b * tick,
            "market_price_ecpm": mp_logged * tick,
            "won": won,
            "paid_ecpm": np.where(paid >= 0, paid * tick, np.nan),
        }
    )

    dates = pd.date_range(cfg.start_date, periods=days, freq="D").strftime("%Y-%m-%d")
    delivery = pd.DataFrame(
        {
            "advertiser_id": np.repeat(adv_ids, days),
            "date": np.tile(np.asarray(dates, dtype=object), n),
            "bid_requests": supply.ravel(),
            "bid_ecpm": (bid_ticks * tick).ravel(),
            "impressions": impressions.ravel().astype(np.int64),
            "spend": spend.ravel(),
        }
    )

    advertisers = pd.DataFrame(
        {"advertiser_id": adv_ids, "name": names, "description": descriptions}
    )

    # --- truth
    ev = slice(train, days)
    mean_eval_bid = bid_ticks[:, ev].mean(axis=1) * tick
    # The default family's truth keeps its columns (and its files their bytes); another family
    # is named in a price_family column, which true_landscape reads.
    family_column = (
        {}
        if cfg.price_family == "lognormal"
        else {"price_family": np.full(n, cfg.price_family, dtype=object)}
    )
    base = pd.DataFrame(
        {
            "mu1": mu1,
            "sigma1": s1,
            "mu2": mu2,
            "sigma2": s2,
            "weight2": w2,
            **family_column,
            "reserve_ecpm": reserve_ticks * tick,
            "auction_rule": np.where(first_price, "first_price", "second_price"),
            "shading": theta,
        }
    )
    wr_mean_bid, ecpm_mean_bid = true_landscape(
        base, mean_eval_bid, price_decimals=cfg.price_decimals
    )
    wr_base_days, ecpm_base_days = true_landscape(
        base, bid_ticks[:, ev] * tick, price_decimals=cfg.price_decimals
    )
    sup_ev = supply[:, ev]
    train_logged = np.bincount(adv[day < train], minlength=n)
    truth = pd.DataFrame(
        {
            "advertiser_id": adv_ids,
            "segment": segment,
            "vertical": seg["vertical"].to_numpy()[segment],
            "qualifier": seg["qualifier"].to_numpy()[segment],
            "misleading_vertical": np.asarray(list(_VERTICALS), dtype=object)[mislead],
            "price_scale": np.exp(log_scale),
            **base,
            "bid_level_ecpm": level,
            "bid_day_sigma": bid_sigma,
            "eval_bid_shift": np.exp(eval_shift),
            "mean_eval_bid_ecpm": mean_eval_bid,
            "true_win_rate_at_mean_eval_bid": wr_mean_bid,
            "true_ecpm_at_mean_eval_bid": ecpm_mean_bid,
            "eval_supply": sup_ev.sum(axis=1),
            # Base distribution, per-day bids and actual supply: the forecast an oracle that knows
            # everything but the future market levels would make.
            "eval_expected_impressions_base": (sup_ev * wr_base_days).sum(axis=1),
            "eval_expected_spend_base": (sup_ev * wr_base_days * np.nan_to_num(ecpm_base_days)).sum(
                axis=1
            )
            / 1000.0,
            # With the realised daily market levels too: the mean of the delivered values.
            "eval_expected_impressions": (sup_ev * win[:, ev]).sum(axis=1),
            "eval_expected_spend": (sup_ev * win[:, ev] * mean_paid[:, ev]).sum(axis=1) / 1000.0,
            "eval_impressions": impressions[:, ev].sum(axis=1),
            "eval_spend": spend[:, ev].sum(axis=1),
            "median_daily_supply": np.median(supply, axis=1),
            "sample_rate": rate,
            "expected_train_samples": target,
            "train_samples_logged": train_logged,
            "fault_kind": fault_kind,
            "fault_view": np.asarray([_FAULT_VIEW.get(k, "") for k in fault_kind], dtype=object),
            "fault_share": path_share,
        }
    )
    return Marketplace(cfg, advertisers, auctions, delivery, truth)


def _advertiser_ids(n: int) -> np.ndarray:
    width = max(5, len(str(n - 1)))
    return np.asarray(("adv-" + pd.Series(np.arange(n)).astype(str).str.zfill(width)), dtype=object)


def _auction_ids(adv: np.ndarray, seq: np.ndarray, n: int) -> np.ndarray:
    width = max(5, len(str(n - 1)))
    seq_width = max(6, len(str(int(seq.max()) if seq.size else 0)))
    a = pd.Series(adv).astype(str).str.zfill(width)
    s = pd.Series(seq).astype(str).str.zfill(seq_width)
    return np.asarray("auc-" + a + "-" + s, dtype=object)


# ----------------------------------------------------------------------------- writing


def _decimal(ticks: np.ndarray, decimals: int) -> pd.Series:
    """Exact decimal strings of non-negative integer tick counts ("" for negative = missing)."""
    t = pd.Series(np.asarray(ticks, dtype=np.int64))
    if decimals == 0:
        out = t.astype(str)
    else:
        scale = 10**decimals
        out = (t // scale).astype(str) + "." + (t % scale).astype(str).str.zfill(decimals)
    return out.where(t >= 0, "")


def _frames_for_csv(market: Marketplace) -> dict[str, pd.DataFrame]:
    """String-formatted frames: prices from integer ticks (exact), spend with 6 decimals,
    timestamps ISO-8601 with a Z, booleans as true/false."""
    dec = int(market.config.price_decimals)
    a = market.auctions
    # Prices are multiples of the tick, so rounding recovers the integer tick counts exactly.
    scale = 10**dec
    ticks = {
        "bid": np.round(a["bid_ecpm"].to_numpy() * scale).astype(np.int64),
        "market_price": np.round(a["market_price_ecpm"].to_numpy() * scale).astype(np.int64),
        "paid": np.round(a["paid_ecpm"].fillna(-1.0 / scale).to_numpy() * scale).astype(np.int64),
    }
    auctions = pd.DataFrame(
        {
            "auction_id": a["auction_id"].to_numpy(),
            "advertiser_id": a["advertiser_id"].to_numpy(),
            "ts": a["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ").to_numpy(),
            "bid_ecpm": _decimal(ticks["bid"], dec).to_numpy(),
            "market_price_ecpm": _decimal(ticks["market_price"], dec).to_numpy(),
            "won": np.where(a["won"].to_numpy(), "true", "false"),
            "paid_ecpm": _decimal(ticks["paid"], dec).to_numpy(),
        }
    )
    d = market.delivery
    delivery = d.assign(
        bid_ecpm=_decimal(np.round(d["bid_ecpm"].to_numpy() * 10**dec), dec).to_numpy(),
        spend=d["spend"].map("{:.6f}".format),
    )
    truth = market.truth.copy()
    for name in truth.columns:
        if truth[name].dtype == np.float64:
            truth[name] = truth[name].map(lambda v: "" if np.isnan(v) else f"{v:.10g}")
    return {
        "advertisers": market.advertisers,
        "auctions": auctions,
        "delivery": delivery,
        "truth": truth,
    }


# Fields added with the second generative family: config.json names them only where they differ
# from their defaults, so the default family's config.json keeps its bytes (a missing field
# rebuilds as its default).
_FAMILY_FIELDS = ("price_family", "segment_size_concentration")


def _config_record(config: MarketplaceConfig) -> dict[str, object]:
    """The configuration as config.json records it: every field, but the family fields only
    where they differ from MarketplaceConfig's defaults."""
    record = asdict(config)
    defaults = MarketplaceConfig()
    for name in _FAMILY_FIELDS:
        if record[name] == getattr(defaults, name):
            del record[name]
    return record


def _csv_bytes(frame: pd.DataFrame) -> bytes:
    buf = io.StringIO()
    frame.to_csv(buf, index=False, lineterminator="\n")
    return buf.getvalue().encode("utf-8")


def write_marketplace(
    market: Marketplace, out_dir: str | Path, *, compress: bool = True
) -> dict[str, Path]:
    """Write the marketplace in the ingest format (DESIGN.md §3) under ``out_dir`` (created).

    Files: ``advertisers.csv.gz``, ``auctions.csv.gz``, ``delivery.csv.gz`` and ``truth.csv``
    (uncompressed: it is for people; the pipeline never reads it). ``compress=False`` writes the
    three ingest files as plain ``.csv`` (the tiny hand-checkable sample). Byte-identical for the
    same marketplace: gzip with mtime 0 and no file name, exact price strings, stable row order.
    Also writes ``config.json`` with the generating configuration. Returns {table: path}.
    """
    if not isinstance(market, Marketplace):
        raise TypeError(f"market must be a Marketplace; got {type(market).__name__}.")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    frames = _frames_for_csv(market)
    contents: dict[str, tuple[Path, bytes]] = {}
    for table in ("advertisers", "auctions", "delivery"):
        data = _csv_bytes(frames[table])
        if compress:
            buffer = io.BytesIO()
            with gzip.GzipFile(
                fileobj=buffer, mode="wb", mtime=0, filename="", compresslevel=6
            ) as gz:
                gz.write(data)
            contents[table] = (out / f"{table}.csv.gz", buffer.getvalue())
        else:
            contents[table] = (out / f"{table}.csv", data)
    contents["truth"] = (out / "truth.csv", _csv_bytes(frames["truth"]))
    text = json.dumps(_config_record(market.config), indent=2, ensure_ascii=False) + "\n"
    contents["config"] = (out / "config.json", text.encode("utf-8"))
    _write_all_or_none({path: data for path, data in contents.values()})
    return {name: path for name, (path, _) in contents.items()}


def _write_all_or_none(files: dict[Path, bytes]) -> None:
    """Write every file under a temporary name beside it, then rename them all into place with
    stop signals held back: a stop or a full disk while writing leaves the folder as it was (no
    truncated file that a later ingest, or `make demo`, would take for data), not a mix of old
    and new tables. A symbolic link is written through (its target is replaced)."""
    from adseg.interrupts import signals_deferred
    from adseg.tempfiles import create_beside

    targets = {Path(os.path.realpath(path)): data for path, data in files.items()}
    partial: dict[Path, Path] = {}
    try:
        for path, data in targets.items():
            fd, partial[path] = create_beside(path)
            with os.fdopen(fd, "wb") as stream:
                stream.write(data)
        with signals_deferred():
            for path, temporary in partial.items():
                os.replace(temporary, path)
    finally:
        for temporary in partial.values():
            temporary.unlink(missing_ok=True)
