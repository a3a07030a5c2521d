#!/usr/bin/env bash
# Replays, with curl, a hostile client's cases against a running Ferry (make run) and checks each
# answer. Exits non-zero on the first wrong answer. It needs curl, gzip and openssl (to sign a
# Stripe delivery with ferry dev's secret), and takes a little over a minute: one check waits
# for ferry dev's bound on a stalled body.
#
#   FERRY_ADDR=127.0.0.1:8080 FERRY_ADMIN_KEY=dev-admin-key scripts/hostile.sh
#
# Every run uses fresh account ids, so it can run again against the same stack.
set -uo pipefail

ADDR="${FERRY_ADDR:-127.0.0.1:8080}"
BASE="http://${ADDR}"
ADMIN="${FERRY_ADMIN_KEY:-dev-admin-key}"
RUN="$(date +%s)$$"
PROBLEM="tag:ferrymeter.dev,2026:problem:"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
passed=0

fail() {
	echo "FAIL: $1" >&2
	[ -s "$TMP/body" ] && { echo "  answer: $(head -c 600 "$TMP/body")" >&2; }
	exit 1
}

# call METHOD PATH KEY BODY-FILE [curl args…]: sends the request; sets STATUS and CTYPE.
call() {
	local method=$1 path=$2 key=$3 body=$4
	shift 4
	local args=(-s -o "$TMP/body" -w '%{http_code} %{content_type}' -X "$method" "$BASE$path")
	[ -n "$key" ] && args+=(-H "Authorization: Bearer $key")
	[ -n "$body" ] && args+=(--data-binary "@$body")
	local out
	out=$(curl "${args[@]}" "$@") || fail "curl could not reach $BASE$path"
	STATUS=${out%% *}
	CTYPE=${out#* }
}

# body TEXT: writes a body file (printf format: \xNN writes raw bytes) and prints its path.
body() {
	local f="$TMP/req.$RANDOM$RANDOM"
	printf "$1" >"$f"
	echo "$f"
}

# expect NAME STATUS [KIND [DETAIL-PART]]: checks the last answer.
expect() {
	local name=$1 status=$2 kind=${3:-} detail=${4:-}
	[ "$STATUS" = "$status" ] || fail "$name: status $STATUS, want $status"
	if [ -n "$kind" ]; then
		[[ "$CTYPE" == application/problem+json* ]] || fail "$name: Content-Type '$CTYPE', want application/problem+json"
		grep -qF "\"type\":\"$PROBLEM$kind\"" "$TMP/body" || fail "$name: not a $kind problem"
		for leak in ReadString 'bigger context' 'found in #' jsontext 'json:' 'cannot unmarshal' 'Go value'; do
			grep -qF "$leak" "$TMP/body" && fail "$name: the detail shows the parser's '$leak'"
		done
	fi
	if [ -n "$detail" ]; then
		grep -qF -- "$detail" "$TMP/body" || fail "$name: the answer does not say '$detail'"
	fi
	passed=$((passed + 1))
	echo "ok   $name ($STATUS${kind:+ $kind})"
}

json='Content-Type: application/json'

# account ID LIMITS: creates an account and prints its API key (also kept in $TMP/key.ID).
account() {
	call POST /v1/accounts "$ADMIN" "$(body "{\"id\":\"$1\",\"limits\":$2}")" -H "$json"
	[ "$STATUS" = 201 ] || fail "create account $1: $STATUS"
	sed -E 's/.*"apiKey":"([^"]+)".*/\1/' "$TMP/body" | tee "$TMP/key.$1"
}

# settled KEY ID: waits until the worker has finished the event; prints its ledger answer.
settled() {
	local i
	for i in $(seq 1 60); do
		call GET "/v1/events/$2" "$1" ""
		if [ "$STATUS" = 200 ] && ! grep -q '"INSERTING"' "$TMP/body"; then
			cat "$TMP/body"
			return
		fi
		sleep 0.5
	done
	fail "event $2 was not processed in 30 s"
}

call GET /healthz "" ""
[ "$STATUS" = 200 ] || fail "Ferry is not running on $BASE (GET /healthz: $STATUS); start it with make run"

KEY=$(account "acct_h${RUN}" '{"tokens":100000}')
ev() { echo "{\"specversion\":\"1.0\",\"id\":$1,\"source\":\"/hostile\",\"type\":\"api.call\"$2}"; }

# corrections_bounded: a negative correction takes back at most the cycle's usage (its events
# plus every earlier correction), and a correction names a cycle of the account's life. Each
# refusal is a 400 problem that stores nothing.
corrections_bounded() {
	echo "== corrections: never past the cycle's usage, never before the account"
	local id="acct_corr${RUN}" key n
	key=$(account "$id" '{"events":1000}')
	for n in 1 2 3; do
		call POST /v1/events "$key" "$(body "$(ev "\"corr-$n\"" '')")" -H "$json"
		expect "event $n of 3" 202
		settled "$key" "corr-$n" >/dev/null
	done
	corr() { call POST /v1/usage/corrections "$ADMIN" "$(body "$1")" -H "$json" -H "Idempotency-Key: corr-${RUN}-$2"; }
	corr "{\"account\":\"$id\",\"feature\":\"events\",\"units\":-5,\"reason\":\"refund\"}" past
	expect "a correction of -5 against 3 events" 409 conflict 'below zero'
	grep -qF '"usage":3' "$TMP/body" || fail "the refusal does not carry the cycle's usage (3)"
	call GET "/v1/usage?feature=events" "$key" ""
	expect "nothing was stored" 200 "" '"corrections":0'
	corr "{\"account\":\"$id\",\"feature\":\"events\",\"units\":-3,\"reason\":\"refund\"}" all
	expect "a correction of -3: exactly the usage" 201
	corr "{\"account\":\"$id\",\"feature\":\"events\",\"units\":-1,\"reason\":\"refund\"}" more
	expect "-1 more, counting the earlier correction" 409 conflict 'below zero'
	grep -qF '"usage":0' "$TMP/body" || fail "the refusal does not carry the usage left (0)"
	local cycle
	for cycle in 2019-01 0000-01; do
		corr "{\"account\":\"$id\",\"feature\":\"events\",\"units\":1,\"reason\":\"import\",\"cycle\":\"$cycle\"}" "old-$cycle"
		expect "a correction for $cycle, before the account" 400 invalid-request "before account $id existed"
		grep -qF '"earliestCycle"' "$TMP/body" || fail "the refusal for $cycle does not name the earliest cycle"
	done
	call GET "/v1/usage?feature=events" "$key" ""
	expect "the usage after the refusals" 200 "" '"corrections":-3'
}
corrections_bounded

echo "== 1. invalid UTF-8 is a 400 before anything is queued"
call POST /v1/events "$KEY" "$(body "$(ev '"bad\xff"' '')")" -H "$json"
expect "an id with invalid UTF-8" 400 invalid-request '\"id\" is not valid UTF-8'
call POST /v1/events "$KEY" "$(body "$(ev '"ok"' ',"data":{"m":"\xc3"}')")" -H "$json"
expect "data with invalid UTF-8" 400 invalid-request 'not valid UTF-8'
call GET "/v1/events/bad%EF%BF%BD" "$KEY" ""
expect "nothing was billed under an id rewritten with U+FFFD" 404 not-found

echo "== 2. lone surrogates are refused, never merged into one event"
for s in ud800 udbff; do
	call POST /v1/events "$KEY" "$(body "$(ev "\"sur\\\\$s\"" '')")" -H "$json"
	expect "an id with \\$s" 400 invalid-request 'lone surrogate'
done
call GET "/v1/events/sur%EF%BF%BD" "$KEY" ""
expect "no event under the merged id" 404 not-found

echo "== 3. an emoji is queued and billed"
call POST /v1/events "$KEY" "$(body "$(ev '"emoji-😀"' ',"data":{"m":"🚀"}')")" -H "$json"
expect "an emoji in id and data" 202 "" '"id":"emoji-😀"'
out=$(settled "$KEY" "emoji-%F0%9F%98%80")
grep -q '"status":"INSERTED"' <<<"$out" && grep -qF '"id":"emoji-😀"' <<<"$out" || fail "the emoji event: $out"
passed=$((passed + 1)) && echo "ok   the emoji event is INSERTED under its exact id"

echo "== 4. a long prompt inside the 64 KiB contract is stored, never UNINSERTABLE"
prompt=$(head -c 2048 /dev/zero | tr '\0' 'p')
call POST /v1/events "$KEY" "$(body "$(ev '"prompt-1"' ",\"data\":{\"prompt\":\"$prompt\"}")")" -H "$json"
expect "a 2 KB string in data" 202
out=$(settled "$KEY" "prompt-1")
grep -q '"status":"INSERTED"' <<<"$out" || fail "the long prompt: $out"
passed=$((passed + 1)) && echo "ok   the long prompt is INSERTED"

echo "== 5. required fields are required; the step key is not burned"
call POST /v1/holds "$KEY" "$(body '{"key":"job-1","feature":"tokens","amount":1000}')" -H "$json"
expect "a hold" 201
HOLD=$(sed -E 's/.*"id":"([^"]+)".*/\1/' "$TMP/body")
call POST "/v1/holds/$HOLD/charges" "$KEY" "$(body '{"key":"step-7"}')" -H "$json"
expect "a charge without amount" 400 invalid-request '\"amount\" is required'
call POST "/v1/holds/$HOLD/charges" "$KEY" "$(body '{"key":"step-7","amount":null}')" -H "$json"
expect "a charge with amount null" 400 invalid-request 'cannot be null'
call POST "/v1/holds/$HOLD/charges" "$KEY" "$(body '{"key":"step-7","amount":120}')" -H "$json"
expect "the correct retry" 200 "" '"charged":120'

echo "== 6. names are exact; duplicate members are refused"
call POST "/v1/holds/$HOLD/charges" "$KEY" "$(body '{"key":"s","Amount":7}')" -H "$json"
expect "Amount for amount" 400 invalid-request '\"Amount\" is not a field of this request'
call POST /v1/events "$KEY" "$(body '{"specversion":"1.0","id":"a","id":"b","source":"/hostile","type":"api.call"}')" -H "$json"
expect "an event with two ids" 400 invalid-request '\"id\" appears more than once'
call POST "/v1/holds/$HOLD/charges" "$KEY" "$(body '{"key":"s2","amount":7.5}')" -H "$json"
expect "a fraction for an integer" 400 invalid-request 'must be an integer'
call GET "/v1/holds/$HOLD" "$KEY" ""
expect "the hold after the refusals" 200 "" '"used":120'

echo "== 7 and 10. an inactive account records no new usage, with its own problem type"
OFF="acct_off${RUN}"
OFFKEY=$(account "$OFF" '{"tokens":1000}')
call POST /v1/holds "$OFFKEY" "$(body '{"key":"job-1","feature":"tokens","amount":300}')" -H "$json"
expect "a hold before the deactivation" 201
OFFHOLD=$(sed -E 's/.*"id":"([^"]+)".*/\1/' "$TMP/body")
call POST "/v1/holds/$OFFHOLD/charges" "$OFFKEY" "$(body '{"key":"step-1","amount":100}')" -H "$json"
expect "a charge before the deactivation" 200
call PATCH "/v1/accounts/$OFF" "$ADMIN" "$(body '{"status":"inactive"}')" -H "$json"
expect "deactivate" 200
call POST /v1/events "$OFFKEY" "$(body "$(ev '"off-1"' '')")" -H "$json"
expect "an event" 402 account-inactive
grep -q '"remaining"' "$TMP/body" && fail "an inactive account's 402 says remaining"
call POST /v1/holds "$OFFKEY" "$(body '{"key":"job-2","feature":"tokens","amount":10}')" -H "$json"
expect "a new hold" 402 account-inactive
call POST "/v1/holds/$OFFHOLD/charges" "$OFFKEY" "$(body '{"key":"step-2","amount":50}')" -H "$json"
expect "a new charge" 402 account-inactive
call POST "/v1/holds/$OFFHOLD/settle" "$OFFKEY" "$(body '{"used":250}')" -H "$json"
expect "a settlement above the recorded usage" 402 account-inactive
call GET "/v1/usage?feature=tokens" "$OFFKEY" ""
expect "usage agrees: nothing moved" 200 "" '"remaining":700'
call POST "/v1/holds/$OFFHOLD/settle" "$OFFKEY" ""
expect "a settlement at the recorded usage" 200 "" '"released":200'

echo "== 8. a control character in Idempotency-Key gets a problem document"
call POST /v1/events "$KEY" "$(body "$(ev '"ctl-1"' '')")" -H "$json" -H $'Idempotency-Key: a\x01b'
expect "Idempotency-Key with U+0001" 400 invalid-header

echo "== 11. details are in Ferry's words"
call POST /v1/events "$KEY" "$(body "$(ev '"t-1"' ',"time":5')")" -H "$json"
expect "a number for time" 400 invalid-request '\"time\" must be a string'
call POST /v1/events "$KEY" "$(body "$(ev '5' '')")" -H "$json"
expect "a number for id" 400 invalid-request '\"id\" must be a string'
call POST /v1/events "$KEY" "$(body '{"specversion":"1.0",')" -H "$json"
expect "cut short" 400 invalid-request 'ends before its JSON value does'

echo "== 12. binary content mode"
call POST /v1/events "$KEY" "$(body '{"tokens":12}')" -H "$json" \
	-H 'ce-specversion: 1.0' -H 'ce-id: binary-1' -H 'ce-source: /hostile' -H 'ce-type: api.call'
expect "an event in binary mode" 202 "" '"id":"binary-1"'
out=$(settled "$KEY" "binary-1")
grep -q '"status":"INSERTED"' <<<"$out" || fail "the binary event: $out"
passed=$((passed + 1)) && echo "ok   the binary event is INSERTED"
call POST /v1/events/batch "$KEY" "$(body "[$(ev '"batch-1"' '')]")" -H 'Content-Type: application/cloudevents-batch+json'
expect "a structured batch" 202 "" '"status":"queued"'

# ---- Input and contract: the rules no Go type states (empty strings, 2^53−1, media types and
# content codings, signed deliveries that are not events or are dated ahead, a stalled body, a
# route without fields). Each class is one function; the stalled body runs in the background
# from the start, since ferry dev answers it only when its one-minute bound runs out.

# stalled_body_start opens a connection, sends a request's headers and 10 of its 1,000 bytes,
# then stalls; stalled_body_check waits for the answer.
stalled_body_start() {
	local host=${ADDR%:*} port=${ADDR##*:}
	(
		exec 3<>"/dev/tcp/$host/$port" || exit 1
		printf 'POST /v1/events HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"specver' "$ADDR" >&3
		timeout 90 cat <&3 >"$TMP/stalled"
	) &
	STALLED_PID=$!
	STALLED_AT=$SECONDS
	trap 'kill "$STALLED_PID" 2>/dev/null; rm -rf "$TMP"' EXIT
}

stalled_body_check() {
	echo "== a body that stalls is answered 408 once ferry dev's read bound runs out"
	wait "$STALLED_PID" 2>/dev/null
	local took=$((SECONDS - STALLED_AT))
	head -1 "$TMP/stalled" | grep -q '^HTTP/1.1 408' || fail "a stalled body: $(head -c 300 "$TMP/stalled")"
	grep -qF "\"type\":\"${PROBLEM}request-timeout\"" "$TMP/stalled" || fail "a stalled body: not a request-timeout problem"
	[ "$took" -le 85 ] || fail "a stalled body was answered after ${took} s"
	passed=$((passed + 1)) && echo "ok   a stalled body (408 request-timeout after about ${took} s; the connection closed)"
}

# check_empty_strings: "" is never "not given", in any body, as in a query.
check_empty_strings() {
	echo "== an empty string in a body is refused, never read as \"not given\""
	local acct="acct_es${RUN}"
	account "$acct" '{"tokens":1000}' >/dev/null
	call POST /v1/reconcile "$ADMIN" "$(body '{"account":""}')" -H "$json"
	expect "reconcile with account \"\" (not a page of every account)" 400 invalid-request '\"account\" is empty; leave it out instead'
	call POST /v1/reconcile "$ADMIN" "$(body "{\"account\":\"$acct\",\"cycle\":\"\"}")" -H "$json"
	expect "reconcile with cycle \"\"" 400 invalid-request '\"cycle\" is empty'
	call POST /v1/usage/corrections "$ADMIN" "$(body "{\"account\":\"$acct\",\"feature\":\"events\",\"units\":-1,\"reason\":\"a bot\",\"cycle\":\"\"}")" \
		-H "$json" -H "Idempotency-Key: es-$RUN"
	expect "a correction with cycle \"\" (not booked into the open cycle)" 400 invalid-request '\"cycle\" is empty'
	call GET "/v1/usage?feature=events" "$(cat "$TMP/key.$acct")" ""
	expect "no correction was booked" 200 "" '"corrections":0'
	for field in status plan; do
		call POST /v1/accounts "$ADMIN" "$(body "{\"id\":\"acct_es2${RUN}\",\"$field\":\"\"}")" -H "$json"
		expect "create an account with $field \"\"" 400 invalid-request "\\\"$field\\\" is empty"
		call PATCH "/v1/accounts/$acct" "$ADMIN" "$(body "{\"$field\":\"\"}")" -H "$json"
		expect "update an account with $field \"\"" 400 invalid-request "\\\"$field\\\" is empty"
	done
	call GET "/v1/accounts/acct_es2${RUN}" "$ADMIN" ""
	expect "no account was created" 404 not-found
	call POST /v1/holds "$(cat "$TMP/key.$acct")" "$(body '{"key":"","feature":"tokens","amount":1}')" -H "$json"
	expect "a hold with key \"\"" 400 invalid-request '\"key\" is required and cannot be empty'
}

# check_quantity_bound: no quantity above 2^53−1; the largest is kept exactly through a hold.
check_quantity_bound() {
	echo "== every quantity is at most 2^53−1, and kept exactly"
	local big="acct_qb${RUN}"
	call POST /v1/accounts "$ADMIN" "$(body "{\"id\":\"acct_qx${RUN}\",\"limits\":{\"tokens\":9007199254740993}}")" -H "$json"
	expect "a limit of 2^53+1 (not stored as 2^53)" 400 invalid-request 'a limit is an integer from 0 to 9007199254740991'
	call POST /v1/accounts "$ADMIN" "$(body "{\"id\":\"acct_qx${RUN}\",\"limits\":{\"tokens\":9223372036854775807}}")" -H "$json"
	expect "a limit of 2^63-1" 400 invalid-request '\"limits.tokens\"'
	call GET "/v1/accounts/acct_qx${RUN}" "$ADMIN" ""
	expect "no account was created" 404 not-found
	account "$big" '{"tokens":9007199254740991}' >/dev/null
	local key
	key=$(cat "$TMP/key.$big")
	call POST /v1/holds "$key" "$(body '{"key":"job-1","feature":"tokens","amount":5}')" -H "$json"
	expect "a hold under the largest limit" 201
	HOLD=$(sed -E 's/.*"id":"([^"]+)".*/\1/' "$TMP/body")
	call GET "/v1/accounts/$big" "$ADMIN" ""
	expect "the account after the hold (not a 500)" 200 "" '"tokens":9007199254740991'
	call GET "/v1/usage?feature=tokens" "$key" ""
	expect "usage after the hold" 200 "" '"limit":9007199254740991'
	call POST /v1/holds "$key" "$(body '{"key":"job-2","feature":"tokens","amount":9007199254740992}')" -H "$json"
	expect "a hold of 2^53" 400 invalid-request 'is out of range: a number here is at most 9007199254740991'
	call POST "/v1/holds/$HOLD/charges" "$key" "$(body '{"key":"s","amount":9007199254740993}')" -H "$json"
	expect "a charge of 2^53+1" 400 invalid-request 'at most 9007199254740991'
	call POST "/v1/holds/$HOLD/settle" "$key" "$(body '{"used":9007199254740992}')" -H "$json"
	expect "a settlement at 2^53" 400 invalid-request 'at most 9007199254740991'
	call POST /v1/usage/corrections "$ADMIN" "$(body "{\"account\":\"$big\",\"feature\":\"events\",\"units\":-9007199254740992,\"reason\":\"x\"}")" \
		-H "$json" -H "Idempotency-Key: qb-$RUN"
	expect "a correction of -2^53" 400 invalid-request 'at most 9007199254740991'
}

# check_media_types_and_codings: JSON bodies are declared JSON; a coded body is never read.
check_media_types_and_codings() {
	echo "== a body is declared JSON and sent uncoded, on every route"
	local acct="acct_mt${RUN}"
	account "$acct" '{"tokens":1000}' >/dev/null
	call POST /v1/accounts "$ADMIN" "$(body "{\"id\":\"acct_mt2${RUN}\"}")" -H 'Content-Type: text/plain'
	expect "create an account as text/plain" 415 unsupported-media-type
	call PATCH "/v1/accounts/$acct" "$ADMIN" "$(body '{"status":"inactive"}')" -H 'Content-Type: text/plain'
	expect "update an account as text/plain" 415 unsupported-media-type
	# A route whose body may be left out reads JSON only all the same: no body, declared as text.
	local optional
	for optional in /v1/report /v1/reconcile /v1/sessions; do
		call POST "$optional" "$ADMIN" "" -H 'Content-Type: text/plain'
		expect "POST $optional without a body, declared text/plain" 415 unsupported-media-type
	done
	local gz="$TMP/event.gz"
	printf '{"specversion":"1.0","id":"gz-1","source":"/hostile","type":"api.call"}' | gzip -c >"$gz"
	local route method path
	for route in "POST /v1/accounts" "PATCH /v1/accounts/$acct" "POST /v1/events" "POST /v1/events/batch" \
		"POST /v1/holds" "POST /v1/holds/x/charges" "POST /v1/holds/x/settle" "POST /v1/usage/corrections" \
		"POST /v1/report" "POST /v1/reconcile" "POST /v1/events/x/redrive" "POST /v1/billing-events/x/replay" \
		"POST /v1/webhooks/kinde" "POST /v1/webhooks/stripe" "POST /v1/sessions" "POST /v1/labs/holds/runs"; do
		method=${route%% *} path=${route#* }
		call "$method" "$path" "$ADMIN" "$gz" -H "$json" -H 'Content-Encoding: gzip' -D "$TMP/headers"
		expect "$route, gzip" 415 unsupported-media-type 'content coding'
		grep -qi '^Accept-Encoding: identity' "$TMP/headers" || fail "$route, gzip: no Accept-Encoding: identity"
	done
	call POST /v1/events "$(cat "$TMP/key.$acct")" "$(body "$(ev '"br-1"' '')")" -H "$json" -H 'Content-Encoding: br'
	expect "an event declared br (not read as if plain)" 415 unsupported-media-type
	call GET "/v1/events/br-1" "$(cat "$TMP/key.$acct")" ""
	expect "nothing was queued under its id" 404 not-found
}

# dev_info reads ferry dev's signing details: the Kinde signer's URL and the Stripe secret.
dev_info() {
	call GET /_dev/webhooks "" ""
	[ "$STATUS" = 200 ] || fail "GET /_dev/webhooks: $STATUS (these checks need ferry dev's local signer)"
	SIGNER=$(sed -nE 's/.*"signer":"([^"]+)".*/\1/p' "$TMP/body")
	STRIPE_SECRET=$(sed -nE 's/.*"secret":"([^"]+)".*/\1/p' "$TMP/body")
	[ -n "$SIGNER" ] && [ -n "$STRIPE_SECRET" ] || fail "ferry dev names no Kinde signer or Stripe secret: $(cat "$TMP/body")"
}

# stripe_post FILE AT [extra curl args…]: posts a Stripe event signed at unix time AT.
stripe_post() {
	local f=$1 at=$2
	shift 2
	local sig
	sig=$({ printf '%s.' "$at"; cat "$f"; } | openssl dgst -sha256 -hmac "$STRIPE_SECRET" | sed 's/^.*= //')
	call POST /v1/webhooks/stripe "" "$f" -H 'Content-Type: application/json' -H "Stripe-Signature: t=$at,v1=$sig" "$@"
}

# check_signed_deliveries: a signed Kinde token without event_id is a 400; a Stripe signature
# dated ahead is refused as a Kinde token dated ahead is; a coded delivery is never read.
check_signed_deliveries() {
	echo "== signed deliveries: not an event is a 400, dated ahead is refused, coded is never read"
	dev_info
	local now claims token
	now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
	claims="{\"type\":\"customer.plan_changed\",\"timestamp\":\"$now\",\"source\":\"api\",\"data\":{\"customer_id\":\"customer_h$RUN\"}}"
	token=$(curl -s -X POST "${SIGNER%/}/sign" --data-binary "$claims") || fail "the Kinde signer did not sign"
	call POST /v1/webhooks/kinde "" "$(body "$token")" -H 'Content-Type: application/jwt'
	expect "a signed Kinde token without event_id" 400 invalid-request 'no usable event_id'
	local t f
	t=$(date +%s)
	f=$(body "{\"id\":\"evt_fut${RUN}\",\"object\":\"event\",\"type\":\"invoice.paid\",\"created\":$t,\"data\":{\"object\":{\"object\":\"invoice\",\"customer\":\"cus_h$RUN\"}}}")
	stripe_post "$f" $((t + 3600))
	expect "a Stripe signature dated an hour ahead" 401 invalid-signature 'in the future'
	stripe_post "$f" $((t + 365 * 86400))
	expect "a Stripe signature dated a year ahead" 401 invalid-signature 'in the future'
	stripe_post "$f" "$t" -H 'Content-Encoding: br'
	expect "a Stripe delivery declared br (not stored as if plain)" 415 unsupported-media-type
	call GET "/v1/billing-events?limit=100" "$ADMIN" ""
	expect "the billing events" 200
	grep -qF "evt_fut${RUN}" "$TMP/body" && fail "a refused Stripe delivery was stored"
	passed=$((passed + 1)) && echo "ok   no refused delivery was stored"
}

# check_routes_without_fields: a route that takes no fields says so.
check_routes_without_fields() {
	echo "== a route without fields says it takes none"
	call POST /v1/report "$ADMIN" "$(body '{"all":true}')" -H "$json"
	expect "a member for the run-now route" 400 invalid-request 'this request takes no fields'
	grep -qF 'its fields are ;' "$TMP/body" && fail "the detail lists no fields"
	passed=$((passed + 1)) && echo "ok   the detail does not list an empty set of fields"
}

stalled_body_start
check_empty_strings
check_quantity_bound
check_media_types_and_codings
check_signed_deliveries
check_routes_without_fields
stalled_body_check

echo "all $passed answers as stated"
