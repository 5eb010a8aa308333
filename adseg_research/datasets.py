"""Benchmark data sets from the shared data folder (``shared/datasets``, outside the project).

The data are never copied into the project, and their folder comes from configuration, never from
where this file lies: ``find_datasets_dir`` (an explicit folder, else ``$ADSEG_DATASETS``, else
``shared/datasets`` beside the working directory). Every loader takes that folder as ``data_dir``;
None resolves it by the same rule.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

DATASETS_ENV = "ADSEG_DATASETS"
"""The environment variable naming the benchmark data folder (the folder holding NAME.npz)."""

_HOW_TO_SET = f"pass --datasets DIR or set ${DATASETS_ENV} to the folder that holds the data sets"


def find_datasets_dir(explicit: str | Path | None = None) -> Path:
    """The benchmark data folder: ``explicit`` (``adseg bench consensus --datasets``) when given,
    else ``$ADSEG_DATASETS``, else ``./shared/datasets`` or ``../shared/datasets`` from the
    working directory (a checkout beside ``../shared``).

    FileNotFoundError naming the path(s) tried and how to set it when the folder is missing; an
    explicit or environment value that is not a folder is an error, never a fall-back (a
    benchmark would run on data other than the data asked for)."""
    if explicit is not None:
        if not Path(explicit).is_dir():
            raise FileNotFoundError(f"benchmark data folder {explicit} not found: {_HOW_TO_SET}.")
        return Path(explicit)
    if env := os.environ.get(DATASETS_ENV):
        if not Path(env).is_dir():
            raise FileNotFoundError(
                f"{DATASETS_ENV}={env} is not a folder: point it at the folder that holds the "
                "data sets, or unset it to use shared/datasets beside the working directory."
            )
        return Path(env)
    cwd = Path.cwd()
    candidates = [cwd / "shared" / "datasets", cwd.parent / "shared" / "datasets"]
    for c in candidates:
        if c.is_dir():
            return c
    raise FileNotFoundError(
        f"benchmark data not found at {candidates[0]} or {candidates[1]}: {_HOW_TO_SET}."
    )


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


def load_dataset(name: str, data_dir: str | Path | None = None) -> Dataset:
    """Load ``NAME.npz`` (features, multi-view or pool) from ``data_dir`` (None: see
    ``find_datasets_dir``); see shared/datasets/README.md."""
    return _load(dataset_path(name, data_dir=data_dir), name)


def dataset_path(name: str, suffix: str = ".npz", *, data_dir: str | Path | None = None) -> Path:
    """The file ``name + suffix`` of the benchmark set ``name`` in ``data_dir`` (None: see
    ``find_datasets_dir``): ValueError for a name that is a path (it read files outside the data
    folder, ``../datasets/iris``), FileNotFoundError for no such set or folder."""
    if not name or Path(name).name != name or name.startswith("."):
        raise ValueError(f"a benchmark data set is named by its file's stem (iris); got {name!r}.")
    path = find_datasets_dir(data_dir) / f"{name}{suffix}"
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


def load_reuters10(data_dir: str | Path | None = None) -> tuple[list[str], np.ndarray]:
    """The raw Reuters-10 texts and their 0-based classes (8,008 documents) from ``data_dir``
    (None: see ``find_datasets_dir``)."""
    path = dataset_path("reuters10", REUTERS10_SUFFIX, data_dir=data_dir)
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        frame = pd.read_csv(fh, sep="\t")
    codes, _ = pd.factorize(frame["label"], sort=True)
    return frame["text"].astype(str).tolist(), codes.astype(np.int64)
