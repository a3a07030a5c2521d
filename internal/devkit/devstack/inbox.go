package devstack

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"

	"github.com/ferrymeter/ferry/internal/devkit/inboxfault"
	signer "github.com/ferrymeter/ferry/internal/devkit/kindesigner"
	"github.com/ferrymeter/ferry/internal/operator/deliver"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
	kindewebhook "github.com/ferrymeter/ferry/internal/webhooks/kinde"
)

// DevStripeSecret is the Stripe signing secret ferry dev verifies Stripe deliveries with when
// FERRY_STRIPE_WEBHOOK_SECRET is not set. It is not a secret: it signs nothing outside this
// machine's loopback stack.
const DevStripeSecret = "whsec_ferry_dev_local_secret"

// InboxDev is ferry dev's webhook tooling: the inbox's verification keys (FERRY_KINDE_WEBHOOK_
// JWKS_URL and FERRY_STRIPE_WEBHOOK_SECRET when set; otherwise a local Kinde signer on loopback and
// DevStripeSecret, so that a delivery can be signed and sent with `ferry webhooks send`), and the
// apply-crash injector the webhooks lab kills one apply with. Info says which stand-ins it chose.
type InboxDev struct {
	// Settings are the verification settings it chose (FERRY_KINDE_WEBHOOK_JWKS_URL,
	// FERRY_STRIPE_WEBHOOK_SECRET), to set over the stack's.
	Settings compose.Settings
	Info     deliver.DevInfo
	Crash    *inboxfault.CrashApply

	signer *http.Server
}

// NewInboxDev reads the inbox's settings from env (the process's FERRY_* variables): the key URL
// FERRY_KINDE_WEBHOOK_JWKS_URL, or the one of the Kinde domain env names (as the CDK app derives
// it), or else a local Kinde signer it starts; Close stops it.
func NewInboxDev(env compose.Settings, log *slog.Logger) (*InboxDev, error) {
	d := &InboxDev{Settings: compose.Settings{}, Crash: inboxfault.New()}
	d.Info.CrashInjector = true
	if domain := env.Get(resources.EnvKindeDomain); env.Get(resources.EnvKindeWebhookJWKSURL) == "" && domain != "" {
		d.Settings[resources.EnvKindeWebhookJWKSURL] = kindewebhook.JWKSURLFor(domain)
	}
	if env.Get(resources.EnvKindeWebhookJWKSURL) == "" && env.Get(resources.EnvKindeDomain) == "" {
		sign, err := signer.New()
		if err != nil {
			return nil, err
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("start the local Kinde signer: %w", err)
		}
		d.signer = NewServer(sign.Handler())
		go func() { _ = d.signer.Serve(l) }()
		url := "http://" + l.Addr().String()
		d.Settings[resources.EnvKindeWebhookJWKSURL] = url + signer.JWKSPath
		d.Info.Kinde = &deliver.DevKinde{Signer: url, JWKSURL: url + signer.JWKSPath}
		log.Info("local Kinde signer running", "url", url)
	}
	if env.Get(resources.EnvStripeWebhookSecret) == "" && env.Get(resources.EnvStripeWebhookSecretARN) == "" {
		d.Settings[resources.EnvStripeWebhookSecret] = DevStripeSecret
		d.Info.Stripe = &deliver.DevStripe{Secret: DevStripeSecret}
	}
	return d, nil
}

// Apply gives the stack's functions the inbox settings and its DynamoDB clients the crash
// injector (unarmed, it lets every call through).
func (d *InboxDev) Apply(opts *StackOptions) {
	opts.Settings = opts.Settings.With(d.Settings)
	opts.Clients.DynamoDB = append(opts.Clients.DynamoDB, d.Crash.Option)
}

// Serve serves the local-only paths the webhook tools use on the stack: GET /_dev/webhooks (Info)
// and POST /_dev/faults/inbox-apply {"event": "<billing event id>"}, which kills that event's
// next apply after its effect is decided and before its transaction commits.
func (d *InboxDev) Serve(s *Stack) {
	info := d.Info
	s.Routes.HandleFunc("GET "+deliver.DevInfoPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(info)
	})
	s.Routes.HandleFunc("POST "+deliver.DevCrashPath, func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Event string `json:"event"`
		}
		data, _ := io.ReadAll(io.LimitReader(r.Body, 4096))
		if err := json.Unmarshal(data, &body); err != nil || !inbox.ValidID(body.Event) {
			http.Error(w, `send {"event": "<billing event id>"}`, http.StatusBadRequest)
			return
		}
		d.Crash.Arm(body.Event, 1)
		s.log.Info("the next apply of this billing event will be killed before it commits", "event", body.Event)
		w.WriteHeader(http.StatusNoContent)
	})
}

// Close stops the local Kinde signer.
func (d *InboxDev) Close() {
	if d.signer != nil {
		_ = d.signer.Close()
	}
}

// Banner is what ferry dev prints about the inbox.
func (d *InboxDev) Banner(url string) []string {
	info := d.Info
	lines := []string{"  webhooks:     POST " + url + deliver.KindePath + " (application/jwt), POST " + url + deliver.StripePath}
	if info.Kinde != nil {
		lines = append(lines, "  Kinde signer: "+info.Kinde.Signer+"   (JWKS "+info.Kinde.JWKSURL+"; set "+resources.EnvKindeWebhookJWKSURL+" to use Kinde's)")
	}
	if info.Stripe != nil {
		lines = append(lines, "  Stripe secret: "+info.Stripe.Secret+"   (set "+resources.EnvStripeWebhookSecret+" to use yours)")
	}
	return append(lines, "  send one:     go run ./cmd/ferry webhooks send kinde --type customer.plan_changed --customer <kindeCustomerId> --plan customer_pro_plan")
}
