"""The database's exceptions under the store's names, so that the layers above it (app, cli)
catch them without importing SQLAlchemy, which only :mod:`adseg.store` imports.

* ``DatabaseError``: any error the database or its driver raised (``exc.orig`` is the driver's,
  ``exc.connection_invalidated`` says whether the connection was lost).
* ``OperationalError``: the subclass for a failure of the database itself (locked, gone, full).
"""

from sqlalchemy.exc import DatabaseError, OperationalError

__all__ = ["DatabaseError", "OperationalError"]
