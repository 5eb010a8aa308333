"""Fuser fits for a run: each fuser on the base clusterings, in this process or as tasks of the
execution engine (:mod:`adseg.app.execution`: a dask scheduler, or ``n_jobs`` worker processes
on this machine), with its warnings kept as notes and stop signals honoured. Memory: each
worker holds its own fuser's arrays."""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from contextlib import closing
from functools import partial
from typing import NamedTuple

import numpy as np
from threadpoolctl import threadpool_limits

from adseg.consensus import FUSERS, sccbg
from adseg.interrupts import first_line

log = logging.getLogger("adseg.pipeline")

SLOW_FIRST = ("lta", "rcc", "trce", "sccbg", "rcec", "l2")
"""Fusers by measured cost on the default marketplace, slowest first (scheduling order only)."""

Progress = Callable[[str], None]


def _fit_one(
    name: str, labels: np.ndarray, n_segments: int, seed: int, options: dict, weights=None
):
    """One fuser's labels, wall seconds and notes (a task of the engine when n_jobs > 1);
    ``options`` are its constructor arguments beside n_clusters and random_state.

    The notes are the fit's warnings, each once (a solver at its iteration limit, k-means
    finding fewer distinct clusters), a line when the fuser solved a reduced problem at this
    size (``_reduction_notes``), and a line when the labels hold fewer segments than asked:
    the caller logs them and records them in the run's row, where a worker's warnings
    would otherwise be lost."""
    cls = FUSERS[name]
    if weights is not None and "weights" in cls().get_params():
        options = {**options, "weights": weights}  # fusers without per-clustering weights: none
    t0 = time.perf_counter()
    with threadpool_limits(limits=1), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", ResourceWarning)  # a finalizer's, not the fit's: no note
        fuser = cls(n_clusters=n_segments, random_state=seed, **options).fit(labels)
    result = fuser.labels_
    seconds = round(time.perf_counter() - t0, 3)
    notes = [first_line(str(w.message)).strip() for w in caught] + _reduction_notes(fuser)
    found = np.unique(result[result >= 0]).size
    if found < n_segments:
        # k-means's own words for the same fact: "Number of distinct clusters (51) found
        # smaller than n_clusters (55)"; one line for it is enough
        notes = [note for note in notes if not note.startswith("Number of distinct clusters")]
        notes.append(f"{found} segments, fewer than the {n_segments} asked")
    return result, seconds, list(dict.fromkeys(notes))


def _reduction_notes(fuser) -> list[str]:
    """A line for the run's record when the fit solved a reduced problem at this size (rcc on
    micro-clusters above ``max_cells`` distinct label rows, l2 from the sparse factor above
    ``max_dense`` items, sccbg's sparse path), naming the threshold; none otherwise."""
    if getattr(fuser, "reduced_", False):
        return [
            f"reduced: solved on {fuser.n_micro_clusters_:,} micro-clusters of the "
            f"{fuser.n_cells_:,} distinct label rows (max_cells={fuser.max_cells:,})"
        ]
    if getattr(fuser, "sparse_", False):
        return [
            f"reduced: eigenvectors from the sparse co-association factor "
            f"({fuser.n_items_:,} items > max_dense={fuser.max_dense:,})"
        ]
    if getattr(fuser, "sparse_path_", False):
        work = fuser.n_unique_rows_ * fuser.cluster_ids_.shape[0]
        return [
            f"sparse: S held sparse while under {sccbg.SPARSE_DENSITY:.0%} non-zero "
            f"({work:,} distinct rows × input clusters ≥ SPARSE_WORK={sccbg.SPARSE_WORK:,})"
        ]
    return []


class Fusion(NamedTuple):
    """What :func:`fuse` returns, by fuser name: the segmentations of those that succeeded (in
    the order asked), their wall seconds, the errors of the alternatives that failed, and the
    notes of those that succeeded with warnings (see ``_fit_one``)."""

    segmentations: dict[str, np.ndarray]
    seconds: dict[str, float]
    errors: dict[str, str]
    notes: dict[str, list[str]]


def fuse(
    labels: np.ndarray,
    names: list[str],
    n_segments: int,
    seed: int,
    primary: str,
    progress: Progress | None = None,
    n_jobs: int = 1,
    options: dict | None = None,
    weights: np.ndarray | None = None,
    scheduler: str | None = None,
    started: Callable | None = None,
) -> Fusion:
    """Stage 3: every fuser on the base clusterings (a :class:`Fusion`); a failing alternative
    fuser is recorded and skipped, a failing primary fuser raises, a fuser's notes are logged.
    ``started``: the fits of these same arguments submitted before (:func:`start_fusion`),
    collected here.

    ``options`` ({fuser: {parameter: value}}, checked by :func:`check_fuser_options`) are
    passed to the fusers' constructors; ``weights`` (one per base clustering) to those that
    take per-clustering weights. ``scheduler`` (a dask scheduler's address) runs the fusers as
    tasks there; else ``n_jobs`` > 1 runs them on an embedded cluster of that many worker
    processes (each with one BLAS thread; :mod:`adseg.app.execution`): they are independent, and
    the slowest (lta, rcc) dominate, so two cores nearly halve the stage. Memory: each worker
    holds its own fuser's n×n arrays."""
    segmentations, seconds, errors, notes = {}, {}, {}, {}
    options = options or {}

    def record(name, outcome):
        try:
            segmentations[name], seconds[name], found = outcome()
        except Exception as exc:
            if name == primary:
                if type(exc) is ValueError:
                    # the fuser's own words name none of the run ("n_clusters must be smaller
                    # than n_items=4 for TRCE"): say which fuser, and its terms here
                    raise ValueError(
                        f"primary fuser {name} ({n_segments} segments asked of "
                        f"{labels.shape[0]} advertisers): {exc}"
                    ) from exc
                raise
            errors[name] = f"{type(exc).__name__}: {exc}"
            log.warning("fuser %s failed and is skipped: %s", name, errors[name])
            return
        log.info("fuser %s: %.1f s", name, seconds[name])  # a job log heard nothing per fuser
        if found:
            notes[name] = found
            for note in found:
                log.warning("fuser %s: %s", name, note)

    if started is None and not _on_engine(names, n_jobs, scheduler):
        for name in names:
            if progress:
                progress(f"fusing with {name}")
            record(
                name,
                lambda name=name: _fit_one(
                    name, labels, n_segments, seed, options.get(name, {}), weights
                ),
            )
        return Fusion(segmentations, seconds, errors, notes)
    if progress:
        where = scheduler or f"{min(n_jobs, len(names))} processes"
        progress(f"fusing with {', '.join(names)} ({where})")
    if started is None:
        tasks = fuser_tasks(names, labels, n_segments, seed, options, weights)
        started = partial(_run_tasks, tasks, scheduler, min(n_jobs, len(names)))
    # closing(): a failing primary fuser raised by record() stops the other tasks at once
    with closing(started()) as finished:
        for name, outcome in finished:
            record(name, outcome)
    in_order = {n: segmentations[n] for n in names if n in segmentations}
    return Fusion(in_order, seconds, errors, {n: notes[n] for n in names if n in notes})


def _on_engine(names, n_jobs: int, scheduler: str | None) -> bool:
    """Whether :func:`fuse` runs the fits as engine tasks: on a scheduler, or with more than
    one job and more than one fuser."""
    return bool(scheduler) or (n_jobs > 1 and len(names) > 1)


def start_fusion(
    labels: np.ndarray,
    names: list[str],
    n_segments: int,
    seed: int,
    n_jobs: int = 1,
    options: dict | None = None,
    weights: np.ndarray | None = None,
    scheduler: str | None = None,
) -> Callable | None:
    """Submit :func:`fuse`'s fits now, below the priority of the tasks submitted meanwhile
    (``adseg.app.execution.prefetch_tasks``), for ``fuse(..., started=)`` to collect: the
    engine fits them while this process does other work. None when ``fuse`` would fit them in
    this process."""
    if not _on_engine(names, n_jobs, scheduler):
        return None
    from adseg.app.execution import prefetch_tasks

    tasks = fuser_tasks(names, labels, n_segments, seed, options or {}, weights)
    return prefetch_tasks(_fits(tasks), scheduler, min(n_jobs, len(names)))


def fuser_tasks(
    names, labels: np.ndarray, n_segments: int, seed: int, options: dict, weights=None
) -> list[tuple[str, tuple]]:
    """(fuser name, arguments of ``_fit_one``) for each fuser, slowest first (so that the
    workers finish close together; costs measured at n = 1,268): what is shipped to a worker,
    arrays and plain values only."""
    slow_first = sorted(names, key=lambda n: SLOW_FIRST.index(n) if n in SLOW_FIRST else 0)
    return [
        (name, (name, labels, n_segments, seed, options.get(name, {}), weights))
        for name in slow_first
    ]


def _run_tasks(tasks, scheduler: str | None, n_workers: int):
    """:func:`adseg.app.execution.run_tasks` of ``_fit_one`` on each of ``tasks``."""
    from adseg.app.execution import run_tasks

    return run_tasks(_fits(tasks), scheduler, n_workers)


def _fits(tasks) -> list:
    """The engine tasks of :func:`fuser_tasks`' (name, arguments): ``_fit_one`` on each."""
    return [(name, _fit_one, args) for name, args in tasks]
