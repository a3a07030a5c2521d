package main

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/jsii-runtime-go"

	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// These tests cover where usage holds read limits from: the limitsSource context, the Kinde
// settings handed to the functions that read limits, and the grant on the Kinde client secret.

// kindeSecretARN is the complete ARN (with the six characters Secrets Manager appends to the
// name) of a Kinde client secret an operator created.
const kindeSecretARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:ferry/kinde-client-AbC123"

// kindeContext is the context of a stage that reads limits from Kinde, its client secret at
// secretARN; overrides are key, value pairs, an empty value removing the key.
func kindeContext(secretARN string, overrides ...string) map[string]any {
	ctx := map[string]any{
		ctxLimitsSource:         "kinde",
		ctxKindeDomain:          "acme.kinde.com",
		ctxKindeClientID:        "0123456789abcdef0123456789abcdef",
		ctxKindeClientSecretARN: secretARN,
	}
	for i := 0; i+1 < len(overrides); i += 2 {
		if overrides[i+1] == "" {
			delete(ctx, overrides[i])
		} else {
			ctx[overrides[i]] = overrides[i+1]
		}
	}
	return ctx
}

// functionEnv returns a function's environment variables from the template.
func functionEnv(t *testing.T, s *synthesized, name string) object {
	t.Helper()
	fn := props(s.json["Resources"].(object)[functionID(t, s, name)].(object))
	return fn["Environment"].(object)["Variables"].(object)
}

// kindeEnv are the variables only a function that reads limits from Kinde gets.
var kindeEnv = []string{resources.EnvKindeDomain, resources.EnvKindeClientID, resources.EnvKindeClientSecretARN}

// secretStatements returns the Allow statements in the template that name a secret by a literal
// ARN starting with prefix (an imported secret has no logical id to refer to), by the logical
// id of the role or policy holding them.
func (s *synthesized) secretStatements(prefix string) map[string][]object {
	out := map[string][]object{}
	for id, r := range s.json["Resources"].(object) {
		for _, st := range allowStatements(r.(object)) {
			for _, res := range list(st["Resource"]) {
				if str, ok := res.(string); ok && strings.HasPrefix(str, prefix) {
					out[id] = append(out[id], st)
					break
				}
			}
		}
	}
	return out
}

// assertKindeWiring checks, for every function in defs, that the limit source's variables
// reach exactly the functions that read limits, and that the Kinde client secret (named by its
// ARN, granted on grantARN) reaches exactly the functions that list it, with read access to
// that secret only.
func assertKindeWiring(t *testing.T, s *synthesized, defs Definitions, secretARN, grantARN string) {
	t.Helper()
	readers, holders := 0, 0
	for _, f := range defs.Functions {
		t.Run(f.Name, func(t *testing.T) {
			env := functionEnv(t, s, f.Name)
			want := map[string]any{}
			if f.ReadsLimits {
				readers++
				want[resources.EnvLimitsSource] = "kinde"
				want[resources.EnvKindeDomain] = s.cfg.KindeDomain
				want[resources.EnvKindeClientID] = s.cfg.KindeClientID
			}
			// A function gets the secret when it lists it and needs it in this deployment: for
			// reading limits from Kinde, or for reporting to Kinde.
			listsSecret := contains(f.Secrets, resources.EnvKindeClientSecretARN) && resources.NeedsSecret(f, resources.EnvKindeClientSecretARN, envSettings(s.cfg, nil))
			if listsSecret {
				holders++
				want[resources.EnvKindeClientSecretARN] = secretARN
			}
			for _, k := range append([]string{resources.EnvLimitsSource}, kindeEnv...) {
				if got, ok := env[k]; want[k] != got || (want[k] == nil && ok) {
					t.Errorf("%s = %v; want %v", k, got, want[k])
				}
			}

			roleID := refs(props(s.json["Resources"].(object)[functionID(t, s, f.Name)].(object))["Role"])[0]
			var actions []string
			for _, st := range s.roleStatements(roleID) {
				for _, res := range list(st["Resource"]) {
					str, isString := res.(string)
					if !isString || !strings.Contains(str, ":secretsmanager:") {
						continue
					}
					if str != grantARN {
						t.Errorf("statement %v reaches %s; want only %s", st, str, grantARN)
					}
					actions = append(actions, strs(st["Action"])...)
				}
			}
			got, wantActions := strings.Join(sortedSet(actions), " "), ""
			if listsSecret {
				wantActions = strings.Join(wantSecretRead, " ")
			}
			if got != wantActions {
				t.Errorf("actions on the Kinde client secret %q; want %q", got, wantActions)
			}
		})
	}
	if readers == 0 || holders == 0 {
		t.Fatalf("%d functions read limits and %d hold the Kinde client secret; the test proves nothing", readers, holders)
	}
	// No grant on the secret anywhere but in the roles of the functions above: one policy per
	// function that lists it.
	if got := len(s.secretStatements(grantARN)); got != holders {
		t.Errorf("%d resources grant the Kinde client secret; want %d, the policies of the functions that list it", got, holders)
	}
	check(t, func() {
		s.tmpl.ResourceCountIs(jsii.String("AWS::SecretsManager::ResourcePolicy"), jsii.Number(0))
		// The stack creates only the operator key and the Stripe webhook secret; it never owns
		// the Kinde client secret.
		s.tmpl.ResourceCountIs(jsii.String("AWS::SecretsManager::Secret"), jsii.Number(stackCreatedSecrets))
	})
}

func TestLimits_KindeSettingsReachExactlyTheFunctionsThatReadLimits(t *testing.T) {
	s := synthStage(t, kindeContext(kindeSecretARN))
	assertKindeWiring(t, s, DefaultDefinitions(), kindeSecretARN, kindeSecretARN)
}

// A partial ARN (no suffix) names the secret whatever suffix Secrets Manager gave it: the grant
// matches any six characters after the name, and nothing with a longer name.
func TestLimits_PartialKindeSecretARNGrantedOnItsSuffixedForms(t *testing.T) {
	partial := "arn:aws:secretsmanager:eu-west-1:123456789012:secret:ferry-kinde"
	s := synthStage(t, kindeContext(partial))
	assertKindeWiring(t, s, DefaultDefinitions(), partial, partial+"-??????")
}

// A second function that admits holds is wired like the first, with no change in infra/.
func TestLimits_FollowAppendedDefinitions(t *testing.T) {
	defs := grownDefinitions()
	defs.Functions = append(defs.Functions, resources.Function{
		Name:        "quotas",
		Purpose:     "answers quota checks against the configured limit source",
		Timeout:     10 * time.Second,
		MemoryMB:    256,
		Tables:      map[string]resources.Access{resources.TableAccounts: resources.Read},
		ReadsLimits: true,
		Secrets:     []string{resources.EnvKindeClientSecretARN},
	})
	s := synthWith(t, kindeContext(kindeSecretARN), defs, fakeRoot(t, defs), false)
	assertKindeWiring(t, s, defs, kindeSecretARN, kindeSecretARN)
}

func TestLimits_PlanSourceSetsNoKindeEnvironmentAndNoGrant(t *testing.T) {
	s := synthStage(t, dev)
	readers := 0
	for _, f := range resources.Functions {
		env := functionEnv(t, s, f.Name)
		if f.ReadsLimits {
			readers++
			if env[resources.EnvLimitsSource] != "plan" {
				t.Errorf("%s: %s = %v; want plan", f.Name, resources.EnvLimitsSource, env[resources.EnvLimitsSource])
			}
		} else if v, ok := env[resources.EnvLimitsSource]; ok {
			t.Errorf("%s reads no limits but has %s = %v", f.Name, resources.EnvLimitsSource, v)
		}
		for _, k := range kindeEnv {
			if v, ok := env[k]; ok {
				t.Errorf("%s: %s = %v with limitsSource plan", f.Name, k, v)
			}
		}
	}
	if readers == 0 {
		t.Fatal("no function reads limits")
	}
	// The only secrets granted are the ones the stack creates (the operator key, the Stripe
	// webhook secret).
	if got := s.secretStatements("arn:"); len(got) > 0 {
		t.Errorf("statements granting a secret by literal ARN with limitsSource plan: %v", got)
	}
	check(t, func() {
		s.tmpl.ResourceCountIs(jsii.String("AWS::SecretsManager::Secret"), jsii.Number(stackCreatedSecrets))
	})
}

// A stage configured half-way fails at synthesis, naming what is missing or wrong, instead of
// deploying functions that would refuse every admission.
func TestLimits_IncompleteKindeSettingsFailSynthesis(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ctx  map[string]any
		want string
	}{
		{"no secret", kindeContext(kindeSecretARN, ctxKindeClientSecretARN, ""), `limitsSource "kinde" needs kindeClientSecretArn`},
		{"no domain or client id", kindeContext(kindeSecretARN, ctxKindeDomain, "", ctxKindeClientID, ""), `needs kindeDomain, kindeClientId`},
		{"plan with a secret", map[string]any{ctxKindeClientSecretARN: kindeSecretARN}, `kindeClientSecretArn: set only with limitsSource=kinde`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := trySynth(tc.ctx, DefaultDefinitions(), root, false, "")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v; want one containing %q", err, tc.want)
			}
		})
	}
}

func TestLimits_UnknownSecretInDefinitionsFailsSynthesis(t *testing.T) {
	defs := copyDefinitions(DefaultDefinitions())
	defs.Functions[0].Secrets = append(defs.Functions[0].Secrets, "FERRY_STRIPE_KEY_SECRET_ARN")
	_, err := trySynth(dev, defs, fakeRoot(t, defs), false, "")
	if err == nil || !strings.Contains(err.Error(), `unknown secret "FERRY_STRIPE_KEY_SECRET_ARN"`) {
		t.Errorf("err = %v", err)
	}
}
