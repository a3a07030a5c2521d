package rollup_test

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/metering/meter"
	"github.com/ferrymeter/ferry/internal/metering/rollup"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// now is the instant the store tests run at; their usage is in the days before.
var now = time.Date(2026, 11, 20, 9, 30, 0, 0, time.UTC)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func tableDef(logical string) resources.Table {
	t, ok := resources.TableByLogical(logical)
	if !ok {
		panic("no table " + logical)
	}
	return t
}

// newStore provisions a fresh rollups table (and extra tables) on the emulators, or on
// FERRY_DYNAMODB_ENDPOINT.
func newStore(t *testing.T, extra ...resources.Table) (*rollup.Store, *testenv.Env) {
	t.Helper()
	env := testenv.New(t, testenv.Options{Tables: append([]resources.Table{tableDef(resources.TableRollups)}, extra...),
		Queues: []resources.Queue{}, Buckets: []resources.Bucket{}})
	return storeOn(env, env.Clients.DynamoDB), env
}

func storeOn(env *testenv.Env, db *dynamodb.Client) *rollup.Store {
	return &rollup.Store{DB: db, Table: env.Names.Table(resources.TableRollups), Now: func() time.Time { return now },
		// The tests read right after writing, on whatever endpoint the environment names.
		ConsistentRead: true}
}

func apply(t *testing.T, s *rollup.Store, account string, cs ...meter.Contribution) {
	t.Helper()
	if err := s.Apply(context.Background(), account, cs); err != nil {
		t.Fatal(err)
	}
}

func rows(t *testing.T, s *rollup.Store, in rollup.QueryInput) []string {
	t.Helper()
	res, err := s.Query(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range res.Rows {
		g := fmt.Sprint(r.Group)
		if r.Other {
			g = "other"
		}
		out = append(out, fmt.Sprintf("%s %s %d", r.Start.Format("01-02T15:04"), g, r.Value))
	}
	return out
}

// Each aggregation written through the package's own write path and read back by the query,
// over windows of every length: the additive ones add up, MAX keeps the largest, LATEST the
// value of the latest event by event time whatever order the claims came in.
func TestStore_EachAggregation_WrittenThenQueried(t *testing.T) {
	s, _ := newStore(t)
	const a = "acct_q"
	tokens := rollup.Meter{Name: "tokens", Aggregation: meter.Sum, Dimensions: []string{"model"}}
	tok := func(when string, model string, v int64) meter.Contribution {
		return meter.Contribution{Meter: "tokens", Aggregation: meter.Sum, AtMs: at(when).UnixMilli(), Group: []string{model}, Value: v}
	}
	apply(t, s, a, tok("2026-11-18T10:07:10Z", "gpt-4", 100), tok("2026-11-18T10:07:50Z", "mini", 5))
	apply(t, s, a, tok("2026-11-18T10:08:00Z", "gpt-4", 20), tok("2026-11-18T23:59:59Z", "gpt-4", 1))
	apply(t, s, a, tok("2026-11-19T00:00:00Z", "gpt-4", 1000))

	day := rollup.QueryInput{Account: a, Meter: tokens, Window: rollup.Day, From: at("2026-11-18T00:00:00Z"), To: at("2026-11-20T00:00:00Z")}
	if got, want := rows(t, s, day), []string{"11-18T00:00 map[] 126", "11-19T00:00 map[] 1000"}; !reflect.DeepEqual(got, want) {
		t.Errorf("DAY: %q; want %q", got, want)
	}
	day.GroupBy = []string{"model"}
	if got, want := rows(t, s, day), []string{"11-18T00:00 map[model:gpt-4] 121", "11-18T00:00 map[model:mini] 5", "11-19T00:00 map[model:gpt-4] 1000"}; !reflect.DeepEqual(got, want) {
		t.Errorf("DAY by model: %q; want %q", got, want)
	}
	minute := rollup.QueryInput{Account: a, Meter: tokens, Window: rollup.Minute, From: at("2026-11-18T10:07:00Z"), To: at("2026-11-18T10:09:00Z"),
		Filter: map[string]string{"model": "gpt-4"}}
	if got, want := rows(t, s, minute), []string{"11-18T10:07 map[] 100", "11-18T10:08 map[] 20"}; !reflect.DeepEqual(got, want) {
		t.Errorf("MINUTE, gpt-4 only: %q; want %q", got, want)
	}
	cycle := rollup.QueryInput{Account: a, Meter: tokens, Window: rollup.Cycle, From: at("2026-11-01T00:00:00Z"), To: at("2026-12-01T00:00:00Z")}
	if got, want := rows(t, s, cycle), []string{"11-01T00:00 map[] 1126"}; !reflect.DeepEqual(got, want) {
		t.Errorf("CYCLE: %q; want %q", got, want)
	}

	peak := rollup.Meter{Name: "storage_gb", Aggregation: meter.Max}
	gb := func(when string, v int64) meter.Contribution {
		return meter.Contribution{Meter: "storage_gb", Aggregation: meter.Max, AtMs: at(when).UnixMilli(), Value: v}
	}
	apply(t, s, a, gb("2026-11-18T10:00:00Z", 40), gb("2026-11-18T10:30:00Z", 70))
	apply(t, s, a, gb("2026-11-18T10:31:00Z", 50)) // below the hour's maximum: only its minute moves
	apply(t, s, a, gb("2026-11-18T11:00:00Z", 60))
	hour := rollup.QueryInput{Account: a, Meter: peak, Window: rollup.Hour, From: at("2026-11-18T10:00:00Z"), To: at("2026-11-18T12:00:00Z")}
	if got, want := rows(t, s, hour), []string{"11-18T10:00 map[] 70", "11-18T11:00 map[] 60"}; !reflect.DeepEqual(got, want) {
		t.Errorf("MAX by HOUR: %q; want %q", got, want)
	}
	hour.Window, hour.From, hour.To = rollup.Minute, at("2026-11-18T10:30:00Z"), at("2026-11-18T10:32:00Z")
	if got, want := rows(t, s, hour), []string{"11-18T10:30 map[] 70", "11-18T10:31 map[] 50"}; !reflect.DeepEqual(got, want) {
		t.Errorf("MAX by MINUTE: %q; want %q", got, want)
	}

	seats := rollup.Meter{Name: "seats", Aggregation: meter.Latest}
	seat := func(received, happened, id string, v int64) meter.Contribution {
		return meter.Contribution{Meter: "seats", Aggregation: meter.Latest, AtMs: at(received).UnixMilli(), Value: v,
			OrderKey: rollup.LatestOrderKey(at(happened).UnixMilli(), id)}
	}
	apply(t, s, a, seat("2026-11-18T10:00:05Z", "2026-11-18T10:00:00Z", "s1", 5))
	apply(t, s, a, seat("2026-11-18T10:00:09Z", "2026-11-18T09:59:00Z", "s2", 3)) // arrived later, happened earlier
	apply(t, s, a, seat("2026-11-18T10:00:10Z", "2026-11-18T10:00:00Z", "s3", 8)) // same instant, larger id
	apply(t, s, a, seat("2026-11-18T10:00:11Z", "2026-11-18T10:00:00Z", "s0", 1)) // same instant, smaller id
	seatsDay := rollup.QueryInput{Account: a, Meter: seats, Window: rollup.Day, From: at("2026-11-18T00:00:00Z"), To: at("2026-11-19T00:00:00Z")}
	if got, want := rows(t, s, seatsDay), []string{"11-18T00:00 map[] 8"}; !reflect.DeepEqual(got, want) {
		t.Errorf("LATEST: %q; want %q", got, want)
	}

	users := rollup.Meter{Name: "users", Aggregation: meter.UniqueCount}
	first := func(when string) meter.Contribution {
		return meter.Contribution{Meter: "users", Aggregation: meter.UniqueCount, AtMs: at(when).UnixMilli(), Value: 1}
	}
	apply(t, s, a, first("2026-11-18T10:00:00Z"), first("2026-11-18T10:00:01Z"))
	apply(t, s, a, first("2026-11-19T08:00:00Z"))
	usersCycle := rollup.QueryInput{Account: a, Meter: users, Window: rollup.Cycle, From: at("2026-11-01T00:00:00Z"), To: at("2026-12-01T00:00:00Z")}
	if got, want := rows(t, s, usersCycle), []string{"11-01T00:00 map[] 3"}; !reflect.DeepEqual(got, want) {
		t.Errorf("UNIQUE_COUNT: %q; want %q", got, want)
	}
}

// A day in Kolkata begins at 18:30 UTC: usage on either side of that instant, in one hour, goes
// to its own day, read from the minute items of that hour.
func TestStore_DayInAHalfHourZone_SplitsTheBoundaryHour(t *testing.T) {
	s, _ := newStore(t)
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	c := func(when string, v int64) meter.Contribution {
		return meter.Contribution{Meter: "tokens", Aggregation: meter.Sum, AtMs: at(when).UnixMilli(), Value: v}
	}
	apply(t, s, "acct_k", c("2026-11-18T18:29:59Z", 1), c("2026-11-18T18:30:00Z", 10), c("2026-11-18T18:59:00Z", 100))
	apply(t, s, "acct_k", c("2026-11-18T12:00:00Z", 1000), c("2026-11-19T18:29:00Z", 10000))
	in := rollup.QueryInput{Account: "acct_k", Meter: rollup.Meter{Name: "tokens", Aggregation: meter.Sum}, Window: rollup.Day, Zone: kolkata,
		From: at("2026-11-17T18:30:00Z"), To: at("2026-11-19T18:30:00Z")}
	if got, want := rows(t, s, in), []string{"11-17T18:30 map[] 1001", "11-18T18:30 map[] 10110"}; !reflect.DeepEqual(got, want) {
		t.Errorf("DAY in Kolkata: %q; want %q", got, want)
	}
}

// Minute items expire RollupMinuteRetention after their minute; hour items are kept.
func TestStore_MinuteItemsExpire_HourItemsAreKept(t *testing.T) {
	s, env := newStore(t)
	apply(t, s, "acct_t", meter.Contribution{Meter: "events", Aggregation: meter.Count, AtMs: at("2026-11-18T10:07:42Z").UnixMilli(), Value: 1})
	for sk, want := range map[string]int64{
		"m#2026-11-18T10:07:00Z": at("2026-11-18T10:07:00Z").Add(resources.RollupMinuteRetention).Unix(),
		"h#2026-11-18T10:00:00Z": 0,
	} {
		out, err := env.Clients.DynamoDB.GetItem(context.Background(), &dynamodb.GetItemInput{
			TableName: aws.String(s.Table), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"pk": dynamo.S("acct_t#events"), "sk": dynamo.S(sk)},
		})
		if err != nil || out.Item == nil {
			t.Fatalf("%s: %v", sk, err)
		}
		if got := dynamo.Int(out.Item, resources.RollupTTLAttribute); got != want || dynamo.Int(out.Item, "[]") != 1 || dynamo.Int(out.Item, "rev") != 1 {
			t.Errorf("%s: %v; want expiresAt %d", sk, out.Item, want)
		}
	}
}

// A meter whose dimension takes many values keeps its hour item within MaxItemGroupBytes: the
// groups past it are counted as other, and the total is still exact.
func TestStore_ManyGroupsInAnHour_TheRestCountAsOther(t *testing.T) {
	s, env := newStore(t)
	const groups = 600
	var cs []meter.Contribution
	for i := range groups {
		cs = append(cs, meter.Contribution{Meter: "logins", Aggregation: meter.Sum, AtMs: at("2026-11-18T10:00:00Z").UnixMilli() + int64(i),
			Group: []string{"user-" + strconv.Itoa(i)}, Value: 1})
	}
	for start := 0; start < groups; start += 100 { // a claim's share: at most a unit's events
		apply(t, s, "acct_m", cs[start:start+100]...)
	}
	in := rollup.QueryInput{Account: "acct_m", Meter: rollup.Meter{Name: "logins", Aggregation: meter.Sum, Dimensions: []string{"user"}},
		Window: rollup.Hour, From: at("2026-11-18T10:00:00Z"), To: at("2026-11-18T11:00:00Z"), GroupBy: []string{"user"}}
	res, err := s.Query(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	var total, other, kept int64
	for _, r := range res.Rows {
		total += r.Value
		if r.Other {
			other += r.Value
		} else {
			kept++
		}
	}
	if total != groups || other == 0 || kept == 0 {
		t.Errorf("total %d (want %d), %d groups kept, %d counted as other", total, groups, kept, other)
	}
	out, err := env.Clients.DynamoDB.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(s.Table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": dynamo.S("acct_m#logins"), "sk": dynamo.S("h#2026-11-18T10:00:00Z")},
	})
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	for name, v := range out.Item {
		if n, ok := v.(*types.AttributeValueMemberN); ok {
			size += len(name) + len(n.Value)
		}
	}
	if size > rollup.MaxItemGroupBytes+1024 {
		t.Errorf("the hour item holds %d bytes of groups; the bound is %d", size, rollup.MaxItemGroupBytes)
	}
	t.Logf("%d users in one hour: %d kept by name, %d counted as other; the hour item holds about %d bytes", groups, kept, other, size)
}

// guardRun plans two MAX claims from one read, the larger committed first: the smaller one's
// write must be refused, or it would lower the maximum.
func guardRun(seed []meter.Contribution) func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
	return func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		ctx := context.Background()
		s := storeOn(env, db)
		if len(seed) > 0 {
			if err := s.Apply(ctx, "acct_g", seed); err != nil {
				return err
			}
		}
		c := func(v int64) []meter.Contribution {
			return []meter.Contribution{{Meter: "peak", Aggregation: meter.Max, AtMs: at("2026-11-18T10:00:00Z").UnixMilli(), Value: v}}
		}
		read, err := s.Read(ctx, "acct_g", c(0))
		if err != nil {
			return err
		}
		for _, v := range []int64{90, 50} {
			p, err := rollup.PlanWrites(s.Table, "acct_g", c(v), read)
			if err != nil {
				return err
			}
			_, err = db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: p.Writes})
			switch {
			case v == 50 && dynamo.IsTransactionCanceled(err):
			case err != nil:
				return err
			}
		}
		res, err := s.Query(ctx, rollup.QueryInput{Account: "acct_g", Meter: rollup.Meter{Name: "peak", Aggregation: meter.Max},
			Window: rollup.Minute, From: at("2026-11-18T10:00:00Z"), To: at("2026-11-18T10:01:00Z")})
		if err != nil {
			return err
		}
		if len(res.Rows) != 1 || res.Rows[0].Value != 90 {
			return fmt.Errorf("the maximum reads %+v after claims of 90 and 50; want 90", res.Rows)
		}
		return nil
	}
}

// A MAX planned from a read that found the item is refused once another claim raised it.
func TestGuard_AMaxPlannedFromAStaleReadNeverLowersIt(t *testing.T) {
	testenv.NeedsGuard(t, "rollup.set.rev", guardRun([]meter.Contribution{
		{Meter: "peak", Aggregation: meter.Max, AtMs: at("2026-11-18T10:00:30Z").UnixMilli(), Value: 10},
	}))
}

// A MAX planned from a read that found no item is refused once another claim created it.
func TestGuard_AMaxPlannedFromAnAbsentItemNeverLowersIt(t *testing.T) {
	testenv.NeedsGuard(t, "rollup.set.new", guardRun(nil))
}

// A LATEST planned from a stale read is refused too; planned again from a fresh read, the
// earlier event writes nothing, and the later one's value stays.
func TestStore_ALatestPlannedFromAStaleReadIsCancelled(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	c := func(happened string, id string, v int64) []meter.Contribution {
		return []meter.Contribution{{Meter: "seats", Aggregation: meter.Latest, AtMs: at("2026-11-18T10:00:00Z").UnixMilli(), Value: v,
			OrderKey: rollup.LatestOrderKey(at(happened).UnixMilli(), id)}}
	}
	read, err := s.Read(ctx, "acct_l", c("2026-11-18T09:00:00Z", "a", 0))
	if err != nil {
		t.Fatal(err)
	}
	apply(t, s, "acct_l", c("2026-11-18T09:30:00Z", "b", 7)...)
	stale, err := rollup.PlanWrites(s.Table, "acct_l", c("2026-11-18T09:00:00Z", "a", 3), read)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: stale.Writes})
	if !dynamo.IsTransactionCanceled(err) {
		t.Fatalf("a plan from a stale read: %v; want cancelled", err)
	}
	// Planned again from a fresh read, the earlier event writes nothing at all.
	if err := s.Apply(ctx, "acct_l", c("2026-11-18T09:00:00Z", "a", 3)); err != nil {
		t.Fatal(err)
	}
	in := rollup.QueryInput{Account: "acct_l", Meter: rollup.Meter{Name: "seats", Aggregation: meter.Latest},
		Window: rollup.Minute, From: at("2026-11-18T10:00:00Z"), To: at("2026-11-18T10:01:00Z")}
	if got := rows(t, s, in); !reflect.DeepEqual(got, []string{"11-18T10:00 map[] 7"}) {
		t.Errorf("LATEST: %q", got)
	}
}
