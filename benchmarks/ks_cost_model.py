"""The KS views' cost model (docs/algorithms/scaling.md): block costs fitted on the parts that
``ks_blocks_cost.py`` measured, checked against its cluster runs, and extrapolated.

    .venv/bin/python benchmarks/ks_cost_model.py [--advertisers 1000000] [--workers 8 32]

Reads benchmarks/results/ks_blocks_cost*.csv (the per-part rows) and prints markdown: the fitted
constants, each measured view against the model, and a view of ``--advertisers`` with the
marketplace's shape (samples per advertiser, refill share, kept share, as measured at 100,000)
for each ``--workers`` and block size. Nothing here is measured at that size.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd

RESULTS = Path(__file__).parent / "results"
PARTNERS, REFILL = 1000, 10  # ViewConfig.ks_partners; views.ks.REFILL_FACTOR
EFFICIENCY = 0.76
"""Blocks' CPU seconds per slot-second on the 2-worker cluster runs of ks_blocks_cost.md and
ks_blocks_cost_200k.md (their task streams: each round's wall against its LPT bound)."""


def fit(blocks: pd.DataFrame) -> np.ndarray:
    """Seconds per pair and per pooled sample value, least squares over the blocks."""
    x = blocks[["pairs", "values"]].to_numpy(float)
    return np.linalg.lstsq(x, blocks["seconds"].to_numpy(float), rcond=None)[0]


def round_seconds(pairs: float, values: float, ranges: int, c: np.ndarray) -> float:
    """CPU seconds of one round of KS blocks: its pairs, and each range pooled P + 1 times."""
    return c[0] * pairs + c[1] * (ranges + 1) * values


def extrapolate(n: int, shape: dict, c: np.ndarray, workers: int, block_values: int) -> dict:
    """One KS view of n advertisers: CPU and wall seconds of its blocks, bytes, memory."""
    kept = n * shape["kept_share"]
    values = kept * shape["values_per_advertiser"]
    ranges = max(1, math.ceil(2 * values / block_values))
    blocks = ranges * (ranges + 1) // 2
    first = kept * PARTNERS / 2
    refill = kept * shape["refill_share"] * PARTNERS / 2 * REFILL
    cpu = round_seconds(first, values, ranges, c) + round_seconds(refill, values, ranges, c)
    slots = min(workers, blocks)
    return {
        "workers": workers,
        "block_values": f"2^{int(math.log2(block_values))}",
        "ranges": ranges,
        "blocks_per_round": blocks,
        "blocks_cpu_s": cpu,
        "blocks_wall_s": cpu / (slots * EFFICIENCY),
        "keys_in_view_task_gb": 8 * (first + refill) / 1e9,
        "pairs_shipped_gb": 8 * (first + refill) / 1e9,
        "samples_shipped_gb_max": 2 * 8 * (ranges + 1) * values / 1e9,
        "kept_returned_gb": 24 * shape["kept_pair_share"] * (first + refill) / 1e9,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--advertisers", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[8, 32])
    args = parser.parse_args()
    parts = {p.stem: pd.read_csv(p) for p in sorted(RESULTS.glob("ks_blocks_cost*.csv"))}
    parts = {k: v for k, v in parts.items() if not k.endswith("_stream")}
    blocks = pd.concat([p[p["part"].str.startswith("KS block")] for p in parts.values()])
    c = fit(blocks)
    print(f"Fitted on {len(blocks)} blocks: {c[0] * 1e9:.0f} ns per pair, {c[1] * 1e9:.0f} ns per")
    print("pooled sample value (each range's values are pooled once per block that holds it).\n")
    rows = []
    for name, p in parts.items():
        b = p[p["part"].str.startswith("KS block")]
        x = b[["pairs", "values"]].to_numpy(float) @ c
        rows.append({"run": name, "blocks": len(b), "measured_s": b["seconds"].sum(),
                     "model_s": x.sum()})  # fmt: skip
    print(pd.DataFrame(rows).round(1).to_markdown(index=False), "\n")
    base = parts["ks_blocks_cost"]
    first, refill = (base[base["call"] == k] for k in (1, 2))
    ranges = int(round((math.sqrt(8 * len(first) + 1) - 1) / 2))
    kept = first["pairs"].sum() / (PARTNERS / 2)
    shape = {
        "kept_share": kept / 100_000,
        "values_per_advertiser": first["values"].sum() / (ranges + 1) / kept,
        "refill_share": refill["pairs"].sum() / (PARTNERS / 2 * REFILL) / kept,
        "kept_pair_share": (first["kept"].sum() + refill["kept"].sum())
        / (first["pairs"].sum() + refill["pairs"].sum()),
    }
    print("Marketplace shape (100,000):", {k: round(v, 3) for k, v in shape.items()}, "\n")
    out = [
        extrapolate(args.advertisers, shape, c, w, bv)
        for bv in (1 << 22, 1 << 24, 1 << 26)
        for w in args.workers
    ]
    print(f"One KS view of {args.advertisers:,} advertisers (both rounds of blocks):\n")
    print(pd.DataFrame(out).round(2).to_markdown(index=False))


if __name__ == "__main__":
    main()
