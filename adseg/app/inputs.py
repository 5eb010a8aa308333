"""What a run reads from the database: its default windows, the checks made before a run row
is written, and the pull (stage 1), all through :mod:`adseg.store.reads`.

* :func:`default_windows`: the last 7 + 7 delivery days (one query).
* :func:`check_run_inputs`: refuse data that cannot make a run (a few COUNT queries).
* :func:`pull`: advertisers, training-window samples and both windows' delivery, from one
  snapshot, as a :class:`adseg.pipeline.PulledData` (memory: every training sample, float64).
"""

from __future__ import annotations

import datetime as dt
import warnings
from typing import TYPE_CHECKING

import pandas as pd

from adseg.model_stage import backtest_split, make_backtest
from adseg.pipeline import (
    NightlyConfig,
    PulledData,
    Windows,
    check_n_segments,
    require_window_data,
)
from adseg.store import reads

if TYPE_CHECKING:
    from adseg.store.engine import Engine


def default_windows(engine: Engine, train_days: int = 7, eval_days: int = 7) -> Windows:
    """The last ``train_days + eval_days`` delivery days in the database, split train | eval.

    A database with fewer days (a pilot, a small sample) gets all of them, split in half — the
    earlier (larger) half trains — rather than a training window that lies before the data."""
    span = reads.delivery_date_range(engine)
    if span is None:
        raise ValueError("the database has no delivery rows: ingest data first (`adseg ingest`).")
    first, last = span
    available = (last - first).days + 1
    if available < 2:
        raise ValueError(
            f"the database has delivery for one day only ({last}); the nightly needs a training "
            "and an evaluation window: ingest at least two days."
        )
    if available < train_days + eval_days:
        eval_days = available // 2
        train_days = available - eval_days
    eval_start = last - dt.timedelta(days=eval_days - 1)
    train_end = eval_start - dt.timedelta(days=1)
    train_start = train_end - dt.timedelta(days=train_days - 1)
    return Windows(train_start, train_end, eval_start, last)


def pull(engine: Engine, windows: Windows, only: pd.Index | None = None) -> PulledData:
    """Stage 1: advertisers, training-window samples (one query), both windows' delivery, all
    read from one snapshot of the database (an ingest committing meanwhile is not half seen).
    ``only``: read just these advertisers (a stored run's own), counting the others left out."""
    with reads.snapshot(engine) as conn:
        adv = reads.advertisers(conn)
        if adv.empty:
            raise ValueError(_NO_ADVERTISERS)
        n_left_out = 0
        if only is not None:
            keep = adv["advertiser_id"].isin(only)
            n_left_out = int((~keep).sum())
            adv = adv[keep].reset_index(drop=True)
        ids = adv["advertiser_id"].to_numpy(dtype=object)
        win, cost = reads.price_samples(conn, ids, windows.train_start, windows.train_end)
        train = reads.delivery(conn, windows.train_start, windows.train_end)
        evaluation = reads.delivery(conn, windows.eval_start, windows.eval_end)
        split = backtest_split(windows.train_start, windows.train_end)
        if split is not None:
            fit_win, fit_cost = reads.price_samples(conn, ids, windows.train_start, split[0])
    if n_left_out:  # their delivery rows too
        train = train[train["advertiser_id"].isin(only)].reset_index(drop=True)
        evaluation = evaluation[evaluation["advertiser_id"].isin(only)].reset_index(drop=True)
    require_window_data(windows, sum(len(s) for s in win), len(evaluation))
    texts = adv["description"].tolist()
    backtest = None
    if split is not None:
        backtest = make_backtest(fit_win, fit_cost, train, split[1], ids, texts)
    return PulledData(
        ids,
        adv.set_index("advertiser_id")["name"],
        texts,
        win,
        cost,
        train,
        evaluation,
        n_left_out,
        backtest,
    )


_NO_ADVERTISERS = "the database has no advertisers: ingest data first (`adseg ingest`)."


def check_run_inputs(engine: Engine, windows: Windows, config: NightlyConfig) -> int:
    """The number of advertisers, after refusing data that cannot make a run before its run
    row is written (three COUNT queries):
    no advertisers, no auction samples in the training window, no delivery in the evaluation
    window, or more --segments than advertisers. ``pull`` checks the data it reads again. Warns
    when the evaluation window ends after the data (one more query: the delivery dates)."""
    counts = reads.window_counts(
        engine, (windows.train_start, windows.train_end), (windows.eval_start, windows.eval_end)
    )
    if counts["advertisers"] == 0:
        raise ValueError(_NO_ADVERTISERS)
    if counts["advertisers"] == 1:
        raise ValueError(
            "the database has one advertiser; segmenting needs at least two (a KS view compares "
            "pairs): ingest the others first."
        )
    require_window_data(windows, counts["train_auctions"], counts["eval_delivery"])
    last = reads.delivery_date_range(engine)[1]
    if windows.eval_end > last:  # given by hand: the report would name days it never scored
        warnings.warn(
            f"the evaluation window {windows.eval_start}..{windows.eval_end} ends after the "
            f"last delivery day in the database ({last}): only the days up to {last} are scored",
            stacklevel=2,
        )
    if config.n_segments is not None:
        check_n_segments(config.n_segments, counts["advertisers"])
    return counts["advertisers"]
