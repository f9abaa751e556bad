package actor

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

func TestPushVerdicts(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	g := group("q", "p", "a", "b", "a")
	b.reg.Push(context.Background(), []*reginatype.PushGroup{g})
	require.NoError(t, g.Err)
	require.Equal(t, []string{"queued", "queued", "duplicate"}, statuses(g))
	require.Equal(t, g.Results[0].MessageID, g.Results[2].MessageID, "a follower echoes its leader's id")
	require.False(t, g.PartitionID.IsZero())

	again := group("q", "p", "b", "c")
	b.reg.Push(context.Background(), []*reginatype.PushGroup{again})
	require.NoError(t, again.Err)
	require.Equal(t, []string{"duplicate", "queued"}, statuses(again))
	require.Equal(t, g.Results[1].MessageID, again.Results[0].MessageID, "a duplicate names the original")

	st := b.reg.Stats()
	require.Equal(t, uint64(2), st.Batches)
	require.Equal(t, uint64(3), st.Queued)
	require.Equal(t, uint64(2), st.Duplicates)
}

// Groups of different partitions commit independently, each in its own
// batch, and keep their items in request order.
func TestPushSpanningPartitions(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	g1, g2 := group("q", "p1", "x", "y"), group("q", "p2", "x")
	b.reg.Push(context.Background(), []*reginatype.PushGroup{g1, g2})
	require.NoError(t, g1.Err)
	require.NoError(t, g2.Err)
	require.Equal(t, []string{"queued", "queued"}, statuses(g1))
	require.Equal(t, []string{"queued"}, statuses(g2), "the same id in another partition is not a duplicate")
	require.NotEqual(t, g1.PartitionID, g2.PartitionID)
}

// A batch takes whole groups, at least one, then as many as fit
// BatchMaxItems and BatchMaxBytes, in mailbox order.
func TestBatchBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cfg   Config
		sizes []int // items of each group queued behind the held one
		want  []int // items of each later batch
	}{
		{"items", Config{BatchMaxItems: 5}, []int{2, 2, 2, 7, 1}, []int{4, 2, 7, 1}},
		// Each item counts 8 bytes: a 5-byte payload and a 3-byte transaction id.
		{"bytes", Config{BatchMaxBytes: 8 * 3}, []int{1, 2, 1, 4, 2}, []int{3, 1, 4, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tc.cfg)
			g, release := b.holdCalls("push")
			done := []<-chan struct{}{b.pushAsync(context.Background(), group("q", "p", "t00"))}
			g.waitArrival(t)
			n, depth := 0, 0
			for _, size := range tc.sizes {
				var ids []string
				for range size {
					n++
					ids = append(ids, fmt.Sprintf("t%02d", n))
				}
				done = append(done, b.pushAsync(context.Background(), group("q", "p", ids...)))
				depth += size
				b.waitDepth(t, "q", "p", depth) // one at a time: mailbox order is submission order
			}
			release()
			for _, d := range done {
				waitDone(t, d)
			}
			var got []int
			for _, sb := range b.store.seen()[1:] {
				got = append(got, len(sb.TxIDs))
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// A group that would cross a mailbox bound is refused with ErrMailboxFull
// and never reaches the store, unless the mailbox is empty.
func TestMailboxFull(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{MailboxMaxItems: 3})
	g, release := b.holdCalls("push")
	first := b.pushAsync(context.Background(), group("q", "p", "held"))
	g.waitArrival(t)

	queued := b.pushAsync(context.Background(), group("q", "p", "a1", "a2"))
	b.waitDepth(t, "q", "p", 2)
	refused := group("q", "p", "r1", "r2")
	b.reg.Push(context.Background(), []*reginatype.PushGroup{refused})
	require.ErrorIs(t, refused.Err, reginatype.ErrMailboxFull)
	require.True(t, reginatype.IsRetryable(refused.Err))
	fits := b.pushAsync(context.Background(), group("q", "p", "f1"))
	b.waitDepth(t, "q", "p", 3)

	release()
	for _, d := range []<-chan struct{}{first, queued, fits} {
		waitDone(t, d)
	}
	for _, sb := range b.store.seen() {
		require.NotContains(t, sb.TxIDs, "r1", "a refused group is never written")
	}
	require.Equal(t, uint64(1), b.reg.Stats().MailboxFull)

	// An empty mailbox takes a group larger than its bound.
	big := group("q", "p", "b1", "b2", "b3", "b4", "b5")
	b.reg.Push(context.Background(), []*reginatype.PushGroup{big})
	require.NoError(t, big.Err)
	require.Len(t, big.Results, 5)
}

// An actor that retires between the registry's lookup and the enqueue
// refuses the group; the registry starts a new actor and the push goes on.
func TestRetiredActorIsReplaced(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{IdleTimeout: 20 * time.Millisecond})
	g, release := b.holdCalls("push")
	first := b.pushAsync(context.Background(), group("q", "p", "one"))
	g.waitArrival(t) // the first actor is alive, inside its batch

	var old *actor
	retired := make(chan struct{})
	b.reg.hooks.retired = func(a *actor) {
		if a == old {
			close(retired)
		}
	}
	var lookups []*actor
	b.reg.hooks.afterLookup = func(a *actor) {
		lookups = append(lookups, a)
		if len(lookups) == 1 {
			old = a
			release() // let it finish its batch, idle and retire
			<-retired
		}
	}
	second := group("q", "p", "two")
	b.reg.Push(context.Background(), []*reginatype.PushGroup{second})
	waitDone(t, first)
	require.NoError(t, second.Err)
	require.Equal(t, []string{"queued"}, statuses(second))
	require.Len(t, lookups, 2, "the registry looked up again after the refusal")
	require.NotSame(t, lookups[0], lookups[1], "a new actor took the group")
}

// A panic while pushing fails that batch (retryable, outcome unknown to the
// client) and leaves the actor working; the partition is resolved again.
func TestPanicInBatchIsRecovered(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	panicking := true
	b.store.before = func(op string) {
		if op == "push" && panicking {
			panicking = false
			panic("boom")
		}
	}
	g := group("q", "p", "a")
	b.reg.Push(context.Background(), []*reginatype.PushGroup{g})
	require.ErrorIs(t, g.Err, errPanicked)
	require.Equal(t, uint64(1), b.reg.Stats().PushFailures)

	again := group("q", "p", "a")
	b.reg.Push(context.Background(), []*reginatype.PushGroup{again})
	require.NoError(t, again.Err)
	require.Equal(t, []string{"queued"}, statuses(again), "nothing of the panicked batch was written")
	b.store.mu.Lock()
	defer b.store.mu.Unlock()
	require.Equal(t, 2, b.store.ensures, "the partition is resolved again after a panic")
}

// Close answers every group already waiting, with its verdict, before the
// actors exit; a push after it is refused.
func TestCloseDrainsMailboxes(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	g, release := b.holdCalls("push")
	held := group("q", "p", "h")
	waiting := []*reginatype.PushGroup{group("q", "p", "w1"), group("q", "p", "w2", "w1")}
	done := []<-chan struct{}{b.pushAsync(context.Background(), held)}
	g.waitArrival(t)
	for i, w := range waiting {
		done = append(done, b.pushAsync(context.Background(), w))
		b.waitDepth(t, "q", "p", []int{1, 3}[i])
	}
	closed := make(chan error, 1)
	go func() { closed <- b.reg.Close(context.Background()) }()
	release()
	require.NoError(t, <-closed)
	for _, d := range done {
		waitDone(t, d)
	}
	require.NoError(t, held.Err)
	require.Equal(t, []string{"queued"}, statuses(waiting[0]))
	require.Equal(t, []string{"queued", "duplicate"}, statuses(waiting[1]))
	require.Equal(t, 0, b.reg.Stats().Actors)

	late := group("q", "p", "late")
	b.reg.Push(context.Background(), []*reginatype.PushGroup{late})
	require.ErrorIs(t, late.Err, reginatype.ErrShuttingDown)
}

// A caller whose ctx ends while its group is still in the mailbox stops
// waiting at once; the group is withdrawn and never written.
func TestCancelWhileInMailbox(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	g, release := b.holdCalls("push")
	first := b.pushAsync(context.Background(), group("q", "p", "held"))
	g.waitArrival(t)

	ctx, cancel := context.WithCancel(context.Background())
	gone := group("q", "p", "gone")
	done := b.pushAsync(ctx, gone)
	b.waitDepth(t, "q", "p", 1)
	cancel()
	waitDone(t, done) // while the batch ahead is still held
	require.ErrorIs(t, gone.Err, context.Canceled)
	require.NotErrorIs(t, gone.Err, reginatype.ErrOutcomeUnknown, "nothing of it was written: a definite answer")
	require.Nil(t, gone.Results)
	require.Equal(t, 0, b.reg.MailboxDepth("q", "p"))

	release()
	waitDone(t, first)
	after := group("q", "p", "after", "gone")
	b.reg.Push(context.Background(), []*reginatype.PushGroup{after})
	require.Equal(t, []string{"queued", "queued"}, statuses(after), "the withdrawn group was never stored")
	require.Equal(t, []string{"held"}, b.store.seen()[0].TxIDs)
}

// A caller whose ctx ends while its group is in a batch stops waiting; the
// batch goes on, its verdict is kept (counted, taught to the dedup state),
// the caller gets a retryable "outcome unknown", and its buffers are free
// at once: the stored payload is the one pushed, even when the caller
// overwrote it before the batch was built.
func TestCancelWhileInBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	g, release := b.holdCalls("ensure")
	ctx, cancel := context.WithCancel(context.Background())
	abandoned := group("q", "p", "kept")
	done := b.pushAsync(ctx, abandoned)
	g.waitArrival(t)
	cancel()
	waitDone(t, done)
	require.ErrorIs(t, abandoned.Err, reginatype.ErrOutcomeUnknown)
	require.ErrorIs(t, abandoned.Err, context.Canceled)
	require.True(t, reginatype.IsRetryable(abandoned.Err))
	require.Nil(t, abandoned.Results, "no verdict is delivered to a caller that left")
	copy(abandoned.Items[0].Payload, "XXXXXX") // the caller reuses its buffer

	release()
	require.Eventually(t, func() bool { return b.reg.Stats().Queued == 1 }, 30*time.Second, time.Millisecond,
		"the abandoned batch still commits and is counted")
	require.Equal(t, []string{`"kept"`}, b.store.seen()[0].Payloads)

	retry := group("q", "p", "kept")
	b.reg.Push(context.Background(), []*reginatype.PushGroup{retry})
	require.NoError(t, retry.Err)
	require.Equal(t, []string{"duplicate"}, statuses(retry), "the client's retry finds the stored original")
}

// A push whose ctx has already ended sends nothing.
func TestPushWithEndedContext(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	g := group("q", "p", "a")
	b.reg.Push(ctx, []*reginatype.PushGroup{g})
	require.ErrorIs(t, g.Err, context.Canceled)
	require.Empty(t, b.store.seen())
	require.Equal(t, 0, b.reg.Stats().Actors)
}

// A store error fails the whole batch (each of its groups gets it) and is
// counted.
func TestStoreErrorFailsTheBatch(t *testing.T) {
	t.Parallel()
	reg := NewRegistry(&failingStore{fakeStore: newFakeStore(), err: reginatype.ErrUnavailable}, Config{})
	t.Cleanup(func() { require.NoError(t, reg.Close(context.Background())) })
	g := group("q", "p", "a", "b")
	reg.Push(context.Background(), []*reginatype.PushGroup{g})
	require.ErrorIs(t, g.Err, reginatype.ErrUnavailable)
	require.Nil(t, g.Results)
	require.Equal(t, uint64(1), reg.Stats().PushFailures)
}

// failingStore fails every Push with err.
type failingStore struct {
	*fakeStore
	err error
}

func (f *failingStore) Push(context.Context, *reginatype.PushBatch) (reginatype.PushResult, error) {
	return reginatype.PushResult{}, f.err
}

// Above ActorsSoftLimit live actors, an actor whose mailbox empties retires
// after BusyIdleTimeout; at or below it, after IdleTimeout (an hour here, so
// any retirement comes from the limit). Live actors settle at the limit.
func TestActorsAboveTheSoftLimitRetireSoon(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{IdleTimeout: time.Hour, ActorsSoftLimit: 3, BusyIdleTimeout: time.Millisecond})
	retired := make(chan struct{}, 16)
	b.reg.hooks.retired = func(*actor) { retired <- struct{}{} }
	for i := range 8 {
		g := group("q", fmt.Sprintf("p%d", i), "x")
		b.reg.Push(context.Background(), []*reginatype.PushGroup{g})
		require.NoError(t, g.Err)
	}
	// 8 actors were started; with 3 allowed, at least 5 retire. Each one
	// that does retires while more than 3 were live (under the hour's
	// timeout nothing else retires), so the count never goes below 3.
	// p0 and p1 emptied their mailboxes with at most 3 live: an hour's
	// timeout. p3-p7 each did with at least 4 live (p0-p2 and itself): they
	// retire. p2 may have done either (p3 may start before p2 re-arms).
	for range 5 {
		select {
		case <-retired:
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d of the actors above the soft limit retired", len(retired))
		}
	}
	n := b.reg.Stats().Actors
	require.LessOrEqual(t, n, 3, "actors above the soft limit retire")
	require.GreaterOrEqual(t, n, 2, "actors started at or below the limit keep the long timeout")
}

// A queue's options are read once per refresh for all its partitions, not
// once per actor: after OptionsChanged the first batch reads them from the
// store and every other actor of the queue takes them from the registry
// (here: a payload check switched on, which every partition's next batch
// follows).
func TestQueueOptionsAreReadOncePerQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{RefreshOptions: time.Hour})
	const parts = 20
	push := func(tag string) {
		for p := range parts {
			g := group("q", "p"+strconv.Itoa(p), tag+strconv.Itoa(p))
			b.reg.Push(context.Background(), []*reginatype.PushGroup{g})
			require.NoError(t, g.Err)
		}
	}
	ensures := func() int {
		b.store.mu.Lock()
		defer b.store.mu.Unlock()
		return b.store.ensures
	}
	push("a")
	require.Equal(t, parts, ensures(), "each new partition is resolved once")
	push("b")
	require.Equal(t, parts, ensures(), "known partitions and fresh options: no store call")

	b.store.mu.Lock()
	for k, ref := range b.store.refs {
		ref.PayloadCheck = partition.PayloadCheckReport
		b.store.refs[k] = ref
	}
	b.store.check = partition.PayloadCheckReport
	b.store.mu.Unlock()
	b.reg.OptionsChanged()
	push("c")
	require.Equal(t, parts+1, ensures(), "one read of the queue's new options for all its partitions")
	b.store.mu.Lock()
	defer b.store.mu.Unlock()
	require.Len(t, b.store.fps, parts, "every partition's batch carried fingerprints after the change")
}
