package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/ferrymeter/ferry/internal/app"
	"github.com/ferrymeter/ferry/internal/devstack"
	"github.com/ferrymeter/ferry/internal/inbox"
	"github.com/ferrymeter/ferry/internal/inbox/inboxfault"
	"github.com/ferrymeter/ferry/internal/provider/kinde/webhook/signer"
	"github.com/ferrymeter/ferry/internal/resources"
)

// devStripeSecret is the Stripe signing secret ferry dev verifies Stripe deliveries with when
// FERRY_STRIPE_WEBHOOK_SECRET is not set. It is not a secret: it signs nothing outside this
// machine's loopback stack.
const devStripeSecret = "whsec_ferry_dev_local_secret"

// Local-only paths ferry dev serves beside the API, for `ferry webhooks send` and the lab.
const (
	// devWebhooksPath describes how to sign deliveries for this stack.
	devWebhooksPath = "/_dev/webhooks"
	// devCrashPath arms the apply-crash injector for one stored billing event.
	devCrashPath = "/_dev/faults/inbox-apply"
)

// devWebhooks is what GET /_dev/webhooks answers: the local Kinde signer (when ferry dev runs
// one) and the Stripe signing secret (when it is ferry dev's own).
type devWebhooks struct {
	Kinde  *devKinde  `json:"kinde"`
	Stripe *devStripe `json:"stripe"`
	// CrashInjector is true when POST /_dev/faults/inbox-apply is available.
	CrashInjector bool `json:"crashInjector"`
}

type devKinde struct {
	Signer  string `json:"signer"`
	JWKSURL string `json:"jwksUrl"`
}

type devStripe struct {
	Secret string `json:"secret"`
}

// extendInbox configures the inbox's verification for ferry dev: FERRY_KINDE_WEBHOOK_JWKS_URL
// and FERRY_STRIPE_WEBHOOK_SECRET when set; otherwise a local Kinde signer on loopback and a dev
// Stripe secret, so a delivery can be signed and sent with `ferry webhooks send`.
func extendInbox(a *app.App, s *devstack.Stack, crash *inboxfault.CrashApply) (devWebhooks, error) {
	cfg, err := app.InboxConfigFromEnv(context.Background())
	if err != nil {
		return devWebhooks{}, err
	}
	info := devWebhooks{CrashInjector: crash != nil}
	if cfg.Webhooks.KindeJWKSURL == "" {
		sign, err := signer.New()
		if err != nil {
			return devWebhooks{}, err
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return devWebhooks{}, fmt.Errorf("start the local Kinde signer: %w", err)
		}
		srv := &http.Server{Handler: sign.Handler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(l) }()
		url := "http://" + l.Addr().String()
		cfg.Webhooks.KindeJWKSURL = url + signer.JWKSPath
		info.Kinde = &devKinde{Signer: url, JWKSURL: cfg.Webhooks.KindeJWKSURL}
	}
	if cfg.Webhooks.StripeSecret == "" {
		cfg.Webhooks.StripeSecret = devStripeSecret
		info.Stripe = &devStripe{Secret: devStripeSecret}
	}
	a.Inbox.Receiver.Config = cfg.Webhooks
	s.Routes.HandleFunc("GET "+devWebhooksPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(info)
	})
	if crash != nil {
		s.Routes.HandleFunc("POST "+devCrashPath, func(w http.ResponseWriter, r *http.Request) {
			var body struct {
				Event string `json:"event"`
			}
			data, _ := io.ReadAll(io.LimitReader(r.Body, 4096))
			if err := json.Unmarshal(data, &body); err != nil || !inbox.ValidID(body.Event) {
				http.Error(w, `send {"event": "<billing event id>"}`, http.StatusBadRequest)
				return
			}
			crash.Arm(body.Event, 1)
			a.Log.Info("the next apply of this billing event will be killed before it commits", "event", body.Event)
			w.WriteHeader(http.StatusNoContent)
		})
	}
	return info, nil
}

// inboxBanner is what ferry dev prints about the inbox.
func inboxBanner(info devWebhooks, url string) []string {
	lines := []string{"  webhooks:     POST " + url + "/v1/webhooks/kinde (application/jwt), POST " + url + "/v1/webhooks/stripe"}
	if info.Kinde != nil {
		lines = append(lines, "  Kinde signer: "+info.Kinde.Signer+"   (JWKS "+info.Kinde.JWKSURL+"; set "+resources.EnvKindeWebhookJWKSURL+" to use Kinde's)")
	}
	if info.Stripe != nil {
		lines = append(lines, "  Stripe secret: "+info.Stripe.Secret+"   (set "+resources.EnvStripeWebhookSecret+" to use yours)")
	}
	return append(lines, "  send one:     go run ./cmd/ferry webhooks send kinde --type customer.plan_changed --customer <kindeCustomerId> --plan customer_pro_plan")
}
