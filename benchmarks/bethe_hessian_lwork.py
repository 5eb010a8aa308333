"""The Bethe Hessian cluster count: LAPACK dsytrf with scipy's default workspace against the
queried one (adseg.views.ncut._bethe_hessian_count).

scipy's ``lapack.dsytrf`` wrapper defaults to ``lwork = n``, with which LAPACK runs its unblocked
(matrix-vector) Bunch–Kaufman code; the workspace that ``dsytrf_lwork`` reports (block size × n)
lets it work on matrix products. Both are the same factorisation with the same pivoting rule, so
the inertia (the count) is the same; only the time differs. For each n, a graph shaped like the
nightly's KS graphs (40 planted communities of unequal size, about 8 % of pairs linked, the
win-rate view's density at α = 0.05 on a simulated marketplace) is counted both ways; the count
is also checked against a full eigendecomposition up to n = 2,000.

Usage:
    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bethe_hessian_lwork.py
    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bethe_hessian_lwork.py --quick
Writes benchmarks/results/bethe_hessian_lwork.md (``--quick``: bethe_hessian_lwork_quick.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.linalg

from adseg.views.ncut import _bethe_hessian, _bethe_hessian_count, _negative_pivots
from adseg_research.bench import machine_summary, recorded_command, write_results

RESULTS = Path(__file__).parent / "results"


def planted_graph(n: int, rng: np.random.Generator, n_groups: int = 40) -> np.ndarray:
    """(n, n) 0/1 float64 adjacency, zero diagonal: n_groups communities of Dirichlet sizes,
    within-group link probability 0.6, between 0.06 (≈ 8 % of pairs linked)."""
    sizes = rng.multinomial(n, rng.dirichlet(np.full(n_groups, 2.0)))
    group = np.repeat(np.arange(n_groups), sizes)
    p = np.where(group[:, None] == group[None, :], 0.6, 0.06)
    a = np.triu((rng.random((n, n)) < p).astype(np.float64), 1)
    return a + a.T


def default_workspace_count(adjacency: np.ndarray) -> int:
    """The count as _bethe_hessian_count computed it before 2026-11-25: dsytrf at the wrapper's
    default workspace (lwork = n)."""
    ldu, ipiv, _ = scipy.linalg.lapack.dsytrf(_bethe_hessian(adjacency).T, lower=1, overwrite_a=1)
    return _negative_pivots(ldu, ipiv)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n up to 2,000 only")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    sizes = [500, 1000, 2000] if args.quick else [500, 1000, 2000, 4000, 8000]
    output = args.output or RESULTS / (
        "bethe_hessian_lwork_quick.md" if args.quick else "bethe_hessian_lwork.md"
    )
    rng = np.random.default_rng(0)
    rows = []
    for n in sizes:
        a = planted_graph(n, rng)
        t0 = time.perf_counter()
        old = default_workspace_count(a.copy())
        t_old = time.perf_counter() - t0
        t0 = time.perf_counter()
        new = _bethe_hessian_count(a)
        t_new = time.perf_counter() - t0
        exact = None
        if n <= 2000:
            exact = int((np.linalg.eigvalsh(_bethe_hessian(a)) < 0).sum())
        rows.append(
            {
                "n": n,
                "density": round(float(a.mean()), 4),
                "count (lwork = n)": old,
                "count (queried lwork)": new,
                "count (eigvalsh)": exact if exact is not None else "—",
                "seconds (lwork = n)": round(t_old, 2),
                "seconds (queried lwork)": round(t_new, 2),
                "speed-up": round(t_old / t_new, 1),
            }
        )
        print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    lines = [
        "# Bethe Hessian count: dsytrf's default workspace against the queried one",
        "",
        f"Measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {machine_summary()}.",
        "",
        "Command: `"
        + recorded_command("bethe_hessian_lwork.py", sys.argv[1:] if argv is None else argv)
        + "`",
        "",
        "One planted-community graph per n (see the script's docstring), counted by the old call "
        "(scipy's default `lwork = n`: LAPACK's unblocked code) and by "
        "`adseg.views.ncut._bethe_hessian_count` (the workspace `dsytrf_lwork` reports). "
        "Wall-clock seconds on a shared machine; the ratio is the result.",
        "",
        table.to_markdown(index=False),
        "",
    ]
    write_results(output, "\n".join(lines))
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
