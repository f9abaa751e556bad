package sqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// Configure creates or fully replaces the options of a queue (every option is
// written, so one left out by the caller reverts to its default) and makes
// sure its Default partition exists.
func (s *Store) Configure(ctx context.Context, queue, namespace, task string, o partition.QueueOptions) (reginatype.ConfiguredQueue, error) {
	out := reginatype.ConfiguredQueue{Namespace: namespace, Task: task, Options: o}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, s.sql.configure, append([]any{queue, namespace, task}, queueOptionFields(&o)...)...).
			Scan((*uuidScanner)(&out.QueueID))
		if err != nil {
			return err
		}
		err = tx.QueryRow(ctx, s.sql.ensurePartition, queue, reginatype.DefaultPartition, namespace, task).
			Scan((*uuidScanner)(&out.DefaultPartitionID), new(uuidScanner), new(int), new(string), new(bool))
		if err != nil {
			return err
		}
		// Waits computed from the old windowBuffer or delayedProcessing end
		// now: the next pop re-checks them with the new options.
		_, err = tx.Exec(ctx, s.sql.readyAfterConfigure, [16]byte(out.QueueID))
		return err
	})
	if err != nil {
		return out, fmt.Errorf("configure %s: %w", queue, classify(err))
	}
	return out, nil
}

// DeleteQueue deletes a queue with its partitions, segments and hashes, in one
// transaction. It reports whether the queue existed and the ids of the
// partitions it removed.
func (s *Store) DeleteQueue(ctx context.Context, queue string) (existed bool, partitions []partition.UUID, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var qid [16]byte
		if err := tx.QueryRow(ctx, s.sql.deleteQueue, queue).Scan(&qid); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			return err
		}
		existed = true
		rows, err := tx.Query(ctx, s.sql.deletePartitions, qid)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[[16]byte])
		if err != nil {
			return err
		}
		for _, id := range ids {
			partitions = append(partitions, id)
		}
		for _, q := range []string{s.sql.deleteSegments, s.sql.deleteLogTxns, s.sql.deleteConsumers, s.sql.deleteDLQ,
			s.sql.traces.deleteOf} {
			if _, err := tx.Exec(ctx, q, ids); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, s.sql.deleteQueueGroups, qid)
		return err
	})
	if err != nil {
		return false, nil, fmt.Errorf("delete queue %s: %w", queue, classify(err))
	}
	return existed, partitions, nil
}

// ListQueues returns every queue, by name.
func (s *Store) ListQueues(ctx context.Context) ([]reginatype.QueueSummary, error) {
	rows, err := s.pool.Query(ctx, s.sql.listQueues)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", classify(err))
	}
	defer rows.Close()
	var out []reginatype.QueueSummary
	for rows.Next() {
		var q reginatype.QueueSummary
		o := &q.Options
		if err := rows.Scan(append([]any{(*uuidScanner)(&q.ID), &q.Name, &q.Namespace, &q.Task, &q.CreatedAt,
			&q.Partitions, &q.Messages}, queueOptionFields(o)...)...); err != nil {
			return nil, fmt.Errorf("list queues: %w", classify(err))
		}
		out = append(out, q)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list queues: %w", classify(err))
	}
	return out, nil
}
