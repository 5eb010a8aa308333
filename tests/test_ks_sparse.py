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
        graphs = list(ks_sparse_graphs(samples, alphas, block_mb=0.5))
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
        graphs = list(ks_sparse_graphs(samples, (0.01, 0.3), block_mb=block_mb))
        for alpha, graph in zip((0.01, 0.3), graphs, strict=True):
            np.testing.assert_array_equal(graph.toarray(), ks_graph(dense, alpha))
    assert graphs[0][1].nnz == 1 and graphs[0][1, 1] == 1.0


def planted_partition(n, k, p_in, p_out, seed, n_isolated=0):
    rng = np.random.default_rng(seed)
    group = rng.integers(0, k, n)
    p = np.where(group[:, None] == group[None, :], p_in, p_out)
    a = np.triu((rng.random((n, n)) < p).astype(float), 1)
    a += a.T
    if n_isolated:
        a[-n_isolated:] = 0.0
        a[:, -n_isolated:] = 0.0
    np.fill_diagonal(a, 1.0)  # self-loops, as the KS graphs have: not edges for H
    return a, group


@pytest.mark.parametrize("dense_max", [10_000, 40])
def test_sparse_bethe_hessian_count_equals_the_dense_count(monkeypatch, marketplace, dense_max):
    """Planted partitions of known k (one component, or several with isolated nodes) and the KS
    graphs of the simulated marketplace: the count without a dense LDLᵀ (Lanczos on every
    component above ``dense_max`` nodes) is the dense LDLᵀ count, capped at k_max = 80."""
    import adseg.views.ncut as ncut

    monkeypatch.setattr(ncut, "DENSE_COMPONENT_MAX", dense_max)
    graphs = []
    for seed, (n, k, p_in, p_out) in enumerate(
        [(300, 1, 0.1, 0.1), (400, 3, 0.3, 0.02), (600, 8, 0.25, 0.01), (900, 12, 0.2, 0.005)]
    ):
        a, group = planted_partition(n, k, p_in, p_out, seed, n_isolated=seed)
        assert ncut._bethe_hessian_count(a.copy()) == k  # the planted k is found
        graphs.append(a)
    blocks = sp.block_diag([sp.csr_matrix(graphs[1]), sp.csr_matrix(graphs[2])]).toarray()
    graphs.append(blocks)  # two components: 3 + 8 communities
    win, cost, _ = marketplace
    for samples in (win[:1200], cost[:1200]):
        graphs += [g.toarray() for g in ks_sparse_graphs(samples, ViewConfig().alphas)]
    counts = []
    for a in graphs:
        dense = ncut._bethe_hessian_count(a.copy())
        assert ncut._bethe_hessian_count_sparse(sp.csr_matrix(a), cap=80) == min(dense, 80)
        counts.append(dense)
    assert counts[4] == 11 and max(counts[5:]) > 10  # the KS graphs have many communities
    assert ncut._bethe_hessian_count_sparse(sp.eye(50, format="csr"), cap=80) == 50
    assert ncut._bethe_hessian_count_sparse(sp.csr_matrix(blocks), cap=5) == 5


@pytest.mark.parametrize("kwargs", [{}, {"n_clusters": 5}, {"k_selection": "eigengap"}])
def test_normalized_cut_on_a_sparse_graph_finds_what_the_dense_cut_finds(monkeypatch, kwargs):
    """With SPARSE_MIN_N lowered, a CSR graph is cut without densifying the graph (the sparse
    path): same cluster count and the same partition as the dense cut, isolated nodes and
    separate components included; a CSR graph below SPARSE_MIN_N takes the dense path."""
    import adseg.views.ncut as ncut

    a, group = planted_partition(2300, 6, 0.3, 0.01, seed=3, n_isolated=5)
    a[:40, 40:] = a[40:, :40] = 0.0  # a separate component of 40 nodes
    dense = ncut.NormalizedCutClustering(random_state=0, **kwargs).fit(a)
    below = ncut.NormalizedCutClustering(random_state=0, **kwargs).fit(sp.csr_matrix(a))
    assert not dense.sparse_path_ and not below.sparse_path_
    np.testing.assert_array_equal(below.labels_, dense.labels_)
    monkeypatch.setattr(ncut, "SPARSE_MIN_N", 1000)
    fit = ncut.NormalizedCutClustering(random_state=0, **kwargs).fit(sp.csr_matrix(a))
    assert fit.sparse_path_
    assert fit.n_clusters_ == dense.n_clusters_
    assert fit.n_isolated_ == dense.n_isolated_ == 5
    assert fit.n_components_ == dense.n_components_ >= 7
    assert fit.bethe_hessian_count_ == dense.bethe_hessian_count_
    np.testing.assert_allclose(fit.eigenvalues_, dense.eigenvalues_, rtol=1e-8, atol=1e-10)
    from adseg.metrics import ari

    assert ari(fit.labels_, dense.labels_) == 1.0
    assert fit.modularity_ == pytest.approx(dense.modularity_, abs=1e-12)
    with pytest.raises(ValueError, match="symmetric"):
        ncut.NormalizedCutClustering().fit(sp.triu(sp.csr_matrix(a), format="csr"))


def test_ks_view_sparse_path_matches_the_dense_path(monkeypatch, marketplace):
    """ks_view from SPARSE_MIN_N advertisers on builds CSR graphs and cuts them sparse: the same
    edges and clusters as the dense path on the same samples; the path is recorded per column."""
    import adseg.views.ncut as ncut
    from adseg.metrics import ari
    from adseg.views import ks_view

    win = marketplace[0][:700]
    config = ViewConfig(n_init=2)
    dense = ks_view(win, "win_rate", config, random_state=0)
    monkeypatch.setattr(ncut, "SPARSE_MIN_N", 500)
    sparse = ks_view(win, "win_rate", config, random_state=0)
    assert list(dense.columns["graph"]) == ["dense"] * 3
    assert list(sparse.columns["graph"]) == ["sparse"] * 3
    for name in ("n_edges", "n_clusters", "n_components", "n_isolated"):
        assert list(sparse.columns[name]) == list(dense.columns[name]), name
    for c in range(3):
        assert ari(sparse.labels[:, c], dense.labels[:, c]) > 0.99
    with pytest.warns(RuntimeWarning, match="no distance matrix"):
        kept = ks_view(win, "win_rate", ViewConfig(n_init=2, keep_distances=True), 0)
    assert kept.distances == {}


def _pair_set(pairs):
    i, j, _ = pairs
    return set(zip(i.tolist(), j.tolist(), strict=True))


def test_sampled_pairs_are_the_threshold_pairs_on_a_random_design():
    """ks_sampled_pairs: every pair it returns is a pair of the exact threshold graph with the
    exact distance (bit for bit), each pair once with i < j in (i, j) order; with n ≤ partners
    + 1 it is ks_distance_pairs itself; each advertiser meets about ``partners`` others; the
    design is seeded."""
    from adseg.landscape import ks_distance_pairs
    from adseg.views.ks import ks_sampled_pairs

    rng = np.random.default_rng(3)
    samples = [
        np.round(rng.lognormal(0.2 * (k % 4), 1.0, rng.integers(5, 40)), 1) for k in range(600)
    ]
    limit = 1.63  # C_α at α = 0.01: most pairs of the same level are linked
    exact = ks_distance_pairs(samples, limit)
    full = ks_sampled_pairs(samples, limit, partners=599, random_state=0)
    for a, b in zip(full, exact, strict=True):
        np.testing.assert_array_equal(a, b)
    dist = ks_distance_matrix(samples)
    sampled = ks_sampled_pairs(samples, limit, partners=100, random_state=0)
    i, j, d = sampled
    assert (i < j).all() and np.all(np.diff(i.astype(np.int64) * 600 + j) > 0)
    np.testing.assert_array_equal(d, dist[i, j])
    assert (d <= limit).all() and _pair_set(sampled) <= _pair_set(exact)
    # 50 draws each: about 100 partners; the linked share of the compared pairs is the exact
    # graph's share (a uniform design: which pairs are compared does not depend on prices)
    compared = 600 * (1 - (1 - 1 / 599) ** 100) * 599 / 2
    share, exact_share = i.size / compared, exact[0].size / (600 * 599 / 2)
    assert abs(share - exact_share) < 0.05
    again = ks_sampled_pairs(samples, limit, partners=100, random_state=0)
    other = ks_sampled_pairs(samples, limit, partners=100, random_state=1)
    assert _pair_set(again) == _pair_set(sampled) != _pair_set(other)


def test_sampled_pairs_cover_every_pair_evenly():
    """Over many seeds, each pair is compared with about the same probability (the design is
    uniform): with no threshold (every compared pair kept), pair counts over 200 designs of 60
    items with 10 partners match partners / (n − 1) per pair within sampling noise."""
    from adseg.views.ks import ks_sampled_pairs

    samples = [np.arange(3.0) + k for k in range(60)]
    counts = np.zeros((60, 60))
    for seed in range(200):
        i, j, _ = ks_sampled_pairs(samples, np.inf, partners=10, random_state=seed)
        counts[i, j] += 1
    upper = counts[np.triu_indices(60, 1)] / 200
    # 5 draws from each end, each hitting a given other with probability 1/59
    expected = 1 - (1 - 1 / 59) ** 10
    assert abs(upper.mean() - expected) < 0.01
    assert upper.std() < 0.05  # binomial(200, 0.16) / 200: std 0.026


def test_rare_samples_draw_more_partners_until_linked_or_compared_with_all():
    """The refill: a sample linked to fewer than ``min_degree`` of its partners at
    ``degree_limit`` is compared with refill_factor × more; with that many at least n − 1 its
    row is the exact threshold graph's row. Pairs stay exact, unique and in (i, j) order;
    without min_degree the design is the one drawn before the refill existed."""
    from adseg.landscape import ks_distance_pairs
    from adseg.views.ks import ks_sampled_pairs

    rng = np.random.default_rng(7)
    # 580 samples from 4 price levels and 20 from a level only 20 share: rare at 20 partners
    levels = np.r_[np.arange(580) % 4, np.full(20, 9)]
    samples = [np.round(rng.lognormal(0.3 * lv, 0.4, 30), 2) for lv in levels]
    limit = 1.36  # C_α at α = 0.05
    dist = ks_distance_matrix(samples)
    exact = _pair_set(ks_distance_pairs(samples, limit))
    plain = ks_sampled_pairs(samples, limit, partners=20, random_state=0)
    zero = ks_sampled_pairs(samples, limit, partners=20, min_degree=0, random_state=0)
    assert _pair_set(zero) == _pair_set(plain)
    refilled = ks_sampled_pairs(
        samples, limit, partners=20, min_degree=5, refill_factor=60, random_state=0
    )
    i, j, d = refilled
    assert (i < j).all() and np.all(np.diff(i.astype(np.int64) * 600 + j) > 0)
    np.testing.assert_array_equal(d, dist[i, j])
    assert _pair_set(plain) <= _pair_set(refilled) <= exact

    def degrees(pairs):
        a, b, _ = pairs
        return np.bincount(np.r_[a, b], minlength=600)

    rare = degrees(plain) < 5
    assert rare[580:].mean() > 0.5  # the rare level is mostly under-linked by the design
    exact_degree = (dist <= limit).sum(axis=1) - 1
    # 60 × 10 draws ≥ n − 1: each refilled row is the exact graph's
    np.testing.assert_array_equal(degrees(refilled)[rare], exact_degree[rare])
    assert (degrees(refilled)[580:] >= np.minimum(5, exact_degree[580:])).all()
    with pytest.raises(ValueError, match="min_degree"):
        ks_sampled_pairs(samples, limit, partners=20, min_degree=-1)


def test_ks_view_samples_pairs_above_ks_partners_and_records_it(monkeypatch):
    """A KS view of more advertisers than ks_partners + 1 is built on sampled graphs (the
    columns say "sampled"); with ks_partners=None or below the size it is the exact view, the
    same labels as before the option existed (dense path)."""
    import adseg.views.ks as ks
    from adseg.views.ks import ks_view

    default = ks_view([np.arange(6.0)] * 300, "win_rate", ViewConfig(ks_partners=10))
    assert set(default.columns["graph"]) == {"dense"}  # below SAMPLED_MIN_N: all pairs
    monkeypatch.setattr(ks, "SAMPLED_MIN_N", 2)
    rng = np.random.default_rng(5)
    samples = [rng.lognormal(0.8 * (k % 3), 0.3, 30) for k in range(300)]
    exact = ks_view(samples, "win_rate", ViewConfig(ks_partners=None), random_state=0)
    big = ks_view(samples, "win_rate", ViewConfig(ks_partners=299), random_state=0)
    sampled = ks_view(samples, "win_rate", ViewConfig(ks_partners=100), random_state=0)
    np.testing.assert_array_equal(exact.labels, big.labels)
    assert set(exact.columns["graph"]) == {"dense"} and set(sampled.columns["graph"]) == {"sampled"}
    assert (sampled.columns["n_edges"] < exact.columns["n_edges"]).all()
    from sklearn.metrics import adjusted_rand_score

    truth = np.arange(300) % 3
    for c in range(exact.labels.shape[1]):
        assert adjusted_rand_score(truth, exact.labels[:, c]) == 1.0
        assert adjusted_rand_score(truth, sampled.labels[:, c]) == 1.0


def test_nightly_option_ks_partners_reaches_the_views():
    """A run's ks_partners (None: all pairs) reaches the views' ViewConfig; the CLI refuses a
    negative --ks-partners before opening a database (exit 2, naming the option)."""
    from typer.testing import CliRunner

    from adseg.cli import app
    from adseg.pipeline import NightlyConfig, views_config

    result = CliRunner().invoke(app, ["nightly", "--ks-partners", "-1"])
    assert result.exit_code == 2 and "--ks-partners" in result.output

    assert views_config(NightlyConfig(ks_partners=None)).ks_partners is None
    assert views_config(NightlyConfig()).ks_partners == 1000
    assert views_config(NightlyConfig(ks_partners=250)).ks_partners == 250


def test_drawn_pair_keys_are_the_sorted_distinct_keys_of_the_draws():
    """The design's keys: each drawn pair once, i < j, sorted (as numpy.unique would give)."""
    from adseg.views.ks import _draw_pairs

    n, rows = 300, np.arange(0, 300, 7)
    for draws in (1, 5, 40, n - 1):
        key = _draw_pairs(rows, draws, n, np.random.RandomState(3))
        rng = np.random.RandomState(3)
        a = np.repeat(rows, n - 1 if draws >= n - 1 else draws)
        b = (
            np.tile(np.arange(n - 1), rows.size)
            if draws >= n - 1
            else rng.randint(0, n - 1, size=a.size).astype(np.int64)
        )
        b += b >= a
        np.testing.assert_array_equal(key, np.unique(np.minimum(a, b) * n + np.maximum(a, b)))
        assert np.all(key // n < key % n)


@pytest.mark.parametrize("block_values", [None, 40, 400, 4000, 10**9])
def test_ks_blocks_keep_the_pairs_of_one_comparison(block_values):
    """compare_in_blocks: the drawn pairs compared block by block (each on its two row ranges'
    samples alone) keep exactly the pairs one ks_pairs_within call on all samples keeps, on the
    same side of every limit ≥ settle_below; exact distances are the same bits."""
    from adseg.landscape import ks_critical_value, ks_pairs_within
    from adseg.views.ks import _draw_pairs
    from adseg.views.ks_blocks import compare_in_blocks, row_ranges

    rng = np.random.default_rng(5)
    n = 400
    samples = [rng.lognormal(0.3 * (k % 4), 0.5, rng.integers(0, 30)) for k in range(n)]
    samples[7] = np.full(12, 2.0)  # ties
    key = _draw_pairs(np.arange(n, dtype=np.int64), 40, n, np.random.RandomState(1))
    limits = [ks_critical_value(a) for a in (0.01, 0.05, 0.1)]
    ref = ks_pairs_within(samples, key // n, key % n, max(limits), settle_below=min(limits))
    i, j, dist = compare_in_blocks(
        samples, key, max(limits), min(limits), block_values=block_values
    )
    np.testing.assert_array_equal(i, ref[0])
    np.testing.assert_array_equal(j, ref[1])
    for limit in limits:
        np.testing.assert_array_equal(dist <= limit, ref[2] <= limit)
    exact = (dist > min(limits)) & (ref[2] > min(limits))
    np.testing.assert_array_equal(dist[exact], ref[2][exact])
    sizes = np.array([s.size for s in samples])
    starts = row_ranges(sizes, block_values)
    assert starts[0] == 0 and starts[-1] == n and (np.diff(starts) >= 1).all()
    if block_values is not None and sizes.sum() > block_values:
        assert starts.size > 3  # several ranges: the blocks were exercised
        half = np.add.reduceat(sizes, starts[:-1])
        assert (half <= block_values / 2 + sizes.max()).all()


def test_ks_view_in_blocks_has_the_labels_of_one_block(monkeypatch):
    """A sampled KS view with its pairs in many blocks (``ks_block_values``) and its cuts as
    parts of a runner has the labels and columns of the view compared in one block here."""
    import adseg.views.ks as ks_module
    from adseg.views import ks_view

    monkeypatch.setattr(ks_module, "SAMPLED_MIN_N", 2)
    rng = np.random.default_rng(3)
    samples = [rng.lognormal(0.4 * (k % 5), 0.3, 20) for k in range(300)]
    one = ks_view(samples, "win_rate", ViewConfig(ks_partners=60, ks_block_values=None), 4)
    ran = []

    def run_parts(parts):
        ran.extend(name for name, *_ in parts)
        return [function(*args) for _, function, args in parts]

    config = ViewConfig(ks_partners=60, ks_block_values=500)
    blocked = ks_view(samples, "win_rate", config, 4, run_parts=run_parts)
    np.testing.assert_array_equal(one.labels, blocked.labels)
    timeless = [c for c in one.columns if "seconds" not in c]
    pd.testing.assert_frame_equal(one.columns[timeless], blocked.columns[timeless])
    assert sum(name.startswith("KS block") for name in ran) > 3
    assert [name for name in ran if "alpha" in name] == [
        f"win_rate alpha={a:g}" for a in config.alphas
    ]
