#!/usr/bin/env bash
# Install (Debian) and start a local PostgreSQL server on 127.0.0.1, create the adseg test user
# and database, and print the test URL. For CI and developers' machines (needs root).
set -euo pipefail
PORT="${ADSEG_PG_PORT:-5432}"
if ! command -v pg_ctlcluster >/dev/null 2>&1 || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
fi
VERSION=$(ls /usr/lib/postgresql | sort -n | tail -1)
if ! pg_lsclusters -h | awk '{print $1" "$2}' | grep -q "^$VERSION main$"; then
  pg_createcluster "$VERSION" main --port "$PORT" >&2
fi
if ! pg_lsclusters -h | grep -q "^$VERSION *main .*online"; then
  pg_ctlcluster "$VERSION" main start >&2
fi
PORT=$(pg_lsclusters -h | awk -v v="$VERSION" '$1==v && $2=="main" {print $3}')
psql_admin() { su postgres -c "psql -p $PORT -v ON_ERROR_STOP=1 -qtAc \"$1\""; }
if [ "$(psql_admin "SELECT 1 FROM pg_roles WHERE rolname='adseg'")" != "1" ]; then
  psql_admin "CREATE ROLE adseg LOGIN PASSWORD 'adseg-test' CREATEDB" >&2
fi
if [ "$(psql_admin "SELECT 1 FROM pg_database WHERE datname='adseg_test'")" != "1" ]; then
  psql_admin "CREATE DATABASE adseg_test OWNER adseg" >&2
fi
echo "postgresql+psycopg://adseg:adseg-test@127.0.0.1:$PORT/adseg_test"
