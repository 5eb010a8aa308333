"""Database URLs and errors a scheduled job must get right: a password's tail never read as the
host, exit codes by SQLSTATE (75 retry later, 2 configuration, 1 a failed run), and
`adseg db upgrade` run twice at once."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import psycopg
import psycopg.errors
import pytest
import typer
from sqlalchemy import text
from sqlalchemy.exc import DatabaseError, OperationalError, ProgrammingError
from typer.testing import CliRunner

from adseg.cli import app, handle_errors
from adseg.store.url import SQLITE_SIDE_FILES, database_url, mask_url, sqlite_file

runner = CliRunner()
PG = "postgresql+psycopg"
REPO = Path(__file__).resolve().parents[1]


# --- 1. an unescaped '@' after the host: refused, and no part of the password printed ---------

# SQLAlchemy's grammar reads the user name up to the first ':' and the password up to the next
# '@': in these the host and port land in the user:password part, and the password's tail
# ("ret9") becomes the host it would log in to
AMBIGUOUS = [
    f"{PG}://adseg@127.0.0.1:5432/qa3?password=adseg-test@ret9",  # as reported
    f"{PG}://adseg@127.0.0.1:5432?password=adseg-test@ret9",
    f"{PG}://127.0.0.1:5432/qa3?password=adseg-test@ret9",  # no user: the host is the "user"
    f"{PG}://127.0.0.1:/qa3?password=adseg-test@ret9",
    f"{PG}://[::1]:5432/qa3?password=adseg-test@ret9",
    f"{PG}://adseg:adseg?test@ret9/qa3",  # a '?' in the password
    f"{PG}://adseg@corp:adseg-test@ret9/qa3",  # an '@' in the user name
    f"{PG}://adseg:adseg-test@ret9?x=y@127.0.0.1:5432/qa3",  # '@', '?', '=' in the password
    f"{PG}://adseg:adseg-test@ret9?x=y@127.0.0.1",
]


@pytest.mark.parametrize("url", AMBIGUOUS)
def test_a_password_tail_is_not_read_as_the_host(url):
    with pytest.raises(ValueError) as caught:
        database_url(url)
    message = str(caught.value)
    assert "percent-encode '@' in the password as %40" in message
    for secret in ("adseg-test", "ret9", "test@"):
        assert secret not in message
        assert secret not in mask_url(url)
    assert mask_url(url) == f"{PG}://***"


@pytest.mark.parametrize("command", [["runs"], ["db", "upgrade"]])
def test_the_cli_refuses_a_password_tail_as_host_with_exit_2(command):
    """It was exit 75 (a job retried forever), printing "failed to resolve host 'ret9'"."""
    result = runner.invoke(app, [*command, "--database-url", AMBIGUOUS[0]])
    assert result.exit_code == 2, result.output
    assert "percent-encode '@' in the password as %40" in " ".join(result.output.split())
    assert "ret9" not in result.output and "adseg-test" not in result.output


@pytest.mark.parametrize(
    "url",
    [
        f"{PG}://adseg@127.0.0.1:5432/qa3?password=adseg-test%40ret9",  # encoded: fine
        f"{PG}://adseg%40corp:adseg-test%40ret9@127.0.0.1:5432/qa3",
        f"{PG}://u:pa/ss+wd==@h:5432/db",  # a base64 password: SQLAlchemy reads it right
        f"{PG}://u@h/db?application_name=me@x",  # an '@' in a query value, no port: fine
    ],
)
def test_urls_that_read_one_way_only_pass(url):
    assert database_url(url) == url


def test_a_query_password_with_an_unescaped_ampersand_is_masked_whole():
    url = f"{PG}://u@h/db?password=adseg&test@ret9&sslmode=require"
    masked = mask_url(url)
    assert masked == f"{PG}://***@h/db?password=***&***&sslmode=require"
    assert "test" not in masked and "ret9" not in masked


# --- 2. exit codes by SQLSTATE, and "run N failed:" for a run's database error -----------------


def _exit(exc: BaseException, capsys) -> tuple[int, str]:
    @handle_errors
    def command():
        raise exc

    with pytest.raises(typer.Exit) as caught:
        command()
    return caught.value.exit_code, " ".join(capsys.readouterr().err.split())


def _db_error(orig: Exception, cls=OperationalError) -> DatabaseError:
    return cls("SELECT 1", {}, orig)


@pytest.mark.parametrize(
    "sqlstate, message, code, hint",
    [
        ("53300", 'too many connections for role "adseg"', 75, "retry later"),
        ("57P03", "the database system is starting up", 75, "retry later"),
        ("57P03", "the database system is shutting down", 75, "retry later"),
        ("57P01", "terminating connection due to administrator command", 75, "retry later"),
        ("57P02", "terminating connection because of crash of another server process", 75, ""),
        ("08006", "connection failure", 75, "retry later"),
        ("08P01", "protocol violation", 75, "retry later"),
        ("28P01", 'password authentication failed for user "adseg"', 2, "check the user"),
        ("28000", 'role "nobody" does not exist', 2, "check the user"),
        ("3D000", 'database "nosuch" does not exist', 2, "check the user"),
        ("42501", "permission denied for schema public", 2, "CREATE on schema public"),
        ("23505", "duplicate key value violates unique constraint", 1, ""),
    ],
)
def test_server_errors_exit_by_sqlstate(sqlstate, message, code, hint, capsys):
    orig = psycopg.errors.lookup(sqlstate)(message)
    cls = ProgrammingError if sqlstate.startswith("42") else OperationalError
    exit_code, err = _exit(_db_error(orig, cls), capsys)
    assert exit_code == code, err
    assert err.startswith(f"error: database error: {message}")
    assert hint in err


def test_a_read_only_sqlite_database_names_every_file_that_may_be_the_cause(capsys):
    """The hint named only the file and its folder; a -shm that a reader of a 0444 file left
    behind (0444 too) kept every write failing after `chmod 0644` of the file (QA)."""
    error = _db_error(sqlite3.OperationalError("attempt to write a readonly database"))
    exit_code, err = _exit(error, capsys)
    assert exit_code == 2, err
    assert "the database file, its folder, or the -wal / -shm files beside it" in err


def test_a_sqlite_database_another_process_holds_is_retry_later(capsys):
    """It was exit 1, "database error: database is locked", with no hint, after the 30 s busy
    timeout: the case exit 75 is for (and exit 1 claims a failed run)."""
    exit_code, err = _exit(_db_error(sqlite3.OperationalError("database is locked")), capsys)
    assert exit_code == 75, err
    assert "another process holds the SQLite database's write lock" in err and "retry" in err


@pytest.mark.parametrize(
    "fatal, code",
    [
        ('too many connections for role "adseg"', 75),  # was 2 "check the user, password …"
        ('too many connections for database "adseg"', 75),
        ("sorry, too many clients already", 75),
        ("the database system is starting up", 75),
        ("the database system is in recovery mode", 75),
        ('password authentication failed for user "adseg"', 2),
        ('database "nosuch" does not exist', 2),
        ('permission denied for database "adseg"', 2),
        # a hot standby with hot_standby off: configuration, retrying cannot help
        ("the database system is not accepting connections", 2),
    ],
)
def test_a_refused_login_without_a_sqlstate_is_classed_by_its_message(fatal, code, capsys):
    """libpq gives no SQLSTATE for a login the server refused: psycopg's error has none."""
    orig = psycopg.OperationalError(
        f'connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  {fatal}'
    )
    assert orig.sqlstate is None
    exit_code, err = _exit(_db_error(orig), capsys)
    assert exit_code == code, err
    assert fatal in err


@pytest.mark.parametrize(
    "reason",
    [  # libpq's words (psycopg 3.3 prefixes "connection is bad: "); all but sslmode were 1
        'connection is bad: invalid target_session_attrs value: "bogus"',
        'connection is bad: invalid gssencmode value: "bogus"',
        'connection is bad: invalid load_balance_hosts value: "bogus"',
        'connection is bad: invalid sslmode value: "bogus"',
        "bad value for connect_timeout: 'abc'",
    ],
)
def test_a_connection_option_libpq_cannot_use_is_configuration(reason, capsys):
    exit_code, err = _exit(_db_error(psycopg.OperationalError(reason)), capsys)
    assert exit_code == 2, err
    assert "check the query options of the database URL" in err


@pytest.mark.parametrize(
    "reason",
    [
        "server does not support SSL, but SSL was required",  # sslmode=require, verify-full
        "channel binding required, but SSL not in use",  # channel_binding=require
    ],
)
def test_a_server_that_cannot_meet_the_urls_security_options_is_not_retry_later(reason, capsys):
    """It was 75, 'is the server running and reachable? retry later': a scheduler retried a
    configuration that can never connect (QA)."""
    orig = psycopg.OperationalError(
        f'connection failed: connection to server at "127.0.0.1", port 5432 failed: {reason}'
    )
    exit_code, err = _exit(_db_error(orig), capsys)
    assert exit_code == 2, err
    assert "check the query options of the database URL" in err and "retry" not in err


@pytest.mark.parametrize(
    "orig, code",
    [
        # the server went away mid-run: transient, retry later (was 1 with no "run N failed")
        (psycopg.errors.AdminShutdown("terminating connection due to administrator command"), 75),
        (psycopg.OperationalError("server closed the connection unexpectedly"), 75),
        # psycopg's own words for a session lost mid-query: no SQLSTATE, the connection is gone
        (psycopg.OperationalError("consuming input failed: EOF detected"), 75),
        (psycopg.errors.DiskFull("could not extend file: No space left on device"), 1),
        (psycopg.errors.InsufficientPrivilege("permission denied for table runs"), 1),
    ],
)
def test_a_database_error_in_a_run_names_the_failed_run(orig, code, capsys):
    from adseg.app.runs import RunFailed

    exc = _db_error(orig)
    exc.connection_invalidated = "EOF detected" in str(orig)  # as SQLAlchemy marks a lost one
    failed = RunFailed(7, exc)  # as app.runs.locked_run raises it
    failed.__cause__ = exc
    exit_code, err = _exit(failed, capsys)
    assert exit_code == code, err
    assert err.startswith(f"error: run 7 failed: database error: {orig}")


def _skip_unless_postgres(db_url: str) -> None:
    if db_url.startswith("sqlite"):
        pytest.skip("a PostgreSQL server is needed")


def test_a_connection_dropped_mid_run_fails_the_run_and_says_retry(db_url, monkeypatch):
    """A stage whose connection breaks: on PostgreSQL an administrator ends the session (57P01,
    75: retry later); on SQLite a disk I/O error (1). Either way "run N failed:", run row too."""
    from adseg.app import nightly
    from adseg.ingest import read_directory
    from adseg.store import migrate
    from adseg.store.engine import make_engine
    from adseg.store.load import write_batch

    engine = make_engine(db_url)
    migrate.upgrade(engine)
    write_batch(engine, read_directory(REPO / "sample_campaigns" / "tiny"))

    def broken_stages(engine, run_id, *args):
        with engine.connect() as conn:
            if engine.dialect.name == "postgresql":
                pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
                with engine.connect() as other:  # waits (5 s at most) until it has ended
                    other.execute(text("SELECT pg_terminate_backend(:p, 5000)"), {"p": pid})
                conn.execute(text("SELECT 1"))
            else:
                import sqlite3

                raise OperationalError("SELECT 1", {}, sqlite3.OperationalError("disk I/O error"))

    monkeypatch.setattr(nightly, "_run_stages", broken_stages)
    result = runner.invoke(app, ["nightly", "--database-url", db_url, "--quiet"])
    with engine.connect() as conn:
        run_id, status = conn.execute(
            text("SELECT run_id, status FROM runs ORDER BY run_id DESC")
        ).first()
    engine.dispose()
    assert status == "failed"
    output = " ".join(result.output.split())
    if db_url.startswith("sqlite"):
        assert result.exit_code == 1, result.output
        assert output.startswith(f"error: run {run_id} failed: database error: disk I/O error")
    else:
        assert result.exit_code == 75, result.output
        assert output.startswith(
            f"error: run {run_id} failed: database error: terminating connection due to "
            "administrator command"
        )
        assert "retry later" in output


def test_db_upgrade_without_create_on_the_schema_is_a_configuration_error(db_url):
    """It was exit 1, as if a run had failed."""
    _skip_unless_postgres(db_url)
    from adseg.store.engine import make_engine

    engine = make_engine(db_url)
    with engine.begin() as conn:
        if conn.execute(
            text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        ).scalar():
            pytest.skip("a superuser has every privilege")
        conn.execute(text("REVOKE CREATE ON SCHEMA public FROM CURRENT_USER, PUBLIC"))
    engine.dispose()
    result = runner.invoke(app, ["db", "upgrade", "--database-url", db_url])
    assert result.exit_code == 2, result.output
    output = " ".join(result.output.split())
    assert "database error: permission denied for schema public" in output
    assert "CREATE on schema public" in output


# --- 3. two `adseg db upgrade` at once --------------------------------------------------------


def _upgrade_process(db_url: str) -> subprocess.Popen:
    env = os.environ | {"OPENBLAS_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "adseg", "db", "upgrade", "--database-url", db_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=REPO,
    )


@contextmanager
def _migration_lock_held(db_url: str):
    """Hold the lock `adseg db upgrade` takes (PostgreSQL: the advisory lock; SQLite: the write
    lock) until the block ends, then let it go without writing anything."""
    if db_url.startswith("sqlite"):
        holder = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        return
    from adseg.store import migrate
    from adseg.store.engine import make_engine

    engine = make_engine(db_url)
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": migrate.MIGRATION_LOCK_KEY})
        yield
        conn.rollback()
    engine.dispose()


def test_db_upgrade_waits_for_the_migration_lock(db_url):
    from adseg.store import migrate
    from adseg.store.engine import make_engine

    with _migration_lock_held(db_url):
        upgrade = _upgrade_process(db_url)
        time.sleep(3)
        assert upgrade.poll() is None, upgrade.communicate()[0]  # still waiting
    output, _ = upgrade.communicate(timeout=120)
    assert upgrade.returncode == 0, output
    engine = make_engine(db_url)
    assert migrate.current_revision(engine) == migrate.head_revision()
    engine.dispose()


def _empty(db_url: str) -> None:
    """Back to no database (SQLite) or an empty schema (PostgreSQL)."""
    file = sqlite_file(db_url)
    if file is not None:
        for suffix in ("", *SQLITE_SIDE_FILES):
            file.with_name(file.name + suffix).unlink(missing_ok=True)
        return
    from adseg.store.engine import make_engine

    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


def test_two_db_upgrades_at_once_both_succeed(db_url):
    """One used to fail. PostgreSQL: duplicate key value violates unique constraint
    "pg_type_typname_nsp_index" (both created the same tables). SQLite, on a new file: "table
    run_locks already exists" (Alembic committed after each revision, so the two interleaved),
    and the failing one then deleted the database the other had just created, as if it were its
    own empty file."""
    from adseg.store import migrate
    from adseg.store.engine import make_engine

    for _ in range(4):  # the race was lost about one time in three (PostgreSQL), 5 in 6 (SQLite)
        _empty(db_url)
        upgrades = [_upgrade_process(db_url) for _ in range(2)]
        outputs = [p.communicate(timeout=120)[0] for p in upgrades]
        assert [p.returncode for p in upgrades] == [0, 0], outputs
        # the second reads where it starts from under the lock, after the first committed; it
        # used to say "empty -> head" too, though it had migrated nothing
        head = migrate.head_revision()
        starts = sorted(line.split(": ")[-1] for line in map(str.strip, outputs))
        assert starts == [f"{head} -> {head}", f"empty -> {head}"], outputs
        engine = make_engine(db_url)
        assert migrate.current_revision(engine) == migrate.head_revision()
        engine.dispose()


def test_a_failed_migration_on_sqlite_rolls_back_every_revision(tmp_path, monkeypatch):
    """All revisions run in one transaction: a failure in the last leaves the database where it
    was, not at a revision in between."""
    from adseg.store import migrate
    from adseg.store.engine import make_engine

    url = f"sqlite:///{tmp_path / 'adseg.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine, migrate.known_revisions()[0])
    with engine.begin() as conn:  # the last revision's new table, already there: it must fail
        conn.execute(text("CREATE TABLE run_locks (name TEXT)"))
    with pytest.raises(OperationalError, match="run_locks already exists"):
        migrate.upgrade(engine)
    assert migrate.current_revision(engine) == migrate.known_revisions()[0]
    tables = set(pd.read_sql("SELECT name FROM sqlite_master WHERE type = 'table'", engine).name)
    assert "base_clustering_columns" not in tables  # 0002's table, rolled back with the rest
    engine.dispose()


# --- 4. a SQLite database in a folder this user cannot write -----------------------------------


def _idle_database(folder: Path) -> str:
    """A migrated SQLite database in ``folder`` with no connection open (no -wal, no -shm)."""
    from adseg.store import migrate
    from adseg.store.engine import make_engine

    url = f"sqlite:///{folder / 'adseg.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    assert not any((folder / f"adseg.db{side}").exists() for side in SQLITE_SIDE_FILES)
    return url


def _read_and_try_to_write(url: str) -> tuple[str, str]:
    """The revision read through make_engine (for reading), and the error a write gets."""
    from adseg.store import migrate
    from adseg.store.engine import make_engine

    engine = make_engine(url, writes=False)
    try:
        revision = migrate.current_revision(engine)
        try:
            with engine.begin() as conn:
                conn.execute(text("CREATE TABLE scratch (x INTEGER)"))
            written = "written"
        except OperationalError as exc:
            written = str(exc.orig)
    finally:
        engine.dispose()
    return revision, written


def test_an_idle_wal_database_in_a_read_only_folder_is_read_without_locks(
    tmp_path, monkeypatch, caplog
):
    """An analyst could not read the nightly's database from a folder they cannot write: SQLite
    must create the WAL index (-shm) beside a WAL database before it reads it, so even a
    read-only open failed with 'attempt to write a readonly database'. Now such a file is opened
    immutable (read-only, no locks), with a warning; a write still fails, and nothing is created
    beside the file."""
    from adseg.store import engine as engine_module
    from adseg.store import migrate

    url = _idle_database(tmp_path)
    monkeypatch.setattr(engine_module, "_folder_writable", lambda folder: False)
    with caplog.at_level("WARNING", logger="adseg.store.engine"):
        revision, written = _read_and_try_to_write(url)
    assert revision == migrate.head_revision()
    assert "readonly database" in written
    assert f"its folder {tmp_path} is not writable by this user" in caplog.text
    assert not any((tmp_path / f"adseg.db{side}").exists() for side in SQLITE_SIDE_FILES)
    # an empty WAL holds nothing the file lacks: still immutable; a WAL with frames and its
    # -shm (a connection has it open, or died) is read by SQLite's own read-only WAL path,
    # through the existing -shm, with locks
    database = tmp_path / "adseg.db"
    (tmp_path / "adseg.db-wal").touch()
    assert engine_module._read_only_opener(database, "adseg.db") is not None
    (tmp_path / "adseg.db-wal").write_bytes(b"\0" * 32)
    (tmp_path / "adseg.db-shm").touch()
    assert engine_module._read_only_opener(database, "adseg.db") is None


def _as_nobody(work) -> str:
    """What ``work()`` returns (a string) when run in a forked child that has become uid/gid
    65534, or 'error TYPE: MESSAGE'. Needs root."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become 'nobody', work, report through the pipe, exit
        outcome = "error"
        try:
            os.setgid(65534)
            os.setuid(65534)
            outcome = work()
        except BaseException as exc:  # everything goes back to the parent's assertion
            outcome = f"error {type(exc).__name__}: {exc}"
        finally:
            os.write(write_end, outcome.encode())
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as stream:
        outcome = stream.read()
    os.waitpid(pid, 0)
    return outcome


AS_ROOT = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to act as 'nobody'"
)


@AS_ROOT
def test_another_user_reads_the_database_from_a_folder_they_cannot_write(tmp_path, monkeypatch):
    """The same with real permissions: root writes the database into a 0755 folder, and a child
    process that has become uid/gid 65534 reads it (before the fix: 'attempt to write a
    readonly database') and cannot write it."""
    import tempfile

    from adseg.store import engine as engine_module
    from adseg.store import migrate

    folder = Path(tempfile.mkdtemp(dir="/tmp", prefix="adseg-ro-"))  # /tmp: others can enter
    try:
        folder.chmod(0o755)
        url = _idle_database(folder)
        (folder / "adseg.db").chmod(0o644)
        with monkeypatch.context() as patched:  # load every module the read needs, as root
            patched.setattr(engine_module, "_folder_writable", lambda f: False, raising=False)
            _read_and_try_to_write(url)
        outcome = _as_nobody(lambda: "|".join(_read_and_try_to_write(url)))
        revision, _, written = outcome.partition("|")
        assert revision == migrate.head_revision(), outcome
        assert "readonly database" in written
        assert not any((folder / f"adseg.db{side}").exists() for side in SQLITE_SIDE_FILES)
    finally:
        for child in folder.iterdir():
            child.unlink()
        folder.rmdir()


def test_a_command_that_writes_is_refused_a_database_in_a_folder_it_cannot_write(
    tmp_path, monkeypatch, caplog
):
    """Such a command (here ingest and nightly) printed the 'reading it read-only' warning, then
    failed on its first write with 'attempt to write a readonly database'. It is now refused
    before any work with one line naming the folder (exit 2); a reading command still reads,
    and nothing is created beside the file."""
    from adseg.store import engine as engine_module
    from adseg.store.engine import make_engine

    url = _idle_database(tmp_path)
    monkeypatch.setattr(engine_module, "_folder_writable", lambda folder: False)
    with pytest.raises(ValueError, match=rf"its folder {tmp_path} is not writable by this user"):
        make_engine(url)
    (tmp_path / "inbox").mkdir()
    with caplog.at_level("WARNING"):
        for args in (["ingest", str(tmp_path / "inbox")], ["nightly"], ["db", "unlock"]):
            result = runner.invoke(app, [*args, "--database-url", url])
            assert result.exit_code == 2, (args, result.output)
            assert result.output.count("error:") == 1
            assert "cannot write it: its folder" in result.output
        assert "reading it read-only" not in caplog.text
        (tmp_path / "elsewhere").mkdir()
        link = tmp_path / "elsewhere" / "link.db"
        link.symlink_to(tmp_path / "adseg.db")
        result = runner.invoke(app, ["nightly", "--database-url", f"sqlite:///{link}"])
        assert result.exit_code == 2  # the path given, and the file whose folder counts
        assert f"{link} (resolved: {tmp_path / 'adseg.db'}): cannot write it" in result.output
        result = runner.invoke(app, ["runs", "--database-url", url])
    assert result.exit_code == 0, result.output
    assert "reading it read-only" in caplog.text
    assert not any((tmp_path / f"adseg.db{side}").exists() for side in SQLITE_SIDE_FILES)


def test_a_link_to_a_database_being_written_reads_its_wal(tmp_path, monkeypatch):
    """SQLite follows a symbolic link to the database and keeps the -wal and -shm beside the
    target. The -wal was looked for beside the link, so a database with a live WAL, reached
    through a link, was opened immutable: the transactions committed to its WAL were not read
    (a run the nightly had finished was missing), with a warning naming the link's folder."""
    from adseg.store import engine as engine_module
    from adseg.store.engine import make_engine

    (tmp_path / "data").mkdir()
    (tmp_path / "links").mkdir()
    _idle_database(tmp_path / "data")
    (tmp_path / "links" / "adseg.db").symlink_to(tmp_path / "data" / "adseg.db")
    writer = sqlite3.connect(tmp_path / "data" / "adseg.db")
    try:
        writer.execute("PRAGMA wal_autocheckpoint=0")  # the row stays in the WAL
        writer.execute("CREATE TABLE committed_in_wal (x INTEGER)")
        writer.execute("INSERT INTO committed_in_wal VALUES (1)")
        writer.commit()
        assert (tmp_path / "data" / "adseg.db-wal").exists()
        monkeypatch.setattr(engine_module, "_folder_writable", lambda folder: False)
        url = f"sqlite:///{tmp_path / 'links' / 'adseg.db'}"
        assert engine_module._read_only_opener(tmp_path / "data" / "adseg.db", "") is None
        engine = make_engine(url, writes=False)
        try:
            with engine.connect() as conn:
                rows = conn.execute(text("SELECT x FROM committed_in_wal")).all()
        finally:
            engine.dispose()
        assert rows == [(1,)]
    finally:
        writer.close()


def test_a_database_this_user_cannot_read_gets_no_read_only_warning(tmp_path, monkeypatch):
    """A database file this user may not read (0600, another owner) in a folder they cannot
    write was announced as 'reading it read-only, without locks' just before SQLite's 'unable
    to open database file': it is left to that error alone."""
    from adseg.store import engine as engine_module

    url = _idle_database(tmp_path)
    database = str(tmp_path / "adseg.db")
    real_access = os.access
    monkeypatch.setattr(engine_module, "_folder_writable", lambda folder: False)
    monkeypatch.setattr(
        engine_module.os,
        "access",
        lambda path, mode, **kw: False if str(path) == database else real_access(path, mode, **kw),
    )
    assert engine_module._unwritable_database(url) is None


@contextmanager
def _read_only_copy(folder: Path, files: list[Path]):
    """``folder`` on a read-only file system holding copies of ``files``: a tmpfs mounted
    read-only where this process may mount (root, as CI runs); else skipped."""
    import shutil

    staging = folder.parent / f"{folder.name}-staging"
    staging.mkdir()
    for file in files:
        shutil.copy(file, staging / file.name)
    folder.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(staging), str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {mounted.stderr.decode().strip()}")
    try:
        remount = ["mount", "-o", "remount,bind,ro", str(folder)]
        if subprocess.run(remount, capture_output=True).returncode != 0:
            pytest.skip("cannot remount read-only here")
        yield folder
    finally:
        # lazily: a pooled connection of the test may still hold the file open
        subprocess.run(["umount", "--lazy", str(folder)], capture_output=True)


def test_a_database_on_a_read_only_file_system_is_named_so(tmp_path, caplog):
    """A copy on a read-only mount was refused as "its folder is not writable by this user
    (run as a user who may write it, or change its permissions)": neither helps there (QA
    probe). The line says read-only file system; reading commands still read it."""
    if os.geteuid() != 0:
        pytest.skip("mounting needs root")
    url = _idle_database(tmp_path)
    with _read_only_copy(tmp_path / "ro", [tmp_path / "adseg.db"]) as folder:
        ro_url = f"sqlite:///{folder / 'adseg.db'}"
        res = runner.invoke(app, ["ingest", str(tmp_path), "--database-url", ro_url])
        output = " ".join(res.output.split())
        assert res.exit_code == 2, res.output
        assert "cannot write it: it is on a read-only file system" in output
        assert "remount this one read-write" in output and "change its permissions" not in output
        res = runner.invoke(app, ["runs", "--database-url", ro_url])
        assert res.exit_code == 0 and "it is on a read-only file system" in caplog.text
        res = runner.invoke(app, ["report", "--database-url", url, "-o", str(folder / "r.csv")])
        assert res.exit_code == 2 and "is on a read-only file system" in res.output


def test_a_read_only_mount_is_told_apart_from_permissions(tmp_path, monkeypatch):
    """:func:`adseg.checks.on_read_only_mount` reads statvfs's ST_RDONLY; a path it cannot
    stat (gone) is not called read-only."""
    from adseg import checks

    assert checks.on_read_only_mount(tmp_path) is False
    assert checks.on_read_only_mount(tmp_path / "missing") is False

    class Flags:
        f_flag = os.ST_RDONLY

    monkeypatch.setattr(checks.os, "statvfs", lambda path: Flags())
    assert checks.on_read_only_mount(tmp_path) is True


# --- 5. a read-only database file, and read-only files beside it -------------------------------


def test_a_read_only_database_file_is_read_without_leaving_read_only_files_beside_it(
    tmp_path, monkeypatch, caplog
):
    """A reader of a 0444 database (`adseg runs` by its owner, or by anyone) made SQLite create
    -wal and -shm files with the file's mode, 0444, and leave them: once the file was made
    writable again every write failed with 'attempt to write a readonly database'. Such a file
    is now read immutable (nothing created beside it), with a warning; a command that writes is
    refused before any work, naming the file and its mode."""
    from adseg.store import engine as engine_module
    from adseg.store import migrate
    from adseg.store.engine import make_engine

    url = _idle_database(tmp_path)
    database = tmp_path / "adseg.db"
    real = engine_module._file_writable
    monkeypatch.setattr(engine_module, "_file_writable", lambda f: f != database and real(f))
    with caplog.at_level("WARNING", logger="adseg.store.engine"):
        revision, written = _read_and_try_to_write(url)
    assert revision == migrate.head_revision()
    assert "readonly database" in written
    assert "the file is read-only for this user" in caplog.text
    assert not any((tmp_path / f"adseg.db{side}").exists() for side in SQLITE_SIDE_FILES)
    with pytest.raises(ValueError, match=r"cannot write it: the file is read-only for this user"):
        make_engine(url)
    for args in (["nightly"], ["db", "upgrade"]):
        result = runner.invoke(app, [*args, "--database-url", url])
        assert result.exit_code == 2, (args, result.output)
        assert f"{database}: cannot write it: the file is read-only" in result.output
    result = runner.invoke(app, ["runs", "--database-url", url])
    assert result.exit_code == 0, result.output
    assert not any((tmp_path / f"adseg.db{side}").exists() for side in SQLITE_SIDE_FILES)


def test_a_read_only_file_beside_the_database_refuses_writes_by_name(tmp_path, monkeypatch):
    """A read-only -shm (or -wal) beside a writable database made every write fail with
    'attempt to write a readonly database', which names neither file. A command that writes is
    now refused before any work, naming the file beside it and what to do."""
    from adseg.store import engine as engine_module
    from adseg.store.engine import make_engine

    url = _idle_database(tmp_path)
    shm = tmp_path / "adseg.db-shm"
    shm.touch()
    real = engine_module._file_writable
    monkeypatch.setattr(engine_module, "_file_writable", lambda f: f != shm and real(f))
    with pytest.raises(ValueError, match=rf"{shm}: cannot write the database: this file beside"):
        make_engine(url)
    result = runner.invoke(app, ["nightly", "--database-url", url])
    assert result.exit_code == 2, result.output
    assert "When no process has the database open, remove it" in result.output
    make_engine(url, writes=False).dispose()  # reading is not refused


def test_a_write_ahead_log_that_cannot_be_read_is_named(tmp_path, monkeypatch):
    """A database in a folder this user cannot write, with a -wal holding committed frames and
    no -shm (its writer died, and the -shm was removed) failed even `adseg runs` with SQLite's
    'unable to open database file'. The error now names the log and what to do; an empty -wal
    (nothing to read in it) is read immutable, as if it were not there."""
    from adseg.store import engine as engine_module
    from adseg.store.engine import make_engine

    url = _idle_database(tmp_path)
    monkeypatch.setattr(engine_module, "_folder_writable", lambda folder: False)
    wal = tmp_path / "adseg.db-wal"
    wal.touch()
    assert _read_and_try_to_write(url)[0]
    wal.write_bytes(b"\0" * 4096)
    with pytest.raises(ValueError, match=rf"cannot read it: its write-ahead log {wal} \(4096"):
        make_engine(url, writes=False)
    result = runner.invoke(app, ["runs", "--database-url", url])
    assert result.exit_code == 2, result.output
    assert "run any adseg command on the database as its owner" in result.output


@AS_ROOT
def test_another_user_reads_a_read_only_database_file_and_its_owner_writes_it_after(
    tmp_path,
):
    """The 0444 case with real permissions: 'nobody' owns a 0444 database in a folder it may
    write, reads it (before the fix this left 0444 -wal and -shm files), makes it 0644 and
    migrates it (before the fix: 'attempt to write a readonly database')."""
    import tempfile

    from adseg.store import migrate
    from adseg.store.engine import make_engine

    folder = Path(tempfile.mkdtemp(dir="/tmp", prefix="adseg-ro-"))  # /tmp: others can enter
    try:
        url = _idle_database(folder)
        database = folder / "adseg.db"
        for path in (folder, database):
            os.chown(path, 65534, 65534)
        database.chmod(0o444)

        def read_then_write() -> str:
            revision, _ = _read_and_try_to_write(url)
            left = [side for side in SQLITE_SIDE_FILES if Path(f"{database}{side}").exists()]
            database.chmod(0o644)
            engine = make_engine(url)
            try:
                migrate.upgrade(engine)
                with engine.begin() as conn:
                    conn.execute(text("CREATE TABLE scratch (x INTEGER)"))
            finally:
                engine.dispose()
            return f"{revision}|{left}"

        assert _as_nobody(read_then_write) == f"{migrate.head_revision()}|[]"
    finally:
        for child in folder.iterdir():
            child.unlink()
        folder.rmdir()


def test_an_empty_database_file_is_left_empty_by_a_refused_command(tmp_path):
    """A command refused an empty (0-byte) SQLite file for want of a schema turned it into a
    4,096-byte database on the way (setting WAL writes the header): a refused command must leave
    the data as it was (QA). `db upgrade` still makes it a database, in WAL mode afterwards."""
    from adseg.store import migrate
    from adseg.store.engine import make_engine

    database = tmp_path / "empty.db"
    database.touch()
    url = f"sqlite:///{database}"
    (tmp_path / "inbox").mkdir()
    for args in (["runs"], ["ingest", str(tmp_path / "inbox")], ["nightly"]):
        result = runner.invoke(app, [*args, "--database-url", url])
        assert result.exit_code == 2, (args, result.output)
        assert "the database has no adseg schema yet" in result.output
        assert "run `adseg db upgrade` first" in result.output
        assert database.stat().st_size == 0, args
        assert not any(Path(f"{database}{side}").exists() for side in SQLITE_SIDE_FILES)
    result = runner.invoke(app, ["db", "upgrade", "--database-url", url])
    assert result.exit_code == 0, result.output
    engine = make_engine(url)
    try:
        assert migrate.current_revision(engine) == migrate.head_revision()
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    finally:
        engine.dispose()


def test_the_engine_that_creates_a_sqlite_database_uses_wal(tmp_path):
    """The connect hook leaves an empty file alone (above), so the engine that migrated a new
    file kept rollback journalling on its open connections: a reader then blocked a writer,
    which WAL exists to avoid. db upgrade ends by setting WAL, which they follow."""
    from adseg.store import migrate
    from adseg.store.engine import make_engine

    engine = make_engine(f"sqlite:///{tmp_path / 'new.db'}")
    try:
        with engine.connect() as conn:  # opened before the upgrade, kept in the pool
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "delete"
        migrate.upgrade(engine)
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    finally:
        engine.dispose()
