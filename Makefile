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

.PHONY: help build run test test/race bench fuzz loadtest lint db/stop clean

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
