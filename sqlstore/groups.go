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
		var body partition.Body
		if err := rows.Scan((*uuidScanner)(&d.MessageID), &d.TransactionID, &trace, (*uuidScanner)(&d.PartitionID),
			&d.Queue, &d.Partition, &d.Group, &d.ErrorMessage, &d.RetryCount, &body.Payload, &sub, &d.CreatedAt, &d.FailedAt,
			&body.Encrypted); err != nil {
			return nil, 0, fmt.Errorf("list dlq: %w", classify(err))
		}
		s.revealForView(&body)
		d.Payload = body.Payload
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
		if err := tx.QueryRow(ctx, s.sql.deleteGroupCursors, group, nullIfEmpty(queue)).Scan(&n); err != nil {
			return err
		}
		if deleteMetadata {
			_, err := tx.Exec(ctx, s.sql.deleteGroupMeta, group, nullIfEmpty(queue))
			return err
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("delete consumer group %s: %w", group, classify(err))
	}
	return n, nil
}

// Seek moves a group's existing cursors on a queue (one partition when
// partName is not empty): to the end when at is zero (skipping partitions
// that never had a message), else to the first message stored after at.
// Live leases of the group there are dropped. Partitions the group has no
// cursor on are left alone.
func (s *Store) Seek(ctx context.Context, group, queue, partName string, at time.Time) (reginatype.SeekResult, error) {
	var ts *time.Time
	if !at.IsZero() {
		ts = &at
	}
	var res reginatype.SeekResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		res = reginatype.SeekResult{}
		if err := tx.QueryRow(ctx, s.sql.seekTargetsExist, queue, nullIfEmpty(partName)).Scan(&res.Found); err != nil {
			return err
		}
		if !res.Found {
			return nil
		}
		rows, err := tx.Query(ctx, s.sql.seek, queue, nullIfEmpty(partName), group, ts)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var newest *time.Time
			if err := rows.Scan(&newest); err != nil {
				return err
			}
			res.Updated++
			res.MovedTo = newest
		}
		return rows.Err()
	})
	if err != nil {
		return res, fmt.Errorf("seek %s on %s: %w", group, queue, classify(err))
	}
	return res, nil
}

// SetSubscription moves the start point of a group on every queue where it
// has one (it only affects partitions the group has not read yet).
func (s *Store) SetSubscription(ctx context.Context, group string, at time.Time) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, s.sql.setSubscription, group, at)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		_, err = tx.Exec(ctx, s.sql.resetUnstarted, group)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("set subscription of %s: %w", group, classify(err))
	}
	return n, nil
}
