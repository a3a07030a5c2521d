package main

import (
	"testing"
	"time"

	"github.com/aws/jsii-runtime-go"

	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

// The webhook inbox as deployed: its table keeps events and receipts past every provider's
// retry horizon (TTL, and point-in-time recovery), its worker consumes the nudge queue (with a
// DLQ) and may put nudges back, its sweep runs every minute, and a DEAD event alarms.
func TestInbox_DeployedAsTheDefinitionsSay(t *testing.T) {
	s := synthStage(t, prod)
	if inbox.Retention < 30*24*time.Hour {
		t.Errorf("inbox retention %s; the contract keeps dedupe records and receipts at least 30 days", inbox.Retention)
	}
	check(t, func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), like(object{
			"TableName":                        resources.PhysicalName(s.cfg.Prefix(), resources.TableInbox),
			"TimeToLiveSpecification":          object{"AttributeName": resources.InboxTTLAttribute, "Enabled": true},
			"PointInTimeRecoverySpecification": object{"PointInTimeRecoveryEnabled": true},
		}))
		s.tmpl.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), like(object{
			"TableName":                        resources.PhysicalName(s.cfg.Prefix(), resources.TableGrants),
			"PointInTimeRecoverySpecification": object{"PointInTimeRecoveryEnabled": true},
		}))
	})
	worker := functionID(t, s, resources.FunctionInbox)
	queue := s.id(t, "AWS::SQS::Queue", object{"QueueName": resources.PhysicalName(s.cfg.Prefix(), resources.QueueInbox)})
	dlq := s.id(t, "AWS::SQS::Queue", object{"QueueName": resources.PhysicalName(s.cfg.Prefix(), resources.QueueInbox+"-dlq")})
	check(t, func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::SQS::Queue"), like(object{
			"QueueName":     resources.PhysicalName(s.cfg.Prefix(), resources.QueueInbox),
			"RedrivePolicy": like(object{"deadLetterTargetArn": object{"Fn::GetAtt": []any{dlq, "Arn"}}}),
		}))
		s.tmpl.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), like(object{
			"FunctionName":          object{"Ref": worker},
			"EventSourceArn":        object{"Fn::GetAtt": []any{queue, "Arn"}},
			"FunctionResponseTypes": []any{"ReportBatchItemFailures"},
		}))
	})
	fn := props(s.json["Resources"].(object)[worker].(object))
	if got := actionsOn(s.roleStatements(refs(fn["Role"])[0]), queue); !contains(got, "sqs:SendMessage") || !contains(got, "sqs:ReceiveMessage") {
		t.Errorf("the inbox worker's actions on its queue: %v; want receive and send", got)
	}
	sweep, _ := resources.FunctionByName(resources.FunctionInboxSweep)
	if sweep.Every != time.Minute {
		t.Errorf("the sweep runs every %s; want every minute", sweep.Every)
	}
	assertSchedule(t, s, sweep)
	check(t, func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), like(object{
			"MetricName": metrics.InboxDead, "Namespace": metrics.Namespace, "Threshold": 1,
		}))
	})
}
