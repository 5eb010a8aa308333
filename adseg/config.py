"""Settings from flags and the environment.

Precedence: command-line flag > environment variable > default.
* ``ADSEG_DATABASE_URL`` / ``--database-url``: a SQLAlchemy URL, SQLite or PostgreSQL.
  Default: a SQLite file ``adseg.db`` in the current working directory (embedded, zero set-up).
  PostgreSQL: ``postgresql+psycopg://user:password@host:5432/dbname``.
* ``ADSEG_DATA_DIR``: where generated marketplaces go (default ``./data``).
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

DEFAULT_DATABASE_URL = "sqlite:///adseg.db"
ENV_DATABASE_URL = "ADSEG_DATABASE_URL"
ENV_DATA_DIR = "ADSEG_DATA_DIR"


SUPPORTED_BACKENDS = ("sqlite", "postgresql")


def database_url(flag: str | None = None) -> str:
    """The database URL to use: the flag, else $ADSEG_DATABASE_URL, else the SQLite default."""
    url = flag or os.environ.get(ENV_DATABASE_URL) or DEFAULT_DATABASE_URL
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        # never echo the URL itself: it may hold a password
        raise ValueError(
            f"database URL is not a valid SQLAlchemy URL ({exc.__class__.__name__})."
        ) from None
    backend = parsed.get_backend_name()
    if backend not in SUPPORTED_BACKENDS:
        raise ValueError(
            f"database URL: adseg runs on {' and '.join(SUPPORTED_BACKENDS)}; got {backend!r}."
        )
    file = sqlite_file(url)
    if file is not None and not file.parent.is_dir():
        raise ValueError(
            f"database URL: the SQLite file's folder {file.parent} does not exist; create it first."
        )
    return url


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL; None for another backend or an in-memory database."""
    parsed = make_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database.startswith(":memory:"):
        return None
    return Path(database)


def mask_url(url: str) -> str:
    """The URL with its password replaced by ***, safe to print or log."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable database URL>"


def data_dir() -> Path:
    """Folder for generated data (default ./data)."""
    return Path(os.environ.get(ENV_DATA_DIR, "data"))
