# Regina — developer entry points. `make` (or `make help`) lists the targets.
# Every target that needs PostgreSQL finds or starts one itself through
# scripts/ensure-postgres.sh (set DATABASE_URL to use a server of your own).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
export PATH := /usr/local/go/bin:$(PATH)

.DEFAULT_GOAL := help

GO          ?= go
ARGS        ?=
GOTESTFLAGS ?=
ITERATIONS  ?= 1x
FUZZTIME    ?= 30s

ENSURE_PG := scripts/ensure-postgres.sh

.PHONY: help build run test test/long test/race test/citus bench fuzz loadtest lint lint/gomod db/stop clean clean-db faults faults/citus soak hostile compare compare/scale

help: ## Show this list of targets
	@echo 'Usage: make TARGET [VAR=value ...]'
	@echo
	@awk 'BEGIN {FS = ":[^#]*## "} /^[a-zA-Z0-9_\/.-]+:.*## / {n[++c] = $$1; d[c] = $$2; if (length($$1) > w) w = length($$1)} \
		END {f = "  %-" w "s  %s\n"; for (i = 1; i <= c; i++) printf f, n[i], d[i]}' $(MAKEFILE_LIST)
	@echo
	@echo 'Variables: ARGS (run, loadtest, faults), GOTESTFLAGS (e.g. -run X, -v), TEST_PARALLEL (tests at once per package),'
	@echo '           ITERATIONS (bench), FUZZTIME (fuzz), DURATION (faults, soak, compare), SOAK_PNG,'
	@echo '           WARMUP ITEMS ROUNDS SCALE_PARTITIONS SCALE_HASHES SCALE_POP SCALE_WINDOW (compare),'
	@echo '           QUEEN_URL QUEEN_DATABASE (compare: also a Queen server you run),'
	@echo '           DATABASE_URL (use this PostgreSQL instead of a local one).'

build: ## Build bin/regina and bin/regina-loadtest
	$(GO) build -o bin/regina ./cmd/regina
	$(GO) build -o bin/regina-loadtest ./loadtest

# make run serves from a database of its own, "regina" (created if missing),
# unless DATABASE_URL or PG_DB names one; make test uses "regina_test" (or
# TEST_DATABASE_URL, when set).
# make clean-db drops exactly those two (the first only when make run chose
# it) and removes the throwaway cluster in .data/ if one was started.
RUN_DB  := $(if $(DATABASE_URL)$(PG_DB),,regina)
TEST_DB := regina_test

run: build ## Build and serve (database "regina" unless DATABASE_URL says otherwise; ARGS=flags)
	url=$$($(ENSURE_PG) $(RUN_DB)) && DATABASE_URL="$$url" exec bin/regina $(ARGS)

clean-db: ## Drop what make run and make test created: databases regina, regina_test, the cluster in .data/
	$(ENSURE_PG) --drop $(TEST_DB) $(RUN_DB)

# Tests. make test runs every test but the long ones, make test/long exactly
# those, and .ci/run both. A long test is long by nature (a fault-injection
# harness starting PostgreSQL clusters and brokers, an end-to-end benchmark
# run) and says so by its name: TestLong_... (go test -run/-skip select it;
# nothing else lists them). Any other slow test is made fast by design. The
# tests wait on PostgreSQL far more than they compute, so each package runs
# TEST_PARALLEL tests at once (go test's default is the number of cores).
# Every run prints a line per package, the output of each failure, and one
# summary line (scripts/testsum); bin/test*.json keep the per-test timings.
# Packages whose TestMain uses sqlstoretest.WithPool recycle their tests'
# migrated schemas instead of migrating and dropping one per test. go test's
# own vet pass is off (-vet=off: ~15 CPU-s on a cold build cache): make lint
# runs govet with every analyzer.
LONG_TESTS    := ^TestLong_
LONG_PKGS      = $(sort $(dir $(shell grep -rlE --include='*_test.go' '^func TestLong_' .)))
TEST_PARALLEL ?= 8
TESTSUM       := bin/testsum
GOTEST         = $(GO) test -json -count=1 -vet=off -parallel $(TEST_PARALLEL)
# GOTESTFLAGS=-v shows every test's output, as go test -v does.
TESTSUM_V      = $(if $(filter -v,$(GOTESTFLAGS)),-v)

$(TESTSUM): $(wildcard scripts/testsum/*.go)
	$(GO) build -o $@ ./scripts/testsum

test: $(TESTSUM) ## Run every test but the long ones against PostgreSQL (GOTESTFLAGS=... adds flags)
	url=$${TEST_DATABASE_URL:-$$($(ENSURE_PG) $(TEST_DB))} && TEST_DATABASE_URL="$$url" $(GOTEST) -timeout 15m -skip '$(LONG_TESTS)' \
		$(GOTESTFLAGS) ./... | $(TESTSUM) $(TESTSUM_V) -name 'make test' -json bin/test.json

test/long: $(TESTSUM) ## Run the long tests (TestLong_*: fault injection, scale, end-to-end benchmark runs)
	url=$${TEST_DATABASE_URL:-$$($(ENSURE_PG) $(TEST_DB))} && TEST_DATABASE_URL="$$url" $(GOTEST) -timeout 20m -run '$(LONG_TESTS)' \
		$(GOTESTFLAGS) $(LONG_PKGS) | $(TESTSUM) $(TESTSUM_V) -name 'make test/long' -json bin/test-long.json

test/citus: ## Run the Citus tests and the end-to-end tests on a local Citus cluster (skips without ../shared/tools/citus)
	scripts/test-citus.sh

test/race: $(TESTSUM) ## Run every test but the long ones with the race detector
	url=$${TEST_DATABASE_URL:-$$($(ENSURE_PG) $(TEST_DB))} && TEST_DATABASE_URL="$$url" $(GOTEST) -race -timeout 15m -skip '$(LONG_TESTS)' \
		$(GOTESTFLAGS) ./... | $(TESTSUM) $(TESTSUM_V) -name 'make test/race' -json bin/test-race.json

bench: ## Run the Go benchmarks in ./bench (ITERATIONS=1x)
	url=$$($(ENSURE_PG) regina_test) && TEST_DATABASE_URL="$$url" $(GO) test -run='^$$' -bench=. -benchtime=$(ITERATIONS) $(GOTESTFLAGS) ./bench/...

fuzz: ## Fuzz the JSON decoders and segment codec (FUZZTIME=30s each)
	$(GO) test -run='^$$' -fuzz=FuzzDecodePush -fuzztime=$(FUZZTIME) ./wire
	$(GO) test -run='^$$' -fuzz=FuzzDecodeConfigure -fuzztime=$(FUZZTIME) ./wire
	$(GO) test -run='^$$' -fuzz=FuzzDecodeTransaction -fuzztime=$(FUZZTIME) ./wire
	$(GO) test -run='^$$' -fuzz=FuzzDecodeAcks -fuzztime=$(FUZZTIME) ./wire
	$(GO) test -run='^$$' -fuzz=FuzzDecodeStreams -fuzztime=$(FUZZTIME) ./wire
	$(GO) test -run='^$$' -fuzz=FuzzSegment -fuzztime=$(FUZZTIME) ./partition

loadtest: build ## Push load at a running broker (ARGS='-duration 30s -items 100')
	bin/regina-loadtest $(ARGS)

# golangci-lint, pinned; installed into bin/ on first use (a few minutes of
# compiling once, then cached there).
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := bin/golangci-lint-$(GOLANGCI_LINT_VERSION)

$(GOLANGCI_LINT):
	@mkdir -p bin/.golangci-install
	GOBIN=$(CURDIR)/bin/.golangci-install $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv bin/.golangci-install/golangci-lint $@
	rmdir bin/.golangci-install

# nats-server, pinned, for make compare's JetStream peers (blocks C and S);
# installed into bin/ on first use like golangci-lint (no go.mod dependency:
# the broker never links it). bench/compare's NATSPinnedVersion names the same.
NATS_SERVER_VERSION := v2.15.3
NATS_SERVER := bin/nats-server-$(NATS_SERVER_VERSION)

$(NATS_SERVER):
	@mkdir -p bin/.nats-install
	GOBIN=$(CURDIR)/bin/.nats-install $(GO) install github.com/nats-io/nats-server/v2@$(NATS_SERVER_VERSION)
	mv bin/.nats-install/nats-server $@
	rmdir bin/.nats-install

lint: $(GOLANGCI_LINT) lint/gomod ## Run golangci-lint (pinned, config in .golangci.yaml) and check go.mod is tidy
	$(GOLANGCI_LINT) run ./...

lint/gomod: ## Check that go.mod and go.sum are tidy (go mod tidy -diff)
	@$(GO) mod tidy -diff || { echo 'go.mod or go.sum is not tidy: run go mod tidy' >&2; exit 1; }

db/stop: ## Stop the throwaway PostgreSQL cluster in .data/pg
	$(ENSURE_PG) --stop

clean: ## Remove build output (bin/)
	rm -rf bin/

DURATION ?= 60s

faults: ## Fault injection on real brokers, then a checker (DURATION=60s)
	$(GO) run ./loadtest/faults -duration $(DURATION) $(ARGS)

hostile: ## Hostile clients: connection floods (EMFILE too), ghost long polls, large bodies (RSS) on broker processes, NUL everywhere, wrong or missing key; prints the figures
	@mkdir -p bin
	url=$${TEST_DATABASE_URL:-$$($(ENSURE_PG) $(TEST_DB))} && TEST_DATABASE_URL="$$url" $(GO) test -count=1 -timeout 20m -v \
		-run '^(TestLong_Hostile|TestNULIsABadRequestEverywhere|TestEncryptionFailsClosed|TestEncryptedFingerprintsAreKeyed)' \
		./cmd/regina > bin/hostile.txt 2>&1; st=$$?; \
		grep -E '^(--- |ok|FAIL)|figure:|Error' bin/hostile.txt; exit $$st

faults/citus: ## Fault injection on a local Citus cluster: brokers on the coordinator, workers restarted fast and immediate (DURATION=60s)
	$(GO) run ./loadtest/faults -scenario citus -duration $(DURATION) $(ARGS)

SOAK_PNG ?= bin/soak.png

soak: ## Consumers, retention, restarts; plot to SOAK_PNG (DURATION=30m)
	$(GO) run ./loadtest/faults -scenario soak -duration $(call cmp_var,DURATION,30m) -png $(SOAK_PNG) $(ARGS)

# ---- make compare, make compare/scale (bench/compare) ----
# DURATION, WARMUP, ITEMS, ROUNDS, CONNECTIONS, PARTITIONS, PAYLOAD given on
# the command line (or in the environment) win; otherwise these targets use
# their own defaults, whatever defaults other targets give the same names.
cmp_var = $(if $(filter command line environment environment override override,$(origin $(1))),$($(1)),$(2))
COMPARE_FLAGS = -duration $(call cmp_var,DURATION,20s) -warmup $(call cmp_var,WARMUP,3s) \
	-items $(call cmp_var,ITEMS,10) -connections $(call cmp_var,CONNECTIONS,16) \
	-partitions $(call cmp_var,PARTITIONS,16) -payload $(call cmp_var,PAYLOAD,200)
COMPARE_CMD = $(subst ','"'"',make $@ $(MAKEOVERRIDES))
COMPARE_ARGS ?=
# An upstream Queen server you run (http://HOST:PORT) adds block E to make compare;
# QUEEN_DATABASE names its PostgreSQL database when it is on the local cluster.
QUEEN_URL ?=
QUEEN_DATABASE ?=
SCALE_PARTITIONS ?= 1,1k,100k
SCALE_HASHES ?= 100k,10M,100M
SCALE_POP ?= 100,100k
SCALE_ROUNDS ?= 1
# The dedup window of the hash points' queue (a Go duration); their preload spreads over it.
SCALE_WINDOW ?= 24h
# The drain phase: partitions (each with SCALE_DRAIN_PER messages), or none.
SCALE_DRAIN ?= 5k
SCALE_DRAIN_PER ?= 4
# Run only some scale phases: partitions, hashes, pop, drain (comma-separated; empty = all).
SCALE_ONLY ?=

compare: $(NATS_SERVER) ## Regina vs pgx ceiling vs JetStream (twice) vs River [vs QUEEN_URL]: RESULTS.md
	$(GO) build -o bin/regina-compare ./bench/compare
	url=$$($(ENSURE_PG) regina_compare) && exec bin/regina-compare -database-url "$$url" -nats-server $(NATS_SERVER) $(COMPARE_FLAGS) \
		-rounds $(call cmp_var,ROUNDS,3) -command '$(COMPARE_CMD)' \
		$(if $(QUEEN_URL),-queen-url '$(QUEEN_URL)') $(if $(QUEEN_DATABASE),-queen-database '$(QUEEN_DATABASE)') $(COMPARE_ARGS)

compare/scale: ## Push and pop as partitions and in-window hashes grow, a 5k-partition drain, a restart (SCALE_ONLY=drain: just the drain)
	$(GO) build -o bin/regina-compare ./bench/compare
	url=$$($(ENSURE_PG) regina_compare) && exec bin/regina-compare -scale -database-url "$$url" $(COMPARE_FLAGS) \
		-scale-partitions '$(SCALE_PARTITIONS)' -scale-hashes '$(SCALE_HASHES)' -scale-pop '$(SCALE_POP)' -scale-rounds $(SCALE_ROUNDS) \
		-scale-window '$(SCALE_WINDOW)' -scale-drain '$(SCALE_DRAIN)' -scale-drain-per $(SCALE_DRAIN_PER) $(if $(SCALE_ONLY),-scale-only '$(SCALE_ONLY)') \
		-command '$(COMPARE_CMD)' $(COMPARE_ARGS)
