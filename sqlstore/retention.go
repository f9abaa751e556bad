package sqlstore

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"
)

// RetentionStats counts what one retention pass deleted.
type RetentionStats struct {
	Partitions int
	// LogTxns is the hash sidecar rows dropped, as the statistics estimate
	// them (pg_class.reltuples of the dropped children; counting them would
	// read them), counted for a child never analyzed (a small one).
	LogTxns  int64
	Segments int64
	// Traces counts the trace events of removed messages.
	Traces int64
	// SidecarChildren counts the hash sidecar children dropped.
	SidecarChildren int
}

type retentionTarget struct {
	id                 [16]byte
	queue, part        string
	segmentRetentionSe int
	completedSeconds   int
}

// RetainOnce runs one retention pass. The hash sidecar first: it chooses
// the child width again (see Config.SidecarChildSeconds), creates the
// children the next minutes need and drops, whole, every child whose rows
// are all older than the longest GREATEST(dedup window,
// completedRetentionSeconds, Config.SidecarMinSeconds) of any queue (see
// dropExpiredSidecar). Then, on queues with retention enabled, it deletes
// segments older than retentionSeconds, and segments older than
// completedRetentionSeconds that every consumer group has consumed. Each
// DELETE removes at most batchSize rows and commits on its own, so no lock is
// held for long.
func (s *Store) RetainOnce(ctx context.Context, batchSize int) (st RetentionStats, err error) {
	if s.onRet != nil {
		defer func() { s.onRet(st, err) }()
	}
	if batchSize <= 0 {
		batchSize = 1000
	}
	if err := s.ensureSidecar(ctx); err != nil {
		return st, fmt.Errorf("retention: %w", err)
	}
	st.SidecarChildren, st.LogTxns, err = s.dropExpiredSidecar(ctx)
	if err != nil {
		return st, fmt.Errorf("retention: hash sidecar: %w", err)
	}
	rows, err := s.pool.Query(ctx, s.sql.retentionTargets)
	if err != nil {
		return st, fmt.Errorf("retention: list partitions: %w", classify(err))
	}
	var targets []retentionTarget
	for rows.Next() {
		var t retentionTarget
		if err := rows.Scan(&t.id, &t.queue, &t.part, &t.segmentRetentionSe, &t.completedSeconds); err != nil {
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
		n, err := s.sweepTraces(ctx, t.id)
		st.Traces += n
		if err != nil {
			return st, fmt.Errorf("retention %s/%s: traces: %w", t.queue, t.part, err)
		}
	}
	return st, nil
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
// logged and retried at the next tick. The hash sidecar's children are made
// two intervals ahead from its start on (see sidecarAhead), so that pushes
// between two passes find theirs.
func (s *Store) RunRetention(ctx context.Context, interval time.Duration, batchSize int) {
	s.sidecar.retainEvery.Store(int64((interval + time.Second - 1) / time.Second))
	if interval > sidecarAheadMinSeconds*time.Second/2 {
		// Further ahead than Open made them, now rather than at the first pass.
		if err := s.ensureSidecar(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn().Err(err).Msg("could not create the hash sidecar children of the next retention intervals")
		}
	}
	runEvery(ctx, interval, func() {
		start := time.Now()
		st, err := s.retainRecovering(ctx, batchSize)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn().Err(err).Msg("retention pass failed")
			}
			return
		}
		if st.SidecarChildren > 0 || st.Segments > 0 {
			s.log.Info().Int("partitions", st.Partitions).Int("sidecar_children_dropped", st.SidecarChildren).
				Int64("segments_deleted", st.Segments).Dur("took", time.Since(start)).Msg("retention pass")
		}
	})
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
