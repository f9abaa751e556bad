package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// EnsurePartition returns the partition named partName of queue, creating the
// queue (with default options and a namespace/task derived from its dotted
// name) and the partition when they do not exist, with the queue's window and
// encryption flag.
func (s *Store) EnsurePartition(ctx context.Context, queue, partName string) (reginatype.PartitionRef, error) {
	ns, task := DeriveNamespaceTask(queue)
	var ref reginatype.PartitionRef
	err := s.pool.QueryRow(ctx, s.sql.ensurePartition, queue, partName, ns, task).
		Scan((*uuidScanner)(&ref.ID), (*uuidScanner)(&ref.QueueID), &ref.WindowSeconds, &ref.PayloadCheck, &ref.Encrypt)
	if err != nil {
		return ref, fmt.Errorf("ensure partition %s/%s: %w", queue, partName, classify(err))
	}
	return ref, nil
}

// DeriveNamespaceTask returns the namespace (text before the first '.', or the
// whole name) and task (the second dot-separated segment, or "") Queen gives a
// queue created by a push.
func DeriveNamespaceTask(queue string) (namespace, task string) {
	for i := range len(queue) {
		if queue[i] == '.' {
			rest := queue[i+1:]
			for j := range len(rest) {
				if rest[j] == '.' {
					return queue[:i], rest[:j]
				}
			}
			return queue[:i], rest
		}
	}
	return queue, ""
}

// Push runs the push transaction for one batch: lock the partition row, probe
// the window for the batch's hashes (from the watermark up), and, unless every
// item is a duplicate, allocate offsets and insert one segment and one
// log_txns row. It is one round trip; the statement is the transaction.
//
// When b.ExpectDuplicates is set (and the window is on), Push first runs the
// read-only probe (queen.push_dups): if it finds every item in the window it
// answers from that snapshot (res.Unlocked), without the row lock, a
// transaction id or WAL; otherwise the locked transaction runs as above.
//
// Errors: ErrPartitionMissing, ErrWindowChanged (with the result's
// WindowSeconds set), ErrOutcomeUnknown, ErrUnavailable, or a PostgreSQL
// error (nothing committed).
func (s *Store) Push(ctx context.Context, b *reginatype.PushBatch) (reginatype.PushResult, error) {
	var res reginatype.PushResult
	// Acquire first: a new connection moves the epoch on (conn.go) before
	// it runs anything, so a watermark computed under another epoch (what
	// the cache learned from another server) is never applied here.
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return res, classify(err)
	}
	defer conn.Release()
	res.Epoch = s.Epoch()
	watermark := b.Watermark
	if res.Epoch != b.Epoch {
		watermark = reginatype.NoWatermark
	}
	if provable(b, res.Epoch) {
		var proven [1]bool
		one := [1]*reginatype.PushBatch{b}
		var r [1]reginatype.PushResult
		if err := s.proveDuplicates(ctx, conn, res.Epoch, one[:], r[:], proven[:]); err != nil {
			return res, classify(err)
		}
		if proven[0] {
			return r[0], nil
		}
	} else if b.ExpectDuplicates && b.WindowHint > 0 {
		status, err := scanPush(conn.QueryRow(ctx, s.sql.pushDups, uuidArg(b.Partition), b.WindowHint, watermark,
			b.Hashes, b.Fingerprints), &res)
		if err != nil {
			return res, classify(err)
		}
		if status == "ok" && len(res.DupIndex) == len(b.Hashes) {
			res.Unlocked = true
			return res, nil
		}
		epoch := res.Epoch
		res = reginatype.PushResult{Epoch: epoch}
	}
	var status string
	err = s.retryMissingSidecarChild(ctx, func() error {
		var err error
		status, err = scanPush(conn.QueryRow(ctx, s.sql.pushSegment, uuidArg(b.Partition), b.WindowHint, watermark,
			b.Hashes, b.IDs, b.Bodies, b.Ends, b.Fingerprints), &res)
		return err
	})
	if err != nil {
		return res, classify(err)
	}
	switch status {
	case "ok":
	case "missing":
		return res, reginatype.ErrPartitionMissing
	case "window_changed":
		return res, reginatype.ErrWindowChanged
	default:
		return res, fmt.Errorf("push_segment: unexpected status %q", status)
	}
	return res, nil
}

// provable reports whether b may take the packed read-only duplicate path
// on a connection of epoch: it expects duplicates, its window is on, and the
// cache named every hash's original segment under that same epoch (what the
// cache learned from another server promises nothing here).
func provable(b *reginatype.PushBatch, epoch uint64) bool {
	return b.ExpectDuplicates && b.WindowHint > 0 && len(b.Hashes) > 0 &&
		len(b.Originals) == len(b.Hashes) && b.Epoch == epoch
}

// proveDuplicates runs queen.push_dups_packed once for every batch of bs that
// is provable (the others are left alone) and, for each one the snapshot
// proves all duplicate, sets proven[i] and res[i] (Unlocked, with the
// originals' ids, times and fingerprints, as push_segment would answer).
// Nothing is written, so on an error nothing is proven and the caller may
// take the locked path (or report the error).
func (s *Store) proveDuplicates(ctx context.Context, conn *pgxpool.Conn, epoch uint64, bs []*reginatype.PushBatch,
	res []reginatype.PushResult, proven []bool) error {
	var (
		parts   [][16]byte
		hints   []int32
		hasFps  []bool
		counts  []int32
		batch   []int32
		hashes  [][]byte
		origs   []int64
		segK    []int32
		segOffs []int64
		which   []int // which[k-1] is the index in bs of the statement's batch k
	)
	for i, b := range bs {
		if !provable(b, epoch) {
			continue
		}
		which = append(which, i)
		k := int32(len(which))
		parts = append(parts, b.Partition)
		hints = append(hints, int32(b.WindowHint))
		hasFps = append(hasFps, b.Fingerprints != nil)
		counts = append(counts, int32(len(b.Hashes)))
		for j, o := range b.Originals {
			batch = append(batch, k)
			// A retry usually repeats one earlier push: runs of items
			// name one segment (SQL drops the repeats that remain).
			if j == 0 || o != b.Originals[j-1] {
				segK = append(segK, k)
				segOffs = append(segOffs, o)
			}
		}
		hashes = append(hashes, b.Hashes...)
		origs = append(origs, b.Originals...)
	}
	if len(which) == 0 {
		return nil
	}
	rows, err := conn.Query(ctx, s.sql.pushDupsPacked, parts, hints, hasFps, counts, batch, hashes, origs, segK, segOffs)
	if err != nil {
		return err
	}
	defer rows.Close()
	var (
		got    []reginatype.PushResult
		gotIdx []int
	)
	for rows.Next() {
		var (
			k       int32
			ok      bool
			win     *int32
			check   *string
			created time.Time
			ids     []byte
			dupAt   []time.Time
			dupFps  []*int64
		)
		if err := rows.Scan(&k, &ok, &win, &check, &created, &ids, &dupAt, &dupFps); err != nil {
			return err
		}
		if k < 1 || int(k) > len(which) {
			return fmt.Errorf("push_dups_packed: batch %d of %d", k, len(which))
		}
		i := which[k-1]
		n := len(bs[i].Hashes)
		if !ok {
			continue
		}
		if win == nil || check == nil || len(ids) != 16*n || len(dupAt) != n || len(dupFps) != n {
			return fmt.Errorf("push_dups_packed: batch %d proven with %d ids, %d times, %d fingerprints for %d items",
				k, len(ids)/16, len(dupAt), len(dupFps), n)
		}
		r := reginatype.PushResult{WindowSeconds: int(*win), PayloadCheck: *check, FirstOffset: -1, CreatedAt: created,
			DupIndex: make([]int, n), DupOriginal: make([]partition.UUID, n), DupCreated: dupAt, DupFingerprint: dupFps,
			Epoch: epoch, Unlocked: true}
		for j := range n {
			r.DupIndex[j] = j
			copy(r.DupOriginal[j][:], ids[16*j:])
		}
		got = append(got, r)
		gotIdx = append(gotIdx, i)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for n, i := range gotIdx {
		res[i], proven[i] = got[n], true
	}
	return nil
}

// scanPush reads one row of push_segment's (or push_dups') result into res
// and returns its status.
func scanPush(row pgx.Row, res *reginatype.PushResult) (string, error) {
	var (
		status  string
		dupIdx  []int32
		dupIDs  [][]byte
		dupAt   []time.Time
		dupFps  []*int64
		created time.Time
	)
	err := row.Scan(&status, &res.WindowSeconds, &res.FirstOffset, &created, &dupIdx, &dupIDs, &dupAt,
		&res.PayloadCheck, &dupFps)
	if err != nil {
		return "", err
	}
	res.CreatedAt = created
	if len(dupIdx) != len(dupIDs) || len(dupIdx) != len(dupAt) || len(dupIdx) != len(dupFps) {
		return "", errors.New("push: dup_idx, dup_ids, dup_created and dup_fps differ in length")
	}
	if len(dupIdx) > 0 {
		res.DupIndex = make([]int, len(dupIdx))
		res.DupOriginal = make([]partition.UUID, len(dupIdx))
		res.DupCreated = dupAt
		res.DupFingerprint = dupFps
		for k, i := range dupIdx {
			res.DupIndex[k] = int(i) - 1
			copy(res.DupOriginal[k][:], dupIDs[k])
		}
	}
	return status, nil
}

// uuidArg passes a partition.UUID as a PostgreSQL uuid.
func uuidArg(u partition.UUID) [16]byte { return u }

// uuidScanner scans a PostgreSQL uuid into a partition.UUID.
type uuidScanner partition.UUID

// ScanUUID implements pgtype.UUIDScanner.
func (u *uuidScanner) ScanUUID(v pgtypeUUID) error {
	if !v.Valid {
		return errors.New("unexpected NULL uuid")
	}
	*u = v.Bytes
	return nil
}
