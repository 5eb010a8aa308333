"""The ingest format's tables and what a read returns: :class:`IngestBatch` (typed frames) or
:class:`IngestError` (every :class:`Problem` found, each naming the file, the rule and the first
rows at fault, counted from 1 without the header)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

TABLES = ("advertisers", "auctions", "delivery")
COLUMNS: dict[str, tuple[str, ...]] = {
    "advertisers": ("advertiser_id", "name", "description"),
    "auctions": (
        "auction_id",
        "advertiser_id",
        "ts",
        "bid_ecpm",
        "market_price_ecpm",
        "won",
        "paid_ecpm",
    ),
    "delivery": ("advertiser_id", "date", "bid_requests", "bid_ecpm", "impressions", "spend"),
}
KEYS: dict[str, tuple[str, ...]] = {
    "advertisers": ("advertiser_id",),
    "auctions": ("auction_id",),
    "delivery": ("advertiser_id", "date"),
}
SUFFIXES = (".csv", ".csv.gz", ".parquet")
MAX_ROWS_SHOWN = 5


@dataclass(frozen=True)
class Problem:
    """One broken rule in one file: the file, the rule and the first offending rows (1-based)."""

    file: str
    rule: str
    rows: tuple[int, ...] = ()
    n_rows: int = 0

    def __str__(self) -> str:
        if not self.rows:
            return f"{self.file}: {self.rule}"
        shown = ", ".join(str(r) for r in self.rows)
        more = f" (and {self.n_rows - len(self.rows)} more)" if self.n_rows > len(self.rows) else ""
        label = "row" if self.n_rows == 1 else "rows"
        return f"{self.file}: {label} {shown}{more}: {self.rule}"


class IngestError(ValueError):
    """Validation failed; nothing was written. ``problems`` lists every broken rule."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


@dataclass
class IngestBatch:
    """Validated, typed frames ready to write (absent tables are None). Money is in micros."""

    advertisers: pd.DataFrame | None = None
    auctions: pd.DataFrame | None = None
    delivery: pd.DataFrame | None = None
    files: dict[str, Path] = field(default_factory=dict)

    def rows(self) -> dict[str, int]:
        return {t: (0 if getattr(self, t) is None else len(getattr(self, t))) for t in TABLES}


def _rows_problem(file: str, mask: np.ndarray, rule: str) -> list[Problem]:
    rows = np.flatnonzero(mask)
    if rows.size == 0:
        return []
    shown = tuple(int(r) + 1 for r in rows[:MAX_ROWS_SHOWN])
    return [Problem(file, rule, shown, int(rows.size))]
