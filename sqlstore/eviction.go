package sqlstore

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"
)

// EvictionStats counts what one eviction pass deleted.
type EvictionStats struct {
	Partitions int
	Segments   int64
	Messages   int64
}

// EvictOnce runs one maxWaitTimeSeconds pass: on every partition of a queue
// with maxWaitTimeSeconds > 0 it deletes the messages stored longer ago than
// that, whether consumed or not (Queen's eviction: hard delete, no DLQ),
// with the prefix rule of retention (whole segments, oldest first, so the
// log keeps no hole), then the trace events of what went. Each DELETE
// removes at most batchSize segments and commits on its own; the pass stops
// once it deleted batchSize messages (EVICTION_BATCH_SIZE, as upstream's
// per-cycle bound), the next pass going on.
func (s *Store) EvictOnce(ctx context.Context, batchSize int) (st EvictionStats, err error) {
	if batchSize <= 0 {
		batchSize = 1000
	}
	rows, err := s.pool.Query(ctx, s.sql.evictionTargets)
	if err != nil {
		return st, fmt.Errorf("eviction: list partitions: %w", classify(err))
	}
	var targets []retentionTarget
	for rows.Next() {
		var t retentionTarget
		if err := rows.Scan(&t.id, &t.queue, &t.part, &t.segmentRetentionSe); err != nil {
			rows.Close()
			return st, fmt.Errorf("eviction: list partitions: %w", classify(err))
		}
		targets = append(targets, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("eviction: list partitions: %w", classify(err))
	}
	for _, t := range targets {
		if st.Messages >= int64(batchSize) {
			break
		}
		if err := ctx.Err(); err != nil {
			return st, fmt.Errorf("eviction: %w", err)
		}
		st.Partitions++
		n, msgs, err := s.purgeMessages(ctx, s.sql.purgeSegments, t.id, t.segmentRetentionSe, batchSize)
		st.Segments += n
		st.Messages += msgs
		s.reportPurge(t.queue, PurgeEviction, msgs)
		if err != nil {
			return st, fmt.Errorf("eviction %s/%s: segments: %w", t.queue, t.part, err)
		}
		if n > 0 {
			if _, err := s.sweepTraces(ctx, t.id); err != nil {
				return st, fmt.Errorf("eviction %s/%s: traces: %w", t.queue, t.part, err)
			}
		}
	}
	return st, nil
}

// RunEviction runs EvictOnce every interval until ctx is done. Failures are
// logged and retried at the next tick.
func (s *Store) RunEviction(ctx context.Context, interval time.Duration, batchSize int) {
	runEvery(ctx, interval, func() {
		start := time.Now()
		st, err := s.evictRecovering(ctx, batchSize)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn().Err(err).Msg("eviction pass failed")
			}
			return
		}
		if st.Messages > 0 {
			s.log.Info().Int("partitions", st.Partitions).Int64("messages_evicted", st.Messages).
				Int64("segments_deleted", st.Segments).Dur("took", time.Since(start)).Msg("eviction pass (maxWaitTimeSeconds)")
		}
	})
}

// evictRecovering runs EvictOnce and turns a panic (a bug) into an error.
func (s *Store) evictRecovering(ctx context.Context, batchSize int) (st EvictionStats, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("eviction pass panicked: %v\n%s", v, debug.Stack())
		}
	}()
	return s.EvictOnce(ctx, batchSize)
}
