"""Run the peer library ``ensembleclustering`` 1.0.2 (PyPI; the maintained copy of
ClusterEnsembles: CSPA, HGPA, MCLA, HBGF, NMF) on base clusterings given in a .npz file.

Runs ONLY in the separate peer environment (it pins numpy<2 and an old scikit-learn; see
benchmarks/README.md for how to create it) and is called as a subprocess by
benchmarks/consensus_table2.py::

    /tmp/peerenv/bin/python benchmarks/peer_ensembleclustering.py IN.npz OUT.json [SOLVERS]

SOLVERS: comma-separated subset of cspa,hgpa,mcla,hbgf,nmf (default: all).

IN.npz holds ``n_clusters`` (int), ``seed`` (int) and ``labels_0``, ``labels_1``, ... — each an
(n_items, n_clusterings) integer label matrix (-1 = missing). OUT.json gets, per repetition and
solver, the consensus labels (or the error text) and the wall-clock seconds.

Shim (documented, behaviour-preserving): on current numpy/scipy, ``to_pymetis_format`` calls
``.toarray()`` on the ``numpy.matrix`` that indexing a LIL row now returns, so CSPA, MCLA and
HBGF raise ``AttributeError: 'matrix' object has no attribute 'toarray'``. We replace that one
function with an equivalent that reads the CSR arrays directly (same adjacency, same edge
weights, diagonal entries kept as the original does). Nothing else is changed.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
import time
import traceback

import numpy as np
from scipy import sparse

SOLVERS = ("cspa", "hgpa", "mcla", "hbgf", "nmf")


def _to_pymetis_format(adj_mat):
    """Equivalent of ClusterEnsembles.to_pymetis_format (xadj, adjncy, eweights) via CSR."""
    csr = sparse.csr_matrix(adj_mat)
    csr.sum_duplicates()
    csr.sort_indices()
    csr.eliminate_zeros()
    return (
        csr.indptr.tolist(),
        csr.indices.tolist(),
        [int(v) if float(v).is_integer() else float(v) for v in csr.data],
    )


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    import ensembleclustering.ClusterEnsembles as CE

    shimmed = False
    try:  # apply the shim only where the original fails
        CE.to_pymetis_format(sparse.identity(2, format="csr"))
    except AttributeError:
        CE.to_pymetis_format = _to_pymetis_format
        shimmed = True

    with np.load(argv[1]) as z:
        n_clusters = int(z["n_clusters"])
        seed = int(z["seed"])
        reps = sorted((k for k in z.files if k.startswith("labels_")), key=lambda s: int(s[7:]))
        matrices = [np.asarray(z[k]) for k in reps]

    out = {
        "package": "ensembleclustering",
        "version": importlib.metadata.version("ensembleclustering"),
        "numpy": np.__version__,
        "shim_to_pymetis_format": shimmed,
        "results": [],
    }
    solvers = argv[3].split(",") if len(argv) == 4 else list(SOLVERS)
    unknown = sorted(set(solvers) - set(SOLVERS))
    if unknown:
        print(f"unknown solvers {unknown}; choose from {SOLVERS}", file=sys.stderr)
        return 2
    for r, labels in enumerate(matrices):
        # the library wants (n_clusterings, n_items) floats with NaN for missing
        base = labels.T.astype(np.float64)
        base[base < 0] = np.nan
        for solver in solvers:
            entry = {"repetition": r, "solver": solver}
            t0 = time.perf_counter()
            try:
                pred = CE.cluster_ensembles(
                    base, nclass=n_clusters, solver=solver, random_state=seed + r
                )
                entry["seconds"] = time.perf_counter() - t0
                entry["labels"] = np.asarray(pred, dtype=np.int64).tolist()
            except Exception as exc:  # a benchmark records failures instead of stopping
                entry["seconds"] = time.perf_counter() - t0
                entry["error"] = f"{type(exc).__name__}: {exc}"
                entry["where"] = traceback.format_exc(limit=-1).strip().splitlines()[-3:]
            out["results"].append(entry)
    with open(argv[2], "w") as fh:
        json.dump(out, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
