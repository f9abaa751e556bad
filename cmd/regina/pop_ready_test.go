package main

import (
	"fmt"
	"maps"
	"net/url"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// drainAll pops (autoAck, up to 1000 partitions per pop) until a pop is
// empty and returns how many messages it got.
func drainAll(t *testing.T, b *testBroker, queue string, group url.Values) int {
	t.Helper()
	n := 0
	for {
		v := url.Values{"autoAck": {"true"}, "batch": {"10000"}, "partitions": {"1000"}}
		maps.Copy(v, group)
		r := b.pop(t, queue, "", v)
		if len(r.Messages) == 0 {
			return n
		}
		n += len(r.Messages)
	}
}

// pushWork pushes perPartition messages to each of parts (one push) and
// returns their transaction ids.
func pushWork(t *testing.T, b *testBroker, queue string, parts []string, perPartition int) []string {
	t.Helper()
	var items []item
	var ids []string
	for _, p := range parts {
		for i := range perPartition {
			id := fmt.Sprintf("new-%s-%d", p, i)
			items = append(items, item{"queue": queue, "partition": p, "transactionId": id, "payload": map[string]any{"i": i}})
			ids = append(ids, id)
		}
	}
	for _, r := range b.push(t, items...) {
		require.Equal(t, "queued", r.Status)
	}
	return ids
}

// TestPopNeverEmptyWhileWorkWaits: a queue with 100 partitions, each holding
// history; after the group has taken what it may (all of it, or nothing with
// subscriptionMode=new), 1% of the partitions get 10 new messages each. Every
// following pop (one partition, batch 10, wait=false) must return one
// partition's new messages, until all are delivered; only then may a pop
// answer 204. Queue mode and named groups, modes all and new.
func TestPopNeverEmptyWhileWorkWaits(t *testing.T) {
	t.Parallel()
	popNeverEmptyWhileWorkWaits(t, 100)
}

// TestLong_PopNeverEmptyWhileWorkWaitsAt10kPartitions is the same at 10,000
// partitions (make test/long: the fills take most of a minute of
// PostgreSQL's time).
func TestLong_PopNeverEmptyWhileWorkWaitsAt10kPartitions(t *testing.T) {
	t.Parallel()
	popNeverEmptyWhileWorkWaits(t, 10000)
}

func popNeverEmptyWhileWorkWaits(t *testing.T, sizes ...int) {
	t.Helper()
	for _, parts := range sizes {
		for _, mode := range []struct {
			name    string
			group   url.Values
			history bool // the group reads the history first
		}{
			{"queue mode", url.Values{}, true},
			{"group all", url.Values{"consumerGroup": {"ga"}, "subscriptionMode": {"all"}}, true},
			{"group new", url.Values{"consumerGroup": {"gn"}, "subscriptionMode": {"new"}}, false},
		} {
			t.Run(fmt.Sprintf("%d partitions %s", parts, mode.name), func(t *testing.T) {
				t.Parallel()
				b := startBroker(t, "", nil)
				b.configure(t, "wide", map[string]any{})
				sqlstoretest.FillPartitions(t, b.Schema, "wide", "p", parts)
				got := drainAll(t, b, "wide", mode.group)
				if mode.history {
					require.Equal(t, parts, got, "the group reads every partition's history")
				} else {
					require.Zero(t, got, "subscriptionMode=new skips the history")
				}
				var hot []string
				for i := 0; i < parts; i += 100 {
					hot = append(hot, fmt.Sprintf("p%05d", i+37%parts))
				}
				want := pushWork(t, b, "wide", hot, 10)
				var seen []string
				for range hot {
					v := url.Values{"batch": {"10"}}
					maps.Copy(v, mode.group)
					r := b.pop(t, "wide", "", v)
					require.Len(t, r.Messages, 10, "a pop answered %d messages while %d waited",
						len(r.Messages), len(want)-len(seen))
					for _, m := range r.Messages {
						seen = append(seen, m.TransactionID)
					}
					b.ackBatch(t, r.Messages, "completed", mode.group.Get("consumerGroup"))
				}
				sort.Strings(want)
				sort.Strings(seen)
				require.Equal(t, want, seen)
				require.Empty(t, b.pop(t, "wide", "", mode.group).Messages, "all delivered: now empty")
			})
		}
	}
}

// TestNewGroupIsNotToldEmptyWhileWorkWaits is issue 12's scenario: 100
// partitions with one old message each; a new group (subscriptionMode=new)
// pops once; then 10 new messages go to each of 20 partitions. The next 20
// pops (wait=false) each return 10 of them, through either of two brokers
// while the pushes go through the other.
func TestNewGroupIsNotToldEmptyWhileWorkWaits(t *testing.T) {
	t.Parallel()
	schema := sqlstoretest.NewSchema(t)
	b1 := startBroker(t, schema, nil)
	b2 := startBroker(t, schema, nil)
	var all []string
	var items []item
	for i := range 100 {
		p := fmt.Sprintf("c%03d", i)
		all = append(all, p)
		items = append(items, item{"queue": "cust", "partition": p, "transactionId": "old-" + p})
	}
	b2.push(t, items...)
	g := url.Values{"consumerGroup": {"g"}, "subscriptionMode": {"new"}, "batch": {"10"}}
	require.Empty(t, b1.pop(t, "cust", "", g).Messages, "the history is not the new group's")
	var hot []string
	for i := 0; i < 100; i += 5 {
		hot = append(hot, all[i])
	}
	want := pushWork(t, b2, "cust", hot, 10)
	var seen []string
	for i := range hot {
		b := []*testBroker{b1, b2}[i%2]
		r := b.pop(t, "cust", "", g)
		require.Len(t, r.Messages, 10, "pop %d: %d messages while %d waited", i, len(r.Messages), len(want)-len(seen))
		for _, m := range r.Messages {
			seen = append(seen, m.TransactionID)
		}
		b.ackBatch(t, r.Messages, "completed", "g")
	}
	sort.Strings(want)
	sort.Strings(seen)
	require.Equal(t, want, seen)
	require.Empty(t, b1.pop(t, "cust", "", g).Messages)
	require.Empty(t, b2.pop(t, "cust", "", g).Messages)
}

// TestPopServesTheLongestWaitingFirst: partitions are served in the order
// their work arrived, and a partition served goes to the back of the line,
// so a partition with a deep backlog cannot starve one behind it.
func TestPopServesTheLongestWaitingFirst(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	for _, g := range []url.Values{{}, {"consumerGroup": {"g"}}} {
		q := "fair" + g.Get("consumerGroup")
		pushN(t, b, q, "a", 0, 3) // a: deep backlog, oldest
		pushN(t, b, q, "b", 0, 1)
		pushN(t, b, q, "c", 0, 1)
		var order []string
		for {
			v := url.Values{"batch": {"1"}}
			maps.Copy(v, g)
			r := b.pop(t, q, "", v)
			if len(r.Messages) == 0 {
				break
			}
			order = append(order, r.Messages[0].TransactionID)
			b.ackBatch(t, r.Messages, "completed", g.Get("consumerGroup"))
		}
		require.Equal(t, []string{q + "-a-0", q + "-b-0", q + "-c-0", q + "-a-1", q + "-a-2"}, order)
	}
}

// TestLongPollIsWokenByAPushThroughAnotherBroker: a long poll waiting on one
// broker returns a message pushed through another (its poller sees it; no
// in-process signal reaches it), for queue mode and a named group at once.
func TestLongPollIsWokenByAPushThroughAnotherBroker(t *testing.T) {
	t.Parallel()
	schema := sqlstoretest.NewSchema(t)
	b1 := startBroker(t, schema, nil)
	b2 := startBroker(t, schema, nil)
	b2.configure(t, "lp2", map[string]any{})
	got := make(chan popResponse, 2)
	for _, g := range []url.Values{{}, {"consumerGroup": {"g"}}} {
		go func() {
			v := url.Values{"wait": {"true"}, "timeout": {"60000"}}
			maps.Copy(v, g)
			got <- b1.pop(t, "lp2", "", v)
		}()
	}
	b2.push(t, item{"queue": "lp2", "partition": "x", "transactionId": "far"})
	for range 2 {
		r := <-got
		require.Len(t, r.Messages, 1)
		require.Equal(t, "far", r.Messages[0].TransactionID)
	}
}

// TestReconfigureEndsAWindowBufferWait: a partition held back by
// windowBuffer is served at once after the queue is reconfigured without it.
func TestReconfigureEndsAWindowBufferWait(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	b.configure(t, "wb", map[string]any{"windowBuffer": 3600})
	pushN(t, b, "wb", "Default", 0, 1)
	require.Empty(t, b.pop(t, "wb", "", nil).Messages, "held by windowBuffer")
	b.configure(t, "wb", map[string]any{})
	require.Len(t, b.pop(t, "wb", "", nil).Messages, 1)
}
