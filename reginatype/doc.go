// Package reginatype is the broker's vocabulary: the request and result types
// of push, pop, ack, transactions, administration and dedup explain, and the
// error sentinels with IsRetryable. It is a leaf (in the spirit of River's
// rivertype): it does no I/O and imports only package partition (frames,
// UUIDs, hashes, queue options), so that every other package can speak it
// without depending on the one that implements an operation.
//
// Package sqlstore returns these types; package actor (the push pipeline) and
// package wire (HTTP) consume them through interfaces of their own. Nobody
// re-exports or aliases them.
package reginatype
