package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// Read-only views for the admin and status endpoints. Each runs in one
// read-only REPEATABLE READ transaction (one snapshot) and takes no lock.

// QueueDetails returns the queues f selects, by name, with their partitions
// (by name) and cursors, and the database time of the snapshot.
func (s *Store) QueueDetails(ctx context.Context, f reginatype.QueueFilter) ([]reginatype.QueueDetail, time.Time, error) {
	var (
		out []reginatype.QueueDetail
		now time.Time
	)
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			out = nil
			if err := tx.QueryRow(ctx, s.sql.admin.adminNow).Scan(&now); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, s.sql.admin.adminQueues, nullText(f.Name), nullText(f.Namespace), nullText(f.Task))
			if err != nil {
				return err
			}
			for rows.Next() {
				var q reginatype.QueueDetail
				o := &q.Options
				if err := rows.Scan((*uuidScanner)(&q.ID), &q.Name, &q.Namespace, &q.Task, &q.CreatedAt,
					&o.LeaseTime, &o.RetryLimit, &o.RetryDelay, &o.MaxSize, &o.TTL, &o.Priority,
					&o.DelayedProcessing, &o.WindowBuffer, &o.DeadLetterQueue, &o.DLQAfterMaxRetries,
					&o.RetentionEnabled, &o.RetentionSeconds, &o.CompletedRetentionSeconds,
					&o.MaxWaitTimeSeconds, &o.EncryptionEnabled, &o.DedupWindowSeconds, &o.DedupPayloadCheck); err != nil {
					rows.Close()
					return err
				}
				out = append(out, q)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if len(out) == 0 {
				return nil
			}
			byQueue := make(map[partition.UUID]int, len(out))
			qids := make([][16]byte, len(out))
			for i := range out {
				byQueue[out[i].ID] = i
				qids[i] = out[i].ID
			}
			rows, err = tx.Query(ctx, s.sql.admin.adminParts, qids, reginatype.QueueModeGroup)
			if err != nil {
				return err
			}
			type ref struct{ q, p int }
			byPart := make(map[partition.UUID]ref)
			var pids [][16]byte
			for rows.Next() {
				var (
					qid partition.UUID
					p   reginatype.PartitionDetail
				)
				if err := rows.Scan((*uuidScanner)(&qid), (*uuidScanner)(&p.ID), &p.Name, &p.CreatedAt, &p.NextOffset,
					&p.OldestOffset, &p.OldestAt, &p.NewestAt, &p.DeadLetters, &p.QueueModeDeadLetters); err != nil {
					rows.Close()
					return err
				}
				qi := byQueue[qid]
				out[qi].Partitions = append(out[qi].Partitions, p)
				byPart[p.ID] = ref{qi, len(out[qi].Partitions) - 1}
				pids = append(pids, p.ID)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if len(pids) == 0 {
				return nil
			}
			rows, err = tx.Query(ctx, s.sql.admin.adminConsumers, pids)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var (
					pid   partition.UUID
					c     reginatype.ConsumerState
					lease pgtype.UUID
				)
				if err := rows.Scan((*uuidScanner)(&pid), &c.Group, &c.Cursor, &lease, &c.LeaseExpiresAt, &c.LeaseLive,
					&c.LeaseFrom, &c.LeaseTo, &c.RetryCount, &c.UpdatedAt, &c.OldestPendingAt); err != nil {
					return err
				}
				if lease.Valid {
					id := partition.UUID(lease.Bytes)
					c.LeaseID = &id
				}
				r, ok := byPart[pid]
				if !ok {
					continue
				}
				p := &out[r.q].Partitions[r.p]
				p.Consumers = append(p.Consumers, c)
			}
			return rows.Err()
		})
	if err != nil {
		return nil, now, fmt.Errorf("queue details: %w", classify(err))
	}
	return out, now, nil
}

// nullText passes "" as NULL (match everything).
func nullText(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// messageStatus is the status of the message at off in a partition whose
// status bounds are doneTo and busyTo (see statusBounds), dead when a group
// dead-lettered it.
func messageStatus(off, doneTo, busyTo int64, dead bool) string {
	switch {
	case dead:
		return reginatype.MessageDeadLetter
	case off < doneTo:
		return reginatype.MessageCompleted
	case off < busyTo:
		return reginatype.MessageProcessing
	default:
		return reginatype.MessagePending
	}
}

// ListMessages returns a page of stored messages with the status f asks for
// (every message when f.Status is empty), newest first (by stored time,
// then partition and offset), and the number f selects in all. It reads
// only the segments overlapping the page.
func (s *Store) ListMessages(ctx context.Context, f reginatype.MessageFilter) ([]reginatype.StoredMessage, int64, error) {
	if f.Limit <= 0 {
		f.Limit = 200
	}
	f.Offset = max(f.Offset, 0)
	var (
		out   []reginatype.StoredMessage
		total int64
	)
	args := []any{nullText(f.Queue), nullText(f.Partition), nullText(f.Namespace), nullText(f.Task),
		nullTime(f.From), nullTime(f.To)}
	count, page := s.sql.admin.messagesCount, s.sql.admin.messagesPage
	pageArgs := slices.Concat(args, []any{reginatype.QueueModeGroup, int64(f.Offset), int64(f.Limit)})
	if f.Status != "" {
		count, page = s.sql.admin.messagesCountStatus, s.sql.admin.messagesPageStatus
		args = slices.Concat(args, []any{reginatype.QueueModeGroup, f.Status})
		pageArgs = slices.Concat(args, []any{int64(f.Offset), int64(f.Limit)})
	}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			out = nil
			if err := tx.QueryRow(ctx, count, args...).Scan(&total); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, page, pageArgs...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var (
					pid                           partition.UUID
					first, before, doneTo, busyTo int64
					count                         int
					frames                        []byte
					part, queue, ns, task         string
					dead                          []int64
				)
				if err := rows.Scan((*uuidScanner)(&pid), &first, &count, &before, &frames, &part, &queue, &ns, &task,
					&doneTo, &busyTo, &dead); err != nil {
					return err
				}
				fs, err := partition.DecodeSegment(frames, count)
				if err != nil {
					return fmt.Errorf("segment %d: %w", first, err)
				}
				// Newest first inside the segment too; pos counts the
				// messages with the status asked for.
				pos := before
				for k := count - 1; k >= 0; k-- {
					off := first + int64(k)
					st := messageStatus(off, doneTo, busyTo, slices.Contains(dead, off))
					if f.Status != "" && st != f.Status {
						continue
					}
					pos++
					if pos <= int64(f.Offset) || pos > int64(f.Offset+f.Limit) || fs[k].Deleted() {
						continue // a tombstone: counted in total, never listed
					}
					s.revealForView(&fs[k].Body)
					out = append(out, reginatype.StoredMessage{Frame: fs[k], Offset: off, PartitionID: pid, Partition: part,
						Queue: queue, Namespace: ns, Task: task, Status: st})
				}
			}
			return rows.Err()
		})
	if err != nil {
		return nil, 0, fmt.Errorf("list messages: %w", classify(err))
	}
	return out, total, nil
}

// GetMessage returns the message of a partition with the transaction id: the
// newest stored copy the hash sidecar knows (with deduplication on there is
// one per window). ok is false when the sidecar does not know it (never
// stored, or aged out), its segment was removed or it was deleted.
func (s *Store) GetMessage(ctx context.Context, partitionID partition.UUID, txID string) (reginatype.StoredMessage, bool, error) {
	var (
		m  reginatype.StoredMessage
		ok bool
	)
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			ok = false
			off, found, err := s.newestOffset(ctx, tx, partitionID, txID)
			if err != nil || !found {
				return err
			}
			var (
				first, doneTo, busyTo int64
				count                 int
				frames                []byte
			)
			err = tx.QueryRow(ctx, s.sql.admin.messageAt, [16]byte(partitionID), off, reginatype.QueueModeGroup).Scan(&first, &count,
				&frames, &m.Partition, &m.Queue, &m.Namespace, &m.Task, &doneTo, &busyTo)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			if err != nil {
				return err
			}
			k := off - first
			if k < 0 || k >= int64(count) {
				return nil // the covering segment is gone
			}
			fs, err := partition.DecodeSegment(frames, count)
			if err != nil {
				return fmt.Errorf("segment %d: %w", first, err)
			}
			if fs[k].Deleted() {
				return nil
			}
			s.revealForView(&fs[k].Body)
			m.Frame, m.Offset, m.PartitionID = fs[k], off, partitionID
			m.Status = messageStatus(off, doneTo, busyTo, false) // the caller looks for a dead letter
			ok = true
			return nil
		})
	if err != nil {
		return m, false, fmt.Errorf("get message: %w", classify(err))
	}
	return m, ok, nil
}

// newestOffset resolves a transaction id to the offset of its newest copy in
// the partition's hash sidecar (found is false when the sidecar does not know
// it), through queen.resolve_offsets as an ack resolves its ids.
func (s *Store) newestOffset(ctx context.Context, tx pgx.Tx, partitionID partition.UUID, txID string) (off int64, found bool, err error) {
	h := partition.HashTxID(txID)
	rows, err := tx.Query(ctx, s.sql.resolveOffsets, [16]byte(partitionID), [][]byte{h[:]})
	if err != nil {
		return 0, false, err
	}
	defer rows.Close()
	off = -1
	for rows.Next() {
		var k int32
		var o int64
		if err := rows.Scan(&k, &o); err != nil {
			return 0, false, err
		}
		off = max(off, o)
	}
	return off, off >= 0, rows.Err()
}
