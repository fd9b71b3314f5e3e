#!/usr/bin/env bash
# Run a command with the local servers the tests need, then stop them by PID, always.
#
#   scripts/with-servers.sh .venv/bin/pytest -n 2 --dist loadfile
#
# The Prefect server gets a fresh FLYWHEEL_HOME (a temporary folder, removed at the end) and
# port FLYWHEEL_TEST_PREFECT_PORT (default 4250, or a free port when 4250 is taken and the
# variable is unset). The command sees PREFECT_API_URL; its exit code is this script's.
set -euo pipefail

if [[ $# -eq 0 ]]; then
    echo "usage: $0 COMMAND [ARGS...]" >&2
    exit 2
fi

BIN=$(cd "$(dirname "$0")/.." && pwd)/.venv/bin
FLYWHEEL_CLI=${FLYWHEEL_CLI:-$BIN/flywheel}
FLYWHEEL_HOME=$(mktemp -d "${TMPDIR:-/tmp}/flywheel-test.XXXXXX")
PID_FILE=$FLYWHEEL_HOME/servers/prefect/server.pid
if [[ -n ${FLYWHEEL_TEST_PREFECT_PORT:-} ]]; then
    PORT=$FLYWHEEL_TEST_PREFECT_PORT
else
    # Another checkout's tests may hold 4250 on this machine.
    PORT=$("$BIN/python" -c 'from flows.servers import free_port; print(free_port(4250))')
fi

stop_servers() {
    local pid=""
    [[ -f $PID_FILE ]] && pid=$(<"$PID_FILE")
    "$FLYWHEEL_CLI" server stop prefect --home "$FLYWHEEL_HOME" --port "$PORT" >&2 || true
    # Whatever the CLI did, nothing of the server's process group may outlive us.
    if [[ -n $pid ]] && kill -0 -- "-$pid" 2>/dev/null; then
        kill -KILL -- "-$pid" 2>/dev/null || true
    fi
    rm -rf "$FLYWHEEL_HOME"
}
trap stop_servers EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$FLYWHEEL_CLI" server start prefect --home "$FLYWHEEL_HOME" --port "$PORT" >&2

export FLYWHEEL_HOME
export PREFECT_API_URL=http://127.0.0.1:$PORT/api
export PREFECT_SERVER_ALLOW_EPHEMERAL_MODE=false
export PREFECT_SERVER_ANALYTICS_ENABLED=false
export PREFECT_RUNNER_POLL_FREQUENCY=1

status=0
"$@" || status=$?
exit "$status"
