"""The true price landscape of the simulated marketplace: the two-component market-price mixture
(log-normal or gamma), its c.d.f. and quantile, and the exact win rate and paid eCPM at a bid on
the exchange's tick grid (:func:`true_landscape`). Pure numpy/scipy; the cost of the exact sums
is O(Σ bid/tick) points, in chunks of ≤ 4 M points of ≈ 80 bytes."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.special import ndtr
from scipy.stats import gamma as gamma_dist

from adseg.simulate.config import PRICE_FAMILIES


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
