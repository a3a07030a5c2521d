#!/usr/bin/env bash
# make test-contract: builds ferry, then api/contract/run.py starts `ferry dev` on a free loopback
# port, creates the account its key belongs to, and runs schemathesis over every operation of
# api/openapi.yaml (schemathesis.toml and hooks.py beside run.py). Extra arguments go to
# `schemathesis run` (e.g. --include-operation-id postEvent).
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${FERRY_CONTRACT_VENV:-_tools/venv-contract}
bin=$(mktemp -d -t ferry-contract-bin.XXXXXX)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/ferry" ./cmd/ferry
"$venv/bin/python" api/contract/run.py "$bin/ferry" "$@"
