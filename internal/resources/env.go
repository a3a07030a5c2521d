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
	// Secrets are the secrets the deployment provides, by the variable that carries each one's
	// ARN (EnvAdminKeySecretARN, EnvKindeClientSecretARN).
	Secrets map[string]string
	// Settings are the deployment settings functions may list (Function.Settings), by variable,
	// as the deployment configures them (EnvKindeWebhookJWKSURL, EnvStripeRefetch…).
	Settings map[string]string
}

// limitsSourceKinde is the limit source whose client settings functions get.
const limitsSourceKinde = "kinde"

// FunctionEnv is the environment a deployment gives fn: every resource's physical name (as
// NamesFromEnv and GrantFromEnv read them), the log level and the plans; for a function that
// reads limits, the limit source and its Kinde client settings; the ARN of each secret fn lists
// that the deployment provides; and each setting fn lists that the deployment configures. The CDK app sets exactly this; the Lambda emulator check
// (make test-lambda) starts every function with it, pointed at emulator resources.
func FunctionEnv(fn Function, names Names, s EnvSettings) map[string]string {
	env := names.Env()
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
	for _, name := range fn.Secrets {
		if arn, ok := s.Secrets[name]; ok {
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
