"""What every fuser shares: the base class, input validation, relabelling, co-association.

The spectral helpers the fusers use (eigenvectors, label assignment) live in adseg.spectral.

A *labels* matrix is an integer array of shape (n_items, n_clusterings). Column v is one base
clustering; its label values are arbitrary integers, and -1 means "item not clustered in this
column" (an advertiser with too few samples in that view, say).
"""

from __future__ import annotations

import numbers
import os
import sys

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils import check_random_state

from adseg.checks import check_integer, check_real  # noqa: F401 (the fusers' parameters)
from adseg.metrics import nmi
from adseg.spectral import normalize_by_degree

MISSING = -1


def average_nmi(pred: np.ndarray, labels: np.ndarray) -> float:
    """ANMI (Strehl & Ghosh 2002): the mean NMI (arithmetic normalisation) of a partition
    ``pred`` (n,) with each base clustering, column v of ``labels`` (n, m), scored on the items
    that column labels (-1 left out). The label-free quality score behind the fusers' "auto"
    choices (sccbg's γ, rcc's normalisation). O(n m) time, O(n) memory per column."""
    scores = []
    for v in range(labels.shape[1]):  # loop over clusterings (few)
        seen = labels[:, v] != MISSING
        scores.append(nmi(labels[seen, v], pred[seen]))
    return float(np.mean(scores))


def row_slices(n_rows: int, n_cols: int, values: int, min_rows: int = 1) -> list[slice]:
    """Slices of consecutive rows of an (n_rows, n_cols) array, about ``values`` entries each
    (at least ``min_rows`` rows): the blocks a row-wise step goes through so that its
    temporaries are a block's, not the whole array's."""
    step = max(min_rows, values // max(n_cols, 1))
    return [slice(r, min(r + step, n_rows)) for r in range(0, n_rows, step)]


def resolve_threads(n_jobs) -> int:
    """Threads for a fuser's ``n_jobs`` (scikit-learn's convention): None or 1 → 1, a positive
    int → that many, -1 → every CPU this process may use, -2 → all but one, and so on."""
    if n_jobs is None:
        return 1
    n_jobs = check_integer("n_jobs", n_jobs, low=-sys.maxsize)
    if n_jobs == 0:
        raise ValueError("n_jobs must not be 0 (None or 1: one thread; -1: every CPU).")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return n_jobs if n_jobs > 0 else max(1, (cpus or 1) + 1 + n_jobs)


def map_threads(fn, items, threads: int) -> list:
    """``[fn(x) for x in items]``, on ``threads`` threads when more than one (numpy's array
    operations and BLAS release the GIL), with BLAS held to one thread meanwhile so that the
    threads do not each start a BLAS pool. Results in the order of ``items``; ``fn`` must only
    write what its own item owns (a row block, say). An error or a Ctrl-C ends it after the
    items already started (``Executor.map`` cancels the rest)."""
    items = list(items)
    if threads <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(threads) as pool:
        return list(pool.map(fn, items))


def check_labels(labels, *, name: str = "labels") -> np.ndarray:
    """Validate a base-clustering matrix and return it as a C-contiguous int64 array.

    Parameters
    ----------
    labels : array-like of shape (n_items, n_clusterings), integers; -1 marks a missing label
        (every fuser takes them, DESIGN §3); a column that is all -1 is an error.

    Raises
    ------
    ValueError / TypeError naming the parameter and what is wrong with it.
    """
    arr = _as_label_array(labels, name)
    if arr.ndim == 1:
        raise ValueError(
            f"{name} must be 2-D (n_items, n_clusterings); got 1-D, length {arr.shape[0]}."
            " Reshape a single clustering with labels.reshape(-1, 1)."
        )
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_items, n_clusterings); got shape {arr.shape}.")
    n_items, n_clusterings = arr.shape
    if n_items < 1:
        raise ValueError(f"{name} has no items (shape {arr.shape}).")
    if n_clusterings < 1:
        raise ValueError(f"{name} has no clusterings (shape {arr.shape}); need at least 1 column.")
    if arr.dtype.kind == "f":
        if np.isnan(arr).any():
            row, col = (int(i) for i in np.argwhere(np.isnan(arr))[0])
            raise ValueError(
                f"{name} has NaN at row {row}, column {col}: mark a missing label with -1."
            )
        if not np.all(np.isfinite(arr)):
            row, col = (int(i) for i in np.argwhere(~np.isfinite(arr))[0])
            raise ValueError(f"{name} has {arr[row, col]} at row {row}, column {col}.")
        if not np.all(arr == np.round(arr)):
            raise TypeError(f"{name} must hold integers; got non-integral floats.")
    elif arr.dtype.kind not in "iub":
        raise TypeError(f"{name} must be an integer array; got dtype {arr.dtype}.")
    _check_int64_range(arr, name)
    arr = np.ascontiguousarray(arr, dtype=np.int64)
    if np.any(arr < MISSING):
        col = int(np.nonzero((arr < MISSING).any(axis=0))[0][0])
        raise ValueError(f"{name} column {col} has a negative label other than -1 (missing).")
    empty = np.nonzero((arr == MISSING).all(axis=0))[0]
    if empty.size:
        raise ValueError(f"{name} column {int(empty[0])} is all -1 (no item is clustered in it).")
    return arr


def _as_label_array(labels, name: str) -> np.ndarray:
    """``labels`` as a numpy array, with a clear error for what np.asarray would get wrong: a
    sparse matrix (a 0-d object array), a masked array (the mask silently dropped), rows of
    different lengths, and object arrays (pandas' nullable Int64) holding NA/None or integers."""
    if sp.issparse(labels):
        raise TypeError(f"{name} must be a dense array; got a sparse matrix (use .toarray()).")
    if np.ma.isMaskedArray(labels) and np.ma.getmaskarray(labels).any():
        raise ValueError(
            f"{name} is a masked array with masked entries: mark missing labels with -1 "
            "(labels.filled(-1))."
        )
    try:
        arr = np.asarray(labels.to_numpy() if hasattr(labels, "to_numpy") else labels)
    except ValueError:
        raise ValueError(
            f"{name} must be a rectangular (n_items, n_clusterings) array; its rows have "
            "different lengths."
        ) from None
    if arr.dtype == object and arr.ndim == 2:
        import pandas as pd  # only for pd.NA (pandas' nullable dtypes hand object arrays over)

        missing = np.frompyfunc(lambda v: v is None or v is pd.NA or v != v, 1, 1)(arr)
        if missing.astype(bool).any():
            row, col = (int(i) for i in np.argwhere(missing.astype(bool))[0])
            raise ValueError(
                f"{name} has a missing value (NA/None/NaN) at row {row}, column {col}: mark a "
                "missing label with -1."
            )
        integral = np.frompyfunc(
            lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool | np.bool_), 1, 1
        )(arr)
        if integral.astype(bool).all():
            try:
                return arr.astype(np.int64)
            except OverflowError:
                raise ValueError(
                    f"{name} has a label outside the int64 range; relabel it to small integers "
                    "(e.g. with numpy.unique(..., return_inverse=True))."
                ) from None
    return arr


def _check_int64_range(arr: np.ndarray, name: str) -> None:
    """Refuse labels that do not fit in int64 (a uint64 hash, a float 1e20): the cast would wrap
    them round to negative numbers and the error would wrongly say 'negative label'."""
    if arr.size == 0 or arr.dtype.kind == "i" or arr.dtype == np.bool_:
        return
    if arr.dtype.kind == "u" and arr.dtype.itemsize < 8:
        return
    limit = np.iinfo(np.int64).max
    # floats: 2**63 itself is representable and out of range, so compare with >=
    too_big = arr >= np.float64(2**63) if arr.dtype.kind == "f" else arr > np.uint64(limit)
    if arr.dtype.kind == "f":
        too_big |= arr < -np.float64(2**63)
    if too_big.any():
        col = int(np.nonzero(too_big.any(axis=0))[0][0])
        raise ValueError(
            f"{name} column {col} has a label outside the int64 range; relabel it to small "
            "integers (e.g. with numpy.unique(..., return_inverse=True))."
        )


def check_n_clusters(n_clusters, n_items: int) -> int:
    """Validate ``n_clusters`` against the number of items: 1 ≤ n_clusters ≤ n_items."""
    if isinstance(n_clusters, bool) or not isinstance(n_clusters, numbers.Integral):
        raise TypeError(f"n_clusters must be an integer; got {n_clusters!r}.")
    if n_clusters < 1 or n_clusters > n_items:
        raise ValueError(f"n_clusters must be between 1 and n_items={n_items}; got {n_clusters}.")
    return int(n_clusters)


def check_distinct_rows(labels: np.ndarray, n_clusters: int, weights=None) -> None:
    """Refuse ``n_clusters`` above the number g of groups :func:`count_label_groups` finds.

    Items with identical rows are indistinguishable to every fuser, so a K above g could only be
    reached by splitting such items at random, and the fusers would each do something different
    there (some split by round-off, sccbg raises, rcec returns fewer clusters). Cost O(n m log n),
    one row sort.
    """
    if n_clusters <= 1:
        return
    distinct, noted = count_label_groups(labels, weights)
    if n_clusters > distinct:
        raise ValueError(
            f"n_clusters={n_clusters} exceeds the {distinct} distinct label rows{noted}: items "
            "with identical base labels cannot be told apart."
        )


def count_label_groups(labels: np.ndarray, weights=None) -> tuple[int, str]:
    """(g, noted): the number of distinct label rows (-1 counts as a value) of the items some
    clustering of positive weight labels, and what was left out, in words (" (…; …)", or "" when
    nothing was), to append to a message.

    A clustering of weight 0 (a fuser's ``weights``) tells no items apart, so it is left out of
    the rows: counted, it would let rcc and l2 split items identical in every weighted clustering
    by the random start, and kc return fewer clusters than asked. An item labelled in no weighted
    clustering carries no evidence at all, so it is no group of its own either: counted, it would
    let K exceed the groups the clusterings show, and rcc, l2 and trce would then split a group
    of identical items while rcec and lta would make the unlabelled items a cluster.
    Cost O(n m log n), one row sort."""
    notes = []
    if weights is not None:
        weighted = check_weights(weights, labels.shape[1]) > 0
        if not weighted.all():
            labels = labels[:, weighted]
            notes.append(f"{int((~weighted).sum())} clustering(s) of weight 0 left out")
    unlabelled = (labels == MISSING).all(axis=1)
    if unlabelled.any():
        labels = labels[~unlabelled]
        notes.append(f"{int(unlabelled.sum())} item(s) labelled in no clustering not counted")
    noted = f" ({'; '.join(notes)})" if notes else ""
    return (np.unique(labels, axis=0).shape[0] if len(labels) else 0), noted


def average_linkage_cut(distances: np.ndarray, n_clusters: int) -> np.ndarray:
    """Average-linkage (UPGMA) tree on condensed ``distances`` (the n(n−1)/2 of scipy's
    squareform), cut into exactly ``n_clusters`` clusters; labels (n,) int64 in 0..K−1.
    scipy's ``cut_tree`` cuts after n − K merges, so tied merge heights cannot make it skip
    past K, as ``fcluster(criterion="maxclust")`` can (on four tied groups it gives 1 cluster
    for 2 asked). O(n²) time, the tree O(n) memory beside the input."""
    from scipy.cluster.hierarchy import cut_tree, linkage

    if len(distances) == 0:  # one item, no pair: scipy cannot tell n from an empty input
        return np.zeros(1, dtype=np.int64)
    tree = linkage(distances, method="average")
    return cut_tree(tree, n_clusters=n_clusters).ravel().astype(np.int64)


def check_flag(name: str, value) -> bool:
    """A fuser's on/off parameter: TypeError unless a bool (``noise="no"`` was taken as true,
    ``normalize=0`` as False)."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be True or False; got {value!r}.")
    return bool(value)


def check_weights(weights, n_clusterings: int) -> np.ndarray:
    """Per-clustering weights: non-negative, finite, not all zero; None means equal weights."""
    if weights is None:
        return np.ones(n_clusterings)
    try:
        w = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"weights must be numbers (one per clustering); got {weights!r}.") from None
    if w.shape != (n_clusterings,):
        raise ValueError(f"weights must have shape ({n_clusterings},); got {w.shape}.")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError("weights must be finite, non-negative and not all zero.")
    return w


def missing_as_singletons(labels: np.ndarray) -> np.ndarray:
    """-1 entries → a fresh singleton label each, per column: for a fuser whose model has no
    missing labels, an item left out of a clustering is then alone in it. (n, m) int64 → a new
    (n, m) int64 array; O(n m)."""
    out = np.array(labels, dtype=np.int64)
    for j in range(out.shape[1]):  # columns, not items
        miss = out[:, j] == MISSING
        if miss.any():
            out[miss, j] = out[:, j].max() + 1 + np.arange(int(miss.sum()))
    return out


def relabel(labels: np.ndarray) -> np.ndarray:
    """Map each column's labels to 0..k_v-1 in order of first appearance; -1 stays -1.

    Shape (n, m) → (n, m) int64. Cost O(n m log n).
    """
    labels = check_labels(labels)
    out = np.full_like(labels, MISSING)
    for v in range(labels.shape[1]):  # loop over columns (few), not items
        col = labels[:, v]
        ok = col != MISSING
        _, first, inverse = np.unique(col[ok], return_index=True, return_inverse=True)
        order = np.argsort(np.argsort(first))  # rank of each unique value by first appearance
        out[ok, v] = order[inverse]
    return out


def incidence_matrix(labels: np.ndarray, weights: np.ndarray | None = None) -> sp.csr_matrix:
    """Sparse one-hot incidence Y of shape (n_items, Σ_v k_v): Y[i, (v, c)] = w_v if item i has
    label c in column v. Rows of items missing in a column have no entry for that column.

    Memory O(n m) non-zeros. Columns are ordered clustering by clustering, label by label.
    """
    labels = relabel(labels)
    n, m = labels.shape
    w = np.ones(m) if weights is None else np.asarray(weights, dtype=np.float64)
    sizes = labels.max(axis=0) + 1
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    ok = labels != MISSING
    rows = np.broadcast_to(np.arange(n)[:, None], labels.shape)[ok]
    cols = (labels + offsets[None, :])[ok]
    vals = np.broadcast_to(w[None, :], labels.shape)[ok]
    return sp.csr_matrix((vals, (rows, cols)), shape=(n, int(sizes.sum())))


def coherent_cells(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group items with identical label rows (the cells of the meet of all partitions).

    Returns (cell (n,) int64 in 0..g−1, rows (g, m) the distinct label rows, sizes (g,)).
    Cost O(n m log n) (one lexicographic sort of the rows).
    """
    rows, cell, sizes = np.unique(labels, axis=0, return_inverse=True, return_counts=True)
    return cell.ravel().astype(np.int64), rows, sizes.astype(np.int64)


def co_association(
    labels, weights=None, *, normalize: bool = False, dtype=np.float64
) -> np.ndarray:
    """Dense co-association matrix M̃ (n×n): the weighted share of clusterings that put i and j
    together, among the clusterings that cover both.

    M̃_ij = Σ_v w_v [i, j together in v] / Σ_v w_v [i and j both labelled in v]. With no missing
    labels the denominator is Σ_v w_v, as in the paper's Eq. 10. Pairs that no clustering of
    positive weight covers get 0 (0/0), on the diagonal too: an item labelled only in
    zero-weight clusterings has a zero row; one covered with positive weight has 1 there.

    normalize=True returns D^{-1/2} M̃ D^{-1/2} with D = diag(M̃ 1) (normalised-cut form).

    Cost: O(n² m) time (the sparse n × Σk_v incidence times dense blocks of its transpose,
    written into the result); memory the n×n result in ``dtype``, plus with missing labels one more
    n×n array (the pairs' covering weight) and two n×n boolean masks (the unseen pairs and their
    negation for ``where=``): 2.25 float64 n×n arrays at peak, measured (n = 10,000 → 0.8 GB per
    float64 array). No sparse n×n intermediate: Y Yᵀ as a sparse product held a dense pattern
    (1.5 arrays' worth) before its toarray.
    """
    labels = check_labels(labels)
    w = check_weights(weights, labels.shape[1])
    root = np.sqrt(w)  # Y Yᵀ multiplies two entries of a column: √w_v each gives w_v
    Y = incidence_matrix(labels, root).astype(dtype)
    n = labels.shape[0]
    together = np.empty((n, n), dtype=dtype)
    columns = max(1, 2**19 // n)  # each block: an (n, columns) product, 4 MB in float64
    for j0 in range(0, n, columns):  # loop over column blocks
        together[:, j0 : j0 + columns] = Y @ Y[j0 : j0 + columns].T.toarray()
    observed = labels != MISSING
    if observed.all():
        together /= together.dtype.type(w.sum())
    else:
        covered = observed * root[None, :].astype(dtype)  # (n, m)
        both = covered @ covered.T
        unseen = both == 0
        with np.errstate(divide="ignore", invalid="ignore"):
            np.divide(together, both, out=together, where=~unseen)
        together[unseen] = 0.0
        del both
    if normalize:
        normalize_by_degree(together, together.sum(axis=1))
    return together


class BaseFuser(ClusterMixin, BaseEstimator):
    """Base class of every consensus fuser (scikit-learn conventions).

    Subclasses store their parameters in ``__init__`` (no work there), implement ``_fit(labels)``
    on validated labels and set ``labels_`` (n_items,) int64 in 0..n_clusters-1, plus their own
    learned attributes ending in ``_``. Every fuser takes -1 (missing) labels.
    """

    def __init__(self, n_clusters: int = 2, random_state=None):
        self.n_clusters = n_clusters
        self.random_state = random_state

    def _validate(self, labels) -> np.ndarray:
        labels = check_labels(labels)
        check_n_clusters(self.n_clusters, labels.shape[0])
        check_distinct_rows(labels, self.n_clusters, getattr(self, "weights", None))
        return labels

    def fit(self, labels, y=None):
        """Fuse the base clusterings ``labels`` (n_items, n_clusterings); returns self. A refit
        first forgets every learned attribute of the last fit, so nothing stale survives an
        option that sets fewer of them, or a refit that fails (it leaves the fuser unfitted)."""
        self._forget_fit()
        labels = self._validate(labels)
        self.n_items_, self.n_clusterings_ = labels.shape
        self._rng = check_random_state(self.random_state)
        try:
            self._fit(labels)
        except BaseException:
            self._forget_fit()
            raise
        self.labels_ = np.asarray(self.labels_, dtype=np.int64)
        return self

    def _forget_fit(self) -> None:
        """Delete every learned attribute."""
        for name in list(self._learned()):
            delattr(self, name)

    def _learned(self) -> dict:
        """The learned attributes (public names ending in ``_``) by name."""
        return {k: v for k, v in vars(self).items() if k.endswith("_") and not k.startswith("_")}

    def fit_predict(self, labels, y=None, **kwargs) -> np.ndarray:
        """Fit and return ``labels_`` (n_items,)."""
        return self.fit(labels).labels_

    def _fit(self, labels: np.ndarray) -> None:  # pragma: no cover - abstract
        raise NotImplementedError
