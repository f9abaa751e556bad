package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// ReplayDLQ puts the dead letters of (partition, transaction id) (of one
// group, or of every group when group is empty) back into their partition as
// new messages with the same transaction id and payload, and removes them
// from the DLQ, in one transaction. It returns the partition's queue.
//
// A replay is deliberately not deduplicated: the original is still inside
// the window, so a push of the same transaction id would be answered
// "duplicate" and the replay silently swallowed. It takes the same partition
// row lock a push takes and writes a segment and a hash row like one, so
// offsets stay gap-free and later producer retries are still answered
// "duplicate" (naming the original). Every group of the partition sees the
// replayed message.
func (s *Store) ReplayDLQ(ctx context.Context, partitionID partition.UUID, txID, group string) (string, []reginatype.Replayed, error) {
	var out []reginatype.Replayed
	var queue string
	err := s.retryMissingSidecarChild(ctx, func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			out = nil
			pid := [16]byte(partitionID)
			var next int64
			if err := tx.QueryRow(ctx, s.sql.lockPartition, pid).Scan(&next, &queue); err != nil {
				if errors.Is(err, pgx.ErrNoRows) {
					return reginatype.ErrNotInDLQ
				}
				return err
			}
			rows, err := tx.Query(ctx, s.sql.takeDLQ, pid, txID, nullIfEmpty(group))
			if err != nil {
				return err
			}
			type letter struct {
				payload   []byte
				trace     *[16]byte
				sub       *string
				encrypted bool
			}
			var letters []letter
			seen := make(map[int64]bool)
			for rows.Next() {
				var l letter
				var off int64
				if err := rows.Scan(&off, &l.payload, &l.trace, &l.sub, &l.encrypted); err != nil {
					rows.Close()
					return err
				}
				if !seen[off] {
					seen[off] = true
					letters = append(letters, l)
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if len(letters) == 0 {
				return reginatype.ErrNotInDLQ
			}
			h := partition.HashTxID(txID)
			now := time.Now().UnixMicro()
			for _, l := range letters {
				f := partition.Frame{MessageID: partition.NewV7(), Body: partition.Body{
					CreatedAt: now, TransactionID: txID, Payload: l.payload, Encrypted: l.encrypted}}
				if l.trace != nil {
					f.TraceID, f.HasTrace = *l.trace, true
				}
				if l.sub != nil {
					f.ProducerSub = *l.sub
				}
				s.citusChanged()
				if _, err := tx.Exec(ctx, s.sql.replayInsert, pid, next, partition.EncodeSegment([]partition.Frame{f}),
					[][]byte{h[:]}); err != nil {
					return err
				}
				out = append(out, reginatype.Replayed{MessageID: f.MessageID, Offset: next})
				next++
			}
			return nil
		})
	})
	if err != nil {
		if errors.Is(err, reginatype.ErrNotInDLQ) {
			return "", nil, err
		}
		return "", nil, fmt.Errorf("replay %s/%s: %w", partitionID, txID, classify(err))
	}
	return queue, out, nil
}
