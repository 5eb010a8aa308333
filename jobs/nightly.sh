#!/usr/bin/env bash
# adseg's nightly job: for cron or a systemd timer (examples in jobs/README.md).
#
#   ADSEG_DATABASE_URL   the database (default: sqlite:///adseg.db in ADSEG_HOME)
#   ADSEG_HOME           working folder: reports/ and logs/ go here (default: this repo's root)
#   ADSEG_INBOX          optional folder of new ingest files, loaded before the run
#
# Exit codes a scheduler can act on: 0 done; 1 the run failed (its run row says why: `adseg runs`);
# 2 bad input or configuration (fix before retrying); 75 another nightly holds the lock (retry);
# 130 / 143 / 129 stopped by SIGINT / SIGTERM / SIGHUP (the run is marked failed, lock released).
set -uo pipefail
HERE="$(cd "$(dirname "$0")/.." && pwd)"
ADSEG_HOME="${ADSEG_HOME:-$HERE}"
ADSEG="${ADSEG_BIN:-$HERE/.venv/bin/adseg}"
cd "$ADSEG_HOME" || exit 2
mkdir -p reports logs
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
log="logs/nightly-$stamp.log"
# Each step runs in the background so that a SIGTERM / SIGINT / SIGHUP to this script (a
# scheduler stopping it) is passed on to adseg, which then marks its run failed and releases the
# lock, and the log still gets its end line.
child=""
trap '[ -n "$child" ] && kill -TERM "$child" 2>/dev/null' TERM INT HUP
step() {
  "$@" &
  child=$!
  wait "$child"
  local rc=$?
  if [ $rc -gt 128 ] && kill -0 "$child" 2>/dev/null; then  # the trap interrupted the wait
    wait "$child"
    rc=$?
  fi
  child=""
  return $rc
}
finish() {
  echo "$(date -u +%FT%TZ) nightly end rc=$1"
  exit "$1"
}
{
  echo "$(date -u +%FT%TZ) nightly start"
  step "$ADSEG" db upgrade --quiet || finish $?
  if [ -n "${ADSEG_INBOX:-}" ]; then
    step "$ADSEG" ingest "$ADSEG_INBOX" --quiet || finish $?
  fi
  # not --quiet: the stage timings and the MAPE table belong in the log (no progress bars: not a
  # tty); both reports are of this run (not merely the latest completed one)
  step "$ADSEG" nightly --report-html "reports/nightly-$stamp.html" \
    --report-json "reports/nightly-$stamp.json" "$@"
  finish $?
} >>"$log" 2>&1
