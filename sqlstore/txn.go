package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// maxTxnAttempts bounds the retries of a transaction after a deadlock or a
// serialization failure reported by PostgreSQL.
const maxTxnAttempts = 4

type txnGroup struct {
	queue, part string
	ref         reginatype.PartitionRef
	items       []int // indexes into pushes
}

// Transaction runs pushes and acks in one PostgreSQL transaction: all of it
// commits or none. Pushes take the same partition row lock and run the same
// window probe as a plain push (queen.push_segment); a duplicate aborts the
// whole transaction with a *DuplicateError. Partition rows are locked in
// partition-id order and cursor rows after them, so two transactions cannot
// deadlock each other; a deadlock or serialization failure reported anyway is
// retried here, up to maxTxnAttempts times.
func (s *Store) Transaction(ctx context.Context, pushes []reginatype.TxnPush, acks []reginatype.TxnAck, requiredLeases []partition.UUID) (reginatype.TxnResult, error) {
	defer s.citusChanged() // on Citus: an empty cache of pop candidates is filled again
	var res reginatype.TxnResult
	var err error
	for attempt := 1; ; attempt++ {
		res, err = s.transactionOnce(ctx, pushes, acks, requiredLeases)
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
	var dup *reginatype.DuplicateError
	var ackErr *reginatype.TxnAckError
	if err != nil && !errors.As(err, &dup) && !errors.As(err, &ackErr) && !errors.Is(err, reginatype.ErrLeaseNotLive) {
		return res, fmt.Errorf("transaction: %w", classify(err))
	}
	return res, err
}

func (s *Store) transactionOnce(ctx context.Context, pushes []reginatype.TxnPush, acks []reginatype.TxnAck, leases []partition.UUID) (reginatype.TxnResult, error) {
	var res reginatype.TxnResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		res = reginatype.TxnResult{}
		groups, err := s.txnGroups(ctx, tx, pushes)
		if err != nil {
			return err
		}
		if len(leases) > 0 {
			ids := make([][16]byte, len(leases))
			for i, l := range leases {
				ids[i] = l
			}
			var live int
			if err := tx.QueryRow(ctx, s.sql.liveLeases, ids).Scan(&live); err != nil {
				return err
			}
			if live < len(uniqueUUIDs(leases)) {
				return reginatype.ErrLeaseNotLive
			}
		}
		for _, g := range groups {
			if err := s.txnPushGroup(ctx, tx, g, pushes, false, &res.Pushes, &res.Written); err != nil {
				return err
			}
		}
		return s.txnAcks(ctx, tx, acks, &res)
	})
	return res, err
}

func uniqueUUIDs(us []partition.UUID) map[partition.UUID]bool {
	m := make(map[partition.UUID]bool, len(us))
	for _, u := range us {
		m[u] = true
	}
	return m
}

// txnPushGroup writes one partition's items through push_segment (lock,
// probe, insert) inside the transaction. A duplicate of a stored message
// aborts with a *DuplicateError, unless dupOK: then it is reported in its
// result (Duplicate, the original's id) and the other items are written.
func (s *Store) txnPushGroup(ctx context.Context, tx pgx.Tx, g *txnGroup, pushes []reginatype.TxnPush, dupOK bool,
	results *[]reginatype.TxnPushResult, written *[]reginatype.TxnWrite) error {
	for range 2 {
		ids := make([]string, len(g.items))
		for k, i := range g.items {
			ids[k] = pushes[i].TransactionID
		}
		var leader, leaders []int
		if g.ref.WindowSeconds != 0 {
			leader, leaders = partition.Collapse(ids, nil, nil)
		} else {
			for k := range ids {
				leader = append(leader, k)
				leaders = append(leaders, k)
			}
		}
		b := &reginatype.PushBatch{Partition: g.ref.ID, WindowHint: g.ref.WindowSeconds, Watermark: reginatype.NoWatermark}
		msgIDs := make([]partition.UUID, len(ids))
		// fps[k] is item k's payload fingerprint, when the queue checks them.
		var fps []int64
		if g.ref.ChecksPayloads() {
			fps = make([]int64, len(ids))
			for k, i := range g.items {
				fps[k] = s.fingerprint(g.ref.Encrypt, pushes[i].Payload)
			}
			b.Fingerprints = make([]int64, 0, len(leaders))
		}
		now := nowMicros()
		for _, k := range leaders {
			p := &pushes[g.items[k]]
			msgIDs[k] = partition.NewV7()
			body := partition.Body{CreatedAt: now, TransactionID: p.TransactionID, TraceID: p.TraceID,
				HasTrace: p.HasTrace, Payload: p.Payload, ProducerSub: p.ProducerSub}
			// Sealed after the fingerprint (fps, of the plaintext).
			if err := s.seal(&body, g.ref, g.queue); err != nil {
				return err
			}
			b.Add(partition.HashTxID(p.TransactionID), msgIDs[k], &body)
			if fps != nil {
				b.Fingerprints = append(b.Fingerprints, fps[k])
			}
		}
		var (
			status  string
			win     int
			first   int64
			created pgTime
			dupIdx  []int32
			dupIDs  [][]byte
			dupAt   []pgTime
			check   string
			dupFps  []*int64
		)
		err := s.pushRow(tx.QueryRow(ctx, s.sql.pushSegment, [16]byte(b.Partition), b.WindowHint, b.Watermark,
			b.Hashes, b.IDs, b.Bodies, b.Ends, b.Fingerprints)).
			Scan(&status, &win, &first, &created, &dupIdx, &dupIDs, &dupAt, &check, &dupFps)
		if err != nil {
			return err
		}
		switch status {
		case "ok":
		case "window_changed":
			g.ref.WindowSeconds = win
			g.ref.PayloadCheck = check
			continue
		case "missing":
			return fmt.Errorf("partition %s/%s vanished during the transaction", g.queue, g.part)
		default:
			return fmt.Errorf("push_segment: unexpected status %q", status)
		}
		if len(dupIdx) > 0 && !dupOK {
			k := leaders[dupIdx[0]-1]
			var orig partition.UUID
			copy(orig[:], dupIDs[0])
			e := &reginatype.DuplicateError{Queue: g.queue, Partition: g.part, TransactionID: ids[k], Original: orig}
			if fps != nil && len(dupFps) > 0 {
				e.Payload = partition.ComparePayload(fps[k], dupFps[0])
				e.Conflict = e.Payload == partition.PayloadDifferent && check == partition.PayloadCheckReject
			}
			return e
		}
		// Leaders found stored already (dupOK only): their original ids, and
		// (payload check on) their originals' fingerprints.
		stored := make(map[int]partition.UUID, len(dupIdx))
		storedFp := make(map[int]*int64, len(dupIdx))
		for j, d := range dupIdx {
			var orig partition.UUID
			copy(orig[:], dupIDs[j])
			stored[leaders[d-1]] = orig
			if j < len(dupFps) {
				storedFp[leaders[d-1]] = dupFps[j]
			}
		}
		// Each repeat is compared with the message its result names: its
		// leader, or the leader's stored original. Under reject a different
		// payload aborts the transaction.
		match := make([]partition.PayloadMatch, len(ids))
		if fps != nil {
			for k, l := range leader {
				orig, dup := stored[l]
				if l == k && !dup {
					continue
				}
				ref, named := &fps[l], msgIDs[l]
				if dup {
					ref, named = storedFp[l], orig
				}
				match[k] = partition.ComparePayload(fps[k], ref)
				if match[k] == partition.PayloadDifferent && check == partition.PayloadCheckReject {
					return &reginatype.DuplicateError{Queue: g.queue, Partition: g.part, TransactionID: ids[k],
						Original: named, Payload: match[k], Conflict: true}
				}
			}
		}
		if len(stored) < len(leaders) {
			w := reginatype.TxnWrite{Queue: g.queue, PartitionID: g.ref.ID, WindowSeconds: win, FirstOffset: first, CreatedAt: created}
			for _, k := range leaders {
				if _, dup := stored[k]; !dup {
					w.Hashes = append(w.Hashes, partition.HashTxID(ids[k]))
				}
			}
			*written = append(*written, w)
		}
		for k, i := range g.items {
			l := leader[k]
			r := reginatype.TxnPushResult{Index: pushes[i].Index, MessageID: msgIDs[l],
				PartitionID: g.ref.ID, Queue: g.queue, Duplicate: l != k, Payload: match[k]}
			if orig, dup := stored[l]; dup {
				r.MessageID, r.Duplicate = orig, true
			}
			*results = append(*results, r)
		}
		return nil
	}
	return fmt.Errorf("push %s/%s: deduplication switched on or off twice during the transaction", g.queue, g.part)
}

// txnAcks applies the acks, one partition and group at a time in a fixed
// order, with the plain ack's logic. Any failed ack aborts the transaction.
func (s *Store) txnAcks(ctx context.Context, tx pgx.Tx, acks []reginatype.TxnAck, res *reginatype.TxnResult) error {
	type key struct {
		p     partition.UUID
		group string
	}
	by := make(map[key][]int)
	var keys []key
	for i := range acks {
		k := key{acks[i].PartitionID, acks[i].Group}
		if k.group == "" {
			k.group = reginatype.QueueModeGroup
		}
		if _, ok := by[k]; !ok {
			keys = append(keys, k)
		}
		by[k] = append(by[k], i)
	}
	sort.Slice(keys, func(a, b int) bool {
		if c := string(keys[a].p[:]); c != string(keys[b].p[:]) {
			return c < string(keys[b].p[:])
		}
		return keys[a].group < keys[b].group
	})
	items := make([]reginatype.AckItem, len(acks))
	for i := range acks {
		items[i] = acks[i].AckItem
	}
	res.Acks = make([]reginatype.AckResult, len(acks))
	for _, k := range keys {
		if err := s.ackPartition(ctx, tx, k.group, k.p, items, by[k], res.Acks); err != nil {
			return err
		}
	}
	for i := range acks {
		if !res.Acks[i].Success {
			return &reginatype.TxnAckError{Index: acks[i].Index, TransactionID: acks[i].TransactionID, Reason: res.Acks[i].Error}
		}
	}
	return nil
}

// txnGroups resolves (and creates) the partitions that pushes go to and
// groups the pushes by partition, in partition-id order: the order in which
// transactions and stream cycles take partition row locks.
func (s *Store) txnGroups(ctx context.Context, tx pgx.Tx, pushes []reginatype.TxnPush) ([]*txnGroup, error) {
	byKey := make(map[[2]string]*txnGroup)
	var groups []*txnGroup
	for i := range pushes {
		k := [2]string{pushes[i].Queue, pushes[i].Partition}
		g := byKey[k]
		if g == nil {
			g = &txnGroup{queue: k[0], part: k[1]}
			ns, task := DeriveNamespaceTask(k[0])
			if err := tx.QueryRow(ctx, s.sql.ensurePartition, k[0], k[1], ns, task).
				Scan((*uuidScanner)(&g.ref.ID), (*uuidScanner)(&g.ref.QueueID), &g.ref.WindowSeconds,
					&g.ref.PayloadCheck, &g.ref.Encrypt); err != nil {
				return nil, err
			}
			byKey[k] = g
			groups = append(groups, g)
		}
		g.items = append(g.items, i)
	}
	sort.Slice(groups, func(a, b int) bool {
		return string(groups[a].ref.ID[:]) < string(groups[b].ref.ID[:])
	})
	return groups, nil
}
