"""Alembic environment bound to adseg's models. Run through ``adseg db upgrade``, which passes
the engine in ``config.attributes['engine']``; plain ``alembic`` uses $ADSEG_DATABASE_URL."""

from __future__ import annotations

from alembic import context

from adseg.store.engine import make_engine
from adseg.store.migrate import lock_migrations, refuse_foreign_tables
from adseg.store.models import Base
from adseg.store.url import database_url

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    engine = config.attributes.get("engine") or make_engine(database_url())
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER much
            # Python's sqlite3 runs DDL inside a transaction, so SQLite gets one transaction for
            # all migrations as PostgreSQL does: the migration lock is held to the end (Alembic
            # otherwise commits SQLite after each revision) and a failure rolls everything back
            transactional_ddl=True,
            compare_type=True,
        )
        with context.begin_transaction():
            lock_migrations(connection)  # one migration at a time, till commit
            # read under the lock: a concurrent upgrade may have migrated it while we waited
            config.attributes["revision_at_lock"] = context.get_context().get_current_revision()
            if config.attributes["revision_at_lock"] is None:
                refuse_foreign_tables(connection)
            context.run_migrations()
        connection.commit()


if context.is_offline_mode():
    context.configure(url=database_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
