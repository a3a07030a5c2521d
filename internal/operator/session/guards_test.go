package session_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/operator/session"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// A second session under a token hash that is taken is refused, and the first keeps its CSRF
// token and expiry: a session is never silently replaced by another.
func TestGuard_ASessionIsNeverReplaced(t *testing.T) {
	testenv.NeedsGuard(t, "session.put.new", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := &session.Table{DB: db, Table: env.Names.Table(resources.TableConsole)}, context.Background()
		first := session.Session{Hash: "h1", CSRF: "csrf-first", CreatedAtMs: 1_000, ExpiresAtMs: 4_000_000_000_000}
		if err := s.Put(ctx, first); err != nil {
			return err
		}
		if err := s.Put(ctx, session.Session{Hash: "h1", CSRF: "csrf-second", CreatedAtMs: 2_000, ExpiresAtMs: 4_000_000_000_000}); err == nil {
			return fmt.Errorf("a second session under a taken hash was accepted")
		}
		got, err := s.Get(ctx, "h1")
		if err != nil || got.CSRF != first.CSRF {
			return fmt.Errorf("the session is now %+v (%v); want the first", got, err)
		}
		return nil
	})
}
