package devstack

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/ferrymeter/ferry/internal/app"
	"github.com/ferrymeter/ferry/internal/inbox"
	"github.com/ferrymeter/ferry/internal/inbox/deliver"
	"github.com/ferrymeter/ferry/internal/inbox/inboxfault"
	"github.com/ferrymeter/ferry/internal/provider/kinde/webhook/signer"
	"github.com/ferrymeter/ferry/internal/resources"
)

// DevStripeSecret is the Stripe signing secret ferry dev verifies Stripe deliveries with when
// FERRY_STRIPE_WEBHOOK_SECRET is not set. It is not a secret: it signs nothing outside this
// machine's loopback stack.
const DevStripeSecret = "whsec_ferry_dev_local_secret"

// InboxFromEnv is the webhook inbox's configuration for ferry dev: FERRY_KINDE_WEBHOOK_JWKS_URL
// and FERRY_STRIPE_WEBHOOK_SECRET when set; otherwise a local Kinde signer on loopback (started
// here, for the life of the process) and DevStripeSecret, so that a delivery can be signed and
// sent with `ferry webhooks send`. info says which stand-ins it chose.
func InboxFromEnv(ctx context.Context, log *slog.Logger) (app.InboxConfig, deliver.DevInfo, error) {
	cfg, err := app.InboxConfigFromEnv(ctx)
	if err != nil {
		return app.InboxConfig{}, deliver.DevInfo{}, err
	}
	var info deliver.DevInfo
	if cfg.Webhooks.KindeJWKSURL == "" {
		sign, err := signer.New()
		if err != nil {
			return app.InboxConfig{}, deliver.DevInfo{}, err
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return app.InboxConfig{}, deliver.DevInfo{}, fmt.Errorf("start the local Kinde signer: %w", err)
		}
		srv := &http.Server{Handler: sign.Handler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(l) }()
		url := "http://" + l.Addr().String()
		cfg.Webhooks.KindeJWKSURL = url + signer.JWKSPath
		info.Kinde = &deliver.DevKinde{Signer: url, JWKSURL: cfg.Webhooks.KindeJWKSURL}
		log.Info("local Kinde signer running", "url", url)
	}
	if cfg.Webhooks.StripeSecret == "" {
		cfg.Webhooks.StripeSecret = DevStripeSecret
		info.Stripe = &deliver.DevStripe{Secret: DevStripeSecret}
	}
	return cfg, info, nil
}

// ServeInboxDev serves the local-only paths the webhook tools use: GET /_dev/webhooks (info) and,
// with a crash injector, POST /_dev/faults/inbox-apply, which kills one event's next apply before
// its transaction commits (the crash injector must be on the stack's DynamoDB clients).
func (s *Stack) ServeInboxDev(info deliver.DevInfo, crash *inboxfault.CrashApply) {
	info.CrashInjector = crash != nil
	s.Routes.HandleFunc("GET "+deliver.DevInfoPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(info)
	})
	if crash == nil {
		return
	}
	s.Routes.HandleFunc("POST "+deliver.DevCrashPath, func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Event string `json:"event"`
		}
		data, _ := io.ReadAll(io.LimitReader(r.Body, 4096))
		if err := json.Unmarshal(data, &body); err != nil || !inbox.ValidID(body.Event) {
			http.Error(w, `send {"event": "<billing event id>"}`, http.StatusBadRequest)
			return
		}
		crash.Arm(body.Event, 1)
		s.log.Info("the next apply of this billing event will be killed before it commits", "event", body.Event)
		w.WriteHeader(http.StatusNoContent)
	})
}

// InboxBanner is what ferry dev prints about the inbox.
func InboxBanner(info deliver.DevInfo, url string) []string {
	lines := []string{"  webhooks:     POST " + url + deliver.KindePath + " (application/jwt), POST " + url + deliver.StripePath}
	if info.Kinde != nil {
		lines = append(lines, "  Kinde signer: "+info.Kinde.Signer+"   (JWKS "+info.Kinde.JWKSURL+"; set "+resources.EnvKindeWebhookJWKSURL+" to use Kinde's)")
	}
	if info.Stripe != nil {
		lines = append(lines, "  Stripe secret: "+info.Stripe.Secret+"   (set "+resources.EnvStripeWebhookSecret+" to use yours)")
	}
	return append(lines, "  send one:     go run ./cmd/ferry webhooks send kinde --type customer.plan_changed --customer <kindeCustomerId> --plan customer_pro_plan")
}
