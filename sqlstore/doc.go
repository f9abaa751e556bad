// Package sqlstore is Regina's PostgreSQL layer (pgx/v5): the connection pool,
// the embedded migrations, the push transaction (one round trip per batch
// through queen.push_segment), queue administration and the retention loop.
//
// It translates PostgreSQL errors into its own sentinels at the boundary, so
// callers never see pgx types. It imports only package partition (for the
// frame codec and domain types). All SQL lives here, next to the method that
// runs it; every table name is qualified with the configured schema (default
// "queen"), so tests can run against a schema of their own.
package sqlstore
