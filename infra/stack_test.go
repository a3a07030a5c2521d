package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// These tests walk the definition lists, so a table, queue, bucket, function, route or alarm
// added to internal/platform/resources or internal/platform/metrics is checked here with no change to the tests.

func keySchema(pk resources.Attribute, sk *resources.Attribute) []any {
	keys := []any{object{"AttributeName": pk.Name, "KeyType": "HASH"}}
	if sk != nil {
		keys = append(keys, object{"AttributeName": sk.Name, "KeyType": "RANGE"})
	}
	return keys
}

func TestTables_MatchTheirDefinitions(t *testing.T) {
	s := synthStage(t, dev)
	for _, table := range resources.Tables {
		t.Run(table.Logical, func(t *testing.T) { assertTable(t, s, table) })
	}
	check(t, func() {
		s.tmpl.ResourceCountIs(jsii.String("AWS::DynamoDB::Table"), jsii.Number(len(resources.Tables)))
	})
}

func assertTable(t *testing.T, s *synthesized, table resources.Table) {
	t.Helper()
	want := object{
		"TableName":                        resources.PhysicalName(s.cfg.Prefix(), table.Logical),
		"KeySchema":                        keySchema(table.PartitionKey, table.SortKey),
		"BillingMode":                      "PAY_PER_REQUEST",
		"PointInTimeRecoverySpecification": object{"PointInTimeRecoveryEnabled": true},
		"SSESpecification":                 object{"SSEEnabled": true},
	}
	if table.TTLAttribute != "" {
		want["TimeToLiveSpecification"] = object{"AttributeName": table.TTLAttribute, "Enabled": true}
	} else {
		want["TimeToLiveSpecification"] = assertions.Match_Absent()
	}
	if len(table.Indexes) == 0 {
		want["GlobalSecondaryIndexes"] = assertions.Match_Absent()
	} else {
		var indexes []any
		for _, ix := range table.Indexes {
			projection := "KEYS_ONLY"
			if ix.ProjectAll {
				projection = "ALL"
			}
			indexes = append(indexes, like(object{
				"IndexName":  ix.Name,
				"KeySchema":  keySchema(ix.PartitionKey, ix.SortKey),
				"Projection": object{"ProjectionType": projection},
			}))
		}
		want["GlobalSecondaryIndexes"] = arrayWith(indexes...)
	}
	check(t, func() { s.tmpl.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), like(want)) })
}

// statefulTypes are the resources that hold data or evidence.
var statefulTypes = []string{
	"AWS::DynamoDB::Table", "AWS::SQS::Queue", "AWS::S3::Bucket", "AWS::SecretsManager::Secret", "AWS::Logs::LogGroup",
}

func TestStatefulResources_RetainedAndProtectedOutsideDev(t *testing.T) {
	s := synthStage(t, prod)
	for _, typ := range statefulTypes {
		for id, r := range s.resourcesOfType(typ) {
			if r["DeletionPolicy"] != "Retain" || r["UpdateReplacePolicy"] != "Retain" {
				t.Errorf("%s %s: DeletionPolicy %v, UpdateReplacePolicy %v; want Retain in stage prod", typ, id, r["DeletionPolicy"], r["UpdateReplacePolicy"])
			}
		}
	}
	for _, table := range resources.Tables {
		check(t, func() {
			s.tmpl.HasResource(jsii.String("AWS::DynamoDB::Table"), like(object{
				"Properties":     like(object{"TableName": resources.PhysicalName(s.cfg.Prefix(), table.Logical), "DeletionProtectionEnabled": true}),
				"DeletionPolicy": "Retain",
			}))
		})
	}
}

func TestStatefulResources_DestroyedInDev(t *testing.T) {
	s := synthStage(t, dev)
	for _, typ := range statefulTypes {
		for id, r := range s.resourcesOfType(typ) {
			if r["DeletionPolicy"] != "Delete" {
				t.Errorf("%s %s: DeletionPolicy %v; want Delete in stage dev", typ, id, r["DeletionPolicy"])
			}
		}
	}
	for id, r := range s.resourcesOfType("AWS::DynamoDB::Table") {
		if props(r)["DeletionProtectionEnabled"] != false {
			t.Errorf("table %s: deletion protection on in stage dev", id)
		}
	}
}

func TestQueues_MatchTheirDefinitionsWithDeadLetterQueues(t *testing.T) {
	s := synthStage(t, dev)
	for _, q := range resources.Queues {
		t.Run(q.Logical, func(t *testing.T) {
			dlqID := s.id(t, "AWS::SQS::Queue", object{
				"QueueName":              resources.PhysicalName(s.cfg.Prefix(), q.DLQLogical()),
				"MessageRetentionPeriod": q.DLQRetention.Seconds(),
				"SqsManagedSseEnabled":   true,
			})
			check(t, func() {
				s.tmpl.HasResourceProperties(jsii.String("AWS::SQS::Queue"), like(object{
					"QueueName":              resources.PhysicalName(s.cfg.Prefix(), q.Logical),
					"VisibilityTimeout":      q.VisibilityTimeout.Seconds(),
					"MessageRetentionPeriod": q.Retention.Seconds(),
					"SqsManagedSseEnabled":   true,
					"RedrivePolicy": object{
						"deadLetterTargetArn": object{"Fn::GetAtt": []any{dlqID, "Arn"}},
						"maxReceiveCount":     q.MaxReceiveCount,
					},
				}))
			})
		})
	}
	check(t, func() {
		// Each queue, its dead-letter queue, and the failed-runs queue of the scheduled functions.
		s.tmpl.ResourceCountIs(jsii.String("AWS::SQS::Queue"), jsii.Number(2*len(resources.Queues)+1))
	})
}

// TestQueues_TLSOnly checks every queue refuses requests that are not over TLS.
func TestQueues_TLSOnly(t *testing.T) {
	s := synthStage(t, dev)
	for id := range s.resourcesOfType("AWS::SQS::Queue") {
		check(t, func() {
			s.tmpl.HasResourceProperties(jsii.String("AWS::SQS::QueuePolicy"), like(object{
				"Queues": []any{object{"Ref": id}},
				"PolicyDocument": like(object{"Statement": arrayWith(like(object{
					"Effect":    "Deny",
					"Condition": object{"Bool": object{"aws:SecureTransport": "false"}},
				}))}),
			}))
		})
	}
}

// TestQueues_VisibilityAtLeastSixTimesConsumerTimeout reads both numbers from the template, so
// it holds whatever the definitions say.
func TestQueues_VisibilityAtLeastSixTimesConsumerTimeout(t *testing.T) {
	s := synthStage(t, dev)
	consumed := 0
	for _, mapping := range s.resourcesOfType("AWS::Lambda::EventSourceMapping") {
		p := props(mapping)
		queue := s.json["Resources"].(object)[refs(p["EventSourceArn"])[0]].(object)
		fn := s.json["Resources"].(object)[refs(p["FunctionName"])[0]].(object)
		visibility := props(queue)["VisibilityTimeout"].(float64)
		timeout := props(fn)["Timeout"].(float64)
		if visibility < 6*timeout {
			t.Errorf("queue %v: visibility timeout %vs is less than 6 x %vs, the timeout of %v", props(queue)["QueueName"], visibility, timeout, props(fn)["FunctionName"])
		}
		consumed++
	}
	if consumed == 0 {
		t.Fatal("no queue event source in the template")
	}
}

func TestEventSources_ReportBatchItemFailures(t *testing.T) {
	s := synthStage(t, dev)
	pairs := 0
	for _, f := range resources.Functions {
		for _, q := range resources.Queues {
			if !f.Queues[q.Logical].Consumes() {
				continue
			}
			pairs++
			fnID := s.id(t, "AWS::Lambda::Function", object{"FunctionName": resources.PhysicalName(s.cfg.Prefix(), f.Name)})
			queueID := s.id(t, "AWS::SQS::Queue", object{"QueueName": resources.PhysicalName(s.cfg.Prefix(), q.Logical)})
			check(t, func() {
				s.tmpl.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), like(object{
					"FunctionName":                   object{"Ref": fnID},
					"EventSourceArn":                 object{"Fn::GetAtt": []any{queueID, "Arn"}},
					"FunctionResponseTypes":          []any{"ReportBatchItemFailures"},
					"BatchSize":                      resources.EventSourceBatchSize,
					"MaximumBatchingWindowInSeconds": int(resources.EventSourceBatchingWindow.Seconds()),
					"ScalingConfig":                  object{"MaximumConcurrency": s.cfg.ConsumerMaxConcurrency},
				}))
			})
		}
	}
	check(t, func() {
		s.tmpl.ResourceCountIs(jsii.String("AWS::Lambda::EventSourceMapping"), jsii.Number(pairs))
	})
}

func bucketID(t *testing.T, s *synthesized, logical string) string {
	t.Helper()
	out, ok := s.json["Outputs"].(object)["Bucket"+pascal(logical)].(object)
	if !ok {
		t.Fatalf("no output for bucket %q", logical)
	}
	return refs(out["Value"])[0]
}

func TestBuckets_PrivateEncryptedTLSOnlyNeverExpiring(t *testing.T) {
	s := synthStage(t, dev)
	for _, b := range resources.Buckets {
		t.Run(b.Logical, func(t *testing.T) {
			id := bucketID(t, s, b.Logical)
			bucket := s.json["Resources"].(object)[id].(object)
			check(t, func() {
				assertions.Template_FromJSON(obj(object{"Resources": object{id: bucket}}), nil).HasResourceProperties(jsii.String("AWS::S3::Bucket"), like(object{
					"PublicAccessBlockConfiguration": object{
						"BlockPublicAcls": true, "BlockPublicPolicy": true, "IgnorePublicAcls": true, "RestrictPublicBuckets": true,
					},
					"BucketEncryption": object{"ServerSideEncryptionConfiguration": arrayWith(like(object{
						"ServerSideEncryptionByDefault": object{"SSEAlgorithm": "AES256"},
					}))},
					"LifecycleConfiguration": like(object{"Rules": arrayWith(like(object{
						"Status": "Enabled",
						"Transitions": []any{
							object{"StorageClass": "STANDARD_IA", "TransitionInDays": s.cfg.ArchiveIADays},
							object{"StorageClass": "GLACIER_IR", "TransitionInDays": s.cfg.ArchiveGlacierDays},
						},
					}))}),
				}))
			})
			for _, rule := range list(props(bucket)["LifecycleConfiguration"].(object)["Rules"]) {
				if _, ok := rule.(object)["ExpirationInDays"]; ok {
					t.Errorf("lifecycle rule %v expires objects; the archive must be kept unless archiveExpireDays is set", rule.(object)["Id"])
				}
			}
			check(t, func() {
				s.tmpl.HasResourceProperties(jsii.String("AWS::S3::BucketPolicy"), like(object{
					"Bucket": object{"Ref": id},
					"PolicyDocument": like(object{"Statement": arrayWith(like(object{
						"Effect":    "Deny",
						"Action":    "s3:*",
						"Condition": object{"Bool": object{"aws:SecureTransport": "false"}},
					}))}),
				}))
			})
		})
	}
	check(t, func() {
		s.tmpl.ResourceCountIs(jsii.String("AWS::S3::Bucket"), jsii.Number(len(resources.Buckets)))
	})
}

func TestBuckets_ExpireOnlyWhenConfigured(t *testing.T) {
	s := synthStage(t, map[string]any{ctxArchiveExpireDays: "400"})
	for _, b := range resources.Buckets {
		id := bucketID(t, s, b.Logical)
		rules := list(props(s.json["Resources"].(object)[id].(object))["LifecycleConfiguration"].(object)["Rules"])
		if len(rules) != 1 || rules[0].(object)["ExpirationInDays"] != 400.0 {
			t.Errorf("bucket %s: rules %v; want objects to expire after 400 days", b.Logical, rules)
		}
	}
}

// The archive is versioned in every stage, dev included (where a bug first overwrites it), and
// overwritten or deleted versions expire after archiveNoncurrentDays.
func TestBuckets_VersionedInEveryStage(t *testing.T) {
	for name, ctx := range map[string]map[string]any{"dev": dev, "prod": prod} {
		s := synthStage(t, ctx)
		for _, b := range resources.Buckets {
			t.Run(name+" "+b.Logical, func(t *testing.T) {
				id := bucketID(t, s, b.Logical)
				bucket := s.json["Resources"].(object)[id].(object)
				check(t, func() {
					assertions.Template_FromJSON(obj(object{"Resources": object{id: bucket}}), nil).HasResourceProperties(jsii.String("AWS::S3::Bucket"), like(object{
						"VersioningConfiguration": object{"Status": "Enabled"},
						"LifecycleConfiguration": like(object{"Rules": arrayWith(like(object{
							"NoncurrentVersionExpiration": object{"NoncurrentDays": s.cfg.ArchiveNoncurrentDays},
						}))}),
					}))
				})
			})
		}
	}
}

func functionID(t *testing.T, s *synthesized, name string) string {
	t.Helper()
	return s.id(t, "AWS::Lambda::Function", object{"FunctionName": resources.PhysicalName(s.cfg.Prefix(), name)})
}

func TestFunctions_MatchTheirDefinitions(t *testing.T) {
	s := synthStage(t, dev)
	for _, f := range resources.Functions {
		t.Run(f.Name, func(t *testing.T) {
			want := object{
				"FunctionName":  resources.PhysicalName(s.cfg.Prefix(), f.Name),
				"Runtime":       "provided.al2023",
				"Architectures": []any{"arm64"},
				"Handler":       "bootstrap",
				"Timeout":       f.Timeout.Seconds(),
				"MemorySize":    f.MemoryMB,
			}
			if f.ReservedConcurrency > 0 {
				want["ReservedConcurrentExecutions"] = f.ReservedConcurrency
			} else {
				want["ReservedConcurrentExecutions"] = assertions.Match_Absent()
			}
			check(t, func() { s.tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), like(want)) })

			fn := props(s.json["Resources"].(object)[functionID(t, s, f.Name)].(object))
			logs := s.json["Resources"].(object)[refs(fn["LoggingConfig"])[0]].(object)
			if logs["Type"] != "AWS::Logs::LogGroup" || props(logs)["RetentionInDays"] != float64(s.cfg.LogRetentionDays) {
				t.Errorf("log group %v; want one with RetentionInDays %d", logs, s.cfg.LogRetentionDays)
			}
		})
	}
	check(t, func() {
		s.tmpl.ResourceCountIs(jsii.String("AWS::Lambda::Function"), jsii.Number(len(resources.Functions)))
	})
}

// TestFunctions_EnvironmentCarriesExactlyTheGrant proves every function can start — the stack
// sets every variable resources.GrantFromEnv requires — and that no function is told the name
// of a resource its entry does not grant (its role could not reach it in AWS).
func TestFunctions_EnvironmentCarriesExactlyTheGrant(t *testing.T) {
	s := synthStage(t, dev)
	secretID := s.id(t, "AWS::SecretsManager::Secret", object{"Name": resources.PhysicalName(s.cfg.Prefix(), "admin-key")})
	stripeSecretID := s.id(t, "AWS::SecretsManager::Secret", object{"Name": resources.PhysicalName(s.cfg.Prefix(), "stripe-webhook-secret")})
	for _, f := range resources.Functions {
		t.Run(f.Name, func(t *testing.T) {
			fn := props(s.json["Resources"].(object)[functionID(t, s, f.Name)].(object))
			env := fn["Environment"].(object)["Variables"].(object)
			if _, err := resources.GrantFromEnv(f, func(k string) (string, bool) {
				v, ok := env[k]
				return fmt.Sprint(v), ok && v != nil
			}); err != nil {
				t.Error(err)
			}
			for _, v := range ungrantedResourceVars(f) {
				if _, ok := env[v]; ok {
					t.Errorf("%s set on a function whose entry does not grant that resource", v)
				}
			}
			if env[resources.EnvLogLevel] != s.cfg.LogLevel {
				t.Errorf("%s = %v; want %q", resources.EnvLogLevel, env[resources.EnvLogLevel], s.cfg.LogLevel)
			}
			if _, ok := env[resources.EnvPlans]; ok {
				t.Errorf("%s set with no plansFile", resources.EnvPlans)
			}
			arn, ok := env[resources.EnvAdminKeySecretARN]
			readsAdminKey := contains(f.Secrets, resources.EnvAdminKeySecretARN)
			switch {
			case readsAdminKey && !(ok && refersTo(arn, secretID)):
				t.Errorf("%s = %v; want the operator key secret's ARN", resources.EnvAdminKeySecretARN, arn)
			case !readsAdminKey && ok:
				t.Errorf("%s set on a function whose definition does not list it", resources.EnvAdminKeySecretARN)
			}
			arn, ok = env[resources.EnvStripeWebhookSecretARN]
			readsStripe := contains(f.Secrets, resources.EnvStripeWebhookSecretARN)
			switch {
			case readsStripe && !(ok && refersTo(arn, stripeSecretID)):
				t.Errorf("%s = %v; want the Stripe webhook secret's ARN", resources.EnvStripeWebhookSecretARN, arn)
			case !readsStripe && ok:
				t.Errorf("%s set on a function whose definition does not list it", resources.EnvStripeWebhookSecretARN)
			}
		})
	}
}

func TestFunctions_PlansAndLogLevelFromContext(t *testing.T) {
	plans := writeFile(t, "plans.json", "{\n  \"free\": {\"events\": 1000}\n}\n")
	s := synthStage(t, map[string]any{ctxPlansFile: plans, ctxLogLevel: "debug"})
	for _, f := range resources.Functions {
		check(t, func() {
			s.tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), like(object{
				"FunctionName": resources.PhysicalName(s.cfg.Prefix(), f.Name),
				"Environment": object{"Variables": like(object{
					resources.EnvPlans:    `{"free":{"events":1000}}`,
					resources.EnvLogLevel: "debug",
				})},
			}))
		})
	}
}

// Access a function's role must have, by resource, exactly as the issue states it.
var (
	wantTableRead   = []string{"dynamodb:BatchGetItem", "dynamodb:ConditionCheckItem", "dynamodb:DescribeTable", "dynamodb:GetItem", "dynamodb:Query"}
	wantTableWrite  = []string{"dynamodb:BatchWriteItem", "dynamodb:DeleteItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}
	wantQueueSend   = []string{"sqs:SendMessage"}
	wantQueueRecv   = []string{"sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:ReceiveMessage"}
	wantBucketRead  = []string{"s3:GetObject", "s3:ListBucket"}
	wantBucketWrite = []string{"s3:PutObject"}
	wantSecretRead  = []string{"secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue"}
	wantLogsWrite   = []string{"logs:CreateLogStream", "logs:PutLogEvents"}
)

// roleStatements returns the Allow statements granted to a role, attached or inline. A role
// whose policy passes IAM's size limit for one policy gets the rest in an overflow managed
// policy of the CDK's, attached by its Roles like the default one, and as exact.
func (s *synthesized) roleStatements(roleID string) []object {
	var docs []any
	for _, typ := range []string{"AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"} {
		for _, p := range s.resourcesOfType(typ) {
			if refersTo(props(p)["Roles"], roleID) {
				docs = append(docs, props(p)["PolicyDocument"])
			}
		}
	}
	role := s.json["Resources"].(object)[roleID].(object)
	for _, p := range list(props(role)["Policies"]) {
		docs = append(docs, p.(object)["PolicyDocument"])
	}
	var out []object
	for _, d := range docs {
		for _, st := range list(d.(object)["Statement"]) {
			if st.(object)["Effect"] == "Allow" {
				out = append(out, st.(object))
			}
		}
	}
	return out
}

// actionsOn returns the actions a role's statements grant on a resource.
func actionsOn(statements []object, id string) []string {
	var actions []string
	for _, st := range statements {
		if refersTo(st["Resource"], id) {
			actions = append(actions, strs(st["Action"])...)
		}
	}
	return sortedSet(actions)
}

func TestIAM_EachFunctionGetsExactlyItsDefinedAccess(t *testing.T) {
	s := synthStage(t, dev)
	secretID := s.id(t, "AWS::SecretsManager::Secret", object{"Name": resources.PhysicalName(s.cfg.Prefix(), "admin-key")})
	stripeSecretID := s.id(t, "AWS::SecretsManager::Secret", object{"Name": resources.PhysicalName(s.cfg.Prefix(), "stripe-webhook-secret")})
	for _, f := range resources.Functions {
		t.Run(f.Name, func(t *testing.T) {
			fn := props(s.json["Resources"].(object)[functionID(t, s, f.Name)].(object))
			roleID := refs(fn["Role"])[0]
			if managed := props(s.json["Resources"].(object)[roleID].(object))["ManagedPolicyArns"]; managed != nil {
				t.Errorf("role has managed policies %v; every grant should name its resource", managed)
			}
			statements := s.roleStatements(roleID)
			want := map[string][]string{} // logical id → actions
			expect := func(id string, actions ...[]string) {
				var all []string
				for _, a := range actions {
					all = append(all, a...)
				}
				want[id] = sortedSet(all)
			}
			expect(refs(fn["LoggingConfig"])[0], wantLogsWrite)
			for _, table := range resources.Tables {
				id := s.id(t, "AWS::DynamoDB::Table", object{"TableName": resources.PhysicalName(s.cfg.Prefix(), table.Logical)})
				switch f.Tables[table.Logical] {
				case resources.Read:
					expect(id, wantTableRead)
				case resources.ReadWrite:
					expect(id, wantTableRead, wantTableWrite)
				default:
					expect(id)
				}
			}
			for _, q := range resources.Queues {
				id := s.id(t, "AWS::SQS::Queue", object{"QueueName": resources.PhysicalName(s.cfg.Prefix(), q.Logical)})
				switch f.Queues[q.Logical] {
				case resources.Send:
					expect(id, wantQueueSend)
				case resources.Consume:
					expect(id, wantQueueRecv)
				case resources.ConsumeAndSend:
					expect(id, wantQueueRecv, wantQueueSend)
				default:
					expect(id)
				}
				expect(s.id(t, "AWS::SQS::Queue", object{"QueueName": resources.PhysicalName(s.cfg.Prefix(), q.DLQLogical())}))
			}
			for _, b := range resources.Buckets {
				id := bucketID(t, s, b.Logical)
				switch f.Buckets[b.Logical] {
				case resources.Read:
					expect(id, wantBucketRead)
				case resources.ReadWrite:
					expect(id, wantBucketRead, wantBucketWrite)
				default:
					expect(id)
				}
			}
			if contains(f.Secrets, resources.EnvAdminKeySecretARN) {
				expect(secretID, wantSecretRead)
			} else {
				expect(secretID)
			}
			if contains(f.Secrets, resources.EnvStripeWebhookSecretARN) {
				expect(stripeSecretID, wantSecretRead)
			} else {
				expect(stripeSecretID)
			}
			// A scheduled function's failed runs go to the failed-runs queue, sent by Lambda with
			// the function's role.
			if failedRuns := s.id(t, "AWS::SQS::Queue", object{"QueueName": resources.PhysicalName(s.cfg.Prefix(), failedRunsLogical)}); f.Every > 0 {
				expect(failedRuns, wantQueueSend)
			} else {
				expect(failedRuns)
			}
			for id, actions := range want {
				if got := actionsOn(statements, id); strings.Join(got, " ") != strings.Join(actions, " ") {
					t.Errorf("on %s: actions %v; want %v", id, got, actions)
				}
			}
			// Nothing beyond the resources above.
			for _, st := range statements {
				for _, id := range refs(st["Resource"]) {
					if _, ok := want[id]; !ok {
						t.Errorf("statement %v reaches %s, which the definition does not list", st, id)
					}
				}
			}
		})
	}
}

// TestIAM_NoWildcards checks every Allow statement in the template, identity and resource
// policies alike: no "*" or "service:*" action, and no "*" resource.
func TestIAM_NoWildcards(t *testing.T) {
	for name, ctx := range map[string]map[string]any{"dev": dev, "prod": prod, "kinde": kindeContext(kindeSecretARN)} {
		s := synthStage(t, ctx)
		t.Run(name, func(t *testing.T) {
			var checked int
			for id, r := range s.json["Resources"].(object) {
				if r.(object)["Type"] == "AWS::KMS::Key" {
					// In a key policy "*" is the key itself, and the account's kms:* statement is
					// what lets IAM policies govern the key (KMS's default key policy).
					continue
				}
				for _, st := range allowStatements(r.(object)) {
					checked++
					for _, a := range strs(st["Action"]) {
						if a == "*" || strings.HasSuffix(a, ":*") {
							t.Errorf("%s: wildcard action %q in %v", id, a, st)
						}
					}
					for _, res := range list(st["Resource"]) {
						if res == "*" {
							t.Errorf("%s: wildcard resource in %v", id, st)
						}
					}
					if st["NotAction"] != nil || st["NotResource"] != nil {
						t.Errorf("%s: NotAction/NotResource in an Allow statement %v", id, st)
					}
				}
			}
			if checked == 0 {
				t.Fatal("no Allow statement found")
			}
		})
	}
}

// allowStatements returns the Allow statements of any policy document inside a resource.
func allowStatements(r object) []object {
	var out []object
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case object:
			if sts, ok := v["Statement"]; ok {
				for _, st := range list(sts) {
					if m, ok := st.(object); ok && m["Effect"] == "Allow" {
						out = append(out, m)
					}
				}
				return
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(props(r))
	return out
}

func TestSchedules_OnePerScheduledFunction(t *testing.T) {
	s := synthStage(t, dev)
	scheduled := 0
	for _, f := range resources.Functions {
		if f.Every <= 0 {
			continue
		}
		scheduled++
		assertSchedule(t, s, f)
	}
	check(t, func() {
		s.tmpl.ResourceCountIs(jsii.String("AWS::Scheduler::Schedule"), jsii.Number(scheduled))
	})
}

// rateExpression is the rate() expression for an interval, in the largest whole unit, as CDK
// writes it: rate(1 minute), rate(5 minutes), rate(2 hours), rate(1 day).
func rateExpression(every time.Duration) string {
	n, unit := int(every/time.Minute), "minute"
	switch {
	case every%(24*time.Hour) == 0:
		n, unit = int(every/(24*time.Hour)), "day"
	case every%time.Hour == 0:
		n, unit = int(every/time.Hour), "hour"
	}
	if n == 1 {
		return "rate(1 " + unit + ")"
	}
	return fmt.Sprintf("rate(%d %ss)", n, unit)
}

func assertSchedule(t *testing.T, s *synthesized, f resources.Function) {
	t.Helper()
	fnID := functionID(t, s, f.Name)
	check(t, func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::Scheduler::Schedule"), like(object{
			"ScheduleExpression": rateExpression(f.Every),
			"State":              "ENABLED",
			"Target":             like(object{"Arn": object{"Fn::GetAtt": []any{fnID, "Arn"}}}),
		}))
	})
}

func TestAPI_EveryRouteIntegratedWithItsFunction(t *testing.T) {
	s := synthStage(t, dev)
	check(t, func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Api"), like(object{"ProtocolType": "HTTP"}))
		// Every declared route, and $default.
		s.tmpl.ResourceCountIs(jsii.String("AWS::ApiGatewayV2::Route"), jsii.Number(len(resources.Routes)+1))
	})
	for _, r := range resources.Routes {
		t.Run(r.Method+" "+r.Path, func(t *testing.T) {
			assertRoute(t, s, r)
		})
	}
}

// Requests no route matches reach the function that answers them with problem documents.
func TestAPI_DefaultRouteGoesToTheDefaultFunction(t *testing.T) {
	s := synthStage(t, dev)
	fnID := functionID(t, s, resources.DefaultRouteFunction)
	routeID := s.id(t, "AWS::ApiGatewayV2::Route", object{"RouteKey": "$default"})
	route := props(s.json["Resources"].(object)[routeID].(object))
	integration := props(s.json["Resources"].(object)[refs(route["Target"])[0]].(object))
	if !refersTo(integration["IntegrationUri"], fnID) || integration["PayloadFormatVersion"] != "2.0" {
		t.Errorf("$default integration %v; want %s with payload format 2.0", integration, fnID)
	}
}

func assertRoute(t *testing.T, s *synthesized, r resources.Route) {
	t.Helper()
	fnID := functionID(t, s, r.Function)
	routeID := s.id(t, "AWS::ApiGatewayV2::Route", object{"RouteKey": r.Method + " " + r.Path})
	route := props(s.json["Resources"].(object)[routeID].(object))
	if !strings.HasPrefix(flatJoin(route["Target"]), "integrations/") {
		t.Fatalf("route target %v is not an integration", route["Target"])
	}
	integration := props(s.json["Resources"].(object)[refs(route["Target"])[0]].(object))
	if !refersTo(integration["IntegrationUri"], fnID) || integration["PayloadFormatVersion"] != "2.0" || integration["IntegrationType"] != "AWS_PROXY" {
		t.Errorf("integration %v; want AWS_PROXY to %s with payload format 2.0", integration, fnID)
	}
	// API Gateway may invoke the function for this route.
	found := false
	for _, p := range s.resourcesOfType("AWS::Lambda::Permission") {
		pp := props(p)
		if refersTo(pp["FunctionName"], fnID) && pp["Principal"] == "apigateway.amazonaws.com" &&
			strings.HasSuffix(flatJoin(pp["SourceArn"]), r.Path) {
			found = true
		}
	}
	if !found {
		t.Errorf("no permission for API Gateway to invoke %s on %s", r.Function, r.Path)
	}
}

func TestAPI_DefaultStageThrottledWithJSONAccessLogs(t *testing.T) {
	s := synthStage(t, map[string]any{ctxAPIRateLimit: "25", ctxAPIBurstLimit: 50.0})
	stageID := s.id(t, "AWS::ApiGatewayV2::Stage", object{
		"StageName":  "$default",
		"AutoDeploy": true,
		"DefaultRouteSettings": object{
			"ThrottlingRateLimit":  25,
			"ThrottlingBurstLimit": 50,
		},
	})
	logs := props(s.json["Resources"].(object)[stageID].(object))["AccessLogSettings"].(object)
	group := s.json["Resources"].(object)[refs(logs["DestinationArn"])[0]].(object)
	if group["Type"] != "AWS::Logs::LogGroup" {
		t.Errorf("access logs go to %v; want a log group", group["Type"])
	}
	var format map[string]string
	if err := json.Unmarshal([]byte(logs["Format"].(string)), &format); err != nil {
		t.Fatalf("access log format is not JSON: %v", err)
	}
	for _, field := range []string{"requestId", "ip", "routeKey", "status", "latency", "integrationError"} {
		if !strings.HasPrefix(format[field], "$context.") {
			t.Errorf("access log field %q = %q; want a $context variable", field, format[field])
		}
	}
}

func TestAPI_ThrottlingDefaults(t *testing.T) {
	s := synthStage(t, dev)
	check(t, func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Stage"), like(object{
			"DefaultRouteSettings": object{
				"ThrottlingRateLimit":  defaultAPIRateLimit,
				"ThrottlingBurstLimit": defaultAPIBurstLimit,
			},
		}))
	})
}

func topicID(t *testing.T, s *synthesized) string {
	t.Helper()
	topics := s.resourcesOfType("AWS::SNS::Topic")
	if len(topics) != 1 {
		t.Fatalf("%d SNS topics; want 1", len(topics))
	}
	for id := range topics {
		return id
	}
	return ""
}

func TestAlarms_EveryDefinedAlarmNotifiesTheTopic(t *testing.T) {
	s := synthStage(t, dev)
	topic := object{"Ref": topicID(t, s)}
	alarm := func(want object) {
		t.Helper()
		want["AlarmActions"] = arrayWith(topic)
		want["EvaluationPeriods"] = 1
		want["TreatMissingData"] = "notBreaching"
		check(t, func() { s.tmpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), like(want)) })
	}
	for _, q := range resources.Queues {
		dlqID := s.id(t, "AWS::SQS::Queue", object{"QueueName": resources.PhysicalName(s.cfg.Prefix(), q.DLQLogical())})
		alarm(object{
			"Namespace":          "AWS/SQS",
			"MetricName":         "ApproximateNumberOfMessagesVisible",
			"Dimensions":         []any{object{"Name": "QueueName", "Value": object{"Fn::GetAtt": []any{dlqID, "QueueName"}}}},
			"Threshold":          0,
			"ComparisonOperator": "GreaterThanThreshold",
		})
	}
	for _, a := range metrics.Alarms {
		alarm(object{
			"Namespace":          metrics.Namespace,
			"MetricName":         a.Metric,
			"Statistic":          "Sum",
			"Period":             60,
			"Threshold":          a.Threshold,
			"ComparisonOperator": "GreaterThanOrEqualToThreshold",
			"AlarmDescription":   a.Description,
		})
	}
	for _, f := range resources.Functions {
		fnID := functionID(t, s, f.Name)
		for _, metric := range []string{"Errors", "Throttles"} {
			alarm(object{
				"Namespace":          "AWS/Lambda",
				"MetricName":         metric,
				"Dimensions":         []any{object{"Name": "FunctionName", "Value": object{"Ref": fnID}}},
				"Statistic":          "Sum",
				"ComparisonOperator": "GreaterThanOrEqualToThreshold",
			})
		}
	}
	// One per dead-letter queue (the failed-runs queue's too), metric and function.
	want := len(resources.Queues) + 1 + len(metrics.Alarms) + 2*len(resources.Functions)
	check(t, func() {
		s.tmpl.ResourceCountIs(jsii.String("AWS::CloudWatch::Alarm"), jsii.Number(want))
		// Whatever its kind, every alarm in the template notifies the topic.
		s.tmpl.AllResourcesProperties(jsii.String("AWS::CloudWatch::Alarm"), like(object{"AlarmActions": arrayWith(topic)}))
	})
}

func TestAlarms_EmailSubscriptionOnlyWhenConfigured(t *testing.T) {
	check(t, func() {
		synthStage(t, dev).tmpl.ResourceCountIs(jsii.String("AWS::SNS::Subscription"), jsii.Number(0))
	})
	s := synthStage(t, map[string]any{ctxAlarmEmail: "ops@example.com"})
	check(t, func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::SNS::Subscription"), like(object{
			"Protocol": "email",
			"Endpoint": "ops@example.com",
			"TopicArn": object{"Ref": topicID(t, s)},
		}))
	})
}

// stackCreatedSecrets are the secrets the stack owns: the operator key and the Stripe webhook
// signing secret.
const stackCreatedSecrets = 2

func TestSecret_GeneratedOperatorKey(t *testing.T) {
	s := synthStage(t, dev)
	check(t, func() {
		s.tmpl.ResourceCountIs(jsii.String("AWS::SecretsManager::Secret"), jsii.Number(stackCreatedSecrets))
		s.tmpl.HasResourceProperties(jsii.String("AWS::SecretsManager::Secret"), like(object{
			"Name":                 resources.PhysicalName(s.cfg.Prefix(), "admin-key"),
			"GenerateSecretString": like(object{"PasswordLength": adminKeyLength, "ExcludePunctuation": true}),
		}))
	})
}

// The Stripe webhook signing secret lives in Secrets Manager, created by the stack with a random
// value (which verifies no Stripe signature) for the operator to replace, and only the webhooks
// function may read it.
func TestSecret_StripeWebhookSecretForTheOperatorToFill(t *testing.T) {
	s := synthStage(t, prod)
	check(t, func() {
		s.tmpl.HasResource(jsii.String("AWS::SecretsManager::Secret"), like(object{
			"Properties": like(object{
				"Name":                 resources.PhysicalName(s.cfg.Prefix(), "stripe-webhook-secret"),
				"GenerateSecretString": like(object{"ExcludePunctuation": true}),
			}),
			"DeletionPolicy": "Retain",
		}))
	})
	id := s.id(t, "AWS::SecretsManager::Secret", object{"Name": resources.PhysicalName(s.cfg.Prefix(), "stripe-webhook-secret")})
	var readers []string
	for _, f := range resources.Functions {
		fn := props(s.json["Resources"].(object)[functionID(t, s, f.Name)].(object))
		if len(actionsOn(s.roleStatements(refs(fn["Role"])[0]), id)) > 0 {
			readers = append(readers, f.Name)
		}
	}
	if strings.Join(readers, " ") != resources.FunctionWebhooks {
		t.Errorf("functions that may read the Stripe webhook secret: %v; want only %s", readers, resources.FunctionWebhooks)
	}
	if _, ok := s.json["Outputs"].(object)["StripeWebhookSecretArn"]; !ok {
		t.Error("no StripeWebhookSecretArn output to tell the operator where the secret goes")
	}
}

// The webhook routes have no authorizer: the provider's signature is their authentication, and
// the function checks it before anything is stored. No route of the API has one.
func TestAPI_WebhookRoutesHaveNoAuthorizer(t *testing.T) {
	s := synthStage(t, dev)
	check(t, func() {
		s.tmpl.ResourceCountIs(jsii.String("AWS::ApiGatewayV2::Authorizer"), jsii.Number(0))
	})
	found := 0
	for id, r := range s.resourcesOfType("AWS::ApiGatewayV2::Route") {
		p := props(r)
		key, _ := p["RouteKey"].(string)
		if !strings.Contains(key, "/v1/webhooks/") {
			continue
		}
		found++
		if auth, ok := p["AuthorizationType"]; ok && auth != "NONE" {
			t.Errorf("route %s (%s): AuthorizationType %v; want none", id, key, auth)
		}
	}
	if found != 2 {
		t.Errorf("%d webhook routes in the template; want 2 (Kinde, Stripe)", found)
	}
}

// The webhooks function gets Kinde's key URL from kindeWebhookJwksUrl, or derives it from
// kindeDomain; the inbox worker gets the re-fetch settings only when stripeRefetch is on.
func TestFunctions_InboxSettingsFromContext(t *testing.T) {
	envOf := func(s *synthesized, name string) object {
		fn := props(s.json["Resources"].(object)[functionID(t, s, name)].(object))
		return fn["Environment"].(object)["Variables"].(object)
	}
	s := synthStage(t, dev)
	if v, ok := envOf(s, resources.FunctionWebhooks)[resources.EnvKindeWebhookJWKSURL]; ok {
		t.Errorf("%s = %v with nothing configured", resources.EnvKindeWebhookJWKSURL, v)
	}
	if _, ok := envOf(s, resources.FunctionInbox)[resources.EnvStripeRefetch]; ok {
		t.Errorf("%s set with stripeRefetch off", resources.EnvStripeRefetch)
	}
	s = synthStage(t, map[string]any{ctxKindeWebhookJWKSURL: "https://acme.kinde.com/.well-known/jwks",
		ctxStripeRefetch: "true", ctxStripeAPIKeySecretARN: "arn:aws:secretsmanager:eu-west-1:123456789012:secret:stripe-key-AbCdEf"})
	for _, f := range resources.Functions {
		env := envOf(s, f.Name)
		_, jwks := env[resources.EnvKindeWebhookJWKSURL]
		if jwks != contains(f.Settings, resources.EnvKindeWebhookJWKSURL) {
			t.Errorf("%s: %s set %v; want it only where the definition lists it", f.Name, resources.EnvKindeWebhookJWKSURL, jwks)
		}
	}
	if v := envOf(s, resources.FunctionWebhooks)[resources.EnvKindeWebhookJWKSURL]; v != "https://acme.kinde.com/.well-known/jwks" {
		t.Errorf("%s = %v", resources.EnvKindeWebhookJWKSURL, v)
	}
	inbox := envOf(s, resources.FunctionInbox)
	if inbox[resources.EnvStripeRefetch] != "true" || inbox[resources.EnvStripeAPIKeySecretARN] == nil {
		t.Errorf("the inbox worker's re-fetch settings: %v", inbox)
	}
}

func TestOutputs_APIURLTopicAndTables(t *testing.T) {
	s := synthStage(t, dev)
	outputs := s.json["Outputs"].(object)
	if url := flatJoin(outputs["ApiUrl"].(object)["Value"]); !strings.HasPrefix(url, "https://") || !strings.Contains(url, ".execute-api.") {
		t.Errorf("ApiUrl %q; want the API's https URL", url)
	}
	if !refersTo(outputs["AlarmTopicArn"], topicID(t, s)) {
		t.Errorf("AlarmTopicArn %v; want the topic", outputs["AlarmTopicArn"])
	}
	for _, table := range resources.Tables {
		id := s.id(t, "AWS::DynamoDB::Table", object{"TableName": resources.PhysicalName(s.cfg.Prefix(), table.Logical)})
		if out, ok := outputs["Table"+pascal(table.Logical)].(object); !ok || !refersTo(out["Value"], id) {
			t.Errorf("no output with the name of table %s", table.Logical)
		}
	}
}

func TestStack_StageNamesEveryResource(t *testing.T) {
	s := synthStage(t, map[string]any{ctxStage: "staging"})
	for _, table := range resources.Tables {
		s.id(t, "AWS::DynamoDB::Table", object{"TableName": "ferry-staging-" + table.Logical})
	}
	for _, f := range resources.Functions {
		s.id(t, "AWS::Lambda::Function", object{"FunctionName": "ferry-staging-" + f.Name})
	}
}

// TestStack_SynthesizesWithoutAccountOrLookups: the stack names no account or region and asks
// for no context lookups, so synthesis needs neither credentials nor network.
func TestStack_SynthesizesWithoutAccountOrLookups(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	app := awscdk.NewApp(&awscdk.AppProps{Context: obj(object{bundlingStacksKey: []any{}}), Outdir: jsii.String(t.TempDir())})
	cfg, err := ConfigFromContext(func(key string) any { return app.Node().TryGetContext(jsii.String(key)) })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewFerryStack(app, StackName(cfg.Stage), &FerryStackProps{Config: cfg, Definitions: DefaultDefinitions(), SourceRoot: root}); err != nil {
		t.Fatal(err)
	}
	outdir := *app.Synth(nil).Directory()
	data, err := os.ReadFile(filepath.Join(outdir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		Artifacts map[string]struct{ Environment string }
		Missing   []any
	}
	if err := json.Unmarshal(data, &manifest); err != nil {
		t.Fatal(err)
	}
	if env := manifest.Artifacts[StackName(cfg.Stage)].Environment; env != "aws://unknown-account/unknown-region" {
		t.Errorf("stack environment %q; want it environment-agnostic", env)
	}
	if len(manifest.Missing) > 0 {
		t.Errorf("synthesis asked for context lookups: %v", manifest.Missing)
	}
}

// ungrantedResourceVars are the resource-name variables of every resource f's entry does not
// list.
func ungrantedResourceVars(f resources.Function) []string {
	var vars []string
	for _, tb := range resources.Tables {
		if _, ok := f.Tables[tb.Logical]; !ok {
			vars = append(vars, resources.EnvVar(resources.KindTable, tb.Logical))
		}
	}
	for _, q := range resources.Queues {
		for _, logical := range []string{q.Logical, q.DLQLogical()} {
			if _, ok := f.Queues[logical]; !ok {
				vars = append(vars, resources.EnvVar(resources.KindQueue, logical))
			}
		}
	}
	for _, b := range resources.Buckets {
		if _, ok := f.Buckets[b.Logical]; !ok {
			vars = append(vars, resources.EnvVar(resources.KindBucket, b.Logical))
		}
	}
	return vars
}
