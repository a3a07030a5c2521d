// Package endpoints keeps the webhook endpoints the operator registers: where Ferry sends its
// notifications (an https URL), which kinds and accounts each wants, and the secrets its
// deliveries are signed with.
package endpoints

import (
	"context"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/alerts/notify"
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

// Wants reports whether the endpoint is to be sent a notification of this kind for this account.
func (e Endpoint) Wants(kind notify.Kind, account string) bool {
	if e.Disabled {
		return false
	}
	if len(e.Kinds) > 0 && !slices.Contains(e.Kinds, string(kind)) {
		return false
	}
	return len(e.Accounts) == 0 || slices.Contains(e.Accounts, account)
}

// SigningSecrets are the secrets a delivery at nowMs is signed with: the current one, and the one
// it replaced while that has not expired, newest first.
func (e Endpoint) SigningSecrets(nowMs int64) []string {
	var out []string
	for _, s := range e.Secrets {
		if s.ExpiresAtMs == 0 || nowMs < s.ExpiresAtMs {
			out = append(out, s.Value)
		}
	}
	return out
}

// Store is the endpoints table.
type Store struct {
	DB    *dynamodb.Client
	Table string
}

// All reads every endpoint (the table is small: an operator registers a handful).
func (s *Store) All(ctx context.Context) ([]Endpoint, error) {
	var out []Endpoint
	var start map[string]types.AttributeValue
	for {
		page, err := s.DB.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(s.Table), ExclusiveStartKey: start, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return nil, fmt.Errorf("read the webhook endpoints: %w", err)
		}
		for _, item := range page.Items {
			var e Endpoint
			if err := attributevalue.UnmarshalMap(item, &e); err != nil {
				return nil, fmt.Errorf("decode webhook endpoint: %w", err)
			}
			out = append(out, e)
		}
		if start = page.LastEvaluatedKey; len(start) == 0 {
			break
		}
	}
	slices.SortFunc(out, func(a, b Endpoint) int { return int(a.CreatedAtMs - b.CreatedAtMs) })
	return out, nil
}
