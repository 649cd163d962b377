#!/usr/bin/env bash
# PostgreSQL for the tests (CI and developers): installs Debian's `postgresql` package
# if absent, and starts a throwaway server on loopback owned by an unprivileged user, in
# a directory of its own (default /tmp/evo-pg), listening on 127.0.0.1:${EVO_PG_PORT:-54329}.
# Idempotent: a server already answering there is reused. Prints the URL to export as
# EVO_TEST_PG_URL on its last line (scripts/test.sh does that).
set -euo pipefail
PORT="${EVO_PG_PORT:-54329}"
DIR="${EVO_PG_DIR:-/tmp/evo-pg}"
DB=evo_test
URL="postgres://evo:evo@127.0.0.1:${PORT}/${DB}"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

bin_dir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1; }

if [ -z "$(bin_dir)" ]; then
  echo "install-postgres: installing Debian's postgresql" >&2
  as_root apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends \
    postgresql postgresql-client >&2
fi
BIN="$(bin_dir)"
[ -n "$BIN" ] || { echo "install-postgres: no /usr/lib/postgresql/*/bin after installing" >&2; exit 1; }

# The server runs as an unprivileged user (initdb refuses root).
if [ "$(id -u)" = 0 ]; then
  RUNAS=(runuser -u postgres --)
  id postgres >/dev/null 2>&1 || useradd --system --home-dir "$DIR" postgres
else
  RUNAS=()
fi

if "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT"; then
  echo "install-postgres: a server already answers on 127.0.0.1:$PORT" >&2
else
  if [ ! -f "$DIR/data/PG_VERSION" ]; then
    rm -rf "$DIR"
    mkdir -p "$DIR"
    [ "$(id -u)" = 0 ] && chown postgres "$DIR"
    "${RUNAS[@]}" "$BIN/initdb" -D "$DIR/data" -U postgres --auth=trust -E UTF8 >"$DIR/initdb.log" 2>&1 \
      || { cat "$DIR/initdb.log" >&2; exit 1; }
  fi
  # Throwaway test server: no fsync, loopback only, room for many test connections.
  "${RUNAS[@]}" "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 start \
    -o "-h 127.0.0.1 -p $PORT -k $DIR -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" >&2 \
    || { cat "$DIR/server.log" >&2; exit 1; }
fi

PSQL=("$BIN/psql" -q -h 127.0.0.1 -p "$PORT" -U postgres -v ON_ERROR_STOP=1 -d postgres)
if [ "$("${PSQL[@]}" -tAc "SELECT 1 FROM pg_roles WHERE rolname = 'evo'")" != 1 ]; then
  "${PSQL[@]}" -c "CREATE ROLE evo LOGIN PASSWORD 'evo' CREATEDB" >&2
fi
if [ "$("${PSQL[@]}" -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB'")" != 1 ]; then
  "${PSQL[@]}" -c "CREATE DATABASE $DB OWNER evo" >&2
fi
echo "$URL"
