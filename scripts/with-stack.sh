#!/usr/bin/env bash
# Runs a command against a fresh local stack: starts `make run` in the background on FERRY_ADDR
# (default: a free loopback port), waits until /healthz answers, runs the command with FERRY_ADDR
# set to the stack's address, then stops the stack cleanly (an interrupt to ferry dev, as Ctrl-C
# does) and waits for it. It fails if the command fails, if the stack does not come up in time, or
# if the stack does not stop cleanly.
#
#   scripts/with-stack.sh scripts/walkthrough.sh
set -euo pipefail

if [ $# -eq 0 ]; then
	echo "usage: scripts/with-stack.sh <command> [args]" >&2
	exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# Bounds, in seconds: compiling ferry on a cold cache and starting the emulators; stopping.
start_timeout=${FERRY_STACK_START_TIMEOUT:-300}
stop_timeout=30

log=$(mktemp)
FERRY_ADDR=${FERRY_ADDR:-127.0.0.1:0} make run > "$log" 2>&1 &
make_pid=$!

# descendants lists every process below pid, by parent id.
descendants() {
	local child
	for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
		echo "$child"
		descendants "$child"
	done
}

# stop interrupts ferry dev (never make or go run, which would exit non-zero on the signal), then
# waits for make run to end.
stop() {
	local pid dev=""
	for pid in $(descendants "$make_pid"); do
		if ps -o args= -p "$pid" 2>/dev/null | grep -Eq '(^|/)ferry dev( |$)'; then
			dev=$pid
		fi
	done
	if [ -n "$dev" ]; then
		kill -INT "$dev" 2>/dev/null || true
	else
		kill -TERM "$make_pid" 2>/dev/null || true
	fi
	local waited=0
	while kill -0 "$make_pid" 2>/dev/null && [ "$waited" -lt "$stop_timeout" ]; do
		sleep 1
		waited=$((waited + 1))
	done
	if kill -0 "$make_pid" 2>/dev/null; then
		echo "with-stack: the stack did not stop within ${stop_timeout}s" >&2
		kill -KILL "$make_pid" 2>/dev/null || true
		return 1
	fi
	wait "$make_pid"
}

url=""
for _ in $(seq 1 "$start_timeout"); do
	if ! kill -0 "$make_pid" 2>/dev/null; then
		echo "with-stack: make run exited before the stack came up:" >&2
		cat "$log" >&2
		exit 1
	fi
	url=$(sed -nE 's/^Ferry is running on (http:\/\/[^ ]+).*/\1/p' "$log" | head -1)
	if [ -n "$url" ] && curl -sf "$url/healthz" > /dev/null 2>&1; then
		break
	fi
	url=""
	sleep 1
done
if [ -z "$url" ]; then
	echo "with-stack: the stack did not answer /healthz within ${start_timeout}s:" >&2
	cat "$log" >&2
	stop || true
	exit 1
fi
echo "with-stack: Ferry is up on $url"

status=0
FERRY_ADDR=${url#http://} "$@" || status=$?
if ! stop; then
	echo "with-stack: the stack did not stop cleanly:" >&2
	tail -20 "$log" >&2
	status=1
fi
rm -f "$log"
exit "$status"
