package endpoints_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/alerts/endpoints"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func storeOn(env *testenv.Env, db *dynamodb.Client) *endpoints.Store {
	return &endpoints.Store{DB: db, Table: env.Names.Table(resources.TableWebhookEndpoints)}
}

// Two registrations that mint the same id (a random source that repeats itself): the second is
// refused, and the first keeps its URL and the secret its caller was shown.
func TestGuard_ARegistrationNeverReplacesAnEndpoint(t *testing.T) {
	testenv.NeedsGuard(t, "endpoints.create.absent", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := storeOn(env, db), context.Background()
		s.Random = repeatReader{}
		first, _, err := s.Create(ctx, endpoints.Registration{URL: "https://one.example.com"}, production, t0)
		if err != nil {
			return fmt.Errorf("the first registration: %w", err)
		}
		if _, _, err := s.Create(ctx, endpoints.Registration{URL: "https://two.example.com"}, production, t0+1); !errors.Is(err, endpoints.ErrExists) {
			return fmt.Errorf("a second registration under the same id: %v, want ErrExists", err)
		}
		got, err := s.Get(ctx, first.ID)
		if err != nil {
			return err
		}
		if got.URL != "https://one.example.com" || got.CreatedAtMs != t0 {
			return fmt.Errorf("the first endpoint was replaced: now %s, created at %d", got.URL, got.CreatedAtMs)
		}
		return nil
	})
}

// Two rotations decided on one read: the second is a conflict, and the secret the first
// returned — the one its caller now deploys — keeps signing.
func TestGuard_TwoRotationsOfOneRead_OnlyTheFirstLands(t *testing.T) {
	testenv.NeedsGuard(t, "endpoints.rewrite.rev", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := storeOn(env, db), context.Background()
		e, first, err := s.Create(ctx, endpoints.Registration{URL: "https://hooks.example.com"}, production, t0)
		if err != nil {
			return err
		}
		read, err := s.Get(ctx, e.ID)
		if err != nil {
			return err
		}
		_, won, err := s.RotateDecidedOn(ctx, read, t0+1)
		if err != nil {
			return fmt.Errorf("the first rotation: %w", err)
		}
		if _, _, err := s.RotateDecidedOn(ctx, read, t0+2); !errors.Is(err, endpoints.ErrConflict) {
			return fmt.Errorf("a second rotation of the same read: %v, want ErrConflict", err)
		}
		got, err := s.Get(ctx, e.ID)
		if err != nil {
			return err
		}
		if signing := got.SigningSecrets(t0 + 3); !slices.Equal(signing, []string{won, first}) {
			return fmt.Errorf("after the race the endpoint signs with %d secrets, the winner's among them: %v",
				len(signing), slices.Contains(signing, won))
		}
		return nil
	})
}

// An update decided on a read that a rotation has overtaken: it reads again and applies its
// change to the rotated endpoint, so the rotation's secret stays (and the update lands).
func TestGuard_AnUpdateRacingARotation_KeepsTheNewSecret(t *testing.T) {
	testenv.NeedsGuard(t, "endpoints.rewrite.rev", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := storeOn(env, db), context.Background()
		e, _, err := s.Create(ctx, endpoints.Registration{URL: "https://hooks.example.com"}, production, t0)
		if err != nil {
			return err
		}
		stale, err := s.Get(ctx, e.ID)
		if err != nil {
			return err
		}
		_, rotatedTo, err := s.Rotate(ctx, e.ID, t0+1)
		if err != nil {
			return err
		}
		desc := "updated"
		if _, err := s.UpdateDecidedOn(ctx, stale, endpoints.Patch{Description: &desc}, t0+2); err != nil {
			return fmt.Errorf("the update: %w", err)
		}
		got, err := s.Get(ctx, e.ID)
		if err != nil {
			return err
		}
		if got.Description != desc {
			return fmt.Errorf("the update did not land: description %q", got.Description)
		}
		if !slices.Contains(got.SigningSecrets(t0+3), rotatedTo) {
			return errors.New("the update wrote back the secrets it read before the rotation: the rotated secret no longer signs")
		}
		return nil
	})
}

// An update of an endpoint deleted since it was read does not bring it back.
func TestUpdate_OfAnEndpointDeletedSinceItsRead_IsNotFound(t *testing.T) {
	env := testenv.New(t)
	s, ctx := storeOn(env, env.Clients.DynamoDB), context.Background()
	e, _, err := s.Create(ctx, endpoints.Registration{URL: "https://hooks.example.com"}, production, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, e.ID); err != nil {
		t.Fatal(err)
	}
	off := true
	if _, err := s.UpdateDecidedOn(ctx, e, endpoints.Patch{Disabled: &off}, t0+1); !errors.Is(err, endpoints.ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
	if _, err := s.Get(ctx, e.ID); !errors.Is(err, endpoints.ErrNotFound) {
		t.Errorf("the endpoint came back: %v", err)
	}
}
