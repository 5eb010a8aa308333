"""adseg's fusers beside py-cluster-ensemble's (PCE) TRCE, ECPCS-MC, LWEA and U-SENC (issue 39).

PCE 1.0.0 (github HeWenjun824699/py-cluster-ensemble, not on PyPI) is used as a reference only,
never copied into adseg. Its TRCE, ECPCS-MC, LWEA and U-SENC cores import only numpy/scipy, so
they are loaded from a source checkout without installing PCE (and without torch): empty stub
packages ``pce``, ``pce.consensus`` and ``pce.consensus.methods`` get a ``__path__`` into the
checkout, so PCE's own ``__init__`` files (which pull in torch) never run. Arguments follow PCE's
entry-point wrappers (src/pce/consensus/{trce,ecpcs_mc,lwea,usenc}.py) at their defaults:
TRCE γ = 0.01, ECPCS-MC t = 20, LWEA θ = 10; the global numpy seed is set before every PCE call
(as the wrappers do), to the draw number here.

Protocol. Per pool and draw d: rng = np.random.default_rng(d); 20 columns drawn without
replacement from the pool's 100 (rng.choice), then the items permuted by the same rng
(rng.permutation), so no method can read the classes from the stored order. Every method fuses the
same 20 columns with c = number of classes. Each fit runs in a forked child process (one BLAS
thread): seconds = wall clock of the fit, peak MiB = the child's peak resident memory during the
fit above its resident memory before it (VmHWM after resetting it through /proc/self/clear_refs).
A failure (exception, crash, timeout) is recorded with its text, never dropped.
"mean base clustering" = the mean over the 20 drawn columns of each column's ACC / NMI.

Two parts: the four pools of the issue (all methods), and held-out pools that trce was not tuned
on (trce with the default γ rule and with the paper's γ = 1 only). Rows go to
results/fuser_peers.csv (appended as they come; ``--resume`` skips rows already there) and
results/fuser_peers.md is re-rendered from all stored rows.

    git clone https://github.com/HeWenjun824699/py-cluster-ensemble /tmp/pce
    git -C /tmp/pce checkout 8228a50
    nice -n 10 .venv/bin/python benchmarks/fuser_peers.py --pce-src /tmp/pce/src
    nice -n 10 .venv/bin/python benchmarks/fuser_peers.py --pce-src /tmp/pce/src --draws-slow 2
    .venv/bin/python benchmarks/fuser_peers.py --render        # tables from the stored rows only
"""

from __future__ import annotations

import os

# one BLAS thread, as in the measurements (must be set before numpy is imported)
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import csv  # noqa: E402
import datetime as dt  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shlex  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import scipy  # noqa: E402

from adseg.consensus import FUSERS  # noqa: E402
from adseg.metrics import clustering_accuracy, nmi  # noqa: E402
from adseg_research import peers  # noqa: E402
from adseg_research.isolated import proc_kib, run_isolated  # noqa: E402

HERE = Path(__file__).resolve().parent
DATASETS = HERE.parent.parent / "shared" / "datasets"  # ../shared beside the repository
RESULTS = HERE / "results"
CSV_PATH = RESULTS / "fuser_peers.csv"
MD_PATH = RESULTS / "fuser_peers.md"
META_PATH = RESULTS / "fuser_peers_meta.json"

POOLS = ["pool_binalpha", "pool_semeion", "pool_mf", "pool_mnist"]
HELDOUT = ["pool_caltech20", "pool_texture", "pool_umist", "pool_lung"]
BASE = "mean base clustering"
TRCE_G1 = "trce (paper γ = 1)"
PCE_TRCE = "PCE TRCE"
TRCE_DENSE = "trce (dense eigensolver)"
# display name → (kind, what to call, keyword arguments)
METHODS: dict[str, tuple[str, str, dict]] = {
    PCE_TRCE: ("pce", "trce", {}),
    "ECPCS-MC": ("pce", "ecpcs_mc", {}),
    "LWEA": ("pce", "lwea", {}),
    "U-SENC": ("pce", "usenc", {}),
    "trce": ("adseg", "trce", {}),
    TRCE_G1: ("adseg", "trce", {"gamma_init": 1.0}),
    TRCE_DENSE: ("adseg", "trce", {"eigen_solver": "dense"}),
    "rcc": ("adseg", "rcc", {}),
    "l2": ("adseg", "l2", {}),
    "sccbg": ("adseg", "sccbg", {}),
}
SHORT = {  # command-line names
    "pce_trce": PCE_TRCE,
    "ecpcs_mc": "ECPCS-MC",
    "lwea": "LWEA",
    "usenc": "U-SENC",
    "trce": "trce",
    "trce_g1": TRCE_G1,
    "trce_dense": TRCE_DENSE,
    "rcc": "rcc",
    "l2": "l2",
    "sccbg": "sccbg",
}
HELDOUT_METHODS = ["trce", TRCE_G1]
FIELDS = ["part", "pool", "n", "c", "draw", "method", "status", "acc", "nmi", "k", "seconds"]
FIELDS += ["peak_mib", "rss_mib", "error"]
PCE_COMMIT = peers.PCE_COMMIT

NOTES = [
    "* PCE methods are called through their cores (`pce.consensus.methods.*_core`) with the "
    "arguments their entry-point wrappers pass at the wrappers' defaults: TRCE `trce_core(L, c, "
    "0.01)`, ECPCS-MC `ecpcs_mc_core(L, 20, c)`, LWEA `lwea_core(L, c, 10)` (θ = 10 is the "
    "wrapper's default; the core's own default and the LWEA paper's is 0.4), U-SENC "
    "`usenc_core(L, c)`; `np.random.seed(draw)` before each call, as the wrappers seed before "
    "theirs. PCE TRCE returns the learned graph's connected components as they are (no repair), "
    "so its cluster count can differ from c; adseg's trce repairs to exactly c (spec §3.9).",
    "* ECPCS-MC is not fully determined by the numpy seed: its Ncut calls `scipy.sparse.linalg."
    "eigsh` without a start vector (ARPACK draws its own), so a rerun can differ in the third "
    "decimal on a draw.",
    "* adseg's fusers run with their defaults, `n_clusters` = c and `random_state` = draw. "
    '"trce (dense eigensolver)" = `eigen_solver="dense"` (the reference\'s solver; the '
    'default `"auto"` switches to ARPACK shift-invert at n ≥ 1500, whose basis of the '
    "near-null space of L differs, so the iterations can take another path); it is run only on "
    "request (`--methods trce_dense`) and only where n ≥ 1500 (below, it is trce).",
]
_PCE_SRC: list[Path] = []  # PCE's src folder, loaded in the parent before any fork


def load_pce(src: Path) -> None:
    """Import PCE's four cores from a checkout's ``src`` (adseg_research.peers.load_pce)."""
    try:
        peers.load_pce(src)
    except (OSError, ValueError) as exc:
        sys.exit(f"--pce-src: {exc}")
    _PCE_SRC[:] = [Path(src)]


def fit_labels(method: str, L: np.ndarray, c: int, seed: int) -> np.ndarray:
    kind, name, kwargs = METHODS[method]
    if kind == "pce":  # np.random.seed(seed), then the core with the wrapper's defaults
        return peers.PCEFuser(name, c, seed, src=_PCE_SRC[0]).fit_predict(L)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return FUSERS[name](n_clusters=c, random_state=seed, **kwargs).fit(L).labels_


def run_fit(method: str, L: np.ndarray, c: int, seed: int, timeout: float) -> dict:
    """One fit in a forked child (adseg_research.isolated.run_isolated): labels, seconds,
    peak_mib, rss_mib, status and error."""
    res = run_isolated(lambda: np.asarray(fit_labels(method, L, c, seed)), timeout)
    return {"labels": res.pop("result")} | res


def draw_ensemble(members: np.ndarray, y: np.ndarray, draw: int, m: int = 20):
    rng = np.random.default_rng(draw)
    cols = rng.choice(members.shape[1], m, replace=False)
    perm = rng.permutation(len(y))
    return np.ascontiguousarray(members[perm][:, cols]), y[perm]


def read_rows() -> list[dict]:
    if not CSV_PATH.exists():
        return []
    with CSV_PATH.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    # one row per (part, pool, draw, method): the first (two resumed runs may both add a base row)
    seen: set[tuple] = set()
    unique = []
    for row in rows:
        key = (row["part"], row["pool"], row["draw"], row["method"])
        if key not in seen:
            seen.add(key)
            unique.append(row)
    return unique


def append_row(row: dict) -> None:
    new = not CSV_PATH.exists()
    with CSV_PATH.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        if new:
            writer.writeheader()
        writer.writerow({k: row.get(k, "") for k in FIELDS})


def fmt(x: float, digits: int = 3) -> str:
    return "" if x is None or not np.isfinite(x) else f"{x:.{digits}f}"


def machine_info() -> dict:
    kib = proc_kib("MemTotal", "/proc/meminfo")
    mem = "?" if np.isnan(kib) else f"{kib / 1024**2:.1f} GiB"
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(
            ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "?"
    return {
        "platform": platform.platform(),
        "cpu": f"{cpu}, {os.cpu_count()} logical CPUs",
        "memory": mem,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "?"),
        "adseg_commit": commit,
        "trce_default_gamma_init": repr(FUSERS["trce"]().get_params()["gamma_init"]),
        "pce": f"py-cluster-ensemble 1.0.0 @ {PCE_COMMIT} (source checkout, not installed)",
    }


# ---------------------------------------------------------------------------------- rendering
def _stats(rows: list[dict], key: str) -> tuple[float, float]:
    vals = np.array([float(r[key]) for r in rows if r[key] not in ("", "nan")])
    if vals.size == 0:
        return float("nan"), float("nan")
    return float(vals.mean()), float(vals.std())


def _nanmean(values: list[float]) -> float:
    finite = [v for v in values if np.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")


def _pm(rows: list[dict], key: str) -> str:
    mean, std = _stats(rows, key)
    return "—" if not np.isfinite(mean) else f"{mean:.3f} ± {std:.3f}"


def render(meta: dict) -> str:
    rows = read_rows()
    out = ["# Fusers beside py-cluster-ensemble's peers (issue 39)", ""]
    out += [
        "Generated by `benchmarks/fuser_peers.py` (see its docstring and benchmarks/README.md).",
        "Per pool and draw d: `rng = np.random.default_rng(d)`, 20 of the pool's 100 k-means "
        "columns drawn without replacement, items permuted by the same rng; every method fuses "
        "the same columns with c = number of classes. One fit per forked child process, one BLAS "
        "thread. Mean ± std (population std) over the draws that ran; `ok/runs` counts them. "
        "Seconds = wall clock of the fit; MiB = the fit's peak resident memory above the child's "
        "resident memory before the fit (mean over draws). The machine is shared with other jobs "
        "(2 cores, `nice -n 10`), so seconds are indicative, not precise.",
        "",
        "## Machine and commands",
        "",
    ]
    for key, value in meta.get("machine", {}).items():
        out.append(f"* {key}: {value}")
    out.append("* commands run (in this order; `--resume` continues the stored rows):")
    for entry in meta.get("commands", []):
        out.append(f"  * {entry['date']}: `{entry['command']}`")
    out.append("")

    def cell(part: str, pool: str, method: str) -> list[dict]:
        return [r for r in rows if (r["part"], r["pool"], r["method"]) == (part, pool, method)]

    main_pools = [p for p in POOLS + sorted({r["pool"] for r in rows if r["part"] == "main"})]
    main_pools = list(dict.fromkeys(p for p in main_pools if any(r["pool"] == p for r in rows)))
    # --- trce vs PCE TRCE
    out += [
        "## trce against PCE TRCE",
        "",
        "ACC on the same draws. Δ = trce − PCE TRCE over the draws both ran (paired); same ACC "
        "= paired draws where both give exactly the same ACC; time ratio = PCE TRCE seconds / "
        'trce seconds on those draws. trce is adseg\'s default (γ start "quantile", the public '
        'code\'s rule); "trce (paper γ = 1)" is `gamma_init=1.0`, the default before issue 39.',
        "",
        "| pool | draws (trce / PCE) | trce ACC | trce (paper γ = 1) ACC | PCE TRCE ACC "
        "| Δ ACC paired | same ACC | trce (dense eigensolver): Δ paired, same ACC "
        "| trce s | PCE TRCE s | PCE / trce time |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for pool in main_pools:
        ours = {r["draw"]: r for r in cell("main", pool, "trce") if r["status"] == "ok"}
        g1 = [r for r in cell("main", pool, TRCE_G1) if r["status"] == "ok"]
        ref = {r["draw"]: r for r in cell("main", pool, PCE_TRCE) if r["status"] == "ok"}
        both = sorted(set(ours) & set(ref), key=int)
        delta = [float(ours[d]["acc"]) - float(ref[d]["acc"]) for d in both]
        ratio = (
            sum(float(ref[d]["seconds"]) for d in both)
            / sum(float(ours[d]["seconds"]) for d in both)
            if both
            else float("nan")
        )
        dmean = f"{np.mean(delta):+.3f} ({len(both)} draws)" if delta else "—"
        same = f"{sum(abs(x) < 1e-12 for x in delta)}/{len(both)}"
        dense = {r["draw"]: r for r in cell("main", pool, TRCE_DENSE) if r["status"] == "ok"}
        both_d = sorted(set(dense) & set(ref), key=int)
        delta_d = [float(dense[d]["acc"]) - float(ref[d]["acc"]) for d in both_d]
        dense_txt = (
            f"{np.mean(delta_d):+.3f}, {sum(abs(x) < 1e-12 for x in delta_d)}/{len(both_d)}"
            if delta_d
            else "—"
        )
        out.append(
            f"| {pool} | {len(ours)} / {len(ref)} | {_pm(list(ours.values()), 'acc')} "
            f"| {_pm(g1, 'acc')} | {_pm(list(ref.values()), 'acc')} | {dmean} | {same} "
            f"| {dense_txt} "
            f"| {fmt(_stats(list(ours.values()), 'seconds')[0], 1)} "
            f"| {fmt(_stats(list(ref.values()), 'seconds')[0], 1)} | {fmt(ratio, 1)}× |"
        )
    out.append("")
    # --- full tables
    out += ["## All methods on the four pools", ""]
    for pool in main_pools:
        prow = [r for r in rows if r["pool"] == pool and r["part"] == "main"]
        n, c = (prow[0]["n"], prow[0]["c"]) if prow else ("?", "?")
        out += [
            f"### {pool} (n = {n}, c = {c})",
            "",
            "| method | ok/runs | ACC | NMI | clusters | seconds | peak MiB |",
            "|---|---|---|---|---|---|---|",
        ]
        for method in [BASE, *METHODS]:
            rs = cell("main", pool, method)
            if not rs:
                continue
            ok = [r for r in rs if r["status"] == "ok"]
            out.append(
                f"| {method} | {len(ok)}/{len(rs)} | {_pm(ok, 'acc')} | {_pm(ok, 'nmi')} "
                f"| {fmt(_stats(ok, 'k')[0], 1)} | {fmt(_stats(ok, 'seconds')[0], 1)} "
                f"| {fmt(_stats(ok, 'peak_mib')[0], 0)} |"
            )
        out.append("")
    # --- held-out
    held = list(dict.fromkeys(r["pool"] for r in rows if r["part"] == "heldout"))
    if held:
        out += [
            "## Held-out pools (trce was not tuned on them)",
            "",
            "Mean base clustering = mean over the 20 drawn columns of each column's ACC, averaged "
            "over the draws. Goal: trce ≥ mean base clustering.",
            "",
            "| pool | n | c | draws | mean base ACC | trce ACC | trce (paper γ = 1) ACC "
            "| mean base NMI | trce NMI | trce (paper γ = 1) NMI | trce s | trce (γ = 1) s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        means = {BASE: [], "trce": [], TRCE_G1: []}
        nmis = {BASE: [], "trce": [], TRCE_G1: []}
        for pool in held:
            b = [r for r in cell("heldout", pool, BASE)]
            t = [r for r in cell("heldout", pool, "trce") if r["status"] == "ok"]
            g = [r for r in cell("heldout", pool, TRCE_G1) if r["status"] == "ok"]
            runs = len(cell("heldout", pool, "trce"))
            for key, rs in ((BASE, b), ("trce", t), (TRCE_G1, g)):
                means[key].append(_stats(rs, "acc")[0])
                nmis[key].append(_stats(rs, "nmi")[0])
            n, c = b[0]["n"] if b else "?", b[0]["c"] if b else "?"
            out.append(
                f"| {pool} | {n} | {c} | {len(t)}/{runs} | {_pm(b, 'acc')} | {_pm(t, 'acc')} "
                f"| {_pm(g, 'acc')} | {_pm(b, 'nmi')} | {_pm(t, 'nmi')} | {_pm(g, 'nmi')} "
                f"| {fmt(_stats(t, 'seconds')[0], 1)} | {fmt(_stats(g, 'seconds')[0], 1)} |"
            )
        out.append(
            f"| **mean over pools** | | | | {fmt(_nanmean(means[BASE]))} "
            f"| {fmt(_nanmean(means['trce']))} | {fmt(_nanmean(means[TRCE_G1]))} "
            f"| {fmt(_nanmean(nmis[BASE]))} | {fmt(_nanmean(nmis['trce']))} "
            f"| {fmt(_nanmean(nmis[TRCE_G1]))} | | |"
        )
        out.append("")
    # --- failures
    failed = [r for r in rows if r["status"] not in ("ok", "")]
    out += ["## Failures and skipped runs", ""]
    if not failed:
        out.append("None.")
    else:
        out += ["| part | pool | draw | method | status | text |", "|---|---|---|---|---|---|"]
        for r in failed:
            text = r["error"].replace("|", "\\|").replace("\n", " ")[:300]
            out.append(
                f"| {r['part']} | {r['pool']} | {r['draw']} | {r['method']} "
                f"| {r['status']} | {text} |"
            )
    out.append("")
    out += ["## Notes", "", *NOTES, *meta.get("notes", []), ""]
    return "\n".join(out)


# ---------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pce-src", type=Path, default=os.environ.get("PCE_SRC"))
    ap.add_argument("--pools", default=",".join(POOLS))
    ap.add_argument("--heldout-pools", default=",".join(HELDOUT))
    ap.add_argument(
        "--methods",
        default=",".join(k for k in SHORT if k != "trce_dense"),
        help=f"of {', '.join(SHORT)} (trce_dense: only on request, it equals trce below n = 1500)",
    )
    ap.add_argument("--draws", type=int, default=10)
    ap.add_argument("--draws-slow", type=int, default=None, help="draws of PCE TRCE on pool_mnist")
    ap.add_argument("--heldout-draws", type=int, default=10)
    ap.add_argument(
        "--heldout-max-seconds",
        type=float,
        default=180.0,
        help="held-out pools other than the four default ones (pool_isolet, pool_usps): after a "
        "fit slower than this, skip that cell's remaining draws",
    )
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per fit")
    ap.add_argument("--datasets-dir", type=Path, default=DATASETS)
    ap.add_argument("--resume", action="store_true", help="keep stored rows, skip runs done")
    ap.add_argument("--render", action="store_true", help="only re-render the .md from the .csv")
    args = ap.parse_args(argv)

    RESULTS.mkdir(exist_ok=True)
    meta = json.loads(META_PATH.read_text()) if META_PATH.exists() else {}
    if args.render:
        MD_PATH.write_text(render(meta))
        print(f"wrote {MD_PATH}")
        return

    methods = [SHORT[m] for m in args.methods.split(",") if m]
    pools = [p for p in args.pools.split(",") if p]
    heldout = [p for p in args.heldout_pools.split(",") if p]
    draws_slow = args.draws if args.draws_slow is None else args.draws_slow
    if any(METHODS[m][0] == "pce" for m in methods) and pools:
        if args.pce_src is None:
            sys.exit("give --pce-src DIR (or $PCE_SRC): the src/ folder of a PCE checkout")
        load_pce(Path(args.pce_src))
    if not args.resume:
        for path in (CSV_PATH, META_PATH):
            path.unlink(missing_ok=True)
        meta = {}
    command = shlex.join(["benchmarks/fuser_peers.py", *sys.argv[1:]])
    command = "nice -n 10 .venv/bin/python " + command
    meta["machine"] = machine_info()
    meta.setdefault("commands", []).append(
        {"date": dt.datetime.now().isoformat(timespec="seconds"), "command": command}
    )
    META_PATH.write_text(json.dumps(meta, indent=1, ensure_ascii=False))
    done = {(r["part"], r["pool"], r["draw"], r["method"]) for r in read_rows()}

    plan = [("main", p, args.draws, methods) for p in pools]
    plan += [("heldout", p, args.heldout_draws, HELDOUT_METHODS) for p in heldout]
    for part, pool, n_draws, cell_methods in plan:
        data = np.load(args.datasets_dir / f"{pool}.npz")
        members, y = data["members"], data["y"]
        c = int(np.unique(y).size)
        skip: dict[str, str] = {}
        for draw in range(n_draws):
            L, yy = draw_ensemble(members, y, draw)
            common = {"part": part, "pool": pool, "n": len(yy), "c": c, "draw": draw}
            if (part, pool, str(draw), BASE) not in done:
                accs = [clustering_accuracy(yy, L[:, j]) for j in range(L.shape[1])]
                nmis = [nmi(yy, L[:, j]) for j in range(L.shape[1])]
                ks = [np.unique(L[:, j]).size for j in range(L.shape[1])]
                append_row(
                    common
                    | {"method": BASE, "status": "ok", "acc": float(np.mean(accs))}
                    | {"nmi": float(np.mean(nmis)), "k": float(np.mean(ks))}
                )
            for method in cell_methods:
                if (part, pool, str(draw), method) in done:
                    continue
                if method == PCE_TRCE and pool == "pool_mnist" and draw >= draws_slow:
                    continue
                if method in skip:
                    append_row(common | {"method": method, "status": "skipped"} | skip)
                    continue
                res = run_fit(method, L, c, draw, args.timeout)
                row = common | {"method": method} | {k: v for k, v in res.items() if k != "labels"}
                if res["status"] == "ok":
                    labels = res["labels"]
                    row |= {
                        "acc": clustering_accuracy(yy, labels),
                        "nmi": nmi(yy, labels),
                        "k": int(np.unique(labels).size),
                    }
                append_row(row)
                print(
                    f"{part} {pool} d{draw} {method}: {row['status']} acc {fmt(row.get('acc'))} "
                    f"k {row.get('k', '')} {row['seconds']:.1f}s "
                    f"{fmt(row.get('peak_mib', float('nan')), 0)} MiB {row.get('error', '')}",
                    flush=True,
                )
                slow = res["seconds"] > args.heldout_max_seconds
                if part == "heldout" and pool not in HELDOUT and slow:
                    skip[method] = {
                        "error": f"draw {draw} took {res['seconds']:.0f} s > "
                        f"{args.heldout_max_seconds:.0f} s: remaining draws skipped"
                    }
            MD_PATH.write_text(render(meta))
    MD_PATH.write_text(render(meta))
    print(f"wrote {MD_PATH} and {CSV_PATH}")


if __name__ == "__main__":
    main()
