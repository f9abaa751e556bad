package actor

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// Batches that become ready while every sender is busy share the next
// transaction, and each gets its own verdicts.
func TestReadyBatchesShareATransaction(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{PackSenders: 1})
	g, release := b.holdCalls("push")
	first := b.pushAsync(context.Background(), group("q", "held", "h"))
	g.waitArrival(t) // the only sender is inside the store
	var waiting []<-chan struct{}
	var groups []*reginatype.PushGroup
	for p := range 3 {
		gr := group("q", fmt.Sprint("p", p), "a", "b", "a")
		groups = append(groups, gr)
		waiting = append(waiting, b.pushAsync(context.Background(), gr))
	}
	// Wait until the three batches are queued in the packer.
	require.Eventually(t, func() bool {
		b.reg.pack.mu.Lock()
		defer b.reg.pack.mu.Unlock()
		return len(b.reg.pack.queue) == 3
	}, 30*time.Second, time.Millisecond)
	release()
	waitDone(t, first)
	for _, w := range waiting {
		waitDone(t, w)
	}
	for _, gr := range groups {
		require.NoError(t, gr.Err)
		require.Equal(t, []string{"queued", "queued", "duplicate"}, statuses(gr))
		require.Equal(t, gr.Results[0].MessageID, gr.Results[2].MessageID)
	}
	require.Equal(t, uint64(1), b.store.packs.Load(), "the three batches went in one call")
	st := b.reg.Stats()
	require.Equal(t, uint64(2), st.PackedTransactions)
	require.Equal(t, uint64(4), st.PackedBatches)
}

// A batch never waits to be packed while a sender is free: with one
// transaction held in the store, a push to another partition is answered.
func TestLoneBatchDoesNotWaitForPacking(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{PackSenders: 2})
	g := newGate()
	defer close(g.release)
	var calls atomic.Int32
	b.store.before = func(op string) {
		if op == "push" && calls.Add(1) == 1 {
			g.hold() // only the first push is held
		}
	}
	first := b.pushAsync(context.Background(), group("q", "held", "h"))
	g.waitArrival(t)
	other := group("q", "other", "x")
	b.reg.Push(context.Background(), []*reginatype.PushGroup{other})
	require.NoError(t, other.Err)
	require.Equal(t, []string{"queued"}, statuses(other))
	select {
	case <-first:
		t.Fatal("the held push returned")
	default:
	}
}

// A batch that only needs the read-only duplicate proof (the cache named its
// originals) starts no sender of its own while one runs: it waits for that
// sender's next round trip, so that a storm's proofs share round trips. A
// batch to be written still starts one at once.
func TestReadOnlyProofsShareTheRunningSender(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{PackSenders: 4})
	g, release := b.holdCalls("push")
	first := b.pushAsync(context.Background(), group("q", "held", "h"))
	g.waitArrival(t) // one sender, inside the store
	k := b.reg.pack
	state := func() (queued, senders int) {
		k.mu.Lock()
		defer k.mu.Unlock()
		return len(k.queue), k.senders
	}
	proof := &reginatype.PushBatch{ExpectDuplicates: true, Originals: []int64{0}}
	proof.Add(partition.HashTxID("p"), partition.NewV7(), &partition.Body{TransactionID: "p", Payload: []byte(`{}`)})
	proved := make(chan error, 1)
	go func() {
		_, err := k.push(&packed{done: make(chan struct{}, 1)}, proof)
		proved <- err
	}()
	require.Eventually(t, func() bool { q, _ := state(); return q == 1 }, 30*time.Second, time.Millisecond)
	q, senders := state()
	require.Equal(t, 1, q, "the proof waits in the queue")
	require.Equal(t, 1, senders, "the proof started no sender")

	other := b.pushAsync(context.Background(), group("q", "other", "x"))
	require.Eventually(t, func() bool { _, s := state(); return s == 2 }, 30*time.Second, time.Millisecond,
		"a batch to be written starts a sender at once")
	release()
	waitDone(t, first)
	waitDone(t, other)
	<-proved // answered by the running sender's next round trip (the fake store knows no such partition)
}
