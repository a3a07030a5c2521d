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
	cd $(PY_LOCKS) && for lock in pip-tools moto contract; do \
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
bench: tools ## measure the pipeline: request units, round trips and CPU per event, cost per million
	$(GO) run ./cmd/ferry bench pipeline

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

.PHONY: lint
lint: ## gofmt and go vet
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
		if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

-include infra/infra.mk
