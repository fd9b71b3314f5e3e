#!/usr/bin/env bash
# Run a command with the local servers the tests need, then stop them by PID, always.
#
#   scripts/with-servers.sh .venv/bin/pytest -n 2 --dist loadfile
#
# Prefect, Label Studio and Appium start in parallel in one fresh FLYWHEEL_HOME (a temporary
# folder, removed at the end): Prefect on FLYWHEEL_TEST_PREFECT_PORT (default 4250), Label
# Studio on FLYWHEEL_TEST_LABEL_STUDIO_PORT (default 8189), Appium (the device pool's fake
# driver) on FLYWHEEL_TEST_APPIUM_PORT (default 4773); each on a free port instead when its
# default is taken and its variable is unset. Label Studio's API token is made here, at
# random, and never printed. The command sees PREFECT_API_URL, FLYWHEEL_LABEL_STUDIO__URL,
# FLYWHEEL_LABEL_STUDIO__TOKEN and FLYWHEEL_APPIUM__PORT (the default device pool's server);
# its exit code is this script's.
set -euo pipefail

if [[ $# -eq 0 ]]; then
    echo "usage: $0 COMMAND [ARGS...]" >&2
    exit 2
fi

BIN=$(cd "$(dirname "$0")/.." && pwd)/.venv/bin
FLYWHEEL_CLI=${FLYWHEEL_CLI:-$BIN/flywheel}
FLYWHEEL_HOME=$(mktemp -d "${TMPDIR:-/tmp}/flywheel-test.XXXXXX")
STARTERS=()

# The variable's value when set, else the default port when free, else one the OS picks
# (another checkout's tests may hold the default on this machine).
pick_port() {
    if [[ -n $1 ]]; then
        echo "$1"
    else
        "$BIN/python" -c "from flows.servers import free_port; print(free_port($2))"
    fi
}
PREFECT_PORT=$(pick_port "${FLYWHEEL_TEST_PREFECT_PORT:-}" 4250)
LABEL_STUDIO_PORT=$(pick_port "${FLYWHEEL_TEST_LABEL_STUDIO_PORT:-}" 8189)
APPIUM_PORT=$(pick_port "${FLYWHEEL_TEST_APPIUM_PORT:-}" 4773)

stop_server() {  # NAME PORT
    local pid_file=$FLYWHEEL_HOME/servers/$1/server.pid pid=""
    [[ -f $pid_file ]] && pid=$(<"$pid_file")
    "$FLYWHEEL_CLI" server stop "$1" --home "$FLYWHEEL_HOME" --port "$2" >&2 || true
    # Whatever the CLI did, nothing of the server's process group may outlive us.
    if [[ -n $pid ]] && kill -0 -- "-$pid" 2>/dev/null; then
        kill -KILL -- "-$pid" 2>/dev/null || true
    fi
}

stop_servers() {
    # A start still in progress could write a PID file after we read it: end it first.
    local starter
    for starter in "${STARTERS[@]}"; do
        kill -TERM "$starter" 2>/dev/null || true
        wait "$starter" 2>/dev/null || true
    done
    stop_server prefect "$PREFECT_PORT"
    stop_server label-studio "$LABEL_STUDIO_PORT"
    stop_server appium "$APPIUM_PORT"
    rm -rf "$FLYWHEEL_HOME"
}
trap stop_servers EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Label Studio creates its admin account with this token: tests authenticate with it.
FLYWHEEL_LABEL_STUDIO__TOKEN=$("$BIN/python" -c 'import secrets; print(secrets.token_hex(20))')
export FLYWHEEL_LABEL_STUDIO__TOKEN
unset FLYWHEEL_LABEL_STUDIO__URL

# All at once: Prefect takes about 10 s, Label Studio about 30 s on a new database, Appium 1 s.
"$FLYWHEEL_CLI" server start prefect --home "$FLYWHEEL_HOME" --port "$PREFECT_PORT" >&2 &
STARTERS+=($!)
"$FLYWHEEL_CLI" server start label-studio --home "$FLYWHEEL_HOME" --port "$LABEL_STUDIO_PORT" >&2 &
STARTERS+=($!)
"$FLYWHEEL_CLI" server start appium --home "$FLYWHEEL_HOME" --port "$APPIUM_PORT" >&2 &
STARTERS+=($!)
failed=0
for starter in "${STARTERS[@]}"; do
    wait "$starter" || failed=1
done
STARTERS=()
if [[ $failed -ne 0 ]]; then
    echo "$0: a server did not start (see above)" >&2
    exit 1
fi

export FLYWHEEL_HOME
export PREFECT_API_URL=http://127.0.0.1:$PREFECT_PORT/api
export PREFECT_SERVER_ALLOW_EPHEMERAL_MODE=false
export PREFECT_SERVER_ANALYTICS_ENABLED=false
export PREFECT_RUNNER_POLL_FREQUENCY=1
export FLYWHEEL_LABEL_STUDIO__URL=http://127.0.0.1:$LABEL_STUDIO_PORT
export FLYWHEEL_APPIUM__PORT=$APPIUM_PORT

status=0
"$@" || status=$?
exit "$status"
