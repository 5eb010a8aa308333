"""Benchmark data sets from the shared folder (``../shared/datasets`` beside the project root).

The data are never copied into the project. Set ``ADSEG_SHARED_DIR`` to point elsewhere.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp


def shared_dir() -> Path | None:
    """The shared folder, or None when it is absent (a user's fresh clone). ``$ADSEG_SHARED_DIR``,
    when set, must name a folder holding ``datasets/`` (FileNotFoundError naming it otherwise):
    falling back to ../shared would run a benchmark on data other than the data asked for."""
    if env := os.environ.get("ADSEG_SHARED_DIR"):
        if not (Path(env) / "datasets").is_dir():
            raise FileNotFoundError(
                f"ADSEG_SHARED_DIR={env} holds no datasets/ folder: point it at the folder that "
                "holds datasets/, or unset it to use ../shared beside the project root."
            )
        return Path(env)
    candidates = [Path(__file__).resolve().parents[2] / "shared", Path.cwd().parent / "shared"]
    for c in candidates:
        if (c / "datasets").is_dir():
            return c
    return None


def datasets_dir() -> Path:
    """The datasets folder; FileNotFoundError with a clear message when it is missing."""
    root = shared_dir()
    if root is None:
        raise FileNotFoundError(
            "benchmark data not found: expected ../shared/datasets beside the project root "
            "(or set ADSEG_SHARED_DIR)."
        )
    return root / "datasets"


@dataclass(frozen=True)
class Dataset:
    """A benchmark set: features X (dense, sparse CSR, or a list of views), classes y (0-based),
    and for pools the (n, 100) k-means base clusterings in ``members``."""

    name: str
    y: np.ndarray
    X: np.ndarray | sp.csr_matrix | None = None
    views: tuple | None = None
    members: np.ndarray | None = None

    @property
    def n_classes(self) -> int:
        return int(np.unique(self.y).size)


def load_dataset(name: str) -> Dataset:
    """Load ``NAME.npz`` (features, multi-view or pool); see shared/datasets/README.md."""
    return _load(dataset_path(name), name)


def dataset_path(name: str, suffix: str = ".npz") -> Path:
    """The file ``name + suffix`` of the benchmark set ``name``: ValueError for a name that is a
    path (it read files outside the data folder, ``../datasets/iris``), FileNotFoundError for no
    such set."""
    if not name or Path(name).name != name or name.startswith("."):
        raise ValueError(f"a benchmark data set is named by its file's stem (iris); got {name!r}.")
    path = datasets_dir() / f"{name}{suffix}"
    if not path.exists():
        raise FileNotFoundError(f"no benchmark data set {name!r} at {path}.")
    return path


def _load(path: Path, name: str) -> Dataset:
    with np.load(path, allow_pickle=False) as z:
        keys = set(z.files)
        y = np.asarray(z["y"]).astype(np.int64).ravel()
        if "members" in keys:
            return Dataset(name, y, members=np.asarray(z["members"]).astype(np.int64))
        if "X" in keys:
            return Dataset(name, y, X=np.asarray(z["X"], dtype=np.float64))
        if "X_data" in keys:
            X = sp.csr_matrix(
                (z["X_data"], z["X_indices"], z["X_indptr"]), shape=tuple(z["X_shape"])
            ).astype(np.float64)
            return Dataset(name, y, X=X)
        views = []
        i = 0
        while f"X{i}" in keys:
            views.append(np.asarray(z[f"X{i}"], dtype=np.float64))
            i += 1
        if not views:
            raise ValueError(f"{path}: no features, views or members found (keys {sorted(keys)}).")
        return Dataset(name, y, views=tuple(views))


REUTERS10_SUFFIX = ".tsv.gz"
"""Reuters-10 is stored as its texts, not as features."""


def load_reuters10() -> tuple[list[str], np.ndarray]:
    """The raw Reuters-10 texts and their 0-based classes (8,008 documents)."""
    path = dataset_path("reuters10", REUTERS10_SUFFIX)
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        frame = pd.read_csv(fh, sep="\t")
    codes, _ = pd.factorize(frame["label"], sort=True)
    return frame["text"].astype(str).tolist(), codes.astype(np.int64)
