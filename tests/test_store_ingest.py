"""Migrations, ingest round-trip, idempotency and validation — on SQLite and PostgreSQL."""

from __future__ import annotations

import gzip
import os
import sqlite3
import threading
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import inspect
from typer.testing import CliRunner

from adseg.cli import app
from adseg.store import migrate, reads
from adseg.store.engine import make_engine

runner = CliRunner()

ADVERTISERS = pd.DataFrame(
    {
        "advertiser_id": ["adv-1", "adv-2", "adv-3"],
        "name": ["Acme <b>Shoes</b>", "Beta", "Gamma & Sons"],
        "description": [
            'Shoes, boots and "sneakers"\nsecond line — ünïcode ✓',
            "plain text",
            "",
        ],
    }
)
AUCTIONS = pd.DataFrame(
    {
        "auction_id": ["a1", "a2", "a3", "a4"],
        "advertiser_id": ["adv-1", "adv-1", "adv-2", "adv-3"],
        "ts": [
            "2026-03-01T10:00:00Z",
            "2026-03-01T11:30:00Z",
            "2026-03-02T00:00:01Z",
            "2026-03-02T23:59:59Z",
        ],
        "bid_ecpm": ["2.5", "2.5", "1.0", "7.25"],
        "market_price_ecpm": ["1.2", "3.0", "0.5", "7.25"],
        "won": ["true", "false", "true", "true"],
        "paid_ecpm": ["1.2", "", "0.5", "7.25"],
    }
)
DELIVERY = pd.DataFrame(
    {
        "advertiser_id": ["adv-1", "adv-2", "adv-3"],
        "date": ["2026-03-01", "2026-03-02", "2026-03-02"],
        "bid_requests": ["1000", "100", "0"],
        "bid_ecpm": ["2.5", "1.0", "7.25"],
        "impressions": ["400", "60", "0"],
        "spend": ["0.52", "0.03", "0"],
    }
)


def write_dir(path: Path, fmt: str = "csv", **frames) -> Path:
    """Write the ingest files (defaults: the three frames above) in csv, csv.gz or parquet."""
    path.mkdir(parents=True, exist_ok=True)
    tables = {"advertisers": ADVERTISERS, "auctions": AUCTIONS, "delivery": DELIVERY}
    tables.update(frames)
    for name, frame in tables.items():
        if frame is None:
            continue
        if fmt == "parquet":
            frame.to_parquet(path / f"{name}.parquet", index=False)
        elif fmt == "csv.gz":
            with gzip.open(path / f"{name}.csv.gz", "wt", encoding="utf-8", newline="") as fh:
                frame.to_csv(fh, index=False)
        else:
            frame.to_csv(path / f"{name}.csv", index=False)
    return path


def ingest(url: str, directory: Path):
    return runner.invoke(app, ["ingest", str(directory), "--database-url", url, "--quiet"])


def test_migrations_upgrade_from_empty(db_url):
    engine = make_engine(db_url)
    assert migrate.current_revision(engine) is None
    migrate.upgrade(engine)
    assert migrate.current_revision(engine) == migrate.head_revision()
    tables = set(inspect(engine).get_table_names())
    assert {"advertisers", "auctions", "delivery", "runs"} <= tables
    migrate.upgrade(engine)
    assert migrate.current_revision(engine) == migrate.head_revision()
    engine.dispose()


def test_db_upgrade_command_masks_password(db_url):
    result = runner.invoke(app, ["db", "upgrade", "--database-url", db_url])
    assert result.exit_code == 0, result.output
    if "@" in db_url:
        password = db_url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
        assert password not in result.output
        assert "***" in result.output
    result = runner.invoke(app, ["db", "current", "--database-url", db_url])
    assert "up to date" in result.output


def test_db_current_and_summary_quiet(tmp_path):
    """`db current -q` prints the revision id alone (for scripts); `db summary -q` prints nothing
    but still refuses a database without a schema."""
    url = f"sqlite:///{tmp_path / 'q.db'}"
    assert runner.invoke(app, ["db", "upgrade", "-q", "--database-url", url]).exit_code == 0
    result = runner.invoke(app, ["db", "current", "-q", "--database-url", url])
    assert result.exit_code == 0 and result.output == f"{migrate.head_revision()}\n"
    result = runner.invoke(app, ["db", "summary", "--quiet", "--database-url", url])
    assert result.exit_code == 0 and result.output == ""
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    result = runner.invoke(app, ["db", "current", "-q", "--database-url", f"sqlite:///{empty}"])
    assert result.exit_code == 0 and result.output == ""
    result = runner.invoke(app, ["db", "summary", "-q", "--database-url", f"sqlite:///{empty}"])
    assert result.exit_code == 2 and "db upgrade" in result.output


@pytest.mark.parametrize(
    "url, message",
    [
        ("not a url", "not a valid SQLAlchemy URL"),
        ("mysql://bob:s3cret@dbhost/adseg", "adseg runs on sqlite and postgresql; got 'mysql'"),
        ("postgresql+pg8000://bob:s3cret@dbhost/adseg", "Python package 'pg8000'"),
        ("sqlite:////no/such/folder/adseg.db", "folder /no/such/folder does not exist"),
        # SQLite then opened a file named "adseg.db?password=s3cret" (created, and listed)
        ("sqlite:////tmp/adseg.db?uri=true&password=s3cret", "query option 'uri'"),
        # psycopg's Python options crashed with a 140-line TypeError traceback, exit 1
        ("postgresql+psycopg://bob:s3cret@h/db?row_factory=x", "query option 'row_factory'"),
        ("postgresql+psycopg://bob:s3cret@h/db?prepare_threshold=x", "'prepare_threshold'"),
    ],
)
def test_bad_database_urls_are_usage_errors_without_the_password(url, message):
    result = runner.invoke(app, ["runs", "--database-url", url])
    assert result.exit_code == 2, result.output
    assert message in result.output and "s3cret" not in result.output


@pytest.mark.parametrize(
    "url", ["sqlite://localhost/q.db", "sqlite://u:s3cret@/q.db", "sqlite://:s3cret@/q.db"]
)
def test_a_sqlite_url_with_a_host_is_refused_before_any_file_is_made(url, tmp_path, monkeypatch):
    """SQLAlchemy refused it only on connecting, in four lines, after `db upgrade` had created
    the empty file (QA: a 0-byte q.db left behind)."""
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["db", "upgrade", "--database-url", url])
    assert result.exit_code == 2, result.output
    assert "a SQLite URL has no host or user" in result.output and "s3cret" not in result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where", ["flag", "environment"])
def test_an_empty_database_url_is_refused_not_the_default(where, tmp_path, monkeypatch):
    """`--database-url "$DB"` with DB unset fell back to the default sqlite:///adseg.db in the
    working directory (QA): a nightly meant for one database read or wrote another."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ADSEG_DATABASE_URL", raising=False)
    if where == "flag":
        result = runner.invoke(app, ["db", "upgrade", "--database-url", ""])
    else:
        monkeypatch.setenv("ADSEG_DATABASE_URL", "")
        result = runner.invoke(app, ["db", "upgrade"])
    assert "the database URL (--database-url or $ADSEG_DATABASE_URL) is empty" in result.output
    assert result.exit_code == 2, result.output
    assert list(tmp_path.iterdir()) == []


def test_another_applications_tables_are_named_and_left_alone(tmp_path):
    """The first migration failed half-way on 'table advertisers already exists', exit 1 (QA);
    tables under other names do not stop an upgrade (a shared PostgreSQL schema)."""
    import sqlite3

    path = tmp_path / "foreign.db"
    with sqlite3.connect(path) as conn:
        conn.execute("create table advertisers (x int)")
        conn.execute("create table their_table (y int)")
    result = runner.invoke(app, ["db", "upgrade", "--database-url", f"sqlite:///{path}"])
    assert result.exit_code == 2, result.output
    assert "already has table(s) named as adseg's: advertisers" in result.output
    with sqlite3.connect(path) as conn:
        names = sorted(r[0] for r in conn.execute("select name from sqlite_master"))
    assert names == ["advertisers", "their_table"]
    view = tmp_path / "view.db"  # a view under an adseg name failed half-way too, exit 1
    with sqlite3.connect(view) as conn:
        conn.execute("create view runs as select 1 as x")
    result = runner.invoke(app, ["db", "upgrade", "--database-url", f"sqlite:///{view}"])
    assert result.exit_code == 2 and "named as adseg's: runs" in result.output, result.output
    other = tmp_path / "shared.db"
    with sqlite3.connect(other) as conn:
        conn.execute("create table their_table (y int)")
    result = runner.invoke(app, ["db", "upgrade", "-q", "--database-url", f"sqlite:///{other}"])
    assert result.exit_code == 0, result.output


def test_a_sqlite_path_through_a_file_says_so(tmp_path):
    """It said the folder 'does not exist' of a folder that exists as a file (QA)."""
    (tmp_path / "afile").write_text("x")
    result = runner.invoke(
        app, ["db", "upgrade", "--database-url", f"sqlite:///{tmp_path}/afile/x.db"]
    )
    assert result.exit_code == 2
    assert f"the SQLite file's folder {tmp_path / 'afile'} is not a folder" in result.output


def test_a_missing_sqlite_file_is_reported_not_created(tmp_path):
    """A mistyped URL must not leave an empty database behind; only `db upgrade` creates one."""
    path = tmp_path / "typo.db"
    for command in (["runs"], ["db", "current"], ["db", "summary"], ["report"]):
        result = runner.invoke(app, [*command, "--database-url", f"sqlite:///{path}"])
        assert result.exit_code == 2, (command, result.output)
        assert f"no SQLite database at {path}" in result.output
        assert not path.exists()
    result = runner.invoke(app, ["db", "upgrade", "--database-url", f"sqlite:///{path}"])
    assert result.exit_code == 0 and path.exists()


@pytest.mark.parametrize("fmt", ["csv", "csv.gz", "parquet"])
def test_ingest_round_trip(engine, db_url, tmp_path, fmt):
    result = ingest(db_url, write_dir(tmp_path / "in", fmt))
    assert result.exit_code == 0, result.output
    adv = reads.advertisers(engine)
    pd.testing.assert_frame_equal(adv, ADVERTISERS, check_dtype=False)
    auc = reads.auctions(engine)
    assert auc["auction_id"].tolist() == ["a1", "a2", "a3", "a4"]
    expected_ts = pd.to_datetime(AUCTIONS["ts"], utc=True)
    assert (auc["ts"].reset_index(drop=True) == expected_ts).all()
    assert auc["bid_ecpm"].tolist() == [2.5, 2.5, 1.0, 7.25]
    assert auc["market_price_ecpm"].tolist() == [1.2, 3.0, 0.5, 7.25]
    assert auc["won"].tolist() == [True, False, True, True]
    assert auc["paid_ecpm"].isna().tolist() == [False, True, False, False]
    dlv = reads.delivery(engine)
    assert dlv["bid_requests"].tolist() == [1000, 100, 0]
    assert dlv["impressions"].tolist() == [400, 60, 0]
    assert dlv["spend"].tolist() == [0.52, 0.03, 0.0]
    assert [str(d) for d in dlv["date"]] == ["2026-03-01", "2026-03-02", "2026-03-02"]


@pytest.mark.parametrize("fmt", ["csv", "csv.gz", "parquet"])
def test_files_with_a_header_and_no_rows_load_nothing(engine, db_url, tmp_path, fmt):
    """A header-only auctions file (a day with no logged auctions) failed on SQLite with numpy's
    'zero-size array to reduction operation maximum which has no identity', naming no file
    (QA); PostgreSQL loaded it. Now both load the other files and no auction."""
    result = ingest(db_url, write_dir(tmp_path / "in", fmt, auctions=AUCTIONS.iloc[:0]))
    assert result.exit_code == 0, result.output
    assert len(reads.advertisers(engine)) == 3 and len(reads.auctions(engine)) == 0
    assert len(reads.delivery(engine)) == 3


def test_description_with_commas_quotes_newlines_unicode_survives(engine, db_url, tmp_path):
    directory = write_dir(tmp_path / "in")
    raw = (directory / "advertisers.csv").read_text(encoding="utf-8")
    assert '""sneakers""' in raw  # the CSV really quotes it
    assert ingest(db_url, directory).exit_code == 0
    got = reads.advertisers(engine).set_index("advertiser_id")["description"]
    assert got["adv-1"] == 'Shoes, boots and "sneakers"\nsecond line — ünïcode ✓'


def test_reingest_is_idempotent(engine, db_url, tmp_path):
    directory = write_dir(tmp_path / "in")
    assert ingest(db_url, directory).exit_code == 0
    first = (reads.advertisers(engine), reads.auctions(engine), reads.delivery(engine))
    result = runner.invoke(app, ["ingest", str(directory), "--database-url", db_url])
    assert result.exit_code == 0, result.output
    assert "updated" in result.output
    second = (reads.advertisers(engine), reads.auctions(engine), reads.delivery(engine))
    for a, b in zip(first, second, strict=True):
        pd.testing.assert_frame_equal(a, b)


def test_counts_are_this_ingests_own_when_another_commits_meanwhile(
    engine, db_url, tmp_path, monkeypatch
):
    """Inserted rows were the table's count after less its count before: an ingest committing
    in between made a concurrent one print 'updated -1,500' (QA). The counts are now taken under
    the tables' write locks, so the other ingest waits for this one and then finds its rows."""
    import adseg.store.load as load
    from adseg.ingest import read_directory

    batch = read_directory(write_dir(tmp_path / "a"))
    other = make_engine(db_url)
    theirs = []
    upsert = f"_upsert_{engine.dialect.name}"
    real = getattr(load, upsert)

    def concurrent_ingest_first(conn, table, *args):
        if not theirs:  # once, inside this ingest's transaction, after its counts began
            theirs.append(threading.Thread(target=lambda: theirs.append(write(other))))
            theirs[0].start()
            theirs[0].join(2)  # it commits at once unless this ingest's locks hold it back
        return real(conn, table, *args)

    def write(bind):
        summary = load.write_batch(bind, batch)
        return {t.table: (t.inserted, t.updated, t.unchanged) for t in summary.tables}

    monkeypatch.setattr(load, upsert, concurrent_ingest_first)
    ours = write(engine)
    monkeypatch.setattr(load, upsert, real)
    theirs[0].join(30)
    other.dispose()
    sizes = {"advertisers": 3, "auctions": 4, "delivery": 3}
    assert ours == {table: (n, 0, 0) for table, n in sizes.items()}
    assert theirs[1] == {table: (0, 0, n) for table, n in sizes.items()}


def test_upsert_updates_changed_rows(engine, db_url, tmp_path):
    assert ingest(db_url, write_dir(tmp_path / "a")).exit_code == 0
    changed = ADVERTISERS.assign(name=["Acme 2", "Beta", "Gamma & Sons"])
    assert ingest(db_url, write_dir(tmp_path / "b", advertisers=changed)).exit_code == 0
    assert reads.advertisers(engine)["name"].tolist() == ["Acme 2", "Beta", "Gamma & Sons"]
    assert reads.table_counts(engine)["advertisers"] == 3


def _updated_at(engine) -> dict[str, object]:
    from sqlalchemy import text

    with engine.connect() as conn:
        rows = conn.execute(text("SELECT advertiser_id, updated_at FROM advertisers"))
        return dict(rows.all())


def test_reingest_writes_only_the_rows_that_changed(engine, tmp_path):
    """Re-ingesting the same files reported every row as 'updated' and moved every advertiser's
    updated_at (QA): an unchanged row is now left alone and counted as unchanged, on both
    backends; a changed row (a null paid price too) is updated and counted."""
    from adseg.ingest import read_directory
    from adseg.store.load import write_batch

    def counts(directory):
        summary = write_batch(engine, read_directory(directory))
        return {t.table: (t.rows, t.inserted, t.updated, t.unchanged) for t in summary.tables}

    assert counts(write_dir(tmp_path / "a")) == {
        "advertisers": (3, 3, 0, 0),
        "auctions": (4, 4, 0, 0),
        "delivery": (3, 3, 0, 0),
    }
    stamped = _updated_at(engine)
    assert counts(write_dir(tmp_path / "a")) == {
        "advertisers": (3, 0, 0, 3),
        "auctions": (4, 0, 0, 4),
        "delivery": (3, 0, 0, 3),
    }
    assert _updated_at(engine) == stamped
    advertisers = ADVERTISERS.assign(name=["Acme 2", "Beta", "Gamma & Sons"])
    # a2 was lost, with no paid price: a null against a value must count as a change
    auctions = AUCTIONS.assign(won=["true"] * 4, paid_ecpm=["1.2", "1.2", "0.5", "7.25"])
    assert counts(write_dir(tmp_path / "b", advertisers=advertisers, auctions=auctions)) == {
        "advertisers": (3, 0, 1, 2),
        "auctions": (4, 0, 1, 3),
        "delivery": (3, 0, 0, 3),
    }
    after = _updated_at(engine)
    assert after["adv-1"] != stamped["adv-1"]
    assert {k: after[k] for k in ("adv-2", "adv-3")} == {k: stamped[k] for k in ("adv-2", "adv-3")}


def _bad(frame: pd.DataFrame, row: int, **changes) -> pd.DataFrame:
    frame = frame.copy()
    for col, value in changes.items():
        frame.loc[row, col] = value
    return frame


BAD_CASES = {
    "missing column": ("auctions", AUCTIONS.drop(columns=["won"]), None, "missing required column"),
    "unparseable ts": ("auctions", _bad(AUCTIONS, 2, ts="yesterday"), 3, "ts is not an ISO-8601"),
    "negative price": ("auctions", _bad(AUCTIONS, 1, bid_ecpm="-1"), 2, "bid_ecpm is negative"),
    "infinite price": ("auctions", _bad(AUCTIONS, 0, market_price_ecpm="inf"), 1, "not a finite"),
    "text price": ("auctions", _bad(AUCTIONS, 0, bid_ecpm="abc"), 1, "bid_ecpm is not a finite"),
    "won not boolean": ("auctions", _bad(AUCTIONS, 3, won="maybe"), 4, "won is not a boolean"),
    "paid missing on win": ("auctions", _bad(AUCTIONS, 0, paid_ecpm=""), 1, "empty on a won"),
    "paid on loss": ("auctions", _bad(AUCTIONS, 1, paid_ecpm="1.0"), 2, "given on a lost"),
    "unknown advertiser": ("auctions", _bad(AUCTIONS, 2, advertiser_id="adv-9"), 3, "unknown adv"),
    "duplicate auction": ("auctions", _bad(AUCTIONS, 3, auction_id="a1"), 4, "duplicate key"),
    "bad date": ("delivery", _bad(DELIVERY, 1, date="2026-13-45"), 2, "date is not a YYYY-MM-DD"),
    "placeholder date": ("delivery", _bad(DELIVERY, 1, date="9999-12-31"), 2, "date is outside"),
    "epoch timestamp": (
        "auctions",
        _bad(AUCTIONS, 0, ts="1970-01-01T00:00:00Z"),
        1,
        "ts is outside 2000-01-01 … 2099-12-31",
    ),
    "impressions > requests": (
        "delivery",
        _bad(DELIVERY, 0, impressions="2000"),
        1,
        "impressions exceed bid_requests",
    ),
    "negative impressions": ("delivery", _bad(DELIVERY, 0, impressions="-1"), 1, "negative"),
    "fractional requests": ("delivery", _bad(DELIVERY, 2, bid_requests="1.5"), 3, "whole number"),
    "huge price": ("auctions", _bad(AUCTIONS, 1, market_price_ecpm="1e300"), 2, "above 1e+12"),
    "huge spend": ("delivery", _bad(DELIVERY, 0, spend="1e13"), 1, "spend is above"),
    "huge count": (
        "delivery",
        _bad(DELIVERY, 0, bid_requests="99999999999999999999999"),
        1,
        "bid_requests is above 9,007,199,254,740,992",
    ),
    "duplicate delivery": ("delivery", _bad(DELIVERY, 2, advertiser_id="adv-2"), 3, "duplicate"),
    "duplicate advertiser": ("advertisers", _bad(ADVERTISERS, 1, advertiser_id="adv-1"), 2, "dup"),
    "empty id": (
        "advertisers",
        _bad(ADVERTISERS, 2, advertiser_id=""),
        3,
        "advertiser_id is empty",
    ),
}


@pytest.mark.parametrize("case", list(BAD_CASES))
def test_validation_rejects_and_writes_nothing(engine, db_url, tmp_path, case):
    assert ingest(db_url, write_dir(tmp_path / "good")).exit_code == 0
    before = reads.table_counts(engine)
    before_auctions = reads.auctions(engine)
    table, frame, row, rule = BAD_CASES[case]
    # the bad file comes with NEW good rows in the other tables: none of them may land either
    new_adv = pd.concat(
        [
            ADVERTISERS,
            pd.DataFrame({"advertiser_id": ["adv-4"], "name": ["New"], "description": [""]}),
        ]
    )
    frames = {"advertisers": new_adv, table: frame}
    directory = write_dir(tmp_path / "bad", **frames)
    result = runner.invoke(app, ["ingest", str(directory), "--database-url", db_url])
    assert result.exit_code == 2, result.output
    message = result.output
    assert f"{table}.csv" in message
    assert rule in message
    if row is not None:
        assert f"row {row}" in message or f"rows {row}" in message
    assert "nothing was written" in message
    assert reads.table_counts(engine) == before
    pd.testing.assert_frame_equal(reads.auctions(engine), before_auctions)


def test_a_rejected_advertisers_file_does_not_make_every_id_unknown(engine, db_url, tmp_path):
    """advertisers.csv without its name column is the one problem reported: the other files'
    advertiser_ids cannot be checked against it, and calling them unknown would mislead."""
    directory = write_dir(tmp_path / "in", advertisers=ADVERTISERS.drop(columns=["name"]))
    result = ingest(db_url, directory)
    assert result.exit_code == 2
    assert "advertisers.csv: missing required column(s): name" in result.output
    assert "unknown advertiser_id" not in result.output
    # the one problem on the error line itself, naming the file (it came on a second line)
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: ingest rejected: ") and "advertisers.csv: missing" in line
    assert reads.table_counts(engine)["auctions"] == 0


def test_a_table_file_named_in_the_wrong_case_is_an_error_not_skipped(engine, db_url, tmp_path):
    directory = write_dir(tmp_path / "in")
    (directory / "advertisers.csv").rename(directory / "Advertisers.CSV")
    result = ingest(db_url, directory)
    assert result.exit_code == 2
    assert "Advertisers.CSV: file names are case-sensitive: rename it advertisers.csv" in (
        result.output.replace("\n", "")
    )
    assert reads.table_counts(engine)["advertisers"] == 0
    # a file that only resembles no table (truth.csv, README.CSV) is not ingest's business
    (directory / "Advertisers.CSV").rename(directory / "advertisers.csv")
    (directory / "README.CSV").write_text("notes\n")
    assert ingest(db_url, directory).exit_code == 0


def test_failure_inside_the_write_rolls_back(engine, db_url, tmp_path, monkeypatch):
    """A database error half-way (after advertisers were written) leaves nothing behind."""
    from adseg.store import load

    original = load._rows

    def failing(frame, table, dialect):
        if table == "delivery":
            raise RuntimeError("disk full")
        return original(frame, table, dialect)

    monkeypatch.setattr(load, "_rows", failing)
    with pytest.raises(RuntimeError):
        from adseg.ingest import read_directory

        load.write_batch(engine, read_directory(write_dir(tmp_path / "in")))
    assert reads.table_counts(engine)["advertisers"] == 0
    assert reads.table_counts(engine)["auctions"] == 0


def test_ingest_requires_migrated_database(db_url, tmp_path):
    result = ingest(db_url, write_dir(tmp_path / "in"))
    assert result.exit_code == 2
    assert "adseg db upgrade" in result.output


def test_ingest_missing_directory(engine, db_url, tmp_path):
    result = ingest(db_url, tmp_path / "nope")
    assert result.exit_code == 2
    assert "no such directory" in result.output
    (tmp_path / "file").write_text("x")
    result = ingest(db_url, tmp_path / "file")
    assert result.exit_code == 2 and "not a directory" in result.output


@pytest.mark.parametrize(
    ("typo", "meant"),
    [("auction.csv", "auctions.csv"), ("deliveries.csv.gz", "delivery.csv.gz")],
)
def test_a_misspelled_table_file_is_refused_not_skipped(engine, db_url, tmp_path, typo, meant):
    """It was skipped: the other tables loaded, exit 0, and not a word about the missing one."""
    folder = write_dir(tmp_path / "in", "csv.gz" if typo.endswith(".gz") else "csv")
    (folder / meant).rename(folder / typo)
    (folder / "truth.csv").write_text("advertiser_id,segment\n")  # named for no table: fine
    result = ingest(db_url, folder)
    assert result.exit_code == 2, result.output
    assert f"is it {meant}?" in " ".join(result.output.split())
    assert reads.advertisers(engine).empty  # nothing written


def test_unreadable_files_say_where_and_why(tmp_path):
    """Not UTF-8 (here Latin-1, gzipped): the line and the byte; an empty file: the header wanted.
    Both files are reported in one go."""
    from adseg.ingest import IngestError, read_directory

    latin1 = "advertiser_id,name,description\nx1,Cafe,d\nx2,Café Müller,d\n".encode("latin-1")
    (tmp_path / "advertisers.csv.gz").write_bytes(gzip.compress(latin1))
    (tmp_path / "delivery.csv").write_bytes(b"")
    with pytest.raises(IngestError) as caught:
        read_directory(tmp_path)
    messages = sorted(str(p) for p in caught.value.problems)
    assert messages == [
        f"{tmp_path / 'advertisers.csv.gz'}: line 3 is not UTF-8 (byte 0xe9, byte 7 of the line); "
        "save the file as UTF-8",
        f"{tmp_path / 'delivery.csv'}: the file is empty; expected a header row: advertiser_id, "
        "date, bid_requests, bid_ecpm, impressions, spend",
    ]


def test_price_samples_one_query_per_window(engine, db_url, tmp_path):
    import datetime as dt

    assert ingest(db_url, write_dir(tmp_path / "in")).exit_code == 0
    ids = ["adv-1", "adv-2", "adv-3", "adv-missing"]
    win, cost = reads.price_samples(engine, ids, dt.date(2026, 3, 1), dt.date(2026, 3, 1))
    # in one order whatever the database's row order (the κ selection splits them by position)
    assert win[0].tolist() == [1.2, 3.0]
    assert cost[0].tolist() == [1.2]
    assert win[1].size == 0 and win[3].size == 0
    win, cost = reads.price_samples(engine, ids, dt.date(2026, 3, 2), dt.date(2026, 3, 2))
    assert win[1].tolist() == [0.5] and win[2].tolist() == [7.25]


def test_migrations_match_the_models(db_url):
    """The schema the migrations build is the one the ORM models declare (autogenerate finds
    nothing to add, drop or alter), on SQLite and PostgreSQL."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from adseg.store.models import Base

    engine = make_engine(db_url)
    migrate.upgrade(engine)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    assert diff == []


def test_forecasts_may_be_null_after_0004_and_0003_data_survive(db_url):
    from sqlalchemy import text as sql

    from adseg.store.results import create_run

    engine = make_engine(db_url)
    migrate.upgrade(engine, "0003")
    run_id = create_run(engine, "nightly", parameters={}, seed=0, windows={}, code_version="t")
    assert run_id == 1
    with engine.begin() as conn:
        conn.execute(
            sql(
                "INSERT INTO forecasts VALUES "
                "(1, 'rcc', 'segment', 'actual', 'a', 1.0, 2.0, 3.0, 4.0)"
            )
        )
    migrate.upgrade(engine)
    with engine.begin() as conn:
        conn.execute(
            sql(
                "INSERT INTO forecasts VALUES "
                "(1, 'rcc', 'segment', 'forecast', 'a', NULL, 2.0, NULL, 4.0)"
            )
        )
        rows = conn.execute(sql("SELECT count(*) FROM forecasts")).scalar()
    engine.dispose()
    assert rows == 2


@pytest.mark.parametrize(
    "args, message",
    [
        (["nosuch"], "unknown schema revision 'nosuch'; known: 0001"),
        (["0001"], "only moves forward"),
    ],
)
def test_db_upgrade_refuses_unknown_and_backward_targets(db_url, args, message):
    assert runner.invoke(app, ["db", "upgrade", "--database-url", db_url]).exit_code == 0
    result = runner.invoke(app, ["db", "upgrade", *args, "--database-url", db_url])
    assert result.exit_code == 2 and message in result.output, result.output


def test_a_database_from_a_newer_adseg_is_named_as_such(db_url):
    from sqlalchemy import text as sql

    assert runner.invoke(app, ["db", "upgrade", "--database-url", db_url]).exit_code == 0
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(sql("UPDATE alembic_version SET version_num = '0099'"))
    engine.dispose()
    for command in (["db", "upgrade"], ["runs"]):
        result = runner.invoke(app, [*command, "--database-url", db_url])
        assert result.exit_code == 2, result.output
        assert "revision 0099, which this adseg does not know" in result.output
    # db current says what the revision is: it refused to, exit 2 (QA)
    result = runner.invoke(app, ["db", "current", "--database-url", db_url])
    assert result.exit_code == 0, result.output
    assert "0099, unknown to this adseg (newest " in result.output
    assert "a newer adseg migrated it" in result.output
    result = runner.invoke(app, ["db", "current", "-q", "--database-url", db_url])
    assert result.exit_code == 0 and result.output == "0099\n"


def test_a_file_that_is_not_a_database_is_named_not_a_traceback(tmp_path):
    bogus = tmp_path / "notes.db"
    bogus.write_text("these are my notes\n", encoding="utf-8")
    for command in (["db", "summary"], ["db", "upgrade"], ["runs"]):
        result = runner.invoke(app, [*command, "--database-url", f"sqlite:///{bogus}"])
        assert result.exit_code == 2, result.output
        assert "file is not a database (the --database-url file is not an SQLite database)" in (
            result.output
        )
        assert "Traceback" not in result.output
    assert bogus.read_text(encoding="utf-8") == "these are my notes\n"


def _unused_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_server_that_cannot_be_reached_exits_75_to_retry_later():
    """No server listens: a scheduler should retry (75), not page about a failed run (1)."""
    url = f"postgresql+psycopg://adseg:s3cret@127.0.0.1:{_unused_port()}/adseg"
    for command in (["db", "summary"], ["nightly"], ["runs"]):
        result = runner.invoke(app, [*command, "--database-url", url])
        assert result.exit_code == 75, result.output
        assert "Connection refused (is the server running and reachable? retry later)" in (
            result.output
        )
        assert "s3cret" not in result.output and "run " not in result.output


def test_a_server_that_refuses_the_session_is_a_configuration_error(db_url):
    """Wrong password or no such database: exit 2 with what to check, never the password."""
    if db_url.startswith("sqlite"):
        pytest.skip("a PostgreSQL server is needed")
    from sqlalchemy.engine import make_url

    good = make_url(db_url)
    for url in (good.set(password="not-the-password"), good.set(database="no_such_database")):
        result = runner.invoke(
            app, ["db", "summary", "--database-url", url.render_as_string(hide_password=False)]
        )
        assert result.exit_code == 2, result.output
        assert "FATAL" in result.output and "(check the user, password and database" in (
            result.output
        )
        assert "not-the-password" not in result.output


def test_run_ids_beyond_the_integer_range_are_usage_errors(db_url):
    assert runner.invoke(app, ["db", "upgrade", "--database-url", db_url]).exit_code == 0
    for command in (["report", "--run"], ["segment", "--run"], ["runs", "--limit"]):
        result = runner.invoke(app, [*command, str(2**70), "--database-url", db_url])
        assert result.exit_code == 2 and "less than or equal to" in result.output, result.output


def _problems(directory: Path) -> list[str]:
    from adseg.ingest import IngestError, read_directory

    with pytest.raises(IngestError) as caught:
        read_directory(directory)
    return [str(p) for p in caught.value.problems]


def test_unparseable_dates_and_empty_ids_are_not_also_duplicates(tmp_path):
    """Their placeholders (NaT, "") compare equal; each row is reported once, for what it is."""
    delivery = DELIVERY.assign(
        advertiser_id=["adv-1", "adv-1", "adv-1"], date=["2026/03/01", "2026/03/02", "03/03/2026"]
    )
    problems = _problems(write_dir(tmp_path / "dates", delivery=delivery))
    assert problems == [
        f"{tmp_path / 'dates' / 'delivery.csv'}: rows 1, 2, 3: date is not a YYYY-MM-DD date"
    ]
    auctions = AUCTIONS.assign(auction_id=["a1", "", "", "a1"])
    advertisers = ADVERTISERS.assign(advertiser_id=["adv-1", "", ""])
    problems = _problems(write_dir(tmp_path / "ids", advertisers=advertisers, auctions=auctions))
    joined = "\n".join(problems)
    assert "advertisers.csv: rows 2, 3: advertiser_id is empty" in joined
    assert "auctions.csv: rows 2, 3: auction_id is empty" in joined
    # a real duplicate among valid keys is still found, and only it
    assert "auctions.csv: row 4: duplicate key (auction_id)" in joined
    assert "advertisers.csv: row" not in joined.replace("rows 2, 3: advertiser_id is empty", "")
    # an empty advertiser_id in delivery is "empty", not also "unknown" or a duplicate
    delivery = DELIVERY.assign(advertiser_id=["", "", "adv-3"], date="2026-03-01")
    problems = _problems(write_dir(tmp_path / "dlv", delivery=delivery))
    assert problems == [f"{tmp_path / 'dlv' / 'delivery.csv'}: rows 1, 2: advertiser_id is empty"]


MIDNIGHTS = pd.to_datetime(["2026-03-01", "2026-03-02", "2026-03-02"])


@pytest.mark.parametrize(
    "dates",
    [
        MIDNIGHTS.astype("datetime64[ms]"),  # what pandas writes for a date column
        MIDNIGHTS.astype("datetime64[us]").tz_localize("UTC"),  # Spark's timestamp type
        MIDNIGHTS.tz_localize("Asia/Kolkata"),  # midnight in its own zone: that day
    ],
    ids=["naive", "utc", "kolkata"],
)
def test_parquet_dates_stored_as_midnight_timestamps_are_dates(engine, db_url, tmp_path, dates):
    directory = write_dir(tmp_path / "in", "parquet", delivery=DELIVERY.assign(date=dates))
    result = ingest(db_url, directory)
    assert result.exit_code == 0, result.output
    dlv = reads.delivery(engine)
    assert [str(d) for d in dlv["date"]] == ["2026-03-01", "2026-03-02", "2026-03-02"]


def test_parquet_timestamps_with_a_time_of_day_are_not_dates(tmp_path):
    dates = pd.to_datetime(["2026-03-01", "2026-03-02 13:30", "2026-03-02"], format="ISO8601")
    directory = write_dir(tmp_path / "in", "parquet", delivery=DELIVERY.assign(date=dates))
    assert _problems(directory) == [
        f"{directory / 'delivery.parquet'}: row 2: date is a timestamp with a time of day; the "
        "date column takes dates (YYYY-MM-DD, or timestamps at midnight)"
    ]
    # the date range holds for timestamp columns too, and a missing value is named
    dates = pd.to_datetime(["1970-01-01", None, "2026-03-02"])
    directory = write_dir(tmp_path / "old", "parquet", delivery=DELIVERY.assign(date=dates))
    problems = _problems(directory)
    assert problems == [
        f"{directory / 'delivery.parquet'}: row 2: date is empty",
        f"{directory / 'delivery.parquet'}: row 1: date is outside 2000-01-01 … 2099-12-31 "
        "(a placeholder date?)",
    ]


# --- QA findings: rows by position, long rows, unsupported files, exact numbers, headers, ids ---

AUCTIONS_TYPED = AUCTIONS.assign(
    bid_ecpm=AUCTIONS["bid_ecpm"].astype(float),
    market_price_ecpm=AUCTIONS["market_price_ecpm"].astype(float),
    won=AUCTIONS["won"] == "true",
    paid_ecpm=pd.to_numeric(AUCTIONS["paid_ecpm"]),
)


@pytest.mark.parametrize(
    "stored",
    [
        AUCTIONS_TYPED.sort_values("ts", ascending=False),  # index 3, 2, 1, 0
        pd.concat([AUCTIONS_TYPED.iloc[:2], AUCTIONS_TYPED.iloc[2:].reset_index(drop=True)]),
        AUCTIONS_TYPED.set_index("auction_id"),  # the key stored as a named index
    ],
    ids=["sorted", "concatenated", "named-index"],
)
def test_parquet_rows_are_read_by_position_whatever_index_the_file_stores(
    engine, db_url, tmp_path, stored
):
    """Each auction keeps its own prices: the stored index is not used to line columns up."""
    directory = write_dir(tmp_path / "in", auctions=None)
    stored.to_parquet(directory / "auctions.parquet")  # index=None: pandas stores the index
    result = ingest(db_url, directory)
    assert result.exit_code == 0, result.output
    got = reads.auctions(engine).set_index("auction_id").sort_index()
    assert got["advertiser_id"].tolist() == ["adv-1", "adv-1", "adv-2", "adv-3"]
    assert got["bid_ecpm"].tolist() == [2.5, 2.5, 1.0, 7.25]
    assert got["market_price_ecpm"].tolist() == [1.2, 3.0, 0.5, 7.25]
    assert got["won"].tolist() == [True, False, True, True]
    assert got["paid_ecpm"].isna().tolist() == [False, True, False, False]


def test_validators_take_rows_by_position(tmp_path):
    from adseg.ingest import validate_auctions, validate_delivery

    shuffled = AUCTIONS.set_axis([7, 3, 3, 0])
    out, problems = validate_auctions(shuffled, "auctions.csv")
    assert problems == []
    assert out["auction_id"].tolist() == ["a1", "a2", "a3", "a4"]
    assert out["bid_micros"].tolist() == [2_500_000, 2_500_000, 1_000_000, 7_250_000]
    assert out["paid_micros"].isna().tolist() == [False, True, False, False]
    out, problems = validate_delivery(DELIVERY.set_axis([2, 1, 0]), "delivery.csv")
    assert problems == [] and out["spend_micros"].tolist() == [520_000, 30_000, 0]


def test_rows_longer_than_the_header_are_refused_not_shifted(tmp_path):
    """A trailing comma made pandas take the first column for an index: id "Trailing Co"."""
    directory = tmp_path / "in"
    directory.mkdir()
    (directory / "advertisers.csv").write_text(
        "advertiser_id,name,description\ntc-1,Trailing Co,some text,\ntc-2,Two,more,\n"
    )
    assert _problems(directory) == [
        f"{directory / 'advertisers.csv'}: rows 1, 2: more fields than the 3 of the header row "
        "(a trailing comma, or an unquoted comma inside a field?); remove the extra fields or "
        "quote the field"
    ]
    # a later record, after a quoted line break and a blank line, is counted as a record
    text = 'advertiser_id,name,description\nx1,"Two\nlines",d\n\nx2,Acme, Inc,d\n'
    with gzip.open(directory / "advertisers.csv.gz", "wt", encoding="utf-8") as fh:
        fh.write(text)
    (directory / "advertisers.csv").unlink()
    assert _problems(directory) == [
        f"{directory / 'advertisers.csv.gz'}: row 2: more fields than the 3 of the header row "
        "(a trailing comma, or an unquoted comma inside a field?); remove the extra fields or "
        "quote the field"
    ]


def test_a_nul_character_in_text_is_refused_with_its_row(engine, db_url, tmp_path):
    """PostgreSQL text cannot hold NUL: its ingest failed with a driver traceback (exit 1) while
    SQLite stored the value. Refused on both now, naming file, row and column."""
    directory = tmp_path / "in"
    directory.mkdir()
    (directory / "advertisers.csv").write_bytes(
        b"advertiser_id,name,description\nok-1,Fine,\nnul-1,Has,a \x00 inside\n"
        b"nu\x00l,Id,d\nok-2,Na\x00me,d\n"
    )
    file = directory / "advertisers.csv"
    assert _problems(directory) == [
        f"{file}: row 3: advertiser_id contains a NUL character (byte 0x00)",
        f"{file}: row 4: name contains a NUL character (byte 0x00)",
        f"{file}: row 2: description contains a NUL character (byte 0x00)",
    ]
    result = runner.invoke(app, ["ingest", str(directory), "--database-url", db_url])
    assert result.exit_code == 2 and "NUL character" in result.output
    assert reads.table_counts(engine)["advertisers"] == 0


def test_a_repeated_header_row_is_refused_as_such(engine, db_url, tmp_path):
    """Two exports joined with cat: the second header was stored as an advertiser named "name"
    (QA probe); in delivery it failed one rule per cell without saying why. One problem now,
    with a byte-order mark, blanks or another column order on the repeated header too."""
    directory = tmp_path / "in"
    directory.mkdir()
    (directory / "advertisers.csv").write_text(
        "advertiser_id,name,description\nx1,Foo,bar\n"
        "\ufeffadvertiser_id,name,description\nx2,Baz,qux\n"
        " description , advertiser_id,name\n",
        encoding="utf-8",
    )
    file = directory / "advertisers.csv"
    assert _problems(directory) == [
        f"{file}: rows 2, 4: repeats the header row (files joined with cat? keep only the "
        "first header)"
    ]
    with gzip.open(directory / "advertisers.csv.gz", "wb") as fh:  # gzip members joined
        fh.write(b"advertiser_id,name,description\nx1,Foo,bar\n")
    with gzip.open(directory / "part.gz", "wb") as fh:
        fh.write(b"advertiser_id,name,description\nx2,Baz,qux\n")
    with open(directory / "advertisers.csv.gz", "ab") as out:
        out.write((directory / "part.gz").read_bytes())
    file.unlink()
    (directory / "part.gz").unlink()
    delivery = "advertiser_id,date,bid_requests,bid_ecpm,impressions,spend\n"
    (directory / "delivery.csv").write_text(delivery + "x1,2026-03-02,10,1.5,4,0.01\n" + delivery)
    assert _problems(directory) == [
        f"{directory / 'advertisers.csv.gz'}: row 2: repeats the header row (files joined with "
        "cat? keep only the first header)",
        f"{directory / 'delivery.csv'}: row 2: repeats the header row (files joined with cat? "
        "keep only the first header)",
    ]
    result = runner.invoke(app, ["ingest", str(directory), "--database-url", db_url])
    assert result.exit_code == 2 and "repeats the header row" in result.output
    assert reads.table_counts(engine)["advertisers"] == 0
    # a value that merely names a column is data
    (directory / "delivery.csv").unlink()
    (directory / "advertisers.csv.gz").unlink()
    (directory / "advertisers.csv").write_text(
        "advertiser_id,name,description\nname,description,advertiser_id is its id\n"
    )
    result = runner.invoke(app, ["ingest", str(directory), "--database-url", db_url])
    assert result.exit_code == 0, result.output
    assert reads.table_counts(engine)["advertisers"] == 1


def test_rows_shorter_than_the_header_are_refused_not_padded(tmp_path):
    """A missing comma shifted the later fields one column left and pandas padded the row with an
    empty field: here the description went into name and the row was accepted."""
    directory = tmp_path / "in"
    directory.mkdir()
    (directory / "advertisers.csv").write_text(
        "advertiser_id,name,description\nok-1,Fine,\nok-2,,empty name is a value\n"
        'sh-1,no name given here\n\nok-3,"Quoted, with comma",d\nsh-2\nlong,a,b,c\n'
    )
    assert _problems(directory) == [
        f"{directory / 'advertisers.csv'}: row 6: more fields than the 3 of the header row "
        "(a trailing comma, or an unquoted comma inside a field?); remove the extra fields or "
        "quote the field",
        f"{directory / 'advertisers.csv'}: rows 3, 5: fewer fields than the 3 of the header row "
        "(a missing comma?); write every field, an empty one as nothing between two commas",
    ]
    # empty fields written out are values, not missing fields
    (directory / "advertisers.csv").write_text(
        "advertiser_id,name,description\nok-1,Fine,\nok-2,Also fine,\n"
    )
    from adseg.ingest import read_directory

    assert read_directory(directory).advertisers["name"].tolist() == ["Fine", "Also fine"]


@pytest.mark.parametrize(
    "name",
    ["delivery.csv.bz2", "delivery.csv.zip", "auctions.tsv", "advertisers.json", "auctions.csv.xz"],
)
def test_a_table_file_in_a_format_ingest_does_not_read_is_refused(engine, db_url, tmp_path, name):
    directory = write_dir(tmp_path / "in")
    table = name.split(".")[0]
    (directory / f"{table}.csv").rename(directory / name)
    for other in ("truth.csv", "config.json", "README.txt"):  # named for no table: ignored
        (directory / other).write_text("x\n")
    result = runner.invoke(app, ["ingest", str(directory), "--database-url", db_url])
    assert result.exit_code == 2, result.output
    forms = f"{table}.csv, {table}.csv.gz, {table}.parquet"
    assert f"{name}: not a table file format ingest reads; use one of {forms}" in (
        result.output.replace("\n", "")
    )
    assert "truth.csv" not in result.output and "config.json" not in result.output
    assert reads.table_counts(engine) == {t: 0 for t in reads.table_counts(engine)}
    (directory / name).rename(directory / f"{table}.csv")
    assert ingest(db_url, directory).exit_code == 0


def test_counts_and_money_are_exact_from_the_text(engine, db_url, tmp_path):
    """Counts above 2**53 are refused, not rounded to it; money keeps every micro (float64 would
    store 123456789012.345678 as …345680), and is rounded to the micro half-even."""
    from sqlalchemy import text as sql

    from adseg.ingest import read_directory

    big = DELIVERY.assign(bid_requests=["9007199254740993", "100", "0"])
    problems = _problems(write_dir(tmp_path / "count", delivery=big))
    assert problems == [
        f"{tmp_path / 'count' / 'delivery.csv'}: row 1: bid_requests is above "
        "9,007,199,254,740,992 (implausible)"
    ]
    money = DELIVERY.assign(
        bid_requests=["9007199254740992", "1e3", "5"],
        spend=["123456789012.345678", "0.0000015", "12.3456785"],
        bid_ecpm=["999999999999.9999985", "0.0000025", "0.00000150001"],
    )
    batch = read_directory(write_dir(tmp_path / "money", delivery=money))
    assert batch.delivery["bid_requests"].tolist() == [2**53, 1000, 5]
    assert batch.delivery["spend_micros"].tolist() == [123456789012345678, 2, 12345678]
    assert batch.delivery["bid_micros"].tolist() == [999999999999999998, 2, 2]
    assert ingest(db_url, tmp_path / "money").exit_code == 0
    with engine.connect() as conn:
        stored = conn.execute(sql("SELECT spend_micros FROM delivery ORDER BY spend_micros"))
        assert [r[0] for r in stored] == [2, 12345678, 123456789012345678]


def test_parquet_decimal_money_is_exact(tmp_path):
    import decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    from adseg.ingest import read_directory

    directory = write_dir(tmp_path / "in", delivery=None)
    table = pa.Table.from_pandas(DELIVERY.drop(columns=["spend"]), preserve_index=False)
    spend = [decimal.Decimal(v) for v in ("123456789012.345678", "0.000002", "1.5")]
    table = table.append_column("spend", pa.array(spend, pa.decimal128(18, 6)))
    pq.write_table(table, directory / "delivery.parquet")
    batch = read_directory(directory)
    assert batch.delivery["spend_micros"].tolist() == [123456789012345678, 2, 1_500_000]


def test_header_names_are_trimmed(engine, db_url, tmp_path):
    directory = tmp_path / "in"
    directory.mkdir()
    (directory / "advertisers.csv").write_text(
        "advertiser_id, name , description\nsp-1,Spaced,text\n"
    )
    result = ingest(db_url, directory)
    assert result.exit_code == 0, result.output
    assert reads.advertisers(engine)["name"].tolist() == ["Spaced"]
    # trimming may make two names one: which column is meant cannot be told
    (directory / "advertisers.csv").write_text("advertiser_id,name, name,description\nx,a,b,c\n")
    assert _problems(directory) == [
        f"{directory / 'advertisers.csv'}: column(s) named twice in the header: name"
    ]
    # a column renamed by mistake into another's name: one missing, one twice, both said (only
    # the missing one was: QA)
    (directory / "advertisers.csv").write_text("advertiser_id,name,name\nx,a,b\n")
    assert _problems(directory) == [
        f"{directory / 'advertisers.csv'}: missing required column(s): description",
        f"{directory / 'advertisers.csv'}: column(s) named twice in the header: name",
    ]


def test_parquet_integer_ids_read_as_float_are_whole_numbers(engine, db_url, tmp_path):
    """An integer column with a null is stored as float: ids 101.0 are still advertiser 101."""
    advertisers = pd.DataFrame({"advertiser_id": [101, 102], "name": ["A", "B"], "description": ""})
    delivery = DELIVERY.iloc[:2].assign(advertiser_id=[101.0, 102.0])
    directory = write_dir(
        tmp_path / "in", "parquet", advertisers=advertisers, auctions=None, delivery=delivery
    )
    result = ingest(db_url, directory)
    assert result.exit_code == 0, result.output
    assert reads.delivery(engine)["advertiser_id"].tolist() == ["101", "102"]
    # the null is reported as an empty id, and only it: the other ids are known
    delivery = DELIVERY.iloc[:2].assign(advertiser_id=[101.0, None])
    directory = write_dir(
        tmp_path / "null", "parquet", advertisers=advertisers, auctions=None, delivery=delivery
    )
    assert _problems(directory) == [
        f"{directory / 'delivery.parquet'}: row 2: advertiser_id is empty"
    ]


def _parquet(directory: Path, name: str, table) -> None:
    import pyarrow.parquet as pq

    pq.write_table(table, directory / f"{name}.parquet")


def test_parquet_text_that_is_not_utf8_is_refused_by_row(tmp_path):
    """A string column with invalid UTF-8 failed deep in pyarrow with a traceback (exit 1); a
    binary one with "'utf-8' codec can't decode byte 0xff", naming no file, column or row."""
    import pyarrow as pa

    raw = pa.array([b"adv-1", b"adv-\xff2"], pa.binary())
    as_string = pa.Array.from_buffers(pa.string(), 2, raw.buffers())  # unchecked, as writers may
    for ids in (as_string, raw):
        directory = write_dir(tmp_path / str(ids.type), auctions=None, delivery=None)
        (directory / "advertisers.csv").unlink()
        table = pa.table({"advertiser_id": ids, "name": ["A", "B"], "description": ["", ""]})
        _parquet(directory, "advertisers", table)
        assert _problems(directory) == [
            f"{directory / 'advertisers.parquet'}: row 2: advertiser_id is not UTF-8 text"
        ]
    # UTF-8 in a binary column is text like any other
    good = pa.table({"advertiser_id": pa.array([b"adv-1"], pa.binary()), "name": ["A"]})
    _parquet(directory, "advertisers", good.append_column("description", pa.array(["d"])))
    from adseg.ingest import read_directory

    assert read_directory(directory).advertisers["advertiser_id"].tolist() == ["adv-1"]


def test_parquet_columns_named_twice_or_of_impossible_types_are_refused(tmp_path):
    """A repeated column name printed pyarrow's schema dump over a dozen lines; a struct id, a
    boolean bid and a duration price were stored as "{'a': 1}", 1.0 and 2.0."""
    import datetime as dt

    import pyarrow as pa

    directory = write_dir(tmp_path / "in", auctions=None, delivery=None)
    (directory / "advertisers.csv").unlink()
    columns = [pa.array(["adv-1"]), pa.array(["A"]), pa.array(["d"]), pa.array(["B"])]
    for last in ("name", "name "):  # two names that trim to one are one name twice
        names = ["advertiser_id", "name", "description", last]
        _parquet(directory, "advertisers", pa.Table.from_arrays(columns, names=names))
        assert _problems(directory) == [
            f"{directory / 'advertisers.parquet'}: column(s) named twice: name"
        ]
    (directory / "advertisers.parquet").unlink()
    write_dir(directory, auctions=None, delivery=None)
    auctions = pa.table(
        {
            "auction_id": pa.array([{"a": 1}]),
            "advertiser_id": ["adv-1"],
            "ts": [dt.datetime(2026, 3, 2)],
            "bid_ecpm": [True],
            "market_price_ecpm": pa.array([2], pa.duration("s")),
            "won": [False],
            "paid_ecpm": pa.nulls(1, pa.float64()),
        }
    )
    file = directory / "auctions.parquet"
    expected = [
        f"{file}: column auction_id has Parquet type struct<a: int64>, which cannot hold a text "
        "value",
        f"{file}: column bid_ecpm has Parquet type bool, which cannot hold a number value",
        f"{file}: column market_price_ecpm has Parquet type duration[s], which cannot hold a "
        "number value",
    ]
    _parquet(directory, "auctions", auctions)
    assert _problems(directory) == expected
    # header names are trimmed, so ' bid_ecpm' is bid_ecpm: the check matched the untrimmed
    # names, and a boolean ' bid_ecpm' was stored as 1 eCPM, exit 0 (QA)
    padded = [" auction_id", "advertiser_id", "ts", " bid_ecpm", "market_price_ecpm ", "won"]
    _parquet(directory, "auctions", auctions.rename_columns([*padded, "paid_ecpm"]))
    assert _problems(directory) == expected


def test_values_padded_with_unicode_white_space_are_trimmed_everywhere(tmp_path):
    """A spreadsheet's no-break space around a value is trimmed, as the README says of every
    field: ids, dates and counts were, but timestamps and money were refused as 'not an ISO-8601
    timestamp' and 'not a finite number' (QA)."""
    from adseg.ingest import read_directory

    nbsp = "\u00a0"
    auctions = AUCTIONS.assign(
        ts=[nbsp + t for t in AUCTIONS["ts"]],
        bid_ecpm=[f"{nbsp}{v}{nbsp}" for v in AUCTIONS["bid_ecpm"]],
        paid_ecpm=[f"{nbsp}{v}{nbsp}" if v else v for v in AUCTIONS["paid_ecpm"]],
    )
    delivery = DELIVERY.assign(spend=[nbsp + v for v in DELIVERY["spend"]])
    for fmt in ("csv", "parquet"):
        directory = write_dir(tmp_path / fmt, fmt, auctions=auctions, delivery=delivery)
        batch = read_directory(directory)
        plain = read_directory(write_dir(tmp_path / f"plain-{fmt}", fmt))
        pd.testing.assert_frame_equal(batch.auctions, plain.auctions)
        pd.testing.assert_frame_equal(batch.delivery, plain.delivery)


def test_a_table_file_that_is_a_dangling_link_is_refused(tmp_path):
    """It was skipped as if absent: the other tables loaded and ingest exited 0."""
    directory = write_dir(tmp_path / "in", delivery=None)
    (directory / "delivery.csv").symlink_to(tmp_path / "gone.csv")
    assert _problems(directory) == [
        f"{directory / 'delivery.csv'}: a symbolic link to {tmp_path / 'gone.csv'}, which does "
        "not exist"
    ]


def test_dates_take_two_digit_months_and_days_and_prices_the_exact_limit(tmp_path):
    """2026-3-2 was taken for 2026-03-02 (README: YYYY-MM-DD); 1000000000000.000001, whose float
    is 1e12 exactly, was stored at 1000000000000000001 micros, above the limit."""
    delivery = DELIVERY.assign(
        date=["2026-3-2", "2026-03-01", "2026-03-02"],
        bid_ecpm=["1", "1000000000000.000001", "1000000000000"],
    )
    directory = write_dir(tmp_path / "in", delivery=delivery)
    file = directory / "delivery.csv"
    assert _problems(directory) == [
        f"{file}: row 1: date is not a YYYY-MM-DD date",
        f"{file}: row 2: bid_ecpm is above 1e+12 (implausible)",
    ]


# --- the two CSV readers: Arrow's (fast) agrees with pandas' wherever it accepts a file ---------

_CSV_CORNERS = {
    "plain": "a,b,c\n1,2,3\n4,5,6\n",
    "crlf": "a,b,c\r\n1,2,3\r\n4,5,6\r\n",
    "cr only": "a,b,c\r1,2,3\r4,5,6\r",
    "bom": "\ufeffa,b,c\n1,2,3\n",
    "bom, quoted header": '\ufeff"a",b,c\n1,2,3\n',
    "blank lines": "a,b,c\n\n1,2,3\n\n\n4,5,6\n",
    "blank lines first": "\n\na,b,c\n1,2,3\n",
    "line of spaces": "a,b,c\n   \n1,2,3\n",
    "line of spaces, one column": "a\n1\n \n2\n",
    "one column": "a\n1\n\n2\n",
    "quoted newline": 'a,b,c\n1,"x\ny",3\n',
    "quoted CRLF": 'a,b,c\r\n1,"x\r\ny",3\r\n',
    "quoted comma": 'a,b,c\n1,"x,y",3\n',
    "doubled quote": 'a,b,c\n1,"x""y",3\n',
    "quote inside a field": 'a,b,c\n1,ab"c,3\n',
    "text after a closing quote": 'a,b,c\n1,"ab"c,3\n',
    "space before a quote": 'a,b,c\n1, "ab",3\n',
    "empty quoted": 'a,b,c\n1,"",3\n"","",""\n',
    "empty last field": "a,b,c\n1,2,\n",
    "commas only": "a,b,c\n,,\n1,2,3\n",
    "short row": "a,b,c\n1,2\n",
    "long row": "a,b,c\n1,2,3,4\n",
    "trailing comma everywhere": "a,b,c,\n1,2,3,\n",
    "unterminated quote": 'a,b,c\n1,"x,3\n',
    "unterminated quote, last field": 'a,b,c\n1,2,3\n4,5,"6\n',
    "unterminated quote, last field, no final newline": 'a,b,c\n1,2,"3',
    "unterminated quote, CRLF": 'a,b,c\r\n1,2,3\r\n4,5,"6\r\n',
    "unterminated quote swallowing rows": 'a,b,c\n1,2,"3\n4,5,6\n7,8,9\n',
    "unterminated quote after a doubled quote": 'a,b,c\n1,2,"3""',
    "unterminated empty quote": 'a,b,c\n1,2,"',
    "closed quote at the end": 'a,b,c\n1,2,"3"',
    "closed doubled quote at the end": 'a,b,c\n1,2,"3"""',
    "header only": "a,b,c\n",
    "empty": "",
    "no final newline": "a,b,c\n1,2,3",
    "spaces around": "a , b,c\n 1 ,2 , 3\n",
    "NA words": "a,b,c\nNA,null,NaN\n",
    "hash": "a,b,c\n#1,2,3\n",
    "unicode": "a,b,c\nü,—,日本\n",
    "NUL": "a,b,c\n1,\x002,3\n",
    "vertical tab": "a,b,c\n1,\x0b,3\n",
    "form feed line": "a,b,c\n\x0c\n1,2,3\n",
    "semicolons": "a;b;c\n1;2;3\n",
    "a long field": "a,b,c\n1," + "x" * 200_000 + ",3\n",
    "80 columns": "\n".join(",".join(f"{c}{i}" for i in range(80)) for c in ("c", "")) + "\n",
}


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
@pytest.mark.parametrize("name", sorted(_CSV_CORNERS))
def test_arrows_csv_reader_equals_pandas_wherever_it_accepts_a_file(name, suffix, tmp_path):
    """Ingest reads a CSV by Arrow's reader (4× faster, no second pass for short rows) and falls
    back to pandas' whenever Arrow refuses the file. So Arrow must give exactly pandas' cells,
    types included, on every file it accepts; pandas must accept it too."""
    from adseg.ingest.readers import _read_csv_arrow, _read_csv_pandas

    data = _CSV_CORNERS[name].encode("utf-8")
    path = tmp_path / f"t{suffix}"
    path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    fast = _read_csv_arrow(path)
    if fast is not None:
        pd.testing.assert_frame_equal(fast, _read_csv_pandas(path))


def test_arrow_reads_the_sample_marketplace_and_refuses_what_pandas_must_report(tmp_path):
    """The fast path is taken on ordinary files (else the speed-up silently disappears), and not
    on a file with a row of the wrong width or bad UTF-8, whose errors pandas' path words."""
    from adseg.ingest import IngestError, read_table_file
    from adseg.ingest.readers import _read_csv_arrow

    good = tmp_path / "auctions.csv"
    good.write_text(
        "auction_id,advertiser_id,ts,bid_ecpm,market_price_ecpm,won,paid_ecpm\n"
        'a1,adv,2026-03-02T00:00:00Z,1.5,1.0,true,1.0\na2,adv,2026-03-02T01:00:00Z,"1.5",2,f,\n',
        encoding="utf-8",
    )
    assert _read_csv_arrow(good) is not None
    assert read_table_file(good)["paid_ecpm"].tolist() == ["1.0", ""]
    short = tmp_path / "short.csv"
    short.write_text("a,b,c\n1,2,3\n1,2\n", encoding="utf-8")
    assert _read_csv_arrow(short) is None
    with pytest.raises(IngestError, match="row 2: fewer fields than the 3 of the header"):
        read_table_file(short)
    latin = tmp_path / "latin.csv"
    latin.write_bytes("a,b,c\n1,\xe9,3\n".encode("latin-1"))
    assert _read_csv_arrow(latin) is None
    with pytest.raises(IngestError, match="line 2 is not UTF-8"):
        read_table_file(latin)


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_a_quote_left_open_at_the_end_of_a_csv_is_refused_not_swallowed(suffix, tmp_path):
    """A file cut off inside a quoted field: Arrow took everything to the end of the file as the
    field's text, so the advertisers after an open quote in a description vanished into it and
    ingest loaded the one row, exit 0. Pandas' path refuses the file ('EOF inside string'), as
    before Arrow's reader was used; a quote closed at the very end still takes the fast path."""
    from adseg.ingest import IngestError, read_directory
    from adseg.ingest.readers import _read_csv_arrow

    cut = 'advertiser_id,name,description\na1,A,"open\na2,B,y\na3,C,z\n'
    directory = tmp_path / "in"
    directory.mkdir()
    path = directory / f"advertisers{suffix}"
    path.write_bytes(gzip.compress(cut.encode()) if suffix.endswith(".gz") else cut.encode())
    assert _read_csv_arrow(path) is None
    with pytest.raises(IngestError) as caught:
        read_directory(directory)
    assert [str(p) for p in caught.value.problems] == [
        f"{path}: cannot be read: Error tokenizing data. C error: EOF inside string starting at "
        "row 1"
    ]
    closed = directory / "closed.csv"
    closed.write_text('advertiser_id,name,description\na1,A,"x ""y"""', encoding="utf-8")
    assert _read_csv_arrow(closed).iloc[1].tolist() == ["a1", "A", 'x "y"']


def test_a_gz_file_that_is_zlib_not_gzip_is_refused_as_before(tmp_path):
    """Arrow's gzip reader also takes a bare zlib stream; gzip (pandas' path, and the second
    pass) does not: such a file loaded or failed by which reader happened to read it."""
    import zlib

    from adseg.ingest import read_table_file
    from adseg.ingest.readers import _read_csv_arrow

    path = tmp_path / "advertisers.csv.gz"
    path.write_bytes(zlib.compress(b"advertiser_id,name,description\na1,A,x\n"))
    assert _read_csv_arrow(path) is None
    with pytest.raises(OSError, match="Not a gzipped file"):
        read_table_file(path)


def _read_through_pipe(path: Path, text: str):
    """read_table_file on ``path`` made a named pipe that is fed ``text`` once: its result (a
    frame or the exception), after failing the test if the reader still waits 10 s later."""
    from adseg.ingest import read_table_file

    path.unlink(missing_ok=True)
    os.mkfifo(path)
    result = []

    def read():
        try:
            result.append(read_table_file(path))
        except Exception as exc:  # the pipe's second read, cut short below
            result.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    with open(path, "w", encoding="utf-8") as pipe:
        pipe.write(text)
    reader.join(10)
    waiting = reader.is_alive()
    if waiting:  # let a reader stuck opening the pipe a second time go
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(10)
    assert not waiting
    return result[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_named_pipe_is_read_once(tmp_path):
    """A table file that is a named pipe (fed by a decompressor) was read by Arrow, and when Arrow
    refused it (here: a line of spaces, which pandas skips), opened again by pandas, which then
    waited for ever for a second writer; before Arrow's reader it was read once."""
    text = "advertiser_id,name,description\n1,A,x\n   \n2,B,y\n"
    frame = _read_through_pipe(tmp_path / "advertisers.csv", text)
    assert frame["advertiser_id"].tolist() == ["1", "2"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_named_pipe_whose_csv_needs_a_second_pass_is_read_once(tmp_path):
    """An auctions file always has an empty last field (a lost auction's paid price), which sends
    pandas' reader to a second, streaming pass over the file to tell a short row from an empty
    field: on a named pipe that pass opened it again and waited for ever (QA: `ingest` hung).
    A pipe is now copied to a temporary file once; the problems still name the pipe."""
    from adseg.ingest import IngestError

    path = tmp_path / "auctions.csv"
    header = "auction_id,advertiser_id,ts,bid_ecpm,market_price_ecpm,won,paid_ecpm\n"
    # a line of spaces: Arrow refuses the file and pandas reads it, with its second pass
    rows = "a1,adv,2026-03-02T00:00:00Z,1.5,1.0,true,1.0\n   \na2,adv,2026-03-02T01:00:00Z,1,2,f,\n"
    frame = _read_through_pipe(path, header + rows)
    assert frame["auction_id"].tolist() == ["a1", "a2"]
    error = _read_through_pipe(path, header + rows + "a3,adv\n")
    assert isinstance(error, IngestError)
    assert [str(p) for p in error.problems] == [
        f"{path}: row 3: fewer fields than the 7 of the header row (a missing comma?); write "
        "every field, an empty one as nothing between two commas"
    ]
    assert not list(tmp_path.glob("adseg-ingest-*"))


def _malloc_in_use() -> int | None:
    """Bytes the C allocator has handed out in this process (glibc's mallinfo2), or None."""
    import ctypes
    import ctypes.util

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks")] + [
            (name, ctypes.c_size_t)
            for name in ("hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")
        ]

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallinfo2 = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = MallInfo2
    info = mallinfo2()
    return info.uordblks + info.hblkhd


def test_a_pooled_sqlite_connection_gives_back_its_page_cache(tmp_path):
    # a nightly's reads scan the auctions: each idle pooled connection kept up to 64 MiB of
    # pages for the rest of the run (120 MiB of the 20,000-advertiser command's peak)
    if _malloc_in_use() is None:
        pytest.skip("needs glibc's mallinfo2")
    file = tmp_path / "big.db"
    with sqlite3.connect(file) as raw:
        raw.execute("CREATE TABLE t (x INTEGER, pad TEXT)")
        raw.executemany("INSERT INTO t VALUES (?, ?)", ((i, "p" * 60) for i in range(300_000)))
    engine = make_engine(f"sqlite:///{file}")
    with engine.connect() as conn:  # the pool's connection, opened and set up
        conn.exec_driver_sql("SELECT 1").all()
    before = _malloc_in_use()
    with engine.connect() as conn:  # one scan reads the whole table (~25 MB of pages)
        assert conn.exec_driver_sql("SELECT sum(length(pad)) FROM t").scalar() == 60 * 300_000
    assert _malloc_in_use() - before < 4 * 2**20
    engine.dispose()
