package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/ferrymeter/ferry/internal/holds/limits"
	provider "github.com/ferrymeter/ferry/internal/platform/endpoint"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	kindewebhook "github.com/ferrymeter/ferry/internal/webhooks/kinde"
)

// Context keys the app reads (`cdk synth -c stage=prod`, or "context" in cdk.json).
const (
	ctxStage                  = "stage"
	ctxAlarmEmail             = "alarmEmail"
	ctxLogRetentionDays       = "logRetentionDays"
	ctxLogLevel               = "logLevel"
	ctxPlansFile              = "plansFile"
	ctxAPIRateLimit           = "apiRateLimit"
	ctxAPIBurstLimit          = "apiBurstLimit"
	ctxConsumerMaxConcurrency = "consumerMaxConcurrency"
	ctxArchiveIADays          = "archiveInfrequentAccessDays"
	ctxArchiveGlacierDays     = "archiveGlacierDays"
	ctxArchiveExpireDays      = "archiveExpireDays"
	ctxArchiveNoncurrentDays  = "archiveNoncurrentDays"
	ctxLimitsSource           = "limitsSource"
	ctxKindeDomain            = "kindeDomain"
	ctxKindeClientID          = "kindeClientId"
	ctxKindeClientSecretARN   = "kindeClientSecretArn"
	// Meter reporting: whether usage is reported to Kinde (with the Kinde settings above).
	ctxReportToKinde = "reportToKinde"
	// The webhook inbox: where Kinde's webhook keys are (default: from kindeDomain), and the
	// optional re-fetch of Stripe objects with its API base and key.
	ctxKindeWebhookJWKSURL = "kindeWebhookJwksUrl"
	ctxStripeRefetch       = "stripeRefetch"
	ctxStripeAPIBase       = "stripeApiBase"
	// The stack's public base URL (a custom domain, or the ApiUrl output of an earlier deploy),
	// which the console's labs drive the stack through. The api function cannot be given its own
	// API's URL in the same deploy (a circular reference), and never takes it from a request's
	// Host header (which would send the operator key wherever a caller pointed it): unset, the
	// console's labs answer 501.
	ctxAPIURL = "apiUrl"
	// The Secrets Manager secret holding the Stripe API key: usage is reported to Stripe when it
	// is set, and the inbox's re-fetch reads with it.
	ctxStripeAPIKeySecretARN = "stripeApiKeySecretArn"
)

// retiredContext are context keys earlier releases read and this one refuses, each with why: a
// deployment that still sets one asks for something this release no longer has.
var retiredContext = map[string]string{
	"batchMode": "the per-event worker was retired: every deployment runs the one worker design " +
		"(units of one account's events, claimed and metered in one transaction; docs/performance.md); remove batchMode from the context",
}

// Defaults for every optional setting. They suit a small production stage; each can be
// overridden by context.
const (
	defaultStage            = "dev"
	defaultLogRetentionDays = 30
	defaultLogLevel         = "info"
	// defaultAPIRateLimit and defaultAPIBurstLimit cap the whole HTTP API (requests per second),
	// so a runaway client costs a bounded amount of Lambda time.
	defaultAPIRateLimit  = 100
	defaultAPIBurstLimit = 200
	// defaultConsumerMaxConcurrency bounds how many worker instances one queue drives at once:
	// every worker writes the same budget rows, which top out near 500 transactions/s each.
	defaultConsumerMaxConcurrency = 5
	defaultArchiveIADays          = 30
	defaultArchiveGlacierDays     = 90
	defaultArchiveNoncurrentDays  = 30
	// defaultLimitsSource reads usage holds' limits from the account's plan, which needs no
	// outside service.
	defaultLimitsSource = limits.SourcePlan
)

// Limits imposed by AWS on the settings above.
const (
	maxStageLen = 16 // physical names are "ferry-<stage>-<logical>"; SQS allows 80, DynamoDB 255
	// minConsumerMaxConcurrency and maxConsumerMaxConcurrency are the bounds of an SQS event
	// source's maximum concurrency.
	minConsumerMaxConcurrency = 2
	maxConsumerMaxConcurrency = 1000
	// maxPlansBytes keeps FERRY_PLANS well inside Lambda's 4 KB limit on all variables together.
	maxPlansBytes = 3 * 1024
)

var stagePattern = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// limitsSources are the values FERRY_LIMITS_SOURCE accepts.
var limitsSources = []string{limits.SourcePlan, limits.SourceKinde}

var (
	// hostNamePattern is a DNS host name with at least two labels: "acme.kinde.com", or a
	// custom domain such as "auth.acme.com".
	hostNamePattern = regexp.MustCompile(`^(?i)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$`)
	// kindeClientIDPattern is what a Kinde application's client id looks like (32 hex digits
	// today), loosely enough to survive a change of format.
	kindeClientIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)
	// secretARNPattern is the ARN of a Secrets Manager secret, complete or partial.
	secretARNPattern = regexp.MustCompile(`^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:[A-Za-z0-9/_+=.@-]+$`)
	// secretARNSuffix is the hyphen and six characters Secrets Manager appends to a secret's
	// name in its complete ARN.
	secretARNSuffix = regexp.MustCompile(`-[A-Za-z0-9]{6}$`)
)

// logLevels are the values FERRY_LOG_LEVEL accepts (slog's level names).
var logLevels = []string{"debug", "info", "warn", "error"}

// Config is everything about a deployment that is not in the resource definitions.
type Config struct {
	// Stage names the deployment ("dev", "prod"). Only "dev" may destroy data on delete.
	Stage string
	// AlarmEmail, if set, subscribes an address to the alarm topic.
	AlarmEmail       string
	LogRetentionDays int
	LogLevel         string
	// Plans is the compact JSON of plan definitions handed to functions as FERRY_PLANS; empty
	// means the functions' built-in defaults.
	Plans                  string
	APIRateLimit           int
	APIBurstLimit          int
	ConsumerMaxConcurrency int
	// Archive lifecycle, in days after an object's creation. ArchiveExpireDays 0 keeps objects
	// forever: the archive is the copy analytics are rebuilt from.
	ArchiveIADays         int
	ArchiveGlacierDays    int
	ArchiveExpireDays     int
	ArchiveNoncurrentDays int
	// LimitsSource is where usage holds read limits: limits.SourcePlan or limits.SourceKinde.
	// With Kinde, the functions that read limits get the domain and client id, and may read the
	// client secret from the Secrets Manager secret KindeClientSecretARN names.
	LimitsSource         string
	KindeDomain          string
	KindeClientID        string
	KindeClientSecretARN string
	// ReportToKinde reports usage to Kinde's meters with the same Kinde client (the functions
	// that report get the domain and client id, and may read the client secret).
	ReportToKinde bool
	// KindeWebhookJWKSURL is where the webhooks function fetches Kinde's webhook keys; empty
	// means https://<KindeDomain>/.well-known/jwks when KindeDomain is set, and otherwise Kinde
	// deliveries are answered 503 until it is configured.
	KindeWebhookJWKSURL string
	// StripeRefetch makes the inbox worker re-read each Stripe event's object from StripeAPIBase
	// (default Stripe's) with the API key in the secret StripeAPIKeySecretARN names.
	StripeRefetch bool
	StripeAPIBase string
	// StripeAPIKeySecretARN names the Secrets Manager secret holding the Stripe API key; when
	// set, usage is reported to Stripe (the reporting functions may read it), and the inbox's
	// re-fetch reads with it.
	StripeAPIKeySecretARN string
	// APIURL is the stack's public base URL the console's labs use (empty: no labs in AWS).
	APIURL string
}

// Settings are the deployment settings functions may list (resources.Function.Settings), by
// environment variable, as this deployment configures them.
func (c Config) Settings() map[string]string {
	out := map[string]string{}
	switch {
	case c.KindeWebhookJWKSURL != "":
		out[resources.EnvKindeWebhookJWKSURL] = c.KindeWebhookJWKSURL
	case c.KindeDomain != "":
		out[resources.EnvKindeWebhookJWKSURL] = kindewebhook.JWKSURLFor(c.KindeDomain)
	}
	if c.APIURL != "" {
		out[resources.EnvAPIURL] = c.APIURL
	}
	if c.StripeRefetch {
		out[resources.EnvStripeRefetch] = "true"
		if c.StripeAPIBase != "" {
			out[resources.EnvStripeAPIBase] = c.StripeAPIBase
		}
	}
	return out
}

// Prefix is the physical-name prefix of the stage's resources ("ferry-prod").
func (c Config) Prefix() string { return StackName(c.Stage) }

// Kinde reports whether usage holds read limits from Kinde.
func (c Config) Kinde() bool { return c.LimitsSource == limits.SourceKinde }

// KindeClient reports whether the deployment talks to Kinde at all (limits or reporting), and
// so needs the Kinde settings.
func (c Config) KindeClient() bool { return c.Kinde() || c.ReportToKinde }

// Stripe reports whether usage is reported to Stripe.
func (c Config) Stripe() bool { return c.StripeAPIKeySecretARN != "" }

// Disposable reports whether the stage's data may be destroyed with the stack.
func (c Config) Disposable() bool { return c.Stage == defaultStage }

// ConfigFromContext reads the configuration from context values; lookup returns nil for an unset
// key (as Node().TryGetContext does). Values may be strings (from -c on the command line) or
// JSON numbers (from cdk.json). Every invalid value is reported, not just the first.
func ConfigFromContext(lookup func(key string) any) (Config, error) {
	c := Config{}
	var errs []error
	str := func(key, def string) string {
		v := lookup(key)
		if v == nil {
			return def
		}
		s, ok := v.(string)
		if !ok {
			errs = append(errs, fmt.Errorf("context %s: want a string, got %v", key, v))
			return def
		}
		return strings.TrimSpace(s)
	}
	num := func(key string, def int) int {
		v := lookup(key)
		switch v := v.(type) {
		case nil:
			return def
		case float64:
			if v != float64(int(v)) {
				errs = append(errs, fmt.Errorf("context %s: want a whole number, got %v", key, v))
				return def
			}
			return int(v)
		case string:
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				errs = append(errs, fmt.Errorf("context %s: want a whole number, got %q", key, v))
				return def
			}
			return n
		default:
			errs = append(errs, fmt.Errorf("context %s: want a whole number, got %v", key, v))
			return def
		}
	}

	// flag reads a switch: unset is off; a JSON boolean (cdk.json) or "true"/"false" (-c), in
	// any case, is taken as it says; anything else ("yes", "1") is refused, not guessed at.
	flag := func(key string) bool {
		switch v := lookup(key).(type) {
		case nil:
			return false
		case bool:
			return v
		case string:
			switch strings.ToLower(strings.TrimSpace(v)) {
			case "true":
				return true
			case "false":
				return false
			}
			errs = append(errs, fmt.Errorf("context %s: want true or false, got %q", key, v))
		default:
			errs = append(errs, fmt.Errorf("context %s: want true or false, got %v", key, v))
		}
		return false
	}

	for _, key := range slices.Sorted(maps.Keys(retiredContext)) {
		if lookup(key) != nil {
			errs = append(errs, fmt.Errorf("context %s: %s", key, retiredContext[key]))
		}
	}
	c.Stage = str(ctxStage, defaultStage)
	c.AlarmEmail = str(ctxAlarmEmail, "")
	c.LogRetentionDays = num(ctxLogRetentionDays, defaultLogRetentionDays)
	c.LogLevel = strings.ToLower(str(ctxLogLevel, defaultLogLevel))
	c.APIRateLimit = num(ctxAPIRateLimit, defaultAPIRateLimit)
	c.APIBurstLimit = num(ctxAPIBurstLimit, defaultAPIBurstLimit)
	c.ConsumerMaxConcurrency = num(ctxConsumerMaxConcurrency, defaultConsumerMaxConcurrency)
	c.ArchiveIADays = num(ctxArchiveIADays, defaultArchiveIADays)
	c.ArchiveGlacierDays = num(ctxArchiveGlacierDays, defaultArchiveGlacierDays)
	c.ArchiveExpireDays = num(ctxArchiveExpireDays, 0)
	c.ArchiveNoncurrentDays = num(ctxArchiveNoncurrentDays, defaultArchiveNoncurrentDays)
	c.LimitsSource = strings.ToLower(str(ctxLimitsSource, defaultLimitsSource))
	c.KindeDomain = str(ctxKindeDomain, "")
	c.KindeClientID = str(ctxKindeClientID, "")
	c.KindeClientSecretARN = str(ctxKindeClientSecretARN, "")
	c.KindeWebhookJWKSURL = str(ctxKindeWebhookJWKSURL, "")
	c.StripeAPIBase = str(ctxStripeAPIBase, "")
	c.APIURL = str(ctxAPIURL, "")
	c.StripeAPIKeySecretARN = str(ctxStripeAPIKeySecretARN, "")
	c.StripeRefetch = flag(ctxStripeRefetch)
	c.ReportToKinde = flag(ctxReportToKinde)
	if path := str(ctxPlansFile, ""); path != "" {
		plans, err := readPlans(path)
		if err != nil {
			errs = append(errs, err)
		}
		c.Plans = plans
	}
	if err := c.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	return c, nil
}

// Validate reports every setting AWS would refuse, or that would make the stack unsafe.
func (c Config) Validate() error {
	var errs []error
	if !stagePattern.MatchString(c.Stage) || len(c.Stage) > maxStageLen {
		errs = append(errs, fmt.Errorf("stage %q: want lowercase letters, digits and hyphens, starting with a letter, at most %d characters", c.Stage, maxStageLen))
	}
	if c.APIURL != "" {
		if err := provider.CheckEndpoint(ctxAPIURL, c.APIURL); err != nil {
			errs = append(errs, err)
		}
	}
	if c.AlarmEmail != "" && !strings.Contains(c.AlarmEmail, "@") {
		errs = append(errs, fmt.Errorf("alarmEmail %q is not an e-mail address", c.AlarmEmail))
	}
	if _, ok := retentionDays[c.LogRetentionDays]; !ok {
		errs = append(errs, fmt.Errorf("logRetentionDays %d: CloudWatch Logs accepts only %s", c.LogRetentionDays, retentionChoices()))
	}
	if !contains(logLevels, c.LogLevel) {
		errs = append(errs, fmt.Errorf("logLevel %q: want one of %s", c.LogLevel, strings.Join(logLevels, ", ")))
	}
	if c.APIRateLimit < 1 || c.APIBurstLimit < 1 {
		errs = append(errs, fmt.Errorf("apiRateLimit %d and apiBurstLimit %d must be at least 1", c.APIRateLimit, c.APIBurstLimit))
	}
	if c.ConsumerMaxConcurrency < minConsumerMaxConcurrency || c.ConsumerMaxConcurrency > maxConsumerMaxConcurrency {
		errs = append(errs, fmt.Errorf("consumerMaxConcurrency %d: SQS event sources accept %d to %d", c.ConsumerMaxConcurrency, minConsumerMaxConcurrency, maxConsumerMaxConcurrency))
	}
	// S3 requires at least 30 days in STANDARD before STANDARD_IA, and each later transition
	// (and the expiry) to come after the one before.
	if c.ArchiveIADays < 30 {
		errs = append(errs, fmt.Errorf("archiveInfrequentAccessDays %d: S3 requires at least 30", c.ArchiveIADays))
	}
	if c.ArchiveGlacierDays <= c.ArchiveIADays {
		errs = append(errs, fmt.Errorf("archiveGlacierDays %d must come after archiveInfrequentAccessDays %d", c.ArchiveGlacierDays, c.ArchiveIADays))
	}
	if c.ArchiveExpireDays != 0 && c.ArchiveExpireDays <= c.ArchiveGlacierDays {
		errs = append(errs, fmt.Errorf("archiveExpireDays %d must be 0 (never) or come after archiveGlacierDays %d", c.ArchiveExpireDays, c.ArchiveGlacierDays))
	}
	if c.ArchiveNoncurrentDays < 1 {
		errs = append(errs, fmt.Errorf("archiveNoncurrentDays %d must be at least 1", c.ArchiveNoncurrentDays))
	}
	if len(c.Plans) > maxPlansBytes {
		errs = append(errs, fmt.Errorf("plans: %d bytes of JSON; Lambda allows 4 KB for all variables, so keep plans under %d", len(c.Plans), maxPlansBytes))
	}
	errs = append(errs, c.validateLimitsSource()...)
	errs = append(errs, c.validateInbox()...)
	return errors.Join(errs...)
}

// validateInbox checks the webhook inbox's settings: a JWKS URL the webhooks function may fetch
// (https), and a re-fetch that has its key. A re-fetch setting without stripeRefetch is refused:
// someone meant to turn it on.
func (c Config) validateInbox() []error {
	var errs []error
	if c.KindeWebhookJWKSURL != "" {
		if err := kindewebhook.CheckURL(c.KindeWebhookJWKSURL); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ctxKindeWebhookJWKSURL, err))
		}
	}
	if c.StripeAPIBase != "" {
		if err := provider.CheckEndpoint(ctxStripeAPIBase, c.StripeAPIBase); err != nil {
			errs = append(errs, err)
		}
	}
	if c.StripeAPIKeySecretARN != "" && !secretARNPattern.MatchString(c.StripeAPIKeySecretARN) {
		errs = append(errs, fmt.Errorf("%s %q: want the ARN of a Secrets Manager secret", ctxStripeAPIKeySecretARN, c.StripeAPIKeySecretARN))
	}
	// The key alone is valid: it reports usage to Stripe.
	switch {
	case c.StripeRefetch && c.StripeAPIKeySecretARN == "":
		errs = append(errs, fmt.Errorf("%s=true needs %s (the Stripe API key that reads subscriptions and invoices)", ctxStripeRefetch, ctxStripeAPIKeySecretARN))
	case !c.StripeRefetch && c.StripeAPIBase != "":
		errs = append(errs, fmt.Errorf("%s: set only with %s=true", ctxStripeAPIBase, ctxStripeRefetch))
	}
	return errs
}

// validateLimitsSource checks the limit source and its Kinde settings. With kinde, every Kinde
// setting is required: a function missing one would refuse every admission. With plan, a Kinde
// setting is refused rather than ignored: it means someone meant to configure Kinde, and
// deploying plan limits in its place would admit work against the wrong limits unnoticed.
func (c Config) validateLimitsSource() []error {
	kindeKeys := []struct{ key, value string }{
		{ctxKindeDomain, c.KindeDomain},
		{ctxKindeClientID, c.KindeClientID},
		{ctxKindeClientSecretARN, c.KindeClientSecretARN},
	}
	var errs []error
	switch c.LimitsSource {
	case limits.SourcePlan:
		if c.ReportToKinde {
			break
		}
		var set []string
		for _, k := range kindeKeys {
			if k.value != "" {
				set = append(set, k.key)
			}
		}
		if len(set) > 0 {
			errs = append(errs, fmt.Errorf("%s: set only with limitsSource=%s, and limitsSource is %q and %s is false", strings.Join(set, ", "), limits.SourceKinde, c.LimitsSource, ctxReportToKinde))
		}
		return errs
	case limits.SourceKinde:
	default:
		return []error{fmt.Errorf("limitsSource %q: want one of %s", c.LimitsSource, strings.Join(limitsSources, ", "))}
	}
	var missing []string
	for _, k := range kindeKeys {
		if k.value == "" {
			missing = append(missing, k.key)
		}
	}
	if len(missing) > 0 {
		who := fmt.Sprintf("limitsSource %q", limits.SourceKinde)
		if !c.Kinde() {
			who = ctxReportToKinde + "=true"
		}
		errs = append(errs, fmt.Errorf("%s needs %s", who, strings.Join(missing, ", ")))
	}
	if c.KindeDomain != "" {
		if err := validKindeDomain(c.KindeDomain); err != nil {
			errs = append(errs, err)
		}
	}
	if c.KindeClientID != "" && !kindeClientIDPattern.MatchString(c.KindeClientID) {
		errs = append(errs, fmt.Errorf("kindeClientId %q: want the Kinde application's client id (letters, digits, '.', '_', '-')", c.KindeClientID))
	}
	if c.KindeClientSecretARN != "" && !secretARNPattern.MatchString(c.KindeClientSecretARN) {
		errs = append(errs, fmt.Errorf("kindeClientSecretArn %q: want the ARN of a Secrets Manager secret (arn:aws:secretsmanager:<region>:<account>:secret:<name>)", c.KindeClientSecretARN))
	}
	return errs
}

// validKindeDomain accepts a Kinde business domain as a host name ("acme.kinde.com") or an
// https URL with nothing after the host ("https://acme.kinde.com"). Plain http is refused: the
// function sends its client secret there.
func validKindeDomain(domain string) error {
	bad := func(why string) error {
		return fmt.Errorf("kindeDomain %q: %s; want a host name such as acme.kinde.com or https://acme.kinde.com", domain, why)
	}
	if !strings.Contains(domain, "://") {
		if !hostNamePattern.MatchString(domain) {
			return bad("not a host name")
		}
		return nil
	}
	u, err := url.Parse(domain)
	switch {
	case err != nil:
		return bad("not a URL")
	case u.Scheme != "https":
		return bad("the scheme must be https")
	case u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		return bad("nothing may follow the host")
	case !hostNamePattern.MatchString(u.Hostname()):
		return bad("not a host name")
	}
	return nil
}

// kindeSecretIsComplete reports whether the Kinde client secret's ARN is complete (ends with
// the six characters Secrets Manager appends to the name) rather than partial. The two cannot
// be told apart when the secret's own name ends in a hyphen and six letters or digits; the
// complete ARN, as `aws secretsmanager describe-secret` prints it, is always read right.
func (c Config) kindeSecretIsComplete() bool {
	return secretARNSuffix.MatchString(c.KindeClientSecretARN)
}

// readPlans reads a plans JSON file and compacts it for an environment variable.
func readPlans(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("plansFile: %w", err)
	}
	var out bytes.Buffer
	if err := json.Compact(&out, data); err != nil {
		return "", fmt.Errorf("plansFile %s: not valid JSON: %w", path, err)
	}
	return out.String(), nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
