package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/regina-mq/regina/internal/crypt"
	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// sessionSettings are set on every connection of the pool, whatever the
// server's (postgresql.conf, ALTER DATABASE/ROLE) and the URL's settings.
//
//   - jit: PostgreSQL compiles a plan at every execution whose estimated cost
//     crosses jit_above_cost, and once the tables are large the push probe's
//     estimate does: tens of ms (seconds, past jit_optimize_above_cost) of
//     LLVM work per push, for statements that run in microseconds to a few
//     ms. The functions carry SET jit = off too (sqlstore/functions), for
//     callers that are not this pool.
//   - default_transaction_isolation: queen.push_segment relies on READ
//     COMMITTED (each statement after the row lock takes a fresh snapshot);
//     statements that need more ask for it explicitly.
var sessionSettings = map[string]string{
	"jit":                           "off",
	"default_transaction_isolation": "read committed",
}

// Config configures a Store.
type Config struct {
	// URL is the PostgreSQL connection string (URL or key=value form).
	URL string
	// Schema holds Regina's tables; default "queen".
	Schema string
	// MaxConns is the pool size; default 16.
	MaxConns int32
	// StatementTimeout bounds every statement on the broker's connections; 0
	// leaves the server default.
	StatementTimeout time.Duration
	// Logger receives the store's logs.
	Logger zerolog.Logger
	// Key seals the payloads of queues with encryptionEnabled that a
	// transaction pushes, and opens sealed payloads on every read; nil: no
	// key (payloads are stored as sent, sealed ones read as Queen's
	// envelope).
	Key *crypt.Key
	// OnRetention, when set, is called after every retention pass
	// (RetainOnce) with what it deleted, also when it failed part way.
	OnRetention func(RetentionStats, error)
	// OnPurge, when set, is called with the messages retention deleted on
	// a queue, by kind (PurgeRetention, PurgeCompleted, PurgeEviction).
	OnPurge func(queue, kind string, messages int64)
	// SidecarMinSeconds is the floor of the hash sidecar's depth: retention
	// keeps a segment's hashes GREATEST(dedup window,
	// completedRetentionSeconds, SidecarMinSeconds) seconds; 0 means
	// partition.MinSidecarRetentionSeconds (900).
	SidecarMinSeconds int
	// SidecarChildSeconds is the time slice of one child of the hash
	// sidecar (queen.log_txns is partitioned by created_at), at least
	// MinSidecarChildSeconds. 0 (the default) chooses it from the sidecar's
	// depth, SidecarChildSecondsFor(the longest GREATEST(dedup window,
	// completedRetentionSeconds, SidecarMinSeconds) of any queue),
	// re-evaluated at Open, at every retention pass and whenever the store
	// creates children: 300 s for the default one-hour window, an hour for a
	// day-long one. A child is dropped once the sidecar's depth has passed
	// its end, so the sidecar holds up to one slice more than its depth. A
	// width applies to the children created from then on; existing children
	// keep their bounds.
	SidecarChildSeconds int
	// Citus says whether to run on Citus (distributed PostgreSQL,
	// docs/scaling.md): "" or CitusAuto when the database has the citus
	// extension. On Citus, Open distributes the schema (distribute) and the
	// store routes pushes and pops to the worker holding their partition.
	Citus CitusMode
}

// Store is Regina's PostgreSQL state. It is safe for concurrent use.
type Store struct {
	pool   *pgxpool.Pool
	ident  *identity
	schema string
	log    zerolog.Logger
	sql    queries
	onRet  func(RetentionStats, error)
	// onPurge is Config.OnPurge.
	onPurge func(queue, kind string, messages int64)
	key     *crypt.Key
	// warned rate-limits the warnings of seal and reveal.
	warned *cryptWarnings
	// sidecarMin is Config.SidecarMinSeconds (defaulted).
	sidecarMin int
	// sidecar is the hash sidecar's child width (shared by the copies of a
	// Store that tests make).
	sidecar *sidecarWidth
	// citus is set on a Citus database (citus.go); nil on plain PostgreSQL.
	citus *citusState
	// ackInGo applies completions with the reads and rules in Go (two
	// round trips) instead of queen.ack_completions: set by tests that
	// compare the two.
	ackInGo bool
	// queueIDs maps a queue's name to its id as popPrepare last found it
	// (string -> [16]byte), for popFused.
	queueIDs *sync.Map
	// floors are the groups' ready floors (ready_floor.go).
	floors *readyFloors
}

// Open connects, applies migrations and returns a ready Store.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if c := cfg.SidecarChildSeconds; c != 0 && c < MinSidecarChildSeconds {
		return nil, fmt.Errorf("hash sidecar child width %d s: want 0 (chosen from the depth) or at least %d s",
			c, MinSidecarChildSeconds)
	}
	if cfg.Schema == "" {
		cfg.Schema = "queen"
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 16
	}
	pcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	pcfg.MaxConns = cfg.MaxConns
	pcfg.ConnConfig.RuntimeParams["application_name"] = "regina"
	for k, v := range sessionSettings {
		if got, ok := pcfg.ConnConfig.RuntimeParams[k]; ok && got != v {
			cfg.Logger.Warn().Str("setting", k).Str("asked", got).Str("used", v).
				Msg("the database URL sets a PostgreSQL setting that Regina's connections override")
		}
		pcfg.ConnConfig.RuntimeParams[k] = v
	}
	if cfg.StatementTimeout > 0 {
		pcfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(cfg.StatementTimeout.Milliseconds(), 10)
	}
	// See conn.go: read-write sessions only, 25006 drops the connection,
	// a new server identity moves the epoch on.
	if pcfg.ConnConfig.ValidateConnect == nil && !hasTargetSessionAttrs(cfg.URL) {
		pcfg.ConnConfig.ValidateConnect = pgconn.ValidateConnectTargetSessionAttrsReadWrite
	}
	pcfg.ConnConfig.Tracer = readOnlyTracer{}
	pcfg.AfterRelease = keepConn
	ident := &identity{log: cfg.Logger}
	pcfg.AfterConnect = ident.afterConnect
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to %s:%d: %w", pcfg.ConnConfig.Host, pcfg.ConnConfig.Port, err)
	}
	if err := Migrate(ctx, pool, cfg.Schema, cfg.Logger); err != nil {
		pool.Close()
		return nil, err
	}
	onCitus, err := detectCitus(ctx, pool, cfg.Citus)
	if err == nil && onCitus {
		err = distribute(ctx, pool, cfg.Schema, cfg.Logger)
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	if cfg.SidecarMinSeconds <= 0 {
		cfg.SidecarMinSeconds = partition.MinSidecarRetentionSeconds
	}
	s := &Store{pool: pool, ident: ident, schema: cfg.Schema, log: cfg.Logger, sql: newQueries(cfg.Schema),
		onRet: cfg.OnRetention, onPurge: cfg.OnPurge,
		key: cfg.Key, warned: &cryptWarnings{}, sidecarMin: cfg.SidecarMinSeconds, queueIDs: &sync.Map{},
		floors: newReadyFloors(), sidecar: &sidecarWidth{fixed: cfg.SidecarChildSeconds}}
	if onCitus {
		s.citus = newCitusState(cfg.Schema)
		s.sql.citusQueries(cfg.Schema)
		cfg.Logger.Info().Str("schema", cfg.Schema).Msg("running on citus")
	}
	// From one slice back at start (transactions begun before the current
	// slice) and, with the width chosen from the depth, the rest of the
	// last hour in hour-aligned children (rows written by tools for the
	// last minutes, as the hourly children of the old default did). A child
	// already past the horizon is dropped by the first pass.
	backfill := 0
	if cfg.SidecarChildSeconds == 0 {
		backfill = sidecarOpenBehindSeconds
	}
	if err := s.ensureSidecarFrom(ctx, 1, backfill); err != nil {
		pool.Close()
		return nil, err
	}
	// Encryption fails closed: a wrong key, or none while sealed payloads
	// are stored, never serves (see checkKey).
	if err := s.checkKey(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// Close waits for in-use connections to be returned and closes the pool.
func (s *Store) Close() { s.pool.Close() }

// Schema returns the schema holding the store's tables.
func (s *Store) Schema() string { return s.schema }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping: %w", classify(err))
	}
	return nil
}

// PoolStats describes the connection pool.
type PoolStats struct {
	Total, Idle, Acquired, Max int32
	EmptyAcquireCount          int64
}

// PoolStats returns the pool's current figures.
func (s *Store) PoolStats() PoolStats {
	st := s.pool.Stat()
	return PoolStats{Total: st.TotalConns(), Idle: st.IdleConns(), Acquired: st.AcquiredConns(),
		Max: st.MaxConns(), EmptyAcquireCount: st.EmptyAcquireCount()}
}

// classify maps a pgx error to the store's sentinels, wrapping the original.
//
//   - No connection (a connect error, a standby or read-only server refused
//     at connect) or nothing sent: ErrUnavailable.
//   - SQLSTATE 25006 (the server is read-only: a standby, no primary): the
//     statement failed, nothing was written: ErrUnavailable.
//   - A FATAL or PANIC error (the server ended the session: 57P01 admin
//     shutdown, 57P02 crash shutdown...): the statement may have committed
//     (a backend told to stop while waiting for its synchronous standby has
//     committed locally): ErrOutcomeUnknown.
//   - Any other error the server reported is a definite failure of the
//     statement and is returned as is.
//   - A broken connection after the request was sent: ErrOutcomeUnknown.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*pgconn.ConnectError](err); ok {
		return fmt.Errorf("%w: %w", reginatype.ErrUnavailable, err)
	}
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch {
		case pe.Code == "25006":
			return fmt.Errorf("%w (the server is read-only: no primary): %w", reginatype.ErrUnavailable, err)
		case pe.Severity == "FATAL" || pe.Severity == "PANIC":
			return fmt.Errorf("%w: %w", reginatype.ErrOutcomeUnknown, err)
		}
		return err
	}
	if pgconn.SafeToRetry(err) {
		// Nothing reached the server.
		return fmt.Errorf("%w: %w", reginatype.ErrUnavailable, err)
	}
	var netErr net.Error
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) ||
		errors.As(err, &netErr) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "conn closed") {
		// The request may have reached the server: its effect is unknown.
		return fmt.Errorf("%w: %w", reginatype.ErrOutcomeUnknown, err)
	}
	return err // a local error (encoding, scanning): nothing to retry
}

// hasTargetSessionAttrs reports whether the connection string (or the
// environment) chooses target_session_attrs itself.
func hasTargetSessionAttrs(url string) bool {
	return strings.Contains(url, "target_session_attrs") || os.Getenv("PGTARGETSESSIONATTRS") != ""
}

// Epoch numbers the database servers the store has seen: it moves on when a
// new connection finds a server whose identity (system identifier,
// timeline) differs from the previous one's, before that connection runs
// anything else. What was learned under an older epoch (the dedup cache)
// may describe commits the current server never had.
func (s *Store) Epoch() uint64 { return s.ident.epoch.Load() }

// ReadyState is what CheckReady found.
type ReadyState struct {
	// Err says why the database cannot be used (unreachable, read-only);
	// nil when it answered on a read-write session.
	Err error
	// Latency is the check's round trip, connection included.
	Latency time.Duration
	// Schema is the state of the schema's migrations (when Err is nil).
	Schema SchemaState
}

// CheckReady checks, on one connection within ctx, that the database answers
// on a read-write session, and reads the schema's migrations. A connection
// found read-only is dropped.
func (s *Store) CheckReady(ctx context.Context) ReadyState {
	start := time.Now()
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return ReadyState{Err: classify(err), Latency: time.Since(start)}
	}
	defer c.Release()
	var (
		readOnly bool
		versions []int32
		sums     []string
	)
	err = c.QueryRow(ctx, `SELECT current_setting('transaction_read_only') = 'on',
		coalesce(array_agg(version ORDER BY version), '{}'), coalesce(array_agg(coalesce(checksum, '') ORDER BY version), '{}')
		FROM `+pgx.Identifier{s.schema, "schema_migrations"}.Sanitize()).Scan(&readOnly, &versions, &sums)
	st := ReadyState{Latency: time.Since(start)}
	if err != nil {
		st.Err = classify(err)
		return st
	}
	if readOnly {
		markDrop(c.Conn())
		st.Err = fmt.Errorf("%w: the session is read-only (a standby, or default_transaction_read_only): no primary",
			reginatype.ErrUnavailable)
		return st
	}
	applied := make(map[int]string, len(versions))
	for i, v := range versions {
		applied[int(v)] = sums[i]
	}
	st.Schema = schemaState(applied)
	return st
}

var _ = pgx.ErrNoRows
