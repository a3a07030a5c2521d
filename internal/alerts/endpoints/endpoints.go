// Package endpoints keeps the webhook endpoints the operator registers: where Ferry sends its
// notifications (an https URL), which kinds and accounts each wants, and the secrets its
// deliveries are signed with.
//
// # Registration
//
// Create checks a registration whole and reports every problem at once (the URL by
// send.CheckURL under the caller's policy, the kinds against notify.Kinds, the account ids as
// package accounts spells them, the bounds below); it never rewrites what it was given. It mints
// the endpoint's id ("we_" and 26 characters of base32) and its first secret ("whsec_" and the
// base64 of SecretBytes random bytes, the form every Standard Webhooks library takes), and puts
// the endpoint conditional on its absence. The secret is returned once, to the caller of Create;
// reads show when each secret was made and when it stops signing, never its value.
//
// # Rotation
//
// Rotate makes a new secret current. The secret it replaces keeps signing for RotationOverlap,
// so that receivers can switch at their own pace: during the overlap every delivery carries one
// signature per secret, and a receiver that holds either verifies it. An endpoint has at most
// two secrets (send.MaxSecrets): a rotation drops the one an earlier rotation left behind, even
// if its overlap has not run out.
//
// # Writes
//
// Every write after the first puts the whole endpoint, conditional on the revision it was
// decided on (Guards). Two rotations decided on one read cannot both land: the second is
// ErrConflict, and the secret the first returned stays. An update reads again and re-applies its
// change when another write landed in between (its fields are absolute values, so applying
// them to the newer endpoint is what the caller asked for), up to maxUpdateAttempts; what it
// never does is write back secrets it read before a rotation.
package endpoints

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/alerts/send"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/problem"
)

// Endpoint is one registered endpoint.
type Endpoint struct {
	ID  string `dynamodbav:"pk"`
	URL string `dynamodbav:"url"`
	// Kinds are the notification kinds it wants (empty: every kind); Accounts the accounts
	// (empty: every account).
	Kinds    []string `dynamodbav:"kinds,omitempty"`
	Accounts []string `dynamodbav:"accounts,omitempty"`
	// Secrets sign its deliveries: the current one first (no expiry), then, during a rotation,
	// the one it replaced until it expires.
	Secrets     []Secret `dynamodbav:"secrets"`
	Description string   `dynamodbav:"description,omitempty"`
	Disabled    bool     `dynamodbav:"disabled,omitempty"`
	CreatedAtMs int64    `dynamodbav:"createdAtMs"`
	UpdatedAtMs int64    `dynamodbav:"updatedAtMs"`
	// Rev counts the endpoint's writes; every rewrite is conditioned on the rev it read.
	Rev int64 `dynamodbav:"rev"`
}

// Secret is one signing secret ("whsec_" and base64 of random bytes, as Standard Webhooks
// writes them).
type Secret struct {
	Value       string `dynamodbav:"value"`
	CreatedAtMs int64  `dynamodbav:"createdAtMs"`
	// ExpiresAtMs is when a replaced secret stops signing (0: the current secret).
	ExpiresAtMs int64 `dynamodbav:"expiresAtMs,omitempty"`
}

// Limits of an endpoint and of the endpoints table.
const (
	// RotationOverlap is how long a replaced secret keeps signing after a rotation: a day gives
	// a receiver's operator time to deploy the new secret without a delivery failing meanwhile.
	RotationOverlap = 24 * time.Hour
	// SecretBytes is the length of a secret's key: 256 bits, the output size of the HMAC-SHA256
	// that signs with it.
	SecretBytes = 32
	// MaxAccounts bounds the accounts one endpoint names; more than that is one endpoint for
	// every account, filtered by the receiver.
	MaxAccounts = 100
	// MaxDescriptionChars bounds a description, in characters (Unicode code points, as JSON
	// Schema's maxLength counts them).
	MaxDescriptionChars = 256
	// MaxEndpoints bounds how many endpoints may be registered, so that the notifier's fan-out
	// and the list stay small. Create counts before it puts, so two registrations racing at the
	// bound may both land: it is a guard against runaway scripts, not a quota.
	MaxEndpoints = 100
	// maxListedKinds bounds the kinds a request may list before its kinds are refused as a
	// whole rather than one by one.
	maxListedKinds = 16
	// maxUpdateAttempts bounds the reads an update makes when other writes keep landing
	// between its read and its write.
	maxUpdateAttempts = 4
	// maxListPages bounds the pages All reads, of dynamo.MaxBatchGetKeys endpoints each:
	// MaxEndpoints fit in one, so reaching it means the table holds what Ferry never wrote.
	maxListPages = 10
)

// Prefixes of what this package mints.
const (
	IDPrefix     = "we_"
	SecretPrefix = "whsec_"
)

// idPattern is an endpoint id as NewID mints it: the prefix and 26 characters of lower-case
// base32 (128 random bits).
var idPattern = regexp.MustCompile(`^we_[a-z2-7]{26}$`)

// ValidID reports whether id can name an endpoint. Any other string names none, and is never
// sent to DynamoDB.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// Errors of the endpoints store, each with its kind.
var (
	// ErrNotFound: no endpoint has this id.
	ErrNotFound = problem.New(problem.NotFound, "webhook endpoint not found", "No webhook endpoint has this id.")
	// ErrConflict: the endpoint changed between the read a write was decided on and the write.
	ErrConflict = problem.New(problem.Conflict, "webhook endpoint changed concurrently",
		"The webhook endpoint changed while this request ran (another rotation or update landed first); nothing was changed. Read it and try again.")
	// ErrExists: the minted id names an endpoint already (a broken random source).
	ErrExists = problem.New(problem.Conflict, "webhook endpoint id already taken", "A webhook endpoint with this id already exists; nothing was stored. Try again.")
	// ErrTooMany: MaxEndpoints are registered.
	ErrTooMany = problem.New(problem.Conflict, "too many webhook endpoints",
		fmt.Sprintf("%d webhook endpoints are registered, the most Ferry keeps; delete one first.", MaxEndpoints))
)

// Wants reports whether the endpoint is to be sent a notification of this kind for this account.
// A notification of no account ("": a billing_event.dead of an event no account is known for)
// goes only to the endpoints registered for every account: one for chosen accounts is about
// those accounts alone.
func (e Endpoint) Wants(kind notify.Kind, account string) bool {
	if e.Disabled {
		return false
	}
	if len(e.Kinds) > 0 && !slices.Contains(e.Kinds, string(kind)) {
		return false
	}
	return len(e.Accounts) == 0 || (account != "" && slices.Contains(e.Accounts, account))
}

// SigningSecrets are the secrets a delivery at nowMs is signed with: the current one, and the one
// it replaced while that has not expired, newest first.
func (e Endpoint) SigningSecrets(nowMs int64) []string {
	var out []string
	for _, s := range e.Signing(nowMs) {
		out = append(out, s.Value)
	}
	return out
}

// Signing are the secrets that sign at nowMs, newest first: what a read may describe (never
// with their values).
func (e Endpoint) Signing(nowMs int64) []Secret {
	var out []Secret
	for _, s := range e.Secrets {
		if s.ExpiresAtMs == 0 || nowMs < s.ExpiresAtMs {
			out = append(out, s)
		}
	}
	return out
}

// Store is the endpoints table.
type Store struct {
	DB    *dynamodb.Client
	Table string
	// Random is where ids and secrets come from; nil is crypto/rand.
	Random io.Reader
}

// The list index: every endpoint carries ListKeyAttr = ListKeyValue, so that the endpoints are
// listed with Query (no function may Scan a table) on a keys-only index of the table, named
// ListIndex, whose partition key is ListKeyAttr and whose sort key is "pk";
// internal/platform/resources declares it on TableWebhookEndpoints with these names.
const (
	ListIndex    = "byList"
	ListKeyAttr  = "listKey"
	ListKeyValue = "endpoints"
)

// listCondition selects every endpoint of the list index.
const listCondition = "#" + ListKeyAttr + " = :list"

// MarshalDynamoDBAttributeValue writes the endpoint as it is stored: its fields and the list
// index's key, so that every endpoint written (by this package, or by a test that writes items
// as they are stored) is listed.
func (e Endpoint) MarshalDynamoDBAttributeValue() (types.AttributeValue, error) {
	type stored Endpoint // the same fields, without this method
	av, err := attributevalue.Marshal(stored(e))
	if err != nil {
		return nil, err
	}
	m, ok := av.(*types.AttributeValueMemberM)
	if !ok {
		return nil, fmt.Errorf("webhook endpoint %s encodes as %T, not a map", e.ID, av)
	}
	m.Value[ListKeyAttr] = dynamo.S(ListKeyValue)
	return m, nil
}

// All reads every endpoint (the table is small: an operator registers a handful), oldest first:
// the list index's keys, then each endpoint strongly consistent, so that a rotation is seen as
// soon as it is written. The index itself is eventually consistent: an endpoint registered a
// moment ago can be missing from a list for as long as the index takes to show it.
func (s *Store) All(ctx context.Context) ([]Endpoint, error) {
	var out []Endpoint
	var start map[string]types.AttributeValue
	for page := 1; ; page++ {
		if page > maxListPages {
			return nil, fmt.Errorf("read the webhook endpoints: more than %d pages", maxListPages)
		}
		items, last, err := dynamo.IndexPage(ctx, s.DB, &dynamodb.QueryInput{
			TableName: aws.String(s.Table), IndexName: aws.String(ListIndex),
			KeyConditionExpression:    aws.String(listCondition),
			ExpressionAttributeNames:  dynamo.Names(listCondition),
			ExpressionAttributeValues: map[string]types.AttributeValue{":list": dynamo.S(ListKeyValue)},
			ExclusiveStartKey:         start,
			Limit:                     aws.Int32(dynamo.MaxBatchGetKeys),
		}, "pk")
		if err != nil {
			return nil, fmt.Errorf("read the webhook endpoints: %w", err)
		}
		for _, item := range items {
			var e Endpoint
			if err := attributevalue.UnmarshalMap(item, &e); err != nil {
				return nil, fmt.Errorf("decode webhook endpoint: %w", err)
			}
			out = append(out, e)
		}
		if start = last; start == nil {
			break
		}
	}
	slices.SortFunc(out, func(a, b Endpoint) int {
		return cmp.Or(cmp.Compare(a.CreatedAtMs, b.CreatedAtMs), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// Get reads one endpoint (strongly consistent): ErrNotFound when none has the id.
func (s *Store) Get(ctx context.Context, id string) (Endpoint, error) {
	if !ValidID(id) {
		return Endpoint{}, ErrNotFound
	}
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.Table), Key: key(id), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Endpoint{}, fmt.Errorf("read webhook endpoint %s: %w", id, err)
	}
	if out.Item == nil {
		return Endpoint{}, ErrNotFound
	}
	var e Endpoint
	if err := attributevalue.UnmarshalMap(out.Item, &e); err != nil {
		return Endpoint{}, fmt.Errorf("decode webhook endpoint %s: %w", id, err)
	}
	return e, nil
}

// List is every endpoint, oldest first, for the API: All, which a reader may page by itself.
func (s *Store) List(ctx context.Context) ([]Endpoint, error) { return s.All(ctx) }

// Create registers an endpoint: it checks r under policy (every problem at once, as a
// *problem.InputError), mints the endpoint's id and first secret, and stores it, conditional on
// its absence. The secret is returned here and never again.
func (s *Store) Create(ctx context.Context, r Registration, policy send.Policy, nowMs int64) (Endpoint, string, error) {
	if err := r.Validate(policy); err != nil {
		return Endpoint{}, "", err
	}
	all, err := s.All(ctx)
	if err != nil {
		return Endpoint{}, "", err
	}
	if len(all) >= MaxEndpoints {
		return Endpoint{}, "", ErrTooMany
	}
	id, err := s.newID()
	if err != nil {
		return Endpoint{}, "", err
	}
	secret, err := s.newSecret()
	if err != nil {
		return Endpoint{}, "", err
	}
	e := r.endpoint(id, secret, nowMs)
	item, err := attributevalue.MarshalMap(e)
	if err != nil {
		return Endpoint{}, "", fmt.Errorf("encode webhook endpoint %s: %w", id, err)
	}
	_, err = s.DB.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(s.Table), Item: item,
		ConditionExpression: aws.String(createCondition), ExpressionAttributeNames: dynamo.Names(createCondition),
	})
	if dynamo.IsConditionFailed(err) {
		return Endpoint{}, "", ErrExists
	}
	if err != nil {
		return Endpoint{}, "", fmt.Errorf("store webhook endpoint %s: %w", id, err)
	}
	return e, secret, nil
}

// Update changes the fields p sets, conditional on the revision read (see the package comment):
// ErrNotFound when the endpoint does not exist (or is deleted meanwhile), ErrConflict when
// other writes kept landing first, a *problem.InputError when p is refused.
func (s *Store) Update(ctx context.Context, id string, p Patch, policy send.Policy, nowMs int64) (Endpoint, error) {
	if err := p.Validate(policy); err != nil {
		return Endpoint{}, err
	}
	return s.update(ctx, id, p, nowMs, nil)
}

// update applies p to the endpoint as read (first to decided, when a test hands it a stale
// read), reading again after a lost race.
func (s *Store) update(ctx context.Context, id string, p Patch, nowMs int64, decided *Endpoint) (Endpoint, error) {
	for attempt := 1; attempt <= maxUpdateAttempts; attempt++ {
		var current Endpoint
		if attempt == 1 && decided != nil {
			current = *decided
		} else {
			var err error
			if current, err = s.Get(ctx, id); err != nil {
				return Endpoint{}, err
			}
		}
		written, err := s.rewrite(ctx, p.applyTo(current, nowMs), current.Rev)
		if errors.Is(err, errChanged) {
			continue
		}
		if err != nil {
			return Endpoint{}, err
		}
		return written, nil
	}
	return Endpoint{}, ErrConflict
}

// Rotate makes a new secret the endpoint's current one; the one it replaces signs for
// RotationOverlap more. It is conditional on the revision read: a rotation that lost a race to
// another write is ErrConflict and changes nothing (a second rotation of the same read would
// drop the secret the first one returned).
func (s *Store) Rotate(ctx context.Context, id string, nowMs int64) (Endpoint, string, error) {
	current, err := s.Get(ctx, id)
	if err != nil {
		return Endpoint{}, "", err
	}
	return s.rotate(ctx, current, nowMs)
}

// rotate rotates the endpoint as it was read.
func (s *Store) rotate(ctx context.Context, current Endpoint, nowMs int64) (Endpoint, string, error) {
	secret, err := s.newSecret()
	if err != nil {
		return Endpoint{}, "", err
	}
	written, err := s.rewrite(ctx, Rotated(current, secret, nowMs), current.Rev)
	if errors.Is(err, errChanged) {
		return Endpoint{}, "", ErrConflict
	}
	if err != nil {
		return Endpoint{}, "", err
	}
	return written, secret, nil
}

// Delete removes the endpoint: ErrNotFound when there was none. Deliveries already written for
// it stay in the notifications table, and the notifier finds no endpoint to send them to.
func (s *Store) Delete(ctx context.Context, id string) error {
	if !ValidID(id) {
		return ErrNotFound
	}
	out, err := s.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(s.Table), Key: key(id), ReturnValues: types.ReturnValueAllOld,
	})
	if err != nil {
		return fmt.Errorf("delete webhook endpoint %s: %w", id, err)
	}
	if len(out.Attributes) == 0 {
		return ErrNotFound
	}
	return nil
}

// Conditions of the writes (see Guards).
const (
	// createCondition: a new endpoint never replaces one that has its id.
	createCondition = dynamo.AbsentCondition
	// rewriteCondition: a rewrite lands only on the revision it was decided on.
	rewriteCondition = "#rev = :rev"
)

// errChanged says a rewrite found another revision than the one it was decided on (or no
// endpoint at all).
var errChanged = errors.New("webhook endpoint changed since it was read")

// rewrite puts next, whose revision becomes prev+1, only if the stored endpoint is still at prev,
// and returns it as written.
func (s *Store) rewrite(ctx context.Context, next Endpoint, prev int64) (Endpoint, error) {
	next.Rev = prev + 1
	item, err := attributevalue.MarshalMap(next)
	if err != nil {
		return Endpoint{}, fmt.Errorf("encode webhook endpoint %s: %w", next.ID, err)
	}
	_, err = s.DB.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(s.Table), Item: item,
		ConditionExpression:       aws.String(rewriteCondition),
		ExpressionAttributeNames:  dynamo.Names(rewriteCondition),
		ExpressionAttributeValues: map[string]types.AttributeValue{":rev": dynamo.N(prev)},
	})
	if dynamo.IsConditionFailed(err) {
		return Endpoint{}, errChanged
	}
	if err != nil {
		return Endpoint{}, fmt.Errorf("write webhook endpoint %s: %w", next.ID, err)
	}
	return next, nil
}

func key(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": dynamo.S(id)}
}

// idEncoding spells ids: lower-case base32 without padding, which needs no escaping in a path.
var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newID mints an endpoint id from 16 random bytes.
func (s *Store) newID() (string, error) {
	var b [16]byte
	if _, err := io.ReadFull(s.random(), b[:]); err != nil {
		return "", fmt.Errorf("mint a webhook endpoint id: %w", err)
	}
	return IDPrefix + idEncoding.EncodeToString(b[:]), nil
}

// newSecret mints a signing secret: the prefix and the standard base64 (padded) of SecretBytes
// random bytes, which standardwebhooks.NewWebhook and its npm and PyPI siblings decode.
func (s *Store) newSecret() (string, error) {
	b := make([]byte, SecretBytes)
	if _, err := io.ReadFull(s.random(), b); err != nil {
		return "", fmt.Errorf("mint a webhook secret: %w", err)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

func (s *Store) random() io.Reader {
	if s.Random != nil {
		return s.Random
	}
	return rand.Reader
}
