package functions_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/functions"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/httpapi"
	"github.com/ferrymeter/ferry/internal/platform/problem"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// A made-up capability, written the way the README's recipe says: a table, a function entry that
// grants it, one route, and one builder whose handlers run on the capability's own value. The
// names are made up so they never collide with what Ferry really grows.
const (
	tableWidgets    = "widgets"
	functionWidgets = "widgets"
)

// widgetShelf is the capability's service: it keeps widgets, one item per (account, widget id).
type widgetShelf struct {
	db    *dynamodb.Client
	table string
}

// put is POST /v1/widgets {"id"}: 201 with the widget.
func (s *widgetShelf) put(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.ID == "" {
		return problem.Input("send {\"id\": \"<widget id>\"}")
	}
	p, _ := httpapi.PrincipalFrom(r.Context())
	_, err := s.db.PutItem(r.Context(), &dynamodb.PutItemInput{
		TableName: aws.String(s.table),
		Item:      map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: p.Account.ID + "#" + in.ID}},
	})
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	return json.NewEncoder(w).Encode(map[string]string{"id": in.ID})
}

// grownDefinitions are Ferry's definitions plus the capability: everything it takes.
func grownDefinitions(build func(c *compose.Composer) (*compose.Function, error)) compose.Definitions {
	d := functions.Definitions()
	d.Tables = append(d.Tables, resources.Table{Logical: tableWidgets, Purpose: "widgets", PartitionKey: resources.Attribute{Name: "pk", Type: resources.String}})
	d.Functions = append(d.Functions, resources.Function{
		Name: functionWidgets, Purpose: "POST /v1/widgets", Timeout: 10 * time.Second, MemoryMB: 256,
		Tables: map[string]resources.Access{
			tableWidgets: resources.ReadWrite, resources.TableAPIKeys: resources.Read, resources.TableAccounts: resources.Read,
			resources.TableIdempotency: resources.ReadWrite,
		},
	})
	d.Routes = append(d.Routes, resources.Route{
		Method: "POST", Path: "/v1/widgets", Function: functionWidgets, Auth: resources.Account,
		Idempotency: resources.IdempotencyRetention,
	})
	d.Builders = append(d.Builders, compose.Builder{Function: functionWidgets, Build: build})
	return d
}

// buildWidgets is the capability's one builder.
func buildWidgets(c *compose.Composer) (*compose.Function, error) {
	shelf := &widgetShelf{db: c.DynamoDB(), table: c.Table(tableWidgets, resources.ReadWrite)}
	fn := c.Function(shelf)
	httpapi.Serve(c, fn, httpapi.Handlers{"POST /v1/widgets": shelf.put}, httpapi.Authentication{})
	return fn, nil
}

// Adding a function with one route and one table touches the definitions and one builder, and
// nothing else: the test harness (as ferry dev) provisions the table, composes the function from
// its entry, routes its route to it through the local API Gateway, authenticates its callers and
// gives its mutating route the Idempotency-Key contract — and Ferry's own routes still answer.
// (infra/growth_test.go shows the CDK app deploying such additions from the same lists.)
func TestGrowth_AFunctionWithOneRouteAndOneTable_TouchesOnlyTheDefinitionsAndItsBuilder(t *testing.T) {
	defs := grownDefinitions(buildWidgets)
	h := apptest.New(t, apptest.Options{Definitions: &defs})
	key := h.CreateAccount(t, "acct_1", "free", nil)

	first := h.Do(t, http.MethodPost, "/v1/widgets", key, map[string]any{"id": "w1"}, "Idempotency-Key", "k1")
	if first.Status != http.StatusCreated {
		t.Fatalf("POST /v1/widgets: %d %s", first.Status, first.Body)
	}
	repeat := h.Do(t, http.MethodPost, "/v1/widgets", key, map[string]any{"id": "w1"}, "Idempotency-Key", "k1")
	if repeat.Status != http.StatusCreated || repeat.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("keyed repeat: %d %v", repeat.Status, repeat.Header)
	}
	if r := h.Do(t, http.MethodPost, "/v1/widgets", "fk_not-a-key", map[string]any{"id": "w2"}); r.Status != http.StatusUnauthorized {
		t.Errorf("without a valid key: %d %s", r.Status, r.Body)
	}
	out, err := h.Env.Clients.DynamoDB.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(h.Env.Names.Table(tableWidgets)),
		Key:       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "acct_1#w1"}},
	})
	if err != nil || out.Item == nil {
		t.Errorf("the widget is not stored: %v", err)
	}
	if r := h.Do(t, http.MethodGet, "/v1/usage", key, nil); r.Status != http.StatusOK {
		t.Errorf("Ferry's own routes: GET /v1/usage %d %s", r.Status, r.Body)
	}
}

// The capability's builder reads a table its entry does not grant: the function does not build,
// and the error names the function and the table. In AWS this would have been an AccessDenied on
// the first request; here it is a failing unit test.
func TestGrowth_ABuilderReadingATableItIsNotGranted_FailsToBuild(t *testing.T) {
	defs := grownDefinitions(func(c *compose.Composer) (*compose.Function, error) {
		shelf := &widgetShelf{db: c.DynamoDB(), table: c.Table(tableWidgets, resources.ReadWrite)}
		_ = c.Table(resources.TableLedger, resources.Read) // not in the widgets entry
		fn := c.Function(shelf)
		httpapi.Serve(c, fn, httpapi.Handlers{"POST /v1/widgets": shelf.put}, httpapi.Authentication{})
		return fn, nil
	})
	names := allNames()
	names.Tables[tableWidgets] = tableWidgets
	_, err := defs.Build(functionWidgets, compose.Env{Names: names, Config: compose.DefaultConfig(), Log: apptest.Logger(t)})
	want := "function widgets uses table ledger (read), which its entry in resources.Functions does not grant"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v; want %q", err, want)
	}
}

// A route the builder gives no handler fails the build too, rather than a request.
func TestGrowth_ARouteWithoutItsHandler_FailsToBuild(t *testing.T) {
	defs := grownDefinitions(func(c *compose.Composer) (*compose.Function, error) {
		fn := c.Function(nil)
		httpapi.Serve(c, fn, httpapi.Handlers{}, httpapi.Authentication{})
		return fn, nil
	})
	names := allNames()
	names.Tables[tableWidgets] = tableWidgets
	_, err := defs.Build(functionWidgets, compose.Env{Names: names, Config: compose.DefaultConfig(), Log: apptest.Logger(t)})
	want := "route POST /v1/widgets has no handler in function widgets"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v; want %q", err, want)
	}
}
