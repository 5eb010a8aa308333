"""Shared fixtures: benchmark data from ../shared (skipped when absent)."""

from __future__ import annotations

import pytest

from adseg.datasets import shared_dir


@pytest.fixture(scope="session")
def shared_datasets():
    """Skip the test cleanly when ../shared/datasets is absent (a user's fresh clone)."""
    root = shared_dir()
    if root is None:
        pytest.skip("../shared/datasets not found (benchmark data are not part of the project)")
    return root / "datasets"
