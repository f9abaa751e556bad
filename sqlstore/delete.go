package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/regina-mq/regina/partition"
)

// deleteQueries is the SQL of a message delete (rare: built per call).
type deleteQueries struct {
	lockSegment, rewriteSegment, dropDLQ, dropTraces string
}

func newDeleteQueries(schema string) deleteQueries {
	q := deleteQueries{
		// The segment covering an offset, locked: two deletes in one segment
		// take turns, so neither undoes the other's rewrite.
		lockSegment: `SELECT first_offset, frame_count, frames FROM queen.segments
			 WHERE partition_id = $1 AND first_offset <= $2 ORDER BY first_offset DESC LIMIT 1 FOR UPDATE`,
		rewriteSegment: `UPDATE queen.segments SET frames = $3 WHERE partition_id = $1 AND first_offset = $2`,
		dropDLQ:        `DELETE FROM queen.dlq WHERE partition_id = $1 AND msg_offset = ANY($2::bigint[])`,
		dropTraces:     `DELETE FROM queen.traces WHERE partition_id = $1 AND msg_offset = ANY($2::bigint[])`,
	}
	for _, p := range []*string{&q.lockSegment, &q.rewriteSegment, &q.dropDLQ, &q.dropTraces} {
		*p = qualify(*p, schema)
	}
	return q
}

// DeleteMessage deletes every stored copy of a partition's message with the
// transaction id that the hash sidecar knows (one, with deduplication on):
// its frame is rewritten in place as a tombstone (the zero message id, a
// null payload, no trace id or producer; the offset and the transaction id
// stay), and its dead letters and trace events are deleted. Pops and the
// message views skip tombstones. The hash stays in the sidecar, so a
// producer retrying the transaction id inside the window still gets
// "duplicate" (with the zero message id, as for a message retention
// removed). It returns the number of copies deleted: 0 when none is stored
// (never pushed, aged out of the sidecar, removed by retention or already
// deleted).
func (s *Store) DeleteMessage(ctx context.Context, partitionID partition.UUID, txID string) (int, error) {
	pid := [16]byte(partitionID)
	q := newDeleteQueries(s.schema)
	var deleted []int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		deleted = deleted[:0]
		h := partition.HashTxID(txID)
		rows, err := tx.Query(ctx, s.sql.resolveOffsets, pid, [][]byte{h[:]})
		if err != nil {
			return err
		}
		offs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (int64, error) {
			var k int32
			var off int64
			err := r.Scan(&k, &off)
			return off, err
		})
		if err != nil {
			return err
		}
		// In offset order: segment rows are locked in that order.
		slices.Sort(offs)
		for _, off := range offs {
			ok, err := tombstone(ctx, tx, &q, pid, off, txID)
			if err != nil {
				return err
			}
			if ok {
				deleted = append(deleted, off)
			}
		}
		if len(deleted) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, q.dropDLQ, pid, deleted); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, q.dropTraces, pid, deleted)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("delete message %s/%s: %w", partitionID, txID, classify(err))
	}
	return len(deleted), nil
}

// tombstone rewrites the frame at off as a tombstone; ok is false when it is
// not stored (its segment is gone), is already one, or is another message
// whose transaction id shares the hash.
func tombstone(ctx context.Context, tx pgx.Tx, q *deleteQueries, pid [16]byte, off int64, txID string) (bool, error) {
	var (
		first  int64
		count  int
		frames []byte
	)
	err := tx.QueryRow(ctx, q.lockSegment, pid, off).Scan(&first, &count, &frames)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	k := off - first
	if k < 0 || k >= int64(count) {
		return false, nil
	}
	fs, err := partition.DecodeSegment(frames, count)
	if err != nil {
		return false, fmt.Errorf("segment %d: %w", first, err)
	}
	f := &fs[k]
	if f.Deleted() || f.TransactionID != txID {
		return false, nil
	}
	f.Tombstone()
	_, err = tx.Exec(ctx, q.rewriteSegment, pid, first, partition.EncodeSegment(fs))
	return err == nil, err
}
