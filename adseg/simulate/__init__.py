"""The synthetic real-time-bidding marketplace behind ``sample_campaigns/``.

``simulate_marketplace(config)`` returns a :class:`Marketplace` of frames in the ingest format of
DESIGN.md §3 — ``advertisers``, ``auctions`` (the logged auction sample), ``delivery`` (daily
totals) — plus ``truth``, the generating parameters, which the pipeline never reads.
``write_marketplace(market, out_dir)`` writes them as files, byte-identically for the same
configuration.

Modules: ``config`` (:class:`MarketplaceConfig`, the named families), ``landscape`` (the price
mixture and :func:`true_landscape`), ``text`` (names and descriptions), ``market``
(:func:`simulate_marketplace` and its steps) — numerical core, numpy/pandas/scipy only — and
``write`` (:func:`write_marketplace`, the io part). The model is described in
docs/algorithms/simulator.md and argued in ``sample_campaigns/README.md``.
"""

from adseg.simulate.config import (
    FAMILIES,
    FAULT_KINDS,
    PRICE_FAMILIES,
    MarketplaceConfig,
    family_config,
)
from adseg.simulate.landscape import true_landscape
from adseg.simulate.market import Marketplace, simulate_marketplace
from adseg.simulate.write import write_marketplace

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
