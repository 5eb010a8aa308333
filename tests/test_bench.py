"""The shared benchmark protocol helpers (adseg.bench) that need no data set."""

from __future__ import annotations

import os

import numpy as np

from adseg.bench import machine_summary, shuffle_items


def test_machine_summary_names_cpus_memory_python_and_load():
    line = machine_summary()
    assert f"{os.cpu_count()} CPUs" in line
    assert "GiB memory" in line and "Python 3." in line and "load " in line
    assert "\n" not in line


def test_shuffle_items_is_seeded_and_keeps_rows_together():
    y = np.arange(20)
    labels = np.column_stack([y, y % 3])
    y1, l1, perm1 = shuffle_items(y, labels, 5)
    y2, _, perm2 = shuffle_items(y, labels, 5)
    np.testing.assert_array_equal(perm1, perm2)
    np.testing.assert_array_equal(l1[:, 0], y1)  # rows move with their class
    assert sorted(perm1.tolist()) == list(range(20))
    y3, l3, perm3 = shuffle_items(y, labels, None)
    np.testing.assert_array_equal(y3, y)
