"""rcc's forms (normalize=True, "l1" and "auto", the default since 2026-11-25) and l2 on the
literature's k-means pools.

Per pool and seed s = 0, 1, 2: 10 columns of the pool drawn with numpy's default_rng(s), K = the
class count, ACC by the Hungarian map (items in the as-distributed order; every method here is
order-invariant). Prints one markdown row per pool to standard output (it writes no file); the
results and the reading are in benchmarks/results/rcc_pools.md.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/rcc_pools.py     # 5 pools, about 4 min
    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/rcc_pools.py --pools pool_lung --seeds 1
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adseg.consensus.l2 import L2CC  # noqa: E402
from adseg.consensus.rcc import RCC  # noqa: E402
from adseg.metrics import clustering_accuracy  # noqa: E402
from adseg_research.datasets import load_dataset  # noqa: E402

POOLS = ("pool_lung", "pool_binalpha", "pool_mf", "pool_semeion", "pool_caltech20")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pools", nargs="+", default=list(POOLS), choices=POOLS)
    ap.add_argument("--seeds", type=int, default=3, help="column draws per pool (seeds 0..S-1)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")  # ConvergenceWarning of the l1 form is reported as n_iter
    print(
        "| pool | n | g (distinct rows) | l2 | rcc (normalised) | rcc (l1) | rcc (auto, default) "
        "| auto chose l1 | rcc (normalised) n_iter | rcc (l1) n_iter |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.pools:
        ds = load_dataset(name)
        y, k = ds.y, int(np.unique(ds.y).size)
        acc = {"l2": [], "rcc": [], "l1": [], "auto": []}
        chose_l1 = 0
        iters = {"rcc": [], "l1": []}
        for s in range(args.seeds):
            cols = np.random.default_rng(s).choice(ds.members.shape[1], 10, replace=False)
            labels = ds.members[:, cols]
            acc["l2"].append(clustering_accuracy(y, L2CC(k, random_state=s).fit_predict(labels)))
            for key, norm in (("rcc", True), ("l1", "l1")):
                fit = RCC(k, normalize=norm, random_state=s).fit(labels)
                acc[key].append(clustering_accuracy(y, fit.labels_))
                iters[key].append(fit.n_iter_)
            auto = RCC(k, normalize="auto", random_state=s).fit(labels)
            acc["auto"].append(clustering_accuracy(y, auto.labels_))
            chose_l1 += auto.normalize_ == "l1"
        print(
            f"| {name} | {y.size} | {fit.n_cells_} | {np.mean(acc['l2']):.3f} | "
            f"{np.mean(acc['rcc']):.3f} | {np.mean(acc['l1']):.3f} | {np.mean(acc['auto']):.3f} | "
            f"{chose_l1} of {args.seeds} | "
            f"{np.mean(iters['rcc']):.0f} | {np.mean(iters['l1']):.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
