# The CDK app's targets. The top-level Makefile includes this file (after defining TOOLS_STAMP,
# the file that marks _tools/ installed, and its `tools` target); every path is relative to the
# repository root.
#
#   make synth                      # offline: writes cdk.out/, prints the resource count
#   make cdk-bootstrap AWS_PROFILE=ferry-prod          # once per account and region
#   make deploy STAGE=prod ALARM_EMAIL=ops@example.com AWS_PROFILE=ferry-prod
#   make deploy STAGE=prod LIMITS_SOURCE=kinde KINDE_DOMAIN=acme.kinde.com \
#     KINDE_CLIENT_ID=<id> KINDE_CLIENT_SECRET_ARN=<arn> AWS_PROFILE=ferry-prod
#   make deploy STAGE=prod REPORT_TO_KINDE=true KINDE_DOMAIN=… KINDE_CLIENT_ID=… \
#     KINDE_CLIENT_SECRET_ARN=<arn> STRIPE_API_KEY_SECRET_ARN=<arn> AWS_PROFILE=ferry-prod
#   make test-infra

STAGE ?= dev
# Optional settings, passed to the app as CDK context when set.
ALARM_EMAIL ?=
PLANS_FILE ?=
# Where usage holds read limits (plan or kinde) and, for kinde, the Kinde client.
LIMITS_SOURCE ?=
KINDE_DOMAIN ?=
KINDE_CLIENT_ID ?=
KINDE_CLIENT_SECRET_ARN ?=
# Usage reporting: REPORT_TO_KINDE=true reports to Kinde's meters (with the KINDE_* client);
# STRIPE_API_KEY_SECRET_ARN names the secret holding the Stripe API key, which reports usage to
# Stripe (and which the inbox's optional re-fetch reads with).
REPORT_TO_KINDE ?=
# The webhook inbox: Kinde's webhook key URL (default from KINDE_DOMAIN) and the optional
# re-fetch of Stripe objects (STRIPE_REFETCH=true with the API key's secret ARN).
KINDE_WEBHOOK_JWKS_URL ?=
STRIPE_REFETCH ?=
STRIPE_API_BASE ?=
STRIPE_API_KEY_SECRET_ARN ?=
# The stack's public URL (its ApiUrl output, or a custom domain), for the console's labs.
API_URL ?=
# BATCH_MODE chose the worker design in earlier releases; there is one now. Set, it is passed on
# as the context key it set, which synthesis refuses with why: an old deploy command is stopped,
# not run in silence as a design it did not ask for.
BATCH_MODE ?=
CDK_FLAGS ?=

CDK := _tools/node_modules/.bin/cdk
CDK_STACK := ferry-$(STAGE)
CDK_CONTEXT := -c stage=$(STAGE) \
	$(if $(ALARM_EMAIL),-c alarmEmail=$(ALARM_EMAIL)) \
	$(if $(PLANS_FILE),-c plansFile=$(PLANS_FILE)) \
	$(if $(LIMITS_SOURCE),-c limitsSource=$(LIMITS_SOURCE)) \
	$(if $(KINDE_DOMAIN),-c kindeDomain=$(KINDE_DOMAIN)) \
	$(if $(KINDE_CLIENT_ID),-c kindeClientId=$(KINDE_CLIENT_ID)) \
	$(if $(KINDE_CLIENT_SECRET_ARN),-c kindeClientSecretArn=$(KINDE_CLIENT_SECRET_ARN)) \
	$(if $(REPORT_TO_KINDE),-c reportToKinde=$(REPORT_TO_KINDE)) \
	$(if $(KINDE_WEBHOOK_JWKS_URL),-c kindeWebhookJwksUrl=$(KINDE_WEBHOOK_JWKS_URL)) \
	$(if $(STRIPE_REFETCH),-c stripeRefetch=$(STRIPE_REFETCH)) \
	$(if $(STRIPE_API_BASE),-c stripeApiBase=$(STRIPE_API_BASE)) \
	$(if $(STRIPE_API_KEY_SECRET_ARN),-c stripeApiKeySecretArn=$(STRIPE_API_KEY_SECRET_ARN)) \
	$(if $(API_URL),-c apiUrl=$(API_URL)) \
	$(if $(BATCH_MODE),-c batchMode=$(BATCH_MODE))

# Quiet and offline: no version check, notices or telemetry, and no warning about Node 20.
CDK_ENV := JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 \
	CDK_DISABLE_VERSION_CHECK=1 \
	CDK_DISABLE_CLI_TELEMETRY=1 \
	npm_config_update_notifier=false

# The first `go test` of infra/ compiles the CDK bindings (a few minutes, once per build cache).
INFRA_TEST_TIMEOUT ?= 20m

ifndef TOOLS_STAMP
TOOLS_STAMP := _tools/node_modules/.package-lock.json
$(TOOLS_STAMP): _tools/package.json _tools/package-lock.json
	npm ci --prefix _tools --no-audit --no-fund
	@touch $@

.PHONY: tools
tools: $(TOOLS_STAMP) ## Install the npm tools (CDK CLI, SQS emulator) into _tools/
endif

.PHONY: synth deploy cdk-bootstrap test-infra

synth: $(TOOLS_STAMP) ## Synthesize the CloudFormation template offline into cdk.out/ (STAGE=dev)
	$(CDK_ENV) $(CDK) synth $(CDK_STACK) --quiet $(CDK_CONTEXT) $(CDK_FLAGS)
	@node -e 'const f = "cdk.out/$(CDK_STACK).template.json"; console.log(f + ": " + Object.keys(require("./" + f).Resources).length + " resources")'

deploy: $(TOOLS_STAMP) ## Deploy the stack to the account of AWS_PROFILE (STAGE, ALARM_EMAIL, PLANS_FILE, LIMITS_SOURCE, KINDE_*, REPORT_TO_KINDE, STRIPE_*)
	$(CDK_ENV) $(CDK) deploy $(CDK_STACK) $(CDK_CONTEXT) \
		$(if $(AWS_PROFILE),--profile $(AWS_PROFILE)) --require-approval broadening $(CDK_FLAGS)

cdk-bootstrap: $(TOOLS_STAMP) ## Prepare the account and region of AWS_PROFILE for CDK deployments (once)
	$(CDK_ENV) $(CDK) bootstrap $(CDK_CONTEXT) $(if $(AWS_PROFILE),--profile $(AWS_PROFILE))

test-infra: ## Run the CDK app's tests (assertions on the synthesized template)
	JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 go test -count=1 -timeout $(INFRA_TEST_TIMEOUT) ./infra/...
