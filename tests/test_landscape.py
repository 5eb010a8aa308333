"""adseg.landscape: exact all-pairs KS statistics against scipy.stats.ks_2samp, properties,
critical values."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from adseg import landscape
from adseg.landscape import (
    ecdf,
    ecdf_values,
    ks_critical_value,
    ks_distance_matrix,
    ks_distance_of_pairs,
    ks_pairs_within,
    ks_statistic_matrix,
    sample_sizes,
    scale_statistics,
)

# small budgets force many column blocks, chunks and cut samples, exercising every code path
SETTINGS = [
    {"method": "points"},
    {"method": "points", "precision": "float64"},
    {"method": "points", "memory_mb": 0.001, "chunk_elements": 7},
    {"method": "points", "memory_mb": 0.05, "chunk_elements": 300},
    {"method": "grid"},
    {"method": "grid", "chunk_elements": 5},
]


def scipy_matrix(samples) -> np.ndarray:
    n = len(samples)
    out = np.zeros((n, n))
    with warnings.catch_warnings():
        # scipy's exact p-value sometimes falls back to asymptotics; only the statistic matters
        warnings.simplefilter("ignore", RuntimeWarning)
        for i in range(n):  # reference loop over pairs, test only
            for j in range(i + 1, n):
                out[i, j] = out[j, i] = stats.ks_2samp(samples[i], samples[j]).statistic
    return out


def mixed_samples(rng, n=40):
    """Continuous, tied, heavily quantised, size-1 and repeated-value samples together."""
    out = []
    for i in range(n):
        size = int(rng.choice([1, 1, 2, 3, 5, 17, 60, 200]))
        x = rng.lognormal(rng.normal(0, 0.5), 0.7, size)
        kind = i % 4
        if kind == 1:
            x = np.round(x, 1)  # ties within and across samples
        elif kind == 2:
            x = np.round(x)  # very coarse grid: lots of ties
        elif kind == 3:
            x = np.full(size, 1.0)  # all values equal
        out.append(x)
    return out


@pytest.fixture
def force_screen(monkeypatch):
    """Make precision="auto" use the float32 screen even on small inputs."""
    monkeypatch.setattr(landscape, "_SCREEN_MIN_WORK", 0)


@pytest.mark.parametrize("screen", [False, True])
@pytest.mark.parametrize("kwargs", SETTINGS)
def test_exact_against_scipy_mixed(kwargs, screen, monkeypatch):
    if screen:
        monkeypatch.setattr(landscape, "_SCREEN_MIN_WORK", 0)
    rng = np.random.default_rng(0)
    samples = mixed_samples(rng)
    d = ks_statistic_matrix(samples, **kwargs)
    ref = scipy_matrix(samples)
    np.testing.assert_allclose(d, ref, rtol=0, atol=1e-12)
    # in fact bit-identical: the same counts, divisions and snapping to h / lcm
    assert np.array_equal(d, ref)


@pytest.mark.parametrize("kwargs", SETTINGS[:3])
def test_exact_against_scipy_continuous_and_quantised(kwargs):
    rng = np.random.default_rng(1)
    continuous = [rng.normal(rng.normal(0, 0.3), 1, int(rng.integers(1, 80))) for _ in range(25)]
    ticks = [np.round(rng.gamma(2.0, 1.0, int(rng.integers(1, 300))), 2) for _ in range(25)]
    for samples in (continuous, ticks):
        np.testing.assert_allclose(
            ks_statistic_matrix(samples, **kwargs), scipy_matrix(samples), rtol=0, atol=1e-12
        )


def test_tiny_samples():
    samples = [[1.0], [1.0], [2.0], [0.5, 2.0], [2.0, 2.0, 2.0], [-3.0]]
    d = ks_statistic_matrix(samples)
    np.testing.assert_array_equal(d, scipy_matrix(samples))
    assert d[0, 1] == 0.0 and d[0, 2] == 1.0 and d[0, 3] == 0.5


def test_large_coprime_sizes_within_1e12():
    # sizes above 10,000: scipy takes its asymptotic path and does not snap to h / lcm
    rng = np.random.default_rng(2)
    samples = [np.round(rng.normal(0, 1, 10007), 3), np.round(rng.normal(0.02, 1, 9973), 3)]
    d = ks_statistic_matrix(samples)
    assert abs(d[0, 1] - stats.ks_2samp(*samples).statistic) < 1e-12


def test_distance_matrix_scaling():
    rng = np.random.default_rng(3)
    samples = [np.round(rng.exponential(1, int(rng.integers(1, 50))), 1) for _ in range(12)]
    dist = ks_distance_matrix(samples)
    m = np.array([len(s) for s in samples], dtype=float)
    expected = scipy_matrix(samples) * np.sqrt(np.outer(m, m) / np.add.outer(m, m))
    np.testing.assert_allclose(dist, expected, rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(sample_sizes(samples), m.astype(int))
    assert np.array_equal(scale_statistics(ks_statistic_matrix(samples), m), dist)


def test_methods_agree_on_a_larger_quantised_set(force_screen):
    rng = np.random.default_rng(4)
    sizes = np.clip(np.round(np.exp(rng.normal(3, 1.3, 150))), 1, 3000).astype(int)
    samples = [np.round(rng.lognormal(rng.normal(0.7, 0.4), 0.6, k), 2) for k in sizes]
    a = ks_statistic_matrix(samples, method="points", chunk_elements=4096)
    b = ks_statistic_matrix(samples, method="grid")
    np.testing.assert_array_equal(a, b)
    # spot-check pairs against scipy (the full loop is the benchmark's job)
    i, j = rng.integers(0, 150, (2, 60))
    ref = [stats.ks_2samp(samples[p], samples[q]).statistic for p, q in zip(i, j, strict=True)]
    np.testing.assert_allclose(a[i, j], ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("n_large", [3, 12])
def test_float32_screen_equals_float64(n_large, force_screen):
    """The float32 scan snapped to h / lcm equals the float64 scan bit for bit, including pairs of
    large coprime sizes (lcm > 2^21, recomputed in float64; with 12 of 20 samples large the whole
    matrix falls back to float64)."""
    rng = np.random.default_rng(6)
    sizes = [1499, 1501, 1503, 1507, 1511, 1513, 1517, 1519, 1523, 1529, 1531, 1537][:n_large]
    sizes += list(rng.integers(1, 300, 20 - n_large))
    samples = [np.round(rng.normal(rng.normal(0, 0.05), 1, k), 2) for k in sizes]
    a = ks_statistic_matrix(samples, precision="auto", chunk_elements=5000)
    b = ks_statistic_matrix(samples, precision="float64")
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a[:4, :4], scipy_matrix(samples[:4]))


def test_empty_samples_nan_or_raise():
    samples = [[1.0, 2.0], [], [1.5]]
    d = ks_statistic_matrix(samples)
    assert np.isnan(d[1]).all() and np.isnan(d[:, 1]).all()
    assert d[0, 2] == stats.ks_2samp([1.0, 2.0], [1.5]).statistic
    assert np.isnan(ks_distance_matrix(samples)[1]).all()
    with pytest.raises(ValueError, match=r"samples\[1\] is empty"):
        ks_statistic_matrix(samples, on_empty="raise")
    assert ks_statistic_matrix([]).shape == (0, 0)
    assert ks_statistic_matrix([[], []]).shape == (2, 2)


def test_bad_input():
    with pytest.raises(ValueError, match="NaN"):
        ks_statistic_matrix([[1.0, np.nan], [1.0]])
    with pytest.raises(ValueError, match="1-D"):
        ks_statistic_matrix([np.ones((2, 2)), [1.0]])
    with pytest.raises(TypeError):
        ks_statistic_matrix("abc")
    with pytest.raises(ValueError, match="method"):
        ks_statistic_matrix([[1.0]], method="fast")
    with pytest.raises(ValueError, match="precision"):
        ks_statistic_matrix([[1.0]], precision="half")
    with pytest.raises(ValueError, match="memory_mb"):
        ks_statistic_matrix([[1.0]], memory_mb=0)
    with pytest.raises(MemoryError):
        ks_statistic_matrix(
            [np.arange(1000.0), np.arange(1000.0) + 0.5], method="grid", memory_mb=0.001
        )


def test_two_d_array_input_is_one_sample_per_row():
    x = np.random.default_rng(5).normal(size=(6, 9))
    np.testing.assert_array_equal(ks_statistic_matrix(x), scipy_matrix(list(x)))


def test_ecdf_helpers():
    x, f = ecdf([3.0, 1.0, 3.0, 2.0])
    np.testing.assert_array_equal(x, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(f, [0.25, 0.5, 1.0])
    np.testing.assert_array_equal(
        ecdf_values([3.0, 1.0, 3.0, 2.0], [0.0, 1.0, 2.5, 9.0]), [0.0, 0.25, 0.5, 1.0]
    )
    assert np.isnan(ecdf_values([], [1.0])).all()
    assert ecdf([])[0].size == 0


def test_ecdf_values_propagates_nan_points():
    """A NaN point is NaN (it used to read as F = 1: searchsorted sorts NaN last); ±inf are
    ordinary points; the shape is kept."""
    got = ecdf_values([1.0, 2.0, 3.0], [[np.nan, -np.inf], [np.inf, 2.0]])
    assert got.shape == (2, 2)
    assert np.isnan(got[0, 0])
    np.testing.assert_array_equal(got.ravel()[1:], [0.0, 1.0, 2 / 3])
    assert np.isnan(ecdf_values([1.0, 2.0, 3.0], [np.nan])).all()


def test_critical_values():
    assert ks_critical_value(0.01) == pytest.approx(1.628, abs=1e-3)
    assert ks_critical_value(0.05) == pytest.approx(1.358, abs=1e-3)
    assert ks_critical_value(0.1) == pytest.approx(1.224, abs=1e-3)
    alphas = np.linspace(0.001, 0.999, 200)
    values = [ks_critical_value(a) for a in alphas]
    assert np.all(np.diff(values) < 0)
    # Pr(K > C_α) = α under the Kolmogorov distribution
    assert stats.kstwobign.sf(ks_critical_value(0.05)) == pytest.approx(0.05)
    for bad in (0, 1, -0.1, 1.5):
        with pytest.raises(ValueError, match="alpha"):
            ks_critical_value(bad)
    with pytest.raises(TypeError):
        ks_critical_value("0.05")


# -------- properties ---------------------------------------------------------------------------

ticks = st.integers(min_value=-20, max_value=20).map(lambda k: k / 4)
sample_lists = st.lists(st.lists(ticks, min_size=1, max_size=25), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(samples=sample_lists, seed=st.integers(0, 2**16))
def test_properties(samples, seed):
    d = ks_statistic_matrix(samples, chunk_elements=16)
    n = len(samples)
    assert d.shape == (n, n)
    assert np.array_equal(d, d.T)
    assert np.all(np.diag(d) == 0)
    assert np.all((d >= 0) & (d <= 1))
    rng = np.random.default_rng(seed)
    # order within a sample does not matter; permuting the samples permutes the matrix
    shuffled = [rng.permutation(s) for s in samples]
    perm = rng.permutation(n)
    d2 = ks_statistic_matrix([shuffled[p] for p in perm])
    assert np.array_equal(d2, d[np.ix_(perm, perm)])
    # identical samples are at distance 0
    assert ks_statistic_matrix([samples[0], list(reversed(samples[0]))])[0, 1] == 0


@settings(max_examples=25, deadline=None)
@given(samples=sample_lists)
def test_property_matches_scipy(samples):
    assert np.array_equal(ks_statistic_matrix(samples), scipy_matrix(samples))
    old = landscape._SCREEN_MIN_WORK
    landscape._SCREEN_MIN_WORK = 0  # the float32 screen too (no fixture inside hypothesis)
    try:
        assert np.array_equal(ks_statistic_matrix(samples), scipy_matrix(samples))
    finally:
        landscape._SCREEN_MIN_WORK = old


def test_column_blocks_are_as_wide_as_their_own_tables_allow():
    """Blocks were sized by the pooled distinct count: ~14 columns on unrounded prices (every
    value distinct), and the scan went super-quadratic. Now by each block's own samples."""
    from adseg.landscape import _column_blocks

    rng = np.random.default_rng(0)
    sizes = rng.integers(0, 1000, 500)
    for n_distinct, budget, cap in (
        (int(sizes.sum()), 4e6, 10_000),
        (900, 4e6, 10_000),
        (10**6, 10, 7),
    ):
        blocks = _column_blocks(sizes, n_distinct, budget, cap)
        assert blocks[0][0] == 0 and blocks[-1][1] == sizes.size
        assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:], strict=False))
        for j0, j1 in blocks:
            table = (min(n_distinct, int(sizes[j0:j1].sum())) + 1) * (j1 - j0)
            assert j1 - j0 <= cap and (table <= budget or j1 - j0 == 1)
    # unrounded prices: blocks about sqrt(budget / mean size) wide, not budget / all values
    widths = [j1 - j0 for j0, j1 in _column_blocks(sizes, int(sizes.sum()), 4e6, 10_000)]
    assert np.median(widths) > 4e6 / sizes.sum() * 5


@pytest.mark.parametrize("chunk", [1, 7, 1 << 18])
def test_distance_of_pairs_is_the_matrix_entry_bit_for_bit(chunk):
    """ks_distance_of_pairs gives ks_distance_matrix's bits for any pairs (repeated, reversed,
    i = j, empty samples → NaN), whatever the chunking; the statistic is scipy's."""
    rng = np.random.default_rng(8)
    samples = mixed_samples(rng, 50) + [np.empty(0)]
    dense = ks_distance_matrix(samples)
    i = rng.integers(0, 51, 3000)
    j = rng.integers(0, 51, 3000)
    got = ks_distance_of_pairs(samples, i, j, chunk_elements=chunk)
    np.testing.assert_array_equal(got, dense[i, j])  # NaN where the matrix has NaN
    sizes = sample_sizes(samples)
    stat = ks_distance_of_pairs(samples[:50], i[:200] % 50, j[:200] % 50)
    scaled = scipy_matrix(samples[:50])[i[:200] % 50, j[:200] % 50]
    m_i, m_j = sizes[i[:200] % 50], sizes[j[:200] % 50]
    np.testing.assert_allclose(stat, scaled * np.sqrt(m_i * m_j / (m_i + m_j)), rtol=1e-15)


@settings(max_examples=40, deadline=None)
@given(samples=sample_lists, seed=st.integers(0, 2**16))
def test_property_distance_of_pairs(samples, seed):
    rng = np.random.default_rng(seed)
    n = len(samples)
    i, j = rng.integers(0, n, 30), rng.integers(0, n, 30)
    np.testing.assert_array_equal(
        ks_distance_of_pairs(samples, i, j), ks_distance_matrix(samples)[i, j]
    )


def test_distance_of_pairs_bad_indices():
    with pytest.raises(ValueError, match=r"indices in \[0, 2\)"):
        ks_distance_of_pairs([[1.0], [2.0]], [0, 2], [1, 1])
    with pytest.raises(ValueError, match="equal-length"):
        ks_distance_of_pairs([[1.0], [2.0]], [0, 1], [1])


@pytest.mark.parametrize("settle", [0.9, 1.22])
def test_pairs_within_settled_pairs_are_on_the_right_side(settle):
    """With settle_below, a pair is returned with its exact distance or with an upper bound ≤
    settle_below that is ≥ the exact distance: every limit ≥ settle_below keeps exactly the
    pairs the exact distances keep."""
    rng = np.random.default_rng(13)
    samples = mixed_samples(rng, 80)
    dense = ks_distance_matrix(samples)
    i, j = rng.integers(0, 80, 4000), rng.integers(0, 80, 4000)
    a, b, d = ks_pairs_within(samples, i, j, 1.63, settle_below=settle, grid_points=16)
    inside = dense[i, j] <= 1.63
    np.testing.assert_array_equal(a, i[inside])
    np.testing.assert_array_equal(b, j[inside])
    exact = dense[a, b]
    bounded = d != exact
    assert bounded.any() and (d[bounded] <= settle).all() and (d[bounded] >= exact[bounded]).all()
    for limit in (settle, 1.36, 1.63):
        np.testing.assert_array_equal(d <= limit, exact <= limit)


@pytest.mark.parametrize("limit", [0.0, 0.5, 1.22, 1.63, np.inf])
def test_pairs_within_misses_no_pair(limit):
    """ks_pairs_within keeps exactly the pairs with dist ≤ limit, in the given order, with the
    dense matrix's distances: its grid screen never drops a pair within the limit (a coarse
    grid of 3 points makes the screen weak, 256 makes it strong; the result is the same)."""
    rng = np.random.default_rng(12)
    samples = mixed_samples(rng, 80) + [np.empty(0)]
    dense = ks_distance_matrix(samples)
    i, j = rng.integers(0, 81, 4000), rng.integers(0, 81, 4000)
    with np.errstate(invalid="ignore"):
        inside = dense[i, j] <= limit
    for points in (3, 64, 256):
        a, b, d = ks_pairs_within(samples, i, j, limit, grid_points=points)
        np.testing.assert_array_equal(a, i[inside])
        np.testing.assert_array_equal(b, j[inside])
        np.testing.assert_array_equal(d, dense[i, j][inside])


def test_ks_statistic_against_is_the_matrix_block_bit_for_bit():
    """ks_statistic_against(samples, references) equals the (samples, references) block of
    ks_statistic_matrix(samples + references) bit for bit (ties and rounded prices included)
    and scipy's ks_2samp; empty inputs are refused."""
    from scipy.stats import ks_2samp

    from adseg.landscape import ks_statistic_against, ks_statistic_matrix

    rng = np.random.default_rng(0)
    for _ in range(30):
        n, r = rng.integers(1, 30), rng.integers(1, 8)
        xs = [
            np.round(rng.lognormal(0, 1, rng.integers(1, 20)), rng.integers(0, 3)) for _ in range(n)
        ]
        refs = [
            np.round(rng.lognormal(0.3, 1, rng.integers(1, 400)), rng.integers(0, 3))
            for _ in range(r)
        ]
        got = ks_statistic_against(xs, refs)
        np.testing.assert_array_equal(got, ks_statistic_matrix(xs + refs)[:n, n:])
        i, j = rng.integers(n), rng.integers(r)
        assert got[i, j] == ks_2samp(xs[i], refs[j]).statistic
    with pytest.raises(ValueError, match="non-empty"):
        ks_statistic_against([np.array([])], [np.array([1.0])])
