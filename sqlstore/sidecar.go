package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The hash sidecar (queen.log_txns) is partitioned by RANGE (created_at)
// (migration 0011): one child per time slice, created ahead of the clock by
// sidecar_ensure (sqlstore/functions/sidecar.sql) and detached and dropped
// whole by retention once every window it could serve has passed.
const (
	// MinSidecarChildSeconds is the narrowest child Config.SidecarChildSeconds
	// may ask for: queen.sidecar_ensure refuses a slice under a minute.
	MinSidecarChildSeconds = 60
	// MaxSidecarChildrenPerWindow bounds the children a full-window probe
	// reads: SidecarChildSecondsFor picks the narrowest slice that keeps the
	// sidecar's depth within this many children.
	MaxSidecarChildrenPerWindow = 24
	// sidecarAheadMinSeconds and sidecarAheadSlices: how far past the clock
	// children exist after every start (Open) and retention pass, at least
	// 15 minutes and three slices, and two retention intervals up to
	// MaxSidecarChildrenPerWindow slices (see sidecarAhead), so a push does
	// not wait for a child between two passes (and if one does, see
	// retryMissingSidecarChild).
	sidecarAheadMinSeconds = 15 * 60
	sidecarAheadSlices     = 3
	// sidecarOpenBehindSeconds: how far back children exist after Open when
	// the width is chosen from the depth, for rows tools write for the
	// recent past (see queen.sidecar_ensure). What lies before the previous
	// slice is filled with children of this width (aligned to the hour),
	// not with narrow ones: nothing is pushed there, and a narrow slice
	// would make every start create a dozen tables.
	sidecarOpenBehindSeconds = 3600
)

// sidecarChildWidths are the slices SidecarChildSecondsFor chooses from:
// each divides a day, so children stay aligned to the clock's hours.
var sidecarChildWidths = [...]int{300, 600, 900, 1200, 1800, 3600, 7200, 10800, 14400, 21600, 43200, 86400}

// SidecarChildSecondsFor is the time slice of a hash sidecar child for a
// sidecar depth (the longest window any queue needs, in seconds): the
// narrowest of 5, 10, 15, 20, 30 minutes, 1, 2, 3, 4, 6, 12 and 24 hours
// that keeps the depth within MaxSidecarChildrenPerWindow children. A narrow
// child keeps the index that pushes write small (its GIN index holds only
// the hashes of one slice, so its pages stay in shared buffers), and bounds
// what retention holds beyond the depth to one slice; the bound on children
// keeps the full-window probe, which reads every child inside the window,
// short. Depth 3600 (the default window): 300 s, 12 children. 86400: 3600 s.
func SidecarChildSecondsFor(depthSeconds int) int {
	for _, w := range sidecarChildWidths {
		if (depthSeconds+w-1)/w <= MaxSidecarChildrenPerWindow {
			return w
		}
	}
	return sidecarChildWidths[len(sidecarChildWidths)-1]
}

// sidecarWidth is the hash sidecar's child width: fixed by configuration,
// or chosen from the sidecar's depth each time children are created (the
// depth follows the queues' windows, which change while pushes run).
type sidecarWidth struct {
	// fixed is Config.SidecarChildSeconds; 0: chosen from the depth.
	fixed int
	// seconds is the width chosen last (0 before the first choice), so that
	// a change is logged once.
	seconds atomic.Int64
	// retainEvery is RunRetention's interval in seconds (0 before it runs).
	retainEvery atomic.Int64
}

// sidecarAhead is how far past the clock, in seconds, children of w
// seconds are made: 15 minutes, three slices, or, when that is further,
// two retention intervals (so that the next pass comes before the clock
// reaches the end, even when it runs late), the last bounded by
// MaxSidecarChildrenPerWindow slices of empty children. Beyond that bound
// (a pass every few hours with narrow children) a push that finds no child
// makes them (retryMissingSidecarChild).
func (sw *sidecarWidth) sidecarAhead(w int) int {
	passes := min(2*int(sw.retainEvery.Load()), MaxSidecarChildrenPerWindow*w)
	return max(sidecarAheadMinSeconds, sidecarAheadSlices*w, passes)
}

// ensureSidecarSQL creates the children of [now - $1 s, now + $2 s) of $3 s
// each, where missing.
const ensureSidecarSQL = `SELECT queen.sidecar_ensure(now() - make_interval(secs => $1),
	now() + make_interval(secs => $2), make_interval(secs => $3))`

// ensureSidecar makes sure the hash sidecar has children from the current
// slice to well ahead of it. (Not behind: with a horizon shorter than a
// slice, the previous child may already be expired, and each pass would
// create what the same pass drops.)
func (s *Store) ensureSidecar(ctx context.Context) error {
	return s.ensureSidecarFrom(ctx, 0, 0)
}

// ensureSidecarFrom is ensureSidecar from behindSlices slices before now,
// and, when backfill > 0, fills what [now - backfill s, now) still lacks
// with children of backfill seconds. It chooses the width first
// (sidecarChildSeconds). New children take it; sidecar_ensure clips them
// where existing children begin and leaves the existing ones as they are,
// so a change of width leaves neither a gap nor an overlap.
func (s *Store) ensureSidecarFrom(ctx context.Context, behindSlices, backfill int) error {
	w, err := s.sidecarChildSeconds(ctx)
	if err != nil {
		return err
	}
	var n, filled int
	ahead := s.sidecar.sidecarAhead(w)
	if err := s.pool.QueryRow(ctx, s.sql.ensureSidecar, behindSlices*w, ahead, w).Scan(&n); err != nil {
		return fmt.Errorf("create hash sidecar children: %w", classify(err))
	}
	if backfill > behindSlices*w {
		if err := s.pool.QueryRow(ctx, s.sql.ensureSidecar, backfill, 0, backfill).Scan(&filled); err != nil {
			return fmt.Errorf("create hash sidecar children for the last %d s: %w", backfill, classify(err))
		}
		n += filled
	}
	if n > 0 {
		s.log.Debug().Int("children", n).Int("child_seconds", w).Msg("hash sidecar children created")
	}
	return nil
}

// sidecarChildSeconds is the width of the hash sidecar children created
// now: Config.SidecarChildSeconds when set, else SidecarChildSecondsFor the
// sidecar's depth as retention computes it (sidecarHorizonSQL). A width
// other than the last one chosen is logged (info: it happens when a queue's
// window or completed retention moves the depth across a step).
func (s *Store) sidecarChildSeconds(ctx context.Context) (int, error) {
	w, depth := s.sidecar.fixed, 0
	if w == 0 {
		if err := s.pool.QueryRow(ctx, s.sql.sidecarHorizon, s.sidecarMin).Scan(&depth); err != nil {
			return 0, fmt.Errorf("hash sidecar depth: %w", classify(err))
		}
		w = SidecarChildSecondsFor(depth)
	}
	if was := s.sidecar.seconds.Swap(int64(w)); was != int64(w) {
		ev := s.log.Info().Int("child_seconds", w).Bool("fixed", s.sidecar.fixed != 0)
		if s.sidecar.fixed == 0 {
			ev = ev.Int("depth_seconds", depth)
		}
		if was != 0 {
			ev = ev.Int64("was_seconds", was)
		}
		ev.Msg("hash sidecar child width")
	}
	return w, nil
}

// isMissingSidecarChild reports whether err is PostgreSQL's refusal of a row
// no child of a partitioned table covers ("no partition of relation ...
// found for row", SQLSTATE 23514): the statement wrote nothing.
func isMissingSidecarChild(err error) bool {
	pe, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pe.Code == "23514" && strings.Contains(pe.Message, "no partition of relation")
}

// retryMissingSidecarChild runs do and, when it failed only because no child
// of the sidecar covered its row (the clock ran past the children made
// ahead, or they were never made), creates the children and runs it once
// more. do must be one statement or transaction that wrote nothing when it
// failed.
func (s *Store) retryMissingSidecarChild(ctx context.Context, do func() error) error {
	err := do()
	if !isMissingSidecarChild(err) {
		return err
	}
	// From one slice back: the failed row's time is its transaction's
	// start, which may lie before the current slice.
	if eerr := s.ensureSidecarFrom(ctx, 1, 0); eerr != nil {
		return fmt.Errorf("%w (after: %w)", eerr, err)
	}
	s.log.Warn().Msg("a push found no hash sidecar child for its time: children created")
	return do()
}

// sidecarHorizonSQL is the depth retention keeps: the longest of every
// queue's GREATEST(dedup window, completedRetentionSeconds) and the floor $1.
// Each queue's probe bounds itself by its own window, so keeping rows longer
// than a queue needs changes no verdict.
const sidecarHorizonSQL = `SELECT GREATEST(coalesce(max(GREATEST(q.dedup_window_seconds, q.completed_retention_seconds)), 0),
	$1::integer) FROM queen.queues q`

// expiredSidecarSQL lists the children whose every row is older than the
// horizon ($1 s), with their estimated rows, and tables a dropped child left
// behind (detached, not yet dropped: detached is true).
const expiredSidecarSQL = `SELECT c.child, c.detach_pending, false, c.est_rows
	  FROM queen.sidecar_children() c
	 WHERE c.hi <= now() - make_interval(secs => $1)
	UNION ALL
	SELECT r.relname::text, false, true, GREATEST(r.reltuples, 0)::bigint
	  FROM pg_class r
	 WHERE r.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'queen.log_txns'::regclass)
	   AND r.relkind = 'r' AND NOT r.relispartition
	   AND r.relname ~ '^log_txns_([0-9]{8}_[0-9]{6}|legacy)$'`

// dropExpiredSidecar detaches (DETACH PARTITION ... CONCURRENTLY: pushes,
// probes and acks go on) and drops every child of the sidecar whose whole
// range lies before the horizon: a constant-time step per child, whatever it
// holds, and no dead rows left for VACUUM. A detach a previous pass left
// pending is finished (FINALIZE), a detached table left undropped is dropped.
// One broker at a time (a session advisory lock). It returns the children
// dropped and their rows as the statistics estimate them (pg_class.reltuples;
// counted when a child was never analyzed).
func (s *Store) dropExpiredSidecar(ctx context.Context) (children int, rows int64, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, 0, classify(err)
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, s.sql.sidecarDropLock).Scan(&locked); err != nil {
		return 0, 0, classify(err)
	}
	if !locked {
		return 0, 0, nil
	}
	defer func() {
		if _, err := conn.Exec(context.Background(), s.sql.sidecarDropUnlock); err != nil {
			_ = conn.Conn().Close(context.Background()) // the session (and its lock) goes
		}
	}()
	var horizon int
	if err := conn.QueryRow(ctx, s.sql.sidecarHorizon, s.sidecarMin).Scan(&horizon); err != nil {
		return 0, 0, classify(err)
	}
	type expired struct {
		name              string
		pending, detached bool
		rows              int64
	}
	list, err := conn.Query(ctx, s.sql.expiredSidecar, horizon)
	if err != nil {
		return 0, 0, classify(err)
	}
	all, err := pgx.CollectRows(list, func(r pgx.CollectableRow) (expired, error) {
		var e expired
		err := r.Scan(&e.name, &e.pending, &e.detached, &e.rows)
		return e, err
	})
	if err != nil {
		return 0, 0, classify(err)
	}
	parent := pgx.Identifier{s.schema, "log_txns"}.Sanitize()
	for _, e := range all {
		start := time.Now()
		child := pgx.Identifier{s.schema, e.name}.Sanitize()
		if e.rows < 0 && !e.detached {
			// Never analyzed: autovacuum analyzes a child after its first
			// 50 rows, so this one is small (or autovacuum is off). Count.
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+child).Scan(&e.rows); err != nil {
				return children, rows, fmt.Errorf("count %s: %w", e.name, classify(err))
			}
		}
		switch {
		case e.detached:
		case s.citus != nil:
			// Citus has no DETACH ... CONCURRENTLY: the child is dropped
			// as it is (DROP takes ACCESS EXCLUSIVE on log_txns for the
			// moment of the drop on every node; docs/scaling.md).
		case e.pending:
			if _, err := conn.Exec(ctx, "ALTER TABLE "+parent+" DETACH PARTITION "+child+" FINALIZE"); err != nil {
				return children, rows, fmt.Errorf("finish detaching %s: %w", e.name, classify(err))
			}
		default:
			if _, err := conn.Exec(ctx, "ALTER TABLE "+parent+" DETACH PARTITION "+child+" CONCURRENTLY"); err != nil {
				return children, rows, fmt.Errorf("detach %s: %w", e.name, classify(err))
			}
		}
		if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+child); err != nil {
			return children, rows, fmt.Errorf("drop %s: %w", e.name, classify(err))
		}
		children++
		rows += e.rows
		s.log.Info().Str("child", e.name).Int64("rows_estimated", e.rows).Int("horizon_seconds", horizon).
			Dur("took", time.Since(start)).Msg("hash sidecar child dropped")
	}
	return children, rows, nil
}
