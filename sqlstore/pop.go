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

type queueInfo struct {
	id                                    [16]byte
	leaseTime, delayed, windowBuffer, lim int
}

type consumerRow struct {
	cursor    int64
	leaseLive bool
}

// Pop claims partitions and leases (or, with AutoAck, consumes) up to Batch
// messages from the group's cursors, in one transaction. A partition is
// claimed only when the group holds no live lease on it, and under a row lock
// taken with SKIP LOCKED, so two consumers (on any brokers) never receive the
// same message while its lease is live.
func (s *Store) Pop(ctx context.Context, req reginatype.PopRequest) (reginatype.PopResult, error) {
	var res reginatype.PopResult
	if req.Batch < 1 {
		req.Batch = 1
	}
	if req.Partitions < 1 {
		req.Partitions = 1
	}
	if req.Group == "" {
		req.Group = reginatype.QueueModeGroup
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		res = reginatype.PopResult{}
		var q queueInfo
		err := tx.QueryRow(ctx, s.sql.popQueue, req.Queue).Scan(&q.id, &q.leaseTime, &q.delayed, &q.windowBuffer, &q.lim)
		if errors.Is(err, pgx.ErrNoRows) {
			res.Empty = "queue_not_found"
			return nil
		}
		if err != nil {
			return err
		}
		if q.leaseTime <= 0 {
			q.leaseTime = 60
		}
		var subFrom *time.Time
		if req.Group != reginatype.QueueModeGroup {
			var from *time.Time
			if !req.SubscriptionFrom.IsZero() {
				from = &req.SubscriptionFrom
			}
			err := tx.QueryRow(ctx, s.sql.ensureGroup, q.id, req.Group, req.SubscriptionNew, from).Scan(&subFrom)
			if errors.Is(err, pgx.ErrNoRows) {
				// A concurrent first pop of the group inserted the row and
				// committed while this insert waited on it: ON CONFLICT
				// returned nothing, and the statement's snapshot predates
				// that commit. A new statement (READ COMMITTED) sees it.
				err = tx.QueryRow(ctx, s.sql.readGroup, q.id, req.Group).Scan(&subFrom)
			}
			if err != nil {
				return fmt.Errorf("consumer group %q: %w", req.Group, err)
			}
		}
		var candidates []reginatype.ClaimedPartition
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
			candidates = append(candidates, c)
		} else {
			rows, err := tx.Query(ctx, s.sql.popCandidates, q.id, req.Group, req.Partitions*4+4)
			if err != nil {
				return err
			}
			for rows.Next() {
				var c reginatype.ClaimedPartition
				if err := rows.Scan((*uuidScanner)(&c.ID), &c.Name); err != nil {
					rows.Close()
					return err
				}
				candidates = append(candidates, c)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
		}
		leaseID := partition.NewV7()
		if req.AutoAck {
			leaseID = partition.ZeroUUID
		}
		held := false
		for _, c := range candidates {
			if len(res.Claimed) >= req.Partitions || len(res.Messages) >= req.Batch {
				break
			}
			got, why, err := s.popPartition(ctx, tx, &q, &req, c, subFrom, leaseID, req.Batch-len(res.Messages))
			if err != nil {
				return fmt.Errorf("partition %s: %w", c.Name, err)
			}
			if why == "lease_held" || why == "window_buffer" {
				held = true
				if req.Partition != "" {
					res.Empty = why
				}
			}
			if len(got) > 0 {
				res.Claimed = append(res.Claimed, c)
				res.Messages = append(res.Messages, got...)
			}
		}
		if len(res.Messages) > 0 {
			res.LeaseID = leaseID
			res.Empty = ""
		} else if req.Partition == "" && (held || len(candidates) == 0) {
			res.Empty = "no_available_partition"
		}
		return nil
	})
	if err != nil {
		return reginatype.PopResult{}, fmt.Errorf("pop %s/%s: %w", req.Queue, req.Partition, classify(err))
	}
	return res, nil
}

// popPartition delivers up to limit messages of one partition to the group.
func (s *Store) popPartition(ctx context.Context, tx pgx.Tx, q *queueInfo, req *reginatype.PopRequest, c reginatype.ClaimedPartition,
	subFrom *time.Time, leaseID partition.UUID, limit int) ([]reginatype.PoppedMessage, string, error) {
	pid := [16]byte(c.ID)
	if _, err := tx.Exec(ctx, s.sql.ensureConsumer, pid, req.Group, subFrom); err != nil {
		return nil, "", err
	}
	var cur consumerRow
	err := tx.QueryRow(ctx, s.sql.lockConsumer, pid, req.Group).Scan(&cur.cursor, &cur.leaseLive)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, "lease_held", nil // another pop holds the row right now
	}
	if err != nil {
		return nil, "", err
	}
	if cur.leaseLive {
		return nil, "lease_held", nil
	}
	if q.windowBuffer > 0 {
		var busy bool
		if err := tx.QueryRow(ctx, s.sql.windowBufferBusy, pid, q.windowBuffer).Scan(&busy); err != nil {
			return nil, "", err
		}
		if busy {
			return nil, "window_buffer", nil
		}
	}
	rows, err := tx.Query(ctx, s.sql.readSegments, pid, cur.cursor, limit)
	if err != nil {
		return nil, "", err
	}
	type seg struct {
		first   int64
		count   int
		created time.Time
		frames  []byte
	}
	var segs []seg
	for rows.Next() {
		var sg seg
		if err := rows.Scan(&sg.first, &sg.count, &sg.created, &sg.frames); err != nil {
			rows.Close()
			return nil, "", err
		}
		segs = append(segs, sg)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	var now time.Time
	if q.delayed > 0 {
		if err := tx.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
			return nil, "", err
		}
	}
	var out []reginatype.PoppedMessage
segments:
	for _, sg := range segs {
		frames, err := partition.DecodeSegment(sg.frames, sg.count)
		if err != nil {
			return nil, "", fmt.Errorf("segment %d: %w", sg.first, err)
		}
		for k := range frames {
			off := sg.first + int64(k)
			if off < cur.cursor {
				continue
			}
			if q.delayed > 0 && frames[k].Created().Add(time.Duration(q.delayed)*time.Second).After(now) {
				break segments // FIFO: nothing after an invisible message either
			}
			out = append(out, reginatype.PoppedMessage{Frame: frames[k], Offset: off, PartitionID: c.ID, PartitionName: c.Name})
			if len(out) >= limit {
				break segments
			}
		}
	}
	if len(out) == 0 {
		return nil, "", nil
	}
	from, to := out[0].Offset, out[len(out)-1].Offset+1
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
