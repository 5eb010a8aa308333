"""Engine creation, with the settings each dialect needs."""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from adseg.config import sqlite_file

log = logging.getLogger(__name__)


def make_engine(url: str, *, echo: bool = False, writes: bool = True) -> Engine:
    """Create an engine. SQLite gets foreign keys on, WAL journalling (readers don't block the
    nightly writer) and a busy timeout so two processes wait instead of failing at once.

    A SQLite file in a folder this user cannot write, with no WAL file beside it
    (:func:`_idle_read_only_file`), cannot be written: SQLite must create its journal files
    beside it. With ``writes`` such a URL is refused here (ValueError naming the folder), before
    any work that would end in 'attempt to write a readonly database'; without, the file is
    opened read-only without locks, with a warning: SQLite cannot otherwise even read a WAL
    database there, because it must create the WAL index (``-shm``) first."""
    kwargs = {}
    if (file := _idle_read_only_file(url)) is not None:
        given = sqlite_file(url)
        named = str(given) if given.absolute() == file else f"{given} (resolved: {file})"
        if writes:
            raise ValueError(
                f"{named}: cannot write it: its folder {file.parent} is not writable by this "
                "user, and SQLite creates its journal files beside the database (run as the "
                "database's owner; reading commands such as `adseg report` and `adseg runs` "
                "can still read it)."
            )
        log.warning(
            "%s: its folder is not writable by this user, so SQLite cannot create the lock "
            "files beside it; reading it read-only, without locks (a nightly that starts "
            "writing it meanwhile could make this read inconsistent: run the command again)",
            named,
        )
        kwargs["creator"] = _immutable_connector(file)
    try:
        engine = create_engine(url, echo=echo, future=True, **kwargs)
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


def _idle_read_only_file(url: str) -> Path | None:
    """The SQLite file of ``url`` (a link followed) when it exists, this process may read it,
    its folder is not writable by this process and no ``-wal`` file lies beside it (no
    connection has it open: the last one to close checkpoints and removes the WAL); None
    otherwise. With a WAL file present SQLite reads the database read-only through the existing
    ``-shm``, so nothing special is needed. SQLite follows a symbolic link to the database and
    keeps its ``-wal`` beside the target, so that is where it is looked for: beside the link, a
    live WAL was missed and its committed transactions went unread. A file this user cannot
    read is left to SQLite's own error, without the warning that it is being read."""
    try:
        file = sqlite_file(url)
    except ArgumentError:
        return None  # create_engine names the bad URL
    if file is None or not file.is_file():
        return None
    file = file.resolve()
    wal = file.with_name(file.name + "-wal")
    if _folder_writable(file.parent) or wal.exists() or not os.access(file, os.R_OK):
        return None
    return file


def _folder_writable(folder: Path) -> bool:
    """Whether this process may create files in ``folder`` (root may, whatever the mode)."""
    return os.access(folder, os.W_OK | os.X_OK)


def _immutable_connector(file: Path):
    """A DB-API connect function opening ``file`` as an immutable read-only SQLite database:
    no locks, no ``-shm``; a write fails with 'attempt to write a readonly database'."""
    uri = f"file:{quote(str(file.resolve()))}?immutable=1"

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(uri, uri=True, check_same_thread=False)

    return connect
