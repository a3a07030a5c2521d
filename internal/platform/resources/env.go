package resources

// EnvSettings are a deployment's settings that reach its functions as environment variables.
type EnvSettings struct {
	// LogLevel is FERRY_LOG_LEVEL (debug, info, warn, error).
	LogLevel string
	// Plans is the JSON plan catalog (FERRY_PLANS); empty keeps the built-in one.
	Plans string
	// LimitsSource is where functions that read limits read them ("plan" or "kinde"), and
	// KindeDomain and KindeClientID the Kinde client's settings when it is "kinde".
	LimitsSource  string
	KindeDomain   string
	KindeClientID string
	// ReportToKinde reports usage to Kinde's meters: the functions that report and may read the
	// Kinde client secret get EnvReportKinde and the Kinde client's settings.
	ReportToKinde bool
	// Secrets are the secrets the deployment provides, by the variable that carries each one's
	// ARN (EnvAdminKeySecretARN, EnvKindeClientSecretARN).
	Secrets map[string]string
	// Settings are the deployment settings functions may list (Function.Settings), by variable,
	// as the deployment configures them (EnvKindeWebhookJWKSURL, EnvStripeRefetch…).
	Settings map[string]string
}

// limitsSourceKinde is the limit source whose client settings functions get.
const limitsSourceKinde = "kinde"

// FunctionEnv is the environment a deployment gives fn: the physical names of exactly the
// resources fn's entry grants (as GrantFromEnv reads them; names holds the whole deployment's,
// and a name fn is not granted never reaches it, so code that reaches for an ungranted resource
// fails at start in every environment, not with AccessDenied in AWS), the log level and the plans; for a function that
// reads limits, the limit source and its Kinde client settings; the ARN of each secret fn lists
// that the deployment provides and fn needs (NeedsSecret); and each setting fn lists that the
// deployment configures. The CDK app sets exactly this; the Lambda emulator check (make
// test-lambda) starts every function with it, pointed at emulator resources.
func FunctionEnv(fn Function, names Names, s EnvSettings) map[string]string {
	env := names.Only(fn).Env()
	env[EnvLogLevel] = s.LogLevel
	if s.Plans != "" {
		env[EnvPlans] = s.Plans
	}
	if fn.ReadsLimits {
		env[EnvLimitsSource] = s.LimitsSource
		if s.LimitsSource == limitsSourceKinde {
			env[EnvKindeDomain] = s.KindeDomain
			env[EnvKindeClientID] = s.KindeClientID
		}
	}
	if reportsToKinde(fn, s) {
		env[EnvReportKinde] = "true"
		env[EnvKindeDomain] = s.KindeDomain
		env[EnvKindeClientID] = s.KindeClientID
	}
	for _, name := range fn.Secrets {
		if arn, ok := s.Secrets[name]; ok && NeedsSecret(fn, name, s) {
			env[name] = arn
		}
	}
	for _, name := range fn.Settings {
		if v, ok := s.Settings[name]; ok {
			env[name] = v
		}
	}
	return env
}

// reportsToKinde reports whether fn reports usage to Kinde in a deployment: it reports usage,
// may read the Kinde client secret, and the deployment reports to Kinde.
func reportsToKinde(fn Function, s EnvSettings) bool {
	return s.ReportToKinde && fn.ReportsUsage && listed(fn.Secrets, EnvKindeClientSecretARN)
}

// NeedsSecret reports whether fn, which lists the secret name, needs it in a deployment: the
// Kinde client secret to read limits from Kinde or to report to Kinde, the Stripe API key to
// report to Stripe or to re-fetch Stripe objects (EnvStripeRefetch), any other secret always. A function gets (and is granted) only the secrets
// it needs.
func NeedsSecret(fn Function, name string, s EnvSettings) bool {
	switch name {
	case EnvKindeClientSecretARN:
		return (fn.ReadsLimits && s.LimitsSource == limitsSourceKinde) || reportsToKinde(fn, s)
	case EnvStripeAPIKeySecretARN:
		return fn.ReportsUsage || (listed(fn.Settings, EnvStripeRefetch) && s.Settings[EnvStripeRefetch] == "true")
	}
	return true
}

func listed(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
