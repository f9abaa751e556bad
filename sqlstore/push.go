package sqlstore

import (
	"bytes"
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
	if s.citus == nil && provable(b, res.Epoch) {
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
		status, err := scanPush(s.pushRow(conn.QueryRow(ctx, s.sql.pushDups, uuidArg(b.Partition), b.WindowHint, watermark,
			b.Hashes, b.Fingerprints)), &res)
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
		status, err = scanPush(s.pushRow(conn.QueryRow(ctx, s.sql.pushSegment, uuidArg(b.Partition), b.WindowHint, watermark,
			b.Hashes, b.IDs, b.Bodies, b.Ends, b.Fingerprints)), &res)
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

// proveDuplicates proves, in one round trip for all of them, the batches of
// bs that are provable (the others are left alone): it reads every segment
// their items name (queen.push_dups_segments: one key lookup each) and sets
// proven[i] and res[i] (Unlocked, with the originals' ids, stored times and
// fingerprints, as push_segment would answer) for each batch whose every
// item it finds: the partition exists, its window is on and not larger than
// the hint, its payload check agrees with the batch, and each item's hash is
// in the committed in-window log_txns row at the offset the cache named (its
// original is the hash's first position there). Nothing is written, so on an
// error nothing is proven and the caller may take the locked path (or
// report the error).
func (s *Store) proveDuplicates(ctx context.Context, conn *pgxpool.Conn, epoch uint64, bs []*reginatype.PushBatch,
	res []reginatype.PushResult, proven []bool) error {
	if s.citus != nil {
		// push_dups_segments reads several partitions' rows in one
		// statement, which Citus cannot plan: every batch takes
		// push_dups or the locked path, each delegated to its worker.
		return nil
	}
	type segKey struct {
		batch  int
		offset int64
	}
	var (
		parts [][16]byte
		offs  []int64
		index = map[segKey]int{}
	)
	for i, b := range bs {
		if !provable(b, epoch) {
			continue
		}
		for j, o := range b.Originals {
			if j > 0 && o == b.Originals[j-1] {
				continue // a retry usually repeats one earlier push: runs of one segment
			}
			if _, ok := index[segKey{i, o}]; !ok {
				index[segKey{i, o}] = len(offs)
				parts = append(parts, b.Partition)
				offs = append(offs, o)
			}
		}
	}
	if len(offs) == 0 {
		return nil
	}
	segs, err := s.readDupSegments(ctx, conn, parts, offs)
	if err != nil {
		return err
	}
	for i, b := range bs {
		if !provable(b, epoch) {
			continue
		}
		if r, ok := proveBatch(b, epoch, func(j int) *dupSegment { return &segs[index[segKey{i, b.Originals[j]}]] }); ok {
			res[i], proven[i] = r, true
		}
	}
	return nil
}

// dupSegment is one row of queen.push_dups_segments: a segment an item's
// original is in (found false: no row, so nothing in it proves anything).
type dupSegment struct {
	found   bool
	window  int32
	check   string
	now     time.Time
	created time.Time
	hashes  [][]byte
	fps     []*int64
	ids     []byte
	// pos maps a hash to its first position, built for large segments.
	pos map[[16]byte]int
}

// position returns the first position of h in the segment's hashes, -1
// when it holds none.
func (g *dupSegment) position(h []byte) int {
	if len(g.hashes) <= 32 {
		for p, x := range g.hashes {
			if bytes.Equal(x, h) {
				return p
			}
		}
		return -1
	}
	if g.pos == nil {
		g.pos = make(map[[16]byte]int, len(g.hashes))
		for p, x := range g.hashes {
			if len(x) != 16 {
				continue
			}
			if _, seen := g.pos[[16]byte(x)]; !seen {
				g.pos[[16]byte(x)] = p
			}
		}
	}
	if len(h) != 16 {
		return -1
	}
	if p, ok := g.pos[[16]byte(h)]; ok {
		return p
	}
	return -1
}

// readDupSegments runs queen.push_dups_segments: segs[k] is the row of
// (parts[k], offs[k]).
func (s *Store) readDupSegments(ctx context.Context, conn *pgxpool.Conn, parts [][16]byte, offs []int64) ([]dupSegment, error) {
	rows, err := conn.Query(ctx, s.sql.pushDupsSegments, parts, offs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	segs := make([]dupSegment, len(offs))
	for rows.Next() {
		var (
			k int32
			g dupSegment
		)
		if err := rows.Scan(&k, &g.window, &g.check, &g.now, &g.created, &g.hashes, &g.fps, &g.ids); err != nil {
			return nil, err
		}
		if k < 1 || int(k) > len(segs) || segs[k-1].found {
			return nil, fmt.Errorf("push_dups_segments: row %d of %d", k, len(segs))
		}
		g.found = true
		segs[k-1] = g
	}
	return segs, rows.Err()
}

// proveBatch answers b from the segments its items name (seg(j) for item
// j), or reports that they do not prove it all duplicate.
func proveBatch(b *reginatype.PushBatch, epoch uint64, seg func(j int) *dupSegment) (reginatype.PushResult, bool) {
	n := len(b.Hashes)
	r := reginatype.PushResult{FirstOffset: -1, Epoch: epoch, Unlocked: true,
		DupIndex: make([]int, n), DupOriginal: make([]partition.UUID, n), DupCreated: make([]time.Time, n),
		DupFingerprint: make([]*int64, n)}
	for j := range n {
		g := seg(j)
		if !g.found {
			return r, false
		}
		if j == 0 {
			// The same partition's queue for every segment of the batch.
			if int(g.window) > b.WindowHint || (g.check != partition.PayloadCheckOff) != (b.Fingerprints != nil) {
				return r, false // a window larger than the cache answered for, or the check switched
			}
			r.WindowSeconds, r.PayloadCheck, r.CreatedAt = int(g.window), g.check, g.now
		}
		p := g.position(b.Hashes[j])
		if p < 0 {
			return r, false
		}
		r.DupIndex[j] = j
		if len(g.ids) >= 16*(p+1) {
			copy(r.DupOriginal[j][:], g.ids[16*p:])
		} // else the segment is gone: the zero UUID
		r.DupCreated[j] = g.created
		if p < len(g.fps) {
			r.DupFingerprint[j] = g.fps[p]
		}
	}
	return r, true
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
