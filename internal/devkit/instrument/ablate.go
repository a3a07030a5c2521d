package instrument

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	smithymw "github.com/aws/smithy-go/middleware"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/allowance"
	"github.com/ferrymeter/ferry/internal/alerts/drain"
	"github.com/ferrymeter/ferry/internal/alerts/endpoints"
	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/holds"
	"github.com/ferrymeter/ferry/internal/holds/ratelimit"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/rollup"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/operator/console"
	"github.com/ferrymeter/ferry/internal/operator/session"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/idempotency"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/reporting/outbox"
	"github.com/ferrymeter/ferry/internal/reporting/reconcile"
	"github.com/ferrymeter/ferry/internal/reporting/report"
	"github.com/ferrymeter/ferry/internal/reporting/review"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

// Guards is every condition clause Ferry sends, by adapter: the guard-ablation table.
func Guards() []dynamo.Guard {
	var all []dynamo.Guard
	for _, g := range [][]dynamo.Guard{ledger.Guards, usage.Guards, ratelimit.Guards, holds.Guards, idempotency.Guards, accounts.Guards, inbox.Guards, allowance.Guards,
		report.Guards, outbox.Guards, reconcile.Guards, review.Guards, session.Guards, console.Guards, rollup.Guards, notify.Guards, drain.Guards, endpoints.Guards} {
		all = append(all, g...)
	}
	return all
}

// GuardNamed returns the guard of that name.
func GuardNamed(name string) (dynamo.Guard, bool) {
	for _, g := range Guards() {
		if g.Name == name {
			return g, true
		}
	}
	return dynamo.Guard{}, false
}

// Write is one conditional write as it goes on the wire: alone, or one item of a transaction.
// It points into the request, so that an ablation can change it in place.
type Write struct {
	Kind   string // Put, Update, Delete, ConditionCheck
	Table  string // the logical name, or the physical one when it is not one of Ferry's
	Update string
	// Key and SortKey are the item's "pk" and "sk".
	Key     string
	SortKey string
	// Condition is the condition expression sent ("" for none).
	Condition string

	cond   **string
	names  *map[string]string
	values *map[string]types.AttributeValue
}

// Matches reports whether the write carries guard g.
func (w Write) Matches(g dynamo.Guard) bool {
	if w.Kind != g.Kind || w.Table != g.Table || w.Condition == "" {
		return false
	}
	if g.Update != "" && w.Update != g.Update {
		return false
	}
	if g.UpdatePrefix != "" && !strings.HasPrefix(w.Update, g.UpdatePrefix) {
		return false
	}
	if g.SortKeyPrefix != "" && !strings.HasPrefix(w.SortKey, g.SortKeyPrefix) {
		return false
	}
	if g.KeyPrefix != "" && !strings.HasPrefix(w.Key, g.KeyPrefix) {
		return false
	}
	return dynamo.HasClause(w.Condition, g.Clause)
}

// Writes lists the writes of a DynamoDB request, with logical table names where tables maps the
// physical name (physical → logical).
func Writes(params any, tables map[string]string) []Write {
	mk := func(kind string, table *string, update *string, key map[string]types.AttributeValue, cond **string,
		names *map[string]string, values *map[string]types.AttributeValue) Write {
		t := aws.ToString(table)
		if l, ok := tables[t]; ok {
			t = l
		}
		return Write{Kind: kind, Table: t, Update: aws.ToString(update), Key: dynamo.Str(key, "pk"), SortKey: dynamo.Str(key, "sk"), Condition: aws.ToString(*cond),
			cond: cond, names: names, values: values}
	}
	var out []Write
	switch in := params.(type) {
	case *dynamodb.PutItemInput:
		out = append(out, mk("Put", in.TableName, nil, in.Item, &in.ConditionExpression, &in.ExpressionAttributeNames, &in.ExpressionAttributeValues))
	case *dynamodb.UpdateItemInput:
		out = append(out, mk("Update", in.TableName, in.UpdateExpression, in.Key, &in.ConditionExpression, &in.ExpressionAttributeNames, &in.ExpressionAttributeValues))
	case *dynamodb.DeleteItemInput:
		out = append(out, mk("Delete", in.TableName, nil, in.Key, &in.ConditionExpression, &in.ExpressionAttributeNames, &in.ExpressionAttributeValues))
	case *dynamodb.TransactWriteItemsInput:
		for i := range in.TransactItems {
			it := &in.TransactItems[i]
			switch {
			case it.Put != nil:
				p := it.Put
				out = append(out, mk("Put", p.TableName, nil, p.Item, &p.ConditionExpression, &p.ExpressionAttributeNames, &p.ExpressionAttributeValues))
			case it.Update != nil:
				u := it.Update
				out = append(out, mk("Update", u.TableName, u.UpdateExpression, u.Key, &u.ConditionExpression, &u.ExpressionAttributeNames, &u.ExpressionAttributeValues))
			case it.Delete != nil:
				d := it.Delete
				out = append(out, mk("Delete", d.TableName, nil, d.Key, &d.ConditionExpression, &d.ExpressionAttributeNames, &d.ExpressionAttributeValues))
			case it.ConditionCheck != nil:
				c := it.ConditionCheck
				out = append(out, mk("ConditionCheck", c.TableName, nil, c.Key, &c.ConditionExpression, &c.ExpressionAttributeNames, &c.ExpressionAttributeValues))
			}
		}
	}
	return out
}

// strip removes clause from the write's condition and drops the expression attribute names and
// values no expression uses any more (DynamoDB refuses unused ones).
func (w *Write) strip(clause string) {
	rest := dynamo.Without(w.Condition, clause)
	w.Condition = rest
	if rest == "" {
		*w.cond = nil
	} else {
		*w.cond = aws.String(rest)
	}
	used := w.Update + " " + rest
	names := map[string]string{}
	for k, v := range *w.names {
		if referenced(used, k) {
			names[k] = v
		}
	}
	values := map[string]types.AttributeValue{}
	for k, v := range *w.values {
		if referenced(used, k) {
			values[k] = v
		}
	}
	if len(names) == 0 {
		names = nil
	}
	if len(values) == 0 {
		values = nil
	}
	*w.names, *w.values = names, values
}

// referenced reports whether placeholder (#name or :value) appears in expr as a whole token.
func referenced(expr, placeholder string) bool {
	for i := 0; ; {
		j := strings.Index(expr[i:], placeholder)
		if j < 0 {
			return false
		}
		end := i + j + len(placeholder)
		if end == len(expr) || !isPlaceholderByte(expr[end]) {
			return true
		}
		i = end
	}
}

func isPlaceholderByte(b byte) bool {
	return b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// Ablation removes guards from the writes that carry them, at the wire: the request leaves the
// client as if the code had never written the clause. It counts what it removed, so a test can
// tell an ablation that never fired (its write never ran) from one that fired and was survived.
type Ablation struct {
	tables map[string]string
	guards []dynamo.Guard

	mu       sync.Mutex
	stripped map[string]int
}

// NewAblation removes guards from calls on the resources names lists.
func NewAblation(names resources.Names, guards ...dynamo.Guard) *Ablation {
	return &Ablation{tables: physicalToLogical(names), guards: guards, stripped: map[string]int{}}
}

// SetNames binds the ablation to the resources names lists, for clients built before the
// resources were.
func (a *Ablation) SetNames(names resources.Names) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.tables = physicalToLogical(names)
}

// EnvAblate names the environment variable that lists guards (comma-separated names) for the
// test environment to remove from every client it builds: the ablation table runs a package's
// tests with it set, and expects them to fail.
const EnvAblate = "FERRY_ABLATE"

// AblationFromEnv returns the ablation EnvAblate asks for, or nil when it is unset.
func AblationFromEnv() (*Ablation, error) {
	raw := os.Getenv(EnvAblate)
	if raw == "" {
		return nil, nil
	}
	var guards []dynamo.Guard
	for _, name := range strings.Split(raw, ",") {
		g, ok := GuardNamed(strings.TrimSpace(name))
		if !ok {
			return nil, fmt.Errorf("%s: no guard %q", EnvAblate, name)
		}
		guards = append(guards, g)
	}
	return NewAblation(resources.Names{}, guards...), nil
}

func physicalToLogical(names resources.Names) map[string]string {
	m := map[string]string{}
	for logical, physical := range names.Tables {
		m[physical] = logical
	}
	return m
}

// Apply removes the guards from one request's parameters and reports how many it removed.
func (a *Ablation) Apply(params any) int {
	n := 0
	a.mu.Lock()
	tables := a.tables
	a.mu.Unlock()
	ws := Writes(params, tables)
	for i := range ws {
		w := &ws[i]
		for _, g := range a.guards {
			if w.Matches(g) {
				w.strip(g.Clause)
				a.mu.Lock()
				a.stripped[g.Name]++
				a.mu.Unlock()
				n++
			}
		}
	}
	if in, ok := params.(*dynamodb.TransactWriteItemsInput); ok && n > 0 {
		// A condition check whose whole condition was removed is no check at all: it leaves
		// the transaction, as it would if the code had never sent it (DynamoDB refuses a
		// check without a condition).
		kept := in.TransactItems[:0]
		for _, it := range in.TransactItems {
			if it.ConditionCheck != nil && it.ConditionCheck.ConditionExpression == nil {
				continue
			}
			kept = append(kept, it)
		}
		in.TransactItems = kept
	}
	return n
}

// Stripped returns how many writes each guard was removed from.
func (a *Ablation) Stripped() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]int, len(a.stripped))
	for k, v := range a.stripped {
		out[k] = v
	}
	return out
}

// Option installs the ablation on a DynamoDB client.
func (a *Ablation) Option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *smithymw.Stack) error {
		return stack.Initialize.Add(smithymw.InitializeMiddlewareFunc("ferry.Ablation",
			func(ctx context.Context, in smithymw.InitializeInput, next smithymw.InitializeHandler) (smithymw.InitializeOutput, smithymw.Metadata, error) {
				a.Apply(in.Parameters)
				return next.HandleInitialize(ctx, in)
			}), smithymw.After)
	})
}

// Unlisted returns, for a request, every condition clause that no guard of the table names:
// "Update ledger: #status = :inserting". Each clause Ferry sends must be in the table, so that
// the ablation test removes it.
func Unlisted(params any, tables map[string]string) []string {
	var out []string
	guards := Guards()
	for _, w := range Writes(params, tables) {
		if w.Condition == "" {
			continue
		}
		for _, clause := range dynamo.Clauses(w.Condition) {
			listed := false
			for _, g := range guards {
				if w.Kind == g.Kind && w.Table == g.Table && (dynamo.ClauseIs(clause, g.Clause) || dynamo.ClauseIs(w.Condition, g.Clause)) &&
					(g.Update == "" || g.Update == w.Update) && (g.UpdatePrefix == "" || strings.HasPrefix(w.Update, g.UpdatePrefix)) &&
					(g.SortKeyPrefix == "" || strings.HasPrefix(w.SortKey, g.SortKeyPrefix)) &&
					(g.KeyPrefix == "" || strings.HasPrefix(w.Key, g.KeyPrefix)) {
					listed = true
					break
				}
			}
			if !listed {
				out = append(out, fmt.Sprintf("%s %s: %s", w.Kind, w.Table, clause))
			}
		}
	}
	sort.Strings(out)
	return out
}

// TableCheck records every condition clause sent on Ferry's tables that no guard of the table
// names. Installed on every client a test builds, it makes the guard table complete by
// construction: a condition added to the code without its guard fails the test that sends it.
type TableCheck struct {
	mu       sync.Mutex
	tables   map[string]string
	unlisted map[string]bool
}

// NewTableCheck checks calls on the resources names lists (SetNames binds it later).
func NewTableCheck(names resources.Names) *TableCheck {
	return &TableCheck{tables: physicalToLogical(names), unlisted: map[string]bool{}}
}

// SetNames binds the check to the resources names lists, for clients built before them.
func (c *TableCheck) SetNames(names resources.Names) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tables = physicalToLogical(names)
}

// Unlisted returns the clauses seen that no guard names, sorted.
func (c *TableCheck) Unlisted() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.unlisted))
	for u := range c.unlisted {
		out = append(out, u)
	}
	sort.Strings(out)
	return out
}

func (c *TableCheck) check(params any) {
	c.mu.Lock()
	tables := c.tables
	c.mu.Unlock()
	if len(tables) == 0 {
		return
	}
	known := map[string]bool{}
	for _, logical := range tables {
		known[logical] = true
	}
	for _, u := range Unlisted(params, tables) {
		// Only Ferry's own tables: a table a test made for itself carries no guards of Ferry's.
		if _, rest, ok := strings.Cut(u, " "); ok {
			if table, _, ok := strings.Cut(rest, ":"); ok && known[table] {
				c.mu.Lock()
				c.unlisted[u] = true
				c.mu.Unlock()
			}
		}
	}
}

// Option installs the check on a DynamoDB client. It runs before an ablation (both are
// Initialize steps; this one is added first), so it sees the request as the code wrote it.
func (c *TableCheck) Option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *smithymw.Stack) error {
		return stack.Initialize.Add(smithymw.InitializeMiddlewareFunc("ferry.GuardTableCheck",
			func(ctx context.Context, in smithymw.InitializeInput, next smithymw.InitializeHandler) (smithymw.InitializeOutput, smithymw.Metadata, error) {
				c.check(in.Parameters)
				return next.HandleInitialize(ctx, in)
			}), smithymw.Before)
	})
}
