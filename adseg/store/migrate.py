"""Run the Alembic migrations in adseg/store/migrations/ programmatically (``adseg db upgrade``).
They ship inside the package, so an installed wheel can migrate."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text

from adseg.store.engine import use_wal

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
MIGRATION_LOCK_KEY = int.from_bytes(b"adsegmig", "big")
"""Key of the PostgreSQL advisory lock that serialises migrations (a fixed BIGINT)."""


def lock_migrations(connection: Connection) -> None:
    """Wait for the lock that serialises migrations, held until the connection's transaction
    ends: two `adseg db upgrade` at once would otherwise both create the same tables (on
    PostgreSQL one fails on a duplicate key in pg_type, on SQLite on "table ... already
    exists"). Taken in the migration's transaction before Alembic reads the database's
    revision, so the second upgrade waits for the first to commit, then finds the schema
    current. PostgreSQL: a transaction-level advisory lock. SQLite: the database's write lock
    (BEGIN IMMEDIATE; the engine's busy timeout, 30 s, bounds the wait); Python's sqlite3 runs
    the DDL that follows inside that transaction, so a failed migration also rolls back."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
    elif connection.dialect.name == "sqlite":
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def _config(engine: Engine) -> Config:
    if not (MIGRATIONS_DIR / "env.py").exists():
        raise FileNotFoundError(
            f"Alembic migrations not found at {MIGRATIONS_DIR}: this adseg installation is "
            "incomplete (reinstall adseg)."
        )
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> str | None:
    """Upgrade the database to ``revision`` (default: the newest) and return the revision it was
    at when this upgrade took the migration lock (None: empty). That is the true starting point
    when another upgrade ran first: a revision read before waiting for the lock would be stale.
    Raises ValueError for a revision this adseg does not know, for a database at one (a newer
    adseg migrated it), and for a target older than the database's revision (upgrades only
    move forward)."""
    known = known_revisions()
    if revision != "head" and revision not in known:
        raise ValueError(f"unknown schema revision {revision!r}; known: {', '.join(known)}, head")
    current = check_known(engine)
    if current is not None and revision != "head" and known.index(revision) < known.index(current):
        raise ValueError(
            f"the database is at {current}, newer than {revision}: `adseg db upgrade` only moves "
            "forward (restore a backup to go back)"
        )
    cfg = _config(engine)
    command.upgrade(cfg, revision)
    use_wal(engine)  # a SQLite file created empty was filled without it
    return cfg.attributes.get("revision_at_lock", current)


def refuse_foreign_tables(connection) -> None:
    """ValueError when a database without an adseg revision already has tables (or views) under
    adseg's names (another application's: the first migration failed on them half-way with 'table …
    already exists', exit 1). Other tables are left alone: a PostgreSQL schema may be shared.
    Called by migrations/env.py under the migration lock, when the revision read there is None:
    checked before the lock, a concurrent first upgrade's new tables looked foreign."""
    from sqlalchemy import inspect

    from adseg.store.models import Base

    inspector = inspect(connection)
    names = set(inspector.get_table_names()) | set(inspector.get_view_names())
    taken = sorted(names & set(Base.metadata.tables))
    if taken:
        raise ValueError(
            f"the database has no adseg schema revision but already has table(s) named as "
            f"adseg's: {', '.join(taken)} (another application's database?): point "
            "--database-url at an empty database or an adseg one"
        )


def known_revisions() -> list[str]:
    """This adseg's schema revisions, oldest first."""
    script = ScriptDirectory.from_config(_config_without_engine())
    return [rev.revision for rev in reversed(list(script.walk_revisions()))]


def _unknown_message(current: str) -> str:
    return (
        f"the database is at schema revision {current}, which this adseg does not know (its "
        f"newest is {head_revision()}): a newer adseg migrated it (upgrade adseg), or it is "
        "another application's database that also uses Alembic (point --database-url elsewhere)"
    )


def check_known(engine: Engine) -> str | None:
    """The database's revision; ValueError if this adseg does not know it."""
    current = current_revision(engine)
    if current is not None and current not in known_revisions():
        raise ValueError(_unknown_message(current))
    return current


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None for an empty database."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str:
    """The newest revision in migrations/."""
    head = ScriptDirectory.from_config(_config_without_engine()).get_current_head()
    assert head is not None
    return head


def is_up_to_date(engine: Engine) -> bool:
    return current_revision(engine) == head_revision()


def _config_without_engine() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg
