"""Shared fixtures: benchmark data from ../shared (skipped when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATASETS = Path(__file__).resolve().parents[2] / "shared" / "datasets"
"""The benchmark data beside the checkout (../shared/datasets), passed to the code explicitly."""


@pytest.fixture(scope="session", autouse=True)
def _one_blas_thread():
    """One BLAS thread for the whole session (also when pytest is run without `make test`):
    threaded BLAS spin-waits on a loaded 2-core machine and made dense eigensolvers ~20× slower."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        yield


@pytest.fixture(scope="session", autouse=True)
def _stop_signals_not_ignored():
    """The stop signals at their usual dispositions for the whole session. adseg leaves a stop
    signal ignored when its process starts ignoring it (nohup; a background job of a
    non-interactive shell, such as a CI script's `make test &`, starts with SIGINT ignored);
    the tests of stopping by a signal would then test that instead. Tests of the ignored case
    ignore the signal themselves. Subprocesses inherit these dispositions."""
    import signal

    usual = {signal.SIGINT: signal.default_int_handler}
    ignored = {
        signum: signal.getsignal(signum)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        if signal.getsignal(signum) is signal.SIG_IGN
    }
    for signum in ignored:
        signal.signal(signum, usual.get(signum, signal.SIG_DFL))
    yield
    for signum, handler in ignored.items():
        signal.signal(signum, handler)


@pytest.fixture(scope="session")
def shared_datasets():
    """The benchmark data folder ../shared/datasets; skip the test cleanly when it is absent (a
    user's fresh clone)."""
    if not SHARED_DATASETS.is_dir():
        pytest.skip(f"{SHARED_DATASETS} not found (benchmark data are not part of the project)")
    return SHARED_DATASETS


# --- databases: every store/ingest test runs on SQLite and, when configured, PostgreSQL --------

import os  # noqa: E402

from sqlalchemy import text  # noqa: E402

POSTGRES_ENV = "ADSEG_TEST_POSTGRES_URL"


def _reset_postgres(url: str):
    from adseg.store.engine import make_engine

    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    return engine


@pytest.fixture(scope="session")
def postgres_url():
    """$ADSEG_TEST_POSTGRES_URL, or None. Under pytest-xdist (``make test`` runs the tests on
    several workers) each worker gets a database of its own, ``<database>_<worker>``, created
    beside the configured one (its role needs CREATEDB, as scripts/ci_postgres.sh grants):
    the tests wipe their database, so workers must not share one."""
    url = os.environ.get(POSTGRES_ENV)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not url or not worker:
        return url
    from sqlalchemy import make_url

    from adseg.store.engine import make_engine

    base = make_url(url)
    name = f"{base.database}_{worker}"
    engine = make_engine(base.render_as_string(hide_password=False))
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            exists = conn.execute(
                text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": name}
            ).first()
            if exists is None:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        engine.dispose()
    return base.set(database=name).render_as_string(hide_password=False)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path, postgres_url):
    """A URL to an EMPTY database: a fresh SQLite file, or the PostgreSQL test server wiped clean
    (skipped with a reason when $ADSEG_TEST_POSTGRES_URL is not set)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'adseg.db'}"
        return
    url = postgres_url
    if not url:
        pytest.skip(
            f"PostgreSQL tests need ${POSTGRES_ENV} (CI sets it; see docs/operations-setup.md)"
        )
    engine = _reset_postgres(url)
    engine.dispose()
    yield url


@pytest.fixture
def engine(db_url):
    """An engine on an empty database migrated to the newest revision."""
    from adseg.store import migrate
    from adseg.store.engine import make_engine

    eng = make_engine(db_url)
    migrate.upgrade(eng)
    yield eng
    eng.dispose()
