package accounts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/platform/retry"
)

// Table keeps accounts in the accounts table, key hashes in the apikeys table and
// linked provider ids in the account links table.
type Table struct {
	DB            *dynamodb.Client
	AccountsTable string
	KeysTable     string
	LinksTable    string
}

// maxLinkAttempts bounds an update whose links another update changed between its read and its
// write; each lap re-reads the account.
const maxLinkAttempts = 3

// Link conditions: a link item is created only if the id names no account yet. The account's own
// link attribute is conditioned on the value the update read, so two updates racing to relink
// one account cannot both commit and leave a stray link item; and because a link item and its
// account's attribute only ever change together, the account still holding the old id proves
// the old link item is still its own, so deleting it needs no condition of its own.
const (
	linkAbsent    = "attribute_not_exists(#link)"
	linkUnchanged = "#%s = :was%s"
	linkWasAbsent = "(attribute_not_exists(#%s) OR #%s = :empty)"
)

type accountItem struct {
	ID     string            `dynamodbav:"id"`
	Plan   string            `dynamodbav:"plan"`
	Status string            `dynamodbav:"status"`
	Limits map[string]*int64 `dynamodbav:"limits,omitempty"`
	// Alerts: see Account, as JSON (alertsToItem): an override may be an empty list, which the
	// emulators' maps and lists do not keep as they are.
	Alerts           string `dynamodbav:"alerts,omitempty"`
	AgreementDay     int    `dynamodbav:"agreementDay,omitempty"`
	CreatedAtMs      int64  `dynamodbav:"createdAtMs"`
	UpdatedAtMs      int64  `dynamodbav:"updatedAtMs"`
	UsageStartedAtMs int64  `dynamodbav:"usageStartedAtMs,omitempty"`
	KindeCustomerID  string `dynamodbav:"kindeCustomerId,omitempty"`
	StripeCustomerID string `dynamodbav:"stripeCustomerId,omitempty"`
	KindeAgreementID string `dynamodbav:"kindeAgreementId,omitempty"`
	PlanChangedAtMs  int64  `dynamodbav:"planChangedAtMs,omitempty"`
	// StatusChangedAtMs: see Account.
	StatusChangedAtMs int64  `dynamodbav:"statusChangedAtMs,omitempty"`
	PlanChangeKey     string `dynamodbav:"planChangeKey,omitempty"`
	StatusChangeKey   string `dynamodbav:"statusChangeKey,omitempty"`
	// ListKey puts the account in the accounts table's list index, from its creation.
	ListKey string `dynamodbav:"listKey,omitempty"`
}

// linkItem maps one provider id to its account.
type linkItem struct {
	Link        string `dynamodbav:"link"`
	AccountID   string `dynamodbav:"accountId"`
	CreatedAtMs int64  `dynamodbav:"createdAtMs"`
}

// linkKey is the link item's key: the kind and the id. Ids never contain '#'.
func linkKey(kind LinkKind, id string) string { return string(kind) + "#" + id }

type keyItem struct {
	KeyHash     string `dynamodbav:"keyHash"`
	AccountID   string `dynamodbav:"accountId"`
	CreatedAtMs int64  `dynamodbav:"createdAtMs"`
}

func limitsToItem(l map[string]plans.Limit) map[string]*int64 {
	if len(l) == 0 {
		return nil
	}
	out := make(map[string]*int64, len(l))
	for f, v := range l {
		if v.Unlimited {
			out[f] = nil
			continue
		}
		out[f] = aws.Int64(v.Max)
	}
	return out
}

// alertsToItem is an account's threshold overrides as stored: JSON, "" for none.
func alertsToItem(a map[string][]plans.Threshold) string {
	if len(a) == 0 {
		return ""
	}
	b, err := json.Marshal(a)
	if err != nil {
		panic(fmt.Sprintf("accounts: encode thresholds: %v", err)) // integers in plain structs
	}
	return string(b)
}

func (it accountItem) account() Account {
	a := Account{
		ID: it.ID, Plan: it.Plan, Status: Status(it.Status), AgreementDay: it.AgreementDay,
		CreatedAtMs: it.CreatedAtMs, UpdatedAtMs: it.UpdatedAtMs, UsageStartedAtMs: it.UsageStartedAtMs,
		KindeCustomerID: it.KindeCustomerID, StripeCustomerID: it.StripeCustomerID, KindeAgreementID: it.KindeAgreementID,
		PlanChangedAtMs: it.PlanChangedAtMs, StatusChangedAtMs: it.StatusChangedAtMs,
		PlanChangeKey: it.PlanChangeKey, StatusChangeKey: it.StatusChangeKey,
		Known: true,
	}
	if it.Alerts != "" {
		if err := json.Unmarshal([]byte(it.Alerts), &a.Alerts); err != nil {
			a.Alerts = nil // written by alertsToItem only; unreadable would be a defect, read as no override
		}
	}
	if len(it.Limits) > 0 {
		a.Limits = make(map[string]plans.Limit, len(it.Limits))
		for f, v := range it.Limits {
			if v == nil {
				a.Limits[f] = plans.Unlimited
			} else {
				a.Limits[f] = plans.Max(*v)
			}
		}
	}
	return a
}

const markUsageStarted = "SET #usageStartedAtMs = if_not_exists(#usageStartedAtMs, :now)"

// Conditions of the account writes. Every attribute name is an alias (see dynamo.Names).
const (
	accountAbsent = "attribute_not_exists(#id)"
	accountExists = "attribute_exists(#id)"
	// agreementOpen: the agreement day may change only before the first usage fixes the
	// billing cycle (or be set to the day it already has).
	agreementOpen = "(attribute_not_exists(#usageStartedAtMs) OR #agreementDay = :day)"
	// updatePrefix begins every account update expression.
	updatePrefix = "SET #updatedAtMs = :now"
)

// Create implements Store.
func (s *Table) Create(ctx context.Context, a Account, keyHash string) error {
	acct, err := attributevalue.MarshalMap(accountItem{
		ID: a.ID, Plan: a.Plan, Status: string(a.Status), Limits: limitsToItem(a.Limits), Alerts: alertsToItem(a.Alerts),
		CreatedAtMs: a.CreatedAtMs, UpdatedAtMs: a.UpdatedAtMs,
		KindeCustomerID: a.KindeCustomerID, StripeCustomerID: a.StripeCustomerID, KindeAgreementID: a.KindeAgreementID,
		ListKey: resources.AccountsListValue,
	})
	if err != nil {
		return err
	}
	key, err := attributevalue.MarshalMap(keyItem{KeyHash: keyHash, AccountID: a.ID, CreatedAtMs: a.CreatedAtMs})
	if err != nil {
		return err
	}
	items := []types.TransactWriteItem{
		{Put: &types.Put{
			TableName: aws.String(s.AccountsTable), Item: acct,
			ConditionExpression: aws.String(accountAbsent), ExpressionAttributeNames: dynamo.Names(accountAbsent),
		}},
		// The key's row carries no condition: its hash is of 256 random bits, which no other
		// key ever shares, and a retried creation makes a new key.
		{Put: &types.Put{TableName: aws.String(s.KeysTable), Item: key}},
	}
	for _, kind := range LinkKinds {
		if id := a.Link(kind); id != "" {
			put, err := s.putLink(kind, id, a.ID, a.CreatedAtMs)
			if err != nil {
				return err
			}
			items = append(items, put)
		}
	}
	_, err = s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if dynamo.IsTransactionCanceled(err) {
		// A 256-bit key never collides; the durable reasons are an existing account or a
		// provider id another account is linked to.
		if _, gerr := s.Get(ctx, a.ID); gerr == nil {
			return ErrExists
		}
		if taken := s.takenLink(ctx, a, a.ID); taken != nil {
			return taken
		}
		return fmt.Errorf("create account %s: %w", a.ID, err)
	}
	if err != nil {
		return fmt.Errorf("create account %s: %w", a.ID, err)
	}
	return nil
}

// Get implements Store.
func (s *Table) Get(ctx context.Context, id string) (Account, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.AccountsTable),
		Key:            map[string]types.AttributeValue{"id": dynamo.S(id)},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Account{}, fmt.Errorf("get account %s: %w", id, err)
	}
	if out.Item == nil {
		return Account{}, ErrNotFound
	}
	var it accountItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return Account{}, fmt.Errorf("decode account %s: %w", id, err)
	}
	return it.account(), nil
}

// putLink is the transaction item that links a provider id to an account, only if it names no
// account yet.
func (s *Table) putLink(kind LinkKind, id, accountID string, nowMs int64) (types.TransactWriteItem, error) {
	item, err := attributevalue.MarshalMap(linkItem{Link: linkKey(kind, id), AccountID: accountID, CreatedAtMs: nowMs})
	if err != nil {
		return types.TransactWriteItem{}, err
	}
	return types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(s.LinksTable), Item: item,
		ConditionExpression: aws.String(linkAbsent), ExpressionAttributeNames: dynamo.Names(linkAbsent),
	}}, nil
}

// deleteLink is the transaction item that unlinks a provider id (see the link conditions).
func (s *Table) deleteLink(kind LinkKind, id string) types.TransactWriteItem {
	return types.TransactWriteItem{Delete: &types.Delete{
		TableName: aws.String(s.LinksTable),
		Key:       map[string]types.AttributeValue{"link": dynamo.S(linkKey(kind, id))},
	}}
}

// takenLink returns the first of a's links that names another account than owner, if any.
func (s *Table) takenLink(ctx context.Context, a Account, owner string) *LinkTakenError {
	for _, kind := range LinkKinds {
		id := a.Link(kind)
		if id == "" {
			continue
		}
		if other, err := s.AccountIDForLink(ctx, kind, id); err == nil && other != owner {
			return &LinkTakenError{Link: kind, ID: id}
		}
	}
	return nil
}

// Update implements Store. An update that changes linked ids changes the account and its link
// items in one transaction, conditioned on the links it read.
func (s *Table) Update(ctx context.Context, id string, in UpdateInput, nowMs int64) (Account, error) {
	if len(in.Links) == 0 {
		return s.update(ctx, id, in, nowMs, Account{})
	}
	a, err := retry.Do(ctx, retry.Contended.WithTries(maxLinkAttempts), func(ctx context.Context, _ retry.Lap) (Account, error) {
		current, err := s.Get(ctx, id)
		if err != nil {
			return Account{}, err
		}
		a, err := s.update(ctx, id, in, nowMs, current)
		if errors.Is(err, errLinksMoved) {
			// Another update relinked meanwhile: read the account again and decide on it.
			return Account{}, retry.Reread(err)
		}
		return a, err
	})
	if errors.Is(err, retry.ErrExhausted) {
		return Account{}, ErrLinkContended
	}
	return a, err
}

// errLinksMoved: the account's links changed between the read and the write; read again.
var errLinksMoved = errors.New("the account's links changed since they were read")

// update writes in. current is the account as read before, when in changes links.
func (s *Table) update(ctx context.Context, id string, in UpdateInput, nowMs int64, current Account) (Account, error) {
	sets := []string{strings.TrimPrefix(updatePrefix, "SET ")}
	values := map[string]types.AttributeValue{":now": dynamo.N(nowMs)}
	cond := accountExists
	if in.Plan != nil {
		sets = append(sets, "#plan = :plan")
		values[":plan"] = &types.AttributeValueMemberS{Value: *in.Plan}
	}
	if in.Status != nil {
		sets = append(sets, "#status = :status")
		values[":status"] = &types.AttributeValueMemberS{Value: string(*in.Status)}
	}
	if in.Limits != nil {
		// NULL, not REMOVE or an empty map: it reads the same (no overrides), and minidyn ignores
		// REMOVE and garbles empty maps.
		var av types.AttributeValue = &types.AttributeValueMemberNULL{Value: true}
		if len(*in.Limits) > 0 {
			var err error
			if av, err = attributevalue.Marshal(limitsToItem(*in.Limits)); err != nil {
				return Account{}, err
			}
		}
		sets = append(sets, "#limits = :limits")
		values[":limits"] = av
	}
	if in.Alerts != nil {
		var av types.AttributeValue = &types.AttributeValueMemberNULL{Value: true}
		if enc := alertsToItem(*in.Alerts); enc != "" {
			av = dynamo.S(enc)
		}
		sets = append(sets, "#alerts = :alerts")
		values[":alerts"] = av
	}
	if in.AgreementDay != nil {
		sets = append(sets, "#agreementDay = :day")
		values[":day"] = dynamo.N(int64(*in.AgreementDay))
		// Setting the day it already has is not a change, even after the first usage.
		cond += " AND " + agreementOpen
	}
	var links []types.TransactWriteItem
	for _, kind := range LinkKinds {
		ref, ok := in.Links[kind]
		if !ok {
			continue
		}
		next := ""
		if ref != nil {
			next = *ref
		}
		was := current.Link(kind)
		if next == was {
			continue
		}
		f := kind.Field()
		// An empty string rather than REMOVE unlinks: minidyn ignores REMOVE, and "" reads as
		// unlinked, as an absent attribute does.
		sets = append(sets, fmt.Sprintf("#%s = :%s", f, f))
		values[":"+f] = dynamo.S(next)
		if was == "" {
			cond += " AND " + fmt.Sprintf(linkWasAbsent, f, f)
			values[":empty"] = dynamo.S("")
		} else {
			cond += " AND " + fmt.Sprintf(linkUnchanged, f, f)
			values[":was"+f] = dynamo.S(was)
			links = append(links, s.deleteLink(kind, was))
		}
		if next != "" {
			put, err := s.putLink(kind, next, id, nowMs)
			if err != nil {
				return Account{}, err
			}
			links = append(links, put)
		}
	}
	update := "SET " + strings.Join(sets, ", ")
	if len(links) > 0 {
		return s.updateWithLinks(ctx, id, in, update, cond, values, links)
	}
	out, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.AccountsTable),
		Key:                       map[string]types.AttributeValue{"id": dynamo.S(id)},
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  dynamo.Names(update, cond),
		ExpressionAttributeValues: values,
		ReturnValues:              types.ReturnValueAllNew,
	})
	if dynamo.IsConditionFailed(err) {
		if _, gerr := s.Get(ctx, id); errors.Is(gerr, ErrNotFound) {
			return Account{}, ErrNotFound
		} else if gerr != nil {
			return Account{}, gerr
		}
		return Account{}, ErrAgreementLocked
	}
	if err != nil {
		return Account{}, fmt.Errorf("update account %s: %w", id, err)
	}
	var it accountItem
	if err := attributevalue.UnmarshalMap(out.Attributes, &it); err != nil {
		return Account{}, fmt.Errorf("decode account %s: %w", id, err)
	}
	return it.account(), nil
}

// updateWithLinks writes an account update and its link changes in one transaction. A
// cancellation is explained from durable state: the account is gone, a new id names another
// account, the agreement day is locked, or the links moved under us (read again).
func (s *Table) updateWithLinks(ctx context.Context, id string, in UpdateInput, update, cond string,
	values map[string]types.AttributeValue, links []types.TransactWriteItem) (Account, error) {
	items := append([]types.TransactWriteItem{{Update: &types.Update{
		TableName:                 aws.String(s.AccountsTable),
		Key:                       map[string]types.AttributeValue{"id": dynamo.S(id)},
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  dynamo.Names(update, cond),
		ExpressionAttributeValues: values,
	}}}, links...)
	_, err := s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if err == nil {
		return s.Get(ctx, id)
	}
	if !dynamo.IsTransactionCanceled(err) {
		return Account{}, fmt.Errorf("update account %s: %w", id, err)
	}
	now, gerr := s.Get(ctx, id)
	if gerr != nil {
		return Account{}, gerr
	}
	var wanted Account
	for kind, next := range in.Links {
		if next != nil {
			wanted.setLink(kind, *next)
		}
	}
	if taken := s.takenLink(ctx, wanted, id); taken != nil {
		return Account{}, taken
	}
	if in.AgreementDay != nil && now.UsageStartedAtMs != 0 && now.AgreementDay != *in.AgreementDay {
		return Account{}, ErrAgreementLocked
	}
	return Account{}, errLinksMoved
}

// AccountIDForLink implements Store.
func (s *Table) AccountIDForLink(ctx context.Context, kind LinkKind, id string) (string, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.LinksTable),
		Key:            map[string]types.AttributeValue{"link": dynamo.S(linkKey(kind, id))},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return "", fmt.Errorf("look up %s %s: %w", kind.Field(), id, err)
	}
	if out.Item == nil {
		return "", ErrNotFound
	}
	var it linkItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return "", fmt.Errorf("decode link %s %s: %w", kind.Field(), id, err)
	}
	return it.AccountID, nil
}

// AccountIDForKey implements Store.
func (s *Table) AccountIDForKey(ctx context.Context, keyHash string) (string, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.KeysTable),
		Key:       map[string]types.AttributeValue{"keyHash": dynamo.S(keyHash)},
	})
	if err != nil {
		return "", fmt.Errorf("look up API key: %w", err)
	}
	if out.Item == nil {
		return "", ErrUnauthenticated
	}
	var it keyItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return "", fmt.Errorf("decode API key: %w", err)
	}
	return it.AccountID, nil
}

// MarkUsageStarted implements Store.
func (s *Table) MarkUsageStarted(ctx context.Context, id string, nowMs int64) (Account, error) {
	out, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.AccountsTable),
		Key:                       map[string]types.AttributeValue{"id": dynamo.S(id)},
		UpdateExpression:          aws.String(markUsageStarted),
		ExpressionAttributeNames:  dynamo.Names(markUsageStarted),
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": dynamo.N(nowMs)},
		ReturnValues:              types.ReturnValueAllNew,
	})
	if err != nil {
		return Account{}, fmt.Errorf("mark usage started for %s: %w", id, err)
	}
	var it accountItem
	if err := attributevalue.UnmarshalMap(out.Attributes, &it); err != nil {
		return Account{}, fmt.Errorf("decode account %s: %w", id, err)
	}
	return it.account(), nil
}
