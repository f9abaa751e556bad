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

// SidecarDepth estimates, with two index lookups, how many hashes a hydration
// of partition p would load: its allocator minus the oldest offset still in
// queen.log_txns (retention keeps the sidecar about one window deep).
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
		 WHERE l.partition_id = p.id ORDER BY l.first_offset LIMIT 1), p.next_offset)
		  FROM queen.partitions p WHERE p.id = $1`, s.schema)
}
