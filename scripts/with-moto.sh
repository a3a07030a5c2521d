#!/usr/bin/env bash
# scripts/with-moto.sh CMD [ARGS...]: runs CMD with FERRY_DYNAMODB_ENDPOINT, FERRY_S3_ENDPOINT
# and FERRY_SQS_ENDPOINT pointed at a moto server of its own (moto_server.py on a free port of
# 127.0.0.1), stopped when CMD ends. `make test-moto` hands it to `go test -exec`, so each test
# binary (one package) has a server to itself: moto runs DynamoDB requests one at a time (see
# moto_server.py), and one server shared by every package made each package wait for all the
# others'. moto's log is kept (and named) only when CMD fails.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${FERRY_MOTO_VENV:-$here/_tools/venv-moto}
log=$(mktemp -t ferry-moto.XXXXXX.log)
out=$(mktemp -t ferry-moto.XXXXXX.addr)

"$venv/bin/python" "$here/scripts/moto_server.py" >"$out" 2>"$log" &
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

export FERRY_DYNAMODB_ENDPOINT=$url FERRY_S3_ENDPOINT=$url FERRY_SQS_ENDPOINT=$url
"$@"
