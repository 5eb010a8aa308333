#!/usr/bin/env bash
# Build adseg's wheel, install it (with its dependencies) into a fresh virtual environment
# outside the checkout, and run the README's job from a folder outside the checkout against a
# new SQLite database: db upgrade, sample generate, ingest, nightly. Fails on the first error.
# Proves that an installed (non-editable) adseg carries everything it needs at run time, its
# Alembic migrations included. CI runs it (.ci/run); KEEP_WHEEL_CHECK=1 keeps the temp folder.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/adseg-wheel-check.XXXXXX")"
case "$TMP/" in "$ROOT"/*) echo "check_wheel: temp folder $TMP is inside the checkout" >&2; exit 1;; esac
if [ "${KEEP_WHEEL_CHECK:-0}" = 1 ]; then
  echo "check_wheel: keeping $TMP"
else
  trap 'rm -rf "$TMP"' EXIT
fi
step() { echo "check_wheel: $*"; }

# Build from a copy of the files git knows (tracked, and untracked but not ignored), so stale
# build/ or *.egg-info folders in the checkout cannot leak into the wheel.
step "copying the source tree"
mkdir "$TMP/src" "$TMP/wheels" "$TMP/run"
git -C "$ROOT" ls-files -z --cached --others --exclude-standard \
  | (cd "$ROOT" && tar --null --ignore-failed-read -cf - -T - 2>/dev/null) \
  | tar -xf - -C "$TMP/src"
step "building the wheel"
"$PYTHON" -m pip wheel --quiet --no-deps -w "$TMP/wheels" "$TMP/src"
WHEEL="$(ls "$TMP"/wheels/adseg-*.whl)"
step "wheel $(basename "$WHEEL"): $(unzip -Z1 "$WHEEL" | grep -c '^adseg/store/migrations/') migration files"

step "installing it into a fresh virtual environment"
"$PYTHON" -m venv "$TMP/venv"
"$TMP/venv/bin/python" -m pip install --quiet "$WHEEL"

# Everything below runs outside the checkout, with nothing pointing back into it.
cd "$TMP/run"
unset PYTHONPATH PYTHONHOME
export ADSEG_DATABASE_URL="sqlite:///$TMP/run/adseg.db"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
ADSEG="$TMP/venv/bin/adseg"
SITE="$("$TMP/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
FOUND="$("$TMP/venv/bin/python" -c 'import adseg; print(adseg.__file__)')"
MIGRATIONS="$("$TMP/venv/bin/python" -c 'from adseg.store.migrate import MIGRATIONS_DIR as d; print(d)')"
step "adseg imported from $FOUND"
case "$FOUND" in "$SITE"/adseg/*) ;; *) echo "check_wheel: adseg is not imported from $SITE" >&2; exit 1;; esac
case "$MIGRATIONS" in "$SITE"/adseg/*) ;; *) echo "check_wheel: migrations at $MIGRATIONS" >&2; exit 1;; esac

step "adseg db upgrade"
"$ADSEG" db upgrade
step "adseg sample generate"
"$ADSEG" sample generate --advertisers 200 --segments 8 --out "$TMP/run/market" --quiet
step "adseg ingest"
"$ADSEG" ingest "$TMP/run/market"
step "adseg nightly"
"$ADSEG" nightly --fuser rcc --fuser l2 --truth "$TMP/run/market/truth.csv" \
  --report-json "$TMP/run/report.json" --report-html "$TMP/run/report.html"
test -s "$TMP/run/report.json" && test -s "$TMP/run/report.html"
"$TMP/venv/bin/python" - "$TMP/run/report.json" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
assert report, "empty JSON report"
EOF
step "OK: the installed wheel migrates, ingests and runs the nightly"
