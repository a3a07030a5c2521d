#!/usr/bin/env bash
# Measures each SDK's batcher against a bare HTTP client posting the same batches, side by side
# on the stack at FERRY_ADDR (scripts/with-stack.sh starts one): events per second each way and
# their ratio, per language. Each side waits for the worker to bill what it sent before the next
# starts. SDK_BENCH_EVENTS and SDK_BENCH_ROUNDS change the run's size.
#
#   scripts/with-stack.sh scripts/bench-sdk.sh   (what make bench-sdk runs)
set -euo pipefail
cd "$(dirname "$0")/.."
export FERRY_SDK_STACK_URL=http://${FERRY_ADDR:?the stack\'s address}
events=${SDK_BENCH_EVENTS:-3000}
rounds=${SDK_BENCH_ROUNDS:-4}
(cd sdk/go && go run ./internal/bench -events "$events" -rounds "$rounds")
(cd sdk/typescript && node_modules/.bin/tsc -p tsconfig.json && node bench/batcher.mjs "$events" "$rounds")
PYTHONPATH=sdk/python/src _tools/venv-sdk-python/bin/python sdk/python/bench/batcher.py "$events" "$rounds"
