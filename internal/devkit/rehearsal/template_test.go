package rehearsal

import (
	"strings"
	"testing"
)

func tinyTemplate() Template {
	return Template{
		Parameters: map[string]any{"BootstrapVersion": map[string]any{}},
		Resources: map[string]Resource{
			"Table": {Type: "AWS::DynamoDB::Table", Properties: map[string]any{
				"TableName":            "ferry-prod-ledger",
				"KeySchema":            []any{map[string]any{"AttributeName": "pk", "KeyType": "HASH"}},
				"AttributeDefinitions": []any{map[string]any{"AttributeName": "pk", "AttributeType": "S"}},
			}},
			"Fn": {Type: "AWS::Lambda::Function", Properties: map[string]any{
				"Environment": map[string]any{"Variables": map[string]any{"FERRY_TABLE_LEDGER": map[string]any{"Ref": "Table"}}},
				"Code":        map[string]any{"S3Bucket": map[string]any{"Fn::Sub": "cdk-assets-${AWS::AccountId}-${AWS::Region}"}},
				"Role":        map[string]any{"Fn::GetAtt": []any{"Role", "Arn"}},
			}, DependsOn: []any{"Role"}},
			"Role":  {Type: "AWS::IAM::Role"},
			"Route": {Type: "AWS::ApiGatewayV2::Route"},
		},
		Outputs: map[string]map[string]any{"TableLedger": {"Value": map[string]any{"Ref": "Table"}}},
	}
}

func TestCheckReferences_EveryNameResolves(t *testing.T) {
	if err := CheckReferences(tinyTemplate()); err != nil {
		t.Fatal(err)
	}
}

// CloudFormation refuses a template that names what it does not declare; moto resolves such a
// name to nothing, so the rehearsal checks it itself.
func TestCheckReferences_UnknownNamesRefused(t *testing.T) {
	cases := map[string]func(Template){
		"Ref": func(tm Template) {
			tm.Resources["Fn"].Properties["Environment"].(map[string]any)["Variables"].(map[string]any)["X"] = map[string]any{"Ref": "Nope"}
		},
		"GetAtt": func(tm Template) {
			tm.Resources["Fn"].Properties["Role"] = map[string]any{"Fn::GetAtt": []any{"Nope", "Arn"}}
		},
		"Sub":       func(tm Template) { tm.Resources["Fn"].Properties["Code"] = map[string]any{"Fn::Sub": "${Nope.Arn}"} },
		"DependsOn": func(tm Template) { r := tm.Resources["Fn"]; r.DependsOn = "Nope"; tm.Resources["Fn"] = r },
		"Output":    func(tm Template) { tm.Outputs["X"] = map[string]any{"Value": map[string]any{"Ref": "Nope"}} },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			tm := tinyTemplate()
			mutate(tm)
			if err := CheckReferences(tm); err == nil || !strings.Contains(err.Error(), "Nope") {
				t.Errorf("err = %v; want Nope named", err)
			}
		})
	}
}

func TestAccountFor_EveryResourceCreatedOrOfAnUnmodeledType(t *testing.T) {
	tm := tinyTemplate()
	unmodeled := map[string]bool{"AWS::ApiGatewayV2::Route": true}
	made, skipped, err := AccountFor(tm, map[string]bool{"Table": true, "Fn": true, "Role": true}, unmodeled)
	if err != nil || made != 3 || skipped != 1 {
		t.Fatalf("made %d, skipped %d, err %v; want 3, 1, nil", made, skipped, err)
	}
	// A skipped resource of a type not listed.
	if _, _, err := AccountFor(tm, map[string]bool{"Table": true, "Fn": true}, unmodeled); err == nil || !strings.Contains(err.Error(), "Role (AWS::IAM::Role) was not created") {
		t.Errorf("err = %v; want the skipped role named", err)
	}
	// A listed type that was created after all, and one the template no longer declares.
	unmodeled["AWS::SNS::Topic"] = true
	_, _, err = AccountFor(tm, map[string]bool{"Table": true, "Fn": true, "Role": true, "Route": true}, unmodeled)
	if err == nil || !strings.Contains(err.Error(), "remove AWS::ApiGatewayV2::Route") || !strings.Contains(err.Error(), "lists AWS::SNS::Topic") {
		t.Errorf("err = %v; want both stale entries named", err)
	}
}

// The checked-in list names only resource types, one per line.
func TestUnmodeled_ListsResourceTypes(t *testing.T) {
	list := Unmodeled()
	if len(list) == 0 {
		t.Fatal("empty list")
	}
	for typ := range list {
		if !strings.HasPrefix(typ, "AWS::") || strings.Count(typ, "::") != 2 || strings.ContainsAny(typ, " \t") {
			t.Errorf("%q is not a resource type", typ)
		}
	}
}

func TestReplacements_DataHoldingResourcesOnly(t *testing.T) {
	from := tinyTemplate()
	if r := Replacements(from, tinyTemplate()); len(r) != 0 {
		t.Fatalf("identical templates: %v", r)
	}
	cases := map[string]struct {
		mutate func(Template)
		want   string
	}{
		"renamed": {func(tm Template) { tm.Resources["Table2"] = tm.Resources["Table"]; delete(tm.Resources, "Table") }, "logical id is gone"},
		"name":    {func(tm Template) { tm.Resources["Table"].Properties["TableName"] = "ferry-prod-ledger2" }, "TableName changes"},
		"key": {func(tm Template) {
			tm.Resources["Table"].Properties["KeySchema"] = []any{map[string]any{"AttributeName": "id", "KeyType": "HASH"}}
		}, "KeySchema changes"},
		"key type": {func(tm Template) {
			tm.Resources["Table"].Properties["AttributeDefinitions"] = []any{map[string]any{"AttributeName": "pk", "AttributeType": "N"}}
		}, "key attribute pk changes type from S to N"},
		"type": {func(tm Template) {
			r := tm.Resources["Table"]
			r.Type = "AWS::DynamoDB::GlobalTable"
			tm.Resources["Table"] = r
		}, "type changes"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			to := tinyTemplate()
			c.mutate(to)
			r := Replacements(from, to)
			if len(r) != 1 || !strings.Contains(r[0].Why, c.want) {
				t.Errorf("replacements %v; want one: %s", r, c.want)
			}
		})
	}
	// A function or a role may be replaced: it holds nothing.
	to := tinyTemplate()
	delete(to.Resources, "Role")
	to.Resources["Fn"].Properties["Code"] = "other"
	if r := Replacements(from, to); len(r) != 0 {
		t.Errorf("replacements %v; want none", r)
	}
}

func TestRouteFunction_RouteThenDefault(t *testing.T) {
	tm := Template{Resources: map[string]Resource{
		"Events": {Type: "AWS::ApiGatewayV2::Route", Properties: map[string]any{
			"RouteKey": "POST /v1/events", "Target": map[string]any{"Fn::Join": []any{"", []any{"integrations/", map[string]any{"Ref": "IngestIntegration"}}}},
		}},
		"Default": {Type: "AWS::ApiGatewayV2::Route", Properties: map[string]any{
			"RouteKey": "$default", "Target": map[string]any{"Fn::Join": []any{"", []any{"integrations/", map[string]any{"Ref": "ApiIntegration"}}}},
		}},
		"IngestIntegration": {Type: "AWS::ApiGatewayV2::Integration", Properties: map[string]any{"IntegrationUri": map[string]any{"Fn::GetAtt": []any{"Ingest", "Arn"}}}},
		"ApiIntegration":    {Type: "AWS::ApiGatewayV2::Integration", Properties: map[string]any{"IntegrationUri": map[string]any{"Fn::GetAtt": []any{"Api", "Arn"}}}},
		"Ingest":            {Type: "AWS::Lambda::Function"},
		"Api":               {Type: "AWS::Lambda::Function"},
	}}
	for key, want := range map[string]string{"POST /v1/events": "Ingest", "GET /nowhere": "Api"} {
		if got, err := RouteFunction(tm, key); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %s", key, got, err, want)
		}
	}
}

func TestUnresolved_MotosRenderingsOfNothing(t *testing.T) {
	for v, want := range map[string]bool{
		"": true, "None": true, "https://None.execute-api.us-east-1.amazonaws.com/": true, "${Nope}": true,
		"ferry-prod-ledger": false, "arn:aws:secretsmanager:us-east-1:123456789012:secret:ferry-prod-admin-key-AbCdEf": false,
	} {
		if got := unresolved(v); got != want {
			t.Errorf("unresolved(%q) = %v; want %v", v, got, want)
		}
	}
}
