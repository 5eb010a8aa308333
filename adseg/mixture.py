"""The model view: a mixture of multinomials over each advertiser's binned evidence, by MAP-EM.

An advertiser i brings count vectors C_v, one per evidence kind v (binned market prices, the words
of its description); segment k emits kind v from a categorical θ_vk, so that
log p(i | k) = Σ_v w_v Σ_b s_vi C_v[i, b] log θ_vk[b], with s_vi = min(1, max_count / n_vi)
capping an advertiser's evidence (advertisers of one segment differ a little, so thousands of
samples say less than their number). Every advertiser with any evidence gets its most likely
segment; one with a description only is placed by its words. Symmetric Dirichlet priors make
the objective a penalised log-likelihood that no EM step decreases. Each advertiser's delivery
(wins at its bid) can place it too: :func:`delivery_log_likelihood`.

Derivation and measurements: docs/algorithms/model_view.md.
"""

from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp
from scipy.special import logsumexp
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.cluster import KMeans
from sklearn.utils import check_random_state

__all__ = [
    "MixtureSegmentation",
    "bin_edges",
    "binned_counts",
    "delivery_log_likelihood",
    "model_features",
]


def bin_edges(samples: list[np.ndarray], n_bins: int) -> np.ndarray:
    """Inner edges (n_bins − 1,) of ``n_bins`` bins holding about equal shares of all samples
    pooled (duplicates dropped, so fewer bins where the samples are on few values). O(N log N)."""
    values = np.concatenate([np.asarray(s, dtype=np.float64).ravel() for s in samples] or [[]])
    values = values[np.isfinite(values)]
    if values.size == 0 or n_bins < 2:
        return np.empty(0)
    inner = np.quantile(values, np.linspace(0, 1, int(n_bins) + 1)[1:-1])
    return np.unique(inner)


def binned_counts(samples: list[np.ndarray], edges: np.ndarray) -> sp.csr_matrix:
    """(n, len(edges) + 1) sparse counts of each advertiser's samples per bin (NaN dropped).
    Memory O(n · bins) at most; time O(N log bins)."""
    n = len(samples)
    sizes = np.array([np.size(s) for s in samples], dtype=np.int64)
    values = np.concatenate([np.asarray(s, dtype=np.float64).ravel() for s in samples] or [[]])
    owner = np.repeat(np.arange(n), sizes)
    ok = np.isfinite(values)
    cols = np.searchsorted(edges, values[ok], side="right")
    data = np.ones(int(ok.sum()))
    out = sp.csr_matrix((data, (owner[ok], cols)), shape=(n, edges.size + 1))
    out.sum_duplicates()
    return out


def _as_views(views) -> list[sp.csr_matrix]:
    if not isinstance(views, list | tuple) or not views:
        raise ValueError("views must be a non-empty list of (n_items, n_bins) count matrices.")
    out = [sp.csr_matrix(v, dtype=np.float64) for v in views]
    n = out[0].shape[0]
    for j, v in enumerate(out):
        if v.shape[0] != n:
            raise ValueError(f"views[{j}] has {v.shape[0]} rows; views[0] has {n}.")
        if v.nnz and (not np.all(np.isfinite(v.data)) or v.data.min() < 0):
            raise ValueError(f"views[{j}] must hold finite counts >= 0.")
    return out


def _scaled(views: list[sp.csr_matrix], weights: np.ndarray, max_count: float):
    """Each view's rows scaled by w_v · min(1, max_count / row total)."""
    out = []
    for v, w in zip(views, weights, strict=True):
        totals = np.asarray(v.sum(axis=1)).ravel()
        with np.errstate(divide="ignore"):
            s = np.where(totals > max_count, max_count / np.maximum(totals, 1e-300), 1.0)
        out.append(sp.diags(w * s) @ v)
    return out


class _Fit:
    """One EM run's state: log θ per view (K, B_v), log π (K,), responsibilities (n, K)."""

    def __init__(self, views, smoothing: float, resp: np.ndarray):
        self.views, self.smoothing = views, smoothing
        self.resp = resp
        self.m_step()

    def m_step(self) -> None:
        r = self.resp
        nk = r.sum(axis=0)
        self.log_pi = np.log((nk + 1.0) / (nk.sum() + nk.size))
        self.log_theta = []
        for v in self.views:
            stats = np.asarray((v.T @ r).T) + self.smoothing  # (K, B)
            self.log_theta.append(np.log(stats / stats.sum(axis=1, keepdims=True)))

    def log_joint(self) -> np.ndarray:
        """(n, K) log π_k + log p(i | k). Cost O(nnz · K) per view."""
        out = np.broadcast_to(self.log_pi, (self.views[0].shape[0], self.log_pi.size)).copy()
        for v, lt in zip(self.views, self.log_theta, strict=True):
            out += np.asarray(v @ lt.T)
        return out

    def objective(self, log_joint: np.ndarray) -> float:
        """Penalised log-likelihood: data term + Dirichlet log-priors (constants dropped)."""
        prior = sum(self.smoothing * lt.sum() for lt in self.log_theta) + self.log_pi.sum()
        return float(logsumexp(log_joint, axis=1).sum() + prior)

    def e_step(self) -> float:
        lj = self.log_joint()
        self.resp = np.exp(lj - logsumexp(lj, axis=1, keepdims=True))
        return self.objective(lj)


def _initial_resp(views, k: int, seed: int) -> np.ndarray:
    """Hard responsibilities from weighted k-means on the advertisers' square-root histograms
    (Hellinger geometry), each weighted by its capped evidence."""
    feats, weight = [], np.zeros(views[0].shape[0])
    for v in views:
        totals = np.asarray(v.sum(axis=1)).ravel()
        weight += totals
        with np.errstate(invalid="ignore", divide="ignore"):
            share = sp.diags(np.where(totals > 0, 1.0 / totals, 0.0)) @ v
        feats.append(share.sqrt())
    x = sp.hstack(feats).tocsr()
    has = weight > 0
    labels = np.zeros(x.shape[0], dtype=np.int64)
    n_has = int(has.sum())
    kk = min(k, n_has)
    if kk >= 1:
        km = KMeans(n_clusters=kk, n_init=1, random_state=seed)
        labels[has] = km.fit_predict(x[has], sample_weight=weight[has])
    resp = np.full((x.shape[0], k), 1e-3)
    resp[np.arange(x.shape[0]), labels] = 1.0
    return resp / resp.sum(axis=1, keepdims=True)


def _canonical_order(views) -> np.ndarray:
    """A permutation that depends on the rows' content only, not on their order: fits run in it,
    so permuting the advertisers permutes the labels and nothing else."""
    rng = np.random.RandomState(0x5EED)
    keys = []
    for v in views:
        keys.append(np.asarray(v @ rng.standard_normal(v.shape[1])).ravel())
        keys.append(np.asarray(v.sum(axis=1)).ravel())
    return np.lexsort(keys[::-1])


class MixtureSegmentation(ClusterMixin, BaseEstimator):
    """Segment items by a mixture of multinomials over several kinds of binned counts.

    Parameters
    ----------
    n_components : int, number of segments K.
    view_weights : sequence of float ≥ 0, one per view (default 1 each).
    max_count : float > 0, evidence cap per item and view (units, e.g. samples).
    smoothing : float > 0, Dirichlet pseudo-count per bin.
    n_init : int ≥ 1, k-means starts; the run with the highest objective is kept.
    max_iter : int ≥ 1, EM iterations per start. tol : relative objective change to stop.
    random_state : int, RandomState or None.

    Attributes
    ----------
    labels_ : (n,) int, the MAP segment (items with no evidence get the most common segment).
    log_theta_ : list of (K, B_v) log emission tables. log_pi_ : (K,).
    objective_ : list of the kept run's objective per iteration (non-decreasing).
    converged_ : bool. n_iter_ : int.
    The (n, K) posterior is not kept (:meth:`predict_log_proba` gives it): a fitted estimator
    is O(K · Σ B_v), and the backtest ships one per candidate K.

    Cost: O(max_iter · n_init · (nnz + n) · K) time, O(n · K + K · Σ B_v) memory; nothing n × n.
    """

    def __init__(
        self,
        n_components: int = 20,
        *,
        view_weights=None,
        max_count: float = 100.0,
        smoothing: float = 1.0,
        n_init: int = 3,
        max_iter: int = 100,
        tol: float = 1e-6,
        random_state=None,
    ):
        self.n_components = n_components
        self.view_weights = view_weights
        self.max_count = max_count
        self.smoothing = smoothing
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state

    def _check(self, views) -> tuple[list, np.ndarray]:
        views = _as_views(views)
        k = self.n_components
        if not isinstance(k, numbers.Integral) or isinstance(k, bool) or k < 1:
            raise ValueError(f"n_components must be an integer >= 1; got {k!r}.")
        if k > views[0].shape[0]:
            raise ValueError(f"n_components={k} is more than the {views[0].shape[0]} items.")
        w = np.ones(len(views)) if self.view_weights is None else self.view_weights
        w = np.asarray(w, dtype=np.float64)
        if w.shape != (len(views),) or not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError(f"view_weights must be {len(views)} finite values >= 0; got {w}.")
        for name in ("max_count", "smoothing"):
            value = getattr(self, name)
            if not (isinstance(value, numbers.Real) and np.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0; got {value!r}.")
        for name in ("n_init", "max_iter"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1; got {value!r}.")
        return views, w

    def fit(self, views, y=None) -> MixtureSegmentation:
        """views : list of (n, B_v) count matrices (dense or sparse), rows = items."""
        views, w = self._check(views)
        order = _canonical_order(views)
        scaled = [v[order] for v in _scaled(views, w, float(self.max_count))]
        rng = check_random_state(self.random_state)
        best = None
        for _ in range(int(self.n_init)):
            seed = int(rng.randint(np.iinfo(np.int32).max))
            fit = _Fit(
                scaled, float(self.smoothing), _initial_resp(scaled, self.n_components, seed)
            )
            trace, converged = self._em(fit)
            if best is None or trace[-1] > best[1][-1]:
                best = (fit, trace, converged)
        fit, trace, converged = best
        inverse = np.empty_like(order)
        inverse[order] = np.arange(order.size)
        self.log_theta_, self.log_pi_ = fit.log_theta, fit.log_pi
        self.objective_, self.converged_, self.n_iter_ = trace, converged, len(trace)
        self.labels_ = np.argmax(fit.resp, axis=1).astype(np.int64)[inverse]
        return self

    def _em(self, fit: _Fit) -> tuple[list[float], bool]:
        trace = [fit.e_step()]
        for _ in range(int(self.max_iter)):
            fit.m_step()
            trace.append(fit.e_step())
            if abs(trace[-1] - trace[-2]) <= self.tol * abs(trace[-2]):
                return trace, True
        return trace, False

    def predict_log_proba(self, views) -> np.ndarray:
        """(n, K) log posterior of new items' segments under the fitted tables."""
        views = _as_views(views)
        w = np.ones(len(views)) if self.view_weights is None else np.asarray(self.view_weights)
        lj = np.broadcast_to(self.log_pi_, (views[0].shape[0], self.log_pi_.size)).copy()
        for v, lt in zip(_scaled(views, w, float(self.max_count)), self.log_theta_, strict=True):
            lj += np.asarray(v @ lt.T)
        return lj - logsumexp(lj, axis=1, keepdims=True)


def model_features(
    win_samples: list[np.ndarray],
    descriptions,
    *,
    n_bins: int = 40,
    edges: np.ndarray | None = None,
) -> tuple[list[sp.csr_matrix], np.ndarray]:
    """The model view's evidence: [(n, B) binned market-price counts, (n, V) word counts of the
    descriptions] and the bin edges used (``n_bins`` equal-share bins of the pooled samples
    unless ``edges`` is given). Words: lower-case tokens of two letters or more, English stop
    words dropped, those of a single description dropped; an empty or missing description
    brings no words. Memory O(N + n · words); cost O(N log n_bins + text length)."""
    from sklearn.feature_extraction.text import CountVectorizer

    if edges is None:
        edges = bin_edges(win_samples, n_bins)
    prices = binned_counts(win_samples, edges)
    texts = ["" if t is None else str(t) for t in descriptions]
    try:
        words = CountVectorizer(stop_words="english", min_df=2).fit_transform(texts)
    except ValueError:  # no word in two descriptions: the text brings no evidence
        words = sp.csr_matrix((len(texts), 1))
    return [prices, sp.csr_matrix(words, dtype=np.float64)], edges


def segment_win_rates(log_theta: np.ndarray, edges: np.ndarray, top: float, bids) -> np.ndarray:
    """(n, K) win rate F_k(b_i) of each segment at each bid: the share of the segment's binned
    market prices below the bid, linear inside a bin (the first bin starts at 0, the last ends
    at ``top``, the highest pooled price). log_theta : (K, B) log bin shares with B =
    len(edges) + 1; bids : (n,) eCPM. Cost O(n · K)."""
    theta = np.exp(np.asarray(log_theta, dtype=np.float64))
    cum = np.concatenate([np.zeros((theta.shape[0], 1)), np.cumsum(theta, axis=1)], axis=1)
    bounds = np.concatenate([[0.0], np.asarray(edges, dtype=np.float64), [max(top, 0.0)]])
    bids = np.asarray(bids, dtype=np.float64)
    j = np.clip(np.searchsorted(bounds, bids, side="right") - 1, 0, theta.shape[1] - 1)
    width = bounds[j + 1] - bounds[j]
    frac = np.clip((bids - bounds[j]) / np.where(width > 0, width, 1.0), 0.0, 1.0)
    return (cum[:, j] + theta[:, j] * frac).T


def delivery_log_likelihood(
    log_theta: np.ndarray,
    edges: np.ndarray,
    top: float,
    requests,
    wins,
    bids,
    max_count: float,
) -> np.ndarray:
    """(n, K) log-likelihood of each advertiser's delivery under each segment: its ``wins``
    (impressions) out of ``requests`` (bid requests) at its bid are binomial with the segment's
    win rate at that bid (:func:`segment_win_rates`), the evidence capped at ``max_count``
    requests as the samples are (``max_count`` 0: no delivery evidence, all zeros). An
    advertiser without requests gets 0 for every segment. Win rates are clipped to
    [1e-3, 1 − 1e-3]. Cost O(n · K)."""
    requests = np.asarray(requests, dtype=np.float64)
    wins = np.clip(np.asarray(wins, dtype=np.float64), 0.0, requests)
    out = np.zeros((requests.size, np.shape(log_theta)[0]))
    if max_count <= 0:
        return out
    rate = np.clip(segment_win_rates(log_theta, edges, top, bids), 1e-3, 1 - 1e-3)
    scale = np.minimum(1.0, max_count / np.maximum(requests, 1.0))[:, None]
    out += scale * (wins[:, None] * np.log(rate) + (requests - wins)[:, None] * np.log1p(-rate))
    return out
