package sqlstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// hydrateSQL reads, in one statement (one snapshot under READ COMMITTED, no
// row lock), a partition's allocator, its queue's window, the snapshot's
// now() and every log_txns row of the partition inside the window plus the
// cache's 60 s trim margin. The primary key (partition_id, first_offset)
// serves the partition filter and yields the rows in offset order, which the
// truncation in LoadHydration relies on. A partition without rows in the
// window still returns one row (the LEFT JOIN), with NULL log_txns columns.
const hydrateSQL = `SELECT p.next_offset, q.dedup_window_seconds, now(),
		l.first_offset, l.created_at, l.hashes
	  FROM queen.partitions p
	  JOIN queen.queues q ON q.id = p.queue_id
	  LEFT JOIN queen.log_txns l
	         ON l.partition_id = p.id
	        AND l.created_at > now() - make_interval(secs => q.dedup_window_seconds + 60)
	 WHERE p.id = $1
	 ORDER BY l.first_offset`

// LoadHydration reads what the dedup cache needs to start vouching for a
// partition: see Hydration. It reads at most maxHashes hashes (plus the rest
// of the row that crosses the bound; maxHashes <= 0 means no bound), so a
// window too large for the cache's budget is not materialised in memory.
//
// Errors: ErrPartitionMissing when the partition does not exist, a
// classified database error otherwise.
func (s *Store) LoadHydration(ctx context.Context, p partition.UUID, maxHashes int) (reginatype.Hydration, error) {
	var h reginatype.Hydration
	rows, err := s.pool.Query(ctx, s.hydrateSQL(), uuidArg(p))
	if err != nil {
		return h, fmt.Errorf("load hydration: %w", classify(err))
	}
	defer rows.Close()
	var (
		found  bool
		first  *int64
		at     *time.Time
		raw    [][]byte
		hashes int
	)
	for rows.Next() {
		if err := rows.Scan(&h.NextOffset, &h.WindowSeconds, &h.Now, &first, &at, &raw); err != nil {
			return h, fmt.Errorf("load hydration: %w", classify(err))
		}
		found = true
		if first == nil || at == nil {
			continue // the LEFT JOIN found no row in the window
		}
		r := reginatype.HydrateRow{FirstOffset: *first, CreatedAt: *at, Hashes: make([][16]byte, len(raw))}
		for k, b := range raw {
			if len(b) != 16 {
				return h, fmt.Errorf("load hydration: log_txns row at offset %d: hash %d is %d bytes, want 16",
					*first, k, len(b))
			}
			r.Hashes[k] = [16]byte(b)
		}
		h.Rows = append(h.Rows, r)
		hashes += len(raw)
		if maxHashes > 0 && hashes > maxHashes {
			// Every in-window row below this one's end is loaded (offset
			// order): vouch only for that prefix. Closing the rows discards
			// the rest of the result on the wire.
			h.Truncated = true
			h.NextOffset = r.FirstOffset + int64(len(r.Hashes))
			break
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return h, fmt.Errorf("load hydration: %w", classify(err))
	}
	if !found {
		return h, reginatype.ErrPartitionMissing
	}
	return h, nil
}

func (s *Store) hydrateSQL() string { return qualify(hydrateSQL, s.schema) }

// hydrateManyHeadSQL and hydrateManyRowsSQL are LoadHydrations' two
// statements, run in one REPEATABLE READ transaction (one snapshot): the
// partitions' allocators, windows and now(), then every log_txns row of
// those partitions created after now() - ($2 + 60 s), $2 being the largest
// of their windows. The second is one pass over the window's rows for all
// the partitions (a bitmap of the offsets index, or a sequential scan of the
// children inside the window): the rows of partitions pushed concurrently
// interleave in the heap, about one row of a given partition per page, so a
// per-partition read costs a pass over the whole window's heap each.
const (
	hydrateManyHeadSQL = `SELECT p.id, p.next_offset, q.dedup_window_seconds, now()
	  FROM queen.partitions p
	  JOIN queen.queues q ON q.id = p.queue_id
	 WHERE p.id = ANY($1)`
	hydrateManyRowsSQL = `SELECT l.partition_id, l.first_offset, l.created_at, l.hashes
	  FROM queen.log_txns l
	 WHERE l.partition_id = ANY($1)
	   AND l.created_at > now() - make_interval(secs => $2::integer + 60)`
)

// LoadHydrations is LoadHydration for several partitions in one snapshot
// and one pass over the sidecar's window: result i is partition ps[i]'s
// (Missing when it does not exist). Rows come in no particular order (the
// cache sorts them). A partition whose window holds more than maxHashes
// hashes (maxHashes <= 0: no bound) is returned Truncated, without rows, and
// its rows are no longer kept as they arrive. StreamHydrations reads the
// same without holding the rows.
func (s *Store) LoadHydrations(ctx context.Context, ps []partition.UUID, maxHashes int) ([]reginatype.Hydration, error) {
	var out []reginatype.Hydration
	hashes := make([]int, len(ps))
	err := s.StreamHydrations(ctx, ps, func(h []reginatype.Hydration) error {
		out = h
		return nil
	}, func(i int, first int64, at time.Time, hs [][16]byte) error {
		h := &out[i]
		if h.Truncated {
			return nil
		}
		if hashes[i] += len(hs); maxHashes > 0 && hashes[i] > maxHashes {
			h.Truncated, h.Rows = true, nil
			return nil
		}
		h.Rows = append(h.Rows, reginatype.HydrateRow{FirstOffset: first, CreatedAt: at, Hashes: slices.Clone(hs)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = make([]reginatype.Hydration, len(ps))
	}
	return out, nil
}

// StreamHydrations reads what LoadHydrations reads, in one snapshot, without
// holding the rows: heads gets every partition's allocator, window and the
// snapshot's now() (result i for ps[i], Missing when it does not exist)
// before any row, then row gets each log_txns row of those partitions
// created after now() - (the largest of their windows + 60 s), in no
// particular order: i is the partition's index in ps, hashes the row's
// hashes in frame order, valid only during the call (their storage is
// reused). A deep window (millions of hashes) then costs the caller only
// what it keeps. An error from heads or row ends the read and is returned
// as it is.
func (s *Store) StreamHydrations(ctx context.Context, ps []partition.UUID, heads func([]reginatype.Hydration) error,
	row func(i int, first int64, createdAt time.Time, hashes [][16]byte) error) error {
	out := make([]reginatype.Hydration, len(ps))
	if len(ps) == 0 {
		return heads(out)
	}
	idx := make(map[partition.UUID]int, len(ps))
	ids := make([][16]byte, len(ps))
	for i, p := range ps {
		idx[p] = i
		ids[i] = [16]byte(p)
		out[i].Missing = true
	}
	var callerErr error
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			// A pass over a deep window outlasts the broker's statement
			// timeout (DB_STATEMENT_TIMEOUT, 30 s) on a busy server: 10M
			// hashes beside other work were cancelled at 30 s and asked
			// for again at the next push, so they never loaded. The
			// caller's context bounds the load instead.
			if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = 0"); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, qualify(hydrateManyHeadSQL, s.schema), ids)
			if err != nil {
				return err
			}
			window := 0
			for rows.Next() {
				var id [16]byte
				var h reginatype.Hydration
				if err := rows.Scan(&id, &h.NextOffset, &h.WindowSeconds, &h.Now); err != nil {
					return err
				}
				if i, ok := idx[partition.UUID(id)]; ok {
					out[i] = h
					window = max(window, h.WindowSeconds)
				}
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if callerErr = heads(out); callerErr != nil {
				return callerErr
			}
			rows, err = tx.Query(ctx, qualify(hydrateManyRowsSQL, s.schema), ids, window)
			if err != nil {
				return err
			}
			defer rows.Close()
			var (
				id    [16]byte
				first int64
				at    time.Time
				raw   [][]byte
				hs    [][16]byte
			)
			// The hash arrays are decoded straight from the wire (binary
			// format) into one reused [16]byte slice: a window holds
			// millions of hashes, and scanning them into [][]byte first
			// allocates one slice per hash.
			rawHashes := rows.FieldDescriptions()[3].Format == pgx.BinaryFormatCode
			for rows.Next() {
				hashArg := any(&raw)
				if rawHashes {
					hashArg = nil // skipped by Scan, read from RawValues
				}
				if err := rows.Scan(&id, &first, &at, hashArg); err != nil {
					return err
				}
				i, ok := idx[partition.UUID(id)]
				if !ok || out[i].Missing {
					continue
				}
				if rawHashes {
					if hs, err = decodeHashArrayInto(hs[:0], rows.RawValues()[3]); err != nil {
						return fmt.Errorf("log_txns row at offset %d: %w", first, err)
					}
				} else {
					hs = hs[:0]
					for k, b := range raw {
						if len(b) != 16 {
							return fmt.Errorf("log_txns row at offset %d: hash %d is %d bytes, want 16", first, k, len(b))
						}
						hs = append(hs, [16]byte(b))
					}
				}
				if callerErr = row(i, first, at, hs); callerErr != nil {
					return callerErr
				}
			}
			return rows.Err()
		})
	if err != nil {
		if callerErr != nil && errors.Is(err, callerErr) {
			return callerErr
		}
		return fmt.Errorf("load hydrations: %w", classify(err))
	}
	return nil
}

// RecentPartitions returns up to limit partitions of queues with a dedup
// window that were pushed to inside it, the most recently pushed first: the
// partitions a broker that just started will push to, whose cache it loads
// ahead of their pushes. One pass over partitions (no index on
// last_push_at: a broker starts rarely).
func (s *Store) RecentPartitions(ctx context.Context, limit int) ([]partition.UUID, error) {
	rows, err := s.pool.Query(ctx, qualify(`SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		 WHERE q.dedup_window_seconds > 0
		   AND p.last_push_at > now() - make_interval(secs => q.dedup_window_seconds)
		 ORDER BY p.last_push_at DESC LIMIT $1`, s.schema), limit)
	if err != nil {
		return nil, fmt.Errorf("recent partitions: %w", classify(err))
	}
	ids, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (partition.UUID, error) {
		var id partition.UUID
		err := r.Scan((*uuidScanner)(&id))
		return id, err
	})
	if err != nil {
		return nil, fmt.Errorf("recent partitions: %w", classify(err))
	}
	return ids, nil
}

// SidecarDepth estimates, with index lookups, how many hashes a hydration
// of partition p would load: its allocator minus the lowest offset of a
// queen.log_txns row inside its queue's window (plus the cache's 60 s trim
// margin). Only the children inside the window are read (the others are
// pruned), each through its (partition_id, first_offset) index, stopping at
// the first row young enough. The sidecar is often deeper than one queue's
// window (it is kept as deep as the longest window of any queue), so
// counting from its oldest row would overstate a short window many times.
func (s *Store) SidecarDepth(ctx context.Context, p partition.UUID) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, s.sidecarDepthSQL(), uuidArg(p)).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, reginatype.ErrPartitionMissing
	}
	if err != nil {
		return 0, fmt.Errorf("sidecar depth: %w", classify(err))
	}
	return n, nil
}

func (s *Store) sidecarDepthSQL() string {
	return qualify(`SELECT p.next_offset - coalesce((SELECT l.first_offset FROM queen.log_txns l
		 WHERE l.partition_id = p.id
		   AND l.created_at > now() - make_interval(secs => q.dedup_window_seconds + 60)
		 ORDER BY l.first_offset LIMIT 1), p.next_offset)
		  FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE p.id = $1`, s.schema)
}

// decodeHashArray decodes a bytea[] in PostgreSQL's binary array format (a
// one-dimensional array of 16-byte, non-null elements: log_txns.hashes).
func decodeHashArray(b []byte) ([][16]byte, error) {
	return decodeHashArrayInto(nil, b)
}

// decodeHashArrayInto is decodeHashArray appending to dst (which may be
// reused storage).
func decodeHashArrayInto(dst [][16]byte, b []byte) ([][16]byte, error) {
	if len(b) < 12 {
		return dst, fmt.Errorf("hash array: %d bytes, too short", len(b))
	}
	ndim := int32(binary.BigEndian.Uint32(b))
	if ndim == 0 {
		return dst, nil
	}
	if ndim != 1 || len(b) < 20 {
		return dst, fmt.Errorf("hash array: %d dimensions, want 1", ndim)
	}
	n := int(int32(binary.BigEndian.Uint32(b[12:])))
	b = b[20:]
	if n < 0 || len(b) != n*(4+16) {
		return dst, fmt.Errorf("hash array: %d elements in %d bytes, want 16-byte hashes", n, len(b))
	}
	dst = slices.Grow(dst, n)
	for k := range n {
		if l := int32(binary.BigEndian.Uint32(b)); l != 16 {
			return dst, fmt.Errorf("hash array: hash %d is %d bytes, want 16", k, l)
		}
		dst = append(dst, [16]byte(b[4:20]))
		b = b[20:]
	}
	return dst, nil
}
