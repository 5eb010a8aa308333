"""The sparse KS views: block-built threshold graphs, the sparse Bethe-Hessian count, and the
normalised cut on a sparse graph, each against its dense counterpart."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from adseg.landscape import ks_distance_matrix
from adseg.views import ViewConfig, ks_graph
from adseg.views.ks import ks_sparse_graphs


@pytest.fixture(autouse=True)
def _one_blas_thread():
    with threadpool_limits(limits=1):
        yield


def marketplace_samples(n_advertisers, seed=11, min_samples=5):
    """Training-window market prices and paid eCPMs of a simulated marketplace (adseg.simulate),
    advertisers with fewer than ``min_samples`` of a kind left out of that kind."""
    from adseg.simulate import MarketplaceConfig, simulate_marketplace

    market = simulate_marketplace(MarketplaceConfig(n_advertisers=n_advertisers, seed=seed))
    auctions = market.auctions
    ts = pd.to_datetime(auctions["ts"])
    end = ts.min().normalize() + pd.Timedelta(days=market.config.train_days)
    train = auctions[(ts < end).to_numpy()]
    groups = train.groupby("advertiser_id")
    win = [g["market_price_ecpm"].to_numpy(float) for _, g in groups]
    cost = [g["paid_ecpm"].dropna().to_numpy(float) for _, g in groups]
    keep = lambda s: [x for x in s if x.size >= min_samples]  # noqa: E731
    return keep(win), keep(cost), market


@pytest.fixture(scope="module")
def marketplace():
    return marketplace_samples(2000)


@pytest.mark.slow
def test_sparse_ks_graphs_equal_the_dense_thresholded_graphs(marketplace):
    """n = 2,000 simulated advertisers, both kinds of samples, every α of the default ViewConfig:
    the block-built CSR graph has the dense graph's pattern and values exactly (no pair with
    dist ≤ C_α missed, none added), with small row blocks so that many blocks meet."""
    win, cost, _ = marketplace
    alphas = ViewConfig().alphas
    for samples in (win, cost):
        assert len(samples) > 1000
        dense_distances = ks_distance_matrix(samples)
        graphs = ks_sparse_graphs(samples, alphas, block_mb=0.5)
        for alpha, graph in zip(alphas, graphs, strict=True):
            dense = ks_graph(dense_distances, alpha)
            assert sp.isspmatrix_csr(graph) and graph.shape == dense.shape
            assert graph.nnz == np.count_nonzero(dense)  # no explicit zeros
            np.testing.assert_array_equal(graph.toarray(), dense)
            assert (graph != graph.T).nnz == 0
        # a smaller α links more pairs, and the graphs are nested
        assert graphs[0].nnz > graphs[1].nnz > graphs[2].nnz
        assert (graphs[2] > graphs[0]).nnz == 0


def test_sparse_ks_graphs_empty_samples_and_block_sizes():
    """Empty samples are unlinked but keep their diagonal 1 (as ks_graph); the result does not
    depend on the block size, down to one row per block."""
    rng = np.random.default_rng(4)
    samples = [np.round(rng.lognormal(rng.normal(0, 0.3), 0.5, k), 2) for k in (30, 0, 5, 80)]
    samples += [np.round(rng.lognormal(0, 0.5, 40), 2) for _ in range(40)]
    dense = ks_distance_matrix(samples)
    for block_mb in (1e-6, 0.01, 64.0):
        graphs = ks_sparse_graphs(samples, (0.01, 0.3), block_mb=block_mb)
        for alpha, graph in zip((0.01, 0.3), graphs, strict=True):
            np.testing.assert_array_equal(graph.toarray(), ks_graph(dense, alpha))
    assert graphs[0][1].nnz == 1 and graphs[0][1, 1] == 1.0
