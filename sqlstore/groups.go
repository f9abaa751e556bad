package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// ListDLQ returns dead letters, newest failure first, and the total matching.
func (s *Store) ListDLQ(ctx context.Context, f reginatype.DLQFilter) ([]reginatype.DeadLetter, int64, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	var from, to *time.Time
	if !f.From.IsZero() {
		from = &f.From
	}
	if !f.To.IsZero() {
		to = &f.To
	}
	args := []any{nullIfEmpty(f.Queue), nullIfEmpty(f.Group), nullIfEmpty(f.Partition), from, to}
	var total int64
	if err := s.pool.QueryRow(ctx, s.sql.countDLQ, args...).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("count dlq: %w", classify(err))
	}
	rows, err := s.pool.Query(ctx, s.sql.listDLQ, append(args, f.Limit, f.Offset)...)
	if err != nil {
		return nil, 0, fmt.Errorf("list dlq: %w", classify(err))
	}
	defer rows.Close()
	var out []reginatype.DeadLetter
	for rows.Next() {
		var d reginatype.DeadLetter
		var trace *[16]byte
		var sub *string
		if err := rows.Scan((*uuidScanner)(&d.MessageID), &d.TransactionID, &trace, (*uuidScanner)(&d.PartitionID),
			&d.Queue, &d.Partition, &d.Group, &d.ErrorMessage, &d.RetryCount, &d.Payload, &sub, &d.CreatedAt, &d.FailedAt); err != nil {
			return nil, 0, fmt.Errorf("list dlq: %w", classify(err))
		}
		if trace != nil {
			u := partition.UUID(*trace)
			d.TraceID = &u
		}
		if sub != nil {
			d.ProducerSub = *sub
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("list dlq: %w", classify(err))
	}
	return out, total, nil
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// DeleteConsumerGroup removes a group's cursors (on every queue, or on one
// queue when queue is not empty) and, with deleteMetadata, its subscription
// start points. It returns how many partition cursors were removed.
func (s *Store) DeleteConsumerGroup(ctx context.Context, group, queue string, deleteMetadata bool) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, s.sql.deleteGroupCursors, group, nullIfEmpty(queue))
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		if deleteMetadata {
			_, err = tx.Exec(ctx, s.sql.deleteGroupMeta, group, nullIfEmpty(queue))
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("delete consumer group %s: %w", group, classify(err))
	}
	return n, nil
}

// Seek moves a group's cursors on a queue (one partition when partName is
// not empty): to the end when at is zero, else to the first message created
// after at. Live leases of the group there are dropped. It returns the
// number of partitions moved; ok=false when the queue (or partition) does
// not exist.
func (s *Store) Seek(ctx context.Context, group, queue, partName string, at time.Time) (int64, bool, error) {
	var ts *time.Time
	if !at.IsZero() {
		ts = &at
	}
	var exists bool
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, s.sql.seekTargetsExist, queue, nullIfEmpty(partName)).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return nil
		}
		tag, err := tx.Exec(ctx, s.sql.seek, queue, nullIfEmpty(partName), group, ts)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("seek %s on %s: %w", group, queue, classify(err))
	}
	return n, exists, nil
}

// SetSubscription moves the start point of a group on every queue where it
// has one (it only affects partitions the group has not read yet).
func (s *Store) SetSubscription(ctx context.Context, group string, at time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, s.sql.setSubscription, group, at)
	if err != nil {
		return 0, fmt.Errorf("set subscription of %s: %w", group, classify(err))
	}
	return tag.RowsAffected(), nil
}
