package actor

import "errors"

var (
	// ErrMailboxFull means the partition's mailbox is at its bound; nothing of
	// the group was accepted. The client should back off and retry.
	ErrMailboxFull = errors.New("partition mailbox is full")
	// ErrShuttingDown means the broker is stopping and accepts no new work.
	ErrShuttingDown = errors.New("broker is shutting down")
)
