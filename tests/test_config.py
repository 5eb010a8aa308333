"""Database URL handling: masking every password, refusing URLs that would leak one."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from adseg.cli import app
from adseg.store.url import ENV_DATABASE_URL, database_url, mask_url

runner = CliRunner()
PG = "postgresql+psycopg"


@pytest.mark.parametrize(
    "url, masked",
    [
        (f"{PG}://u:s3cretPW@h:5432/db", f"{PG}://u:***@h:5432/db"),
        (f"{PG}://qa@h:5/adseg?password=s3cretPW", f"{PG}://qa@h:5/adseg?password=***"),
        (f"{PG}://u:x@h/db?sslpassword=s3cretPW", f"{PG}://u:***@h/db?sslpassword=***"),
        (
            f"{PG}://u@h/db?sslmode=require&PassWord=s3cretPW&my_password_2=s3cretPW",
            f"{PG}://u@h/db?sslmode=require&PassWord=***&my_password_2=***",
        ),
        (
            f"{PG}://u@h/db?password=s3cretPW&password=s3cretPW",
            f"{PG}://u@h/db?password=***&password=***",
        ),
        # an unescaped '@' in the password: the whole user:password part is hidden
        (f"{PG}://u:s3c@retPW@127.0.0.1:1/db", f"{PG}://***@127.0.0.1:1/db"),
        (f"{PG}://u:s3c@ret:PW@h:5/db", f"{PG}://***@h:5/db"),
        (f"{PG}://u:s3c@ret/PW@h/db", f"{PG}://***@h/db"),
        (f"{PG}://u:s3c@ret?PW@h/db", f"{PG}://***@h/db"),
        (
            f"{PG}://u:s3c@retPW@h/db?application_name=me@x&sslpassword=s3cretPW",
            f"{PG}://***@h/db?application_name=me@x&sslpassword=***",
        ),
        # a port that is not a number: masked as typed, as every URL is
        (f"{PG}://u:s3cretPW@h:abc/db", f"{PG}://u:***@h:abc/db"),
        ("sqlite:///adseg.db", "sqlite:///adseg.db"),
        # the rest as typed: a database name's %2F is not decoded, non-ASCII not encoded
        (f"{PG}://u:s3cretPW@h/my%2Fdb", f"{PG}://u:***@h/my%2Fdb"),
        (f"{PG}://u:s3cretPW@h/déjà?sslmode=require", f"{PG}://u:***@h/déjà?sslmode=require"),
        (f"{PG}://u:@h/db", f"{PG}://u:***@h/db"),
        ("not a url", "<unparseable database URL>"),
    ],
)
def test_mask_url_hides_every_password(url, masked):
    assert mask_url(url) == masked
    for secret in ("s3c", "retPW", "PW@"):
        assert secret not in mask_url(url)


@pytest.mark.parametrize(
    "url",
    [
        f"{PG}://u:s3c@retPW@127.0.0.1:1/db",
        f"{PG}://u:s3c@ret:PW@h:5432/db",
        f"{PG}://u:s3c@ret/PW@h/db",
        f"{PG}://u:s3c@ret?PW@h/db",
    ],
)
def test_an_unescaped_at_in_the_password_is_refused_without_the_password(url):
    with pytest.raises(ValueError) as caught:
        database_url(url)
    message = str(caught.value)
    assert "percent-encode '@' in the password as %40" in message
    for secret in ("s3c", "ret", "PW"):
        assert secret not in message


@pytest.mark.parametrize("port", ["abc", "", "99999", "0", "-1", "５４３２"])
def test_a_bad_port_names_the_masked_url_and_the_port(port):
    url = f"{PG}://u:s3cretPW@h:{port}/db"
    with pytest.raises(ValueError) as caught:
        database_url(url)
    message = str(caught.value)
    # (make_url reads full-width digits as a number, so the masked URL shows 5432 for that one)
    assert message.startswith(f"database URL {PG}://u:***@h:")
    assert f"/db: the port {port!r} is not a number from 1 to 65535" in message
    assert "s3cretPW" not in message and "invalid literal" not in message


@pytest.mark.parametrize("url", [f"{PG}://u:s3cretPW@[::1/db", f"{PG}://u:s3cretPW@[::1:5432/db"])
def test_an_unclosed_ipv6_bracket_is_named_not_read_as_a_bad_port(url):
    """ "[::1/db" was reported as "the port ':1' is not a number" (QA probe)."""
    with pytest.raises(ValueError) as caught:
        database_url(url)
    message = str(caught.value)
    assert "opens an IPv6 address with '[' and never closes it with ']'" in message
    assert "is not a number from 1 to 65535" not in message and "s3cretPW" not in message
    assert database_url(f"{PG}://u@[::1]:5432/db") == f"{PG}://u@[::1]:5432/db"


@pytest.mark.parametrize(
    "url",
    [
        f"{PG}://u:pa%40ss@h:5432/db",  # '@' percent-encoded: fine
        f"{PG}://u@h/db?application_name=me@x",  # '@' in a query value: fine
        f"{PG}://h/db",
        "sqlite:///adseg.db",
    ],
)
def test_good_urls_pass_unchanged(url):
    assert database_url(url) == url


def test_a_sqlite_path_may_hold_an_at(tmp_path):
    folder = tmp_path / "me@corp"
    folder.mkdir()
    url = f"sqlite:///{folder / 'adseg.db'}"
    assert database_url(url) == url


def test_the_environment_variable_is_checked_the_same_way(monkeypatch):
    monkeypatch.setenv(ENV_DATABASE_URL, f"{PG}://u:s3c@retPW@127.0.0.1:1/db")
    with pytest.raises(ValueError, match="%40"):
        database_url()


@pytest.mark.parametrize(
    "url, message",
    [
        (f"{PG}://u:s3c@retPW@127.0.0.1:1/db", "percent-encode '@' in the password as %40"),
        (f"{PG}://u:s3cretPW@h:abc/db", f"{PG}://u:***@h:abc/db: the port 'abc' is not a number"),
    ],
)
@pytest.mark.parametrize("command", [["db", "current"], ["db", "upgrade"], ["runs"]])
def test_the_cli_refuses_them_as_usage_errors(url, message, command):
    result = runner.invoke(app, [*command, "--database-url", url])
    assert result.exit_code == 2, result.output
    output = " ".join(result.output.split())  # rich may wrap long lines
    assert message in output
    assert "s3c" not in result.output and "retPW" not in result.output


def test_the_cli_prints_query_passwords_masked(tmp_path):
    """No server listens on port 1: the connection error is printed, the ?password= is not."""
    url = f"{PG}://qa@127.0.0.1:1/adseg?password=s3cretPW"
    result = runner.invoke(app, ["db", "current", "--database-url", url])
    assert "s3cretPW" not in result.output


@pytest.mark.parametrize("args", [["nosuch"]])
def test_a_failed_db_upgrade_leaves_no_new_database_file(tmp_path, args):
    # a bad revision used to be found only after connecting, which had created the file
    path = tmp_path / "new.db"
    result = runner.invoke(app, ["db", "upgrade", *args, "--database-url", f"sqlite:///{path}"])
    assert result.exit_code == 2, result.output
    assert not path.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "url, code, message",
    [
        # libpq refuses the option before connecting: configuration, not a failed run (was 1)
        (f"{PG}://u:s3cretPW@127.0.0.1:1/db?Password=s3cretPW", 2, "query options"),
        (f"{PG}://u:s3cretPW@127.0.0.1:1/db?sslmode=bogus", 2, "query options"),
        (f"{PG}://u:s3cretPW@127.0.0.1:1/db?connect_timeout=x", 2, "query options"),
        # a Unix socket with no server behind it: retry later, like a refused TCP port (was 1)
        (f"{PG}://u@/db?host=/nonexistent-socket-dir&port=5998", 75, "retry later"),
        # tracebacks before: no such driver, mixed host formats
        ("postgresql+foo://u:s3cretPW@127.0.0.1/db", 2, "unknown database driver"),
        (f"{PG}://u:s3cretPW@/db?host=/tmp&port=5432&host=x", 2, "multihost"),
    ],
)
def test_bad_connection_settings_exit_with_the_documented_codes(url, code, message):
    result = runner.invoke(app, ["db", "current", "--database-url", url])
    assert result.exit_code == code, result.output
    assert message in " ".join(result.output.split())
    assert "s3cretPW" not in result.output and "Traceback" not in result.output
