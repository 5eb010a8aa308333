#!/usr/bin/env bash
# adseg's nightly job: for cron or a systemd timer (examples in jobs/README.md).
#
#   ADSEG_DATABASE_URL   the database (default: sqlite:///adseg.db in ADSEG_HOME); it must exist
#                        (`adseg db upgrade` creates it once); the job migrates it, and refuses
#                        a missing SQLite file with exit 2
#   ADSEG_HOME           working folder: reports/ and logs/ go here (default: this repo's root)
#   ADSEG_INBOX          optional folder of new ingest files, loaded before the run; a folder with
#                        no files in it (hidden files and subfolders aside) is logged and skipped,
#                        and the run uses the data already in the database
#   ADSEG_KEEP_RUNS      optional: after a completed run, delete the runs older than this many
#                        newest reportable ones, with their results (`adseg db prune --keep N`);
#                        unset: every run is kept. Not a whole number from 1: exit 2 before any
#                        step. A prune that fails after a completed run is a warning in the log
#                        (exit 0: the night's run is done; the next night prunes)
#
# Exit codes a scheduler can act on (adseg's own, passed through, and this script's: a missing
# $ADSEG_INBOX folder or SQLite database, a bad ADSEG_KEEP_RUNS, an ADSEG_HOME that cannot hold
# reports/ and logs/): the one table in docs/cli.md ("Exit codes").
set -uo pipefail
# Each step runs in the background so that a SIGINT / SIGTERM / SIGHUP to this script (a
# scheduler stopping it, Ctrl-C) is passed on to adseg, as the same signal, which then marks its
# run failed and releases the lock, and the log still gets its end line. A signal that arrives
# between steps (or before a step's pid is known) is not lost: no further step starts.
child=""     # pid of the running step
stop=""      # the first stop signal received: INT, TERM or HUP
forwarded="" # whether $stop has been passed on to $child
forward() {
  if [ -n "$child" ] && [ -z "$forwarded" ]; then
    forwarded=1
    kill -s "$stop" "$child" 2>/dev/null
  fi
}
on_signal() {
  [ -n "$stop" ] || stop=$1
  forward
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
trap 'on_signal HUP' HUP
# Job control: each step gets its own process group. A non-interactive bash starts background
# commands with SIGINT ignored, so a forwarded SIGINT would be lost while adseg starts up; and
# a Ctrl-C on a terminal (sent to the foreground process group) reaches adseg once, through the
# trap, not twice.
set -m
signal_rc() {
  case $stop in
    INT) echo 130 ;;
    TERM) echo 143 ;;
    HUP) echo 129 ;;
  esac
}
HERE="$(cd "$(dirname "$0")/.." && pwd)"
ADSEG_HOME="${ADSEG_HOME:-$HERE}"
ADSEG="${ADSEG_BIN:-$HERE/.venv/bin/adseg}"
cd "$ADSEG_HOME" || exit 2
# a folder that cannot hold the reports or the log is configuration (2), not a failed run (1)
mkdir -p reports logs || exit 2
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
log="logs/nightly-$stamp.log"
: >>"$log" || exit 2
step() {
  if [ -n "$stop" ]; then
    echo "$(date -u +%FT%TZ) stopped by SIG$stop before: ${1##*/} ${2:-}"
    return "$(signal_rc)"
  fi
  forwarded=""
  "$@" &
  child=$!
  [ -n "$stop" ] && forward # the signal came before $child was set
  local rc
  while :; do
    wait "$child"
    rc=$?
    # a trap interrupts the wait (rc > 128) while the step still runs: wait for its own exit
    [ $rc -gt 128 ] && kill -0 "$child" 2>/dev/null || break
  done
  child=""
  return $rc
}
inbox_has_files() { # any entry but hidden files and subfolders (`adseg ingest` reads neither)
  local entry
  for entry in "$1"/*; do
    [ -e "$entry" ] || [ -L "$entry" ] || continue # the unmatched pattern of an empty folder
    [ -d "$entry" ] || return 0
  done
  return 1
}
finish() {
  echo "$(date -u +%FT%TZ) nightly end rc=$1"
  exit "$1"
}
{
  echo "$(date -u +%FT%TZ) nightly start"
  keep="${ADSEG_KEEP_RUNS:-}"
  # at most 18 digits after leading zeros: below 2^63, the largest --keep
  if [ -n "$keep" ] && ! [[ $keep =~ ^0*[1-9][0-9]{0,17}$ ]]; then
    echo "error: ADSEG_KEEP_RUNS must be a whole number of runs to keep, at least 1, not '$keep'"
    finish 2
  fi
  # --no-create: a mistyped SQLite URL is an error (2), not a new empty database that the
  # inbox would then be loaded into; the database is created once, by hand (jobs/README.md)
  step "$ADSEG" db upgrade --no-create --quiet || finish $?
  if [ -n "${ADSEG_INBOX:-}" ]; then
    if [ -d "$ADSEG_INBOX" ] && ! inbox_has_files "$ADSEG_INBOX"; then
      echo "$(date -u +%FT%TZ) inbox $ADSEG_INBOX is empty: nothing to ingest"
    else # a missing folder or bad files: ingest says why and exits 2
      step "$ADSEG" ingest "$ADSEG_INBOX" --quiet || finish $?
    fi
  fi
  # not --quiet: the stage timings and the MAPE table belong in the log (no progress bars: not a
  # tty); both reports are of this run (not merely the latest completed one)
  step "$ADSEG" nightly --report-html "reports/nightly-$stamp.html" \
    --report-json "reports/nightly-$stamp.json" "$@" || finish $?
  # only after a completed run: a failing night never deletes the runs an analyst falls back on
  if [ -n "$keep" ]; then
    step "$ADSEG" db prune --keep "$keep"
    rc=$?
    # the run is complete: a prune that fails (a lock taken meanwhile, 75) must not make a
    # scheduler retry the night (QA); a stop asked for is still reported as one
    case $rc in
      0) ;;
      129 | 130 | 143) finish $rc ;;
      *) echo "$(date -u +%FT%TZ) warning: db prune exited $rc; the run completed and is kept; the next completed run prunes again" ;;
    esac
  fi
  finish 0
} >>"$log" 2>&1
