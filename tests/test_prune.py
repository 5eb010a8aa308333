"""`adseg db prune`: old runs and all their results go, in one transaction, under the nightly
lock; the newest completed runs, every later run and every 'running' run stay."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from adseg import pipeline
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
    return pipeline.run_nightly(engine, config=config).run_id


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
    assert f"kept run {c2} and every later run" in res.output
    # the failed run between the kept completed ones stays; nothing of the old runs is left
    assert store.list_runs(engine)["run_id"].tolist() == [c3, f2, c2]
    assert _result_rows(engine, [c1, f1]) == 0
    assert _result_rows(engine, [c2]) > 0 and _result_rows(engine, [c3]) > 0
    # what the reports read is whole: the latest run reports as before
    assert store.latest_completed_run(engine, with_forecasts=True) == c3
    assert runner.invoke(app, ["report", "--database-url", db_url, "--run", str(c2)]).exit_code == 0

    res = _prune(db_url, "--keep", "2")
    assert res.exit_code == 0 and f"nothing to remove: no run is older than run {c2}" in res.output
    res = _prune(db_url, "--keep", "5", "--quiet")
    assert res.exit_code == 0 and res.output == ""
    res = _prune(db_url, "--keep", "5")
    assert "nothing to remove: no more than 5 completed runs in the database" in res.output


def test_prune_never_touches_a_running_run(history):
    engine, (c1, *_, c3) = history
    running = store.create_run(
        engine, "nightly", parameters={}, seed=0, windows={}, code_version="t"
    )
    with engine.begin() as conn:  # an old 'running' row, as a process killed long ago leaves
        conn.execute(Run.__table__.update().where(Run.run_id == running).values(run_id=0))
    pruned = store.prune_runs(engine, 1)
    assert 0 not in pruned.runs and c1 in pruned.runs
    assert store.list_runs(engine)["run_id"].tolist() == [c3, 0]


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


def test_prune_refuses_a_keep_below_one(engine, db_url):
    for keep in ("0", "-3"):
        res = _prune(db_url, "--keep", keep)
        assert res.exit_code == 2 and "--keep" in res.output
    assert _prune(db_url).exit_code == 2  # --keep is required: no default deletes anything
    with pytest.raises(ValueError, match="keep must be at least 1"):
        store.prune_runs(engine, 0)


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
