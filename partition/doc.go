// Package partition holds the pure domain logic of one partition: the segment
// frame codec, the 16-byte transaction-id hashes, time-ordered message ids, the
// in-batch leader/follower collapse and the push verdicts.
//
// It performs no I/O and imports nothing of Regina's, so every other package can
// depend on it. The segment layout it defines is the on-disk format of the
// queen.segments.frames column; see [EncodeSegment] for the exact bytes.
package partition
