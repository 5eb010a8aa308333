"""Adversarial columns among good ones: where rcc (l1) holds the truth and l2 follows the adversary.

Synthetic ensembles from ``adseg_research.bench.partial_view_ensemble``: K = 4 classes of 50
items; ``g`` good columns, each the true partition on a random share ``coverage`` of the items (-1
elsewhere, as a view leaves out the advertisers it has no data for); then one or two adversarial
columns that label every item (random labels, two classes merged, or one class split). Each
cell: ``--seeds`` ensembles (seeds 0..S-1), rcc and l2 at their defaults (normalised
co-association, ``random_state=0``), ACC against the truth and against the (first) adversarial
column, and the adversary's mean weight in M̃ (``adseg_research.bench.adversary_weight``).

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/rcc_adversarial.py [--seeds 10]

Writes benchmarks/results/rcc_adversarial.md (the table; the reading is in its header and in
benchmarks/results/consensus_table2.md). Benchmark-only: nothing here is used by the product.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adseg.consensus.l2 import L2CC  # noqa: E402
from adseg.consensus.rcc import RCC  # noqa: E402
from adseg.metrics import clustering_accuracy  # noqa: E402
from adseg_research.bench import adversary_weight, machine_summary, partial_view_ensemble  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
SIZES = [50, 50, 50, 50]
GOOD = (6, 12)
COVERAGES = (1.0, 0.7, 0.55, 0.5, 0.45, 0.4, 0.35)
ADVERSARIES = (("none", 0), ("random", 1), ("random", 2), ("merged", 1), ("split", 1))


def cell(n_good: int, coverage: float, adversary: str, n_adv: int, seeds: int) -> dict:
    """Mean scores of rcc and l2 over ``seeds`` ensembles of one grid cell."""
    k = len(SIZES)
    rows = []
    for seed in range(seeds):
        y, labels = partial_view_ensemble(
            SIZES,
            n_good=n_good,
            coverage=coverage,
            adversary=adversary,
            n_adversaries=n_adv,
            seed=seed,
        )
        rcc = RCC(k, random_state=0).fit_predict(labels)
        l2 = L2CC(k, random_state=0).fit_predict(labels)
        row = [clustering_accuracy(y, rcc), clustering_accuracy(y, l2)]
        if n_adv:
            adv = labels[:, n_good]
            row += [
                clustering_accuracy(adv, rcc),
                clustering_accuracy(adv, l2),
                adversary_weight(labels, n_good),
            ]
        rows.append(row)
    a = np.array(rows)
    gap = a[:, 0] - a[:, 1]
    out = {
        "rcc": a[:, 0].mean(),
        "l2": a[:, 1].mean(),
        "rcc_min": a[:, 0].min(),
        "wins": int((gap >= 0.02).sum()),
        "losses": int((gap <= -0.02).sum()),
    }
    if n_adv:
        out.update(rcc_adv=a[:, 2].mean(), l2_adv=a[:, 3].mean(), weight=a[:, 4].mean())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--out", type=Path, default=RESULTS / "rcc_adversarial.md")
    args = ap.parse_args()
    warnings.simplefilter("ignore")  # ConvergenceWarning in a few cells; n_iter is not the point
    started = time.perf_counter()
    lines = [
        "| good columns | coverage | adversary | adversary's weight in M̃ | ACC rcc | ACC l2 "
        "| rcc − l2 | min ACC rcc | seeds rcc ≥ l2 + 0.02 / l2 ≥ rcc + 0.02 "
        "| ACC vs adversary: rcc | l2 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n_good in GOOD:
        for coverage in COVERAGES:
            for adversary, n_adv in ADVERSARIES:
                r = cell(n_good, coverage, adversary, n_adv, args.seeds)
                name = adversary if n_adv <= 1 else f"{adversary} × {n_adv}"
                weight = f"{r['weight']:.2f}" if n_adv else "—"
                vs = f"{r['rcc_adv']:.2f} | {r['l2_adv']:.2f}" if n_adv else "— | —"
                line = (
                    f"| {n_good} | {coverage:.2f} | {name} | {weight} | {r['rcc']:.3f} "
                    f"| {r['l2']:.3f} | {r['rcc'] - r['l2']:+.3f} "
                    f"| {r['rcc_min']:.3f} | {r['wins']} / {r['losses']} | {vs} |"
                )
                lines.append(line)
                print(line, flush=True)
    elapsed = time.perf_counter() - started
    header = [
        "# Adversarial columns among partial views: rcc vs l2",
        "",
        f"Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Machine: {machine_summary()}. "
        f"Wall time of the whole grid: {elapsed:.0f} s.",
        f"Command: `OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/rcc_adversarial.py "
        f"--seeds {args.seeds}`.",
        "",
        f"K = 4 classes × 50 items; each cell averages {args.seeds} ensembles "
        f"(seeds 0..{args.seeds - 1}); rcc and l2 at their defaults. *Good columns* label a "
        "random share *coverage* of the "
        "items with the true class (-1 elsewhere); every adversarial column labels all items. "
        "*Adversary's weight*: its mean share of an entry of M̃ (M̃_ij averages the columns "
        "that label both i and j; 1/V at full coverage). *ACC vs adversary*: agreement of the "
        "fused labels with the (first) adversarial column. The reading: "
        "benchmarks/results/consensus_table2.md, *Adversarial columns*.",
        "",
    ]
    args.out.write_text("\n".join(header + lines) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
