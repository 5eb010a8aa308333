"""The text view: TF-IDF, LSA and row-normalisation of the descriptions, then seeded k-means
for each k in ``ViewConfig.text_ks``; descriptions with no usable term get -1."""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd
from sklearn.utils import check_random_state

from adseg.views.base import BaseClusterings, ViewConfig, compact_labels, empty_columns

__all__ = ["text_view"]


def text_view(
    descriptions: Sequence[str | None],
    config: ViewConfig | None = None,
    random_state=None,
) -> BaseClusterings:
    """The text view: TF-IDF (+ LSA) of descriptions, k-means for each k in config.text_ks.

    descriptions : n strings (None/NaN/empty allowed → -1). k is capped at the number of distinct
    usable documents. Returns BaseClusterings with labels (n, len(text_ks)); no columns if fewer
    than 2 descriptions are usable (with a warning). Cost: TF-IDF O(total tokens), SVD
    O(n · terms · components), k-means O(n · components · k · iterations) per k.
    """
    from sklearn.cluster import KMeans
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.preprocessing import normalize

    config = config or ViewConfig()
    rng = check_random_state(random_state)
    seeds = rng.randint(0, 2**31 - 1, size=len(config.text_ks) + 1)
    docs = [d if isinstance(d, str) else "" for d in descriptions]
    n = len(docs)
    if not config.text_ks or n == 0:
        return BaseClusterings(np.empty((n, 0), dtype=np.int64), empty_columns())
    t0 = time.perf_counter()
    x = None
    try:
        vectorizer = TfidfVectorizer(
            sublinear_tf=True,
            min_df=config.text_min_df,
            max_features=config.text_max_features,
            stop_words=config.text_stop_words,
        )
        x = vectorizer.fit_transform(docs)
    except ValueError:  # empty vocabulary: no description has a usable term
        pass
    usable = np.flatnonzero(np.asarray(x.getnnz(axis=1)) > 0) if x is not None else np.array([])
    if usable.size < 2:
        warnings.warn(
            f"text view: only {usable.size} of {n} descriptions have usable terms; skipped.",
            RuntimeWarning,
            stacklevel=2,
        )
        return BaseClusterings(np.empty((n, 0), dtype=np.int64), empty_columns())
    x = x[usable]
    if config.text_components is not None and min(x.shape) > 2:
        n_comp = min(config.text_components, min(x.shape) - 1)
        svd = TruncatedSVD(n_components=n_comp, random_state=int(seeds[-1]))
        # explained_variance_ratio_ (unused) divides by the total variance, which is 0 when
        # every description is the same
        with np.errstate(divide="ignore", invalid="ignore"):
            features = normalize(svd.fit_transform(x))
    else:
        features = x
    n_distinct = _n_distinct_rows(features)
    prep_seconds = time.perf_counter() - t0
    labels = np.full((n, len(config.text_ks)), -1, dtype=np.int64)
    rows = []
    for c, k in enumerate(config.text_ks):  # loop over cluster counts
        t1 = time.perf_counter()
        k_used = int(min(k, n_distinct))
        km = KMeans(n_clusters=k_used, n_init=config.n_init, random_state=int(seeds[c]))
        labels[usable, c] = compact_labels(km.fit_predict(features))
        rows.append(
            {
                "view": "text",
                "parameter": f"k={k}",
                "n_clusters": int(labels[usable, c].max()) + 1,
                "n_excluded": int(n - usable.size),
                "seconds": time.perf_counter() - t1 + prep_seconds / len(config.text_ks),
                "alpha": np.nan,
                "k": k,
            }
        )
    return BaseClusterings(labels, pd.DataFrame(rows))


def _n_distinct_rows(x) -> int:
    """Distinct rows of a dense or sparse (n, d) matrix, via two fixed random projections (no
    dense copy of a sparse matrix); distinct rows collide with probability 0."""
    proj = x @ np.random.default_rng(0).normal(size=(x.shape[1], 2))
    return int(np.unique(np.round(np.asarray(proj), 10), axis=0).shape[0])
