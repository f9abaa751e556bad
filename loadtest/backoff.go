package main

import (
	"math/rand/v2"
	"time"
)

// backoffBase is a connection's first wait after a failure.
const backoffBase = 50 * time.Millisecond

// Backoff is one connection's wait before its next request after a push
// that got no verdicts (no answer, an error status, a 2xx carrying an error
// object): backoffBase after the first, doubling with every consecutive
// failure up to a cap, each wait drawn uniformly from [d/2, d] so that
// connections that failed together do not come back in lockstep. A push
// answered with verdicts resets it. Without it a broker that is gone (or
// that refuses every push: a missing token, a full mailbox) turns every
// worker into a busy loop of failures. A cap of 0 never waits. Not safe
// for concurrent use: each worker has its own.
type Backoff struct {
	cap  time.Duration
	next time.Duration
	rnd  *rand.Rand
}

// NewBackoff makes a backoff whose waits never exceed limit.
func NewBackoff(limit time.Duration, rnd *rand.Rand) *Backoff {
	b := &Backoff{cap: max(limit, 0), rnd: rnd}
	b.Reset()
	return b
}

// Next returns the wait after one more consecutive failure.
func (b *Backoff) Next() time.Duration {
	d := b.next
	b.next = min(2*b.next, b.cap)
	if d <= 1 {
		return d
	}
	return d/2 + time.Duration(b.rnd.Int64N(int64(d/2)+1))
}

// Reset starts over after an answer.
func (b *Backoff) Reset() { b.next = min(backoffBase, b.cap) }
