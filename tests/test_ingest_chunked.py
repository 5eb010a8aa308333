"""Ingest of a large auctions file in chunks (adseg.ingest.chunked) and the chunked pull
(adseg.store.reads.price_samples): the same batch, rows, errors and samples as the whole-file
path, at chunk boundaries made tiny here."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import adseg.ingest.chunked as chunked
from adseg.cli import app
from adseg.ingest import IngestError, read_directory
from adseg.ingest.chunked import ChunkedTable
from adseg.store import reads
from adseg.store.load import write_batch

runner = CliRunner()

N = 11  # auction rows: chunks of 3 make four chunks, the last one short


def _auctions(n: int = N) -> pd.DataFrame:
    won = np.arange(n) % 3 != 1
    return pd.DataFrame(
        {
            "auction_id": [f"a{i:03d}" for i in range(n)],
            "advertiser_id": [f"adv-{i % 3}" for i in range(n)],
            "ts": [f"2026-03-0{2 + i % 3}T10:{i:02d}:00Z" for i in range(n)],
            "bid_ecpm": [f"{2 + i / 10:.2f}" for i in range(n)],
            "market_price_ecpm": [f"{1 + (i * 7 % 5) / 4:.2f}" for i in range(n)],
            "won": np.where(won, "true", "false"),
            "paid_ecpm": [f"{1 + (i * 7 % 5) / 4:.2f}" if w else "" for i, w in enumerate(won)],
        }
    )


def _write(folder: Path, auctions: pd.DataFrame, suffix: str = "csv") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    ids = [f"adv-{i}" for i in range(3)]
    pd.DataFrame({"advertiser_id": ids, "name": ids, "description": "d"}).to_csv(
        folder / "advertisers.csv", index=False
    )
    auctions.to_csv(folder / f"auctions.{suffix}", index=False)
    return folder


@pytest.fixture
def tiny_chunks(monkeypatch):
    """Every auctions file is read in chunks of 3 rows."""
    monkeypatch.setattr(chunked, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(chunked, "CHUNK_ROWS", 3)


def _whole(folder: Path):
    """The batch as the whole-file path reads it."""
    return read_directory(folder)


@pytest.mark.parametrize("suffix", ["csv", "csv.gz"])
def test_chunked_read_equals_the_whole_file_read(tmp_path, monkeypatch, suffix):
    folder = _write(tmp_path / "in", _auctions(), suffix)
    whole = _whole(folder).auctions
    monkeypatch.setattr(chunked, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(chunked, "CHUNK_ROWS", 3)
    batch = read_directory(folder)
    assert isinstance(batch.auctions, ChunkedTable)
    assert len(batch.auctions) == N and batch.rows()["auctions"] == N
    pieces = list(batch.auctions.typed_chunks())
    assert [len(p) for p in pieces] == [3, 3, 3, 2]
    got = pd.concat(pieces, ignore_index=True)
    pd.testing.assert_frame_equal(got, whole)


def test_chunked_write_equals_the_whole_file_write(engine, tmp_path, monkeypatch):
    folder = _write(tmp_path / "in", _auctions())
    first = write_batch(engine, _whole(folder))
    stored = reads.auctions(engine)
    monkeypatch.setattr(chunked, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(chunked, "CHUNK_ROWS", 3)
    again = write_batch(engine, read_directory(folder))  # idempotent: every row unchanged
    assert [t.inserted for t in first.tables] == [3, N]
    assert [(t.rows, t.inserted, t.updated) for t in again.tables] == [(3, 0, 0), (N, 0, 0)]
    pd.testing.assert_frame_equal(reads.auctions(engine), stored)
    changed = _auctions()
    changed.loc[7, "bid_ecpm"] = "9.99"  # in the third chunk
    summary = write_batch(engine, read_directory(_write(tmp_path / "changed", changed)))
    assert [(t.inserted, t.updated) for t in summary.tables] == [(0, 0), (0, 1)]


def test_an_error_in_the_second_chunk_names_its_row_and_writes_nothing(
    engine, db_url, tmp_path, tiny_chunks
):
    bad = _auctions()
    bad.loc[4, "bid_ecpm"] = "-1"  # row 5 of the file: the second chunk's second row
    bad.loc[9, "won"] = "perhaps"  # row 10: the fourth chunk
    folder = _write(tmp_path / "in", bad)
    with pytest.raises(IngestError) as caught:
        read_directory(folder)
    text = str(caught.value)
    assert "row 5: bid_ecpm" in text and "row 10: won" in text
    result = runner.invoke(app, ["ingest", str(folder), "--database-url", db_url, "--quiet"])
    assert result.exit_code != 0 and "row 5" in result.output
    assert len(reads.advertisers(engine)) == 0 and len(reads.auctions(engine)) == 0


def test_problems_over_several_chunks_are_one_problem_with_file_rows(tmp_path, tiny_chunks):
    bad = _auctions()
    for row in (1, 4, 5, 8, 9, 10):  # rows 2, 5, 6, 9, 10, 11 of the file
        bad.loc[row, "ts"] = "yesterday"
    with pytest.raises(IngestError) as caught:
        read_directory(_write(tmp_path / "in", bad))
    (problem,) = [p for p in caught.value.problems if "ts" in p.rule]
    assert problem.rows == (2, 5, 6, 9, 10) and problem.n_rows == 6


def test_a_duplicate_key_in_a_later_chunk_is_found(tmp_path, tiny_chunks):
    bad = _auctions()
    bad.loc[7, "auction_id"] = " a001 "  # row 8 repeats row 2 (keys are trimmed), two chunks on
    bad.loc[2, "auction_id"] = "a000"  # row 3 repeats row 1 in the same chunk
    with pytest.raises(IngestError) as caught:
        read_directory(_write(tmp_path / "in", bad))
    (problem,) = [p for p in caught.value.problems if "duplicate key" in p.rule]
    assert problem.rows == (3, 8) and problem.n_rows == 2


def test_colliding_key_hashes_are_not_duplicates(tmp_path, tiny_chunks, monkeypatch):
    def one_hash(values):
        return np.zeros(len(values), dtype=np.uint64)

    monkeypatch.setattr(chunked.pd.util, "hash_array", one_hash)
    batch = read_directory(_write(tmp_path / "in", _auctions()))
    assert len(batch.auctions) == N


def test_an_unknown_advertiser_in_a_later_chunk_is_named(tmp_path, tiny_chunks):
    bad = _auctions()
    bad.loc[10, "advertiser_id"] = "adv-9"
    with pytest.raises(IngestError, match="row 11: unknown advertiser_id"):
        read_directory(_write(tmp_path / "in", bad))


def test_a_file_changed_between_read_and_write_writes_nothing(engine, tmp_path, tiny_chunks):
    folder = _write(tmp_path / "in", _auctions())
    batch = read_directory(folder)
    bad = _auctions()
    bad.loc[8, "market_price_ecpm"] = "cheap"
    bad.to_csv(folder / "auctions.csv", index=False)
    with pytest.raises(IngestError, match="row 9: market_price_ecpm"):
        write_batch(engine, batch)
    shorter = _auctions(N - 2)
    shorter.to_csv(folder / "auctions.csv", index=False)
    with pytest.raises(IngestError, match="changed while it was being ingested"):
        write_batch(engine, batch)
    assert len(reads.advertisers(engine)) == 0 and len(reads.auctions(engine)) == 0


def test_a_file_arrow_refuses_is_read_whole_and_its_rows_named(tmp_path, tiny_chunks):
    folder = _write(tmp_path / "in", _auctions())
    lines = (folder / "auctions.csv").read_text().splitlines()
    lines[6] += ",extra"  # row 6 of the data is one field too wide
    (folder / "auctions.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(IngestError, match="row 6: more fields than the 7 of the header"):
        read_directory(folder)


def test_a_repeated_header_row_in_a_later_chunk_is_named_with_its_row(tmp_path, tiny_chunks):
    folder = _write(tmp_path / "in", _auctions())
    lines = (folder / "auctions.csv").read_text().splitlines()
    lines.insert(8, lines[0])  # data row 8, in the third chunk of 3 rows
    (folder / "auctions.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(IngestError, match=r"auctions.csv: row 8: repeats the header row"):
        read_directory(folder)


def test_a_header_only_file_reads_as_no_rows(tmp_path, tiny_chunks):
    batch = read_directory(_write(tmp_path / "in", _auctions(0)))
    assert len(batch.auctions) == 0
    assert batch.rows()["auctions"] == 0


def test_chunked_pull_equals_one_fetch(engine, tmp_path, monkeypatch):
    write_batch(engine, read_directory(_write(tmp_path / "in", _auctions())))
    ids = np.array(["adv-2", "adv-0", "adv-7", "adv-1"], dtype=object)  # adv-7 has none
    start, end = dt.date(2026, 3, 2), dt.date(2026, 3, 3)
    whole = reads.price_samples(engine, ids, start, end)
    monkeypatch.setattr(reads, "PULL_CHUNK_ROWS", 2)
    win, cost = reads.price_samples(engine, ids, start, end)
    for got, expected in zip((win, cost), whole, strict=True):
        assert len(got) == len(ids)
        for a, b in zip(got, expected, strict=True):
            np.testing.assert_array_equal(a, b)
    # the expected samples, from the file: market prices sorted, paid prices of won auctions
    a = _auctions()
    days = a["ts"].str[:10].isin(["2026-03-02", "2026-03-03"])
    for i, adv in enumerate(ids):
        rows = a[days & (a["advertiser_id"] == adv)]
        market = rows["market_price_ecpm"].astype(float).to_numpy()
        np.testing.assert_array_equal(win[i], np.sort(market))
        paid = rows.loc[rows["won"] == "true", ["market_price_ecpm", "paid_ecpm"]].astype(float)
        np.testing.assert_array_equal(cost[i], paid.sort_values(["market_price_ecpm"])["paid_ecpm"])
