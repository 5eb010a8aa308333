"""Engine creation, with the settings each dialect needs."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError

from adseg.checks import on_read_only_mount
from adseg.store.url import SQLITE_SIDE_FILES, sqlite_file

log = logging.getLogger(__name__)


def make_engine(url: str, *, echo: bool = False, writes: bool = True) -> Engine:
    """Create an engine. SQLite gets foreign keys on, WAL journalling (readers don't block the
    nightly writer) and a busy timeout so two processes wait instead of failing at once.

    A SQLite file this user cannot write (:func:`_unwritable_database`: its folder, where SQLite
    creates the -wal and -shm files, or the file itself is read-only) is refused with ``writes``
    (ValueError naming what is read-only) before any work that would end in 'attempt to write a
    readonly database', and so are -wal / -shm files beside it that this user cannot write.
    Without ``writes`` an idle such file is opened read-only without locks
    (:func:`_read_only_opener`), with a warning: SQLite cannot otherwise read a WAL database in
    a folder it cannot write, and beside a read-only file in a writable folder it would leave
    read-only -wal / -shm files that keep the database's owner from writing it afterwards."""
    kwargs = {}
    if (found := _unwritable_database(url)) is not None:
        if (opener := _refuse_or_open_read_only(url, *found, writes=writes)) is not None:
            kwargs["creator"] = opener
    elif writes:
        _check_side_files_writable(url)
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
        _add_sqlite_listeners(engine)
    return engine


def _refuse_or_open_read_only(url: str, file: Path, why: str, *, writes: bool):
    """For a SQLite ``file`` this user cannot write (``why`` says what is read-only): raise
    ValueError naming it and the remedy when the command ``writes``; otherwise a connection
    creator opening it read-only without locks (None where plain opening works), with a
    warning."""
    given = sqlite_file(url)
    named = str(given) if given.absolute() == file else f"{given} (resolved: {file})"
    if writes:
        remedy = (
            "copy it to a writable file system, or remount this one read-write"
            if on_read_only_mount(file)
            else "run as a user who may write it, or change its permissions"
        )
        raise ValueError(
            f"{named}: cannot write it: {why} ({remedy}; reading commands such as "
            "`adseg report` and `adseg runs` can still read it)."
        )
    opener = _read_only_opener(file, named)
    if opener is not None:
        log.warning(
            "%s: %s; reading it read-only, without locks (a nightly that starts writing it "
            "meanwhile could make this read inconsistent: run the command again)",
            named,
            why,
        )
    return opener


def _add_sqlite_listeners(engine: Engine) -> None:
    """Per-connection pragmas (foreign keys, WAL on a database with content, busy timeout,
    a 64 MiB page cache) and the cache's release when a connection goes back to the pool."""

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_conn, _record):  # pragma: no cover - trivial
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA foreign_keys=ON")
        database = engine.url.database
        # an empty file is no database yet: setting WAL would write its header, so a
        # command refused for want of a schema changed the file; `db upgrade` fills it,
        # then sets WAL (use_wal), which every connection open on it then follows
        if database and not database.startswith(":memory:") and _has_content(database):
            try:
                cur.execute("PRAGMA journal_mode=WAL")
            except sqlite3.OperationalError:  # a read-only file: reading needs no WAL
                pass
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA cache_size=-65536")  # 64 MiB: index inserts stay in memory
        cur.close()

    @event.listens_for(engine, "checkin")
    def _sqlite_release_cache(dbapi_conn, _record):
        # an idle pooled connection would keep its page cache (up to the 64 MiB above, all
        # of it after one scan of the auctions) for the rest of the process: freed here
        if dbapi_conn is not None:
            try:
                dbapi_conn.execute("PRAGMA shrink_memory")
            except sqlite3.Error:  # memory only: never an error of the work just done
                pass


def _side_file(file: Path, suffix: str) -> Path:
    """SQLite's ``-wal`` or ``-shm`` file of the database ``file``."""
    return file.with_name(file.name + suffix)


def _existing_sqlite_file(url: str) -> Path | None:
    """The existing SQLite file of ``url``, a link followed (SQLite keeps the -wal and -shm
    beside the target); None for another backend, a file not there yet, or a bad URL (which
    create_engine names)."""
    try:
        file = sqlite_file(url)
    except ArgumentError:
        return None
    if file is None or not file.is_file():
        return None
    return file.resolve()


def _unwritable_database(url: str) -> tuple[Path, str] | None:
    """``(file, why)`` when the SQLite file of ``url`` (:func:`_existing_sqlite_file`) exists,
    this process may read it, and may not write it: its folder is not writable (SQLite creates
    its journal files there) or the file is read-only. None otherwise, also for a file this
    user cannot read: that is left to SQLite's own error, without the warning that it is being
    read."""
    file = _existing_sqlite_file(url)
    if file is None or not os.access(file, os.R_OK):
        return None
    if on_read_only_mount(file):
        return file, f"it is on a read-only file system (its folder {file.parent})"
    if not _folder_writable(file.parent):
        return file, (
            f"its folder {file.parent} is not writable by this user, and SQLite creates its "
            "journal files beside the database"
        )
    if not _file_writable(file):
        mode = stat.S_IMODE(file.stat().st_mode)
        return file, f"the file is read-only for this user (mode {mode:04o})"
    return None


def _read_only_opener(file: Path, named: str):
    """How to read ``file``, which this user cannot write: an immutable open (no locks, no
    -wal / -shm created) when no WAL holds anything, else None (SQLite reads the WAL through the
    existing -shm, or one it creates). A missing or empty -wal holds nothing: every committed
    transaction is in the database file (the last connection to close checkpoints the WAL into
    it and removes it). A non-empty -wal with no -shm, in a folder this user cannot write,
    cannot be read at all (SQLite must create the -shm first): ValueError saying so, where
    SQLite would only say 'unable to open database file'."""
    wal, shm = _side_file(file, "-wal"), _side_file(file, "-shm")
    try:
        logged = wal.stat().st_size
    except FileNotFoundError:
        logged = 0
    if logged == 0:
        return _immutable_connector(file)
    if not shm.exists() and not _folder_writable(file.parent):
        raise ValueError(
            f"{named}: cannot read it: its write-ahead log {wal} ({logged} bytes) holds "
            f"transactions not yet copied into the database, and SQLite must create {shm.name} "
            "to read them, in a folder this user cannot write (run any adseg command on the "
            "database as its owner: the last connection to close copies the log in; then read "
            "it again)."
        )
    return None


def _check_side_files_writable(url: str) -> None:
    """ValueError when a -journal, -wal or -shm file lies beside the SQLite database of ``url``
    (:func:`_existing_sqlite_file`) and this user cannot write it: every write would fail with
    'attempt to write a readonly database'. Such files are left, read-only, by a reader of a
    database file that was read-only at the time (SQLite creates them with the file's mode)."""
    if (file := _existing_sqlite_file(url)) is None:
        return
    for suffix in SQLITE_SIDE_FILES:
        side = _side_file(file, suffix)
        if side.exists() and not _file_writable(side):
            raise ValueError(
                f"{side}: cannot write the database: this file beside it is read-only for this "
                "user (left by a reader while the database was read-only?). When no process "
                "has the database open, remove it (or make it writable), then run again."
            )


def use_wal(engine: Engine) -> None:
    """Put a SQLite file database in WAL mode (a no-op elsewhere). WAL is a property of the
    file, so the engine's other open connections follow it too; the connect hook sets it on
    every database that has content, this is for one just created from an empty file."""
    database = engine.url.database if engine.dialect.name == "sqlite" else None
    if database and not database.startswith(":memory:"):
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA journal_mode=WAL")
        except OperationalError:  # busy beyond the timeout: the next connection sets it
            pass


def vacuum_sqlite(engine: Engine) -> tuple[int, int, bool]:
    """VACUUM a SQLite file database and checkpoint its write-ahead log into it, so that the
    pages freed by deleted runs go back to the disk. Returns the bytes on disk (the file and its
    -wal) before and after, and whether a reader blocked the checkpoint: then the old pages and
    the new copy both stay (in the -wal) until the first checkpoint after that reader finishes,
    so the file alone would understate what sits on disk. Cost: rewrites
    the whole file and needs free space about its size (SQLite copies it). A passive checkpoint
    first tells whether a reader holds old pages: a truncating one would wait the busy timeout
    (30 s) for it and then give up anyway."""
    file = Path(engine.url.database).resolve()  # a link: SQLite keeps the -wal by the target
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        before = _bytes_on_disk(file)
        conn.exec_driver_sql("VACUUM")
        busy, logged, moved = conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)").one()
        blocked = bool(busy) or moved < logged
        if not blocked:  # every frame is in the file: empty the -wal too
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    return before, _bytes_on_disk(file), blocked


def _bytes_on_disk(file: Path) -> int:
    """The size of a SQLite file and of its -wal, in bytes (a missing -wal counts 0)."""
    sizes = 0
    for path in (file, _side_file(file, "-wal")):
        try:
            sizes += path.stat().st_size
        except FileNotFoundError:
            pass
    return sizes


def _has_content(database: str) -> bool:
    """Whether the SQLite file ``database`` (a path as the URL gives it) holds any bytes."""
    try:
        return os.path.getsize(database) > 0
    except OSError:  # not there: SQLite is about to say so
        return False


def _folder_writable(folder: Path) -> bool:
    """Whether this process may create files in ``folder`` (root may, whatever the mode)."""
    return os.access(folder, os.W_OK | os.X_OK)


def _file_writable(file: Path) -> bool:
    """Whether this process may write ``file`` (root may, whatever the mode)."""
    return os.access(file, os.W_OK)


def _immutable_connector(file: Path):
    """A DB-API connect function opening ``file`` as an immutable read-only SQLite database:
    no locks, no ``-shm``; a write fails with 'attempt to write a readonly database'."""
    uri = f"file:{quote(str(file.resolve()))}?immutable=1"

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(uri, uri=True, check_same_thread=False)

    return connect
