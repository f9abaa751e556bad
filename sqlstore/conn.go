package sqlstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"
)

// How the store's connections behave when the primary goes away.
//
//   - Every connection must be a read-write session: a URL that does not set
//     target_session_attrs gets target_session_attrs=read-write, so a
//     multi-host URL finds the primary and a standby (or a database set
//     default_transaction_read_only) is refused at connect, answered as
//     ErrUnavailable.
//   - A connection whose statement failed with SQLSTATE 25006
//     (read_only_sql_transaction: the server became read-only under it) is
//     dropped when released, so the next attempt connects again and finds
//     the new primary.
//   - Every new connection reads the server's identity (system identifier
//     and current timeline). When it differs from the one seen before (a
//     standby was promoted, the database was restored), the store's epoch
//     moves on, before the connection is used: what the broker learned from
//     the old server (the dedup cache) must not be trusted on the new one,
//     whose history may lack commits the old one acknowledged.

// dropConnKey marks (in pgconn's CustomData) a connection the pool must
// destroy on release.
const dropConnKey = "regina.drop"

func markDrop(c *pgx.Conn) { c.PgConn().CustomData()[dropConnKey] = true }

// keepConn is the pool's AfterRelease: false destroys the connection.
func keepConn(c *pgx.Conn) bool {
	_, drop := c.PgConn().CustomData()[dropConnKey]
	return !drop
}

// isReadOnly reports SQLSTATE 25006, read_only_sql_transaction.
func isReadOnly(err error) bool {
	pe, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pe.Code == "25006"
}

// readOnlyTracer marks the connections whose statements failed with 25006.
type readOnlyTracer struct{}

func (readOnlyTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (readOnlyTracer) TraceQueryEnd(_ context.Context, c *pgx.Conn, d pgx.TraceQueryEndData) {
	if isReadOnly(d.Err) {
		markDrop(c)
	}
}

func (readOnlyTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (readOnlyTracer) TraceBatchQuery(_ context.Context, c *pgx.Conn, d pgx.TraceBatchQueryData) {
	if isReadOnly(d.Err) {
		markDrop(c)
	}
}

func (readOnlyTracer) TraceBatchEnd(_ context.Context, c *pgx.Conn, d pgx.TraceBatchEndData) {
	if isReadOnly(d.Err) {
		markDrop(c)
	}
}

// identityQuery names the server's history: its system identifier and the
// timeline it writes (the first 8 hex digits of the current WAL file name).
// A standby has no current WAL position: NULL.
const identityQuery = `SELECT CASE WHEN pg_is_in_recovery() THEN NULL ELSE
	(SELECT system_identifier FROM pg_control_system())::text || '/' ||
	substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END`

// identity follows the identity of the servers the pool connects to.
type identity struct {
	log   zerolog.Logger
	epoch atomic.Uint64

	mu     sync.Mutex
	last   string
	warned bool
}

// afterConnect reads a new connection's server identity and moves the epoch
// on when it changed. It never fails the connection: a server whose identity
// cannot be read keeps the epoch (and says so once).
func (id *identity) afterConnect(ctx context.Context, c *pgx.Conn) error {
	var got *string
	err := c.QueryRow(ctx, identityQuery).Scan(&got)
	id.mu.Lock()
	defer id.mu.Unlock()
	if err != nil || got == nil {
		if err != nil && !id.warned {
			id.warned = true
			id.log.Warn().Err(err).Msg("cannot read the database server's identity: a failover will not reset the dedup cache")
		}
		return nil
	}
	switch {
	case id.last == "":
	case id.last != *got:
		e := id.epoch.Add(1)
		id.log.Warn().Str("was", id.last).Str("now", *got).Uint64("epoch", e).
			Msg("the database server changed (a standby was promoted, or the database restored): " +
				"forgetting what was learned from the old one")
	}
	id.last = *got
	return nil
}
