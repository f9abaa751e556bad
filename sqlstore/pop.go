package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

type queueInfo struct {
	id                                    [16]byte
	leaseTime, delayed, windowBuffer, lim int
}

// consumerRow is a locked cursor row as a pop reads it.
type consumerRow struct {
	cursor    int64
	leaseLive bool
	leaseEnd  *time.Time
}

// popCandidate is a cursor row the candidate query locked, with its fields.
type popCandidate struct {
	reginatype.ClaimedPartition
	row consumerRow
}

// Pop claims partitions and leases (or, with AutoAck, consumes) up to Batch
// messages from the group's cursors. A partition is claimed only when the
// group holds no live lease on it, and under a row lock taken with SKIP
// LOCKED, so two consumers (on any brokers) never receive the same message
// while its lease is live.
//
// An any-partition pop first brings the group's cursor rows up to date with
// the pushes committed since its last look (queen.pop_prepare, its own
// statement), then takes the cursor rows with unread work that waited
// longest from the ready index (on Citus from the store's cache of each
// worker's ready rows: citus_ready.go): its cost follows the work, not the
// number of partitions.
func (s *Store) Pop(ctx context.Context, req reginatype.PopRequest) (reginatype.PopResult, error) {
	normalizePop(&req)
	if res, err, ok := s.popFused(ctx, &req); ok {
		if err != nil {
			return reginatype.PopResult{}, fmt.Errorf("pop %s/%s: %w", req.Queue, req.Partition, classify(err))
		}
		return res, nil
	}
	q, subFrom, found, err := s.popPrepare(ctx, &req)
	if err != nil {
		return reginatype.PopResult{}, fmt.Errorf("pop %s/%s: %w", req.Queue, req.Partition, classify(err))
	}
	if !found {
		return reginatype.PopResult{Empty: "queue_not_found"}, nil
	}
	return s.popAlone(ctx, &q, subFrom, &req)
}

// errQueueMoved fails a fused pop whose queue is not the one its id was
// cached for (deleted, or deleted and created again).
var errQueueMoved = errors.New("queue id changed")

// popFused is an any-partition pop in one round trip less: the catch-up
// (queen.pop_prepare, in a transaction of its own, as in popPrepare) goes
// in the same round trip as the claim's BEGIN and candidate query, which
// takes the queue's id from the store's cache (queueIDs, filled by
// popPrepare). It answers ok false, having changed nothing the pop would
// not have, when it does not apply (Citus, a named partition, a queue not
// cached), finds the queue's id changed or meets a deadlock (nothing
// claimed: the claim's transaction is rolled back): the caller then pops
// the usual way. Any other error is the pop's.
func (s *Store) popFused(ctx context.Context, req *reginatype.PopRequest) (reginatype.PopResult, error, bool) {
	if s.citus != nil || req.Partition != "" {
		return reginatype.PopResult{}, nil, false
	}
	v, _ := s.queueIDs.Load(req.Queue)
	id, ok := v.([16]byte)
	if !ok {
		return reginatype.PopResult{}, nil, false
	}
	q := queueInfo{id: id}
	var from *time.Time
	if req.Group != reginatype.QueueModeGroup && !req.SubscriptionFrom.IsZero() {
		from = &req.SubscriptionFrom
	}
	var res reginatype.PopResult
	err := s.inPipeTx(ctx, func(tx *pipeTx) error {
		tx.before = &preStatement{sql: s.sql.popPrepare, args: []any{req.Queue, req.Group, req.SubscriptionNew, from, true},
			scan: func(row pgx.Row) error {
				var (
					id                  *[16]byte
					subFrom             *time.Time
					caught, scanned     int
					lease, del, wb, lim int
				)
				if err := row.Scan(&id, &lease, &del, &wb, &lim, &subFrom, &caught, &scanned); err != nil {
					return err
				}
				if id == nil || *id != q.id {
					return errQueueMoved
				}
				q.leaseTime, q.delayed, q.windowBuffer, q.lim = lease, del, wb, lim
				if q.leaseTime <= 0 {
					q.leaseTime = 60
				}
				return nil
			}}
		var err error
		res, err = s.popIn(ctx, tx, &q, nil, req)
		return err
	})
	switch {
	case errors.Is(err, errQueueMoved):
		s.queueIDs.Delete(req.Queue)
		return reginatype.PopResult{}, nil, false
	case isRetryableTxError(err): // rolled back: the usual way retries
		return reginatype.PopResult{}, nil, false
	}
	return res, err, true
}

// normalizePop applies a pop's defaults.
func normalizePop(req *reginatype.PopRequest) {
	req.Batch = max(req.Batch, 1)
	req.Partitions = max(req.Partitions, 1)
	if req.Group == "" {
		req.Group = reginatype.QueueModeGroup
	}
}

// popAlone runs a prepared pop in a transaction of its own.
func (s *Store) popAlone(ctx context.Context, q *queueInfo, subFrom *time.Time, req *reginatype.PopRequest) (reginatype.PopResult, error) {
	var res reginatype.PopResult
	err := s.inPipeTx(ctx, func(tx *pipeTx) error {
		var err error
		res, err = s.popIn(ctx, tx, q, subFrom, req)
		return err
	})
	if err != nil {
		return reginatype.PopResult{}, fmt.Errorf("pop %s/%s: %w", req.Queue, req.Partition, classify(err))
	}
	return res, nil
}

// popIn is a prepared pop's work inside tx (its candidates, reads and
// lease updates); the caller commits.
func (s *Store) popIn(ctx context.Context, tx querier, q *queueInfo, subFrom *time.Time,
	req *reginatype.PopRequest) (reginatype.PopResult, error) {
	var res reginatype.PopResult
	err := func() error {
		leaseID := partition.NewV7()
		if req.AutoAck {
			leaseID = partition.ZeroUUID
		}
		if req.Partition != "" {
			var c reginatype.ClaimedPartition
			err := tx.QueryRow(ctx, s.sql.popPartitionByName, q.id, req.Partition).Scan((*uuidScanner)(&c.ID), &c.Name)
			if errors.Is(err, pgx.ErrNoRows) {
				res.Empty = "partition_not_found"
				return nil
			}
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, s.sql.ensureConsumer, [16]byte(c.ID), req.Group, subFrom); err != nil {
				return err
			}
			got, why, err := s.popPartition(ctx, tx, q, req, c, nil, leaseID, req.Batch, true)
			if err != nil {
				return fmt.Errorf("partition %s: %w", c.Name, err)
			}
			if len(got) > 0 {
				res.Claimed = append(res.Claimed, c)
				res.Messages = got
				res.LeaseID = leaseID
			} else {
				res.Empty = why
			}
			return nil
		}
		// Candidates come locked (on Citus they are locked one by one);
		// one that turns out to have nothing servable is set aside (its
		// row updated, so the next round does not return it; on Citus it
		// left the cache) and the next is taken. Bounded: each round sets
		// aside at least one row.
		for round := 0; round < 8 && len(res.Claimed) < req.Partitions && len(res.Messages) < req.Batch; round++ {
			want := req.Partitions - len(res.Claimed)
			var candidates []popCandidate
			if s.citus != nil {
				// On Citus the candidates come from the store's cache
				// (citus_ready.go), named only: popPartition locks each
				// on its worker.
				candidates = s.citusTake(q.id, req.Group, want)
			} else {
				var err error
				if candidates, err = s.readCandidates(ctx, tx, q, req.Group, want); err != nil {
					return err
				}
			}
			if len(candidates) == 0 {
				break
			}
			for _, c := range candidates {
				if len(res.Messages) >= req.Batch {
					break
				}
				locked := &c.row
				if s.citus != nil {
					locked = nil
				}
				limit := req.Batch - len(res.Messages)
				got, _, err := s.popPartition(ctx, tx, q, req, c.ClaimedPartition, locked, leaseID, limit, false)
				if err != nil {
					return fmt.Errorf("partition %s: %w", c.Name, err)
				}
				if s.citus != nil && req.AutoAck && len(got) == limit {
					s.citusPutBack(q.id, req.Group, c.ClaimedPartition) // no lease holds it: maybe more to read
				}
				if len(got) > 0 {
					res.Claimed = append(res.Claimed, c.ClaimedPartition)
					res.Messages = append(res.Messages, got...)
				}
			}
		}
		if len(res.Messages) > 0 {
			res.LeaseID = leaseID
		} else {
			res.Empty = "no_available_partition"
		}
		return nil
	}()
	return res, err
}

// readCandidates reads (and locks) up to want candidates of the group from
// the ready index: the plain PostgreSQL candidate scan.
func (s *Store) readCandidates(ctx context.Context, tx querier, q *queueInfo, group string, want int) ([]popCandidate, error) {
	now := time.Now()
	from, ok := s.floors.get(q.id, group, now)
	var at *time.Time
	if ok {
		at = &from
	}
	candidates, oldest, err := s.scanCandidates(ctx, tx, q, group, want, at)
	if err != nil {
		return nil, err
	}
	if at != nil && len(candidates) < want {
		// Short above the floor: rows below it may be ready too. The
		// scan from the head returns this transaction's rows again (it
		// holds their locks); they are dropped.
		more, head, err := s.scanCandidates(ctx, tx, q, group, want, nil)
		if err != nil {
			return nil, err
		}
		for _, c := range more {
			if len(candidates) < want && !slices.ContainsFunc(candidates, func(x popCandidate) bool { return x.ID == c.ID }) {
				candidates = append(candidates, c)
			}
		}
		oldest, at = head, nil
	}
	if oldest.IsZero() {
		// Nothing ready: the next pop scans from the head at once (an
		// idle group's polls cost one scan, not two).
		s.floors.forget(q.id, group)
	} else {
		s.floors.raise(q.id, group, oldest, at == nil, now)
	}
	return candidates, nil
}

// scanCandidates runs the candidate query from floor (nil: from the head of
// the group's ready range) and returns the candidates and the oldest one's
// avail_at (zero: none).
func (s *Store) scanCandidates(ctx context.Context, tx querier, q *queueInfo, group string, want int, floor *time.Time) ([]popCandidate, time.Time, error) {
	rows, err := tx.Query(ctx, s.sql.popCandidates, q.id, group, want, floor)
	if err != nil {
		return nil, time.Time{}, err
	}
	var candidates []popCandidate
	var oldest time.Time
	for rows.Next() {
		var c popCandidate
		var at time.Time
		if err := rows.Scan((*uuidScanner)(&c.ID), &c.Name, &c.row.cursor, &c.row.leaseLive, &c.row.leaseEnd, &at); err != nil {
			rows.Close()
			return nil, time.Time{}, err
		}
		if len(candidates) == 0 {
			oldest = at
		}
		candidates = append(candidates, c)
	}
	rows.Close()
	return candidates, oldest, rows.Err()
}

// HasWork reports whether a pop like req could be served now, without
// taking anything: it catches the group up (as a pop does) and looks in the
// ready index (on Citus, for any partition, in the cache the catch-up
// filled). Long polls ask it once per interval per (queue, group,
// partition), not once per waiting request.
func (s *Store) HasWork(ctx context.Context, req reginatype.PopRequest) (bool, error) {
	if req.Group == "" {
		req.Group = reginatype.QueueModeGroup
	}
	part := req.Partition
	req.Partition = "" // catch up, as an any-partition pop does
	q, _, found, err := s.popPrepare(ctx, &req)
	if err != nil {
		return false, fmt.Errorf("has work %s: %w", req.Queue, classify(err))
	}
	if !found {
		return false, nil
	}
	if s.citus != nil && part == "" {
		// The catch-up above filled the group's cache of candidates
		// (or found it fresh): no worker is asked again.
		return s.citusHasReady(q.id, req.Group), nil
	}
	var has bool
	if err := s.pool.QueryRow(ctx, s.sql.popHasWork, q.id, req.Group, nullIfEmpty(part)).Scan(&has); err != nil {
		return false, fmt.Errorf("has work %s: %w", req.Queue, classify(err))
	}
	return has, nil
}

// popPrepare runs queen.pop_prepare (the queue, the group's start point and,
// for an any-partition pop, the group's catch-up), retrying a deadlock with
// a concurrent seek or transaction.
func (s *Store) popPrepare(ctx context.Context, req *reginatype.PopRequest) (queueInfo, *time.Time, bool, error) {
	if s.citus != nil {
		return s.citusPopPrepare(ctx, req)
	}
	var from *time.Time
	if req.Group != reginatype.QueueModeGroup && !req.SubscriptionFrom.IsZero() {
		from = &req.SubscriptionFrom
	}
	for attempt := 1; ; attempt++ {
		var (
			q       queueInfo
			id      *[16]byte
			subFrom *time.Time
			caught  int
			scanned int
		)
		err := s.pool.QueryRow(ctx, s.sql.popPrepare, req.Queue, req.Group, req.SubscriptionNew, from, req.Partition == "").
			Scan(&id, &q.leaseTime, &q.delayed, &q.windowBuffer, &q.lim, &subFrom, &caught, &scanned)
		if err != nil {
			if attempt < 4 && isRetryableTxError(err) {
				continue
			}
			return q, nil, false, err
		}
		if id == nil {
			s.queueIDs.Delete(req.Queue)
			return q, nil, false, nil
		}
		q.id = *id
		s.queueIDs.Store(req.Queue, q.id)
		if q.leaseTime <= 0 {
			q.leaseTime = 60
		}
		return q, subFrom, true, nil
	}
}

// isRetryableTxError is true for a deadlock or a serialization failure.
func isRetryableTxError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}

// popSegment is a stored segment as a pop reads it.
type popSegment struct {
	first   int64
	count   int
	created time.Time
	frames  []byte
}

// readSegmentsFrom reads the segments holding offsets from .. from+limit-1
// (the one covering from first) and where the next segment after them
// starts (ok false: none does).
func (s *Store) readSegmentsFrom(ctx context.Context, tx querier, pid [16]byte, from int64, limit int) (segs []popSegment, next int64, ok bool, err error) {
	rows, err := tx.Query(ctx, s.sql.readSegments, pid, from, limit)
	if err != nil {
		return nil, 0, false, err
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (popSegment, error) {
		var sg popSegment
		err := r.Scan(&sg.first, &sg.count, &sg.created, &sg.frames)
		return sg, err
	})
	if err != nil {
		return nil, 0, false, err
	}
	// The query's last row, without frames, is the next segment's start.
	if n := len(all); n > 0 && all[n-1].frames == nil {
		return all[:n-1], all[n-1].first, true, nil
	}
	return all, 0, false, nil
}

// popPartition delivers up to limit messages of one partition to the group.
// The caller made sure the cursor row exists; an any-partition candidate
// comes locked, with its fields in locked (nil: lock and read it here). When nothing is delivered it says why ("lease_held",
// "window_buffer" or "") and, for an any-partition pop (named false), moves
// the row out of the ready line until it may be served: to the lease's
// expiry, the end of windowBuffer or delayedProcessing, or out of it until
// the next push when nothing is left to read.
func (s *Store) popPartition(ctx context.Context, tx querier, q *queueInfo, req *reginatype.PopRequest, c reginatype.ClaimedPartition, locked *consumerRow,
	leaseID partition.UUID, limit int, named bool) ([]reginatype.PoppedMessage, string, error) {
	pid := [16]byte(c.ID)
	notBefore := func(t time.Time, why string) ([]reginatype.PoppedMessage, string, error) {
		if named {
			return nil, why, nil
		}
		_, err := tx.Exec(ctx, s.sql.popNotBefore, pid, req.Group, t)
		return nil, why, err
	}
	var cur consumerRow
	if locked != nil {
		cur = *locked
	} else {
		err := tx.QueryRow(ctx, s.sql.lockConsumer, pid, req.Group).Scan(&cur.cursor, &cur.leaseLive, &cur.leaseEnd)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, "lease_held", nil // another pop holds the row right now
		}
		if err != nil {
			return nil, "", err
		}
	}
	if cur.leaseLive {
		return notBefore(*cur.leaseEnd, "lease_held")
	}
	if q.windowBuffer > 0 {
		var until *time.Time
		if err := tx.QueryRow(ctx, s.sql.windowBufferBusy, pid, q.windowBuffer).Scan(&until); err != nil {
			return nil, "", err
		}
		var now time.Time
		if err := tx.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
			return nil, "", err
		}
		if until != nil && until.After(now) {
			return notBefore(*until, "window_buffer")
		}
	}
	var now time.Time
	if q.delayed > 0 {
		if err := tx.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
			return nil, "", err
		}
	}
	var out []reginatype.PoppedMessage
	var hiddenUntil time.Time
	// Tombstones (deleted messages) are skipped; when they leave the batch
	// short and a segment follows the ones read, read on from there.
	from := cur.cursor
	for {
		segs, next, more, err := s.readSegmentsFrom(ctx, tx, pid, from, limit-len(out))
		if err != nil {
			return nil, "", err
		}
		stop := false
	segments:
		for _, sg := range segs {
			frames, err := partition.DecodeSegment(sg.frames, sg.count)
			if err != nil {
				return nil, "", fmt.Errorf("segment %d: %w", sg.first, err)
			}
			for k := range frames {
				off := sg.first + int64(k)
				if off < from || frames[k].Deleted() {
					continue
				}
				if q.delayed > 0 {
					if visible := frames[k].Created().Add(time.Duration(q.delayed) * time.Second); visible.After(now) {
						hiddenUntil, stop = visible, true
						break segments // FIFO: nothing after an invisible message either
					}
				}
				if err := s.reveal(&frames[k].Body); err != nil {
					return nil, "", err
				}
				out = append(out, reginatype.PoppedMessage{Frame: frames[k], Offset: off, PartitionID: c.ID, PartitionName: c.Name})
				if len(out) >= limit {
					stop = true
					break segments
				}
			}
		}
		if stop || !more {
			break
		}
		from = next
	}
	if len(out) == 0 {
		switch {
		case !hiddenUntil.IsZero():
			return notBefore(hiddenUntil, "")
		case named:
			return nil, "", nil
		default:
			_, err := tx.Exec(ctx, s.sql.popNothing, pid, req.Group)
			return nil, "", err
		}
	}
	from, to := out[0].Offset, out[len(out)-1].Offset+1
	var err error
	if req.AutoAck {
		_, err = tx.Exec(ctx, s.sql.popAutoAck, pid, req.Group, to)
	} else {
		_, err = tx.Exec(ctx, s.sql.popLease, pid, req.Group, [16]byte(leaseID), q.leaseTime, from, to)
	}
	if err != nil {
		return nil, "", err
	}
	return out, "", nil
}
