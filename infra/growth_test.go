package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/jsii-runtime-go"

	"github.com/ferrymeter/ferry/internal/platform/idempotency"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// fakeRoot makes a module root with a trivial main package for each function, so a test can
// synthesize definitions whose function code does not exist yet. Broken names get code that
// does not compile.
func fakeRoot(t *testing.T, defs Definitions, broken ...string) string {
	t.Helper()
	root := t.TempDir()
	write := func(rel, content string) {
		path := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module "+modulePath+"\n\ngo 1.26\n")
	write("go.sum", "")
	for _, f := range defs.Functions {
		code := "package main\n\nfunc main() {}\n"
		if contains(broken, f.Name) {
			code = "package main\n\nfunc main() { undefinedCall() }\n"
		}
		write(filepath.Join(functionsDir, f.Name, mainDir, "main.go"), code)
	}
	return root
}

// grownDefinitions are Ferry's definitions plus what later capabilities are expected to add: a
// table with a GSI and a TTL, a table with a TTL, two scheduled functions, a route and an alarm.
// The names are made up so they never collide with what the definitions really grow.
func grownDefinitions() Definitions {
	d := copyDefinitions(DefaultDefinitions())
	d.Tables = append(d.Tables,
		resources.Table{
			Logical:      "widgets",
			PartitionKey: resources.Attribute{Name: "pk", Type: resources.String},
			SortKey:      &resources.Attribute{Name: "sk", Type: resources.String},
			TTLAttribute: "expiresAt",
			Indexes: []resources.Index{{
				Name:         "byLease",
				PartitionKey: resources.Attribute{Name: "leaseShard", Type: resources.String},
				SortKey:      &resources.Attribute{Name: "leaseExpiresAtMs", Type: resources.Number},
				ProjectAll:   true,
			}},
		},
		resources.Table{
			Logical:      "receipts",
			PartitionKey: resources.Attribute{Name: "pk", Type: resources.String},
			TTLAttribute: "expiresAt",
		},
	)
	for i, f := range d.Functions {
		if f.Name == resources.FunctionAPI {
			d.Functions[i].Tables["widgets"] = resources.ReadWrite
			d.Functions[i].Tables["receipts"] = resources.ReadWrite
		}
	}
	d.Functions = append(d.Functions, resources.Function{
		Name:                "janitor",
		Purpose:             "settles widgets whose lease expired",
		Timeout:             time.Minute,
		MemoryMB:            256,
		ReservedConcurrency: 1,
		Tables:              map[string]resources.Access{"widgets": resources.ReadWrite, resources.TableUsage: resources.ReadWrite},
		Every:               time.Minute,
	}, resources.Function{
		Name:     "auditor",
		Purpose:  "compares the ledger with the provider meter",
		Timeout:  5 * time.Minute,
		MemoryMB: 512,
		Tables:   map[string]resources.Access{resources.TableLedger: resources.Read},
		Every:    24 * time.Hour,
	})
	d.Routes = append(d.Routes, resources.Route{Method: "POST", Path: "/v1/widgets", Function: resources.FunctionAPI, Auth: resources.Account, Idempotency: idempotency.DefaultRetention})
	d.Alarms = append(d.Alarms, metrics.Alarm{Metric: "WidgetsDead", Threshold: 1, Description: "A widget is DEAD."})
	return d
}

func TestStack_FollowsAppendedDefinitions(t *testing.T) {
	defs := grownDefinitions()
	s := synthWith(t, map[string]any{}, defs, fakeRoot(t, defs), false)

	for _, table := range defs.Tables {
		assertTable(t, s, table)
	}
	for _, f := range defs.Functions {
		if f.Every > 0 {
			assertSchedule(t, s, f)
		}
	}
	check(t, func() {
		scheduled := 0
		for _, f := range defs.Functions {
			if f.Every > 0 {
				scheduled++
			}
		}
		s.tmpl.ResourceCountIs(jsii.String("AWS::Scheduler::Schedule"), jsii.Number(scheduled))
		s.tmpl.HasResourceProperties(jsii.String("AWS::Scheduler::Schedule"), like(object{"ScheduleExpression": "rate(1 day)"}))
		s.tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), like(object{
			"FunctionName":                 "ferry-dev-janitor",
			"ReservedConcurrentExecutions": 1,
			"Environment":                  object{"Variables": like(object{"FERRY_TABLE_WIDGETS": like(object{}), "FERRY_TABLE_USAGE": like(object{})})},
		}))
		s.tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), like(object{
			"FunctionName": "ferry-dev-" + resources.FunctionAPI,
			"Environment":  object{"Variables": like(object{"FERRY_TABLE_WIDGETS": like(object{}), "FERRY_TABLE_RECEIPTS": like(object{})})},
		}))
		s.tmpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), like(object{
			"Namespace": metrics.Namespace, "MetricName": "WidgetsDead", "AlarmActions": arrayWith(object{"Ref": topicID(t, s)}),
		}))
	})
	// The janitor is told the names of what it is granted, and not of the receipts it is not.
	janitorEnv := props(s.json["Resources"].(object)[functionID(t, s, "janitor")].(object))["Environment"].(object)["Variables"].(object)
	if _, ok := janitorEnv["FERRY_TABLE_RECEIPTS"]; ok {
		t.Error("the janitor's environment names the receipts table, which its entry does not grant")
	}
	for _, r := range defs.Routes {
		assertRoute(t, s, r)
	}

	// The janitor reads the widgets table and its index, and writes only the table.
	fn := props(s.json["Resources"].(object)[functionID(t, s, "janitor")].(object))
	widgetsID := s.id(t, "AWS::DynamoDB::Table", object{"TableName": "ferry-dev-widgets"})
	var readsIndex, writesIndex bool
	for _, st := range s.roleStatements(refs(fn["Role"])[0]) {
		for _, res := range list(st["Resource"]) {
			if strings.HasSuffix(flatJoin(res), "{"+widgetsID+"}/index/byLease") {
				actions := strings.Join(strs(st["Action"]), " ")
				readsIndex = readsIndex || strings.Contains(actions, "dynamodb:Query")
				writesIndex = writesIndex || strings.Contains(actions, "dynamodb:PutItem")
			}
		}
	}
	if !readsIndex || writesIndex {
		t.Errorf("janitor on widgets/index/byLease: query %v, put %v; want query only", readsIndex, writesIndex)
	}
}

func TestStack_ScheduledFunctionsDoNotRetryAsync(t *testing.T) {
	defs := grownDefinitions()
	s := synthWith(t, map[string]any{}, defs, fakeRoot(t, defs), false)
	check(t, func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::Lambda::EventInvokeConfig"), like(object{
			"FunctionName":         object{"Ref": functionID(t, s, "janitor")},
			"MaximumRetryAttempts": 0,
		}))
	})
}

func TestStack_RefusesConsumerWithReservedConcurrencyBelowMaxConcurrency(t *testing.T) {
	defs := copyDefinitions(DefaultDefinitions())
	for i, f := range defs.Functions {
		if f.Name == resources.FunctionWorker {
			defs.Functions[i].ReservedConcurrency = 1
		}
	}
	_, err := trySynth(map[string]any{}, defs, fakeRoot(t, defs), false, "")
	if err == nil || !strings.Contains(err.Error(), "reserved concurrency 1 below consumerMaxConcurrency") {
		t.Errorf("err = %v", err)
	}
}

// The recipe's made-up capability — one HTTP function, one route, one table — is deployed from
// the definitions alone: the table, the function with a role that writes that table and only reads
// the key tables, and the route integrated with the new function. (internal/app's growth test
// serves the same capability locally.)
func TestStack_AFunctionWithOneRouteAndOneTable_IsDeployedFromTheDefinitions(t *testing.T) {
	d := copyDefinitions(DefaultDefinitions())
	gadgets := resources.Table{Logical: "gadgets", PartitionKey: resources.Attribute{Name: "pk", Type: resources.String}}
	d.Tables = append(d.Tables, gadgets)
	d.Functions = append(d.Functions, resources.Function{
		Name: "gadgets", Purpose: "POST /v1/gadgets", Timeout: 10 * time.Second, MemoryMB: 256,
		Tables: map[string]resources.Access{
			"gadgets": resources.ReadWrite, resources.TableAPIKeys: resources.Read, resources.TableAccounts: resources.Read,
			resources.TableIdempotency: resources.ReadWrite,
		},
	})
	route := resources.Route{Method: "POST", Path: "/v1/gadgets", Function: "gadgets", Auth: resources.Account, Idempotency: idempotency.DefaultRetention}
	d.Routes = append(d.Routes, route)
	s := synthWith(t, map[string]any{}, d, fakeRoot(t, d), false)

	assertTable(t, s, gadgets)
	assertRoute(t, s, route)
	fn := props(s.json["Resources"].(object)[functionID(t, s, "gadgets")].(object))
	gadgetsID := s.id(t, "AWS::DynamoDB::Table", object{"TableName": "ferry-dev-gadgets"})
	keysID := s.id(t, "AWS::DynamoDB::Table", object{"TableName": "ferry-dev-" + resources.TableAPIKeys})
	var writesGadgets, writesKeys bool
	for _, st := range s.roleStatements(refs(fn["Role"])[0]) {
		actions := strings.Join(strs(st["Action"]), " ")
		for _, res := range list(st["Resource"]) {
			switch flat := flatJoin(res); {
			case strings.Contains(flat, "{"+gadgetsID+"}") && strings.Contains(actions, "dynamodb:PutItem"):
				writesGadgets = true
			case strings.Contains(flat, "{"+keysID+"}") && strings.Contains(actions, "dynamodb:PutItem"):
				writesKeys = true
			}
		}
	}
	if !writesGadgets || writesKeys {
		t.Errorf("gadgets' role: writes gadgets %v, writes API keys %v; want the first only", writesGadgets, writesKeys)
	}
}
