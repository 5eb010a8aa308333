"""Seconds per ADMM iteration of the paper's (sample-orientation) LTA solver at the pool sizes.

The sample orientation cannot use the cell reduction (its DFT runs along the item index), so
each iteration costs four length-n real FFTs of n×n arrays plus two fused element-wise passes
and two symmetrisations. This times ``lta_refine(A, Ω, orientation="sample", max_iter=ITER)``
on random 10-column label matrices (the cost does not depend on the labels) and reports wall and
CPU seconds per iteration.

    .venv/bin/python benchmarks/lta_sample_iteration.py --sizes 2386 5000 5500 7797 --iter 8

n = 2,386 (pool_caltech20) and 7,797 (pool_isolet) have large prime factors (1,193; 113), so
their FFTs run Bluestein's algorithm; 5,000 (pool_mnist) and 5,500 (pool_texture) are smooth.
Prints one JSON line per size.
"""

from __future__ import annotations

import argparse
import json
import os
import time


def time_iterations(n: int, n_iter: int, seed: int = 0) -> dict:
    import numpy as np

    from adseg.consensus.lta import coassociation_and_links, lta_refine

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 20, size=(n, 10))
    A, omega = coassociation_and_links(labels)
    lta_refine(A, omega, orientation="sample", max_iter=1)  # first-touch of the allocator
    wall, cpu = time.perf_counter(), time.process_time()
    res = lta_refine(A, omega, orientation="sample", max_iter=n_iter)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "n": n,
        "iterations": res.n_iter,
        "wall_s_per_iter": wall / res.n_iter,
        "cpu_s_per_iter": cpu / res.n_iter,
        "load_1min": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2386, 5000, 5500, 7797])
    parser.add_argument("--iter", type=int, default=8)
    args = parser.parse_args()
    for n in args.sizes:
        print(json.dumps(time_iterations(n, args.iter)), flush=True)


if __name__ == "__main__":
    main()
