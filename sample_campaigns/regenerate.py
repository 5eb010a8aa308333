"""Regenerate the committed samples under sample_campaigns/ (small/ and tiny/).

    .venv/bin/python sample_campaigns/regenerate.py

Both are deterministic: running this again reproduces the committed files byte for byte (with
the same numpy/pandas/zlib versions; tests/test_simulate.py checks the determinism itself).
"""

from __future__ import annotations

from pathlib import Path

from adseg.simulate import MarketplaceConfig, simulate_marketplace, write_marketplace

HERE = Path(__file__).resolve().parent

SMALL = MarketplaceConfig(
    n_advertisers=250, n_segments=20, median_train_samples=40.0, seed=20260302
)
TINY = MarketplaceConfig(
    n_advertisers=4,
    n_segments=2,
    days=4,
    train_days=2,
    median_train_samples=6.0,
    sample_count_sigma=0.3,
    median_daily_supply=2000.0,
    supply_sigma=0.5,
    fault_share=0.0,
    seed=7,
)
# One description exercising CSV quoting: commas, double quotes, a newline and non-ASCII text.
TINY_DESCRIPTION = (
    'Crème Brûlée Café, Zürich: "the best" desserts, coffee & cakes —\n'
    "délivery in 30 min, 7 days a week; 甜品 too."
)


def main() -> None:
    write_marketplace(simulate_marketplace(SMALL), HERE / "small")
    tiny = simulate_marketplace(TINY)
    tiny.advertisers.loc[0, "name"] = "Crème Brûlée Café GmbH"
    tiny.advertisers.loc[0, "description"] = TINY_DESCRIPTION
    write_marketplace(tiny, HERE / "tiny", compress=False)


if __name__ == "__main__":
    main()
