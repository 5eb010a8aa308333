"""Run the Alembic migrations in migrations/ programmatically (``adseg db upgrade``)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


def _config(engine: Engine) -> Config:
    if not (MIGRATIONS_DIR / "env.py").exists():
        raise FileNotFoundError(
            f"Alembic migrations not found at {MIGRATIONS_DIR}; install adseg from its source "
            "tree (pip install -e .)."
        )
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Upgrade the database to ``revision`` (default: the newest)."""
    command.upgrade(_config(engine), revision)


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
