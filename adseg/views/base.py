"""What the views share: their parameters (ViewConfig) and their result (BaseClusterings).

Also the names of the KS views and of the cluster-count rules, and two helpers of the view
modules: the empty metadata frame and labels renumbered by first appearance.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from adseg.checks import check_integer, check_k_range, check_real

KS_VIEWS = ("win_rate", "ecpm_cost")
"""Names of the two bid-landscape views, in column order."""

K_SELECTIONS = ("bethe_hessian", "eigengap", "modularity")
"""Rules for the number of clusters of a KS graph (see NormalizedCutClustering)."""


COLUMN_FIELDS = ("view", "parameter", "n_clusters", "n_excluded", "seconds")
"""Columns every metadata frame has (more may follow: alpha, k, critical_value, n_edges, …)."""


@dataclass(frozen=True)
class ViewConfig:
    """Parameters of the base clusterings (all recorded with a run).

    alphas : significance levels of the KS graphs, each in (0, 1); one base clustering per α and
        KS view.
    min_samples : advertisers with fewer samples of a kind are left out of that view (label -1).
        Default 5 here, for the library's small inputs; the nightly passes its own
        ``--min-samples`` (``NightlyConfig.min_samples``, default 20), so a direct call with the
        defaults leaves out fewer advertisers than the nightly does.
    n_clusters : clusters per KS graph; None = chosen by ``k_selection`` within ``k_range``.
    k_range : (k_min, k_max) searched (capped at the number of advertisers - 1). k_min = 1 lets
        a view without community structure (Bethe-Hessian count 1, e.g. identical price
        distributions) be one cluster; a graph in which every pair is linked is one cluster
        whatever k_min is.
    k_selection : "bethe_hessian" (default), "eigengap" or "modularity" (see
        NormalizedCutClustering and docs/algorithms/ks.md).
    assign_method : "kmeans" or "cluster_qr" (see adseg.spectral.assign_labels).
    n_init : k-means restarts (spectral discretisation and text).
    text_ks : cluster counts of the text view; empty = no text view.
    text_components : LSA dimensions before k-means (None = k-means on the raw TF-IDF rows).
    text_min_df, text_max_features, text_stop_words : TfidfVectorizer settings.
    ks_memory_mb : block-table budget of the KS computation (adseg.landscape).
    ks_partners : a KS view of at least ``views.ks.SAMPLED_MIN_N`` (5,000) advertisers, and
        more than ks_partners + 1, compares every advertiser with about this many others drawn
        at random (``views.ks.ks_sampled_pairs``) instead of with all of them, so its cost and
        graph grow as n · ks_partners, not n²; None = compare all pairs at every size. Smaller
        views are exactly as with None. Evidence for the default: docs/algorithms/ks.md.
    ks_block_values : a sampled KS view's pairs are compared in KS blocks of two row ranges
        holding about this many sample values together (``views.ks_blocks``), each a task of
        the execution engine; None = one block. The graphs are the same whatever it is.
    keep_distances : keep each KS view's distance matrix in the result (n_v × n_v each).
    blas_threads : BLAS/OpenMP threads while building the views (threadpoolctl); None = leave
        the process default. 1 by default: on the shared 2-core machine, multi-threaded BLAS
        spin-waits in the partial eigendecompositions and k-means, about 14× slower at 1,268
        advertisers (docs/algorithms/ks.md).
    """

    alphas: tuple[float, ...] = (0.01, 0.05, 0.1)
    min_samples: int = 5
    n_clusters: int | None = None
    k_range: tuple[int, int] = (1, 80)
    k_selection: str = "bethe_hessian"
    assign_method: str = "kmeans"
    n_init: int = 10
    text_ks: tuple[int, ...] = (10, 20, 40)
    text_components: int | None = 100
    text_min_df: int = 1
    text_max_features: int | None = 50_000
    text_stop_words: str | None = "english"
    ks_memory_mb: float = 256.0
    ks_partners: int | None = 1000
    ks_block_values: int | None = 1 << 22
    keep_distances: bool = False
    blas_threads: int | None = 1

    def __post_init__(self) -> None:
        alphas = _sequence("ViewConfig.alphas", self.alphas)
        for a in alphas:
            check_real("ViewConfig.alphas", a, high=1.0)  # a number in (0, 1)
        if len(set(alphas)) != len(alphas):
            raise ValueError(f"ViewConfig.alphas has duplicates: {alphas}.")
        object.__setattr__(self, "alphas", tuple(float(a) for a in alphas))
        check_integer("ViewConfig.min_samples", self.min_samples, 1)
        if self.n_clusters is not None:
            check_integer("ViewConfig.n_clusters", self.n_clusters, 1)
        check_k_range(self.k_range, "ViewConfig.k_range")
        if self.k_selection not in K_SELECTIONS:
            raise ValueError(
                f"ViewConfig.k_selection must be one of {K_SELECTIONS}; got {self.k_selection!r}."
            )
        if self.assign_method not in ("kmeans", "cluster_qr"):
            raise ValueError(
                f"ViewConfig.assign_method must be 'kmeans' or 'cluster_qr';"
                f" got {self.assign_method!r}."
            )
        check_integer("ViewConfig.n_init", self.n_init, 1)
        ks = _sequence("ViewConfig.text_ks", self.text_ks)
        for k in ks:
            check_integer("ViewConfig.text_ks", k, 1)
        object.__setattr__(self, "text_ks", ks)
        if self.text_components is not None:
            check_integer("ViewConfig.text_components", self.text_components, 1)
        if self.blas_threads is not None:
            check_integer("ViewConfig.blas_threads", self.blas_threads, 1)
        check_real("ViewConfig.ks_memory_mb", self.ks_memory_mb)
        if self.ks_partners is not None:
            check_integer("ViewConfig.ks_partners", self.ks_partners, 1)
        if self.ks_block_values is not None:
            check_integer("ViewConfig.ks_block_values", self.ks_block_values, 2)


def _sequence(name: str, value) -> tuple:
    """A config field that lists values (``alphas=(0.05,)``), as a tuple; a TypeError naming
    the field for a single value or a string (rather than "'float' object is not iterable")."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a list of values, e.g. ({value!r},); got {value!r}.")
    return tuple(value)


@dataclass
class BaseClusterings:
    """The base clusterings of all views.

    labels : (n_advertisers, n_columns) int64; -1 = advertiser left out of that column.
    columns : one row per column of ``labels`` (index = column number): view ∈ {"win_rate",
        "ecpm_cost", "text"}, parameter ("alpha=0.05" / "k=20"), n_clusters (distinct labels),
        n_excluded (-1 count), seconds (wall time; a KS view's distance time is shared out
        evenly over its α columns), then alpha, k, critical_value, n_edges (linked pairs i < j),
        n_components and n_isolated (graph components / nodes linked to nobody), ks_seconds,
        graph ("dense", "sparse" or "sampled": how the KS graph was built and cut, see ks_view).
    distances : view → (n_v × n_v scaled KS distances, indices of the n_v advertisers), only when
        ``ViewConfig.keep_distances`` and the view took the dense path.
    """

    labels: np.ndarray
    columns: pd.DataFrame
    distances: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def column(self, view: str, parameter: str) -> np.ndarray:
        """The labels (n,) of one column, e.g. ``column("win_rate", "alpha=0.05")``."""
        hit = self.columns[
            (self.columns["view"] == view) & (self.columns["parameter"] == parameter)
        ]
        if hit.empty:
            raise KeyError(f"no base clustering {view} / {parameter}.")
        return self.labels[:, int(hit.index[0])]


def empty_columns() -> pd.DataFrame:
    """A metadata frame with no rows and the columns every view's frame starts with."""
    return pd.DataFrame({c: pd.Series(dtype=object) for c in (*COLUMN_FIELDS, "alpha", "k")})


def compact_labels(labels: np.ndarray) -> np.ndarray:
    """Labels → 0..k-1 in order of first appearance (k-means can leave a cluster empty)."""
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.argsort(np.argsort(first))
    return rank[inverse].astype(np.int64)
