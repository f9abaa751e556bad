package main

// Bounds of the client connections (MAX_CONNECTIONS): by default the
// open-file limit less the database pool and this headroom (log files, the
// pprof listener, DNS, a JWKS fetch), at most defaultMaxConnections.
const (
	fdHeadroom            = 64
	defaultMaxConnections = 10000
	// minAutoConnections is the floor of the derived bound, for a tiny
	// open-file limit (the accept backoff then covers what is left).
	minAutoConnections = 16
)

// maxConnections is the total connection bound the broker applies:
// MAX_CONNECTIONS, or derived from the open-file limit when 0 (nofile is
// RLIMIT_NOFILE's soft limit, 0 when unknown).
func maxConnections(cfg Config, nofile uint64) int {
	if cfg.MaxConnections > 0 {
		return cfg.MaxConnections
	}
	if nofile == 0 {
		return defaultMaxConnections
	}
	n := int64(min(nofile, 1<<31)) - int64(cfg.PoolSize) - fdHeadroom
	return int(max(min(n, defaultMaxConnections), minAutoConnections))
}
