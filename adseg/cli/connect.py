"""The database a command opens: the engine of ``--database-url`` and the schema check."""

from __future__ import annotations

from adseg.cli.errors import EXIT_BAD_INPUT, CliError
from adseg.store.url import database_url, sqlite_file


def _engine(url_flag: str | None, *, create: bool = False, writes: bool = True):
    """The engine for the URL. Only ``db upgrade`` may create a SQLite file: elsewhere a missing
    file is a mistyped URL, and connecting would leave an empty database behind. ``writes``:
    the command may write the database (see ``make_engine``: a SQLite file in a folder this
    user cannot write is refused for writing, read without locks for reading)."""
    from adseg.store.engine import make_engine

    url = database_url(url_flag)
    file = sqlite_file(url)
    if not create and file is not None and not file.exists():
        raise CliError(
            f"no SQLite database at {file}: `adseg db upgrade` creates it "
            "(or check --database-url / $ADSEG_DATABASE_URL)"
        )
    return make_engine(url, writes=writes)


def _require_schema(engine) -> None:
    from adseg.store import migrate

    current = migrate.check_known(engine)
    if current is None:
        raise CliError(
            "the database has no adseg schema yet (an empty database, or another "
            "application's): run `adseg db upgrade` first",
            EXIT_BAD_INPUT,
        )
    if current != migrate.head_revision():
        raise CliError(
            f"database schema is at {current}, not {migrate.head_revision()}: "
            "run `adseg db upgrade` first",
            EXIT_BAD_INPUT,
        )
