"""The reduced problems of rcc and l2 at scale (adseg.consensus.reduced, issue #40): l2's sparse
path is the dense one; rcc on micro-clusters is the full one when nothing is merged and close to
it when cells are merged; neither builds an n×n array; the run records the reduction."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from adseg.consensus import co_association
from adseg.consensus.l2 import L2CC
from adseg.consensus.rcc import RCC
from adseg.consensus.reduced import co_association_factor, micro_cell_problem
from adseg.fusion import fuse
from adseg.metrics import ari, clustering_accuracy


def _planted(n, k, m, p, seed, missing=0.0):
    """(labels (n, m), truth (n,)): k planted clusters; each column relabels the truth into
    k..2k−1 labels (a split of some clusters), then replaces a share p of the labels by random
    ones and, with ``missing``, marks that share of the labels -1."""
    rng = np.random.RandomState(seed)
    y = rng.randint(0, k, n)
    cols = []
    for _ in range(m):
        kv = rng.randint(k, 2 * k)
        col = rng.permutation(kv)[(y + k * rng.randint(0, 2, n)) % kv]
        flip = rng.rand(n) < p
        col[flip] = rng.randint(0, kv, flip.sum())
        col[rng.rand(n) < missing] = -1
        cols.append(col)
    return np.column_stack(cols), y


def _same_subspace(A, B):
    """The cosines of the principal angles between span(A) and span(B), both orthonormal."""
    return np.linalg.svd(A.T @ B, compute_uv=False)


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
def test_l2_sparse_path_is_the_dense_one(normalize, weighted):
    labels, _ = _planted(600, 4, 8, 0.3, 0)
    weights = np.linspace(0.5, 2.0, 8) if weighted else None
    params = {"normalize": normalize, "weights": weights, "random_state": 3}
    dense = L2CC(4, max_dense=None, **params).fit(labels)
    sparse = L2CC(4, max_dense=100, **params).fit(labels)
    assert not dense.sparse_ and sparse.sparse_
    np.testing.assert_allclose(sparse.eigenvalues_, dense.eigenvalues_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_same_subspace(dense.embedding_, sparse.embedding_), 1.0, atol=1e-9)
    np.testing.assert_allclose(sparse.embedding_, dense.embedding_, atol=1e-9)  # signs fixed too
    np.testing.assert_array_equal(sparse.labels_, dense.labels_)


def test_the_factor_is_the_co_association_and_keeps_the_diagonal_with_missing_labels():
    labels, _ = _planted(300, 3, 6, 0.2, 1)
    Z = co_association_factor(labels)
    np.testing.assert_allclose((Z @ Z.T).toarray(), co_association(labels), atol=1e-13)
    labels, _ = _planted(300, 3, 6, 0.2, 1, missing=0.2)
    F = (co_association_factor(labels) @ co_association_factor(labels).T).toarray()
    exact = co_association(labels)
    labelled = labels != -1
    same_columns = (labelled[:, None, :] == labelled[None, :, :]).all(axis=2)
    np.testing.assert_allclose(F[same_columns], exact[same_columns], atol=1e-13)
    np.testing.assert_allclose(np.diag(F), 1.0)
    assert np.all(F <= exact + 1e-13)  # √(c_i c_j) ≥ c_ij: never above M̃


def test_micro_cluster_matrix_is_the_pair_average_of_the_co_association():
    """M̄_AB = mean of M̃ over the item pairs of A × B (no missing labels), as derived in
    docs/algorithms/rcc.md#reduced-problem."""
    labels, _ = _planted(400, 4, 6, 0.3, 2)
    rows, cell, sizes = np.unique(labels, axis=0, return_inverse=True, return_counts=True)
    micro, counts, M = micro_cell_problem(rows, cell.ravel(), sizes, None, 40, 0)
    assert M.shape == (counts.size, counts.size) and counts.size <= 40
    assert counts.sum() == 400 and np.array_equal(np.bincount(micro), counts)
    P = np.zeros((400, counts.size))
    P[np.arange(400), micro] = 1.0
    averaged = P.T @ co_association(labels) @ P / np.outer(counts, counts)
    np.testing.assert_allclose(M, averaged, atol=1e-12)


def test_rcc_is_unchanged_when_the_cells_fit_under_max_cells():
    labels, _ = _planted(300, 3, 8, 0.3, 4)
    g = np.unique(labels, axis=0).shape[0]
    full = RCC(3, max_cells=None, random_state=0).fit(labels)
    at = RCC(3, max_cells=g, random_state=0).fit(labels)
    assert not at.reduced_ and at.n_cells_ == at.n_micro_clusters_ == g
    np.testing.assert_array_equal(at.labels_, full.labels_)
    np.testing.assert_array_equal(at.embedding_, full.embedding_)
    assert at.objective_ == full.objective_


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reduced_rcc_matches_the_full_one_on_planted_inputs(seed):
    """g ≈ 500 cells merged into 60 micro-clusters (12 per planted cluster on average): with a
    clear planted structure (a fifth of the labels random) the micro-clusters stay within one
    cluster and the consensus is the full one's but for a few noisy items whose micro-cluster sits
    on the other side. ARI ≥ 0.95 allows about 1% of the items moved (measured on seeds 0–4: ARI
    0.985–1.0); both fits recover the truth at ACC ≥ 0.98. On noisier inputs (a third of the
    labels random, where the full fit's own ACC is 0.93–0.98) the two differ more (ARI 0.83–0.91
    at 60 micro-clusters): docs/algorithms/rcc.md#reduced-problem."""
    labels, y = _planted(500, 5, 10, 0.2, seed)
    full = RCC(5, normalize=True, max_cells=None, random_state=seed).fit(labels)
    red = RCC(5, normalize=True, max_cells=60, random_state=seed).fit(labels)
    assert red.reduced_ and red.n_micro_clusters_ <= 60 < red.n_cells_
    assert ari(red.labels_, full.labels_) >= 0.95
    assert clustering_accuracy(y, red.labels_) >= 0.98
    assert clustering_accuracy(y, full.labels_) >= 0.98
    assert red.embedding_.shape == (500, 5)
    np.testing.assert_allclose(red.embedding_.T @ red.embedding_, np.eye(5), atol=1e-8)


def test_reduced_rcc_with_missing_labels_and_weights():
    labels, y = _planted(500, 4, 10, 0.3, 5, missing=0.15)
    red = RCC(4, max_cells=50, weights=np.linspace(1, 2, 10), random_state=0).fit(labels)
    assert red.reduced_ and clustering_accuracy(y, red.labels_) >= 0.95


def test_no_n_by_n_array_above_the_thresholds(monkeypatch):
    """By construction: above the thresholds neither fuser calls the dense co-association (it
    would fail here), and the traced peak stays far below one n×n float64 array (288 MB)."""
    import adseg.consensus.l2 as l2_module
    import adseg.consensus.rcc as rcc_module

    def refuse(*args, **kwargs):
        raise AssertionError("dense co-association built")

    monkeypatch.setattr(l2_module, "co_association", refuse)
    monkeypatch.setattr(rcc_module, "co_association", refuse)
    labels, y = _planted(6000, 4, 10, 0.3, 6)
    nxn = 6000**2 * 8
    tracemalloc.start()
    try:
        l2 = L2CC(4, random_state=0).fit(labels)
        l2_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        rcc = RCC(4, normalize=True, max_cells=200, random_state=0).fit(labels)
        rcc_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert l2.sparse_ and rcc.reduced_
    assert l2_peak < nxn / 20 and rcc_peak < nxn / 20
    assert clustering_accuracy(y, rcc.labels_) >= 0.95


def test_the_run_records_a_reduced_fit():
    labels, _ = _planted(300, 3, 6, 0.3, 7)
    options = {"rcc": {"max_cells": 50, "normalize": True}, "l2": {"max_dense": 100}}
    fusion = fuse(labels, ["rcc", "l2"], 3, 0, "rcc", options=options)
    (rcc_note,) = fusion.notes["rcc"]
    assert rcc_note.startswith("reduced: solved on ") and "(max_cells=50)" in rcc_note
    assert fusion.notes["l2"] == [
        "reduced: eigenvectors from the sparse co-association factor (300 items > max_dense=100)"
    ]
    below = fuse(labels, ["rcc", "l2"], 3, 0, "rcc", options={"rcc": {"normalize": True}})
    assert below.notes == {}


def test_max_cells_must_exceed_the_clusters():
    labels, _ = _planted(100, 3, 4, 0.2, 8)
    with pytest.raises(ValueError, match="max_cells"):
        RCC(3, max_cells=3).fit(labels)
    with pytest.raises(TypeError, match="max_dense"):
        L2CC(3, max_dense=2.5).fit(labels)


def test_auto_merges_once_and_keeps_what_each_form_would_give_alone(monkeypatch):
    """normalize="auto" fits two forms on the same micro-clusters: merged once, and the kept
    form's fit is the one that form gives alone."""
    import adseg.consensus.rcc as rcc_module

    calls = []
    merge = rcc_module.micro_cell_problem

    def counted(*args, **kwargs):
        calls.append(1)
        return merge(*args, **kwargs)

    monkeypatch.setattr(rcc_module, "micro_cell_problem", counted)
    labels, _ = _planted(400, 4, 8, 0.3, 9)
    auto = RCC(4, max_cells=50, random_state=1).fit(labels)
    assert len(calls) == 1 and auto.reduced_
    alone = RCC(4, normalize=auto.normalize_, max_cells=50, random_state=1).fit(labels)
    np.testing.assert_array_equal(auto.labels_, alone.labels_)
    np.testing.assert_array_equal(auto.embedding_, alone.embedding_)


def test_the_run_records_sccbgs_sparse_path(monkeypatch):
    """sccbg above its sparse threshold is fused and noted (a nightly at 100,000 advertisers once
    lost sccbg here: the note read l2's threshold from it)."""
    import adseg.consensus.sccbg as sccbg_module

    monkeypatch.setattr(sccbg_module, "SPARSE_WORK", 1)
    labels, _ = _planted(300, 3, 6, 0.3, 7)
    fusion = fuse(labels, ["sccbg"], 3, 0, "sccbg")
    assert fusion.errors == {} and fusion.segmentations["sccbg"].shape == (300,)
    (note,) = [n for n in fusion.notes["sccbg"] if n.startswith("sparse:")]
    assert "≥ SPARSE_WORK=1)" in note
