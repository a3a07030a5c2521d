#!/usr/bin/env bash
# make test-moto: every test of the Go packages against a second, independent implementation of
# DynamoDB, S3 and SQS: moto, one server on a free port of 127.0.0.1, named to the tests through
# FERRY_DYNAMODB_ENDPOINT, FERRY_S3_ENDPOINT and FERRY_SQS_ENDPOINT. Each test creates its own
# uniquely named tables, bucket and queues, so one server serves them all. The CDK app's tests
# (infra/) talk to no endpoint and are left to `make test`.
#
# Usage: scripts/test-moto.sh [go test flags and packages]   (default: every package but infra)
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${FERRY_MOTO_VENV:-_tools/venv-moto}
timeout=${TEST_TIMEOUT:-20m}
log=$(mktemp -t ferry-moto.XXXXXX.log)
out=$(mktemp -t ferry-moto.XXXXXX.addr)

"$venv/bin/python" scripts/moto_server.py >"$out" 2>"$log" &
moto_pid=$!
stop() {
	local code=$?
	kill "$moto_pid" 2>/dev/null || true
	wait "$moto_pid" 2>/dev/null || true
	rm -f "$out"
	if [ "$code" = 0 ]; then rm -f "$log"; else echo "moto's log: $log" >&2; fi
}
trap stop EXIT
trap 'exit 130' INT TERM

url=""
for _ in $(seq 300); do
	if ! kill -0 "$moto_pid" 2>/dev/null; then
		echo "moto did not start:" >&2
		cat "$log" >&2
		exit 1
	fi
	url=$(sed -nE 's/^\{"url": "([^"]+)"\}$/\1/p' "$out")
	[ -n "$url" ] && break
	sleep 0.1
done
if [ -z "$url" ]; then
	echo "moto did not print its address within 30 s" >&2
	exit 1
fi
echo "moto $("$venv/bin/python" -c 'import moto; print(moto.__version__)') on $url"

export FERRY_DYNAMODB_ENDPOINT=$url FERRY_S3_ENDPOINT=$url FERRY_SQS_ENDPOINT=$url
if [ $# -eq 0 ]; then
	set -- $(go list ./... | grep -v '/infra')
fi
go test -count=1 -timeout "$timeout" "$@"
