package actor

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/reginatype"
)

// pollStore is a LinkedStore whose pops find nothing until work is set, and
// whose HasWork calls block until the test answers them, so the test sees
// how many are in flight at once.
type pollStore struct {
	LinkedStore // the calls Pop never makes (nil: they would panic)

	work     atomic.Bool
	pops     atomic.Int64
	inFlight atomic.Int64
	maxIn    atomic.Int64
	checks   atomic.Int64
	answers  chan bool
}

func (s *pollStore) Pop(_ context.Context, req reginatype.PopRequest) (reginatype.PopResult, error) {
	s.pops.Add(1)
	if s.work.Load() {
		return reginatype.PopResult{Messages: []reginatype.PoppedMessage{{Offset: 1}}}, nil
	}
	return reginatype.PopResult{Empty: "no_available_partition"}, nil
}

func (s *pollStore) HasWork(ctx context.Context, _ reginatype.PopRequest) (bool, error) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.maxIn.Load()
		if n <= m || s.maxIn.CompareAndSwap(m, n) {
			break
		}
	}
	s.checks.Add(1)
	select {
	case a := <-s.answers:
		return a, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// TestLongPollsShareOnePoller: fifty pops waiting on one queue and group are
// served by one poller, which asks the store one question at a time (not
// one per waiting pop); when it sees work, every waiter pops again and gets
// it.
func TestLongPollsShareOnePoller(t *testing.T) {
	b := setup(t, Config{})
	st := &pollStore{answers: make(chan bool)}
	l := b.reg.Link(st)
	l.polls.interval = time.Millisecond
	const waiters = 50
	req := reginatype.PopRequest{Queue: "q", Group: "g"}
	var wg sync.WaitGroup
	got := make(chan int, waiters)
	for range waiters {
		wg.Go(func() {
			res, err := l.Pop(context.Background(), req, time.Minute)
			if err == nil {
				got <- len(res.Messages)
			}
		})
	}
	require.Eventually(t, func() bool { return st.pops.Load() == waiters && st.inFlight.Load() == 1 },
		30*time.Second, time.Millisecond, "every pop looked once and a poller asked")
	require.Equal(t, 1, l.polls.count(), "one poller for the key")
	// Answer "nothing yet" a few times: the poller asks again, alone.
	for range 3 {
		st.answers <- false
	}
	st.work.Store(true)
	st.answers <- true
	wg.Wait()
	close(got)
	for n := range got {
		require.Equal(t, 1, n)
	}
	require.Equal(t, int64(1), st.maxIn.Load(), "the store was asked one question at a time")
	require.Equal(t, int64(2*waiters), st.pops.Load(), "each waiter popped twice: once before waiting, once woken")
	require.Eventually(t, func() bool { return l.polls.count() == 0 }, 30*time.Second, time.Millisecond,
		"the poller stops when no pop waits")
	// Unblock a check the poller may have started after the last waiter left.
	select {
	case st.answers <- false:
	default:
	}
}

// commitStore is a LinkedStore whose pop takes a lease (commits) only once
// the test lets it, after the caller's context has ended; it fails the pop
// when its context is cancelled, as pgx does for a statement cut short.
type commitStore struct {
	LinkedStore
	entered chan struct{}
	commit  chan struct{}
}

func (s *commitStore) Pop(ctx context.Context, _ reginatype.PopRequest) (reginatype.PopResult, error) {
	close(s.entered)
	select {
	case <-s.commit:
		return reginatype.PopResult{Messages: []reginatype.PoppedMessage{{Offset: 1}}}, nil
	case <-ctx.Done():
		return reginatype.PopResult{}, ctx.Err()
	}
}

// TestPopLookOutlivesItsCaller: a long poll whose caller leaves while the
// store is taking a lease gets the lease back (to release it), never an
// error that would leave the lease held by nobody until it expires.
func TestPopLookOutlivesItsCaller(t *testing.T) {
	b := setup(t, Config{})
	st := &commitStore{entered: make(chan struct{}), commit: make(chan struct{})}
	l := b.reg.Link(st)
	ctx, cancel := context.WithCancel(context.Background())
	type answer struct {
		res reginatype.PopResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := l.Pop(ctx, reginatype.PopRequest{Queue: "q"}, time.Minute)
		done <- answer{res, err}
	}()
	<-st.entered
	cancel()
	close(st.commit)
	a := <-done
	require.NoError(t, a.err)
	require.Len(t, a.res.Messages, 1, "the leased messages come back to the caller, who settles them")

	// A caller already gone before the look takes nothing.
	res, err := l.Pop(ctx, reginatype.PopRequest{Queue: "q"}, time.Minute)
	require.NoError(t, err)
	require.Empty(t, res.Messages)
}
