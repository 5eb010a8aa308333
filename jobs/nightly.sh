#!/usr/bin/env bash
# adseg's nightly job: for cron or a systemd timer (examples in jobs/README.md).
#
#   ADSEG_DATABASE_URL   the database (default: sqlite:///adseg.db in ADSEG_HOME)
#   ADSEG_HOME           working folder: reports/ and logs/ go here (default: this repo's root)
#   ADSEG_INBOX          optional folder of new ingest files, loaded before the run
#
# Exit codes a scheduler can act on: 0 done; 1 the run failed (its run row says why: `adseg runs`);
# 2 bad input or configuration (fix before retrying); 75 another nightly holds the lock (retry).
set -uo pipefail
HERE="$(cd "$(dirname "$0")/.." && pwd)"
ADSEG_HOME="${ADSEG_HOME:-$HERE}"
ADSEG="${ADSEG_BIN:-$HERE/.venv/bin/adseg}"
cd "$ADSEG_HOME" || exit 2
mkdir -p reports logs
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
log="logs/nightly-$stamp.log"
{
  echo "$(date -u +%FT%TZ) nightly start"
  "$ADSEG" db upgrade --quiet || exit $?
  if [ -n "${ADSEG_INBOX:-}" ]; then
    "$ADSEG" ingest "$ADSEG_INBOX" --quiet || exit $?
  fi
  # not --quiet: the stage timings and the MAPE table belong in the log (no progress bars: not a tty)
  "$ADSEG" nightly --report-html "reports/nightly-$stamp.html" "$@"
  rc=$?
  if [ $rc -eq 0 ]; then
    "$ADSEG" report --format json --output "reports/nightly-$stamp.json"
  fi
  echo "$(date -u +%FT%TZ) nightly end rc=$rc"
  exit $rc
} >>"$log" 2>&1
