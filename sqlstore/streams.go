package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// streamQueries holds the SQL of the streams API.
type streamQueries struct {
	insertQuery, lockQuery, updateQuery, resetState, shareQuery, shardLock,
	upsertState, deleteState, readState, insertConsumer string
}

func newStreamQueries(schema string) streamQueries {
	q := streamQueries{
		insertQuery: `INSERT INTO queen.streams_queries (id, name, source_queue, sink_queue, config_hash)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO NOTHING`,
		lockQuery: `SELECT id, config_hash FROM queen.streams_queries WHERE name = $1 FOR UPDATE`,
		updateQuery: `UPDATE queen.streams_queries SET source_queue = $2, sink_queue = $3, config_hash = $4,
			       updated_at = now() WHERE id = $1`,
		resetState: `DELETE FROM queen.streams_state WHERE query_id = $1`,
		// A cycle holds the query row in KEY SHARE: cycles do not block each
		// other, a reset (FOR UPDATE) waits for them and they for it.
		shareQuery: `SELECT true FROM queen.streams_queries WHERE id = $1 FOR KEY SHARE`,
		// The per-shard lock: cycles of one (query, partition) never
		// interleave. The two-key form keeps it apart from the migration lock.
		shardLock: `SELECT pg_advisory_xact_lock(hashtext('regina.streams.' || $1::text),
			       hashtext($2::text || '/' || $3::text))`,
		upsertState: `INSERT INTO queen.streams_state (partition_id, query_id, key, value)
			SELECT $1, $2, u.k, u.v::jsonb FROM unnest($3::text[], $4::text[]) AS u(k, v)
			ON CONFLICT (partition_id, query_id, key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()`,
		deleteState: `DELETE FROM queen.streams_state
			 WHERE partition_id = $1 AND query_id = $2 AND key = ANY($3::text[])`,
		readState: `SELECT key, value::text, updated_at FROM queen.streams_state
			 WHERE partition_id = $1 AND query_id = $2
			   AND ($3::text[] IS NULL OR key = ANY($3::text[]))
			   AND ($4::text = '' OR starts_with(key, $4::text))
			   AND ($5::numeric IS NULL OR CASE WHEN jsonb_typeof(value -> 'windowEnd') = 'number'
			                                    THEN (value ->> 'windowEnd')::numeric <= $5::numeric
			                                    ELSE false END)
			 ORDER BY key`,
		// A cycle's ack on a (partition, group) without consumer state
		// creates it at the acked message, unleased (started, and in the
		// ready index when the partition holds more).
		insertConsumer: `INSERT INTO queen.consumers (partition_id, consumer_group, queue_id, cursor_offset,
			       known_end, started)
			SELECT $1, $2, p.queue_id, $3, p.next_offset, true FROM queen.partitions p WHERE p.id = $1`,
	}
	for _, p := range []*string{&q.insertQuery, &q.lockQuery, &q.updateQuery, &q.resetState, &q.shareQuery,
		&q.upsertState, &q.deleteState, &q.readState, &q.insertConsumer} {
		*p = qualify(*p, schema)
	}
	return q
}

// RegisterStream registers a stream query by name (see
// reginatype.StreamRegistration). Registrations of one name serialise on its
// row: of two first registrations exactly one is fresh, and the other
// compares its hash with the first's.
func (s *Store) RegisterStream(ctx context.Context, q reginatype.StreamQuery) (reginatype.StreamRegistration, error) {
	var reg reginatype.StreamRegistration
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		reg = reginatype.StreamRegistration{}
		id := partition.NewV7()
		tag, err := tx.Exec(ctx, s.sql.streams.insertQuery, [16]byte(id), q.Name, q.SourceQueue,
			nullIfEmpty(q.SinkQueue), q.ConfigHash)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			reg.ID, reg.Fresh = id, true
			return nil
		}
		var stored string
		if err := tx.QueryRow(ctx, s.sql.streams.lockQuery, q.Name).Scan((*uuidScanner)(&reg.ID), &stored); err != nil {
			return err
		}
		if stored != q.ConfigHash {
			if !q.Reset {
				reg.Mismatch = true
				return nil
			}
			if _, err := tx.Exec(ctx, s.sql.streams.resetState, [16]byte(reg.ID)); err != nil {
				return err
			}
			reg.Reset = true
		}
		_, err = tx.Exec(ctx, s.sql.streams.updateQuery, [16]byte(reg.ID), q.SourceQueue,
			nullIfEmpty(q.SinkQueue), q.ConfigHash)
		return err
	})
	if err != nil {
		return reg, fmt.Errorf("register stream %q: %w", q.Name, classify(err))
	}
	return reg, nil
}

// StreamState returns the state rows of one shard that pass the filter,
// sorted by key in byte order.
func (s *Store) StreamState(ctx context.Context, f reginatype.StateFilter) ([]reginatype.StateRow, error) {
	var keys any
	if f.HasKeys {
		ks := make([]string, 0, len(f.Keys))
		for _, k := range f.Keys {
			if !hasNUL(k) { // PostgreSQL text cannot hold NUL: no stored key has one
				ks = append(ks, k)
			}
		}
		keys = ks
	}
	if hasNUL(f.Prefix) {
		return []reginatype.StateRow{}, nil
	}
	var ripe any
	if f.Ripe != "" {
		ripe = f.Ripe
	}
	rows, err := s.pool.Query(ctx, s.sql.streams.readState, [16]byte(f.PartitionID), [16]byte(f.QueryID),
		keys, f.Prefix, ripe)
	if err != nil {
		return nil, fmt.Errorf("read stream state: %w", classify(err))
	}
	out := []reginatype.StateRow{}
	for rows.Next() {
		var r reginatype.StateRow
		var v string
		if err := rows.Scan(&r.Key, &v, &r.UpdatedAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read stream state: %w", err)
		}
		r.Value = []byte(v)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read stream state: %w", classify(err))
	}
	return out, nil
}

func hasNUL(s string) bool {
	for i := range len(s) {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

// StreamCycle commits one cycle of a stream query in one PostgreSQL
// transaction: the state operations, the sink pushes and the ack all commit,
// or none does. A failure of the cycle's own (unknown query, message not
// found, lease not live, a value PostgreSQL refuses) is a
// *reginatype.CycleError and nothing was applied.
//
// Lock order, the broker's global one with two locks in front: the query row
// (KEY SHARE), the shard's advisory lock, then partition rows in
// partition-id order (queen.push_segment, as a transaction), then the
// source's cursor row. Pushes, pops, acks and transactions take neither of
// the first two, so no path waits in the other direction. A deadlock or
// serialization failure reported anyway is retried, up to maxTxnAttempts.
func (s *Store) StreamCycle(ctx context.Context, c reginatype.StreamCycle) (reginatype.CycleResult, error) {
	defer s.citusChanged() // on Citus: an empty cache of pop candidates is filled again
	var res reginatype.CycleResult
	var err error
	for attempt := 1; ; attempt++ {
		res, err = s.cycleOnce(ctx, &c)
		var pgErr *pgconn.PgError
		if err != nil && errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001") && attempt < maxTxnAttempts {
			continue
		}
		// No hash sidecar child for the time: rolled back, made, retried.
		if isMissingSidecarChild(err) && attempt < maxTxnAttempts {
			if s.ensureSidecarFrom(ctx, 1, 0) == nil {
				continue
			}
		}
		break
	}
	if err == nil {
		return res, nil
	}
	if _, ok := errors.AsType[*reginatype.CycleError](err); ok {
		return reginatype.CycleResult{Queue: res.Queue}, err
	}
	// A value PostgreSQL refuses (class 22: a NUL in a key, \u0000 in a
	// JSON value, a number out of range) fails this cycle every time.
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && len(pgErr.Code) == 5 && pgErr.Code[:2] == "22" {
		return reginatype.CycleResult{Queue: res.Queue}, &reginatype.CycleError{Reason: "invalid value: " + pgErr.Message}
	}
	return reginatype.CycleResult{}, fmt.Errorf("stream cycle: %w", classify(err))
}

func (s *Store) cycleOnce(ctx context.Context, c *reginatype.StreamCycle) (reginatype.CycleResult, error) {
	var res reginatype.CycleResult
	pid, qid := [16]byte(c.PartitionID), [16]byte(c.QueryID)
	group := c.Group
	if group == "" {
		group = reginatype.QueueModeGroup
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		res = reginatype.CycleResult{}
		var partName string
		var retryLimit int
		err := tx.QueryRow(ctx, s.sql.ackPartitionInfo, pid).Scan(&res.Queue, &partName, &retryLimit)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		var ok bool
		if err := tx.QueryRow(ctx, s.sql.streams.shareQuery, qid).Scan(&ok); errors.Is(err, pgx.ErrNoRows) {
			return &reginatype.CycleError{Reason: "unknown query_id"}
		} else if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, s.sql.streams.shardLock, s.schema, c.QueryID.String(), c.PartitionID.String()); err != nil {
			return err
		}
		if err := s.applyStateOps(ctx, tx, pid, qid, c.Ops); err != nil {
			return err
		}
		res.OpsApplied = len(c.Ops)
		if err := s.cyclePushes(ctx, tx, c.Pushes, &res); err != nil {
			return err
		}
		if c.Ack != nil {
			ar, err := s.cycleAck(ctx, tx, pid, group, c.Ack, c.ReleaseLease)
			if err != nil {
				return err
			}
			res.Ack = ar
		}
		return nil
	})
	return res, err
}

// applyStateOps applies the ops in order. The last op on a key decides its
// fate (an upsert replaces the whole value, a delete removes it), so the
// ops collapse to one DELETE and one upsert of disjoint keys.
func (s *Store) applyStateOps(ctx context.Context, tx pgx.Tx, pid, qid [16]byte, ops []reginatype.StateOp) error {
	last := make(map[string]int, len(ops))
	for i, op := range ops {
		if op.HasKey {
			last[op.Key] = i
		}
	}
	var delKeys, upKeys, upVals []string
	for i, op := range ops {
		if !op.HasKey || last[op.Key] != i {
			continue
		}
		if op.Delete {
			delKeys = append(delKeys, op.Key)
		} else {
			upKeys = append(upKeys, op.Key)
			upVals = append(upVals, string(op.Value))
		}
	}
	if len(delKeys) > 0 {
		if _, err := tx.Exec(ctx, s.sql.streams.deleteState, pid, qid, delKeys); err != nil {
			return err
		}
	}
	if len(upKeys) > 0 {
		if _, err := tx.Exec(ctx, s.sql.streams.upsertState, pid, qid, upKeys, upVals); err != nil {
			return err
		}
	}
	return nil
}

// cyclePushes writes the sink pushes exactly as a transaction does
// (queen.push_segment per partition, partitions in id order), except that a
// duplicate is reported instead of failing the cycle.
func (s *Store) cyclePushes(ctx context.Context, tx pgx.Tx, pushes []reginatype.TxnPush, res *reginatype.CycleResult) error {
	if len(pushes) == 0 {
		return nil
	}
	groups, err := s.txnGroups(ctx, tx, pushes)
	if err != nil {
		return err
	}
	for _, g := range groups {
		if err := s.txnPushGroup(ctx, tx, g, pushes, true, &res.Pushes, &res.Written); err != nil {
			return err
		}
	}
	sort.Slice(res.Pushes, func(a, b int) bool { return res.Pushes[a].Index < res.Pushes[b].Index })
	return nil
}

// Cycle failure texts, as upstream's.
const (
	cycleErrNotFound = "Message not found"
	cycleErrLease    = "Invalid or expired lease"
)

// cycleAck sets the group's cursor on the source partition past the acked
// message, after checking the lease when the ack names one.
func (s *Store) cycleAck(ctx context.Context, tx pgx.Tx, pid [16]byte, group string, a *reginatype.CycleAck,
	release bool) (*reginatype.CycleAckResult, error) {
	var (
		cursor     int64
		leaseID    *[16]byte
		leaseLive  bool
		leaseFrom  *int64
		leaseTo    *int64
		retryCount int
		exists     = true
	)
	err := tx.QueryRow(ctx, s.sql.lockConsumerForAck, pid, group).
		Scan(&cursor, &leaseID, &leaseLive, &leaseFrom, &leaseTo, &retryCount)
	if errors.Is(err, pgx.ErrNoRows) {
		exists = false
	} else if err != nil {
		return nil, err
	}
	h := partition.HashTxID(a.TransactionID)
	rows, err := tx.Query(ctx, s.sql.resolveOffsets, pid, [][]byte{h[:]})
	if err != nil {
		return nil, err
	}
	var offs []int64
	for rows.Next() {
		var k int32
		var off int64
		if err := rows.Scan(&k, &off); err != nil {
			rows.Close()
			return nil, err
		}
		offs = append(offs, off)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(offs) == 0 {
		return nil, &reginatype.CycleError{Reason: cycleErrNotFound}
	}
	// With dedup off an id can be stored more than once: prefer the first
	// one not yet consumed, else the last one.
	slices.Sort(offs)
	off := offs[len(offs)-1]
	for _, o := range offs {
		if o >= cursor {
			off = o
			break
		}
	}
	if a.LeaseID != "" {
		want, perr := partition.ParseUUID(a.LeaseID)
		if perr != nil || !exists || !leaseLive || leaseID == nil || *leaseID != [16]byte(want) {
			return nil, &reginatype.CycleError{Reason: cycleErrLease}
		}
	}
	out := &reginatype.CycleAckResult{Count: a.Count}
	if a.Status == reginatype.AckDLQ {
		if err := s.moveToDLQ(ctx, tx, pid, group, off, a.Error, 0); err != nil {
			return nil, err
		}
		out.Count, out.DLQ, out.LeaseReleased = 0, true, true
		release = true
	} else {
		out.LeaseReleased = release
	}
	// The cursor is set, not advanced: acking an older message moves it back.
	cursor = off + 1
	if !exists {
		_, err = tx.Exec(ctx, s.sql.streams.insertConsumer, pid, group, cursor)
		return out, err
	}
	if release {
		retryCount = 0
	}
	_, err = tx.Exec(ctx, s.sql.updateConsumerAfterAck, pid, group, cursor, release, retryCount)
	return out, err
}
