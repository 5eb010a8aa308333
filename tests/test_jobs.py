"""jobs/nightly.sh, the script cron or systemd runs: exit codes, reports and the log it leaves."""

from __future__ import annotations

import os
import re
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
    _create_database(env["ADSEG_DATABASE_URL"])  # by hand, once: the job never creates one
    return env, tmp_path / "home"


def _create_database(url: str) -> None:
    from adseg.store import migrate
    from adseg.store.engine import make_engine

    engine = make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()


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


def test_nightly_job_reports_are_of_its_own_run(job_env):
    import json

    env, home = job_env
    done = _run(env, "--fuser", "l2", "--supply", "actual")
    assert done.returncode == 0
    [log] = (home / "logs").glob("nightly-*.log")
    [report] = (home / "reports").glob("nightly-*.json")
    run_id = json.loads(report.read_text(encoding="utf-8"))["run_id"]
    assert f"run {run_id}: train" in log.read_text(encoding="utf-8")
    assert json.loads(report.read_text(encoding="utf-8"))["sources"]


def test_nightly_job_failed_ingest_still_logs_its_end(job_env, tmp_path):
    env, home = job_env
    bad = tmp_path / "bad_inbox"
    bad.mkdir()
    (bad / "advertisers.csv").write_text("advertiser_id,name\n", encoding="utf-8")
    env["ADSEG_INBOX"] = str(bad)
    done = _run(env)
    [log] = (home / "logs").glob("nightly-*.log")
    text = log.read_text(encoding="utf-8")
    assert done.returncode == 2, text
    assert "nightly end rc=2" in text


@pytest.mark.parametrize(
    ("signame", "code", "error"),
    [
        ("SIGTERM", 143, "terminated by SIGTERM"),
        ("SIGHUP", 129, "terminated by SIGHUP"),
        ("SIGINT", 130, "interrupted by SIGINT (Ctrl-C)"),
    ],
)
def test_nightly_job_stopped_by_sigterm_fails_its_run_and_frees_the_lock(
    job_env, signame, code, error
):
    """`systemctl stop` / `kill` sends SIGTERM to the script (a closed terminal SIGHUP, Ctrl-C
    SIGINT): it passes that same signal on to adseg, which marks the run failed and releases the
    lock; the script exits 128 + the signal number and the log gets its end line. SIGINT is the
    one a non-interactive bash ignores in background commands unless the script sees to it."""
    import signal
    import sqlite3
    import time

    env, home = job_env
    proc = subprocess.Popen(
        ["bash", str(SCRIPT)],
        env=env,
        stdout=subprocess.DEVNULL,
        preexec_fn=_default_stop_signals,  # noqa: PLW1509 - no threads start before exec
    )
    db = home / "adseg.db"
    deadline = time.monotonic() + 120
    running = False
    while time.monotonic() < deadline and proc.poll() is None and not running:
        time.sleep(0.1)
        if db.exists():
            try:
                with sqlite3.connect(db) as conn:
                    running = bool(
                        conn.execute("SELECT 1 FROM runs WHERE status = 'running'").fetchall()
                    )
            except sqlite3.OperationalError:  # schema not there yet, or locked
                pass
    assert running, "the nightly run never started"
    proc.send_signal(getattr(signal, signame))
    assert proc.wait(timeout=120) == code
    [log] = (home / "logs").glob("nightly-*.log")
    text = log.read_text(encoding="utf-8")
    assert text.rstrip().splitlines()[-1].endswith(f"nightly end rc={code}"), text
    with sqlite3.connect(db) as conn:
        [(status, message)] = conn.execute("SELECT status, error FROM runs").fetchall()
        # the stage the stop landed in depends on timing (none yet, pull or views)
        assert status == "failed" and re.fullmatch(
            rf"{re.escape(error)}( \(during stage (pull|views)\))?", message
        ), message
        assert conn.execute("SELECT count(*) FROM run_locks").fetchone() == (0,)


def _default_stop_signals() -> None:
    """In the script's process: SIGINT, SIGTERM and SIGHUP at their defaults, as a scheduler
    starts it. A shell started with a signal ignored cannot trap it (POSIX), and a test run
    under `nohup` or as a background job (`&`) would pass SIGHUP or SIGINT on ignored."""
    import signal

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def test_nightly_job_empty_inbox_runs_on_the_data_already_in_the_database(job_env, tmp_path):
    """A night without new files: the job says so and refreshes the segmentation anyway; a
    missing inbox folder is still a configuration error (exit 2, no run)."""
    import sqlite3

    env, home = job_env
    assert _run(env, "--fuser", "l2").returncode == 0  # loads the inbox: the data is there now
    empty = tmp_path / "empty_inbox"
    (empty / "done").mkdir(parents=True)  # subfolders and hidden files are not ingest files
    (empty / ".keep").write_text("", encoding="utf-8")
    env["ADSEG_INBOX"] = str(empty)
    done = _run(env, "--fuser", "l2")
    logs = sorted((home / "logs").glob("nightly-*.log"))
    text = logs[-1].read_text(encoding="utf-8")  # the second run's (or both, in one second)
    assert done.returncode == 0, text
    assert f"inbox {empty} is empty: nothing to ingest" in text
    assert "nightly end rc=0" in text and "MAPE by segmentation" in text
    with sqlite3.connect(home / "adseg.db") as conn:
        assert conn.execute("SELECT status FROM runs ORDER BY run_id").fetchall() == [
            ("completed",),
            ("completed",),
        ]

    env["ADSEG_INBOX"] = str(tmp_path / "no_such_inbox")
    for log in logs:
        log.unlink()
    done = _run(env, "--fuser", "l2")
    [log] = (home / "logs").glob("nightly-*.log")
    text = log.read_text(encoding="utf-8")
    assert done.returncode == 2, text
    assert "no such directory" in text and "nightly end rc=2" in text
    with sqlite3.connect(home / "adseg.db") as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (2,)


def test_log_lines_are_in_utc_whatever_the_local_time_zone(job_env):
    """The job log's own lines are UTC (…Z); adseg's log lines must be too, not local time."""
    import re

    env, home = job_env
    env["TZ"] = "America/New_York"
    done = _run(env, "--fuser", "l2", "--supply", "actual")
    [log] = (home / "logs").glob("nightly-*.log")
    text = log.read_text(encoding="utf-8")
    assert done.returncode == 0, text
    start = re.search(r"^(\d{4}-\d\d-\d\dT\d\d):\d\d:\d\dZ nightly start", text, re.M).group(1)
    stage = re.search(
        r"^(\d{4}-\d\d-\d\d) (\d\d):\d\d:\d\d,\d{3}Z INFO adseg\.pipeline", text, re.M
    )
    assert stage, text
    assert f"{stage.group(1)}T{stage.group(2)}" in (start, _next_hour(start))


def _next_hour(stamp: str) -> str:
    import datetime as dt

    moment = dt.datetime.strptime(stamp, "%Y-%m-%dT%H") + dt.timedelta(hours=1)
    return moment.strftime("%Y-%m-%dT%H")


def test_the_job_refuses_a_missing_sqlite_database_and_creates_none(job_env, tmp_path):
    """The job ran `db upgrade` first, which creates a missing SQLite file: a mistyped URL
    started a new database, loaded the inbox into it and ran the nightly there, exit 0, while the
    real database went without the night's data (QA). It now stops with exit 2 and a line
    naming the file, and creates nothing."""
    env, home = job_env
    typo = home / "adesg.db"
    env["ADSEG_DATABASE_URL"] = f"sqlite:///{typo}"
    done = _run(env, "--fuser", "l2")
    [log] = (home / "logs").glob("nightly-*.log")
    text = log.read_text(encoding="utf-8")
    assert done.returncode == 2, text
    assert f"no SQLite database at {typo} (--no-create)" in text and "nightly end rc=2" in text
    assert not typo.exists()
    assert not list((home / "reports").iterdir())


def test_a_home_that_cannot_hold_the_log_is_a_configuration_error(job_env):
    """A home where logs/ (or reports/) cannot be made exited 1, 'the run failed', with no run
    and no log: exit 2 (configuration), as for a home that does not exist (QA)."""
    env, home = job_env
    (home / "logs").write_text("a file where the folder should be")
    done = _run(env)
    assert done.returncode == 2, done.stderr
    assert "logs" in done.stderr


def test_the_job_prunes_old_runs_after_a_completed_run_when_asked(job_env):
    """ADSEG_KEEP_RUNS=N: after a completed run the job deletes the runs older than the N
    newest reportable ones (`adseg db prune`); a night whose run fails (its row written, exit
    1) deletes nothing. (The first version of this test made its 'failed' night fail before any
    run row, with one run to keep: it passed on a script that pruned unconditionally, review.)"""
    from adseg.store import results as store
    from adseg.store.engine import make_engine

    env, home = job_env
    engine = make_engine(env["ADSEG_DATABASE_URL"])
    for _ in range(2):  # two completed nights, nothing pruned
        assert _run(env, "--fuser", "l2", "--supply", "actual").returncode == 0
    first, second = sorted(store.list_runs(engine)["run_id"].tolist())
    env["ADSEG_KEEP_RUNS"] = "1"
    # 60 advertisers fall in fewer than 60 groups: the run fails after its row is written
    failed = _run(env, "--fuser", "l2", "--segments", "60")
    assert failed.returncode == 1
    runs = store.list_runs(engine)
    assert runs["status"].tolist() == ["failed", "completed", "completed"]
    assert _run(env, "--fuser", "l2", "--supply", "actual").returncode == 0
    latest = int(store.list_runs(engine)["run_id"].iloc[0])
    assert store.list_runs(engine)["run_id"].tolist() == [latest]
    logs = sorted((home / "logs").glob("nightly-*.log"))
    assert f"removed 3 runs (runs {first}–{latest - 1}: 2 completed, 1 failed)" in logs[
        -1
    ].read_text(encoding="utf-8")
    engine.dispose()


def test_a_prune_that_fails_after_a_completed_run_is_a_warning_not_a_retry(job_env, tmp_path):
    """The job exited 75 ('retry later') when the prune found the lock taken after the night's
    run had completed (an analyst's `forecast --run` in between): a retrying scheduler ran the
    night again (QA). Now a warning line, exit 0; the run stays completed."""
    from adseg.store import results as store
    from adseg.store.engine import make_engine

    env, home = job_env
    wrapper = tmp_path / "adseg-busy-prune"
    wrapper.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1 $2" = "db prune" ]; then echo "error: another nightly run is in progress"; '
        "exit 75; fi\n"
        f'exec "{ADSEG_BIN}" "$@"\n'
    )
    wrapper.chmod(0o755)
    env.update(ADSEG_KEEP_RUNS="01", ADSEG_BIN=str(wrapper))  # leading zeros: a whole number
    done = _run(env, "--fuser", "l2", "--supply", "actual")
    [log] = (home / "logs").glob("nightly-*.log")
    text = log.read_text(encoding="utf-8")
    assert done.returncode == 0, text
    assert "warning: db prune exited 75; the run completed and is kept" in text
    engine = make_engine(env["ADSEG_DATABASE_URL"])
    assert store.list_runs(engine)["status"].tolist() == ["completed"]
    engine.dispose()


@pytest.mark.parametrize("keep", ["0", "-1", "two", "1.5", " 3", "1" + "0" * 19])
def test_a_bad_keep_runs_value_stops_the_job_before_any_step(job_env, keep):
    env, home = job_env
    env["ADSEG_KEEP_RUNS"] = keep
    done = _run(env, "--fuser", "l2")
    [log] = (home / "logs").glob("nightly-*.log")
    text = log.read_text(encoding="utf-8")
    assert done.returncode == 2, text
    assert (
        f"ADSEG_KEEP_RUNS must be a whole number of runs to keep, at least 1, not '{keep}'" in text
    )
    assert "nightly end rc=2" in text and "ingest" not in text
    assert not list((home / "reports").iterdir())
