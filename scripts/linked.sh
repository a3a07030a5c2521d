#!/usr/bin/env bash
# Prints, per Lambda function, how many of Ferry's internal packages its binary links and how
# large the binary is (arm64, stripped, as `make build` builds it): the table docs/layout.md
# keeps. `make linked` runs it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
module=$(awk 'NR == 1 {print $2}' go.mod)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
make --no-print-directory build BUILD_DIR="$out" >/dev/null
printf '| function | internal packages linked | binary (arm64, stripped) |\n|---|---:|---:|\n'
for dir in functions/*/bootstrap; do
	fn=$(basename "$(dirname "$dir")")
	linked=$(go list -deps "./$dir" | grep -c "^$module/internal/")
	bytes=$(stat -c %s "$out/$fn/bootstrap")
	printf '| %s | %d | %.1f MB |\n' "$fn" "$linked" "$(echo "$bytes / 1000000" | bc -l)"
done
