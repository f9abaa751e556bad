// Package actor runs one mailbox goroutine per active partition. A push is
// split by (queue, partition) into groups; each group goes to its partition's
// actor, which drains everything waiting in its mailbox (bounded by count and
// bytes) into one push transaction: group commit. Inside that batch it
// collapses repeated transaction ids (the first is the leader, later ones
// echo its verdict), asks the cache for a probe watermark, calls
// sqlstore.Store.Push, and answers every waiting group in request order.
//
// Actors start on the first push to a partition and retire after an idle
// period. A full mailbox is refused with ErrMailboxFull instead of growing.
// The Registry is also the broker's facade for queue administration, so that
// package wire depends on actor alone.
//
// Lock order: Registry.mu, then actor.mu; never the other way round. Neither
// is held across a database call.
package actor
