"""PCE's peers beside adseg's fusers (issue 39): the loader (adseg_research.peers), the forked
fit (adseg_research.isolated), failures as rows, and `adseg bench consensus --peers-src`.

A fake PCE source tree with stub ``*_core`` functions is written in tmp_path, so nothing here
needs PCE itself, and a tiny data set, so nothing needs ../shared."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from adseg.cli import app
from adseg_research.bench import Ensemble, evaluate
from adseg_research.bench_table2 import format_table2, format_table2_report
from adseg_research.isolated import run_isolated
from adseg_research.peers import PCE_COLUMNS, PCEFuser, load_pce, pce_factories

CORES = {
    # the arguments are those of PCE's wrappers at their defaults; the stubs check them
    "trce": """
        def trce_core(BPi, n_clusters, gamma):
            assert gamma == 0.01
            return (BPi[:, 0] + 1).reshape(-1, 1)     # MATLAB-like: 1-based, a column
    """,
    "ecpcs_mc": """
        import numpy as np
        def ecpcs_mc_core(baseCls, t, K):
            assert t == 20
            return np.random.randint(0, K, baseCls.shape[0])   # the global, seeded generator
    """,
    "lwea": """
        def lwea_core(baseCls, nCluster, para_theta=0.4):
            assert para_theta == 10
            return baseCls[:, -1]
    """,
    "usenc": """
        def usenc_core(baseCls, k):
            raise RuntimeError("boom")
    """,
}


@pytest.fixture
def pce_src(tmp_path) -> Path:
    """A fake PCE ``src``: the four cores, and package __init__s that fail if they ever run."""
    src = tmp_path / "pce_src"
    methods = src / "pce" / "consensus" / "methods"
    methods.mkdir(parents=True)
    for init in (src / "pce", src / "pce" / "consensus", methods):
        (init / "__init__.py").write_text("raise ImportError('no torch here')\n")
    for core, body in CORES.items():
        (methods / f"{core}_core.py").write_text(textwrap.dedent(body))
    return src


@pytest.fixture
def data_dir(tmp_path) -> Path:
    """One small feature set, ``blobs`` (three separated groups of 20 in 2-D)."""
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 20)
    X = rng.normal(size=(60, 2)) * 0.3 + np.array([[0, 0], [5, 0], [0, 5]])[y]
    folder = tmp_path / "data"
    folder.mkdir()
    np.savez(folder / "blobs.npz", X=X, y=y)
    return folder


def test_the_loader_imports_the_cores_without_running_pce_init(pce_src):
    cores = load_pce(pce_src)
    assert set(cores) == set(PCE_COLUMNS.values())
    labels = np.array([[0, 1], [0, 1], [1, 0], [2, 2]])
    assert PCEFuser("trce", 3, 0, src=pce_src).fit_predict(labels).tolist() == [1, 1, 2, 3]
    assert PCEFuser("lwea", 3, 0, src=pce_src).fit(labels).labels_.tolist() == [1, 1, 0, 2]


def test_a_peer_is_seeded_through_the_global_generator(pce_src):
    labels = np.zeros((50, 3), dtype=int)
    a = PCEFuser("ecpcs_mc", 4, 7, src=pce_src).fit_predict(labels)
    b = PCEFuser("ecpcs_mc", 4, 7, src=pce_src).fit_predict(labels)
    c = PCEFuser("ecpcs_mc", 4, 8, src=pce_src).fit_predict(labels)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_a_folder_that_is_not_pce_is_named(tmp_path, pce_src):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nowhere")):
        load_pce(tmp_path / "nowhere")
    (pce_src / "pce" / "consensus" / "methods" / "lwea_core.py").unlink()
    with pytest.raises(ValueError, match=r"pce_src is not PCE's source folder: no .*lwea_core"):
        pce_factories(pce_src)
    with pytest.raises(ValueError, match="unknown PCE method"):
        PCEFuser("cspa", 3, src=pce_src)


def test_an_isolated_call_reports_its_memory_its_failure_and_its_timeout():
    ok = run_isolated(lambda: np.ones(2**24).sum())  # 128 MiB
    assert ok["status"] == "ok" and ok["result"] == 2**24 and ok["error"] == ""
    assert ok["peak_mib"] > 100 and ok["seconds"] >= 0

    def fail():
        raise ZeroDivisionError("nope")

    bad = run_isolated(fail)
    assert bad["status"] == "error" and bad["result"] is None
    assert bad["error"].startswith("ZeroDivisionError: nope [at test_peers.py:")
    slow = run_isolated(lambda: time.sleep(30), timeout=1)
    assert slow["status"] == "error" and slow["error"] == "timeout after 1 s"
    assert 1 <= slow["seconds"] < 10


class _Sleeper:
    def __init__(self, k, s):
        pass

    def fit_predict(self, labels):
        time.sleep(30)


def test_a_timeout_is_a_failure_row_and_the_later_repetitions_are_skipped():
    y = np.repeat([0, 1], 5)
    ens = [Ensemble(r, np.column_stack([y, y]), y, r) for r in range(3)]
    frame = evaluate(ens, {"slow": _Sleeper}, 2, isolate=True, timeout=1)
    rows = frame[frame["method"] == "slow"]
    assert rows["error"].tolist() == [
        "timeout after 1 s",
        "skipped after a timeout (repetition 0: timeout after 1 s)",
        "skipped after a timeout (repetition 0: timeout after 1 s)",
    ]
    capped = evaluate(ens, {"fast": _Fixed}, 2, isolate=True, max_repetitions={"fast": 2})
    assert capped.loc[capped["method"] == "fast", "repetition"].tolist() == [0, 1]
    assert capped["peak_mib"].notna().any()
    assert capped.reindex(columns=["error"])["error"].isna().all()
    rest = evaluate(ens, {"fast": _Fixed}, 2, skip={(1, "fast")})  # a stored row is not re-run
    assert rest.loc[rest["method"] == "fast", "repetition"].tolist() == [0, 2]


class _Fixed:
    def __init__(self, k, s):
        pass

    def fit_predict(self, labels):
        return labels[:, 0]


def test_a_failed_cell_shows_in_the_table_and_the_failures():
    rows = [
        {
            "dataset": "d",
            "preprocessing": "raw",
            "n_items": 4,
            "repetition": r,
            "method": m,
            "acc": a,
            "nmi": a,
            "seconds": 0.5,
            "peak_mib": 12.0,
            "error": e,
        }  # fmt: skip
        for r in range(2)
        for m, a, e in [("ok", 0.9, None), ("bad", np.nan, "RuntimeError: boom")]
    ]
    rows[3] |= {"acc": 0.5, "nmi": 0.4, "error": None}  # "bad" ran on repetition 1 only
    rows.append(rows[0] | {"method": "capped", "acc": 0.7})  # asked on repetition 0 only
    frame = pd.DataFrame(rows)
    acc = format_table2(frame, paper=False)
    assert "| d | raw | 4 | 0.900 ± 0.000 | 0.500 ± 0.000 (1/2) | 0.700 ± 0.000 (1/2) |" in acc
    frame = frame[frame["method"] != "capped"].copy()
    frame.loc[3, ["acc", "error"]] = [np.nan, "RuntimeError: boom"]
    report = format_table2_report(frame, paper=False)
    assert "| d | raw | 4 | 0.900 ± 0.000 | failed (0/2) |" in report
    assert "* d (raw), bad, repetition(s) 0, 1: RuntimeError: boom" in report
    assert "peak MiB:" in report and "| d | raw | 4 | 12 | failed (0/2) |" in report


def test_bench_consensus_puts_the_peers_beside_adseg(pce_src, data_dir, tmp_path):
    out, rows = tmp_path / "t.md", tmp_path / "t.csv"
    args = ["bench", "consensus", "-q", "--datasets", str(data_dir), "--dataset", "blobs"]
    args += ["--repetitions", "2", "--clusterings", "3", "--peers-src", str(pce_src)]
    args += ["--method", "l2", "--method", "sccbg", *(f"--method={m}" for m in PCE_COLUMNS)]
    res = CliRunner().invoke(app, [*args, "-o", str(out), "--csv", str(rows)])
    assert res.exit_code == 0, res.output
    text = out.read_text()
    head = "| dataset | prep | n | k-means | l2 | sccbg | PCE TRCE | ECPCS-MC | LWEA | U-SENC |"
    assert text.startswith(head)
    assert "failed (0/2)" in text and "NMI:" in text and "seconds per fit:" in text
    assert (
        "* blobs (raw), U-SENC, repetition(s) 0, 1: RuntimeError: boom [at usenc_core.py:" in text
    )
    frame = pd.read_csv(rows)
    per_fit = frame[frame["method"] != "k-means"]
    assert len(per_fit) == 2 * 6 and set(per_fit["repetition"]) == {0, 1}
    failed = per_fit[per_fit["error"].notna()]
    assert set(failed["method"]) == {"U-SENC"}
    assert (
        per_fit.loc[per_fit["error"].isna(), ["acc", "nmi", "seconds", "peak_mib"]]
        .notna()
        .all(axis=None)
    )


def test_the_peers_come_from_the_environment_by_default(pce_src, data_dir, monkeypatch):
    monkeypatch.setenv("ADSEG_PCE_SRC", str(pce_src))
    args = ["bench", "consensus", "--datasets", str(data_dir), "--dataset", "blobs"]
    res = CliRunner().invoke(app, [*args, "--repetitions", "1", "--clusterings", "2"])
    assert res.exit_code == 0, res.output
    assert "| rcc (l1) | PCE TRCE | ECPCS-MC | LWEA | U-SENC |" in res.output


@pytest.mark.parametrize(
    "args, env, message",
    [
        (["--peers-src", "{tmp}/nowhere"], {}, "--peers-src: PCE source folder {tmp}/nowhere"),
        ([], {"ADSEG_PCE_SRC": "{tmp}/nowhere"}, "PCE source folder {tmp}/nowhere not found"),
        (["--peers-src", "{tmp}"], {}, "--peers-src: {tmp} is not PCE's source folder"),
        (["--method", "LWEA"], {}, "--method 'LWEA' is PCE's: give --peers-src DIR"),
        (["--method", "lta", "--method", "PCE"], {}, "--method 'PCE' is not a Table 2 column"),
        (["--timeout", "0"], {}, "--timeout"),
    ],
)
def test_bench_consensus_refuses_a_bad_peer_option_before_any_fit(
    args, env, message, data_dir, tmp_path, monkeypatch
):
    monkeypatch.delenv("ADSEG_PCE_SRC", raising=False)
    args = [a.format(tmp=tmp_path) for a in args]
    env = {k: v.format(tmp=tmp_path) for k, v in env.items()}
    with mock.patch("adseg_research.bench_table2.run_table2") as run:
        res = CliRunner().invoke(
            app, ["bench", "consensus", "-q", "--datasets", str(data_dir), *args], env=env
        )
    assert res.exit_code == 2 and message.format(tmp=tmp_path) in res.output, res.output
    if "--peers-src" in message or "PCE source" in message:
        assert len(res.output.strip().splitlines()) == 1, res.output
    run.assert_not_called()
