#!/usr/bin/env bash
# Runs each SDK's quick-start as its page shows it, against the stack at FERRY_ADDR, and fails on
# any answer that differs: docs/sdk/<language>.md is read and run by scripts/walkthrough.sh, as
# docs/walkthrough.md is (every ```sh block in order in one shell, each compared with the ```text
# block after it; a page's only ```sh blocks are its quick-start's).
#
#   scripts/with-stack.sh scripts/sdk-quickstarts.sh [go] [typescript] [python]
set -euo pipefail
cd "$(dirname "$0")/.."

langs=("$@")
[ ${#langs[@]} -gt 0 ] || langs=(go typescript python)
for lang in "${langs[@]}"; do
	echo "== the $lang quick-start (docs/sdk/$lang.md)"
	WALKTHROUGH_DOC=docs/sdk/$lang.md WALKTHROUGH_SHOW=1 scripts/walkthrough.sh
done
