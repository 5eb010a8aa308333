"""Engine creation, with the settings each dialect needs."""

from __future__ import annotations

import sqlite3

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import ArgumentError, NoSuchModuleError


def make_engine(url: str, *, echo: bool = False) -> Engine:
    """Create an engine. SQLite gets foreign keys on, WAL journalling (readers don't block the
    nightly writer) and a busy timeout so two processes wait instead of failing at once."""
    try:
        engine = create_engine(url, echo=echo, future=True)
    except ModuleNotFoundError as exc:  # e.g. postgresql+asyncpg:// without asyncpg installed
        raise ValueError(
            f"database URL: its driver needs the Python package {exc.name!r}, which is not "
            "installed (the default PostgreSQL driver is psycopg: postgresql+psycopg://...)."
        ) from None
    except NoSuchModuleError:  # postgresql+foo://: no such driver at all
        raise ValueError(
            "database URL: unknown database driver (use sqlite:/// or postgresql+psycopg://)."
        ) from None
    except ArgumentError as exc:  # e.g. two host= formats mixed; the message holds no password
        raise ValueError(f"database URL: {exc}") from None
    if engine.dialect.name == "sqlite":

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):  # pragma: no cover - trivial
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            if not str(engine.url.database or "").startswith(":memory:") and engine.url.database:
                try:
                    cur.execute("PRAGMA journal_mode=WAL")
                except sqlite3.OperationalError:  # a read-only file: reading needs no WAL
                    pass
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA cache_size=-65536")  # 64 MiB: index inserts stay in memory
            cur.close()

    return engine
