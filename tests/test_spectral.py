"""adseg.spectral: eigenpairs, symmetric parts and the discretisation of spectral embeddings."""

import numpy as np
import pytest
import scipy.sparse as sp

from adseg.consensus import co_association
from adseg.metrics import clustering_accuracy
from adseg.spectral import (
    LANCZOS_MIN_N,
    assign_labels,
    fix_signs,
    kmeans_plusplus_starts,
    normalize_by_degree,
    symmetric_part,
    top_eigenvectors,
    weighted_kmeans,
)


def test_assign_labels_methods_recover_blocks():
    emb = np.repeat(np.eye(3), 10, axis=0) + 0.01 * np.random.default_rng(1).normal(size=(30, 3))
    truth = np.repeat(np.arange(3), 10)
    for method in ("kmeans", "cluster_qr"):
        assert clustering_accuracy(truth, assign_labels(emb, 3, method=method, random_state=0)) == 1


def test_symmetric_part_tiled_equals_the_plain_formula():
    rng = np.random.default_rng(1)
    for n in (1, 7, 513, 1100):  # below and across the 128-wide tiles
        X = rng.standard_normal((n, n))
        expected = (X + X.T) * 0.5
        out = symmetric_part(X)
        np.testing.assert_array_equal(out, expected)  # same arithmetic, bit for bit
        np.testing.assert_array_equal(out, out.T)
        symmetric_part(X, out=X)  # in place
        np.testing.assert_array_equal(X, expected)


def test_lanczos_eigenvectors_are_the_same_every_run():
    """Above 2,000 items the Lanczos path runs; without v0 it must not use ARPACK's own random
    start (fused nightly segments changed between identical runs at 5,000 advertisers)."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 8, size=(2100, 6))
    matrix = co_association(labels)
    first = top_eigenvectors(matrix, 5)
    for _ in range(2):
        again = top_eigenvectors(matrix, 5)
        assert np.array_equal(first[0], again[0]) and np.array_equal(first[1], again[1])
    dense = np.linalg.eigvalsh(matrix)[::-1][:5]
    np.testing.assert_allclose(first[0], dense, rtol=1e-8)


@pytest.mark.parametrize("n", [300, 2100])
def test_top_eigenvectors_take_a_sparse_matrix(n):
    """A scipy sparse matrix gives the dense matrix's eigenpairs: densified for LAPACK below
    LANCZOS_MIN_N, multiplied as it is by Lanczos above (the views' sparse N)."""
    assert (n < LANCZOS_MIN_N) == (n == 300)
    rng = np.random.default_rng(1)
    matrix = co_association(rng.integers(0, 8, size=(n, 6)))
    values, vectors = top_eigenvectors(sp.csr_matrix(matrix), 5)
    expected_values, expected_vectors = top_eigenvectors(matrix, 5)
    np.testing.assert_allclose(values, expected_values, rtol=1e-10)
    # the same subspace (signs are fixed by the function, so the vectors themselves agree)
    np.testing.assert_allclose(vectors, expected_vectors, atol=1e-7)


def test_cluster_qr_rounding_leaves_no_gaps_in_the_labels():
    """4 distinct embedding rows, 5 clusters asked: cluster_qr leaves label 0 empty ([1, 2, 3, 4])
    and assign_labels closes the gap. (A fuser no longer gets here: it refuses K above the
    number of distinct label rows, see tests/test_consensus_base.py.)"""
    embedding = np.repeat(np.random.default_rng(0).normal(size=(4, 5)), 5, axis=0)
    found = np.unique(assign_labels(embedding, 5, method="cluster_qr"))
    np.testing.assert_array_equal(found, np.arange(4))


def test_rows_zero_but_for_round_off_land_in_one_cluster():
    """An eigensolver leaves 1e-34 where an item labelled nowhere has a zero row; normalised,
    that became an arbitrary unit vector, and l2 and lta scattered such items over clusters."""
    rng = np.random.default_rng(0)
    centres = np.eye(3)
    embedding = np.repeat(centres, 20, axis=0) + 0.01 * rng.standard_normal((60, 3))
    noise = rng.standard_normal((8, 3)) * 1e-34
    labels = assign_labels(np.vstack([embedding, noise]), 3, random_state=0)
    assert np.unique(labels[60:]).size == 1
    assert np.unique(labels[:60]).size == 3


def test_normalize_by_degree_scales_rows_and_columns_and_zeroes_isolated_ones():
    rng = np.random.default_rng(4)
    W = rng.random((6, 6))
    W[2] = W[:, 2] = 0.0
    degree = W.sum(axis=1)
    linked = np.ix_(degree > 0, degree > 0)
    expected = np.zeros_like(W)
    expected[linked] = W[linked] / np.sqrt(np.outer(degree[degree > 0], degree[degree > 0]))
    out = normalize_by_degree(W, degree)
    assert out is W  # in place
    np.testing.assert_allclose(out, expected, rtol=1e-15)


def test_fix_signs_makes_the_largest_entry_of_each_column_positive():
    vecs = np.array([[0.1, -0.9, 0.0], [-0.8, 0.2, 0.0]])
    np.testing.assert_array_equal(fix_signs(vecs), [[-0.1, 0.9, 0.0], [0.8, -0.2, 0.0]])


def _weighted_points(seed: int, n: int = 600, d: int = 5):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(8, d)) * 3
    X = centres[rng.integers(0, 8, n)] + rng.normal(size=(n, d))
    return X, rng.integers(1, 5, n).astype(np.float64)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_start_of_the_seeding_is_scikit_learns_kmeans_plusplus(seed):
    from sklearn.cluster._kmeans import _kmeans_plusplus

    X, w = _weighted_points(seed)
    sq = np.einsum("ij,ij->i", X, X)
    _, reference = _kmeans_plusplus(X, 12, sq, w, np.random.RandomState(seed))
    ours = kmeans_plusplus_starts(X, w, 12, 1, np.random.RandomState(seed))
    assert ours.shape == (1, 12)
    assert ours[0].tolist() == reference.tolist()


def test_the_starts_seeded_together_are_each_a_kmeans_plusplus_seeding():
    # a start among several draws its own candidates; every start's centres are distinct rows
    X, w = _weighted_points(3)
    seeds = kmeans_plusplus_starts(X, w, 8, 10, 0)
    assert seeds.shape == (10, 8)
    assert all(len(set(row)) == 8 for row in seeds.tolist())
    assert len({tuple(row) for row in seeds.tolist()}) == 10
    assert np.array_equal(seeds, kmeans_plusplus_starts(X, w, 8, 10, 0))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_weighted_kmeans_matches_scikit_learns_inertia(seed):
    from sklearn.cluster import KMeans

    X, w = _weighted_points(seed)
    ours = weighted_kmeans(X, w, 8, 10, seed)
    reference = KMeans(n_clusters=8, n_init=10, random_state=seed).fit(X, sample_weight=w)

    def inertia(labels):
        return sum(
            w[labels == j]
            @ (
                (X[labels == j] - np.average(X[labels == j], axis=0, weights=w[labels == j])) ** 2
            ).sum(1)
            for j in np.unique(labels)
        )

    assert ours.dtype == np.int64 and ours.shape == (600,)
    assert inertia(ours) <= 1.01 * inertia(reference.labels_)
