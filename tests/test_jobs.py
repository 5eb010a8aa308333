"""jobs/nightly.sh, the script cron or systemd runs: exit codes, reports and the log it leaves."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from adseg.simulate import MarketplaceConfig, simulate_marketplace, write_marketplace

SCRIPT = Path(__file__).resolve().parents[1] / "jobs" / "nightly.sh"
ADSEG_BIN = Path(sys.executable).parent / "adseg"


@pytest.fixture
def job_env(tmp_path):
    """ADSEG_HOME, an inbox with a small marketplace and a fresh SQLite database."""
    if not ADSEG_BIN.exists():
        pytest.skip(f"the adseg entry point is not installed beside {sys.executable}")
    inbox = tmp_path / "inbox"
    write_marketplace(
        simulate_marketplace(MarketplaceConfig(n_advertisers=60, n_segments=4, seed=5)), inbox
    )
    env = dict(os.environ)
    env.update(
        ADSEG_HOME=str(tmp_path / "home"),
        ADSEG_INBOX=str(inbox),
        ADSEG_BIN=str(ADSEG_BIN),
        ADSEG_DATABASE_URL=f"sqlite:///{tmp_path / 'home' / 'adseg.db'}",
    )
    (tmp_path / "home").mkdir()
    return env, tmp_path / "home"


def _run(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=600
    )


def test_nightly_job_migrates_ingests_runs_and_reports(job_env):
    env, home = job_env
    done = _run(env, "--fuser", "rcc", "--fuser", "l2", "--supply", "actual")
    [log] = (home / "logs").glob("nightly-*.log")
    text = log.read_text(encoding="utf-8")
    assert done.returncode == 0, text
    assert "nightly end rc=0" in text and "stage fuse" in text and "MAPE by segmentation" in text
    [html] = (home / "reports").glob("nightly-*.html")
    [report] = (home / "reports").glob("nightly-*.json")
    assert html.stem == report.stem and html.stat().st_size > 0 and report.stat().st_size > 0


def test_nightly_job_bad_arguments_exit_2_without_reports(job_env):
    env, home = job_env
    done = _run(env, "--fuser", "nope")
    [log] = (home / "logs").glob("nightly-*.log")
    text = log.read_text(encoding="utf-8")
    assert done.returncode == 2, text
    assert "unknown fuser" in text and "nightly end rc=2" in text
    assert not list((home / "reports").iterdir())
