"""Seed 003's Table 2 protocol: k-means base clusterings fused by KC, L2CC and RCC, scored by ACC.

Protocol (spec rcc.md §6): for each data set, ``n_repetitions`` ensembles of ``n_clusterings``
k-means runs (k = the true class count, one k-means++ start per run, each run its own seed);
items shuffled per repetition with a recorded seed (``bench.kmeans_ensembles``: repetition r uses
seed + r for both the k-means seeds and the item permutation); every fuser gets the very same
label matrix; ACC = Hungarian clustering accuracy. "k-means" is the mean ACC of the ensemble's
own base clusterings.

Features. Dense UCI sets: ``preprocessing="raw"`` (as distributed) or ``"standardized"``
(zero mean, unit variance per feature; the paper states none, and k-means 0.68 on Wine suggests
raw). Text sets are TF-IDF with unit-length rows in both modes (standardising sparse term
weights is not meaningful): ``cstr`` as distributed; ``reuters10`` from the raw text: a random
subsample of 2,900 documents (seeded; the paper's Reuters is 2900×1000, 10 largest categories),
``TfidfVectorizer(max_features=1000, stop_words="english", sublinear_tf=True)``.

Entry point for ``adseg bench consensus``::

    run_table2(datasets=TABLE2_DATASETS, n_repetitions=10, n_clusterings=40, seed=0,
               preprocessing="raw", data_dir=None)
        -> pandas.DataFrame                              # one row per (set, repetition, method)
    format_table2(frame) -> str                          # Markdown, paper's numbers beside ours
    format_table2_report(frame) -> str                   # + NMI, seconds, peak MiB, failures

``all_methods(peers_src)`` adds adseg's other registered fusers (trce, sccbg, rcec, lta) and, given
PCE's source folder, PCE's four peers (``adseg_research.peers``) to the default columns.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from adseg.consensus.l2 import KC, L2CC
from adseg.consensus.rcc import RCC
from adseg_research.bench import Ensemble, evaluate, kmeans_ensembles
from adseg_research.datasets import REUTERS10_SUFFIX, dataset_path, load_dataset, load_reuters10

__all__ = [
    "PAPER_TABLE2",
    "TABLE2_DATASETS",
    "TEXT_DATASETS",
    "all_methods",
    "default_methods",
    "format_failures",
    "format_table2",
    "format_table2_report",
    "format_set_means",
    "load_table2_features",
    "run_table2",
    "table2_ensembles",
]

TABLE2_DATASETS = ("cstr", "glass", "ionosphere", "iris", "reuters10", "soybean", "wine", "zoo")
# TF-IDF with unit rows in every preprocessing mode: one run serves both
TEXT_DATASETS = ("cstr", "reuters10")
PREPROCESSING = ("raw", "standardized")
REUTERS_N_DOCS = 2900
REUTERS_N_TERMS = 1000

PAPER_COLUMNS = ("k-means", "KC", "CSPA", "HPGA", "NMFC", "WCC", "L2CC", "RCC", "ES", "CorC")
PAPER_TABLE2: dict[str, tuple[float, ...]] = {
    # seed 003, Table 2 (ACC), columns as PAPER_COLUMNS
    "cstr": (0.45, 0.38, 0.50, 0.62, 0.56, 0.64, 0.61, 0.65, 0.64, 0.61),
    "glass": (0.38, 0.45, 0.43, 0.40, 0.49, 0.49, 0.49, 0.52, 0.52, 0.50),
    "ionosphere": (0.70, 0.71, 0.68, 0.52, 0.71, 0.71, 0.71, 0.72, 0.71, 0.70),
    "iris": (0.83, 0.72, 0.86, 0.69, 0.89, 0.89, 0.86, 0.89, 0.88, 0.86),
    "reuters10": (0.45, 0.44, 0.43, 0.44, 0.43, 0.44, 0.43, 0.45, 0.44, 0.43),
    "soybean": (0.72, 0.82, 0.70, 0.81, 0.89, 0.91, 0.76, 1.00, 0.98, 0.95),
    "wine": (0.68, 0.68, 0.69, 0.52, 0.70, 0.72, 0.65, 0.96, 0.84, 0.89),
    "zoo": (0.61, 0.59, 0.56, 0.58, 0.62, 0.70, 0.80, 0.84, 0.79, 0.82),
}

FuserFactory = Callable[[int, int], object]


def default_methods() -> dict[str, FuserFactory]:
    """The fusers of the table: KC, l2 and rcc at their defaults (l2: the normalised
    co-association; rcc: ``normalize="auto"``, which fits its normalised and its equal-l1-mass
    forms and keeps the one with the higher ANMI), the unnormalised forms (the paper's Eq. 10 M̃)
    as the evidence for normalising, and rcc's two forms alone: ``normalize=True`` (the fast
    form) and the equal-l1-mass form D^-1 M̃ D^-1 (``normalize="l1"``)."""
    return {
        "KC": lambda k, s: KC(k, random_state=s),
        "l2": lambda k, s: L2CC(k, random_state=s),
        "rcc": lambda k, s: RCC(k, random_state=s),
        "l2 (unnormalised)": lambda k, s: L2CC(k, normalize=False, random_state=s),
        "rcc (unnormalised)": lambda k, s: RCC(k, normalize=False, random_state=s),
        "rcc (normalised)": lambda k, s: RCC(k, normalize=True, random_state=s),
        "rcc (l1)": lambda k, s: RCC(k, normalize="l1", random_state=s),
    }


EXTRA_FUSERS = ("trce", "sccbg", "rcec", "lta")
"""adseg's registered fusers beyond the default columns, selectable by name (``--method``)."""


def all_methods(peers_src: str | Path | None = None) -> dict[str, FuserFactory]:
    """Every selectable column: :func:`default_methods`, then adseg's fusers of
    :data:`EXTRA_FUSERS` at their defaults, then, when ``peers_src`` (PCE's ``src`` folder) is
    given, PCE's "PCE TRCE", "ECPCS-MC", "LWEA" and "U-SENC" (``peers.pce_factories``: a folder
    that is not PCE's raises FileNotFoundError / ValueError naming it, before any fit)."""
    from adseg.consensus import FUSERS

    methods = default_methods()
    for name in EXTRA_FUSERS:
        methods[name] = lambda k, s, cls=FUSERS[name]: cls(n_clusters=k, random_state=s)
    if peers_src is not None:
        from adseg_research.peers import pce_factories

        methods |= pce_factories(peers_src)
    return methods


def check_table2_name(name: str, data_dir: str | Path | None = None) -> None:
    """Refuse a set ``load_table2_features`` cannot read, before any work (ValueError for a
    path-like name, FileNotFoundError for a missing file): reuters10 is its texts, the rest
    ``NAME.npz``, in ``data_dir`` (None: ``datasets.find_datasets_dir``)."""
    dataset_path(name, REUTERS10_SUFFIX if name == "reuters10" else ".npz", data_dir=data_dir)


def load_table2_features(
    name: str, preprocessing: str = "raw", seed: int = 0, data_dir: str | Path | None = None
) -> tuple[np.ndarray | sp.csr_matrix, np.ndarray]:
    """Features and 0-based classes of one Table 2 set from ``data_dir`` (None:
    ``datasets.find_datasets_dir``), preprocessed as the module docstring says.
    Returns (X (n, d) dense or CSR, y (n,))."""
    if preprocessing not in PREPROCESSING:
        raise ValueError(f"preprocessing must be one of {PREPROCESSING}; got {preprocessing!r}.")
    if name == "reuters10":
        from sklearn.feature_extraction.text import TfidfVectorizer

        texts, y = load_reuters10(data_dir)
        rng = np.random.default_rng(seed)
        keep = np.sort(rng.choice(len(texts), size=min(REUTERS_N_DOCS, len(texts)), replace=False))
        vec = TfidfVectorizer(max_features=REUTERS_N_TERMS, stop_words="english", sublinear_tf=True)
        X = vec.fit_transform([texts[i] for i in keep]).tocsr()
        _, y = np.unique(y[keep], return_inverse=True)
        return X, y.astype(np.int64)
    ds = load_dataset(name, data_dir)
    if ds.X is None:
        raise ValueError(f"{name!r} has no feature matrix (Table 2 needs features).")
    X = ds.X
    if sp.issparse(X):
        from sklearn.preprocessing import normalize

        return normalize(X.tocsr()), ds.y  # text: unit-length TF-IDF rows in both modes
    if preprocessing == "standardized":
        from sklearn.preprocessing import StandardScaler

        X = StandardScaler().fit_transform(X)
    return np.asarray(X, dtype=np.float64), ds.y


def table2_ensembles(
    name: str,
    *,
    n_repetitions: int = 10,
    n_clusterings: int = 40,
    seed: int = 0,
    preprocessing: str = "raw",
    kmeans_init: str = "k-means++",
    data_dir: str | Path | None = None,
) -> tuple[list[Ensemble], int]:
    """The base clusterings of one set (read from ``data_dir``, None:
    ``datasets.find_datasets_dir``): ``n_repetitions`` ensembles of ``n_clusterings`` k-means
    runs (initialised by ``kmeans_init``: "k-means++" or "random"), items shuffled with
    seed + repetition. Returns (ensembles, n_classes)."""
    X, y = load_table2_features(name, preprocessing, seed, data_dir)
    k = int(np.unique(y).size)
    ens = kmeans_ensembles(
        X,
        y,
        n_repetitions=n_repetitions,
        size=n_clusterings,
        n_clusters=k,
        seed=seed,
        init=kmeans_init,
    )
    return ens, k


def run_table2(
    datasets: Iterable[str] = TABLE2_DATASETS,
    n_repetitions: int = 10,
    n_clusterings: int = 40,
    seed: int = 0,
    preprocessing: str | Iterable[str] = "raw",
    methods: Mapping[str, FuserFactory] | None = None,
    progress: Callable[[str], None] | None = None,
    external: Callable[[list[Ensemble], int], pd.DataFrame] | None = None,
    kmeans_init: str = "k-means++",
    data_dir: str | Path | None = None,
    isolate: bool = False,
    timeout: float | None = None,
    max_repetitions: Mapping[str, int] | None = None,
    skip: Container[tuple[int, str]] = (),
) -> pd.DataFrame:
    """Run the Table 2 protocol.

    Parameters
    ----------
    datasets : names from TABLE2_DATASETS (any feature set of shared/datasets works).
    n_repetitions, n_clusterings : ensembles per set and k-means runs per ensemble.
    seed : base seed; repetition r uses seed + r (k-means seeds and the item shuffle).
    preprocessing : "raw", "standardized", or several of them.
    methods : name → factory(n_clusters, seed) of fusers; default ``default_methods()``.
    progress : optional callback receiving one line per finished (set, preprocessing).
    kmeans_init : "k-means++" (default) or "random", the base k-means runs' initialisation.
    data_dir : the benchmark data folder; None: ``datasets.find_datasets_dir()``.
    isolate, timeout, max_repetitions, skip : as ``bench.evaluate``: each fit in a forked child
        with its peak resident memory (peak_mib) and a per-fit timeout; a method on the first N
        repetitions only; (repetition, method) pairs not run (every set of the call).
    external : optional callback (ensembles, n_clusters) → frame with the columns of
        ``bench.evaluate`` (repetition, method, acc, nmi, ari, seconds, error), for methods run
        outside this process on the very same base clusterings (the peer library).

    Returns
    -------
    DataFrame, one row per (dataset, preprocessing, repetition, method) with columns dataset,
    preprocessing, n_items, n_classes, repetition, seed, method ("k-means" = mean of the base
    clusterings), acc, nmi, ari, seconds, peak_mib (when measured), error.
    """
    methods = dict(default_methods() if methods is None else methods)
    preps = [preprocessing] if isinstance(preprocessing, str) else list(preprocessing)
    frames = []
    for name in datasets:
        for prep in preps:
            ens, k = table2_ensembles(
                name,
                n_repetitions=n_repetitions,
                n_clusterings=n_clusterings,
                seed=seed,
                preprocessing=prep,
                kmeans_init=kmeans_init,
                data_dir=data_dir,
            )
            frame = evaluate(
                ens,
                methods,
                k,
                isolate=isolate,
                timeout=timeout,
                max_repetitions=max_repetitions,
                skip=skip,
            )
            if external is not None:
                frame = pd.concat([frame, external(ens, k)], ignore_index=True)
            frame["method"] = frame["method"].replace({"base (mean)": "k-means"})
            frame.insert(0, "dataset", name)
            frame.insert(1, "preprocessing", prep)
            frame.insert(2, "n_items", ens[0].y.size)
            frame.insert(3, "n_classes", k)
            frame["seed"] = frame["repetition"] + seed
            frames.append(frame)
            if progress is not None:
                means = frame.groupby("method", sort=False)["acc"].mean()
                progress(f"{name} ({prep}): " + ", ".join(f"{m} {v:.3f}" for m, v in means.items()))
    out = pd.concat(frames, ignore_index=True)
    if "error" not in out:
        out["error"] = None
    return out


METRICS = {"acc": "ACC", "nmi": "NMI", "seconds": "seconds per fit", "peak_mib": "peak MiB"}
"""The per-fit measures of a Table 2 frame (column → name in the tables)."""
_SUMMARY = {"acc": ("acc_mean", "acc_std"), "nmi": ("nmi_mean", "nmi_std")}
_SUMMARY |= {"seconds": ("seconds", None), "peak_mib": ("peak_mib", None)}


def summarize_table2(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, preprocessing, method): mean and population std of ACC and NMI, mean seconds
    and mean peak_mib over the fits that ran (NaN when none did), ``runs`` (fits that ran) and
    ``fits`` (the repetitions of the set: a failed fit and a repetition not run both count)."""
    keys = ["dataset", "preprocessing", "method"]
    data = frame.copy()
    for col in ("nmi", "seconds", "peak_mib"):
        if col not in data:
            data[col] = np.nan
    ok = data[data["error"].isna()] if "error" in data else data
    summ = ok.groupby(keys, sort=False).agg(
        acc_mean=("acc", "mean"),
        acc_std=("acc", lambda s: float(np.std(s))),
        nmi_mean=("nmi", "mean"),
        nmi_std=("nmi", lambda s: float(np.std(s))),
        seconds=("seconds", "mean"),
        peak_mib=("peak_mib", "mean"),
        runs=("acc", "size"),
    )
    data["fits"] = data.groupby(keys[:2])["repetition"].transform("nunique")
    out = data.groupby(keys, sort=False)["fits"].max().to_frame().join(summ)
    out["runs"] = out["runs"].fillna(0).astype(int)
    return out.reset_index()


def _cell(entry: pd.Series, metric: str, digits: int) -> str:
    """One table cell: mean (± std for ACC/NMI); "(runs/repetitions)" when some repetitions did
    not run or failed; "failed (0/repetitions)" when none ran; "—" when there is nothing to show
    (the k-means row's seconds)."""
    if entry["runs"] == 0:
        return f"failed (0/{entry['fits']})"
    mean_col, std_col = _SUMMARY[metric]
    mu = entry[mean_col]
    if not np.isfinite(mu):
        text = "—"
    elif std_col is not None:
        text = f"{mu:.{digits}f} ± {entry[std_col]:.{digits}f}"
    else:
        places = 0 if metric == "peak_mib" else 1 if mu >= 10 else 2  # seconds
        text = f"{mu:.{places}f}"
    return text if entry["runs"] == entry["fits"] else f"{text} ({entry['runs']}/{entry['fits']})"


def format_table2(
    frame: pd.DataFrame,
    *,
    paper: bool = True,
    methods: Iterable[str] | None = None,
    digits: int = 3,
    metric: str = "acc",
) -> str:
    """Markdown table: one row per (dataset, preprocessing), ``metric`` per method ("acc" and
    "nmi": mean ± std over the repetitions; "seconds", "peak_mib": the mean), with
    "(runs/repetitions)" after a cell where some did not run (failed, or not asked:
    ``max_repetitions``) and "failed (0/N)" for one where none did; for ACC
    the paper's k-means / KC / L2CC / RCC beside them (``paper``). For ACC and NMI a final row
    holds the mean over the sets (one per preprocessing when the frame has several, since a mean
    over raw and standardised rows together would count each set twice), marked "(k/N sets)"
    when a method has a value on only k of the N sets."""
    summ = summarize_table2(frame)
    if methods is None:
        methods = list(dict.fromkeys(summ["method"]))
    methods = list(methods)
    paper = paper and metric == "acc"
    paper_cols = ("k-means", "KC", "L2CC", "RCC")
    head = ["dataset", "prep", "n"] + methods
    if paper:
        head += [f"paper {c}" for c in paper_cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    preps = list(dict.fromkeys(summ["preprocessing"]))
    means = {p: {m: [] for m in methods} for p in preps}
    sets: dict[str, list[str]] = {p: [] for p in preps}
    mean_col = _SUMMARY[metric][0]
    for (name, prep), part in summ.groupby(["dataset", "preprocessing"], sort=False):
        sets[prep].append(name)
        row = [name, prep, str(int(frame.loc[frame["dataset"] == name, "n_items"].iloc[0]))]
        by = part.set_index("method")
        for m in methods:
            row.append(_cell(by.loc[m], metric, digits) if m in by.index else "—")
            if m in by.index and np.isfinite(by.loc[m, mean_col]):
                means[prep][m].append(float(by.loc[m, mean_col]))
        if paper:
            vals = PAPER_TABLE2.get(name)
            for c in paper_cols:
                row.append(f"{vals[PAPER_COLUMNS.index(c)]:.2f}" if vals else "—")
        lines.append("| " + " | ".join(row) + " |")
    if metric not in ("acc", "nmi"):
        return "\n".join(lines)
    for prep in preps:
        label = "**mean**" if len(preps) == 1 else f"**mean ({prep})**"
        n_sets = len(sets[prep])
        foot = [label, "", ""] + [
            (
                f"**{np.mean(v):.{digits}f}**"
                + ("" if len(v) == n_sets else f" ({len(v)}/{n_sets} sets)")
            )
            if v
            else "—"
            for v in means[prep].values()
        ]
        if paper:
            for c in paper_cols:
                vals = [
                    PAPER_TABLE2[n][PAPER_COLUMNS.index(c)] for n in sets[prep] if n in PAPER_TABLE2
                ]
                foot.append(f"{np.mean(vals):.3f}" if vals else "—")
        lines.append("| " + " | ".join(foot) + " |")
    return "\n".join(lines)


def format_table2_report(
    frame: pd.DataFrame, *, methods: Iterable[str] | None = None, paper: bool = True
) -> str:
    """The markdown of ``adseg bench consensus``: the ACC table (:func:`format_table2`, paper
    columns beside it), then NMI, seconds per fit and peak MiB per fit (when measured), then the
    failures, one line per (set, preprocessing, method, error) with its repetitions."""
    methods = None if methods is None else list(methods)
    parts = [format_table2(frame, methods=methods, paper=paper)]
    for metric in ("nmi", "seconds", "peak_mib"):
        if metric in frame and frame[metric].notna().any():
            table = format_table2(frame, methods=methods, paper=False, metric=metric)
            parts += [f"{METRICS[metric]}:", table]
    parts += ["Failures:", format_failures(frame)]
    return "\n\n".join(parts)


def format_failures(frame: pd.DataFrame) -> str:
    """Markdown list of the failed fits, one line per (set, preprocessing, method, error) with the
    repetitions it hit; "none." when every fit ran."""
    if "error" not in frame or frame["error"].isna().all():
        return "none."
    failed = frame[frame["error"].notna()]
    lines = []
    for (name, prep, method, error), part in failed.groupby(
        ["dataset", "preprocessing", "method", "error"], sort=False
    ):
        reps = ", ".join(str(int(r)) for r in part["repetition"])
        text = str(error).replace("\n", " ")
        lines.append(f"* {name} ({prep}), {method}, repetition(s) {reps}: {text}")
    return "\n".join(lines)


def format_set_means(
    frame: pd.DataFrame,
    methods: Iterable[str],
    *,
    datasets: Iterable[str] = TABLE2_DATASETS,
    challengers: Iterable[str] = ("rcc",),
    digits: int = 3,
) -> str:
    """Markdown table: per preprocessing mode, the mean ACC of each method over ``datasets``.

    A text set (TEXT_DATASETS) is featurised identically in every mode, so its rows from
    whichever mode it was run in count for every mode. A mean needs every set ("—" otherwise,
    never a mean over fewer sets). Two columns per method in ``challengers`` compare it with l2:
    the sets where it beats / ties (to ``digits`` decimals) / trails l2, and the mean over the
    sets of their difference, paired by repetition (same base clusterings), with a 95% interval:
    the sets and their repetitions are independent draws, so the standard error of the S-set
    mean difference is sqrt(Σ_s var_s / r_s) / S (var_s the sample variance of set s's r_s paired
    differences; normal approximation)."""
    summ = summarize_table2(frame)  # needs the "error" column, as the pairing below does
    ok = frame[frame["error"].isna()]
    challengers = list(challengers)
    paired = ok[ok["method"].isin([*challengers, "l2"])].pivot_table(
        index=["dataset", "preprocessing", "repetition"], columns="method", values="acc"
    )
    table = summ.pivot_table(
        index=["dataset", "preprocessing"], columns="method", values="acc_mean"
    )
    preps = list(dict.fromkeys(summ["preprocessing"]))
    datasets, methods = list(datasets), list(methods)
    head = ["prep", "sets", *methods]
    for c in challengers:
        head += [f"{c} vs l2: better / tie / worse", f"{c} − l2 (95% interval)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for prep in preps:
        rows, runs = {}, []
        for name in datasets:
            modes = [prep, *(p for p in preps if p != prep)] if name in TEXT_DATASETS else [prep]
            found = [m for m in modes if (name, m) in table.index]
            if found:
                rows[name] = table.loc[(name, found[0])]
                if (name, found[0]) in paired.index:
                    runs.append(paired.loc[(name, found[0])])
        sets = pd.DataFrame(rows).T.reindex(columns=sorted({*methods, *challengers, "l2"}))
        complete = len(sets) == len(datasets)
        cells = [
            f"{sets[m].mean():.{digits}f}" if complete and sets[m].notna().all() else "—"
            for m in methods
        ]
        for c in challengers:
            cells += _versus_l2(sets, runs, c, len(datasets), digits)
        lines.append("| " + " | ".join([prep, f"{len(sets)} of {len(datasets)}", *cells]) + " |")
    return "\n".join(lines)


def _versus_l2(
    sets: pd.DataFrame,
    runs: list[pd.DataFrame],
    method: str,
    n_sets: int,
    digits: int,
) -> list[str]:
    """The two comparison cells of ``format_set_means`` for one method: better / tie / worse sets,
    and the paired mean difference with its 95% interval ("—" when a set or a pair is missing)."""
    complete = len(sets) == n_sets
    diff = (sets[method] - sets["l2"]).round(digits)
    count = "—"
    if complete and diff.notna().all():
        count = f"{(diff > 0).sum()} / {(diff == 0).sum()} / {(diff < 0).sum()}"
    diffs = [
        (d[method] - d["l2"]).dropna().to_numpy() for d in runs if {method, "l2"} <= set(d.columns)
    ]
    interval = "—"
    if complete and len(diffs) == n_sets and all(d.size > 1 for d in diffs):
        mean = np.mean([d.mean() for d in diffs])
        half = 1.96 * np.sqrt(sum(d.var(ddof=1) / d.size for d in diffs)) / len(diffs)
        # round first (and + 0.0) so that a round-off residue never prints as -0.000
        lo, mid, hi = (round(v, digits) + 0.0 for v in (mean - half, mean, mean + half))
        interval = f"{mid:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}]"
    return [count, interval]
