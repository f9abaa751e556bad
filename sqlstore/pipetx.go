package sqlstore

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// querier is what a pop's statements need of a transaction (pgx.Tx and
// pipeTx have it).
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// queuedExec is a statement whose result nobody reads, waiting to be sent.
type queuedExec struct {
	sql  string
	args []any
}

// pipeTx is a transaction on one connection that spends fewer round trips
// than pgx.Tx: BEGIN goes with the first statement whose result is read,
// and a statement whose result is not read (Exec: an UPDATE whose error is
// the transaction's) waits for the next statement that is, or for COMMIT.
// The server runs everything in the order it was asked; an error of a
// waiting Exec comes back from the next Query, QueryRow or commit, and the
// transaction is rolled back. Exec's command tag is always empty.
type pipeTx struct {
	conn    *pgxpool.Conn
	begun   bool
	queued  []queuedExec
	pending pgx.BatchResults // the last round trip's, closed before the next
	// before, when set, is a statement run in a transaction of its own
	// (BEGIN, it, COMMIT) ahead of this one's BEGIN, in the same round trip;
	// scan reads its row, and an error from either fails the transaction.
	before *preStatement
}

// preStatement is pipeTx.before.
type preStatement struct {
	sql  string
	args []any
	scan func(pgx.Row) error
}

// Exec queues sql: it goes with the next round trip.
func (t *pipeTx) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	t.queued = append(t.queued, queuedExec{sql, args})
	return pgconn.CommandTag{}, nil
}

// send sends BEGIN (the first time), the queued statements and sql (when
// not empty) in one round trip, and returns the results with the queued
// ones read.
func (t *pipeTx) send(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	return t.sendBatch(ctx, func(b *pgx.Batch) {
		if sql != "" {
			b.Queue(sql, args...)
		}
	})
}

// sendBatch is send with the statements whose results are read queued by
// reads (after BEGIN and the waiting ones, in one round trip).
func (t *pipeTx) sendBatch(ctx context.Context, reads func(*pgx.Batch)) (pgx.BatchResults, error) {
	if err := t.closePending(); err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	n := len(t.queued)
	pre := t.before
	t.before = nil
	if pre != nil && !t.begun {
		b.Queue("BEGIN")
		b.Queue(pre.sql, pre.args...)
		b.Queue("COMMIT")
	} else {
		pre = nil
	}
	if !t.begun {
		b.Queue("BEGIN")
		n++
	}
	for _, q := range t.queued {
		b.Queue(q.sql, q.args...)
	}
	reads(b)
	t.begun = true
	t.queued = t.queued[:0]
	br := t.conn.SendBatch(ctx, b)
	if pre != nil {
		if err := readBefore(br, pre); err != nil {
			_ = br.Close()
			return nil, err
		}
	}
	for range n {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, err
		}
	}
	t.pending = br
	return br, nil
}

// readBefore reads the results of a preStatement's BEGIN, row and COMMIT.
func readBefore(br pgx.BatchResults, pre *preStatement) error {
	if _, err := br.Exec(); err != nil {
		return err
	}
	if err := pre.scan(br.QueryRow()); err != nil {
		return err
	}
	tag, err := br.Exec()
	if err != nil {
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

func (t *pipeTx) closePending() error {
	if t.pending == nil {
		return nil
	}
	err := t.pending.Close()
	t.pending = nil
	return err
}

// Query sends sql (with what waits) and returns its rows.
func (t *pipeTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	br, err := t.send(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	return br.Query()
}

// QueryRow sends sql (with what waits) and returns its row.
func (t *pipeTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	br, err := t.send(ctx, sql, args)
	if err != nil {
		return errRow{err}
	}
	return br.QueryRow()
}

// commit sends what waits with COMMIT.
func (t *pipeTx) commit(ctx context.Context) error {
	if !t.begun && len(t.queued) == 0 {
		return t.closePending()
	}
	br, err := t.send(ctx, "COMMIT", nil)
	if err != nil {
		return err
	}
	tag, err := br.Exec()
	if cerr := t.closePending(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	t.begun = false
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// rollback ends a transaction that failed (the connection goes back to
// the pool outside one; pgxpool closes a connection still in one).
func (t *pipeTx) rollback(ctx context.Context) {
	_ = t.closePending()
	t.queued = t.queued[:0]
	if t.begun {
		_, _ = t.conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		t.begun = false
	}
}

// errRow is a row whose Scan fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// inPipeTx runs f in a pipeTx on a connection of the pool and commits.
func (s *Store) inPipeTx(ctx context.Context, f func(*pipeTx) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	t := &pipeTx{conn: conn}
	if err := f(t); err != nil {
		t.rollback(ctx)
		return err
	}
	if err := t.commit(ctx); err != nil {
		t.rollback(ctx)
		return err
	}
	return nil
}
