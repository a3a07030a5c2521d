# Ferry's vocabulary. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO        ?= go
TOOLS_DIR := _tools
TOOLS_STAMP := $(TOOLS_DIR)/node_modules/.ferry-installed
FUNCTIONS := $(notdir $(patsubst %/,%,$(wildcard functions/*/)))
TEST_TIMEOUT ?= 45m
PYTHON    ?= python3
PY_LOCKS  := $(TOOLS_DIR)/python
# make build's target architecture (Lambda runs the functions on Graviton) and folder.
BUILD_ARCH ?= arm64
BUILD_DIR ?= build
# AWS's Lambda Runtime Interface Emulator, built from the Go module proxy into _tools/bin.
RIE_MODULE  := github.com/aws/aws-lambda-runtime-interface-emulator
RIE_VERSION := v0.0.0-20261030222936-bef5c4ba774d
RIE         := $(TOOLS_DIR)/bin/aws-lambda-rie
HOST_ARCH   := $(shell $(GO) env GOARCH)
# stripe-mock checks Ferry's Stripe requests against Stripe's OpenAPI description (tests only).
STRIPE_MOCK_MODULE  := github.com/stripe/stripe-mock
STRIPE_MOCK_VERSION := v0.203.0
STRIPE_MOCK         := $(TOOLS_DIR)/bin/stripe-mock

export FERRY_FAUXQS_DIR ?= $(CURDIR)/$(TOOLS_DIR)/node_modules/fauxqs
export FERRY_STRIPE_MOCK ?= $(CURDIR)/$(STRIPE_MOCK)
# The CDK's jsii runtime runs on the machine's Node.js; keep it quiet and offline.
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CDK_DISABLE_VERSION_CHECK := 1
export CDK_DISABLE_CLI_TELEMETRY := 1

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-14s %s\n", $$1, $$2}'

$(TOOLS_STAMP): $(TOOLS_DIR)/package.json $(TOOLS_DIR)/package-lock.json
	@command -v npm >/dev/null || { echo "npm is required (Node.js 20 or later)"; exit 1; }
	npm ci --prefix $(TOOLS_DIR) --no-audit --no-fund --loglevel=error
	@touch $@

# Chromium's headless shell for the console's browser test, unpacked from the npm package
# @sparticuz/chromium (no system package, no download beyond the npm registry).
CHROMIUM := $(TOOLS_DIR)/chromium/chrome
$(CHROMIUM): $(TOOLS_STAMP) scripts/unpack-chromium.mjs
	node scripts/unpack-chromium.mjs $(TOOLS_DIR)/node_modules/@sparticuz/chromium/bin $(TOOLS_DIR)/chromium

.PHONY: tools
tools: $(TOOLS_STAMP) $(STRIPE_MOCK) $(CHROMIUM) ## install the Go modules, stripe-mock and the npm tools (fauxqs, the CDK CLI, playwright-core and a headless Chromium) under _tools/
	$(GO) mod download

# One virtualenv under _tools/ per lock file in _tools/python/, installed only from the pinned
# wheels whose hashes the lock lists (no resolution, no builds).
$(TOOLS_DIR)/venv-%/.ferry-installed: $(PY_LOCKS)/%.txt
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) is required (Python 3.11 or later)"; exit 1; }
	rm -rf $(TOOLS_DIR)/venv-$*
	$(PYTHON) -m venv $(TOOLS_DIR)/venv-$*
	$(TOOLS_DIR)/venv-$*/bin/pip install --quiet --disable-pip-version-check --require-hashes --no-deps --only-binary=:all: -r $<
	@touch $@

.PHONY: python-locks
python-locks: $(TOOLS_DIR)/venv-pip-tools/.ferry-installed ## re-pin the Python tools (_tools/python/*.in) into hashed locks
	cd $(PY_LOCKS) && for lock in pip-tools moto contract cfn-lint checkov rehearsal sdk-python sdk-codegen; do \
		../venv-pip-tools/bin/pip-compile --quiet --generate-hashes --strip-extras --allow-unsafe --no-header --no-emit-index-url --no-emit-find-links -o $$lock.txt $$lock.in || exit 1; \
	done

$(STRIPE_MOCK):
	GOBIN=$(CURDIR)/$(TOOLS_DIR)/bin GOFLAGS= $(GO) install $(STRIPE_MOCK_MODULE)@$(STRIPE_MOCK_VERSION)

# make run builds the CLI, then execs it: the shell is replaced, so the server is make's own
# child and gets make's signals (GNU make passes SIGTERM on to its children), and `go run`, which
# does not pass signals on to the program it runs, is not in between.
FERRY_BIN := $(TOOLS_DIR)/bin/ferry

.PHONY: run
run: tools ## run the whole stack on 127.0.0.1:8080 (embedded emulators, no AWS account)
	$(GO) build -o $(FERRY_BIN) ./cmd/ferry
	exec $(FERRY_BIN) dev

.PHONY: test
test: tools ## run every test against the emulators (or FERRY_*_ENDPOINT)
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

.PHONY: test-moto
test-moto: tools $(TOOLS_DIR)/venv-moto/.ferry-installed ## run the Go packages' tests against moto (a second DynamoDB, S3 and SQS) on loopback
	TEST_TIMEOUT=$(TEST_TIMEOUT) scripts/test-moto.sh

.PHONY: test-contract
test-contract: tools $(TOOLS_DIR)/venv-contract/.ferry-installed ## fuzz every operation of api/openapi.yaml against ferry dev with schemathesis
	scripts/test-contract.sh

.PHONY: test-race
test-race: tools ## run the tests of the Go packages under the race detector (infra excluded)
	$(GO) test -count=1 -race -timeout $(TEST_TIMEOUT) $$($(GO) list ./... | grep -v /infra)

# make harness runs the deterministic fault harness at its CI size (HARNESS_SCHEDULES seeded
# schedules over every pipeline), the guard-ablation table, the mutations and a failing seed
# replayed; make test runs the same tests as part of ./... . A long run with a progress bar:
# `go run ./cmd/ferry harness --schedules 100000`.
HARNESS_SCHEDULES ?= 150

.PHONY: harness
harness: tools ## the fault harness: seeded schedules, every guard removed, the mutations, a replayed seed
	FERRY_HARNESS_SCHEDULES=$(HARNESS_SCHEDULES) $(GO) test -count=1 -timeout 30m ./internal/devkit/harness/

# make fuzz runs every fuzz target for FUZZTIME each, one after another, with FUZZ_PARALLEL
# workers: one per request body and webhook intake in internal/platform/httpapi (through the whole stack),
# and the Stripe-Signature header's reading in internal/webhooks/stripe. The readable
# seeds are under testdata/fuzz/<body>/ (each target adds them); what go test keeps (inputs that
# failed) goes to testdata/fuzz/FuzzXxx/ beside the target's package, and is replayed by every
# plain `go test` from then on.
FUZZTIME      ?= 30s
FUZZ_PARALLEL ?= 1
# Minimizing an input that is merely interesting stops the fuzzing meanwhile; 60 s by default.
FUZZ_MINIMIZE ?= 5s
FUZZ_PKGS     := ./internal/platform/httpapi/ ./internal/webhooks/stripe/

.PHONY: fuzz
fuzz: tools ## run each fuzz target for FUZZTIME (default 30s): make fuzz FUZZTIME=2m
	@for pkg in $(FUZZ_PKGS); do \
		for target in $$($(GO) test $$pkg -list '^Fuzz' | grep '^Fuzz'); do \
			echo "== $$pkg $$target for $(FUZZTIME)"; \
			$(GO) test $$pkg -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZ_MINIMIZE) -parallel $(FUZZ_PARALLEL) || exit 1; \
		done; \
	done

.PHONY: bench
bench: tools ## measure the pipeline (request units, round trips and CPU per event, cost per million) and the usage query
	$(GO) run ./cmd/ferry bench pipeline
	$(GO) run ./cmd/ferry bench query
	$(GO) run ./cmd/ferry bench alerts

.PHONY: build
build: ## build every function as an arm64 bootstrap under build/<function>/ (BUILD_ARCH, BUILD_DIR)
	@for fn in $(FUNCTIONS); do \
		echo "$(BUILD_DIR)/$$fn/bootstrap"; \
		GOOS=linux GOARCH=$(BUILD_ARCH) CGO_ENABLED=0 $(GO) build -tags lambda.norpc -trimpath -ldflags="-s -w" \
			-o $(BUILD_DIR)/$$fn/bootstrap ./functions/$$fn/bootstrap || exit 1; \
	done

$(RIE):
	GOBIN=$(CURDIR)/$(TOOLS_DIR)/bin GOFLAGS= $(GO) install $(RIE_MODULE)/cmd/aws-lambda-rie@$(RIE_VERSION)

.PHONY: test-lambda
test-lambda: tools $(RIE) ## boot every function binary under AWS's Lambda Runtime Interface Emulator and invoke it once
	@$(MAKE) --no-print-directory build BUILD_ARCH=$(HOST_ARCH) BUILD_DIR=$(TOOLS_DIR)/lambda/$(HOST_ARCH)
	FERRY_RIE=$(CURDIR)/$(RIE) FERRY_LAMBDA_BUILD=$(CURDIR)/$(TOOLS_DIR)/lambda/$(HOST_ARCH) \
		$(GO) test -count=1 -timeout 10m -run TestLambdaRuntime -v ./functions/

# The synthesized template judged by two programs nobody here wrote, pinned in _tools/python:
# cfn-lint with the serverless rules, and checkov. Both stages are synthesized without bundling
# (the judges read the template only); a finding neither fixed nor accepted on its resource with
# a reason (infra/judges.go) fails.
JUDGE_DIR := $(TOOLS_DIR)/judge

.PHONY: judge-template
judge-template: $(TOOLS_DIR)/venv-cfn-lint/.ferry-installed $(TOOLS_DIR)/venv-checkov/.ferry-installed ## judge the dev and prod templates with cfn-lint and checkov
	@for stage in dev prod; do \
		rm -rf $(JUDGE_DIR)/$$stage; \
		CDK_CONTEXT_JSON="{\"stage\":\"$$stage\",\"aws:cdk:bundling-stacks\":[]}" CDK_OUTDIR=$(JUDGE_DIR)/$$stage $(GO) run ./infra || exit 1; \
	done
	scripts/judge-template.sh $(JUDGE_DIR)/dev/ferry-dev.template.json $(JUDGE_DIR)/prod/ferry-prod.template.json

# make deploy-rehearsal: the prod stack deployed into moto's CloudFormation (scripts/
# rehearsal_server.py), every resource accounted for, every function run under the Lambda Runtime
# Interface Emulator with its own role while moto enforces IAM, and the upgrade from the previous
# release (docs/deploy-rehearsal.md).
REHEARSAL_DIR   := $(TOOLS_DIR)/rehearsal
REHEARSAL_STAGE ?= prod

.PHONY: deploy-rehearsal
deploy-rehearsal: $(RIE) $(TOOLS_DIR)/venv-rehearsal/.ferry-installed ## deploy the stack into moto's CloudFormation and run every function against it, IAM enforced
	@$(MAKE) --no-print-directory build BUILD_ARCH=$(HOST_ARCH) BUILD_DIR=$(TOOLS_DIR)/lambda/$(HOST_ARCH)
	rm -rf $(REHEARSAL_DIR)/current
	CDK_CONTEXT_JSON='{"stage":"$(REHEARSAL_STAGE)"}' CDK_OUTDIR=$(REHEARSAL_DIR)/current $(GO) run ./infra
	scripts/previous-assembly.sh $(REHEARSAL_STAGE) $(REHEARSAL_DIR)/previous
	FERRY_REHEARSAL_PYTHON=$(CURDIR)/$(TOOLS_DIR)/venv-rehearsal/bin/python \
		FERRY_REHEARSAL_ASSEMBLY=$(CURDIR)/$(REHEARSAL_DIR)/current FERRY_REHEARSAL_PREVIOUS=$(CURDIR)/$(REHEARSAL_DIR)/previous \
		FERRY_REHEARSAL_STACK=ferry-$(REHEARSAL_STAGE) FERRY_RIE=$(CURDIR)/$(RIE) FERRY_LAMBDA_BUILD=$(CURDIR)/$(TOOLS_DIR)/lambda/$(HOST_ARCH) \
		$(GO) test -count=1 -timeout 20m -v -run 'TestRehearsal|TestUpgrade' ./internal/devkit/rehearsal/

.PHONY: lint
lint: ## gofmt and go vet
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
		if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

# The client SDKs: sdk/go (a Go module of its own, so the root module's ./... skips it),
# sdk/typescript (an npm package) and sdk/python (a pyproject package). Their installs go under
# _tools/, which Go skips: the TypeScript SDK's node_modules is a git-ignored symlink into
# _tools/sdk-typescript/ (go's ./... does not follow symlinks), the Python SDK's venvs are
# _tools/venv-sdk-python (its dependencies, pytest and its build backend) and
# _tools/venv-sdk-codegen (its model generator), from hashed locks in _tools/python/.
SDK_TS_TOOLS := $(TOOLS_DIR)/sdk-typescript
SDK_TS_STAMP := $(SDK_TS_TOOLS)/node_modules/.ferry-installed
SDK_PY_VENV  := $(TOOLS_DIR)/venv-sdk-python
SDK_PY_GEN   := $(TOOLS_DIR)/venv-sdk-codegen
# The Go SDK's type generator, run at this version from the module proxy (never a dependency of
# the SDK's module).
OAPI_CODEGEN := github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2
SDK_GENERATED := sdk/go/types.gen.go sdk/typescript/src/schema.gen.ts sdk/python/src/ferrymeter/models.py

$(SDK_TS_STAMP): sdk/typescript/package.json sdk/typescript/package-lock.json
	@command -v npm >/dev/null || { echo "npm is required (Node.js 20 or later)"; exit 1; }
	mkdir -p $(SDK_TS_TOOLS)
	cp sdk/typescript/package.json sdk/typescript/package-lock.json $(SDK_TS_TOOLS)/
	npm ci --prefix $(SDK_TS_TOOLS) --no-audit --no-fund --loglevel=error
	ln -sfn ../../$(SDK_TS_TOOLS)/node_modules sdk/typescript/node_modules
	@touch $@

.PHONY: sdk-tools
sdk-tools: $(SDK_TS_STAMP) $(SDK_PY_VENV)/.ferry-installed $(SDK_PY_GEN)/.ferry-installed ## install what the SDKs need (npm packages, two Python venvs, the Go module's requirements) under _tools/
	cd sdk/go && $(GO) mod download

.PHONY: sdk-generate
sdk-generate: sdk-tools ## regenerate the SDKs' types from api/openapi.yaml (oapi-codegen, openapi-typescript, datamodel-code-generator)
	cd sdk/go && GOFLAGS= $(GO) run $(OAPI_CODEGEN) -config oapi-codegen.yaml ../../api/openapi.yaml
	cd sdk/typescript && node_modules/.bin/openapi-typescript ../../api/openapi.yaml --output src/schema.gen.ts --silent
	$(SDK_PY_GEN)/bin/datamodel-codegen --input api/openapi.yaml --input-file-type openapi \
		--output sdk/python/src/ferrymeter/models.py --output-model-type pydantic_v2.BaseModel \
		--target-python-version 3.11 --use-standard-collections --use-union-operator --enum-field-as-literal all \
		--extra-fields ignore --use-double-quotes --disable-timestamp --use-schema-description --field-constraints \
		--collapse-root-models --formatters black isort 2>/dev/null

.PHONY: sdk-check-generated
sdk-check-generated: sdk-generate ## regenerate the SDKs' types and fail if they differ from what is committed
	@git diff --exit-code --stat -- $(SDK_GENERATED) || { echo "The SDKs' generated types are not current: run make sdk-generate and commit them."; exit 1; }

.PHONY: sdk-typescript-package
sdk-typescript-package: $(SDK_TS_STAMP) ## build the TypeScript SDK and pack it as _tools/sdk-typescript/ferrymeter-sdk-<version>.tgz
	cd sdk/typescript && node_modules/.bin/tsc -p tsconfig.json && npm pack --silent --pack-destination ../../$(SDK_TS_TOOLS) >/dev/null
	@ls $(SDK_TS_TOOLS)/ferrymeter-sdk-*.tgz

.PHONY: test-sdk
test-sdk: tools sdk-tools ## the SDKs' unit tests, then each end to end against ferry dev through the fault proxy, then the quick-starts
	cd sdk/go && $(GO) vet ./... && $(GO) test -count=1 -race ./...
	cd sdk/typescript && node_modules/.bin/tsc -p tsconfig.json && node --test test/unit.test.mjs
	PYTHONPATH=sdk/python/src $(SDK_PY_VENV)/bin/python -m pytest -q -p no:cacheprovider sdk/python/tests/test_unit.py
	@# Each SDK gets a fresh stack, so each run's figures are its own.
	scripts/with-stack.sh scripts/test-sdk-e2e.sh go
	scripts/with-stack.sh scripts/test-sdk-e2e.sh typescript
	scripts/with-stack.sh scripts/test-sdk-e2e.sh python
	scripts/with-stack.sh scripts/sdk-quickstarts.sh

.PHONY: bench-sdk
bench-sdk: tools sdk-tools ## the batcher's overhead (testing.B) and each SDK's batcher against a bare HTTP client, side by side against ferry dev
	cd sdk/go && $(GO) test -run '^$$' -bench Batcher_Add -benchmem -count 3 .
	@# Each side waits for the worker to bill its events before the next side starts. Both sides
	@# post to the same route of the same stack, so the ratio is the clients' own.
	scripts/with-stack.sh scripts/bench-sdk.sh

-include infra/infra.mk

.PHONY: linked
linked: ## per function: how many internal packages its binary links, and its size (arm64, stripped)
	scripts/linked.sh
