// Package sqlstore is Regina's PostgreSQL layer (pgx/v5): the connection pool
// and the session settings it forces, the embedded migrations (checksummed,
// never changed once applied) and SQL functions (re-applied at every start),
// the push transaction (one round trip per batch through queen.push_segment),
// queue administration and the retention loop.
//
// It returns the broker's vocabulary (package reginatype) and translates
// PostgreSQL errors into reginatype's sentinels at the boundary, so callers
// never see pgx types. It imports only packages partition (the frame codec
// and domain types) and reginatype. All SQL lives here, next to the method that
// runs it; every table name is qualified with the configured schema (default
// "queen"), so tests can run against a schema of their own.
package sqlstore
