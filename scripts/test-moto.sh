#!/usr/bin/env bash
# make test-moto: every test of the Go packages against a second, independent implementation of
# DynamoDB, S3 and SQS: moto. `go test -exec scripts/with-moto.sh` gives each package's test
# binary a moto server of its own on a free port of 127.0.0.1, named to the tests through
# FERRY_DYNAMODB_ENDPOINT, FERRY_S3_ENDPOINT and FERRY_SQS_ENDPOINT. Each test creates its own
# uniquely named tables, bucket and queues. The CDK app's tests (infra/) talk to no endpoint and
# are left to `make test`.
#
# Usage: scripts/test-moto.sh [go test flags and packages]   (default: every package but infra)
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${FERRY_MOTO_VENV:-_tools/venv-moto}
timeout=${TEST_TIMEOUT:-20m}
echo "moto $("$venv/bin/python" -c 'import moto; print(moto.__version__)'), a server per package"
if [ $# -eq 0 ]; then
	set -- $(go list ./... | grep -v '/infra')
fi
go test -count=1 -timeout "$timeout" -exec "$PWD/scripts/with-moto.sh" "$@"
