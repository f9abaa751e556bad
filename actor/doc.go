// Package actor is the push pipeline: one mailbox goroutine per active
// partition. A push is split by (queue, partition) into groups; each group
// goes to its partition's actor, which drains everything waiting in its
// mailbox (bounded by count and bytes) into one push transaction: group
// commit. Inside that batch it collapses repeated transaction ids (the first
// is the leader, later ones echo its verdict), asks the dedup cache for a
// probe watermark (loading partitions into the cache in the background),
// runs the store's push, teaches the cache what was written, and answers
// every waiting group in request order. push.go reads top to bottom.
//
// Actors start on the first push to a partition and retire after an idle
// period. A full mailbox is refused with reginatype.ErrMailboxFull instead
// of growing. A caller whose context ends stops waiting: its group is
// withdrawn if still in the mailbox, else its batch goes on and only the
// delivery of the verdict is abandoned (see Registry.Push).
//
// The registry is also the source of the long-poll signals: Linked adds them
// (and the cache's bookkeeping) to the few store calls that need them (pop,
// transaction, DLQ replay, queue deletion). The package reaches the database
// only through the interfaces it declares (Store, LinkedStore); package
// sqlstore implements them and cmd/regina wires it in.
//
// Lock order: Registry.mu, then actor.mu; never the other way round. A
// request's mu is taken alone. None is held across a database call.
package actor
