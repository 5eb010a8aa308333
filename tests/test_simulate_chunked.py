"""The simulator's chunked steps (draws, faults, auction pieces, streamed gzip writing) give the
same marketplace and the same file bytes whatever the chunk sizes."""

from __future__ import annotations

import gzip

import pandas as pd
import pytest

import adseg.simulate.market as market_module
import adseg.simulate.write as write_module
from adseg.simulate import family_config, simulate_marketplace, write_marketplace


def _files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("family", ["default", "gamma"])
def test_tiny_chunks_write_the_same_bytes(tmp_path, monkeypatch, family):
    config = family_config(
        family, n_advertisers=30, n_segments=4, fault_share=0.2, median_train_samples=10.0
    )
    write_marketplace(simulate_marketplace(config), tmp_path / "whole")
    monkeypatch.setattr(market_module, "_CHUNK_ROWS", 7)
    monkeypatch.setattr(write_module, "_CSV_CHUNK_ROWS", 13)
    market = simulate_marketplace(config)
    assert market.n_auctions > 13 * 5  # several pieces, the last one short
    write_marketplace(market, tmp_path / "chunked")
    write_marketplace(market, tmp_path / "plain", compress=False)
    assert _files(tmp_path / "chunked") == _files(tmp_path / "whole")
    # the plain CSV is the gzip's content
    plain = (tmp_path / "plain" / "auctions.csv").read_bytes()
    assert gzip.decompress((tmp_path / "whole" / "auctions.csv.gz").read_bytes()) == plain


def test_auction_chunks_concatenate_to_the_frame():
    market = simulate_marketplace(family_config(n_advertisers=40, n_segments=4))
    pieces = list(market.auction_chunks(50))
    assert all(len(p) <= 50 for p in pieces) and len(pieces) > 2
    pd.testing.assert_frame_equal(pd.concat(pieces, ignore_index=True), market.auctions)
    assert len(market.auctions) == market.n_auctions
