#!/usr/bin/env bash
# scripts/judge-template.sh TEMPLATE...: judges each synthesized CloudFormation template with two
# programs nobody here wrote, pinned in _tools/python: AWS's cfn-lint (with the serverless rules of
# cfn-lint-serverless) and checkov. Any finding, error or warning, that the template does not
# accept on the resource itself (Metadata: checkov skip with a comment, cfn-lint ignore_checks
# with ignore_reasons; infra/judges.go writes both) fails the run. `make judge-template` runs it
# on the dev and prod templates; TestJudges_EveryAcceptedFindingHasAReason (infra/) holds that
# every accepted finding says why.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cfnlint=${FERRY_CFN_LINT:-$here/_tools/venv-cfn-lint/bin/cfn-lint}
checkov=${FERRY_CHECKOV:-$here/_tools/venv-checkov/bin/checkov}

if [ $# -eq 0 ]; then
	echo "usage: $0 TEMPLATE..." >&2
	exit 2
fi

lint_version=$("$cfnlint" --version | awk '{print $2}')
checkov_version=$("$checkov" --version)
status=0
for template in "$@"; do
	echo "== $template"
	# cfn-lint exits non-zero on any error (2), warning (4) or informational finding (8).
	if "$cfnlint" --format parseable --append-rules cfn_lint_serverless.rules -- "$template"; then
		echo "cfn-lint $lint_version: no finding"
	else
		echo "cfn-lint: the findings above are neither fixed nor accepted on their resources (infra/judges.go)" >&2
		status=1
	fi
	# checkov would fetch its guidelines from its vendor's API; --skip-download keeps it offline.
	if out=$("$checkov" --file "$template" --framework cloudformation --compact --quiet --skip-download 2>&1); then
		echo "checkov $checkov_version: $(grep -E '^Passed checks' <<<"$out")"
	else
		echo "$out"
		echo "checkov: the failed checks above are neither fixed nor accepted on their resources (infra/judges.go)" >&2
		status=1
	fi
done
exit $status
