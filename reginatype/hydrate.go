package reginatype

import "time"

// HydrateRow is one queen.log_txns row read by LoadHydration.
type HydrateRow struct {
	FirstOffset int64
	CreatedAt   time.Time
	// Hashes holds one 16-byte hash per frame, in frame order.
	Hashes [][16]byte
}

// Hydration is what LoadHydration read, all from one snapshot.
type Hydration struct {
	// NextOffset is the partition's allocator: every segment below it was
	// committed before the snapshot. When Truncated it is instead one past
	// the last frame of the last row returned, so that the rows are still
	// every in-window row below NextOffset.
	NextOffset int64
	// WindowSeconds is the queue's deduplication window.
	WindowSeconds int
	// Now is the snapshot's now() (the database's clock).
	Now time.Time
	// Rows are the log_txns rows of the partition created after
	// Now - (WindowSeconds + 60 s), in offset order.
	Rows []HydrateRow
	// Truncated reports that the window held more than maxHashes hashes.
	// LoadHydration: Rows is a prefix (by offset) that stops at the first row
	// crossing the bound, and NextOffset was lowered to match.
	// LoadHydrations: Rows is empty (the rows arrive in no order, so no
	// prefix can be vouched for).
	Truncated bool
	// Missing reports (LoadHydrations only) that the partition does not
	// exist.
	Missing bool
}
