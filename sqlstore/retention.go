package sqlstore

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5"
)

// RetentionStats counts what one retention pass deleted.
type RetentionStats struct {
	Partitions int
	LogTxns    int64
	Segments   int64
	// Traces counts the trace events of removed messages.
	Traces int64
	// SidecarReindexed is true when the pass rebuilt the hash sidecar's GIN
	// index (see compactSidecarIndex).
	SidecarReindexed bool
}

type retentionTarget struct {
	id                 [16]byte
	queue, part        string
	sidecarSeconds     int
	segmentRetentionSe int
	completedSeconds   int
}

// RetainOnce runs one retention pass over every partition: it deletes
// queen.log_txns rows older than GREATEST(dedup window,
// completedRetentionSeconds, Config.SidecarMinSeconds) seconds, and, on queues with retention
// enabled, segments older than retentionSeconds, and segments older than
// completedRetentionSeconds that every consumer group has consumed. Each DELETE removes at most
// batchSize rows and commits on its own, so no lock is held for long.
func (s *Store) RetainOnce(ctx context.Context, batchSize int) (st RetentionStats, err error) {
	if s.onRet != nil {
		defer func() { s.onRet(st, err) }()
	}
	if batchSize <= 0 {
		batchSize = 1000
	}
	rows, err := s.pool.Query(ctx, s.sql.retentionTargets, s.sidecarMin)
	if err != nil {
		return st, fmt.Errorf("retention: list partitions: %w", classify(err))
	}
	var targets []retentionTarget
	for rows.Next() {
		var t retentionTarget
		if err := rows.Scan(&t.id, &t.queue, &t.part, &t.sidecarSeconds, &t.segmentRetentionSe, &t.completedSeconds); err != nil {
			rows.Close()
			return st, fmt.Errorf("retention: list partitions: %w", classify(err))
		}
		targets = append(targets, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("retention: list partitions: %w", classify(err))
	}
	for _, t := range targets {
		st.Partitions++
		n, err := s.purge(ctx, s.sql.purgeLogTxns, t.id, t.sidecarSeconds, batchSize)
		st.LogTxns += n
		if err != nil {
			return st, fmt.Errorf("retention %s/%s: log_txns: %w", t.queue, t.part, err)
		}
		if t.segmentRetentionSe > 0 {
			n, msgs, err := s.purgeMessages(ctx, s.sql.purgeSegments, t.id, t.segmentRetentionSe, batchSize)
			st.Segments += n
			s.reportPurge(t.queue, PurgeRetention, msgs)
			if err != nil {
				return st, fmt.Errorf("retention %s/%s: segments: %w", t.queue, t.part, err)
			}
		}
		if t.completedSeconds > 0 {
			n, msgs, err := s.purgeMessages(ctx, s.sql.purgeConsumed, t.id, t.completedSeconds, batchSize)
			st.Segments += n
			s.reportPurge(t.queue, PurgeCompleted, msgs)
			if err != nil {
				return st, fmt.Errorf("retention %s/%s: consumed segments: %w", t.queue, t.part, err)
			}
		}
		if t.segmentRetentionSe > 0 || t.completedSeconds > 0 {
			n, err := s.sweepTraces(ctx, t.id)
			st.Traces += n
			if err != nil {
				return st, fmt.Errorf("retention %s/%s: traces: %w", t.queue, t.part, err)
			}
		}
	}
	reindexed, err := s.compactSidecarIndex(ctx)
	st.SidecarReindexed = reindexed
	if err != nil {
		return st, fmt.Errorf("retention: sidecar index: %w", err)
	}
	return st, nil
}

// Bounds of the sidecar index rebuild: the GIN index of log_txns is rebuilt
// once it is larger than sidecarReindexMinBytes and sidecarReindexRatio
// times its table (heap and TOAST). A fresh index is about 2.5 times its
// table.
const (
	sidecarReindexMinBytes = 16 << 20
	sidecarReindexRatio    = 4
)

// compactSidecarIndex rebuilds queen.log_txns_hashes (REINDEX INDEX
// CONCURRENTLY: pushes, probes and acks go on) when it has outgrown its
// table. Every hash is a key of its own in the GIN entry tree, and
// PostgreSQL never removes entry-tree keys, even once VACUUM has emptied
// their posting lists: with a window of any length the index grows with
// every hash ever pushed (a soak measured it), while the table stays the
// size of the window. One broker at a time rebuilds (a session advisory
// lock); an invalid index a cancelled rebuild left behind is dropped first.
func (s *Store) compactSidecarIndex(ctx context.Context) (bool, error) {
	minBytes := s.sidecarReindexMin
	if minBytes <= 0 {
		minBytes = sidecarReindexMinBytes
	}
	var idx, tbl int64
	if err := s.pool.QueryRow(ctx, s.sql.sidecarSizes).Scan(&idx, &tbl); err != nil {
		return false, classify(err)
	}
	if idx < minBytes || idx < sidecarReindexRatio*tbl {
		return false, nil
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, classify(err)
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, s.sql.sidecarReindexLock).Scan(&locked); err != nil {
		return false, classify(err)
	}
	if !locked {
		return false, nil
	}
	defer func() {
		if _, err := conn.Exec(context.Background(), s.sql.sidecarReindexUnlock); err != nil {
			_ = conn.Conn().Close(context.Background()) // the session (and its lock) goes
		}
	}()
	start := time.Now()
	// The rebuild reads the whole table: no statement timeout for it (RESET
	// afterwards returns to the connection's own).
	if _, err := conn.Exec(ctx, "SET statement_timeout = 0"); err != nil {
		return false, classify(err)
	}
	defer conn.Exec(context.Background(), "RESET statement_timeout") //nolint:errcheck // a broken session is dropped by the pool
	var leftovers []string
	rows, err := conn.Query(ctx, s.sql.sidecarInvalidIndexes)
	if err != nil {
		return false, classify(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return false, classify(err)
		}
		leftovers = append(leftovers, name)
	}
	rows.Close()
	for _, name := range leftovers {
		if _, err := conn.Exec(ctx, "DROP INDEX CONCURRENTLY IF EXISTS "+pgx.Identifier{s.schema, name}.Sanitize()); err != nil {
			return false, classify(err)
		}
	}
	if _, err := conn.Exec(ctx, s.sql.sidecarReindex); err != nil {
		return false, classify(err)
	}
	var after int64
	if err := conn.QueryRow(ctx, s.sql.sidecarSizes).Scan(&after, &tbl); err != nil {
		return true, classify(err)
	}
	s.log.Info().Int64("index_bytes_before", idx).Int64("index_bytes_after", after).Int64("table_bytes", tbl).
		Dur("took", time.Since(start)).Msg("hash sidecar index rebuilt")
	return true, nil
}

func (s *Store) purge(ctx context.Context, sql string, id [16]byte, seconds, batchSize int) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, sql, id, seconds, batchSize)
		if err != nil {
			return total, classify(err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batchSize) || ctx.Err() != nil {
			return total, nil //nolint:nilerr // a cancelled pass stops early: what it deleted is its result
		}
	}
}

// The kinds of deletion OnPurge reports.
const (
	// PurgeRetention: segments older than retentionSeconds.
	PurgeRetention = "retention"
	// PurgeCompleted: consumed segments older than completedRetentionSeconds.
	PurgeCompleted = "completed"
	// PurgeEviction: messages older than maxWaitTimeSeconds.
	PurgeEviction = "eviction"
)

func (s *Store) reportPurge(queue, kind string, messages int64) {
	if s.onPurge != nil && messages > 0 {
		s.onPurge(queue, kind, messages)
	}
}

// purgeMessages runs a segment DELETE (aliased s) like purge and also
// counts the messages the deleted segments held.
func (s *Store) purgeMessages(ctx context.Context, sql string, id [16]byte, seconds, batchSize int) (
	segments, messages int64, err error) {
	counted := "WITH d AS (" + sql + " RETURNING s.frame_count) SELECT count(*), coalesce(sum(d.frame_count), 0)::bigint FROM d"
	for {
		var n, m int64
		if err := s.pool.QueryRow(ctx, counted, id, seconds, batchSize).Scan(&n, &m); err != nil {
			return segments, messages, classify(err)
		}
		segments += n
		messages += m
		if n < int64(batchSize) || ctx.Err() != nil {
			return segments, messages, nil //nolint:nilerr // a cancelled pass stops early: what it deleted is its result
		}
	}
}

// RunRetention runs RetainOnce every interval until ctx is done. Failures are
// logged and retried at the next tick.
func (s *Store) RunRetention(ctx context.Context, interval time.Duration, batchSize int) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		st, err := s.retainRecovering(ctx, batchSize)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn().Err(err).Msg("retention pass failed")
			}
			continue
		}
		if st.LogTxns > 0 || st.Segments > 0 {
			s.log.Info().Int("partitions", st.Partitions).Int64("log_txns_deleted", st.LogTxns).
				Int64("segments_deleted", st.Segments).Dur("took", time.Since(start)).Msg("retention pass")
		}
	}
}

// retainRecovering runs RetainOnce and turns a panic (a bug) into an error,
// so the loop (and the broker) survive to the next tick.
func (s *Store) retainRecovering(ctx context.Context, batchSize int) (st RetentionStats, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("retention pass panicked: %v\n%s", v, debug.Stack())
		}
	}()
	return s.RetainOnce(ctx, batchSize)
}
