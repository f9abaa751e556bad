package sqlstore

import (
	"context"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
)

// Observed returns a Store that works like s on a pool of its own whose
// connections are made exactly as s's are (same configuration and runtime
// parameters), then run setup, and hand every server notice to onNotice. It
// lets tests watch what PostgreSQL does with the broker's statements (for
// example with auto_explain). The pool is closed when s's test ends through
// the returned close function.
func (s *Store) Observed(ctx context.Context, setup func(context.Context, *pgx.Conn) error,
	onNotice func(*pgconn.Notice)) (*Store, func(), error) {
	cfg := s.pool.Config()
	cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { onNotice(n) }
	cfg.AfterConnect = setup
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	o := *s
	o.pool = pool
	return &o, pool.Close, nil
}

// SQLFiles is the embedded SQL (migrations/, functions/).
var SQLFiles fs.FS = sqlFiles

// MigrateFS is Migrate with the SQL read from fsys instead of the embedded
// files (laid out the same way).
func MigrateFS(ctx context.Context, pool *pgxpool.Pool, schema string, fsys fs.FS) error {
	return migrate(ctx, pool, schema, fsys, zerolog.Nop())
}

// PopCandidatesSQL is the any-partition pop's candidate query, qualified
// with schema.
func PopCandidatesSQL(schema string) string { return newQueries(schema).popCandidates }

// PretendServerWas makes the store believe the last server it connected to
// had identity id (unless id is empty: the real one stays) and closes its
// connections, so that the next statement connects again and compares
// identities, as after a failover.
func (s *Store) PretendServerWas(id string) {
	if id != "" {
		s.ident.mu.Lock()
		s.ident.last = id
		s.ident.mu.Unlock()
	}
	s.pool.Reset()
}

// DecodeHashArray exposes decodeHashArray to the tests.
var DecodeHashArray = decodeHashArray

// SetCitusReadyTTL sets how long s reuses a group's cache of pop candidates
// on Citus (citusCatchUpEvery by default), so that a test can count what
// pops served from the cache send to the workers without racing the clock.
func (s *Store) SetCitusReadyTTL(d time.Duration) {
	if s.citus != nil {
		s.citus.readyTTL = d
	}
}

// SetAckInGo makes completions go through the reads and rules in Go (two
// round trips) instead of queen.ack_completions, for tests that compare them.
func (s *Store) SetAckInGo(v bool) { s.ackInGo = v }

// ReadSegmentsFrom runs the read of a pop (readSegmentsFrom) outside any
// transaction: the first offsets of the segments it returns, and where the
// next one starts (ok false: none).
func (s *Store) ReadSegmentsFrom(ctx context.Context, pid [16]byte, from int64, limit int) (firsts []int64, next int64, ok bool, err error) {
	segs, next, ok, err := s.readSegmentsFrom(ctx, s.pool, pid, from, limit)
	for _, sg := range segs {
		firsts = append(firsts, sg.first)
	}
	return firsts, next, ok, err
}
