package main

import (
	"sort"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// The synthesized template is judged in CI by two programs nobody here wrote: AWS's cfn-lint
// (with the serverless rules) and checkov. A finding is either fixed in this app or accepted on
// the resource it is about, in the resource's Metadata, with the reason in words; an accepted
// finding without a reason, or a new finding accepted nowhere, fails CI
// (scripts/judge-template.sh, TestJudges_EveryAcceptedFindingHasAReason).

// Metadata keys each judge reads.
const (
	// checkovMetadata holds {"skip": [{"id": rule, "comment": reason}]}.
	checkovMetadata = "checkov"
	// cfnLintMetadata holds {"config": {"ignore_checks": [rule], "ignore_reasons": {rule: reason}}};
	// cfn-lint reads ignore_checks and leaves the reasons to the reader.
	cfnLintMetadata = "cfn-lint"
)

// minReasonWords keeps a reason a sentence, not a placeholder.
const minReasonWords = 6

// Reasons shared by many resources, so each one reads the same wherever it is accepted.
const (
	reasonNoVPC = "Ferry's functions reach only AWS APIs and the providers' public HTTPS endpoints; " +
		"a VPC would need a NAT gateway (about $32 a month each, plus $0.045 per GB) to reach Stripe and Kinde, and would protect no private resource"
	reasonEnvNotSecret = "The environment holds resource names, settings and secret ARNs, never a secret (secrets are read from Secrets Manager at start); " +
		"Lambda encrypts it at rest with its service key already"
	reasonLogsServiceKey = "CloudWatch Logs encrypts every log group at rest with its service key; " +
		"the logs carry account and event ids, never payloads or credentials, and a customer key would cost $1 a month plus a key policy for the logs service"
	reasonNoXRay = "The functions carry no X-Ray SDK, so a trace would show only Lambda's own segments, which the REPORT log lines and the Duration metric already give; " +
		"tracing costs $5 per million traces recorded"
	reasonLoggingConfig = "The function logs to its own log group (LoggingConfig.LogGroup, with RetentionInDays set), " +
		"not to /aws/lambda/<name>, which is the only group this rule looks for"
	reasonCDKDependsOn = "CDK adds the role to DependsOn beside the GetAtt so the role's policy exists before the function; " +
		"the redundancy is harmless and not ours to remove"
	reasonSyncInvocation = "Invoked synchronously (API Gateway, or the SQS event source whose queue has its own redrive policy), " +
		"so a Lambda dead-letter queue, which serves asynchronous invocations only, would never receive anything"
	reasonNoCapAPI = "An HTTP function serves every account: a function-wide cap would refuse all accounts at once when one is busy; " +
		"the API stage's throttle (apiRateLimit, apiBurstLimit) bounds the rate, and each account's budget row is protected by its own conditional transaction"
	reasonNoCapConsumer = "Bounded by the SQS event source's MaximumConcurrency (consumerMaxConcurrency), which protects the budget rows; " +
		"reserved concurrency on an SQS consumer throttles receives, and throttled receives count toward maxReceiveCount, sending events to the dead-letter queue unprocessed"
	reasonNoCapSweep = "A sweep runs well inside its one-minute schedule and every write it makes is conditioned on the row's revision, so an overlap is safe; " +
		"a cap of one would turn a rare overlap into a Throttles alarm"
	reasonDynamoManagedKey = "Encrypted with the AWS managed key (aws/dynamodb): usage counts need no key of their own, " +
		"and a customer key costs $1 a month per table and a key policy every reading role must be added to"
	reasonSecretManagedKey = "Encrypted with the AWS managed key (aws/secretsmanager); a customer key costs $1 a month " +
		"and kms:Decrypt on every reading role, and protects nothing the managed key and the per-secret grants do not"
	reasonSQSManagedSSE = "Encrypted at rest with SSE-SQS (SqsManagedSseEnabled: true); this rule accepts only a KMS key, " +
		"which would add a KMS request per batch and kms grants on every sender and consumer for no further protection"
	reasonDLQOfDLQ               = "This is a dead-letter queue: what lands here stays, and its depth alarm fires; a dead-letter queue of its own would only hide it"
	reasonSQSSourceNoDestination = "SQS event sources take no on-failure destination (only stream and Kafka sources do); " +
		"the queue's redrive policy sends a message to its dead-letter queue after maxReceiveCount receives"
	reasonArchiveAccessLogs = "The functions are the archive's only readers and writers, under roles that name it; " +
		"server access logs would need a second bucket and are best-effort; CloudTrail data events are the audit trail where one is required"
)

// accepted collects the findings accepted on each resource, written to the resources' Metadata
// by write once the stack is complete (CDK's AddMetadata replaces a key, so every finding of a
// resource must be written at once).
type accepted struct {
	paths  []string
	byPath map[string]*acceptedOn
}

type acceptedOn struct {
	res     awscdk.CfnResource
	reasons map[string]string // rule → reason
}

func newAccepted() *accepted { return &accepted{byPath: map[string]*acceptedOn{}} }

// accept records that a judge's rule does not apply to the construct's CloudFormation resource,
// with why. c is a CfnResource or an L2 construct whose default child is one.
func (a *accepted) accept(c constructs.IConstruct, rule, reason string) {
	res := cfnResource(c)
	path := *res.Node().Path()
	on, ok := a.byPath[path]
	if !ok {
		on = &acceptedOn{res: res, reasons: map[string]string{}}
		a.byPath[path] = on
		a.paths = append(a.paths, path)
	}
	on.reasons[rule] = reason
}

// cfnResource returns the CloudFormation resource behind a construct.
func cfnResource(c constructs.IConstruct) awscdk.CfnResource {
	if res, ok := c.(awscdk.CfnResource); ok {
		return res
	}
	return c.Node().DefaultChild().(awscdk.CfnResource)
}

// write puts every accepted finding in its resource's Metadata, for the judge that reports it:
// checkov's rules are named CKV_…, the others are cfn-lint's.
func (a *accepted) write() {
	for _, path := range a.paths {
		on := a.byPath[path]
		rules := make([]string, 0, len(on.reasons))
		for rule := range on.reasons {
			rules = append(rules, rule)
		}
		sort.Strings(rules)
		var skips []any
		var ignore []any
		reasons := map[string]any{}
		for _, rule := range rules {
			if strings.HasPrefix(rule, "CKV") {
				skips = append(skips, map[string]any{"id": rule, "comment": on.reasons[rule]})
			} else {
				ignore = append(ignore, rule)
				reasons[rule] = on.reasons[rule]
			}
		}
		if len(skips) > 0 {
			on.res.AddMetadata(jsii.String(checkovMetadata), map[string]any{"skip": skips})
		}
		if len(ignore) > 0 {
			on.res.AddMetadata(jsii.String(cfnLintMetadata), map[string]any{"config": map[string]any{
				"ignore_checks": ignore, "ignore_reasons": reasons,
			}})
		}
	}
}
