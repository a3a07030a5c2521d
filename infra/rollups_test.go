package main

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/jsii-runtime-go"

	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// The rollups as deployed: minute items expire by their TTL attribute, hour items (which carry
// none) are kept, the table has point-in-time recovery like every table of usage, and the api
// function, which answers the usage query, reads it and cannot write it; the worker, whose claims
// carry the rollup writes, reads and writes it.
func TestRollups_DeployedAsTheDefinitionsSay(t *testing.T) {
	s := synthStage(t, prod)
	if resources.RollupMinuteRetention < 31*24*time.Hour {
		t.Errorf("minute rollups kept %s; a DAY query in a half-hour zone over the last month needs them", resources.RollupMinuteRetention)
	}
	table, ok := resources.TableByLogical(resources.TableRollups)
	if !ok || table.TTLAttribute != resources.RollupTTLAttribute {
		t.Fatalf("the rollups table's TTL attribute is %q; want %q", table.TTLAttribute, resources.RollupTTLAttribute)
	}
	check(t, func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), like(object{
			"TableName":                        resources.PhysicalName(s.cfg.Prefix(), resources.TableRollups),
			"KeySchema":                        keySchema(table.PartitionKey, table.SortKey),
			"TimeToLiveSpecification":          object{"AttributeName": resources.RollupTTLAttribute, "Enabled": true},
			"PointInTimeRecoverySpecification": object{"PointInTimeRecoveryEnabled": true},
		}))
	})
	rollups := s.id(t, "AWS::DynamoDB::Table", object{"TableName": resources.PhysicalName(s.cfg.Prefix(), resources.TableRollups)})
	role := refs(props(s.json["Resources"].(object)[functionID(t, s, resources.FunctionAPI)].(object))["Role"])[0]
	actions := actionsOn(s.roleStatements(role), rollups)
	if !contains(actions, "dynamodb:Query") {
		t.Errorf("the api function's actions on the rollups: %v; want Query among them", actions)
	}
	for _, a := range actions {
		if strings.Contains(a, "Put") || strings.Contains(a, "Update") || strings.Contains(a, "Delete") || strings.Contains(a, "Write") {
			t.Errorf("the api function may %s the rollups; it only reads them", a)
		}
	}
	// The worker's claim reads the rollup items it plans from and writes them in its transaction.
	worker := refs(props(s.json["Resources"].(object)[functionID(t, s, resources.FunctionWorker)].(object))["Role"])[0]
	workerActions := actionsOn(s.roleStatements(worker), rollups)
	for _, want := range []string{"dynamodb:BatchGetItem", "dynamodb:UpdateItem"} {
		if !contains(workerActions, want) {
			t.Errorf("the worker's actions on the rollups: %v; want %s among them", workerActions, want)
		}
	}
}
