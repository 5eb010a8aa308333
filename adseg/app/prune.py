"""`adseg db prune`: delete old runs and their results under the nightly lock, and give a
SQLite file's freed space back to the disk."""

from __future__ import annotations

from typing import TYPE_CHECKING

from adseg.app.runs import nightly_lock
from adseg.interrupts import first_line
from adseg.store import results as store

if TYPE_CHECKING:
    from adseg.store.engine import Engine


def prune_runs(
    engine: Engine, keep: int, *, dry_run: bool = False, vacuum: bool = False
) -> tuple[store.Pruned, tuple[int, int, bool] | str | None]:
    """Delete the runs older than the ``keep`` newest reportable ones, with their results
    (:func:`adseg.store.results.prune_runs`), under the nightly lock so that no run being made
    or remade is touched; with ``vacuum``, then shrink a SQLite file under the same lock (a
    nightly starting meanwhile would wait beyond its busy timeout for the VACUUM's write lock).
    Returns (what was pruned, the VACUUM's (bytes before, after, blocked by a reader), or its
    error text — the prune is committed by then, so a failed VACUUM is no failed prune — or
    None when not asked or not SQLite). ``dry_run`` counts without the lock, deletes nothing."""
    if dry_run:
        return store.prune_runs(engine, keep, dry_run=True), None
    from adseg.store.engine import vacuum_sqlite
    from adseg.store.errors import DatabaseError

    with nightly_lock(engine):
        pruned = store.prune_runs(engine, keep)
        shrunk: tuple[int, int, bool] | str | None = None
        if vacuum and engine.dialect.name == "sqlite":
            try:
                shrunk = vacuum_sqlite(engine)
            except DatabaseError as exc:  # SQLite's own words ("database is locked")
                shrunk = first_line(str(exc.orig or exc))
        return pruned, shrunk
