package reginatype

import (
	"errors"
)

// Sentinel errors of the store and the push pipeline. Callers test them with
// errors.Is; IsRetryable says which of them (and which database errors)
// leave a client free to retry.
var (
	// ErrPartitionMissing means the partition row is gone (its queue was
	// deleted): resolve the partition again and retry.
	ErrPartitionMissing = errors.New("partition no longer exists")
	// ErrWindowChanged means the queue's deduplication, or its payload check,
	// was switched on or off since the caller last looked: nothing was
	// written; collapse the batch according to the returned window, send
	// fingerprints according to the returned payload check, and retry.
	ErrWindowChanged = errors.New("deduplication window switched on or off")
	// ErrOutcomeUnknown means the statement may or may not have committed (the
	// connection broke after the request was sent, or COMMIT failed). The
	// caller must report a retryable error, never success or a definite
	// failure: the client's retry with the same transaction id is safe.
	ErrOutcomeUnknown = errors.New("outcome unknown: the write may or may not have committed")
	// ErrUnavailable means the database could not be reached before anything
	// was sent; nothing was written.
	ErrUnavailable = errors.New("database unavailable")
	// ErrMailboxFull means the partition's mailbox is at its bound; nothing of
	// the group was accepted. The client should back off and retry.
	ErrMailboxFull = errors.New("partition mailbox is full")
	// ErrShuttingDown means the broker is stopping and accepts no new work;
	// nothing of the refused request was accepted.
	ErrShuttingDown = errors.New("broker is shutting down")
	// ErrNotInDLQ means a replay found no matching dead letter.
	ErrNotInDLQ = errors.New("no such message in the dead-letter queue")
	// ErrLeaseNotLive aborts a transaction whose required lease is not live.
	ErrLeaseNotLive = errors.New("a required lease is not live")
)

// sqlStater is implemented by database errors that carry a SQLSTATE (pgx's
// *pgconn.PgError does), so this package can classify them without
// importing a driver.
type sqlStater interface{ SQLState() string }

// IsRetryable reports whether err leaves the client free to retry the same
// request: the outcome is unknown, the database was unavailable, the broker
// refused the work (full mailbox, shutting down), or the database reported a
// transient failure (SQLSTATE class 40 rollback: serialization failure,
// deadlock; 53 insufficient resources; 57 operator intervention: query
// canceled, admin shutdown; 08 connection exception; 55 lock not
// available).
func IsRetryable(err error) bool {
	if errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrUnavailable) ||
		errors.Is(err, ErrMailboxFull) || errors.Is(err, ErrShuttingDown) {
		return true
	}
	var st sqlStater
	if errors.As(err, &st) {
		if code := st.SQLState(); len(code) >= 2 {
			switch code[:2] {
			case "40", "53", "57", "08", "55":
				return true
			}
		}
	}
	return false
}
