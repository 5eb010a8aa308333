"""`adseg db prune`: old runs and all their results go, in one transaction, under the nightly
lock; the newest completed runs, every later run and every 'running' run stay."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from adseg import pipeline
from adseg.app.nightly import run_nightly
from adseg.cli import app
from adseg.ingest import read_directory
from adseg.simulate import MarketplaceConfig, simulate_marketplace, write_marketplace
from adseg.store import results as store
from adseg.store.load import write_batch
from adseg.store.models import Run

runner = CliRunner()


@pytest.fixture(scope="module")
def market_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("market")
    write_marketplace(simulate_marketplace(MarketplaceConfig(n_advertisers=60, seed=3)), out)
    return out


def _nightly(engine) -> int:
    config = pipeline.NightlyConfig(fusers=("l2",), primary_fuser="l2", seed=0, supply="actual")
    return run_nightly(engine, config=config).run_id


def _failed_run(engine) -> int:
    run_id = store.create_run(
        engine, "nightly", parameters={}, seed=0, windows={}, code_version="t"
    )
    store.fail_run(engine, run_id, "a test failure", {})
    return run_id


def _result_rows(engine, run_ids) -> int:
    with engine.connect() as conn:
        return sum(
            conn.scalar(select(func.count()).select_from(t).where(t.run_id.in_(run_ids)))
            for t in store.RESULT_TABLES
        )


@pytest.fixture
def history(engine, market_dir):
    """Runs, oldest first: completed, failed, completed, failed, completed."""
    write_batch(engine, read_directory(market_dir))
    runs = [_nightly(engine), _failed_run(engine), _nightly(engine)]
    runs += [_failed_run(engine), _nightly(engine)]
    return engine, runs


def _prune(db_url, *args):
    return runner.invoke(app, ["db", "prune", "--database-url", db_url, *args])


def test_prune_keeps_the_newest_completed_runs_and_everything_after(history, db_url):
    engine, (c1, f1, c2, f2, c3) = history
    assert _result_rows(engine, [c1]) > 0

    res = _prune(db_url, "--keep", "2", "--dry-run")
    assert res.exit_code == 0, res.output
    assert f"would remove 2 runs (runs {c1}–{f1}: 1 completed, 1 failed)" in res.output
    assert store.list_runs(engine)["run_id"].tolist() == [c3, f2, c2, f1, c1]  # dry: untouched

    before = _result_rows(engine, [c1])
    res = _prune(db_url, "--keep", "2")
    assert res.exit_code == 0, res.output
    assert f"removed 2 runs (runs {c1}–{f1}: 1 completed, 1 failed)" in res.output
    assert f"their {before:,} result rows" in res.output
    assert f"kept run {c2} and every later run (from the --keep 2 newest reportable)" in res.output
    # the failed run between the kept completed ones stays; nothing of the old runs is left
    assert store.list_runs(engine)["run_id"].tolist() == [c3, f2, c2]
    assert _result_rows(engine, [c1, f1]) == 0
    assert _result_rows(engine, [c2]) > 0 and _result_rows(engine, [c3]) > 0
    # what the reports read is whole: the latest run reports as before
    assert store.latest_completed_run(engine, with_forecasts=True) == c3
    assert runner.invoke(app, ["report", "--database-url", db_url, "--run", str(c2)]).exit_code == 0

    res = _prune(db_url, "--keep", "2")
    assert res.exit_code == 0 and f"nothing to remove: no run older than run {c2}" in res.output
    res = _prune(db_url, "--keep", "5", "--quiet")
    assert res.exit_code == 0 and res.output == ""
    res = _prune(db_url, "--keep", "5")
    assert "nothing to remove: no more than 5 reportable runs (completed, with" in res.output


def test_prune_never_touches_a_running_run_and_says_so(history, db_url):
    """The line said 'removed 3 runs (runs 1–4 …) … kept run 5 and every later run' with run 3,
    still running, kept; and 'no run is older than run 8' with a running run 1 (QA)."""
    engine, (c1, f1, c2, f2, c3) = history
    with engine.begin() as conn:  # as a process killed long ago leaves it
        conn.execute(Run.__table__.update().where(Run.run_id == f1).values(status="running"))
    res = _prune(db_url, "--keep", "2")
    assert res.exit_code == 0, res.output
    assert f"removed 1 run (run {c1}: 1 completed)" in res.output
    assert f", and run {f1}, still marked running" in res.output
    res = _prune(db_url, "--keep", "2")
    assert f"nothing to remove: no run older than run {c2}, and run {f1}, still" in res.output
    assert store.list_runs(engine)["run_id"].tolist() == [c3, f2, c2, f1]


def test_a_views_run_is_not_one_of_the_runs_kept(history, db_url):
    """A `views` run after the nightlies took the one place of --keep 1 and every run with a
    report was deleted: `adseg report` then found none (QA). Only reportable runs (completed,
    with forecasts) count; a views run after them stays, as every later run does."""
    engine, (*_, c3) = history
    res = runner.invoke(app, ["views", "--database-url", db_url, "-q"])
    assert res.exit_code == 0, res.output
    views = store.list_runs(engine)["run_id"].iloc[0]
    assert _prune(db_url, "--keep", "1").exit_code == 0
    assert store.list_runs(engine)["run_id"].tolist() == [views, c3]
    assert runner.invoke(app, ["report", "--database-url", db_url, "-q"]).exit_code == 0


def test_id_ranges_read_as_spans():
    from adseg.cli import _id_ranges

    assert _id_ranges([3]) == "run 3"
    assert _id_ranges([1, 2, 3, 4]) == "runs 1–4"
    assert _id_ranges([1, 2, 4, 6, 7, 8, 9]) == "runs 1–2, 4, 6–9"


def test_prune_waits_for_no_one_and_changes_nothing_while_the_lock_is_held(history, db_url):
    engine, runs = history
    holder = store.acquire_lock(engine, "nightly")
    try:
        res = _prune(db_url, "--keep", "1")
        assert res.exit_code == 75 and "another nightly run is in progress" in res.output
        assert store.list_runs(engine)["run_id"].tolist() == runs[::-1]
        res = _prune(db_url, "--keep", "1", "--dry-run")  # reads only: no lock needed
        assert res.exit_code == 0 and "would remove 4 runs" in res.output
    finally:
        store.release_lock(engine, "nightly", holder)
    assert store.lock_holder(engine) is None


def test_prune_refuses_a_keep_below_one_or_beyond_the_integer_range(engine, db_url):
    # 2^63 was a traceback (SQLite: OverflowError) or 'bigint out of range', exit 1 (QA)
    for keep in ("0", "-3", str(2**63), "99999999999999999999"):
        res = _prune(db_url, "--keep", keep)
        assert res.exit_code == 2 and "--keep" in res.output and "Traceback" not in res.output
    assert _prune(db_url, "--keep", str(2**63 - 1)).exit_code == 0
    assert _prune(db_url).exit_code == 2  # --keep is required: no default deletes anything
    with pytest.raises(ValueError, match="keep must be at least 1"):
        store.prune_runs(engine, 0)


def test_a_dry_run_reads_a_database_this_user_may_only_read(history, db_url, monkeypatch):
    """It was refused ('cannot write it: its folder … is not writable'), although it only
    counts and `adseg runs` reads the same file (QA). The folder is made unwritable to adseg's
    check, as in test_database_errors.py (root may write anything)."""
    from adseg.store import engine as engine_module

    engine, runs = history
    if engine.dialect.name != "sqlite":
        pytest.skip("file permissions are SQLite's")
    engine.dispose()
    monkeypatch.setattr(engine_module, "_folder_writable", lambda folder: False)
    res = _prune(db_url, "--keep", "1", "--dry-run")
    assert res.exit_code == 0 and "would remove 4 runs" in res.output, res.output
    res = _prune(db_url, "--keep", "1")
    assert res.exit_code == 2 and "cannot write it: its folder" in res.output
    monkeypatch.undo()
    assert len(store.list_runs(engine)) == 5


def test_vacuum_says_when_a_reader_keeps_the_old_pages(history, db_url, tmp_path):
    """With a reader in a transaction the checkpoint cannot finish: the line said the file had
    shrunk while the old pages and the copy both sat on disk (QA). Now it counts the -wal too
    and warns."""
    import sqlite3

    engine, runs = history
    if engine.dialect.name != "sqlite":
        pytest.skip("VACUUM is SQLite's")
    reader = sqlite3.connect(tmp_path / "adseg.db", isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM runs").fetchall()
    try:
        res = _prune(db_url, "--keep", "1", "--vacuum")
    finally:
        reader.close()
    assert res.exit_code == 0, res.output
    assert "MiB on disk" in res.output
    assert "warning: another process is reading the database" in res.output
    res = _prune(db_url, "--keep", "1", "--vacuum")  # the reader is gone: no warning
    assert res.exit_code == 0 and "warning" not in res.output


def test_prune_vacuum_shrinks_a_sqlite_file(history, db_url):
    engine, runs = history
    res = _prune(db_url, "--keep", "1", "--vacuum")
    assert res.exit_code == 0, res.output
    if engine.dialect.name == "sqlite":
        line = next(x for x in res.output.splitlines() if x.startswith("vacuumed: "))
        before, after = (float(x.split()[0]) for x in line.removeprefix("vacuumed: ").split("->"))
        assert after < before
    else:
        assert "PostgreSQL's autovacuum" in res.output
    assert store.list_runs(engine)["run_id"].tolist() == [runs[-1]]


def test_vacuum_runs_under_the_lock_and_a_failed_vacuum_keeps_the_prune(
    history, db_url, monkeypatch
):
    """The VACUUM ran after the lock was released: a nightly starting meanwhile waited beyond
    its busy timeout, and a VACUUM that failed ('database is locked') after the committed prune
    exited 75, 'retry' (review). It now runs under the lock; a failure is a warning, exit 0."""
    from sqlalchemy.exc import OperationalError

    from adseg.store import engine as engine_module

    engine, runs = history
    if engine.dialect.name != "sqlite":
        pytest.skip("VACUUM is SQLite's")
    held = []

    def vacuum_that_fails(eng):
        held.append(store.lock_holder(eng))
        raise OperationalError("VACUUM", {}, Exception("database is locked"))

    monkeypatch.setattr(engine_module, "vacuum_sqlite", vacuum_that_fails)
    res = _prune(db_url, "--keep", "1", "--vacuum")
    assert res.exit_code == 0, res.output
    assert held and held[0] is not None  # the nightly lock was held during the VACUUM
    assert "removed 4 runs" in res.output
    assert "warning: the runs are removed, but VACUUM failed: database is locked" in res.output
    assert store.list_runs(engine)["run_id"].tolist() == [runs[-1]]
    assert store.lock_holder(engine) is None
    res = _prune(db_url, "--keep", "1", "--vacuum", "--dry-run")
    assert res.exit_code == 0 and "note: --vacuum not run: a dry run changes nothing" in res.output


def test_a_stage_command_reads_its_run_under_the_lock(history, db_url, monkeypatch):
    """`adseg forecast --run X` read run X, then waited for the lock while a prune deleted X,
    and worked on a deleted run (review). It now reads the run under the lock: 'does not exist',
    exit 2."""
    engine, (c1, *_) = history
    take = store.acquire_lock

    def prune_first(eng, name="nightly", run_id=None):
        store.prune_runs(eng, 1)  # what a `db prune` holding the lock just before did
        return take(eng, name, run_id)

    monkeypatch.setattr(store, "acquire_lock", prune_first)
    res = runner.invoke(
        app, ["forecast", "--run", str(c1), "--database-url", db_url, "--supply", "actual", "-q"]
    )
    assert res.exit_code == 2 and f"run {c1} does not exist" in res.output, res.output
    assert store.lock_holder(engine) is None
