"""Is rcc's Table 2 deficit the solver or the relaxation? The paper's own discrete objective.

Seed 003 relaxes its discrete problem (Eq. 16), J4(G) = ‖M̃ − G Gᵀ‖₁ over 0/1 cluster
indicators G — the number of item pairs weighted by how far the partition's "together / apart"
disagrees with the co-association M̃ — into the continuous Eq. 25 that rcc solves. This script
scores the labels rcc and l2 return (both at their defaults, same ensembles as the Table 2
protocol: 40 k-means runs per repetition, 10 repetitions, raw features / TF-IDF) with J4, and
also polishes each with a best-move local search on J4 (each item moves to the cluster that lowers
J4 most, until no move helps; K fixed) to see whether the discrete objective leads rcc's labels
back to l2's quality. Benchmark-only code: nothing here is used by the product.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/rcc_discrete_objective.py [--datasets …]

Prints a markdown table (means over the repetitions); the reading is in
benchmarks/results/rcc_discrete_objective.md.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adseg.consensus import FUSERS, co_association  # noqa: E402
from adseg.metrics import clustering_accuracy  # noqa: E402
from adseg_research.bench_table2 import TABLE2_DATASETS, table2_ensembles  # noqa: E402


def discrete_objective(M: np.ndarray, labels: np.ndarray) -> float:
    """J4 = Σ_ij |M̃_ij − [i, j together]| (Eq. 16), from cluster sums: O(n²) time, one n×n
    temporary (the sum over together-pairs of M̃ is the sum of its within-cluster blocks)."""
    onehot = np.zeros((labels.size, labels.max() + 1))
    onehot[np.arange(labels.size), labels] = 1.0
    sizes = onehot.sum(axis=0)
    within = float(np.einsum("ik,ij,jk->", onehot, M, onehot))
    return float(M.sum()) - 2.0 * within + float((sizes**2).sum())


def relaxed_objective_at_l2(labels: np.ndarray, n_clusters: int) -> float:
    """‖M̂ − H D Hᵀ‖₁ (Eq. 25, on rcc's default normalised M̂) at rcc's starting point, the
    L2CC solution (top-K eigenpairs, D clipped at 0). O(n³) dense eigensolver: small n only."""
    M = co_association(labels, normalize=True)
    vals, vecs = np.linalg.eigh(M)
    vals, vecs = np.maximum(vals[::-1][:n_clusters], 0.0), vecs[:, ::-1][:, :n_clusters]
    return float(np.abs(M - (vecs * vals) @ vecs.T).sum())


def local_search(M: np.ndarray, labels: np.ndarray, n_clusters: int, max_pass: int = 50):
    """Single-item best moves on J4 with K labels (a cluster may empty). Moving i from a to b
    changes J4 by 2(S[i, b] − S[i, a]) with S = (1 − 2M̃) G (own entry excluded), so S is kept
    and updated in O(n) per move. O(n² K) to start, O(n K) per item visit."""
    labels = labels.copy()
    W = 1.0 - 2.0 * M
    np.fill_diagonal(W, 0.0)
    onehot = np.zeros((labels.size, n_clusters))
    onehot[np.arange(labels.size), labels] = 1.0
    S = W @ onehot
    for _ in range(max_pass):
        moved = 0
        for i in range(labels.size):  # sequential moves: each one must see the last
            a, b = labels[i], int(np.argmin(S[i]))
            if S[i, b] < S[i, a] - 1e-12:
                labels[i] = b
                S[:, a] -= W[:, i]
                S[:, b] += W[:, i]
                moved += 1
        if not moved:
            break
    return labels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=list(TABLE2_DATASETS))
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    print(
        "| dataset | n | ACC rcc | ACC l2 | J4 truth | J4 rcc | J4 l2 | reps J4(rcc) > J4(l2) "
        "| ACC rcc + J4 search | ACC l2 + J4 search | J4 rcc + search | J4 l2 + search "
        "| Eq. 25 l1 at the l2 start | Eq. 25 l1 at rcc's end |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.datasets:
        ensembles, k = table2_ensembles(name)
        rows = []
        for ens in ensembles:
            M = co_association(ens.labels)
            out = {}
            for method in ("rcc", "l2"):
                fuser = FUSERS[method](n_clusters=k, random_state=ens.seed).fit(ens.labels)
                pred = fuser.labels_
                if method == "rcc":
                    fuser_rcc = fuser
                polished = local_search(M, pred, k)
                out[method] = (
                    clustering_accuracy(ens.y, pred),
                    discrete_objective(M, pred),
                    clustering_accuracy(ens.y, polished),
                    discrete_objective(M, polished),
                )
            truth = np.unique(ens.y, return_inverse=True)[1]
            relaxed = (relaxed_objective_at_l2(ens.labels, k), fuser_rcc.objective_)
            rows.append((out, discrete_objective(M, truth), relaxed))

        def mean(method: str, i: int, rows=rows) -> float:
            return float(np.mean([r[0][method][i] for r in rows]))

        worse = sum(r[0]["rcc"][1] > r[0]["l2"][1] + 1e-9 for r in rows)
        print(
            f"| {name} | {ensembles[0].y.size} | {mean('rcc', 0):.3f} | {mean('l2', 0):.3f} | "
            f"{np.mean([r[1] for r in rows]):.0f} | {mean('rcc', 1):.0f} | {mean('l2', 1):.0f} | "
            f"{worse}/{len(rows)} | {mean('rcc', 2):.3f} | {mean('l2', 2):.3f} | "
            f"{mean('rcc', 3):.0f} | {mean('l2', 3):.0f} | "
            f"{np.mean([r[2][0] for r in rows]):.2f} | {np.mean([r[2][1] for r in rows]):.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
