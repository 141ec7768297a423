#!/usr/bin/env bash
# Runs a command against a throwaway PostgreSQL server.
#
#   scripts/pg-test.sh go test -race ./...
#
# It starts PostgreSQL 15 (Debian's binaries; installed with apt-get when
# absent) on a free loopback port with its data folder under /tmp, sets
# STET_TEST_DATABASE_URL, runs the command, and stops and removes the server
# on exit. (The chaos drill starts a server of its own, which it may restart;
# never restart this one: with synchronous_commit=off a restart loses
# acknowledged commits.) The server refuses to run as root, so as root it runs as
# the postgres user.
#
# Settings: fsync=off, synchronous_commit=off, full_page_writes=off — for
# tests only. With PG_DURABLE=1 the server keeps PostgreSQL's durable
# defaults (fsync=on, synchronous_commit=on): the figures that count.
set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
if [ ! -x "$PGBIN/initdb" ]; then
  echo "pg-test: installing postgresql" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi

as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

dir=$(mktemp -d /tmp/stet-pg.XXXXXX)
chmod 755 "$dir"
[ "$(id -u)" = 0 ] && chown postgres:postgres "$dir"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

stop() {
  as_pg "$PGBIN/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap stop EXIT

as_pg "$PGBIN/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-sync >/dev/null
cat >> "$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 400
CONF
if [ "${PG_DURABLE:-}" != 1 ]; then
  # Tests only. PG_DURABLE=1 keeps PostgreSQL's durable defaults (benchmarks).
  cat >> "$dir/data/postgresql.conf" <<CONF
fsync = off
synchronous_commit = off
full_page_writes = off
CONF
fi
as_pg "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start >/dev/null

export STET_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
if [ "${PG_DURABLE:-}" = 1 ]; then durability="durable defaults"; else durability="fsync=off"; fi
echo "pg-test: PostgreSQL on 127.0.0.1:$port ($durability)" >&2
"$@"
