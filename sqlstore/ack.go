package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// The errors of an ack's items on a partition that does not exist, and on
// one the group has no cursor row on.
const (
	ackErrNoPartition = "Partition not found"
	ackErrNoCursor    = "No consumer state for this group on this partition (nothing was delivered)"
)

type ackTarget struct {
	idx    int
	offset int64
}

// Ack applies acknowledgements for one consumer group. Items of one
// partition are applied in one transaction, in message order; partitions are
// independent. Results are in item order.
func (s *Store) Ack(ctx context.Context, group string, items []reginatype.AckItem) ([]reginatype.AckResult, error) {
	defer s.citusChanged() // on Citus: an empty cache of pop candidates is filled again
	if group == "" {
		group = reginatype.QueueModeGroup
	}
	results := make([]reginatype.AckResult, len(items))
	byPartition := make(map[partition.UUID][]int)
	var order []partition.UUID
	for i := range items {
		p := items[i].PartitionID
		if _, ok := byPartition[p]; !ok {
			order = append(order, p)
		}
		byPartition[p] = append(byPartition[p], i)
	}
	for _, p := range order {
		idx := byPartition[p]
		var err error
		if completionsOnly(items, idx) {
			err = s.ackCompletions(ctx, group, p, items, idx, results)
		} else {
			err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
				for _, i := range idx {
					results[i] = reginatype.AckResult{}
				}
				return s.ackPartition(ctx, tx, group, p, items, idx, results)
			})
		}
		if err != nil {
			return nil, fmt.Errorf("ack partition %s: %w", p, classify(err))
		}
	}
	return results, nil
}

func (s *Store) ackPartition(ctx context.Context, tx pgx.Tx, group string, p partition.UUID,
	items []reginatype.AckItem, idx []int, results []reginatype.AckResult) error {
	pid := [16]byte(p)
	b := &pgx.Batch{}
	s.queueAckReads(b, pid, group, items, idx)
	st, err := readAckState(tx.SendBatch(ctx, b))
	if err != nil {
		return err
	}
	upd, err := applyAcks(&st, items, idx, results, func(off int64, msg string, retries int) error {
		return s.moveToDLQ(ctx, tx, pid, group, off, msg, retries)
	})
	if err != nil || !upd.write {
		return err
	}
	_, err = tx.Exec(ctx, s.sql.updateConsumerAfterAck, pid, group, upd.cursor, upd.released, upd.retryCount)
	return err
}

// completionsOnly reports whether every item of idx completes its message
// (no failure, dead letter or retry: nothing to write but the cursor).
func completionsOnly(items []reginatype.AckItem, idx []int) bool {
	for _, i := range idx {
		switch items[i].Status {
		case "", "success", reginatype.AckCompleted:
		default:
			return false
		}
	}
	return true
}

// ackCompletions applies completions of one partition. On plain
// PostgreSQL it is one statement, queen.ack_completions (ackCompletionsSQL);
// on Citus two round trips: BEGIN goes with the reads (the partition's
// names, the locked cursor row, the id resolution) and COMMIT with the
// cursor's update. The same reads and rules as ackPartition
// (completionsOnly items: no dead letter to copy between them).
func (s *Store) ackCompletions(ctx context.Context, group string, p partition.UUID,
	items []reginatype.AckItem, idx []int, results []reginatype.AckResult) error {
	if s.citus == nil && !s.ackInGo {
		return s.ackCompletionsSQL(ctx, s.pool, group, p, items, idx, results)
	}
	pid := [16]byte(p)
	return s.inPipeTx(ctx, func(t *pipeTx) error {
		br, err := t.sendBatch(ctx, func(b *pgx.Batch) { s.queueAckReads(b, pid, group, items, idx) })
		if err != nil {
			return err
		}
		st, err := readAckState(br)
		if err != nil {
			return err
		}
		upd, err := applyAcks(&st, items, idx, results, func(int64, string, int) error {
			return errors.New("ackCompletions: a dead letter to copy") // completionsOnly: cannot happen
		})
		if err != nil || !upd.write {
			return err
		}
		_, err = t.Exec(ctx, s.sql.updateConsumerAfterAck, pid, group, upd.cursor, upd.released, upd.retryCount)
		return err // the update goes with COMMIT
	})
}

// ackCompletionsSQL is ackCompletions in one statement and one round trip:
// queen.ack_completions applies applyAcks' rules for completions in the
// database and answers a code per item.
func (s *Store) ackCompletionsSQL(ctx context.Context, db rowQuerier, group string, p partition.UUID,
	items []reginatype.AckItem, idx []int, results []reginatype.AckResult) error {
	hashes := make([][]byte, len(idx))
	leases := make([]pgtype.UUID, len(idx))
	for k, i := range idx {
		h := partition.HashTxID(items[i].TransactionID)
		hashes[k] = h[:]
		if items[i].HasLease {
			leases[k] = pgtype.UUID{Bytes: items[i].LeaseID, Valid: true}
		}
	}
	var (
		queueName, partName *string
		state               int32
		codes               []int32
		released            bool
	)
	if err := db.QueryRow(ctx, s.sql.ackCompletions, [16]byte(p), group, hashes, leases).
		Scan(&queueName, &partName, &state, &codes, &released); err != nil {
		return err
	}
	for _, i := range idx {
		results[i] = reginatype.AckResult{}
	}
	switch state {
	case 1:
		for _, i := range idx {
			results[i].Error = ackErrNoPartition
		}
		return nil
	case 2:
		for _, i := range idx {
			results[i].QueueName, results[i].PartitionName = deref(queueName), deref(partName)
			results[i].Error = ackErrNoCursor
		}
		return nil
	}
	if len(codes) != len(idx) {
		return fmt.Errorf("ack_completions answered %d codes for %d items", len(codes), len(idx))
	}
	for k, i := range idx {
		r := &results[i]
		r.QueueName, r.PartitionName = deref(queueName), deref(partName)
		switch codes[k] {
		case 0:
			r.Success, r.LeaseReleased = true, released
		case 1:
			r.Error = reginatype.AckErrUnresolvable
		case 2, 3:
			r.Error, r.Refused = reginatype.AckErrLease, codes[k] == 3
		default:
			return fmt.Errorf("ack_completions answered code %d", codes[k])
		}
	}
	return nil
}

// rowQuerier runs a statement that answers one row (a pool, a transaction).
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// deref is *p, or "" for nil.
func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// queueAckReads queues an ack's reads of one partition: its queue's and
// its own name and the retry limit, the group's cursor row (locked), and
// every stored offset of each acked id (through the hash sidecar).
func (s *Store) queueAckReads(b *pgx.Batch, pid [16]byte, group string, items []reginatype.AckItem, idx []int) {
	hashes := make([][]byte, len(idx))
	for k, i := range idx {
		h := partition.HashTxID(items[i].TransactionID)
		hashes[k] = h[:]
	}
	b.Queue(s.sql.ackPartitionInfo, pid)
	b.Queue(s.sql.lockConsumerForAck, pid, group)
	b.Queue(s.sql.resolveOffsets, pid, hashes)
}

// ackState is what an ack read (queueAckReads) about one partition.
type ackState struct {
	queueName, partName string
	retryLimit          int
	cursor              int64
	leaseID             *[16]byte
	leaseLive           bool
	leaseFrom, leaseTo  *int64
	retryCount          int
	// candidates are the stored offsets of each acked id, by its index in
	// the partition's items.
	candidates map[int][]int64
	// noPartition, noCursor: the partition, or the group's cursor row on
	// it, does not exist.
	noPartition, noCursor bool
}

// readAckState reads queueAckReads' results and closes br.
func readAckState(br pgx.BatchResults) (ackState, error) {
	var st ackState
	infoErr := br.QueryRow().Scan(&st.queueName, &st.partName, &st.retryLimit)
	lockErr := br.QueryRow().Scan(&st.cursor, &st.leaseID, &st.leaseLive, &st.leaseFrom, &st.leaseTo, &st.retryCount)
	st.candidates = make(map[int][]int64)
	rows, err := br.Query()
	if err == nil {
		for rows.Next() {
			var k int32
			var off int64
			if err = rows.Scan(&k, &off); err != nil {
				break
			}
			st.candidates[int(k)-1] = append(st.candidates[int(k)-1], off)
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	switch {
	case errors.Is(infoErr, pgx.ErrNoRows):
		st.noPartition = true
	case infoErr != nil:
		return st, infoErr
	case errors.Is(lockErr, pgx.ErrNoRows):
		st.noCursor = true
	case lockErr != nil:
		return st, lockErr
	}
	return st, err
}

// ackUpdate is the cursor row's new state after an ack; write is false when
// nothing changed.
type ackUpdate struct {
	write      bool
	cursor     int64
	released   bool
	retryCount int
}

// applyAcks applies the items idx of one partition to its state, in offset
// order, filling their results; dlq copies a message into the DLQ. It
// returns the cursor row's update.
func applyAcks(st *ackState, items []reginatype.AckItem, idx []int, results []reginatype.AckResult,
	dlq func(off int64, errMsg string, retries int) error) (ackUpdate, error) {
	if st.noPartition {
		for _, i := range idx {
			results[i].Error = ackErrNoPartition
		}
		return ackUpdate{}, nil
	}
	for _, i := range idx {
		results[i].QueueName, results[i].PartitionName = st.queueName, st.partName
	}
	if st.noCursor {
		for _, i := range idx {
			results[i].Error = ackErrNoCursor
		}
		return ackUpdate{}, nil
	}
	cursor, leaseID, leaseLive, retryCount := st.cursor, st.leaseID, st.leaseLive, st.retryCount
	var targets []ackTarget
	for k, i := range idx {
		offs := st.candidates[k]
		if len(offs) == 0 {
			results[i].Error = reginatype.AckErrUnresolvable
			continue
		}
		// With dedup off an id can be stored more than once: prefer the first
		// one not yet consumed, else the last one (already consumed).
		slices.Sort(offs)
		chosen := offs[len(offs)-1]
		for _, o := range offs {
			if o >= cursor {
				chosen = o
				break
			}
		}
		targets = append(targets, ackTarget{idx: i, offset: chosen})
	}
	sort.SliceStable(targets, func(a, b int) bool { return targets[a].offset < targets[b].offset })

	failedCounted := false
	released := false
	dirty := false
	for _, t := range targets {
		it := &items[t.idx]
		r := &results[t.idx]
		if t.offset < cursor {
			r.Success = true // already consumed: acks are idempotent
			continue
		}
		if it.HasLease && (!leaseLive || leaseID == nil || *leaseID != [16]byte(it.LeaseID)) {
			r.Error = reginatype.AckErrLease
			// No lease at all: it was released (a failed or retried ack of
			// its batch, here or in an earlier request, or a seek), not
			// expired or taken over by another pop.
			r.Refused = leaseID == nil
			continue
		}
		status := it.Status
		switch status {
		case "", "success", reginatype.AckCompleted:
			cursor = t.offset + 1
			r.Success = true
		case reginatype.AckFailed:
			if retryCount >= st.retryLimit {
				if err := dlq(t.offset, it.Error, retryCount); err != nil {
					return ackUpdate{}, err
				}
				cursor = t.offset + 1
				r.Success, r.DLQ = true, true
			} else {
				if !failedCounted {
					retryCount++
					failedCounted = true
				}
				leaseID, leaseLive, released = nil, false, true
				r.Success, r.LeaseReleased = true, true
			}
		case reginatype.AckDLQ:
			if err := dlq(t.offset, it.Error, retryCount); err != nil {
				return ackUpdate{}, err
			}
			cursor = t.offset + 1
			r.Success, r.DLQ = true, true
		case reginatype.AckRetry:
			leaseID, leaseLive, released = nil, false, true
			r.Success, r.LeaseReleased = true, true
		default:
			r.Error = fmt.Sprintf("Unknown ack status %q", status)
			continue
		}
		dirty = true
	}
	// The batch is complete when the cursor reached the end of the lease.
	if leaseID != nil && st.leaseTo != nil && cursor >= *st.leaseTo {
		released = true
		retryCount = 0
		for _, t := range targets {
			if results[t.idx].Success {
				results[t.idx].LeaseReleased = true
			}
		}
	}
	return ackUpdate{write: dirty || released, cursor: cursor, released: released, retryCount: retryCount}, nil
}

func (s *Store) moveToDLQ(ctx context.Context, tx pgx.Tx, pid [16]byte, group string, off int64, errMsg string, retries int) error {
	var first int64
	var count int
	var frames []byte
	err := tx.QueryRow(ctx, s.sql.segmentAt, pid, off).Scan(&first, &count, &frames)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // the segment is gone (retention): nothing left to copy
	}
	if err != nil {
		return err
	}
	fs, err := partition.DecodeSegment(frames, count)
	if err != nil {
		return fmt.Errorf("segment %d: %w", first, err)
	}
	k := off - first
	if k < 0 || k >= int64(len(fs)) {
		return nil
	}
	f := fs[k]
	if f.Deleted() {
		return nil // deleted through the API: nothing left to keep
	}
	if errMsg == "" {
		errMsg = "Retries exhausted"
	}
	var trace any
	if f.HasTrace {
		trace = [16]byte(f.TraceID)
	}
	_, err = tx.Exec(ctx, s.sql.insertDLQ, pid, group, off, [16]byte(f.MessageID), f.TransactionID, trace,
		f.Payload, f.Created(), errMsg, retries, nullIfEmpty(f.ProducerSub), f.Encrypted)
	return err
}

// ExtendLease sets every live lease with this id to expire no earlier than
// seconds from now. It returns the new expiry, or ok=false when no live
// lease has this id (with expired=true when one existed but had expired).
func (s *Store) ExtendLease(ctx context.Context, leaseID partition.UUID, seconds int) (expires time.Time, ok, expired bool, err error) {
	rows, err := s.pool.Query(ctx, s.sql.extendLease, [16]byte(leaseID), seconds)
	if err != nil {
		return time.Time{}, false, false, fmt.Errorf("extend lease %s: %w", leaseID, classify(err))
	}
	defer rows.Close()
	for rows.Next() {
		var e time.Time
		var live bool
		if err := rows.Scan(&e, &live); err != nil {
			return time.Time{}, false, false, fmt.Errorf("extend lease %s: %w", leaseID, classify(err))
		}
		if live {
			ok = true
			if e.After(expires) {
				expires = e
			}
		} else {
			expired = true
		}
	}
	if err := rows.Err(); err != nil {
		return time.Time{}, false, false, fmt.Errorf("extend lease %s: %w", leaseID, classify(err))
	}
	return expires, ok, expired && !ok, nil
}
