#!/usr/bin/env bash
# The team's MLflow server without containers: Debian's PostgreSQL (apt-get install
# postgresql) as the backend store and `mlflow server --serve-artifacts`, which keeps
# the artifacts on this machine and hands them to clients over HTTP (runners need no
# storage credentials). docs/ci.md says when to use this and when compose.yml.
#
#   serve.sh start         initialise (first time), start PostgreSQL, then the server
#   serve.sh stop-server   stop the MLflow server only (an upgrade, a restart)
#   serve.sh stop          stop the server, then PostgreSQL
#
# Settings (environment): MLFLOW_SERVER_DIR (state: postgres/, artifacts/, logs;
# default ./mlflow-server), MLFLOW_HOST (default 127.0.0.1; 0.0.0.0 to serve runners),
# MLFLOW_PORT (5000), MLFLOW_WORKERS (4), PG_PORT (5433), PG_BIN (Debian's newest
# /usr/lib/postgresql/*/bin), MLFLOW (the mlflow executable; default the one on PATH,
# from `pip install 'kvbench[server]'`, which brings the PostgreSQL driver).
# PostgreSQL listens on 127.0.0.1 only and trusts local connections: the server is its
# only client. As root, PostgreSQL runs as the postgres user (initdb refuses root).
set -euo pipefail

dir=$(mkdir -p "${MLFLOW_SERVER_DIR:-mlflow-server}" && cd "${MLFLOW_SERVER_DIR:-mlflow-server}" && pwd)
host=${MLFLOW_HOST:-127.0.0.1}
port=${MLFLOW_PORT:-5000}
workers=${MLFLOW_WORKERS:-4}
pg_port=${PG_PORT:-5433}
pg_bin=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
mlflow=${MLFLOW:-mlflow}
data="$dir/postgres"
db_uri="postgresql://mlflow@127.0.0.1:$pg_port/mlflow"

die() { echo "serve.sh: $*" >&2; exit 2; }

as_db_user() {  # PostgreSQL's tools, as the postgres user when this runs as root
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start_db() {
    [ -x "$pg_bin/pg_ctl" ] || die "no PostgreSQL in ${pg_bin:-/usr/lib/postgresql/*/bin}: apt-get install postgresql, or set PG_BIN"
    if [ ! -f "$data/PG_VERSION" ]; then
        mkdir -p "$data"
        if [ "$(id -u)" = 0 ]; then chown postgres "$data"; chmod o+x "$dir"; fi
        as_db_user "$pg_bin/initdb" -D "$data" -U mlflow -A trust >"$dir/initdb.log"
    fi
    if ! as_db_user "$pg_bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
        as_db_user "$pg_bin/pg_ctl" -D "$data" -l "$data/postgres.log" -w \
            -o "-c listen_addresses=127.0.0.1 -p $pg_port -k $data" start >/dev/null
    fi
    if ! as_db_user "$pg_bin/psql" -h 127.0.0.1 -p "$pg_port" -U mlflow -d postgres -tAc \
            "select 1 from pg_database where datname = 'mlflow'" | grep -q 1; then
        as_db_user "$pg_bin/createdb" -h 127.0.0.1 -p "$pg_port" -U mlflow mlflow
    fi
}

server_pid() { [ -f "$dir/server.pid" ] && kill -0 "$(cat "$dir/server.pid")" 2>/dev/null && cat "$dir/server.pid"; }

start_server() {
    server_pid >/dev/null && return 0
    command -v "$mlflow" >/dev/null || die "no $mlflow executable: pip install 'kvbench[server]', or set MLFLOW"
    # Its own session, so stop-server ends the server and its workers together.
    setsid "$mlflow" server --host "$host" --port "$port" --workers "$workers" \
        --backend-store-uri "$db_uri" --serve-artifacts --artifacts-destination "$dir/artifacts" \
        >>"$dir/server.log" 2>&1 </dev/null &
    echo $! >"$dir/server.pid"
    # The first start creates the schema (about a minute on two cores).
    for _ in $(seq 600); do
        server_pid >/dev/null || die "the MLflow server exited; its log: $dir/server.log"
        if python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" \
                "http://127.0.0.1:$port/health" 2>/dev/null; then
            echo "MLflow server at http://$host:$port (backend $db_uri, artifacts $dir/artifacts)"
            return 0
        fi
        sleep 0.5
    done
    die "the MLflow server did not answer in 300 s; its log: $dir/server.log"
}

stop_server() {
    local pid
    pid=$(server_pid) || return 0
    kill -TERM -- "-$pid" 2>/dev/null || true
    # Ten seconds to finish requests in flight; clients that keep idle connections
    # open would otherwise hold a graceful stop (the runners retry or sync what it cut).
    for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    rm -f "$dir/server.pid"
}

stop_db() {
    [ -f "$data/PG_VERSION" ] || return 0
    as_db_user "$pg_bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1 || true
}

case "${1:-}" in
    start) start_db; start_server ;;
    stop-server) stop_server ;;
    stop) stop_server; stop_db ;;
    *) die "usage: serve.sh start|stop-server|stop (got '${1:-}')" ;;
esac
