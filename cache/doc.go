// Package cache is the broker's in-window hash cache. Its only output is the
// probe watermark W of a push batch: "no hash of this batch occurs in a
// segment whose first offset is at or below W". push_segment then probes
// queen.log_txns only for rows with first_offset > W (through the primary
// key) instead of the whole window (through the GIN index). NoWatermark (-1)
// probes the whole window. The SQL probe is the authority; the cache is a
// CPU and I/O optimisation that must change no verdict.
//
// The package does no I/O and imports nothing of this repository. Loading a
// partition (hydration) is done by the caller through sqlstore; the cache
// only receives the rows. It never reads the broker's wall clock: every time
// it uses is a created_at or now() produced by the database.
//
// # What it owns
//
// Per partition (keyed by the partition's 16-byte id): a map from hash to the
// first offset of the lowest segment holding it, and a time-ordered queue of
// the segments (first offset, created_at, hash count) with their hashes, so
// old entries are trimmed from the front. A hash is held as an 8-byte key
// (hashKey: its halves XORed); hashes sharing a key are occurrences of one
// key, which the argument below covers unchanged (a key found lowers W below
// every segment holding a hash with that key, a superset of the batch
// hash's own segments), so the watermark stays exact. Beyond Config.HotHashes
// hashes, a partition's oldest segments are held only as Bloom filters
// (bloom.go; a coldBlock per run of consecutive segments, ~4 bytes a hash),
// so a deep window fits the budget. Partitions are evicted whole, least
// recently used first, to stay within a byte budget (see estimate in
// partition.go for the formula). Partitions that were dropped remember why
// (tombstones), so Watermark can report a Reason for metrics.
//
// # Why the watermark is safe
//
// Invariant of a known partition, "known up to K": every hash of every
// committed segment at offsets <= K whose created_at is >= newest - window -
// TrimMargin is in the map, mapped to an offset at or below the first
// offset of the lowest such segment holding it, or tests present in a
// filter block whose first offset is at or below that segment's (a block
// has no false negatives). newest is the newest created_at the partition
// has seen.
//
//   - It is established by hydration: the loader reads next_offset N and the
//     in-window rows in one snapshot, so K = N-1 and every segment at or
//     below K is in the snapshot. Learns that raced with the load are
//     merged only if they continue exactly from N (see FinishHydrate).
//   - It is kept by Learn, which only appends a segment starting at K+1.
//     Offsets are gap-free and a segment is committed atomically, so a
//     segment starting beyond K+1 means someone else (another broker, the
//     transaction endpoint, a push whose outcome the actor never learned)
//     wrote in between; the partition is then dropped, never extended across
//     the hole. Segments above K that the cache has not seen are covered by
//     the probe anyway: their first_offset is > K >= W.
//   - Freezing (entry.freeze) moves whole segments from the map into the
//     newest block: each key is added to the block's filter before its map
//     entry is dropped (dropHash keeps a lower offset while other
//     occurrences remain), so it stays covered. A load puts the rows below
//     its exact range into blocks by offset; any row lands in a block whose
//     first offset is at or below its own.
//   - Watermark returns K lowered to f-1 for every batch hash held at a
//     segment starting at f, and to lo-1 for every block that tests present
//     for a batch hash. Blocks are tested whatever the map says: a hash can
//     be in the map at a newer segment and in an older block too (pushed
//     again after the older occurrence was frozen). The probe filters segments, not frames, by
//     first_offset > W, so lowering to "frame offset - 1" would miss a hash
//     in the middle of a segment. Because the map keeps the lowest segment
//     (and keeps a trimmed, lower offset while later occurrences of the same
//     hash remain), W is below every in-window occurrence the cache holds,
//     so the probe finds the same earliest original, and the same message
//     id, as a full-window probe.
//   - Trimming is safe with W = K. An entry is trimmed only when its own
//     created_at < newest - window - TrimMargin (a block only when its
//     newest segment's is). newest is the created_at of
//     a committed segment of this partition, or the now() of the loader's
//     snapshot: database times of transactions that started before any
//     later push transaction whose watermark the cache computes, so that
//     push's now() is >= newest unless the database clock steps back, and
//     TrimMargin absorbs steps up to 60 s (a larger step seen by Learn drops the partition,
//     ReasonClock). Then created_at < now() - window: the entry is outside
//     the window for SQL too, which would not report it as a duplicate. The
//     broker's own clock is never used, so broker/database clock skew cannot
//     trim an entry SQL still considers in-window.
//   - Windows: a partition covers the window it was loaded with (lowered,
//     never raised, by later Learns). Watermark and Learn compare the window
//     they are given with it and drop the partition when it grew
//     (ReasonWindow). Because the caller's window may be stale when a queue
//     is reconfigured, push_segment must also ignore the watermark when the
//     queue's window is larger than the hint the caller sent with it (the
//     same window it passed to Watermark).
//   - Eviction, Forget, the kill switch and every uncertain case return
//     NoWatermark, which probes the whole window: the verdict is the one
//     the cache-less broker would give.
//
// # Integration (what the caller must do)
//
//   - Before a push with window w > 0: W, r := Watermark(id, w, hashes);
//     send W as p_watermark and the same w as p_window_hint. With w == 0
//     do not call the cache at all.
//   - push_segment must fall back to the full-window probe when the queue's
//     window is larger than p_window_hint (the caller's w may be stale after
//     a reconfiguration). Without that guard a grown window makes W unsafe.
//   - After a push that wrote a segment: Learn(id, res.WindowSeconds,
//     res.FirstOffset, hashes of the stored items in frame order,
//     res.CreatedAt). Not after an all-duplicate push, not when the outcome
//     is unknown (the next Learn then finds the hole).
//   - When r is ReasonUnknown, ReasonGap, ReasonPressure, ReasonWindow or
//     ReasonClock: BeginHydrate(id); if it returns true, run the loader
//     query below in one snapshot started after it returned, then
//     FinishHydrate(tok, next_offset, window, now, rows), or AbortHydrate on
//     error. Keep pushing meanwhile: Learns are buffered and merged.
//   - Forget(id) for every partition of a deleted queue, and whenever a
//     verdict cannot be explained.
//
// The loader query is one statement (one snapshot in READ COMMITTED; a
// REPEATABLE READ transaction works too, and is what the broker's batched
// loads use: sqlstore.LoadHydrations), without FOR UPDATE; the index
// (partition_id, first_offset) serves it, in offset order:
//
//	SELECT p.next_offset, q.dedup_window_seconds, now(),
//	       l.first_offset, l.created_at, l.hashes
//	  FROM queen.partitions p
//	  JOIN queen.queues q ON q.id = p.queue_id
//	  LEFT JOIN queen.log_txns l
//	         ON l.partition_id = p.id
//	        AND l.created_at > now() - make_interval(secs => q.dedup_window_seconds + 60)
//	 WHERE p.id = $1
//
// # Concurrency
//
// A Cache is safe for concurrent use. Each partition is meant to be driven
// by its actor goroutine plus, while hydrating, its loader; cross-partition
// work (LRU order, byte accounting, eviction, Stats) goes through one mutex
// held for O(1) steps. Per-partition work runs under the partition's own
// mutex, and the two are never held together. Watermark does not allocate.
package cache
