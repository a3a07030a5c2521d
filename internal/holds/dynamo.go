package holds

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/holds/ratelimit"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Sort keys in a hold's partition: the hold itself and one item per charge step.
const (
	holdSK     = "hold"
	stepPrefix = "step#"
)

// Expressions. Every attribute name is written as an alias (see dynamo.Names): "status" and
// "key" are DynamoDB reserved words.
const (
	absentCondition = "attribute_not_exists(#pk)"
	// revCondition lands a write only on the revision of the hold it was decided on. Every
	// write of a hold bumps its revision, the settlement (the only way out of RUNNING)
	// included, and a lap writes only after reading the hold RUNNING: so the hold is still
	// RUNNING when the write lands, and no charge or settlement is lost or made twice.
	revCondition       = "#rev = :rev"
	chargeUpdate       = "SET #used = :used, #leaseExpiresAtMs = :lease, #updatedAtMs = :now, #rev = :next"
	lapsedKeyCondition = "#leaseShard = :shard AND #leaseExpiresAtMs <= :now"
)

// Table keeps holds and their steps in the holds table. Its transactions span the holds
// table, the budget rows of the usage table and the rate-limit counters.
type Table struct {
	DB         *dynamodb.Client
	Table      string
	Usage      usage.Table
	RateLimits ratelimit.Table
	// Notifications is the notifications table, where a refusal is told (Tell); a Table that
	// only settles (the sweeper's) has none.
	Notifications string
}

type holdItem struct {
	PK               string `dynamodbav:"pk"`
	SK               string `dynamodbav:"sk"`
	ID               string `dynamodbav:"id"`
	AccountID        string `dynamodbav:"accountId"`
	Key              string `dynamodbav:"jobKey"`
	Feature          string `dynamodbav:"feature"`
	Cycle            string `dynamodbav:"cycle"`
	Amount           int64  `dynamodbav:"amount"`
	Used             int64  `dynamodbav:"used"`
	Status           string `dynamodbav:"status"`
	LeaseExpiresAtMs int64  `dynamodbav:"leaseExpiresAtMs"`
	// LeaseShard is present only while RUNNING: it is what puts the hold in the lease index.
	LeaseShard  string `dynamodbav:"leaseShard,omitempty"`
	LimitMax    *int64 `dynamodbav:"limitAtAdmission,omitempty"`
	Charged     int64  `dynamodbav:"charged"`
	Released    int64  `dynamodbav:"released"`
	SettledAtMs int64  `dynamodbav:"settledAtMs,omitempty"`
	CreatedAtMs int64  `dynamodbav:"createdAtMs"`
	UpdatedAtMs int64  `dynamodbav:"updatedAtMs"`
	Rev         int64  `dynamodbav:"rev"`
	// ExpiresAt (epoch seconds) is set at settlement; a running hold never expires by TTL.
	ExpiresAt int64 `dynamodbav:"expiresAt,omitempty"`
	// AccountStatus ("<account>#<status>") puts the hold in the account index, beside its
	// creation time. A charge changes neither; a settlement, which writes the hold whole, moves it.
	AccountStatus string `dynamodbav:"accountStatus"`
	// SettledPartition is present only on a final hold: its usage partition, which puts it in
	// the settled index the reconciler sums the ledger's holds from.
	SettledPartition string `dynamodbav:"settledPartition,omitempty"`
}

func (it holdItem) hold() Hold {
	h := Hold{
		ID: it.ID, AccountID: it.AccountID, Key: it.Key, Feature: it.Feature, Cycle: it.Cycle,
		Amount: it.Amount, Limit: plans.Unlimited, Used: it.Used, Status: Status(it.Status),
		LeaseExpiresAtMs: it.LeaseExpiresAtMs, Charged: it.Charged, Released: it.Released,
		SettledAtMs: it.SettledAtMs, CreatedAtMs: it.CreatedAtMs, UpdatedAtMs: it.UpdatedAtMs, Rev: it.Rev,
	}
	if it.LimitMax != nil {
		h.Limit = plans.Max(*it.LimitMax)
	}
	return h
}

// itemOf is the stored form of a hold. A RUNNING hold carries its lease shard, which is what
// puts it in the sparse lease index; a final hold carries none, and its retention instead.
func itemOf(h Hold) holdItem {
	it := holdItem{
		PK: partition(h.AccountID, h.ID), SK: holdSK, ID: h.ID, AccountID: h.AccountID, Key: h.Key,
		Feature: h.Feature, Cycle: h.Cycle, Amount: h.Amount, Used: h.Used, Status: string(h.Status),
		LeaseExpiresAtMs: h.LeaseExpiresAtMs, Charged: h.Charged, Released: h.Released,
		SettledAtMs: h.SettledAtMs, CreatedAtMs: h.CreatedAtMs, UpdatedAtMs: h.UpdatedAtMs, Rev: h.Rev,
		AccountStatus: AccountStatusKey(h.AccountID, h.Status),
	}
	if !h.Limit.Unlimited {
		it.LimitMax = aws.Int64(h.Limit.Max)
	}
	if h.Status == Running {
		it.LeaseShard = LeaseShard(h.ID)
	} else {
		it.ExpiresAt = expiresAt(h.SettledAtMs)
		it.SettledPartition = usage.PartitionKey(h.AccountID, h.Feature, h.Cycle)
	}
	return it
}

type stepItem struct {
	PK               string `dynamodbav:"pk"`
	SK               string `dynamodbav:"sk"`
	HoldID           string `dynamodbav:"holdId"`
	Key              string `dynamodbav:"stepKey"`
	Requested        int64  `dynamodbav:"requested"`
	Charged          int64  `dynamodbav:"charged"`
	Capped           bool   `dynamodbav:"capped"`
	Used             int64  `dynamodbav:"used"`
	Amount           int64  `dynamodbav:"amount"`
	Status           string `dynamodbav:"status"`
	LeaseExpiresAtMs int64  `dynamodbav:"leaseExpiresAtMs"`
	CreatedAtMs      int64  `dynamodbav:"createdAtMs"`
	ExpiresAt        int64  `dynamodbav:"expiresAt"`
}

func (it stepItem) step() Step {
	return Step{
		HoldID: it.HoldID, Key: it.Key, Requested: it.Requested, Charged: it.Charged, Capped: it.Capped,
		Used: it.Used, Amount: it.Amount, Status: Status(it.Status), LeaseExpiresAtMs: it.LeaseExpiresAtMs,
		CreatedAtMs: it.CreatedAtMs,
	}
}

// partition is the hold's partition key. Scoping it by account means another account's hold id
// simply names no item: a lookup can never read it, let alone leak that it exists.
func partition(accountID, holdID string) string { return accountID + "#" + holdID }

func holdKey(accountID, holdID string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": dynamo.S(partition(accountID, holdID)), "sk": dynamo.S(holdSK)}
}

func stepKey(accountID, holdID, key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": dynamo.S(partition(accountID, holdID)), "sk": dynamo.S(stepPrefix + key)}
}

// LeaseShard spreads running holds over the lease index's partitions by their id.
func LeaseShard(holdID string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(holdID))
	return ShardName(int(h.Sum32() % resources.HoldsLeaseShards))
}

// ShardName is the lease index partition key of shard n.
func ShardName(n int) string { return fmt.Sprintf("%02d", n) }

func expiresAt(fromMs int64) int64 { return time.UnixMilli(fromMs).Add(Retention).Unix() }

// Reserve implements Store: one transaction puts the hold (only if its key names no hold yet),
// holds its amount on the budget row (only if committed stays within the limit) and counts it
// against the account's rate limit (only if the window has room).
func (s *Table) Reserve(ctx context.Context, h Hold, rate ratelimit.Limit, now time.Time) error {
	item, err := attributevalue.MarshalMap(itemOf(h))
	if err != nil {
		return fmt.Errorf("encode hold %s: %w", h.ID, err)
	}
	return s.write(ctx, "reserve hold "+h.ID, []types.TransactWriteItem{
		{Put: &types.Put{
			TableName: aws.String(s.Table), Item: item,
			ConditionExpression: aws.String(absentCondition), ExpressionAttributeNames: dynamo.Names(absentCondition),
		}},
		s.Usage.HoldCapped(h.AccountID, h.Feature, h.Cycle, h.Amount, h.Limit, now.UnixMilli()),
		s.RateLimits.Take(rate, h.AccountID, now),
	})
}

// ReadReservation implements Store: the hold (if its key names one), the budget row and the
// rate counter, in one strongly consistent snapshot.
func (s *Table) ReadReservation(ctx context.Context, accountID, holdID, feature, cycleLabel string, rate ratelimit.Limit, now time.Time) (Reservation, error) {
	out, err := s.DB.TransactGetItems(ctx, &dynamodb.TransactGetItemsInput{TransactItems: []types.TransactGetItem{
		{Get: &types.Get{TableName: aws.String(s.Table), Key: holdKey(accountID, holdID)}},
		s.Usage.GetBudget(accountID, feature, cycleLabel),
		s.RateLimits.Get(rate, accountID, now),
	}})
	if err != nil {
		return Reservation{}, s.translate("read reservation "+holdID, err)
	}
	var r Reservation
	if item := out.Responses[0].Item; item != nil {
		h, err := decodeHold(item)
		if err != nil {
			return Reservation{}, err
		}
		r.Hold = &h
	}
	r.Budget = usage.BudgetOf(out.Responses[1].Item)
	r.RateCount = ratelimit.CountOf(out.Responses[2].Item)
	return r, nil
}

// Get implements Store.
func (s *Table) Get(ctx context.Context, accountID, holdID string) (Hold, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.Table), Key: holdKey(accountID, holdID), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Hold{}, fmt.Errorf("read hold %s: %w", holdID, err)
	}
	if out.Item == nil {
		return Hold{}, ErrNotFound
	}
	return decodeHold(out.Item)
}

// ReadCharge implements Store: the hold and the step's stored answer (if the step key was
// charged before), in one strongly consistent snapshot.
func (s *Table) ReadCharge(ctx context.Context, accountID, holdID, key string) (Hold, *Step, error) {
	out, err := s.DB.TransactGetItems(ctx, &dynamodb.TransactGetItemsInput{TransactItems: []types.TransactGetItem{
		{Get: &types.Get{TableName: aws.String(s.Table), Key: holdKey(accountID, holdID)}},
		{Get: &types.Get{TableName: aws.String(s.Table), Key: stepKey(accountID, holdID, key)}},
	}})
	if err != nil {
		return Hold{}, nil, s.translate("read charge "+holdID, err)
	}
	if out.Responses[0].Item == nil {
		return Hold{}, nil, ErrNotFound
	}
	h, err := decodeHold(out.Responses[0].Item)
	if err != nil {
		return Hold{}, nil, err
	}
	if out.Responses[1].Item == nil {
		return h, nil, nil
	}
	var it stepItem
	if err := attributevalue.UnmarshalMap(out.Responses[1].Item, &it); err != nil {
		return Hold{}, nil, fmt.Errorf("decode step %s of hold %s: %w", key, holdID, err)
	}
	st := it.step()
	return h, &st, nil
}

// Charge implements Store: one transaction stores the step's answer under its key (only if the
// key is new) and moves the hold's usage and lease (only if the hold is still RUNNING at the
// revision the step was decided on).
func (s *Table) Charge(ctx context.Context, h Hold, st Step) error {
	item, err := attributevalue.MarshalMap(stepItem{
		PK: partition(h.AccountID, h.ID), SK: stepPrefix + st.Key, HoldID: h.ID, Key: st.Key,
		Requested: st.Requested, Charged: st.Charged, Capped: st.Capped, Used: st.Used, Amount: st.Amount,
		Status: string(st.Status), LeaseExpiresAtMs: st.LeaseExpiresAtMs, CreatedAtMs: st.CreatedAtMs,
		ExpiresAt: expiresAt(st.CreatedAtMs),
	})
	if err != nil {
		return fmt.Errorf("encode step %s: %w", st.Key, err)
	}
	// The step carries no condition of its own: the lap read the hold and the step in one
	// snapshot, the step was absent, and a step is only ever written together with a bump of
	// the hold's revision; so if the revision guard passes, no step was written since.
	return s.write(ctx, "charge hold "+h.ID, []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(s.Table), Item: item}},
		{Update: &types.Update{
			TableName:                aws.String(s.Table),
			Key:                      holdKey(h.AccountID, h.ID),
			UpdateExpression:         aws.String(chargeUpdate),
			ConditionExpression:      aws.String(revCondition),
			ExpressionAttributeNames: dynamo.Names(chargeUpdate, revCondition),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":used": dynamo.N(st.Used), ":lease": dynamo.N(st.LeaseExpiresAtMs), ":now": dynamo.N(st.CreatedAtMs),
				":next": dynamo.N(h.Rev + 1), ":rev": dynamo.N(h.Rev),
			},
		}},
	})
}

// Settle implements Store: one transaction replaces the hold with its final version (only if
// it is still RUNNING at the revision the settlement was decided on) and moves the budget row:
// the charged part to used, the rest back to the limit. The final version is written whole
// rather than updated so that it carries no lease shard and so leaves the sparse lease index.
func (s *Table) Settle(ctx context.Context, h Hold, st Settlement, nowMs int64) error {
	final := h
	final.Status, final.Used, final.Charged, final.Released = st.Status, st.Used, st.Charged, st.Released
	final.SettledAtMs, final.UpdatedAtMs, final.Rev = nowMs, nowMs, h.Rev+1
	item, err := attributevalue.MarshalMap(itemOf(final))
	if err != nil {
		return fmt.Errorf("encode hold %s: %w", h.ID, err)
	}
	items := []types.TransactWriteItem{
		{Put: &types.Put{
			TableName:                aws.String(s.Table),
			Item:                     item,
			ConditionExpression:      aws.String(revCondition),
			ExpressionAttributeNames: dynamo.Names(revCondition),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":rev": dynamo.N(h.Rev),
			},
		}},
		s.Usage.SettleHold(h.AccountID, h.Feature, h.Cycle, h.Amount, st.Charged, nowMs),
	}
	if st.Charged == 0 {
		// Nothing billed moves: the budget row's used is unchanged, so there is nothing to report.
		return s.write(ctx, "settle hold "+h.ID, items)
	}
	// A settlement that charges moves the billed total, so it marks the budget row for the
	// reporter: it reads the row's report mark first (settlements are per job, not per event),
	// checks it in the transaction when it is there, and puts it when it is not (see
	// usage/marks.go). A mark taken off between the read and the write cancels the transaction;
	// the mark is read again and the write made once more with the mark put.
	for try := 0; ; try++ {
		marked, err := s.Usage.Marked(ctx, h.AccountID, h.Feature, h.Cycle, usage.BudgetSK)
		if err != nil {
			return err
		}
		err = s.write(ctx, "settle hold "+h.ID, append(items,
			s.Usage.MarkedItems(h.AccountID, h.Feature, h.Cycle, usage.BudgetSK, marked, nowMs)))
		if !errors.Is(err, ErrCancelled) || !marked || try > 0 {
			return err // a cancellation the mark does not explain: the service reads the hold again
		}
	}
}

// LapsedLeases implements Store: the running holds of one lease shard whose lease ran out by
// nowMs, oldest first, reading at most maxPages pages of pageSize. The index is eventually
// consistent: callers re-read each hold before acting on it.
func (s *Table) LapsedLeases(ctx context.Context, shard int, nowMs int64, pageSize int32, maxPages int) ([]Ref, error) {
	var refs []Ref
	var start map[string]types.AttributeValue
	for range maxPages {
		out, err := s.DB.Query(ctx, &dynamodb.QueryInput{
			TableName:                aws.String(s.Table),
			IndexName:                aws.String(resources.IndexHoldsByLease),
			KeyConditionExpression:   aws.String(lapsedKeyCondition),
			ExpressionAttributeNames: dynamo.Names(lapsedKeyCondition),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":shard": dynamo.S(ShardName(shard)), ":now": dynamo.N(nowMs),
			},
			Limit:             aws.Int32(pageSize),
			ExclusiveStartKey: start,
		})
		if err != nil {
			return refs, fmt.Errorf("query lapsed leases of shard %d: %w", shard, err)
		}
		for _, item := range out.Items {
			accountID, holdID, ok := strings.Cut(dynamo.Str(item, "pk"), "#")
			if ok && dynamo.Str(item, "sk") == holdSK {
				refs = append(refs, Ref{AccountID: accountID, HoldID: holdID})
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			break
		}
		start = out.LastEvaluatedKey
	}
	return refs, nil
}

// Tell implements Store: the notification on its own, conditional on its absence.
func (s *Table) Tell(ctx context.Context, n notify.Notification) (bool, error) {
	if s.Notifications == "" {
		return false, fmt.Errorf("tell %s: the holds store was composed without the notifications table", n.Kind)
	}
	return notify.Tell(ctx, s.DB, s.Notifications, n)
}

func decodeHold(item map[string]types.AttributeValue) (Hold, error) {
	var it holdItem
	if err := attributevalue.UnmarshalMap(item, &it); err != nil {
		return Hold{}, fmt.Errorf("decode hold %s: %w", dynamo.Str(item, "id"), err)
	}
	return it.hold(), nil
}

func (s *Table) write(ctx context.Context, what string, items []types.TransactWriteItem) error {
	_, err := s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if err != nil {
		return s.translate(what, err)
	}
	return nil
}

// translate turns a cancelled transaction into ErrCancelled. Which condition failed is not read
// from the error: the service re-reads durable state to find out.
func (s *Table) translate(what string, err error) error {
	if dynamo.IsTransactionCanceled(err) {
		return fmt.Errorf("%s: %w", what, ErrCancelled)
	}
	return fmt.Errorf("%s: %w", what, err)
}
