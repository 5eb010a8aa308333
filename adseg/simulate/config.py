"""The simulated marketplace's configuration: :class:`MarketplaceConfig` (validated on creation)
and the named generative families (:func:`family_config`). Pure: no arrays are drawn here."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, fields

import numpy as np

MAX_ADVERTISERS = 100_000  # ~24 M logged auctions at the default sample rates
MAX_DAYS = 366
FAULT_KINDS = ("unit_market", "unit_paid", "bug_market", "bot_burst")
PRICE_FAMILIES = ("lognormal", "gamma")


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
