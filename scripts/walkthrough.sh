#!/usr/bin/env bash
# Runs the walkthrough (docs/walkthrough.md) against a running Ferry and fails on any answer that
# differs from the one the document shows.
#
#   make run &                       # in another terminal: the stack on 127.0.0.1:8080
#   scripts/walkthrough.sh           # FERRY_ADDR=127.0.0.1:18080 for another address
#
# The walkthrough is read from docs/walkthrough.md itself, so the two cannot drift: every ```sh
# block of the document is run, in order, in one shell (so KEY, HOLD… carry over), against
# http://$FERRY_ADDR with the operator key $FERRY_ADMIN_KEY; the ```text block that follows a
# command block is its expected answer. Before comparing, ids, keys, times, cycles and measured
# durations are masked on both sides, runs of spaces folded and blank lines dropped; only standard
# output is compared (standard error is shown when a step fails). In the expected answer "…" stands
# for any text within a line, and a line that is only "…" for any number of lines. A block marked
# ```text unordered is compared as a set of lines (the document says why its order is a race).
# The stack must be fresh: the walkthrough creates fixed account ids. WALKTHROUGH_SHOW=1 prints
# each compared answer (the SDKs' quick-starts: scripts/sdk-quickstarts.sh).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
doc=${WALKTHROUGH_DOC:-$root/docs/walkthrough.md}
addr=${FERRY_ADDR:-127.0.0.1:8080}
key=${FERRY_ADMIN_KEY:-dev-admin-key}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 1. The steps, from the document: NN.sh, and NN.expected (with NN.mode) where it shows one.
awk -v dir="$work" '
	/^```/ && !in_block {
		in_block = 1; info = substr($0, 4); lines = ""; next
	}
	/^```/ && in_block {
		in_block = 0
		if (info == "sh") {
			n++; file = sprintf("%s/%02d.sh", dir, n); printf "%s", lines > file; close(file); last = "sh"
		} else if (info ~ /^text/ && last == "sh") {
			file = sprintf("%s/%02d.expected", dir, n); printf "%s", lines > file; close(file)
			mode = sprintf("%s/%02d.mode", dir, n); print (info ~ /unordered/ ? "unordered" : "ordered") > mode; close(mode)
			last = "text"
		} else {
			last = "other"
		}
		next
	}
	in_block { lines = lines $0 "\n" }
' "$doc"
steps=$(ls "$work"/*.sh 2>/dev/null | wc -l)
if [ "$steps" -eq 0 ]; then
	echo "walkthrough: no \`\`\`sh blocks in $doc" >&2
	exit 1
fi

# 2. How an answer is compared, after masking what differs on every run: same() says whether
# step NN's answer is the document's.
lib="$work/compare.bash"
cat > "$lib" <<'LIB'
mask() {
	tr -d '\r' | sed -E \
		-e 's/[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z/…/g' \
		-e 's/"cycle":"[0-9]{4}-[0-9]{2}"/"cycle":"…"/g' \
		-e 's/fk_[A-Za-z0-9_-]+/fk_…/g' \
		-e 's/hold_[a-z2-7]{26}/hold_…/g' \
		-e 's/"id":"evt_[0-9]+"/"id":"evt_…"/g' \
		-e 's/lab-(five|load)-[0-9a-f]+/lab-\1-…/g' \
		-e 's/[0-9][0-9,.]* (ms|s)([^A-Za-z]|$)/… \1\2/g' \
		-e 's/[[:space:]]+/ /g' -e 's/^ //' -e 's/ $//' | sed -e '/^$/d'
}
same() {
	local n=$1 dir=$WALKTHROUGH_WORK
	[ -f "$dir/$n.expected" ] || return 0
	mask < "$dir/$n.expected" > "$dir/$n.want"
	mask < "$dir/$n.actual" > "$dir/$n.got"
	if [ "$(cat "$dir/$n.mode")" = unordered ]; then
		sort "$dir/$n.want" > "$dir/$n.want.sorted"
		sort "$dir/$n.got" > "$dir/$n.got.sorted"
		cmp -s "$dir/$n.want.sorted" "$dir/$n.got.sorted"
		return
	fi
	# Match line by line; "…" within a line is any text, a line of "…" any number of lines.
	[ "$(awk '
		function pattern(line,   p) {
			p = line
			gsub(/[][\\.^$*+?(){}|\/]/, "\\\\&", p)
			gsub(/…/, ".*", p)
			return "^" p "$"
		}
		FNR == NR { want[++nw] = $0; next }
		{ got[++ng] = $0 }
		function matches(i, j,   k) {
			if (i > nw) return j > ng
			if (want[i] == "…") {
				for (k = j; k <= ng + 1; k++) if (matches(i + 1, k)) return 1
				return 0
			}
			return j <= ng && got[j] ~ pattern(want[i]) && matches(i + 1, j + 1)
		}
		END { print matches(1, 1) }
	' "$dir/$n.want" "$dir/$n.got")" = 1 ]
}
LIB

# 3. Run every step in one shell, against this stack, from the repository root. A step that
# waits for the stack's asynchronous work (a line starting with `sleep`) and whose answer is not
# yet the document's is run again, up to $WALKTHROUGH_RETRIES times: a slow machine or a slow
# emulator may stretch the wait, never change the answer. (Those steps only read, or repeat a
# request under the same Idempotency-Key.)
retries=${WALKTHROUGH_RETRIES:-30}
esc() { printf '%s' "$1" | sed -e 's/[\/&|]/\\&/g'; }
runner="$work/run.sh"
{
	echo "cd $(printf '%q' "$root")"
	echo ". $(printf '%q' "$lib")"
	for step in "$work"/*.sh; do
		[ "$step" = "$runner" ] && continue
		n=$(basename "$step" .sh)
		sed -i -e "s|http://127.0.0.1:8080|http://$(esc "$addr")|g" -e "s|dev-admin-key|$(esc "$key")|g" "$step"
		tries=1
		grep -qE '^[[:space:]]*sleep ' "$step" && tries=$retries
		echo "for try in \$(seq $tries); do { . $(printf '%q' "$step"); } > $(printf '%q' "${step%.sh}.actual") 2> $(printf '%q' "${step%.sh}.stderr") || true; same $n && break; done"
	done
} > "$runner"
WALKTHROUGH_WORK=$work FERRY_ADDR=$addr FERRY_ADMIN_KEY=$key bash "$runner"

# 4. Report.
. "$lib"
export WALKTHROUGH_WORK=$work
failed=0
for expected in "$work"/*.expected; do
	n=$(basename "$expected" .expected)
	same "$n" && ok=1 || ok=0
	if [ "$ok" = 1 ]; then
		echo "walkthrough step $n: ok"
		if [ "${WALKTHROUGH_SHOW:-}" = 1 ]; then sed 's/^/    /' "$work/$n.actual"; fi
	else
		failed=1
		echo "walkthrough step $n: the answer differs from the document's" >&2
		echo "--- the command" >&2; cat "$work/$n.sh" >&2
		echo "--- the document's answer (masked)" >&2; cat "$work/$n.want" >&2
		echo "--- this stack's answer (masked)" >&2; cat "$work/$n.got" >&2
		if [ -s "$work/$n.stderr" ]; then echo "--- its standard error" >&2; cat "$work/$n.stderr" >&2; fi
	fi
done
if [ "$failed" = 1 ]; then
	exit 1
fi
echo "walkthrough: every answer is the document's ($steps steps against http://$addr)"
