#!/usr/bin/env bash
# A real SIGKILL, by hand: the emulators run apart (`ferry emulators`, or the endpoints
# FERRY_DYNAMODB_ENDPOINT / FERRY_S3_ENDPOINT / FERRY_SQS_ENDPOINT name), `ferry dev` runs on them,
# and a client sends it 2,000 events for a free account whose events limit is 1,500 (in batches of
# 100, every fifth sent twice). The worker drains while the client sends, and once 300 are billed
# `ferry dev` is killed with SIGKILL: mid-drain, with requests unanswered. A second `ferry dev`
# with the same --prefix reuses the resources and their state, the client sends again every
# request that got no answer, and the drain finishes. The script then checks: used 1,500, 1,500
# INSERTED, every other queued event REJECTED, nothing left INSERTING, every accepted event's
# payload archived where its entry says. (A batch answered 402 — the limit reached while new events
# were still arriving — queues none of its events.) The same scenario runs in `make test` as
# TestDev_SIGKILLWhileTheWorkerDrains_TheRestartedStackBillsExactlyTheLimit (cmd/ferry).
#
#   FERRY_ADDR=127.0.0.1:8097 scripts/kill.sh
#
# Needs curl and jq. Every wait is bounded; every process it starts it stops.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
ADDR="${FERRY_ADDR:-127.0.0.1:8080}"
BASE="http://${ADDR}"
ADMIN="${FERRY_ADMIN_KEY:-dev-admin-key}"
EVENTS=2000
LIMIT=1500
KILL_AFTER=300
PREFIX="kill-$(date +%s)-$$"
# Bounds, in seconds.
START_LIMIT=120
DRAIN_LIMIT=600

TMP=$(mktemp -d)
emu_pid="" dev_pid=""
cleanup() {
	[ -n "$dev_pid" ] && kill -TERM "$dev_pid" 2>/dev/null && wait "$dev_pid" 2>/dev/null || true
	if [ -n "$emu_pid" ]; then
		exec 3>&- || true
		wait "$emu_pid" 2>/dev/null || true
	fi
	rm -rf "$TMP"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*" >&2
	[ -f "$TMP/dev.log" ] && tail -n 20 "$TMP/dev.log" >&2
	exit 1
}

echo "building ferry"
make --no-print-directory tools >/dev/null
go build -o _tools/bin/ferry ./cmd/ferry
FERRY=$root/_tools/bin/ferry

if [ -z "${FERRY_DYNAMODB_ENDPOINT:-}${FERRY_S3_ENDPOINT:-}${FERRY_SQS_ENDPOINT:-}" ]; then
	# `ferry emulators` serves until its stdin closes: hold it open on fd 3.
	mkfifo "$TMP/emu.in"
	"$FERRY" emulators < "$TMP/emu.in" > "$TMP/emu.out" 2> "$TMP/emu.err" &
	emu_pid=$!
	exec 3> "$TMP/emu.in"
	for _ in $(seq 1 $((START_LIMIT * 10))); do
		[ -s "$TMP/emu.out" ] && break
		sleep 0.1
	done
	[ -s "$TMP/emu.out" ] || fail "the emulators did not start in ${START_LIMIT}s"
	FERRY_DYNAMODB_ENDPOINT=$(jq -r .DynamoDB "$TMP/emu.out")
	FERRY_S3_ENDPOINT=$(jq -r .S3 "$TMP/emu.out")
	FERRY_SQS_ENDPOINT=$(jq -r .SQS "$TMP/emu.out")
	export FERRY_DYNAMODB_ENDPOINT FERRY_S3_ENDPOINT FERRY_SQS_ENDPOINT
	echo "emulators (pid $emu_pid): DynamoDB $FERRY_DYNAMODB_ENDPOINT  S3 $FERRY_S3_ENDPOINT  SQS $FERRY_SQS_ENDPOINT"
fi

# start_dev: ferry dev on the endpoints under PREFIX, in TMP (it writes _dev.env there).
start_dev() {
	(cd "$TMP" && exec "$FERRY" dev --addr "$ADDR" --prefix "$PREFIX" >> "$TMP/dev.out" 2>> "$TMP/dev.log") &
	dev_pid=$!
	for _ in $(seq 1 $((START_LIMIT * 5))); do
		curl -fs "$BASE/healthz" >/dev/null 2>&1 && { echo "ferry dev (pid $dev_pid) on $BASE, prefix $PREFIX"; return; }
		kill -0 "$dev_pid" 2>/dev/null || fail "ferry dev ended while starting"
		sleep 0.2
	done
	fail "ferry dev did not answer /healthz in ${START_LIMIT}s"
}

used() {
	curl -fs "$BASE/v1/usage?feature=events" -H "Authorization: Bearer $KEY" | jq -r .used
}

event() { printf '{"specversion":"1.0","id":"evt_kill_%04d","source":"/kill","type":"api.call"}' "$1"; }

start_dev
KEY=$(curl -fs -X POST "$BASE/v1/accounts" -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' \
	-d "{\"id\":\"acct_kill\",\"plan\":\"free\",\"limits\":{\"events\":$LIMIT}}" | jq -r .apiKey)
[ -n "$KEY" ] && [ "$KEY" != null ] || fail "the account was not created"

# post_batch FILE: posts the batch in FILE; sets status (000: no answer) and records the events
# a 202 says are queued.
post_batch() {
	status=$(curl -s -o "$TMP/answer" -w '%{http_code}' --max-time 120 -X POST "$BASE/v1/events/batch" \
		-H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' --data-binary "@$1") || true
	case "$status" in
	202)
		[ "$(jq '[.results[] | select(.status != "queued")] | length' "$TMP/answer")" = 0 ] || fail "$1: $(cat "$TMP/answer")"
		jq -r '.results[].id' "$TMP/answer" >> "$TMP/queued"
		;;
	402 | 000) ;;
	*) fail "$1: $status $(cat "$TMP/answer")" ;;
	esac
}

echo "sending $EVENTS events, every fifth twice, and SIGKILL once $KILL_AFTER are billed"
mkdir -p "$TMP/requests"
: > "$TMP/queued"
n=0
for ((start = 0; start < EVENTS; start += 100)); do
	batch="" again=""
	for ((i = start; i < start + 100; i++)); do
		batch+="${batch:+,}$(event $i)"
		((i % 5 == 0)) && again+="${again:+,}$(event $i)"
	done
	printf '[%s]' "$batch" > "$TMP/requests/$(printf %04d $n)"
	printf '[%s]' "$again" > "$TMP/requests/$(printf %04d $((n + 1)))"
	n=$((n + 2))
done
kill_dev() {
	at_kill=$(used)
	kill -KILL "$dev_pid"
	wait "$dev_pid" 2>/dev/null || true
	dev_pid=""
	echo "SIGKILL at used=$at_kill"
	[ "$at_kill" -lt "$LIMIT" ] || fail "the meter was already $at_kill: the kill did not land mid-drain"
}
unanswered=()
for f in "$TMP"/requests/*; do
	if [ -n "$dev_pid" ] && [ "$(used)" -ge "$KILL_AFTER" ]; then
		kill_dev
	fi
	if [ -z "$dev_pid" ]; then
		unanswered+=("$f")
		continue
	fi
	post_batch "$f"
	[ "$status" = 000 ] && unanswered+=("$f")
done
if [ -n "$dev_pid" ]; then
	deadline=$((SECONDS + DRAIN_LIMIT))
	until [ "$(used)" -ge "$KILL_AFTER" ]; do
		[ $SECONDS -lt $deadline ] || fail "the worker did not bill $KILL_AFTER events in ${DRAIN_LIMIT}s"
		sleep 0.05
	done
	kill_dev
fi

start_dev
echo "sending again the ${#unanswered[@]} requests that got no answer"
for f in "${unanswered[@]}"; do
	post_batch "$f"
	[ "$status" != 000 ] || fail "$f got no answer from the restarted stack"
done
queued=$(sort -u "$TMP/queued" | wc -l)
restarted=$SECONDS
deadline=$((SECONDS + DRAIN_LIMIT))
while :; do
	summary=$("$FERRY" inspect --env-file "$TMP/_dev.env" --account acct_kill)
	inserting=$(jq '.ledger.INSERTING // 0' <<< "$summary")
	entries=$(jq '(.ledger.INSERTED // 0) + (.ledger.REJECTED // 0)' <<< "$summary")
	[ "$inserting" = 0 ] && [ "$entries" -ge "$queued" ] && [ "$(jq '.ledger.INSERTED // 0' <<< "$summary")" = "$LIMIT" ] && break
	[ $SECONDS -lt $deadline ] || fail "the drain did not finish in ${DRAIN_LIMIT}s: $(jq -c .ledger <<< "$summary")"
	sleep 1
done
# Let the last deliveries (copies of finished events) be acknowledged, then read once more.
sleep 6
summary=$("$FERRY" inspect --env-file "$TMP/_dev.env" --account acct_kill)
echo "drained $((SECONDS - restarted))s after the restart: $(jq -c . <<< "$summary")"

u=$(used)
rejected=$(jq '.ledger.REJECTED // 0' <<< "$summary")
[ "$u" = "$LIMIT" ] || fail "used $u, want $LIMIT"
[ "$(jq -c .ledger <<< "$summary")" = "{\"INSERTED\":$LIMIT,\"REJECTED\":$rejected}" ] ||
	fail "the ledger: $(jq -c .ledger <<< "$summary"); want $LIMIT INSERTED, the other queued events REJECTED, nothing else"
[ $((LIMIT + rejected)) -ge "$queued" ] || fail "$((LIMIT + rejected)) events in the ledger; $queued were answered queued"
[ "$(jq .archived <<< "$summary")" = "$LIMIT" ] || fail "$(jq .archived <<< "$summary") archived payloads for $LIMIT accepted events"
[ "$(jq '.insertedNotArchived | length' <<< "$summary")" = 0 ] ||
	fail "accepted events whose archive object is missing: $(jq -c .insertedNotArchived <<< "$summary")"
echo "PASS: used $u; $LIMIT INSERTED, $rejected REJECTED ($queued events answered queued), none INSERTING; every accepted event archived"
