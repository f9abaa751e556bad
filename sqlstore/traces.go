package sqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// traceQueries is the SQL of the trace events (queen.traces).
type traceQueries struct {
	covering, insert, ofMessage, byNameCount, byName, segments, names, sweep, deleteOf string
}

// coveringSegment joins the segment that stores offset t.msg_offset of
// partition t.partition_id: the last one starting at or below it (one
// primary-key probe), kept only when it reaches the offset. Events whose
// message is no longer stored drop out of every read.
const coveringSegment = `
	JOIN LATERAL (SELECT s.first_offset, s.frame_count FROM queen.segments s
	               WHERE s.partition_id = t.partition_id AND s.first_offset <= t.msg_offset
	               ORDER BY s.first_offset DESC LIMIT 1) s ON s.first_offset + s.frame_count > t.msg_offset`

func newTraceQueries(schema string) traceQueries {
	q := traceQueries{
		// Whether the segment covering the offset holds it, and not as a
		// tombstone (a deleted message: the zero id in the id block).
		covering: `SELECT s.first_offset + s.frame_count > $2
			       AND substring(s.frames FROM (($2 - s.first_offset) * 16 + 1)::integer FOR 16) <> '\x00000000000000000000000000000000'::bytea
			  FROM queen.segments s
			 WHERE s.partition_id = $1 AND s.first_offset <= $2 ORDER BY s.first_offset DESC LIMIT 1`,
		insert: `INSERT INTO queen.traces (partition_id, msg_offset, id, transaction_id, event_type, consumer_group,
			       worker_id, data, trace_names)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING created_at`,
		ofMessage: `SELECT t.id, t.msg_offset, t.event_type, t.consumer_group, t.worker_id, t.data, t.trace_names,
			       t.created_at
			  FROM queen.traces t` + coveringSegment + `
			 WHERE t.partition_id = $1 AND t.transaction_id = $2
			 ORDER BY t.created_at, t.id`,
		byNameCount: `SELECT count(*) FROM queen.traces t` + coveringSegment + `
			 WHERE t.trace_names @> ARRAY[$1::text]`,
		byName: `SELECT t.id, t.partition_id, t.msg_offset, t.transaction_id, t.event_type, t.consumer_group,
			       t.worker_id, t.data, t.trace_names, t.created_at, q.name, p.name, s.first_offset, s.frame_count
			  FROM queen.traces t` + coveringSegment + `
			  JOIN queen.partitions p ON p.id = t.partition_id
			  JOIN queen.queues q ON q.id = p.queue_id
			 WHERE t.trace_names @> ARRAY[$1::text]
			 ORDER BY t.created_at, t.id LIMIT $2 OFFSET $3`,
		segments: `SELECT k.pid, k.first, s.frames FROM unnest($1::uuid[], $2::bigint[]) AS k(pid, first)
			  JOIN queen.segments s ON s.partition_id = k.pid AND s.first_offset = k.first`,
		// One row per name with the number of names in all (a window over
		// the groups).
		names: `SELECT n.name, count(*), count(DISTINCT t.transaction_id), max(t.created_at), count(*) OVER ()
			  FROM queen.traces t CROSS JOIN LATERAL unnest(t.trace_names) AS n(name)
			 GROUP BY n.name
			 ORDER BY max(t.created_at) DESC, n.name LIMIT $1 OFFSET $2`,
		// Events of messages retention removed: below the partition's oldest
		// stored offset (retention removes a prefix).
		sweep: `DELETE FROM queen.traces t WHERE t.partition_id = $1 AND t.msg_offset < coalesce(
			    (SELECT s.first_offset FROM queen.segments s WHERE s.partition_id = $1 ORDER BY s.first_offset LIMIT 1),
			    (SELECT p.next_offset FROM queen.partitions p WHERE p.id = $1), 0)`,
		deleteOf: `DELETE FROM queen.traces WHERE partition_id = ANY($1::uuid[])`,
	}
	for _, p := range []*string{&q.covering, &q.insert, &q.ofMessage, &q.byNameCount, &q.byName, &q.segments,
		&q.names, &q.sweep, &q.deleteOf} {
		*p = qualify(*p, schema)
	}
	return q
}

// AddTrace records ev (its ID, PartitionID, TransactionID, EventType,
// ConsumerGroup, WorkerID, Data and Names set) on the stored message of the
// partition with the transaction id: the newest copy the hash sidecar knows,
// as GetMessage. It fills ev.Offset and ev.CreatedAt; found is false (and
// nothing is written) when no such message is stored.
func (s *Store) AddTrace(ctx context.Context, ev *reginatype.TraceEvent) (found bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		found = false
		off, ok, err := s.newestOffset(ctx, tx, ev.PartitionID, ev.TransactionID)
		if err != nil || !ok {
			return err
		}
		var stored bool
		err = tx.QueryRow(ctx, s.sql.traces.covering, uuidArg(ev.PartitionID), off).Scan(&stored)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && !stored) {
			return nil
		}
		if err != nil {
			return err
		}
		names := ev.Names
		if names == nil {
			names = []string{}
		}
		if err := tx.QueryRow(ctx, s.sql.traces.insert, uuidArg(ev.PartitionID), off, uuidArg(ev.ID), ev.TransactionID,
			ev.EventType, ev.ConsumerGroup, ev.WorkerID, ev.Data, names).Scan(&ev.CreatedAt); err != nil {
			return err
		}
		ev.Offset, found = off, true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("add trace to %s/%s: %w", ev.PartitionID, ev.TransactionID, classify(err))
	}
	return found, nil
}

// Traces returns every event of the stored messages of a partition with the
// transaction id, oldest first.
func (s *Store) Traces(ctx context.Context, partitionID partition.UUID, txID string) ([]reginatype.TraceEvent, error) {
	rows, err := s.pool.Query(ctx, s.sql.traces.ofMessage, uuidArg(partitionID), txID)
	if err != nil {
		return nil, fmt.Errorf("traces of %s/%s: %w", partitionID, txID, classify(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (reginatype.TraceEvent, error) {
		ev := reginatype.TraceEvent{PartitionID: partitionID, TransactionID: txID}
		err := r.Scan((*uuidScanner)(&ev.ID), &ev.Offset, &ev.EventType, &ev.ConsumerGroup, &ev.WorkerID, &ev.Data,
			&ev.Names, &ev.CreatedAt)
		return ev, err
	})
	if err != nil {
		return nil, fmt.Errorf("traces of %s/%s: %w", partitionID, txID, classify(err))
	}
	return out, nil
}

// TracesByName returns a page of the events carrying the trace name, oldest
// first, each with its message's queue, partition and stored payload, and
// the number of such events in all. Events whose message is no longer stored
// are left out.
func (s *Store) TracesByName(ctx context.Context, name string, limit, offset int) ([]reginatype.TraceEvent, int64, error) {
	var (
		out   []reginatype.TraceEvent
		total int64
	)
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			out = nil
			if err := tx.QueryRow(ctx, s.sql.traces.byNameCount, name).Scan(&total); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, s.sql.traces.byName, name, limit, offset)
			if err != nil {
				return err
			}
			type segKey struct {
				pid   partition.UUID
				first int64
			}
			segs := map[segKey]int{} // -> frame count
			var firsts []int64
			out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (reginatype.TraceEvent, error) {
				var (
					ev    reginatype.TraceEvent
					first int64
					count int
				)
				err := r.Scan((*uuidScanner)(&ev.ID), (*uuidScanner)(&ev.PartitionID), &ev.Offset, &ev.TransactionID,
					&ev.EventType, &ev.ConsumerGroup, &ev.WorkerID, &ev.Data, &ev.Names, &ev.CreatedAt, &ev.Queue,
					&ev.Partition, &first, &count)
				segs[segKey{ev.PartitionID, first}] = count
				firsts = append(firsts, first)
				return ev, err
			})
			if err != nil || len(out) == 0 {
				return err
			}
			// The messages' payloads: each segment read once.
			pids, starts := make([][16]byte, 0, len(segs)), make([]int64, 0, len(segs))
			for k := range segs {
				pids, starts = append(pids, k.pid), append(starts, k.first)
			}
			rows, err = tx.Query(ctx, s.sql.traces.segments, pids, starts)
			if err != nil {
				return err
			}
			frames := map[segKey][]partition.Frame{}
			for rows.Next() {
				var (
					k   segKey
					raw []byte
				)
				if err := rows.Scan((*uuidScanner)(&k.pid), &k.first, &raw); err != nil {
					rows.Close()
					return err
				}
				fs, err := partition.DecodeSegment(raw, segs[k])
				if err != nil {
					rows.Close()
					return fmt.Errorf("segment %d: %w", k.first, err)
				}
				frames[k] = fs
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			for i := range out {
				ev := &out[i]
				if fs := frames[segKey{ev.PartitionID, firsts[i]}]; ev.Offset-firsts[i] < int64(len(fs)) {
					b := &fs[ev.Offset-firsts[i]].Body
					s.revealForView(b)
					ev.MessagePayload = b.Payload
				}
			}
			return nil
		})
	if err != nil {
		return nil, 0, fmt.Errorf("traces named %q: %w", name, classify(err))
	}
	return out, total, nil
}

// TraceNames returns a page of the trace names, most recently seen first,
// and the number of distinct names.
func (s *Store) TraceNames(ctx context.Context, limit, offset int) ([]reginatype.TraceName, int64, error) {
	rows, err := s.pool.Query(ctx, s.sql.traces.names, limit, offset)
	if err != nil {
		return nil, 0, fmt.Errorf("trace names: %w", classify(err))
	}
	var total int64
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (reginatype.TraceName, error) {
		var n reginatype.TraceName
		err := r.Scan(&n.Name, &n.Events, &n.Messages, &n.LastSeen, &total)
		return n, err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("trace names: %w", classify(err))
	}
	if len(out) == 0 && offset > 0 {
		// The page is past the end: count the names on their own.
		err := s.pool.QueryRow(ctx, qualify(`SELECT count(DISTINCT n) FROM queen.traces t
			CROSS JOIN LATERAL unnest(t.trace_names) AS n`, s.schema)).Scan(&total)
		if err != nil {
			return nil, 0, fmt.Errorf("trace names: %w", classify(err))
		}
	}
	return out, total, nil
}

// sweepTraces deletes the trace events of a partition's messages that
// retention removed.
func (s *Store) sweepTraces(ctx context.Context, partitionID [16]byte) (int64, error) {
	tag, err := s.pool.Exec(ctx, s.sql.traces.sweep, partitionID)
	if err != nil {
		return 0, classify(err)
	}
	return tag.RowsAffected(), nil
}
