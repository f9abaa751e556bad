package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGroupCommittedConsumersOfOnePartition: eight consumers pop (any
// partition, batches of 1 to 4) from a queue with one partition, through
// the consume batcher (pops and acks sharing transactions whenever they
// meet). Some batches fail once (released, delivered again from the same
// message: its first message is acked failed), some always (at retryLimit
// 1 the second delivery's messages, all acked failed, go to the DLQ). Every message ends completed or dead-lettered
// exactly once, in order; each failed delivery comes back once.
func TestGroupCommittedConsumersOfOnePartition(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", func(c *Config) { c.ConsumeSenders, c.ConsumeMaxBatch = 2, 64 })
	b.configure(t, "one", map[string]any{"retryLimit": 1})
	const n = 160
	for i := 0; i < n; i += 40 {
		pushN(t, b, "one", "p", i, 40)
	}
	var (
		mu       sync.Mutex
		done     []int           // completed or dead-lettered, in the order their batches were settled
		attempts = map[int]int{} // deliveries of a batch starting at n that were failed
		dead     int
	)
	finished := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(done) >= n
	}
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Go(func() {
			for k := 0; !finished(); k++ {
				r := b.pop(t, "one", "", url.Values{"batch": {strconv.Itoa(1 + (c+k)%4)}})
				if len(r.Messages) == 0 {
					continue
				}
				batch := numbers(t, r.Messages)
				first := batch[0]
				mu.Lock()
				require.Len(t, done, first, "a batch starts where the settled ones end: %v", batch)
				fail := first%11 == 5 && attempts[first] == 0 || first%23 == 7
				if fail {
					attempts[first]++
				}
				try := attempts[first]
				// Settled before the ack: once it commits, the next batch
				// may be popped at once.
				if !fail || try == 2 {
					done = append(done, batch...)
				}
				if fail && try == 2 {
					dead += len(batch)
				}
				mu.Unlock()
				if !fail {
					for _, a := range b.ackBatch(t, r.Messages, "completed", "") {
						require.True(t, a.Success, "%s", ptrString(a.Error))
						require.True(t, a.LeaseReleased)
					}
					continue
				}
				require.LessOrEqual(t, try, 2, "batch at %d: dead-lettered, never delivered again", first)
				if try == 1 {
					// The first message failed: the lease is released, the
					// batch comes again from it.
					a := b.ackBatch(t, r.Messages[:1], "failed", "")[0]
					require.True(t, a.Success, "%s", ptrString(a.Error))
					require.True(t, a.LeaseReleased)
					require.False(t, a.DLQ)
					continue
				}
				for _, a := range b.ackBatch(t, r.Messages, "failed", "") {
					require.True(t, a.Success, "%s", ptrString(a.Error))
					require.True(t, a.DLQ, "batch at %d, second failure: DLQ (retryLimit 1)", first)
				}
			}
		})
	}
	wg.Wait()
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	require.Equal(t, want, done)
	for first, tries := range attempts {
		if first%23 == 7 {
			require.Equal(t, 2, tries, "batch at %d", first)
		} else {
			require.Equal(t, 1, tries, "batch at %d", first)
		}
	}
	_, body := do(t, "GET", b.URL+"/api/v1/dlq?queue=one&limit=1", nil)
	require.Contains(t, string(body), fmt.Sprintf(`"total":%d`, dead))
	require.Empty(t, b.pop(t, "one", "", nil).Messages)
}

// TestGroupCommittedConsumersOfOneGroup: eight consumers of one named
// group and eight of queue mode pop (any partition, batch 3) from sixteen
// partitions and ack, through the consume batcher: each group gets every
// message once, each partition's in order.
func TestGroupCommittedConsumersOfOneGroup(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", func(c *Config) { c.ConsumeSenders, c.ConsumeMaxBatch = 2, 64 })
	const parts, per = 16, 12
	for p := range parts {
		pushN(t, b, "many", fmt.Sprintf("p%02d", p), 0, per)
	}
	var wg sync.WaitGroup
	got := map[string]map[string][]int{}
	for _, g := range []string{"", "g"} {
		var mu sync.Mutex
		seen := map[string][]int{}
		got[g] = seen
		total := 0
		for range 8 {
			wg.Go(func() {
				params := url.Values{"batch": {"3"}}
				if g != "" {
					params.Set("consumerGroup", g)
				}
				for {
					mu.Lock()
					finished := total >= parts*per
					mu.Unlock()
					if finished {
						return
					}
					r := b.pop(t, "many", "", params)
					if len(r.Messages) == 0 {
						continue
					}
					mu.Lock()
					for _, m := range r.Messages {
						seen[m.Partition] = append(seen[m.Partition], numbers(t, []popMessage{m})[0])
					}
					total += len(r.Messages)
					mu.Unlock()
					for _, a := range b.ackBatch(t, r.Messages, "completed", g) {
						require.True(t, a.Success, "%s", ptrString(a.Error))
					}
				}
			})
		}
	}
	wg.Wait()
	want := make([]int, per)
	for i := range want {
		want[i] = i
	}
	for g, seen := range got {
		require.Len(t, seen, parts, "group %q", g)
		for p, ns := range seen {
			require.Equal(t, want, ns, "group %q, partition %s: once each, in order", g, p)
		}
	}
}

// numbers is the "n" of each message's payload (pushN's).
func numbers(t *testing.T, ms []popMessage) []int {
	t.Helper()
	out := make([]int, len(ms))
	for i, m := range ms {
		var p struct{ N int }
		require.NoError(t, json.Unmarshal(m.Data, &p))
		out[i] = p.N
	}
	return out
}

// ptrString is *p, or "" for nil.
func ptrString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
