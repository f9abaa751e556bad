package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/regina-mq/regina/partition"
)

// Read-only views for the admin and status endpoints. Each runs in one
// read-only REPEATABLE READ transaction (one snapshot) and takes no lock.

// QueueFilter selects queues; empty fields match everything.
type QueueFilter struct {
	Name, Namespace, Task string
}

// QueueDetail is a queue with its partitions and their cursors.
type QueueDetail struct {
	ID              partition.UUID
	Name            string
	Namespace, Task string
	CreatedAt       time.Time
	Options         partition.QueueOptions
	Partitions      []PartitionDetail
}

// PartitionDetail is one partition: its offsets, its stored span and every
// consumer group's cursor on it.
type PartitionDetail struct {
	ID        partition.UUID
	Name      string
	CreatedAt time.Time
	// NextOffset is the allocator: messages ever written. OldestOffset is the
	// first offset still stored (NextOffset when no segment is left).
	NextOffset, OldestOffset int64
	// OldestAt and NewestAt are the stored times of the oldest and newest
	// segments, nil when none is stored.
	OldestAt, NewestAt *time.Time
	// DeadLetters counts the partition's dead letters of every group,
	// QueueModeDeadLetters those of queue mode.
	DeadLetters, QueueModeDeadLetters int64
	Consumers                         []ConsumerState
}

// ConsumerState is one consumer group's cursor on a partition
// (queen.consumers).
type ConsumerState struct {
	Group          string
	Cursor         int64
	LeaseID        *partition.UUID
	LeaseExpiresAt *time.Time
	LeaseLive      bool
	LeaseFrom      *int64
	LeaseTo        *int64
	RetryCount     int
	UpdatedAt      time.Time
	// OldestPendingAt is the stored time of the oldest message the group has
	// not consumed, nil when it has consumed everything.
	OldestPendingAt *time.Time
}

// MessageStats counts a partition's (or a sum of partitions') messages for
// one consumer group.
type MessageStats struct {
	// Total is the messages stored (NextOffset - OldestOffset).
	Total int64 `json:"total"`
	// Pending is what the group has not acknowledged: NextOffset - cursor,
	// leased messages included.
	Pending int64 `json:"pending"`
	// Processing is the leased part of Pending (live lease, not yet acked).
	Processing int64 `json:"processing"`
	// Completed is the stored messages below the cursor.
	Completed int64 `json:"completed"`
	// Failed is the group's dead letters (messages it gave up on; also
	// counted in Completed, since its cursor moved past them).
	Failed int64 `json:"failed"`
	// DeadLetter is the dead letters of every group.
	DeadLetter int64 `json:"deadLetter"`
}

// Add adds o to m.
func (m *MessageStats) Add(o MessageStats) {
	m.Total += o.Total
	m.Pending += o.Pending
	m.Processing += o.Processing
	m.Completed += o.Completed
	m.Failed += o.Failed
	m.DeadLetter += o.DeadLetter
}

// Consumer returns the group's cursor on the partition, nil when it has none.
func (p *PartitionDetail) Consumer(group string) *ConsumerState {
	for i := range p.Consumers {
		if p.Consumers[i].Group == group {
			return &p.Consumers[i]
		}
	}
	return nil
}

// GroupStats counts the partition's messages for the group whose cursor is c
// (nil: a group that has not read it yet, cursor 0). Failed is only known for
// queue mode (the DLQ count is read for it); other groups report 0.
func (p *PartitionDetail) GroupStats(c *ConsumerState) MessageStats {
	st := MessageStats{Total: p.NextOffset - p.OldestOffset, DeadLetter: p.DeadLetters}
	var cursor int64
	if c != nil {
		cursor = c.Cursor
		if c.LeaseLive && c.LeaseTo != nil {
			st.Processing = max(*c.LeaseTo-cursor, 0)
		}
		if c.Group == QueueModeGroup {
			st.Failed = p.QueueModeDeadLetters
		}
	}
	st.Pending = max(p.NextOffset-cursor, 0)
	st.Completed = max(min(cursor, p.NextOffset)-p.OldestOffset, 0)
	return st
}

// Stats counts the partition's messages for queue mode (Queen's default
// group), as the section-9 views report them.
func (p *PartitionDetail) Stats() MessageStats {
	c := p.Consumer(QueueModeGroup)
	st := p.GroupStats(c)
	st.Failed = p.QueueModeDeadLetters
	return st
}

// QueueDetails returns the queues f selects, by name, with their partitions
// (by name) and cursors, and the database time of the snapshot.
func (s *Store) QueueDetails(ctx context.Context, f QueueFilter) ([]QueueDetail, time.Time, error) {
	var (
		out []QueueDetail
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
				var q QueueDetail
				o := &q.Options
				if err := rows.Scan((*uuidScanner)(&q.ID), &q.Name, &q.Namespace, &q.Task, &q.CreatedAt,
					&o.LeaseTime, &o.RetryLimit, &o.RetryDelay, &o.MaxSize, &o.TTL, &o.Priority,
					&o.DelayedProcessing, &o.WindowBuffer, &o.DeadLetterQueue, &o.DLQAfterMaxRetries,
					&o.RetentionEnabled, &o.RetentionSeconds, &o.CompletedRetentionSeconds,
					&o.MaxWaitTimeSeconds, &o.EncryptionEnabled, &o.DedupWindowSeconds); err != nil {
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
			rows, err = tx.Query(ctx, s.sql.admin.adminParts, qids, QueueModeGroup)
			if err != nil {
				return err
			}
			type ref struct{ q, p int }
			byPart := make(map[partition.UUID]ref)
			var pids [][16]byte
			for rows.Next() {
				var (
					qid partition.UUID
					p   PartitionDetail
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
					c     ConsumerState
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

// Message statuses for queue mode, as the messages views report them.
const (
	MessagePending    = "pending"
	MessageProcessing = "processing"
	MessageCompleted  = "completed"
)

// StoredMessage is one stored message with where it lives.
type StoredMessage struct {
	partition.Frame
	Offset      int64
	PartitionID partition.UUID
	Partition   string
	Queue       string
	Namespace   string
	Task        string
	// Status is the message's state for queue mode: pending, processing
	// (under a live lease) or completed.
	Status string
}

// MessageFilter selects messages; empty fields match everything.
type MessageFilter struct {
	Queue, Partition, Namespace, Task string
	// From and To bound the stored time (inclusive); zero is unbounded.
	From, To      time.Time
	Limit, Offset int
}

func messageStatus(off, cursor int64, leaseLive bool, leaseTo int64) string {
	switch {
	case off < cursor:
		return MessageCompleted
	case leaseLive && off < leaseTo:
		return MessageProcessing
	default:
		return MessagePending
	}
}

// ListMessages returns a page of stored messages, newest first (by stored
// time, then partition and offset), and the number f selects in all. It
// reads only the segments overlapping the page.
func (s *Store) ListMessages(ctx context.Context, f MessageFilter) ([]StoredMessage, int64, error) {
	if f.Limit <= 0 {
		f.Limit = 200
	}
	f.Offset = max(f.Offset, 0)
	var (
		out   []StoredMessage
		total int64
	)
	args := []any{nullText(f.Queue), nullText(f.Partition), nullText(f.Namespace), nullText(f.Task),
		nullTime(f.From), nullTime(f.To)}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			out = nil
			if err := tx.QueryRow(ctx, s.sql.admin.messagesCount, args...).Scan(&total); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, s.sql.admin.messagesPage,
				append(args, int64(f.Offset), int64(f.Limit), QueueModeGroup)...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var (
					pid                   partition.UUID
					first, before, cursor int64
					count                 int
					frames                []byte
					part, queue, ns, task string
					leaseLive             bool
					leaseTo               int64
				)
				if err := rows.Scan((*uuidScanner)(&pid), &first, &count, &before, &frames, &part, &queue, &ns, &task,
					&cursor, &leaseLive, &leaseTo); err != nil {
					return err
				}
				fs, err := partition.DecodeSegment(frames, count)
				if err != nil {
					return fmt.Errorf("segment %d: %w", first, err)
				}
				// Newest first inside the segment too: position before+j is
				// frame count-1-j.
				for j := 0; j < count; j++ {
					pos := before + int64(j)
					if pos < int64(f.Offset) || pos >= int64(f.Offset+f.Limit) {
						continue
					}
					k := count - 1 - j
					off := first + int64(k)
					out = append(out, StoredMessage{Frame: fs[k], Offset: off, PartitionID: pid, Partition: part,
						Queue: queue, Namespace: ns, Task: task, Status: messageStatus(off, cursor, leaseLive, leaseTo)})
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
// stored, or aged out) or its segment was removed.
func (s *Store) GetMessage(ctx context.Context, partitionID partition.UUID, txID string) (StoredMessage, bool, error) {
	var (
		m  StoredMessage
		ok bool
	)
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			ok = false
			h := partition.HashTxID(txID)
			// As in the ack's resolution: the GIN index, never a scan.
			if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, s.sql.resolveOffsets, [16]byte(partitionID), [][]byte{h[:]})
			if err != nil {
				return err
			}
			off := int64(-1)
			for rows.Next() {
				var k int32
				var o int64
				if err := rows.Scan(&k, &o); err != nil {
					rows.Close()
					return err
				}
				off = max(off, o)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if off < 0 {
				return nil
			}
			var (
				first, cursor, leaseTo int64
				count                  int
				frames                 []byte
				leaseLive              bool
			)
			err = tx.QueryRow(ctx, s.sql.admin.messageAt, [16]byte(partitionID), off, QueueModeGroup).Scan(&first, &count,
				&frames, &m.Partition, &m.Queue, &m.Namespace, &m.Task, &cursor, &leaseLive, &leaseTo)
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
			m.Frame, m.Offset, m.PartitionID = fs[k], off, partitionID
			m.Status = messageStatus(off, cursor, leaseLive, leaseTo)
			ok = true
			return nil
		})
	if err != nil {
		return m, false, fmt.Errorf("get message: %w", classify(err))
	}
	return m, ok, nil
}
