#!/usr/bin/env bash
# Runs one SDK's end-to-end tests against the stack at FERRY_ADDR (scripts/with-stack.sh starts
# one) through Ferry's fault-injecting proxy: `ferry faultproxy` forwards a seeded share of the
# requests and drops their answers, resets connections before forwarding, or delays requests
# past the clients' 3 s timeout, then prints what it did. The tests set up their accounts and
# read usage on the stack itself (FERRY_SDK_STACK_URL) and send through the proxy (FERRY_SDK_URL).
#
#   scripts/with-stack.sh scripts/test-sdk-e2e.sh go|typescript|python
#
# FERRY_SDK_FAULT_SEED, FERRY_SDK_FAULT_RATE and FERRY_SDK_FAULT_DELAY change the faults.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -ne 1 ]; then
	echo "usage: scripts/test-sdk-e2e.sh go|typescript|python" >&2
	exit 2
fi
proxy=(_tools/bin/ferry faultproxy --seed "${FERRY_SDK_FAULT_SEED:-25}" --rate "${FERRY_SDK_FAULT_RATE:-0.2}"
	--delay "${FERRY_SDK_FAULT_DELAY:-3500ms}" --)
case $1 in
go) "${proxy[@]}" bash -c 'cd sdk/go && go test -count=1 -run E2E -v .' ;;
typescript) "${proxy[@]}" bash -c 'cd sdk/typescript && node --test --test-concurrency=1 test/e2e.test.mjs' ;;
python) "${proxy[@]}" env PYTHONPATH=sdk/python/src _tools/venv-sdk-python/bin/python -m pytest -q -s -p no:cacheprovider sdk/python/tests/test_e2e.py ;;
*)
	echo "test-sdk-e2e: unknown SDK $1 (go, typescript or python)" >&2
	exit 2
	;;
esac
