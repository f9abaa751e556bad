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

.PHONY: help build run test test/race bench fuzz loadtest lint db/stop clean faults compare compare/scale

help: ## Show this list of targets
	@echo 'Usage: make TARGET [VAR=value ...]'
	@echo
	@awk 'BEGIN {FS = ":[^#]*## "} /^[a-zA-Z0-9_\/.-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo
	@echo 'Variables: ARGS (for run), GOTESTFLAGS (e.g. -race, -run X, -v), ITERATIONS (bench, default 1x),'
	@echo '           FUZZTIME (fuzz, default 30s), DATABASE_URL (use this server instead of a local one).'

build: ## Build the broker into bin/regina and the load generator into bin/regina-loadtest
	$(GO) build -o bin/regina ./cmd/regina
	$(GO) build -o bin/regina-loadtest ./loadtest

run: build ## Build and run the broker against a local PostgreSQL (ARGS=... passes flags)
	url=$$($(ENSURE_PG)) && DATABASE_URL="$$url" exec bin/regina $(ARGS)

test: ## Run all tests against a local PostgreSQL (GOTESTFLAGS=... adds flags)
	url=$$($(ENSURE_PG) regina_test) && TEST_DATABASE_URL="$$url" $(GO) test -count=1 -timeout 15m $(GOTESTFLAGS) ./...

test/race: ## Run all tests with the race detector
	url=$$($(ENSURE_PG) regina_test) && TEST_DATABASE_URL="$$url" $(GO) test -race -count=1 -timeout 15m $(GOTESTFLAGS) ./...

bench: ## Run the benchmarks in ./bench (ITERATIONS=1x by default)
	url=$$($(ENSURE_PG) regina_test) && TEST_DATABASE_URL="$$url" $(GO) test -run='^$$' -bench=. -benchtime=$(ITERATIONS) $(GOTESTFLAGS) ./bench/...

fuzz: ## Fuzz the wire decoder and the partition segments (FUZZTIME=30s each)
	$(GO) test -run='^$$' -fuzz=FuzzDecodePush -fuzztime=$(FUZZTIME) ./wire
	$(GO) test -run='^$$' -fuzz=FuzzDecodeConfigure -fuzztime=$(FUZZTIME) ./wire
	$(GO) test -run='^$$' -fuzz=FuzzDecodeTransaction -fuzztime=$(FUZZTIME) ./wire
	$(GO) test -run='^$$' -fuzz=FuzzDecodeAcks -fuzztime=$(FUZZTIME) ./wire
	$(GO) test -run='^$$' -fuzz=FuzzSegment -fuzztime=$(FUZZTIME) ./partition

loadtest: build ## Drive a running broker over HTTP (ARGS=... e.g. ARGS='-duration 30s -items 100')
	bin/regina-loadtest $(ARGS)

lint: ## Run go vet and check gofmt
	$(GO) vet ./...
	@files=$$(find . \( -path ./.data -o -path ./.git -o -path ./bin \) -prune -o -name '*.go' -print); \
	if [[ -n "$$files" ]]; then \
		unformatted=$$(gofmt -l $$files); \
		if [[ -n "$$unformatted" ]]; then \
			echo "gofmt: these files need formatting (run gofmt -w on them):"; \
			echo "$$unformatted"; \
			exit 1; \
		fi; \
	fi

db/stop: ## Stop the throwaway PostgreSQL cluster in .data/pg (if running)
	$(ENSURE_PG) --stop

clean: ## Remove build output (bin/)
	rm -rf bin/

DURATION ?= 60s

faults: ## Fault-injection run: own PostgreSQL, real brokers, kills/restarts, then a checker (DURATION=60s)
	$(GO) run ./loadtest/faults -duration $(DURATION) $(ARGS)

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
SCALE_PARTITIONS ?= 1,16,1000,10000
SCALE_HASHES ?= 100k,1M,10M
SCALE_ROUNDS ?= 1

compare: ## Regina vs raw PostgreSQL vs NATS JetStream -> bench/RESULTS.md (DURATION=20s WARMUP=3s ITEMS=10 ROUNDS=3)
	$(GO) build -o bin/regina-compare ./bench/compare
	url=$$($(ENSURE_PG) regina_compare) && exec bin/regina-compare -database-url "$$url" $(COMPARE_FLAGS) \
		-rounds $(call cmp_var,ROUNDS,3) -command '$(COMPARE_CMD)' $(COMPARE_ARGS)

compare/scale: ## Throughput and p99 as partitions and in-window hashes grow (SCALE_PARTITIONS, SCALE_HASHES; takes minutes)
	$(GO) build -o bin/regina-compare ./bench/compare
	url=$$($(ENSURE_PG) regina_compare) && exec bin/regina-compare -scale -database-url "$$url" $(COMPARE_FLAGS) \
		-scale-partitions '$(SCALE_PARTITIONS)' -scale-hashes '$(SCALE_HASHES)' -scale-rounds $(SCALE_ROUNDS) \
		-command '$(COMPARE_CMD)' $(COMPARE_ARGS)
