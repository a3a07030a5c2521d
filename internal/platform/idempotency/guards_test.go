package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/idempotency"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Two requests take over one expired claim, and the first one's claim lands already expired
// (its writer paused between reading its clock and its write landing): the second, decided on
// the claim it read before, must not replace the first's. Only the old token, pinned by the
// condition, tells the two claims apart — their expiry does not.
func TestGuard_TakeoverReplacesOnlyTheClaimItRead(t *testing.T) {
	testenv.NeedsGuard(t, "idempotency.takeover.token", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s := &idempotency.Table{DB: db, Table: env.Names.Table(resources.TableIdempotency)}
		ctx := context.Background()
		t0 := time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)
		claim := func(token string, at time.Time) idempotency.Record {
			return idempotency.Record{ID: "rec_1", Scope: "account:acct_1", Route: "POST /v1/events", Fingerprint: "fp",
				State: idempotency.InFlight, Token: token, ClaimedAtMs: at.UnixMilli(), LeaseExpiresAtMs: at.Add(idempotency.Lease).UnixMilli(),
				ExpiresAt: at.Add(idempotency.DefaultRetention).Unix()}
		}
		dead := claim("t0", t0)
		if err := s.Claim(ctx, dead); err != nil {
			return err
		}
		late := t0.Add(idempotency.Lease + time.Minute)
		// The first taker read its clock a lease before its write landed.
		first := claim("t1", t0.Add(idempotency.Lease))
		if err := s.TakeOver(ctx, dead, first); err != nil {
			return fmt.Errorf("the first takeover: %w", err)
		}
		second := claim("t2", late)
		if err := s.TakeOver(ctx, dead, second); !errors.Is(err, idempotency.ErrClaimed) {
			return fmt.Errorf("a takeover decided on the claim before last: %v, want ErrClaimed", err)
		}
		got, err := s.Get(ctx, "rec_1")
		if err != nil {
			return err
		}
		if got.Token != "t1" {
			return fmt.Errorf("the record holds claim %s; the first taker's (t1) was replaced", got.Token)
		}
		return nil
	})
}
