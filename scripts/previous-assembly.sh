#!/usr/bin/env bash
# scripts/previous-assembly.sh STAGE OUTDIR: synthesizes, into OUTDIR, the stack of STAGE as the
# previous release defined it, for the upgrade rehearsal (make deploy-rehearsal). The previous
# release is the newest tag reachable from HEAD^ if there is one, else HEAD's first parent: on
# main, the commit before this one. It is checked out in a temporary worktree and synthesized
# without bundling (the upgrade deploys its functions but never runs them). Prints the commit.
set -euo pipefail
stage=$1
outdir=$2
cd "$(dirname "$0")/.."

if base=$(git describe --tags --abbrev=0 HEAD^ 2>/dev/null); then
	what="tag $base"
elif base=$(git rev-parse --verify --quiet HEAD^); then
	what="the previous commit"
else
	echo "no previous release: HEAD has no parent and no tag" >&2
	exit 1
fi
commit=$(git rev-parse --short "$base")

work=$(mktemp -d -t ferry-previous.XXXXXX)
cleanup() {
	git worktree remove --force "$work/src" >/dev/null 2>&1 || rm -rf "$work/src"
	rm -rf "$work"
}
trap cleanup EXIT
git worktree add --quiet --detach "$work/src" "$base"

rm -rf "$outdir"
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
(
	cd "$work/src"
	CDK_CONTEXT_JSON="{\"stage\":\"$stage\",\"aws:cdk:bundling-stacks\":[]}" CDK_OUTDIR="$outdir" \
		JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 go run ./infra
)
echo "previous release: $what ($commit), synthesized into $outdir"
