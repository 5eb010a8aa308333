"""The database URL from flags and the environment, its checks, and its password masking.

Precedence: command-line flag > environment variable > default.
* ``ADSEG_DATABASE_URL`` / ``--database-url``: a SQLAlchemy URL, SQLite or PostgreSQL.
  Default: a SQLite file ``adseg.db`` in the current working directory (embedded, zero set-up).
  PostgreSQL: ``postgresql+psycopg://user:password@host:5432/dbname``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote_plus

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

DEFAULT_DATABASE_URL = "sqlite:///adseg.db"
ENV_DATABASE_URL = "ADSEG_DATABASE_URL"


SUPPORTED_BACKENDS = ("sqlite", "postgresql")
MASK = "***"

# SQLAlchemy's own URL grammar (sqlalchemy.engine.url._parse_url), to look at the parts as typed
# before make_url turns them into values (it fails on a port that is not a number, and takes the
# tail of a password with an unescaped '@' for the host).
_URL_PATTERN = re.compile(
    r"""
    (?P<name>[\w\+]+)://
    (?:(?P<username>[^:/]*)(?::(?P<password>[^@]*))?@)?
    (?:(?:\[(?P<ipv6host>[^/\?]+)\]|(?P<ipv4host>[^/:\?]+))?(?::(?P<port>[^/\?]*))?)?
    (?:/(?P<database>[^\?]*))?
    (?:\?(?P<query>.*))?
    """,
    re.X,
)
_NOT_A_URL = "database URL is not a valid SQLAlchemy URL ({})."
_AT_IN_PASSWORD = (
    "database URL: an '@' follows the user:password part (a password with an unescaped '@'?): "
    "percent-encode '@' in the password as %40, e.g. user:pa%40ss@host, not user:pa@ss@host."
)
_AMBIGUOUS_USERINFO = (
    "database URL: an unescaped '@' (or a '?' before one) makes its user, password and host "
    "ambiguous: percent-encode '@' in the password as %40, and in the user name and query "
    "values too ('?' in a password as %3F, '/' as %2F), e.g. "
    "user@host:5432/db?password=pa%40ss, not user@host:5432/db?password=pa@ss."
)


def database_url(flag: str | None = None) -> str:
    """The database URL to use: the flag, else $ADSEG_DATABASE_URL, else the SQLite default."""
    env = os.environ.get(ENV_DATABASE_URL)
    given = flag if flag is not None else env
    if given is not None and not given.strip():
        # `--database-url "$DB"` with DB unset: the default database is not what was meant
        raise ValueError(
            f"the database URL (--database-url or ${ENV_DATABASE_URL}) is empty: give one, or "
            "leave both out for the default"
        )
    url = flag or env or DEFAULT_DATABASE_URL
    # never echo the URL itself: it may hold a password (mask_url's form only)
    parts = _URL_PATTERN.match(url)
    if parts is None:
        raise ValueError(_NOT_A_URL.format("ArgumentError"))
    if _ambiguous_userinfo(parts):
        raise ValueError(_AMBIGUOUS_USERINFO)
    if _misplaced_at(parts):
        raise ValueError(_AT_IN_PASSWORD)
    if (parts["ipv4host"] or "").startswith("["):  # the pattern read "[::1" as a host, ":1" a port
        raise ValueError(
            f"database URL {mask_url(url)}: the host opens an IPv6 address with '[' and never "
            "closes it with ']' (e.g. postgresql://user@[::1]:5432/db)."
        )
    port = parts["port"]
    if port is not None and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise ValueError(
            f"database URL {mask_url(url)}: the port {port!r} is not a number from 1 to 65535."
        )
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise ValueError(_NOT_A_URL.format(exc.__class__.__name__)) from None
    backend = parsed.get_backend_name()
    if backend not in SUPPORTED_BACKENDS:
        raise ValueError(
            f"database URL: adseg runs on {' and '.join(SUPPORTED_BACKENDS)}; got {backend!r}."
        )
    if backend == "sqlite" and (parsed.host or parsed.username or parsed.password or parsed.port):
        # SQLAlchemy refuses it only when connecting, in four lines, after `db upgrade` has
        # created the file it names
        raise ValueError(
            f"database URL {mask_url(url)}: a SQLite URL has no host or user; write "
            "sqlite:///relative/path.db or sqlite:////absolute/path.db"
        )
    refused = _REFUSED_QUERY_OPTIONS[backend] & {key.lower() for key in parsed.query}
    if refused:
        raise ValueError(
            f"database URL: the query option {sorted(refused)[0]!r} is not supported here "
            f"({_REFUSED_QUERY_OPTIONS_WHY[backend]})."
        )
    file = sqlite_file(url)
    if file is not None and not file.parent.is_dir():
        why = "is not a folder" if file.parent.exists() else "does not exist; create it first"
        raise ValueError(f"database URL: the SQLite file's folder {file.parent} {why}.")
    return url


_REFUSED_QUERY_OPTIONS = {
    "sqlite": frozenset({"uri"}),
    "postgresql": frozenset({"row_factory", "cursor_factory", "prepare_threshold"}),
}
_REFUSED_QUERY_OPTIONS_WHY = {
    # with uri=true SQLite opens another file than the path adseg checks (the query becomes part
    # of its name), so the guards against a mistyped path or a report over the database fail
    "sqlite": "give the SQLite file as sqlite:///path/to/file.db, without uri=true",
    # psycopg's Python-level options: text from a URL crashes the driver with a TypeError
    "postgresql": "it is a psycopg Python option, not a connection parameter",
}

SQLITE_SIDE_FILES = ("-journal", "-wal", "-shm")
"""Suffixes of the files SQLite keeps beside a database file (rollback journal, WAL, its index)."""


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL; None for another backend or an in-memory database."""
    parsed = make_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database.startswith(":memory:"):
        return None
    return Path(database)


def _ambiguous_userinfo(parts: re.Match) -> bool:
    """Whether what SQLAlchemy reads as user:password may hold the host, or a password's tail
    be read as the host. Its grammar takes the user name up to the first ':' and the password
    up to the next '@', wherever they are, so an '@' after a URL's host lands there:
    ``user@host:5432/db?password=pa@ss`` reads as user 'user@host', password
    '5432/db?password=pa' and host 'ss' (the password's tail); ``host:5432/db?password=pa@ss``
    as user 'host'. Refused: a user name with an '@' (also one meant as a name: it must be
    %40), or starting with '[' (an IPv6 host); a password with a '?' (a query's start), or
    one with a '/' after nothing but digits (a port and a database name). A password with a
    '/' elsewhere is SQLAlchemy's to read (generated passwords often have one). Also refused,
    off SQLite: a URL with no database name whose query holds an '@': in
    ``user:pa@ss?x=y@host/db`` the password 'pa' ends at the first '@', 'ss' becomes the host
    and the rest a query value (an '@' in a query value after a database name is fine)."""
    username, password = parts["username"], parts["password"]
    if username is not None and ("@" in username or username.startswith("[")):
        return True
    if parts["name"].split("+", 1)[0] != "sqlite" and parts["database"] is None:
        # (a query parameter with no '=' and an '@' is _misplaced_at's)
        pairs = (parts["query"] or "").split("&")
        if any("@" in pair and "=" in pair for pair in pairs):
            return True
    if password is None:
        return False
    if "?" in password:
        return True
    head, slash, _ = password.partition("/")
    return bool(slash) and (head == "" or (head.isascii() and head.isdigit()))


def _misplaced_at(parts: re.Match) -> bool:
    """Whether an '@' landed after the user:password part (in the host, the port, off SQLite the
    database name, or a query parameter with no '=': a password with '?' in it): always a
    password with an unescaped '@', whose tail is now read as a host. (A SQLite file path may
    hold an '@', and so may a query parameter's value.)"""
    after = [parts["ipv4host"], parts["ipv6host"], parts["port"]]
    if parts["name"].split("+", 1)[0] != "sqlite":
        after.append(parts["database"])
    if parts["query"]:
        after += [pair for pair in parts["query"].split("&") if "=" not in pair]
    return any("@" in (text or "") for text in after)


def mask_url(url: str) -> str:
    """The URL with every password replaced by ***, safe to print or log: the user:password one,
    and query parameters whose name contains "password" (``?password=``, ``sslpassword=``; any
    case). If an '@' shows the password was not percent-encoded, all of user:password and the
    text up to the last '@' become ***; if the user:password part may hold the host, or the host
    a password's tail (see _ambiguous_userinfo), all but the scheme does."""
    parts = _URL_PATTERN.match(url)
    if parts is None:
        return "<unparseable database URL>"
    if _ambiguous_userinfo(parts):  # which part is the password is unknown: show none
        return f"{parts['name']}://{MASK}"
    if _misplaced_at(parts):
        # the password's end is unknown: hide everything up to the host's own '@', the last one
        # before the first key=value query parameter
        end = len(url)
        if parts["query"] is not None:
            offset = parts.start("query")
            for pair in parts["query"].split("&"):
                if "=" in pair:
                    end = offset
                    break
                offset += len(pair) + 1
        last_at = url.rfind("@", 0, end)
        return _mask_query(f"{parts['name']}://{MASK}@{url[last_at + 1 :]}")
    # the text as typed, not SQLAlchemy's rendering of it, which decodes %2F in a database name
    # to '/' and percent-encodes non-ASCII: the name printed must be the name the user typed
    rendered = url
    if parts["password"] is not None:
        rendered = url[: parts.start("password")] + MASK + url[parts.end("password") :]
    return _mask_query(rendered)


def _mask_query(url: str) -> str:
    """``url`` with the value of each query parameter whose name contains "password" as ***, and
    any text with no '=' after such a value (the rest of a password with an unescaped '&')."""
    base, sep, query = url.partition("?")
    if not sep:
        return url
    pairs = []
    in_password = False
    for pair in query.split("&"):
        key, eq, _ = pair.partition("=")
        if eq:
            in_password = "password" in unquote_plus(key).lower()
            if in_password:
                pair = f"{key}={MASK}"
        elif in_password:
            pair = MASK
        pairs.append(pair)
    return base + sep + "&".join(pairs)
