"""The simulation of the marketplace: :func:`simulate_marketplace` and its steps.

Each step draws from its own child stream of ``numpy.random.SeedSequence(config.seed)`` (see
``_STREAMS``), in a fixed order inside the step, so the same configuration gives the same
marketplace. The steps: segments → membership → text → volume (supply, sample rate) → bids →
daily market levels → delivery (exact landscape per advertiser-day) → the logged auction sample
→ faults (logging faults, bot bursts) → the frames and the truth. The model is described in
docs/algorithms/simulator.md. Cost: O(rows) time and memory for the auction sample (≈ 45 bytes
per row kept, as compact integer columns; the row-wise steps work in chunks of ``_CHUNK_ROWS``
rows), plus O(Σ bid/tick) over advertiser-days for the exact landscape sums.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from adseg.simulate.config import FAULT_KINDS, MarketplaceConfig
from adseg.simulate.landscape import (
    _gamma_parts,
    _grid_landscape,
    _mixture_quantile,
    true_landscape,
)
from adseg.simulate.text import _QUALIFIERS, _VERTICALS, _text

_FAULT_VIEW = {
    "unit_market": "win_rate",
    "unit_paid": "ecpm",
    "bug_market": "win_rate",
    "bot_burst": "both",
}
_STREAMS = (
    "segments",
    "membership",
    "text",
    "volume",
    "bids",
    "market",
    "auctions",
    "faults",
    "delivery",
)
"""The random streams, one per step, in the order they are spawned from the seed."""

_CHUNK_ROWS = 1_000_000
"""Rows per step of the row-wise work (draws, faults, formatting): bounds its temporaries."""


def _chunks(m: int, size: int | None = None):
    """``slice``s of [0, m) of at most ``size`` (default ``_CHUNK_ROWS``) rows, in order."""
    size = _CHUNK_ROWS if size is None else int(size)
    return (slice(s, min(s + size, m)) for s in range(0, m, size))


@dataclass
class Marketplace:
    """A simulated marketplace: the ingest frames and the hidden truth.

    ``advertisers`` (n rows), ``auctions`` (one row per logged auction, sorted by advertiser then
    time; price columns float64 in eCPM, ``paid_ecpm`` NaN when lost), ``delivery`` (n × days
    rows), ``truth`` (n rows; see ``sample_campaigns/README.md`` for the columns).

    The auction sample is held as compact integer columns (≈ 40 bytes per row); ``auctions``
    builds its frame on first use (≈ 500 bytes per row, kept) and :meth:`auction_chunks` yields
    it in pieces without ever holding it whole (what the writer uses at scale).
    """

    config: MarketplaceConfig
    advertisers: pd.DataFrame
    delivery: pd.DataFrame
    truth: pd.DataFrame
    _rows: _Rows = field(repr=False)
    _auctions: pd.DataFrame | None = field(default=None, repr=False)

    @property
    def n_auctions(self) -> int:
        """The number of logged auction rows (without building the frame)."""
        return int(self._rows.adv.size)

    @property
    def auctions(self) -> pd.DataFrame:
        """Every logged auction as one frame (built on first use, then kept)."""
        if self._auctions is None:
            ids = self.advertisers["advertiser_id"].to_numpy(dtype=object)
            self._auctions = _auctions_frame(self.config, self._rows, ids)
        return self._auctions

    def auction_chunks(self, rows: int | None = None) -> Iterator[pd.DataFrame]:
        """The ``auctions`` frame in consecutive pieces of at most ``rows`` rows (index from 0 in
        each; default ``_CHUNK_ROWS``); their concatenation equals ``auctions``. Memory: one
        piece at a time."""
        ids = self.advertisers["advertiser_id"].to_numpy(dtype=object)
        for part in _chunks(self.n_auctions, rows):
            yield _auctions_frame(self.config, self._rows, ids, part)


def _streams(seed: int, names: tuple[str, ...]) -> dict[str, np.random.Generator]:
    """One independent generator per stage, so that changing one stage's draws (say the text)
    leaves every other stage's numbers as they were."""
    children = np.random.SeedSequence(int(seed)).spawn(len(names))
    return {name: np.random.default_rng(c) for name, c in zip(names, children, strict=True)}


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


@dataclass
class _Population:
    """Per advertiser, (n,) arrays: its segment, log price scale, auction rule (first price with
    shading ``theta``, else second price), the market-price mixture (the ``mu``s include the
    price scale) and the exchange reserve in ticks."""

    segment: np.ndarray
    log_scale: np.ndarray
    first_price: np.ndarray
    theta: np.ndarray
    mu1: np.ndarray
    s1: np.ndarray
    mu2: np.ndarray
    s2: np.ndarray
    w2: np.ndarray
    reserve_ticks: np.ndarray


@dataclass
class _Volume:
    """Per advertiser: ``supply`` (n, days) daily bid requests, ``rate`` (n,) the share of its
    auctions logged, ``target`` (n,) its expected number of logged training auctions."""

    supply: np.ndarray
    rate: np.ndarray
    target: np.ndarray


@dataclass
class _Bids:
    """Per advertiser: ``level`` (n,) bid level in eCPM, ``eval_shift`` (n,) log shift of the
    evaluation window's bids, ``sigma`` (n,) day-to-day log-sd, ``ticks`` (n, days) the bids in
    integer ticks."""

    level: np.ndarray
    eval_shift: np.ndarray
    sigma: np.ndarray
    ticks: np.ndarray


@dataclass
class _Delivered:
    """Per advertiser-day, (n, days): the true win rate, mean paid eCPM given a win (0 where
    none), and the delivered impressions and spend (currency, 6 decimals)."""

    win: np.ndarray
    mean_paid: np.ndarray
    impressions: np.ndarray
    spend: np.ndarray


@dataclass
class _Rows:
    """The logged auction sample, one entry per row: advertiser index, day, second of the day,
    bid, logged market price and paid price in ticks (paid -1 when lost), won."""

    adv: np.ndarray
    day: np.ndarray
    second: np.ndarray
    bid: np.ndarray
    market: np.ndarray
    won: np.ndarray
    paid: np.ndarray


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
    Deterministic in ``config``. Cost (2-core VM, 100,000 advertisers, ≈ 23 M rows): see
    benchmarks/results/ingest_100k.md; memory ≈ 45 bytes per auction row plus one chunk's
    temporaries and an (m,) int64 sort order, the ``auctions`` frame itself only when asked.
    """
    cfg = MarketplaceConfig() if config is None else config
    if not isinstance(cfg, MarketplaceConfig):
        raise TypeError(f"config must be a MarketplaceConfig; got {type(cfg).__name__}.")
    rng = _streams(cfg.seed, _STREAMS)
    seg = _segments(cfg, rng["segments"])
    pop = _membership(cfg, seg, rng["membership"])
    names, descriptions, mislead = _text(cfg, seg, pop.segment, rng["text"])
    volume = _volume(cfg, rng["volume"])
    bids = _bids(cfg, pop, rng["bids"])
    # the daily market level per segment, (n, days) per advertiser
    log_g = rng["market"].normal(0.0, cfg.market_day_sigma, (cfg.n_segments, int(cfg.days)))
    log_g_adv = log_g[pop.segment]
    delivered = _delivered(cfg, pop, bids, log_g_adv, volume.supply, rng["delivery"])
    rows, counts = _auction_rows(cfg, pop, bids, log_g_adv, volume, rng["auctions"])
    rows, fault_kind, path_share = _logging_faults(cfg, rows, rng["faults"])
    rows = _bot_bursts(cfg, rows, counts, bids, fault_kind, path_share, rng["faults"])
    rows = _sorted_rows(rows)

    adv_ids = _advertiser_ids(int(cfg.n_advertisers))
    advertisers = pd.DataFrame(
        {"advertiser_id": adv_ids, "name": names, "description": descriptions}
    )
    faults = (fault_kind, path_share)
    truth = _truth(cfg, adv_ids, seg, pop, mislead, volume, bids, delivered, rows, faults)
    delivery = _delivery_frame(cfg, adv_ids, volume, bids, delivered)
    return Marketplace(cfg, advertisers, delivery, truth, rows)


def _membership(cfg: MarketplaceConfig, seg: pd.DataFrame, r_m: np.random.Generator) -> _Population:
    """Each advertiser's segment (drawn by the segments' shares), price scale and auction rule."""
    n = int(cfg.n_advertisers)
    segment = r_m.choice(cfg.n_segments, size=n, p=seg["share"].to_numpy())
    log_scale = r_m.normal(0.0, cfg.advertiser_price_sigma, n)
    first_price = r_m.random(n) < cfg.first_price_share
    theta = np.where(first_price, r_m.uniform(0.1, 0.5, n), 0.0)
    return _Population(
        segment=segment,
        log_scale=log_scale,
        first_price=first_price,
        theta=theta,
        mu1=seg["mu1"].to_numpy()[segment] + log_scale,
        s1=seg["sigma1"].to_numpy()[segment],
        mu2=seg["mu2"].to_numpy()[segment] + log_scale,
        s2=seg["sigma2"].to_numpy()[segment],
        w2=seg["weight2"].to_numpy()[segment],
        reserve_ticks=seg["reserve_ticks"].to_numpy()[segment],
    )


def _volume(cfg: MarketplaceConfig, r_v: np.random.Generator) -> _Volume:
    """Supply (bid requests) per advertiser-day — log-normal level, weekend dip, trend, daily
    noise, Poisson counts — and the logged sample rate, whose expected training count is
    correlated (ρ = 0.5) with the advertiser's supply."""
    n, days, train = int(cfg.n_advertisers), int(cfg.days), int(cfg.train_days)
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
    return _Volume(supply=supply, rate=rate, target=target)


def _bids(cfg: MarketplaceConfig, pop: _Population, r_b: np.random.Generator) -> _Bids:
    """Bid levels at a target win rate, an evaluation-window shift for some advertisers, and
    daily log-normal bids on the tick grid, never under the reserve."""
    n, days, train = int(cfg.n_advertisers), int(cfg.days), int(cfg.train_days)
    tick = cfg.tick
    target_win = 0.05 + 0.9 * r_b.beta(2.0, 2.5, n)
    level = _mixture_quantile(
        target_win, pop.mu1, pop.s1, pop.mu2, pop.s2, pop.w2, cfg.price_family
    )
    level = np.maximum(level, pop.reserve_ticks * tick)
    changes = r_b.random(n) < cfg.eval_bid_change_share
    eval_shift = np.where(changes, r_b.normal(0.0, 0.2, n), 0.0)
    bid_sigma = r_b.uniform(0.03, 0.15, n)
    day_shift = np.where(np.arange(days)[None, :] >= train, eval_shift[:, None], 0.0)
    bid = level[:, None] * np.exp(day_shift + bid_sigma[:, None] * r_b.standard_normal((n, days)))
    # Bidding under the floor never wins; a DSP knows the floor, so bids start at the reserve.
    bid_ticks = np.maximum(np.round(bid / tick), np.maximum(pop.reserve_ticks, 1)[:, None])
    bid_ticks = bid_ticks.astype(np.int64)
    return _Bids(level=level, eval_shift=eval_shift, sigma=bid_sigma, ticks=bid_ticks)


def _delivered(
    cfg: MarketplaceConfig,
    pop: _Population,
    bids: _Bids,
    log_g_adv: np.ndarray,
    supply: np.ndarray,
    r_d: np.random.Generator,
) -> _Delivered:
    """Delivery from the full auctions: the exact landscape on the tick grid per advertiser-day,
    binomial impressions of the supply, and spend around impressions × mean paid eCPM."""
    n, days = int(cfg.n_advertisers), int(cfg.days)
    rep = np.repeat
    win, mean_paid, var_paid = _grid_landscape(
        rep(pop.mu1, days) + log_g_adv.ravel(),
        rep(pop.s1, days),
        rep(pop.mu2, days) + log_g_adv.ravel(),
        rep(pop.s2, days),
        rep(pop.w2, days),
        rep(pop.reserve_ticks, days),
        rep(pop.first_price, days),
        rep(pop.theta, days),
        bids.ticks.ravel(),
        cfg.tick,
        family=cfg.price_family,
    )
    win = np.clip(win.reshape(n, days), 0.0, 1.0)
    mean_paid = np.nan_to_num(mean_paid.reshape(n, days))
    sd_paid = np.sqrt(np.nan_to_num(var_paid.reshape(n, days)))
    impressions = r_d.binomial(supply, win)
    spend = (
        impressions * mean_paid + np.sqrt(impressions) * sd_paid * r_d.standard_normal((n, days))
    ) / 1000.0
    spend = np.round(np.maximum(spend, 0.0), 6)
    return _Delivered(win=win, mean_paid=mean_paid, impressions=impressions, spend=spend)


def _auction_rows(
    cfg: MarketplaceConfig,
    pop: _Population,
    bids: _Bids,
    log_g_adv: np.ndarray,
    volume: _Volume,
    r_a: np.random.Generator,
) -> tuple[_Rows, np.ndarray]:
    """The logged auction sample before faults: binomial counts per advertiser-day of the logged
    days, a second of the day, a market price from the mixture at the day's market level, and
    the auction's outcome. Returns the rows and the (n, logged days) counts.

    The draws are those of one whole-array draw each (seconds, then every row's uniform, then
    every row's normal or gamma variate), taken in chunks of ``_CHUNK_ROWS`` rows: a Generator's
    ``random``, ``standard_normal`` and ``standard_gamma`` give the same numbers drawn in pieces
    as at once, so the rows are those of the unchunked code. Cost: O(m) time; memory ≈ 40 bytes
    per row kept (compact integer columns) plus ≈ 100 bytes per row of one chunk."""
    n, days, train = int(cfg.n_advertisers), int(cfg.days), int(cfg.train_days)
    log_days = days if cfg.log_eval_days else train
    counts = r_a.binomial(volume.supply[:, :log_days], volume.rate[:, None])  # (n, log_days)
    adv = np.repeat(np.repeat(np.arange(n, dtype=np.int32), log_days), counts.ravel())
    day = np.repeat(np.tile(np.arange(log_days, dtype=np.int16), n), counts.ravel())
    m = adv.size
    second = r_a.integers(0, 86400, m).astype(np.int32)
    upper = np.empty(m, dtype=bool)
    for c in _chunks(m):
        upper[c] = r_a.random(c.stop - c.start) < pop.w2[adv[c]]
    bid = np.empty(m, dtype=np.int64)
    market = np.empty(m, dtype=np.int64)
    won = np.empty(m, dtype=bool)
    paid = np.empty(m, dtype=np.int64)
    floor_ticks = np.maximum(pop.reserve_ticks, 1)
    for c in _chunks(m):
        a, d, u = adv[c], day[c], upper[c]
        if cfg.price_family == "gamma":
            shape, scale = _gamma_parts(
                np.where(u, pop.mu2[a], pop.mu1[a]) + log_g_adv[a, d],
                np.where(u, pop.s2[a], pop.s1[a]),
            )
            x = r_a.standard_gamma(shape) * scale
        else:
            z = r_a.standard_normal(a.size)
            log_x = np.where(u, pop.mu2[a] + pop.s2[a] * z, pop.mu1[a] + pop.s1[a] * z)
            x = np.exp(log_x + log_g_adv[a, d])
        mp = np.maximum(np.ceil(x / cfg.tick), floor_ticks[a]).astype(np.int64)
        b = bids.ticks[a, d]
        w = b >= mp
        shade = np.floor(pop.theta[a] * (b - mp) + 0.5).astype(np.int64)
        p = np.where(pop.first_price[a], mp + shade, mp)
        bid[c], market[c], won[c], paid[c] = b, mp, w, np.where(w, p, -1)
    del upper
    return _Rows(
        adv=adv, day=day, second=second, bid=bid, market=market, won=won, paid=paid
    ), counts


def _logging_faults(
    cfg: MarketplaceConfig, rows: _Rows, r_f: np.random.Generator
) -> tuple[_Rows, np.ndarray, np.ndarray]:
    """One logging fault for ``fault_share`` of the advertisers, the kinds of FAULT_KINDS in
    turn, on a share of their rows: market or paid prices logged ×1000 (a unit error), or the
    bid logged as the market price of lost auctions. Returns the rows as logged (``rows``'
    market and paid arrays are changed in place), each advertiser's fault kind ("" for none)
    and the share of its rows affected. The rows' uniforms are drawn in chunks (the same
    numbers as one draw). Cost: O(m) time, ≈ 20 bytes per row of one chunk."""
    n = int(cfg.n_advertisers)
    n_faulty = int(round(cfg.fault_share * n))
    faulty = np.sort(r_f.choice(n, size=n_faulty, replace=False)) if n_faulty else np.array([], int)
    fault_kind = np.full(n, "", dtype=object)
    fault_kind[faulty] = np.asarray(FAULT_KINDS, dtype=object)[np.arange(n_faulty) % 4]
    path_share = np.where(fault_kind != "", r_f.uniform(0.3, 0.8, n), 0.0)
    # each advertiser's fault as a small integer: 0 none, 1 + its index in FAULT_KINDS
    kind_code = np.zeros(n, dtype=np.int8)
    kind_code[faulty] = 1 + np.arange(n_faulty) % 4
    unit_market, unit_paid, bug_market = (1 + FAULT_KINDS.index(k) for k in _ROW_FAULTS)
    for c in _chunks(rows.adv.size):
        a, won = rows.adv[c], rows.won[c]
        on_path = r_f.random(a.size) < path_share[a]
        kind_row = kind_code[a]
        mp = rows.market[c]
        mp_logged = np.where((kind_row == unit_market) & on_path, mp * 1000, mp)
        paid = rows.paid[c]
        rows.paid[c] = np.where((kind_row == unit_paid) & on_path & won, paid * 1000, paid)
        rows.market[c] = np.where((kind_row == bug_market) & ~won, rows.bid[c], mp_logged)
    path_share = np.where(fault_kind == "bug_market", 1.0, path_share)
    return rows, fault_kind, path_share


_ROW_FAULTS = ("unit_market", "unit_paid", "bug_market")


def _bot_bursts(
    cfg: MarketplaceConfig,
    rows: _Rows,
    counts: np.ndarray,
    bids: _Bids,
    fault_kind: np.ndarray,
    path_share: np.ndarray,
    r_f: np.random.Generator,
) -> _Rows:
    """Bot bursts: for each "bot_burst" advertiser, extra rows in one hour of one training day
    with very cheap clearing prices (at least 20, twice its training rows). Appends them to
    ``rows`` (column by column: one column's copy at a time) and sets the advertiser's
    ``path_share`` (in place) to their share of its rows."""
    train, tick = int(cfg.train_days), cfg.tick
    bots = np.flatnonzero(fault_kind == "bot_burst")
    train_counts = counts[:, :train].sum(axis=1)
    n_bot = np.maximum(20, 2 * train_counts[bots])
    bot_day = r_f.integers(0, train, bots.size)
    bot_hour = r_f.integers(0, 24, bots.size)
    b_adv = np.repeat(bots, n_bot)
    b_day = np.repeat(bot_day, n_bot)
    b_sec = np.repeat(bot_hour * 3600, n_bot) + r_f.integers(0, 3600, b_adv.size)
    b_bid = bids.ticks[b_adv, b_day]
    b_mp = np.maximum(1, np.floor(r_f.uniform(0.0, 0.3, b_adv.size) * bids.level[b_adv] / tick))
    b_mp = b_mp.astype(np.int64)
    b_won = b_bid >= b_mp
    path_share[bots] = n_bot / np.maximum(n_bot + train_counts[bots], 1)
    extra = {
        "adv": b_adv,
        "day": b_day,
        "second": b_sec,
        "bid": b_bid,
        "market": b_mp,
        "won": b_won,
        "paid": np.where(b_won, b_mp, -1),
    }
    return _Rows(**{name: _appended(rows, name, extra[name]) for name in extra})


def _appended(rows: _Rows, name: str, extra: np.ndarray) -> np.ndarray:
    """``rows.<name>`` with ``extra`` appended, in its own dtype; the old column is let go."""
    column = getattr(rows, name)
    out = np.concatenate([column, extra.astype(column.dtype)])
    setattr(rows, name, None)
    return out


def _sorted_rows(rows: _Rows) -> _Rows:
    """The rows sorted by advertiser, day and second (a stable sort), column by column (one
    column's copy at a time beside the (m,) int64 order). O(m log m)."""
    order = np.lexsort((rows.second, rows.day, rows.adv))
    names = ("adv", "day", "second", "bid", "market", "won", "paid")
    out = {}
    for name in names:
        out[name] = getattr(rows, name)[order]
        setattr(rows, name, None)
    return _Rows(**out)


def _auctions_frame(
    cfg: MarketplaceConfig, rows: _Rows, adv_ids: np.ndarray, part: slice | None = None
) -> pd.DataFrame:
    """The ``auctions`` frame of sorted rows (of ``part`` of them: the same rows as that slice
    of the whole frame): ids numbered per advertiser, UTC timestamps, prices in eCPM
    (``paid_ecpm`` NaN when lost). Cost: ≈ 500 bytes per row of the part."""
    tick = cfg.tick
    part = slice(0, rows.adv.size) if part is None else part
    adv = rows.adv[part].astype(np.int64)
    day = rows.day[part].astype(np.int64)
    seq = np.arange(part.start, part.start + adv.size) - np.searchsorted(rows.adv, adv, "left")
    start = pd.Timestamp(cfg.start_date, tz="UTC")
    ts = start + pd.to_timedelta(day * 86400 + rows.second[part], unit="s")
    paid = rows.paid[part]
    return pd.DataFrame(
        {
            "auction_id": _auction_ids(adv, seq, int(cfg.n_advertisers), _seq_width(rows)),
            "advertiser_id": adv_ids[adv],
            "ts": ts,
            "bid_ecpm": rows.bid[part] * tick,
            "market_price_ecpm": rows.market[part] * tick,
            "won": rows.won[part],
            "paid_ecpm": np.where(paid >= 0, paid * tick, np.nan),
        }
    )


def _delivery_frame(
    cfg: MarketplaceConfig,
    adv_ids: np.ndarray,
    volume: _Volume,
    bids: _Bids,
    delivered: _Delivered,
) -> pd.DataFrame:
    """The ``delivery`` frame: one row per advertiser-day, advertisers in order, days inside."""
    days, n = int(cfg.days), int(cfg.n_advertisers)
    dates = pd.date_range(cfg.start_date, periods=days, freq="D").strftime("%Y-%m-%d")
    return pd.DataFrame(
        {
            "advertiser_id": np.repeat(adv_ids, days),
            "date": np.tile(np.asarray(dates, dtype=object), n),
            "bid_requests": volume.supply.ravel(),
            "bid_ecpm": (bids.ticks * cfg.tick).ravel(),
            "impressions": delivered.impressions.ravel().astype(np.int64),
            "spend": delivered.spend.ravel(),
        }
    )


def _truth_base(cfg: MarketplaceConfig, pop: _Population) -> pd.DataFrame:
    """The truth's price-law columns (what :func:`true_landscape` reads). The default family's
    truth keeps its columns (and its files their bytes); another family is named in a
    price_family column."""
    n = int(cfg.n_advertisers)
    family_column = (
        {}
        if cfg.price_family == "lognormal"
        else {"price_family": np.full(n, cfg.price_family, dtype=object)}
    )
    return pd.DataFrame(
        {
            "mu1": pop.mu1,
            "sigma1": pop.s1,
            "mu2": pop.mu2,
            "sigma2": pop.s2,
            "weight2": pop.w2,
            **family_column,
            "reserve_ecpm": pop.reserve_ticks * cfg.tick,
            "auction_rule": np.where(pop.first_price, "first_price", "second_price"),
            "shading": pop.theta,
        }
    )


def _truth(
    cfg: MarketplaceConfig,
    adv_ids: np.ndarray,
    seg: pd.DataFrame,
    pop: _Population,
    mislead: np.ndarray,
    volume: _Volume,
    bids: _Bids,
    delivered: _Delivered,
    rows: _Rows,
    faults: tuple[np.ndarray, np.ndarray],
) -> pd.DataFrame:
    """The hidden truth, one row per advertiser (columns: sample_campaigns/README.md);
    ``faults`` is each advertiser's fault kind and share of rows affected."""
    n, days, train, tick = int(cfg.n_advertisers), int(cfg.days), int(cfg.train_days), cfg.tick
    ev = slice(train, days)
    mean_eval_bid = bids.ticks[:, ev].mean(axis=1) * tick
    base = _truth_base(cfg, pop)
    wr_mean_bid, ecpm_mean_bid = true_landscape(
        base, mean_eval_bid, price_decimals=cfg.price_decimals
    )
    wr_base_days, ecpm_base_days = true_landscape(
        base, bids.ticks[:, ev] * tick, price_decimals=cfg.price_decimals
    )
    sup_ev = volume.supply[:, ev]
    win, mean_paid = delivered.win[:, ev], delivered.mean_paid[:, ev]
    segment = pop.segment
    fault_kind, path_share = faults
    return pd.DataFrame(
        {
            "advertiser_id": adv_ids,
            "segment": segment,
            "vertical": seg["vertical"].to_numpy()[segment],
            "qualifier": seg["qualifier"].to_numpy()[segment],
            "misleading_vertical": np.asarray(list(_VERTICALS), dtype=object)[mislead],
            "price_scale": np.exp(pop.log_scale),
            **base,
            "bid_level_ecpm": bids.level,
            "bid_day_sigma": bids.sigma,
            "eval_bid_shift": np.exp(bids.eval_shift),
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
            "eval_expected_impressions": (sup_ev * win).sum(axis=1),
            "eval_expected_spend": (sup_ev * win * mean_paid).sum(axis=1) / 1000.0,
            "eval_impressions": delivered.impressions[:, ev].sum(axis=1),
            "eval_spend": delivered.spend[:, ev].sum(axis=1),
            "median_daily_supply": np.median(volume.supply, axis=1),
            "sample_rate": volume.rate,
            "expected_train_samples": volume.target,
            "train_samples_logged": np.bincount(rows.adv[rows.day < train], minlength=n),
            "fault_kind": fault_kind,
            "fault_view": np.asarray([_FAULT_VIEW.get(k, "") for k in fault_kind], dtype=object),
            "fault_share": path_share,
        }
    )


def _advertiser_ids(n: int) -> np.ndarray:
    width = max(5, len(str(n - 1)))
    return np.asarray(("adv-" + pd.Series(np.arange(n)).astype(str).str.zfill(width)), dtype=object)


def _seq_width(rows: _Rows) -> int:
    """The digits of an auction id's per-advertiser number: those of the largest, at least 6."""
    largest = int(np.bincount(rows.adv).max()) - 1 if rows.adv.size else 0
    return max(6, len(str(largest)))


def _auction_ids(adv: np.ndarray, seq: np.ndarray, n: int, seq_width: int) -> np.ndarray:
    width = max(5, len(str(n - 1)))
    a = pd.Series(adv).astype(str).str.zfill(width)
    s = pd.Series(seq).astype(str).str.zfill(seq_width)
    return np.asarray("auc-" + a + "-" + s, dtype=object)
