"""The clustering-ensemble benchmark protocol shared by every fuser's benchmark.

A protocol draws several *ensembles* (label matrices) from a data set — k-means runs on its
features, or columns of a precomputed pool — shuffles the items with a recorded seed, runs each
fuser on each ensemble and scores it against the classes. Functions here return pandas frames;
scripts under benchmarks/ and ``adseg bench`` write them to files.
"""

from __future__ import annotations

import os
import platform
import re
import time
import tracemalloc
import warnings
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.utils import check_random_state

from adseg.metrics import ari, clustering_accuracy, nmi
from adseg_research.ensemble import kmeans_ensemble

HAND_WRITTEN = re.compile(
    r"^## (?:Analysis|Addendum\b.*|.*\((?:hand-written|hand-added|written by hand)\b.*)$",
    re.MULTILINE | re.IGNORECASE,
)
"""The heading of a results file's first hand-written section: it and all after it are kept."""


def write_results(path: Path, generated: str) -> None:
    """Write a benchmark's generated markdown to ``path``, keeping the hand-written tail of the
    file it replaces: everything from the first ``## …`` heading that :data:`HAND_WRITTEN`
    matches ("## Analysis", "## Notes (hand-written)", "## … (hand-added)", "## Discussion
    (written by hand …)", "## Addendum …"). A re-run thus refreshes the tables without deleting
    the reading that was written about them."""
    path = Path(path)
    tail = ""
    if path.exists():
        old = path.read_text(encoding="utf-8")
        if match := HAND_WRITTEN.search(old):
            tail = old[match.start() :]
    text = generated.rstrip("\n") + "\n"
    if tail and not HAND_WRITTEN.search(text):
        text += "\n" + tail
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def recorded_command(script: str, args: Sequence[str]) -> str:
    """The command line that reproduces this run, as the results files record it: the OpenBLAS
    settings this process ran with (its thread count, and a kernel forced by
    ``OPENBLAS_CORETYPE`` / ``OPENBLAS_L2_SIZE``, which some machines set and which changes the
    GEMM speed) and its niceness (not an assumed ``nice -n 10``), then
    ``.venv/bin/python benchmarks/<script> <args>`` (shell-quoted)."""
    import shlex

    niceness = os.nice(0)
    parts = [
        f"{name}={shlex.quote(os.environ[name])}"
        for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS")
        if os.environ.get(name)
    ]
    parts += [f"nice -n {niceness}"] if niceness else []
    parts += [f".venv/bin/python benchmarks/{script}", shlex.join(args)]
    return " ".join(p for p in parts if p)


def machine_summary() -> str:
    """One line naming the machine a benchmark ran on: platform, CPUs, memory, Python, the
    1/5/15-minute load averages at the call (the machines here are shared; timings need it)
    and the BLAS kernels (:func:`blas_kernel`)."""
    try:
        memory = f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        memory = "? GiB"
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{platform.platform()}, {os.cpu_count()} CPUs, {memory} memory, "
        f"Python {platform.python_version()}, load {load}, BLAS {blas_kernel()}"
    )


def blas_kernel() -> str:
    """The BLAS libraries this process calls, each with the kernel it picked (threadpoolctl):
    a GEMM-bound timing depends on it (OpenBLAS's Haswell kernels run float32 GEMMs at about
    two thirds the speed of its SkylakeX ones on an AVX-512 CPU)."""
    import numpy  # noqa: F401 - loads numpy's BLAS, so that threadpoolctl finds it
    from threadpoolctl import threadpool_info

    found = [
        f"{i.get('internal_api')} {i.get('version')} ({i.get('architecture')})"
        for i in threadpool_info()
        if i.get("user_api") == "blas"
    ]
    return ", ".join(found) or "unknown"


FuserFactory = Callable[[int, int], object]
"""(n_clusters, seed) → an unfitted fuser with fit_predict(labels)."""


@dataclass(frozen=True)
class Ensemble:
    """One repetition: base clusterings (n, m) and classes (n,), already in the order fused."""

    repetition: int
    labels: np.ndarray
    y: np.ndarray
    seed: int


def shuffle_items(y: np.ndarray, labels: np.ndarray, seed: int | None):
    """Permute items (rows) with a seeded permutation; seed None keeps the given order.
    Returns (y, labels, permutation)."""
    if seed is None:
        perm = np.arange(y.size)
    else:
        perm = np.random.default_rng(seed).permutation(y.size)
    return y[perm], labels[perm], perm


def pool_ensembles(
    members: np.ndarray,
    y: np.ndarray,
    *,
    n_repetitions: int,
    size: int,
    seed: int,
    shuffle: bool = True,
    disjoint: bool = False,
) -> list[Ensemble]:
    """Draw ``size`` columns of a precomputed pool per repetition (without replacement inside a
    draw; ``disjoint=True`` splits the pool into consecutive disjoint groups after one shuffle of
    the columns, as the 5 × 20 split of a 100-column pool). Items are shuffled per repetition with
    seed + repetition when ``shuffle``."""
    rng = check_random_state(seed)
    n_cols = members.shape[1]
    if disjoint and n_repetitions * size > n_cols:
        raise ValueError(f"{n_repetitions} × {size} disjoint columns exceed the pool's {n_cols}.")
    order = rng.permutation(n_cols)
    out = []
    for r in range(n_repetitions):
        cols = order[r * size : (r + 1) * size] if disjoint else rng.choice(n_cols, size, False)
        rep_seed = seed + r
        yy, ll, _ = shuffle_items(y, members[:, cols], rep_seed if shuffle else None)
        out.append(Ensemble(r, ll, yy, rep_seed))
    return out


def kmeans_ensembles(
    X,
    y: np.ndarray,
    *,
    n_repetitions: int,
    size: int,
    n_clusters: int,
    seed: int,
    shuffle: bool = True,
    init: str = "k-means++",
) -> list[Ensemble]:
    """``n_repetitions`` ensembles of ``size`` k-means runs each (different seeds per run), e.g.
    200 runs split 10 × 20, or 40 runs × 10 repetitions. Items are shuffled per repetition.
    ``init`` is k-means' initialisation (``adseg_research.ensemble.kmeans_ensemble``)."""
    out = []
    for r in range(n_repetitions):
        rep_seed = seed + r
        labels = kmeans_ensemble(X, size, n_clusters, random_state=rep_seed, init=init)
        yy, ll, _ = shuffle_items(y, labels, rep_seed if shuffle else None)
        out.append(Ensemble(r, ll, yy, rep_seed))
    return out


ADVERSARIES = ("none", "random", "merged", "split")


def partial_view_ensemble(
    sizes: Sequence[int],
    *,
    n_good: int,
    coverage: float,
    adversary: str = "random",
    n_adversaries: int = 1,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """A synthetic ensemble of partial views plus adversarial columns: (y (n,), labels (n, V)).

    ``n_good`` columns are the true partition restricted to a random share ``coverage`` of the
    items (-1 elsewhere, drawn independently per column: a view that leaves out the advertisers
    it has no data for). Then ``n_adversaries`` columns that label *every* item (V = n_good +
    n_adversaries), each drawn afresh: ``"random"`` uniform labels in 0..K-1; ``"merged"`` the
    truth with two random classes merged; ``"split"`` the truth with one random class cut in two
    random halves; ``"none"`` adds nothing. Deterministic given ``seed``. O(n V).
    """
    if adversary not in ADVERSARIES:
        raise ValueError(f"adversary must be one of {ADVERSARIES}; got {adversary!r}.")
    if not 0.0 < coverage <= 1.0:
        raise ValueError(f"coverage must be in (0, 1]; got {coverage!r}.")
    n_adv = 0 if adversary == "none" else n_adversaries
    if n_good < 0 or n_adv < 0 or n_good + n_adv < 1:
        raise ValueError(
            f"need at least one column; got n_good={n_good}, n_adversaries={n_adversaries}."
        )
    if adversary == "merged" and len(sizes) < 2:
        raise ValueError("adversary='merged' needs at least two classes.")
    rng = np.random.default_rng(seed)
    k = len(sizes)
    y = np.repeat(np.arange(k), sizes)
    columns = [np.where(rng.random(y.size) < coverage, y, -1) for _ in range(n_good)]
    for _ in range(n_adv):
        if adversary == "random":
            columns.append(rng.integers(0, k, y.size))
            continue
        z = y.copy()
        if adversary == "merged":
            a, b = rng.choice(k, 2, replace=False)
            z[z == b] = a
        else:
            members = rng.permutation(np.flatnonzero(y == rng.integers(k)))
            z[members[: members.size // 2]] = k
        columns.append(z)
    return y, np.column_stack(columns)


def adversary_weight(labels: np.ndarray, column: int = -1) -> float:
    """Mean share of one column in the co-association M̃ over the item pairs it labels: M̃_ij
    averages the columns that label both i and j, so a column's weight on a pair is
    1 / (number of such columns). 1 / V when every column labels every item. O(n² V) time;
    one n×n float64 and one n×n bool array."""
    covered = (np.asarray(labels) >= 0).astype(np.float64)
    counts = covered @ covered.T
    mine = np.outer(covered[:, column], covered[:, column]) > 0
    np.fill_diagonal(mine, False)
    return float((1.0 / counts[mine]).mean())


def evaluate(
    ensembles: Iterable[Ensemble],
    fusers: dict[str, FuserFactory],
    n_clusters: int,
    *,
    measure_memory: bool = False,
    on_error: str = "record",
    isolate: bool = False,
    timeout: float | None = None,
    max_repetitions: Mapping[str, int] | None = None,
    skip: Container[tuple[int, str]] = (),
) -> pd.DataFrame:
    """Run every fuser on every ensemble. One row per (repetition, method) with acc, nmi, ari,
    seconds (wall), peak_mib and error. Also a 'base' row per repetition: the mean score of the
    ensemble's own columns (the 'KM' of the papers). on_error='record' keeps going and stores the
    exception text; 'raise' re-raises.

    Memory: ``measure_memory`` in-process, peak_mib = the Python-heap peak from tracemalloc
    (numpy arrays included, LAPACK/ARPACK work arrays not); ``isolate`` runs each fit in a forked
    child (``isolated.run_isolated``): peak_mib = the child's peak resident MiB above its resident
    MiB before the fit, and a fit longer than ``timeout`` seconds is killed and recorded as a
    failure, the method's later repetitions as "skipped after a timeout". ``max_repetitions``:
    method → run it on the first N ensembles only (no rows for the others); ``skip``: (repetition,
    method) pairs not to run (no rows; a benchmark completing stored rows)."""
    rows = []
    timed_out: dict[str, str] = {}
    for ens in ensembles:
        base = [_scores(ens.y, ens.labels[:, j]) for j in range(ens.labels.shape[1])]
        rows.append(
            {
                "repetition": ens.repetition,
                "method": "base (mean)",
                "seconds": np.nan,
                **{k: float(np.mean([b[k] for b in base])) for k in ("acc", "nmi", "ari")},
            }
        )
        for name, factory in fusers.items():
            if max_repetitions and ens.repetition >= max_repetitions.get(name, ens.repetition + 1):
                continue
            if (ens.repetition, name) in skip:
                continue
            row = {"repetition": ens.repetition, "method": name}
            if name in timed_out:
                rows.append(row | {"error": f"skipped after a timeout ({timed_out[name]})"})
                continue
            if isolate:
                row |= _isolated_fit(factory, ens, n_clusters, timeout)
                if row.get("error", "").startswith("timeout"):
                    timed_out[name] = f"repetition {ens.repetition}: {row['error']}"
            else:
                row |= _in_process_fit(factory, ens, n_clusters, measure_memory, on_error)
            rows.append(row)
    return pd.DataFrame(rows)


def _in_process_fit(
    factory: FuserFactory, ens: Ensemble, n_clusters: int, measure_memory: bool, on_error: str
) -> dict:
    """One fit here: scores, seconds, tracemalloc peak_mib when ``measure_memory``, or error."""
    row: dict = {}
    try:
        fuser = factory(n_clusters, ens.seed)
        if measure_memory:
            tracemalloc.start()
        t0 = time.perf_counter()
        pred = fuser.fit_predict(ens.labels)
        row["seconds"] = time.perf_counter() - t0
        if measure_memory:
            row["peak_mib"] = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
        row.update(_scores(ens.y, pred))
    except Exception as exc:  # a benchmark records failures instead of stopping
        if tracemalloc.is_tracing():
            tracemalloc.stop()
        if on_error == "raise":
            raise
        row["error"] = f"{type(exc).__name__}: {exc}"
    return row


def _isolated_fit(
    factory: FuserFactory, ens: Ensemble, n_clusters: int, timeout: float | None
) -> dict:
    """One fit in a forked child: scores, seconds, peak_mib (resident, above the start), or the
    failure's text (exception, crash or timeout) with the seconds waited."""
    from adseg_research.isolated import run_isolated

    def fit() -> np.ndarray:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a solver's notes would interleave with progress
            return np.asarray(factory(n_clusters, ens.seed).fit_predict(ens.labels))

    res = run_isolated(fit, timeout)
    row = {"seconds": res["seconds"], "peak_mib": res["peak_mib"]}
    if res["status"] == "ok":
        row.update(_scores(ens.y, res["result"]))
    else:
        row["error"] = res["error"]
    return row


def summarize(
    results: pd.DataFrame, metrics: Sequence[str] = ("acc", "nmi", "ari")
) -> pd.DataFrame:
    """Mean ± std per method (columns '<metric>_mean', '<metric>_std', 'seconds_mean', 'runs')."""
    ok = results[results.get("error", pd.Series(index=results.index)).isna()]
    agg = {}
    for m in metrics:
        agg[f"{m}_mean"] = (m, "mean")
        agg[f"{m}_std"] = (m, lambda s: float(np.std(s)))
    agg["seconds_mean"] = ("seconds", "mean")
    agg["runs"] = ("repetition", "count")
    return ok.groupby("method", sort=False).agg(**agg).reset_index()


def _scores(y, pred) -> dict[str, float]:
    return {"acc": clustering_accuracy(y, pred), "nmi": nmi(y, pred), "ari": ari(y, pred)}
