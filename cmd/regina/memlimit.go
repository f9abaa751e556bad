package main

import (
	"fmt"
	"runtime/debug"

	"github.com/rs/zerolog"
)

// memoryOverheadMB is the memory the broker needs besides its dedup cache
// budget: the Go runtime, the actors and their goroutines, the HTTP
// connections and the request bodies in flight, the connection pool. It is
// measured, not guessed (bench/RESULTS.md, "Memory as configured"): broker
// RSS stayed within the cache budget plus this under the loadtest shapes
// recorded there, with the limit below in force.
const memoryOverheadMB = 128

// memoryLimit is the Go memory limit (runtime/debug.SetMemoryLimit) the
// broker applies, in bytes, and where it comes from. When the user set
// GOMEMLIMIT (userSet) the runtime already applies it and memoryLimit returns
// 0. MEMORY_LIMIT_MB, when > 0, is the limit; else the limit is the dedup
// cache's budget (when the cache is on) plus memoryOverheadMB.
func memoryLimit(cfg Config, userSet bool) (limit int64, why string) {
	switch {
	case userSet:
		return 0, "GOMEMLIMIT"
	case cfg.MemoryLimitMB > 0:
		return int64(cfg.MemoryLimitMB) << 20, "MEMORY_LIMIT_MB"
	}
	budget := int64(0)
	if cfg.DedupCache {
		budget = cfg.cacheBudget()
	}
	return budget + memoryOverheadMB<<20, fmt.Sprintf("dedup cache budget %d MiB + %d MiB overhead",
		budget>>20, memoryOverheadMB)
}

// applyMemoryLimit sets the process's Go memory limit (see memoryLimit) and
// says so. The limit is soft: the garbage collector works harder as the heap
// nears it instead of letting the heap double (GOGC), so RSS stays near the
// cache budget plus the overhead; a live heap above it is never refused.
func applyMemoryLimit(cfg Config, log zerolog.Logger, userSet bool) {
	limit, why := memoryLimit(cfg, userSet)
	if limit > 0 {
		debug.SetMemoryLimit(limit)
	} else {
		limit = debug.SetMemoryLimit(-1) // read it
	}
	ev := log.Info().Str("from", why)
	if limit == mathMaxInt64 {
		ev.Msg("memory limit: none (GOMEMLIMIT=off); RSS may reach twice the live heap")
		return
	}
	ev.Int64("limitMiB", limit>>20).Msg("memory limit (Go GOMEMLIMIT); set MEMORY_LIMIT_MB or GOMEMLIMIT to change it")
}

const mathMaxInt64 = 1<<63 - 1
