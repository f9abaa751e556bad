package partition

import "github.com/zeebo/xxh3"

// Fingerprint is the 64-bit xxh3 of a payload's bytes as received (the raw
// JSON value of the item's payload, before any encryption at rest), stored as
// a PostgreSQL bigint. No canonical form: two payloads match only when they
// are the same bytes (see BenchmarkFingerprint for what a canonical form
// would cost).
func Fingerprint(payload []byte) int64 { return int64(xxh3.Hash(payload)) }

// PayloadCheck is a queue's dedupPayloadCheck option: what the broker does
// when a duplicate's payload differs from its original's.
type PayloadCheck = string

// The values of dedupPayloadCheck.
const (
	// PayloadCheckOff stores no fingerprint and compares nothing (the default).
	PayloadCheckOff PayloadCheck = "off"
	// PayloadCheckReport answers a duplicate as usual, with payloadMismatch.
	PayloadCheckReport PayloadCheck = "report"
	// PayloadCheckReject answers a duplicate with a different payload
	// "conflict".
	PayloadCheckReject PayloadCheck = "reject"
)

// ValidPayloadCheck reports whether s is a value of dedupPayloadCheck.
func ValidPayloadCheck(s string) bool {
	return s == PayloadCheckOff || s == PayloadCheckReport || s == PayloadCheckReject
}

// PayloadMatch is the outcome of comparing a duplicate's payload with the
// payload of the message it names.
type PayloadMatch uint8

// Outcomes of a payload comparison.
const (
	// PayloadUnchecked: not compared (the queue's check is off, or the
	// original has no fingerprint: it was stored while the check was off).
	PayloadUnchecked PayloadMatch = iota
	// PayloadSame: the fingerprints are equal.
	PayloadSame
	// PayloadDifferent: the fingerprints differ: the transaction id was
	// reused for another payload.
	PayloadDifferent
)

// ComparePayload compares a fingerprint with the original's (nil when the
// original has none).
func ComparePayload(fp int64, original *int64) PayloadMatch {
	switch {
	case original == nil:
		return PayloadUnchecked
	case *original == fp:
		return PayloadSame
	default:
		return PayloadDifferent
	}
}
