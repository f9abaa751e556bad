package main

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is a manual clock: Sleep advances it instead of waiting.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	slept []time.Duration
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept = append(c.slept, d)
	c.now = c.now.Add(d)
}

// frozenClock never moves; Sleep returns at once.
type frozenClock struct{ t time.Time }

func (c frozenClock) Now() time.Time    { return c.t }
func (frozenClock) Sleep(time.Duration) {}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// drive runs one worker against the schedule with the given service time
// per push (index -> duration) and returns its slots and latencies.
func drive(clock *fakeClock, s *Scheduler, service func(i int) time.Duration) (slots []Slot, lat []time.Duration) {
	for i := 0; ; i++ {
		slot, ok := s.Acquire()
		if !ok {
			return slots, lat
		}
		clock.Advance(service(i))
		slots = append(slots, slot)
		lat = append(lat, slot.Latency(clock.Now()))
	}
}

func TestSchedulerOpenLoopOnTime(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	start := clock.Now()
	// 100 pushes/s: one every 10 ms; 5 ms service keeps up.
	s := NewScheduler(clock, start, start.Add(100*time.Millisecond), 100)
	require.True(t, s.OpenLoop())
	require.Equal(t, 10*time.Millisecond, s.Interval())
	require.Equal(t, int64(10), s.Planned())

	slots, lat := drive(clock, s, func(int) time.Duration { return 5 * time.Millisecond })
	require.Len(t, slots, 10)
	for i, sl := range slots {
		require.Equal(t, int64(i), sl.Seq)
		require.Equal(t, start.Add(time.Duration(i)*10*time.Millisecond), sl.Intended)
		require.Equal(t, sl.Intended, sl.Start, "on schedule: no lag")
		require.Equal(t, 5*time.Millisecond, lat[i])
	}
	// The worker slept until each intended time (none for the first).
	require.Len(t, clock.slept, 9)
	for _, d := range clock.slept {
		require.Equal(t, 5*time.Millisecond, d)
	}
}

func TestSchedulerChargesStallToScheduledPushes(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	start := clock.Now()
	s := NewScheduler(clock, start, start.Add(100*time.Millisecond), 100)
	// The first push stalls 35 ms, then the broker answers in 5 ms.
	service := func(i int) time.Duration {
		if i == 0 {
			return 35 * time.Millisecond
		}
		return 5 * time.Millisecond
	}
	slots, lat := drive(clock, s, service)
	require.Len(t, slots, 10)
	ms := time.Millisecond
	// Pushes 1..3 were due during the stall and left late, back to back:
	// push 1 due at 10 left at 35, answered at 40: 30 ms from its intended
	// time, although the broker took only 5 ms for it. Latency measured
	// from the send time would have hidden the stall (coordinated
	// omission).
	require.Equal(t, []time.Duration{35 * ms, 30 * ms, 25 * ms, 20 * ms, 15 * ms, 10 * ms, 5 * ms, 5 * ms, 5 * ms, 5 * ms}, lat)
	require.Equal(t, []time.Duration{0, 25 * ms, 20 * ms, 15 * ms, 10 * ms, 5 * ms, 0, 0, 0, 0}, lags(slots))
	for i, sl := range slots {
		require.Equal(t, start.Add(time.Duration(i)*10*ms), sl.Intended, "intended times ignore the stall")
	}
}

func lags(slots []Slot) []time.Duration {
	out := make([]time.Duration, len(slots))
	for i, s := range slots {
		out[i] = s.Lag()
	}
	return out
}

func TestSchedulerBacklogAtTheEnd(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	start := clock.Now()
	s := NewScheduler(clock, start, start.Add(100*time.Millisecond), 100)
	// A 30 ms service time can't keep up with one push every 10 ms.
	slots, lat := drive(clock, s, func(int) time.Duration { return 30 * time.Millisecond })
	// Sent at 0, 30, 60, 90; at 120 the run is over.
	require.Len(t, slots, 4)
	require.Equal(t, []time.Duration{30 * time.Millisecond, 50 * time.Millisecond, 70 * time.Millisecond, 90 * time.Millisecond}, lat)
	require.Equal(t, int64(6), s.Planned()-int64(len(slots)), "six planned pushes never sent")
	_, ok := s.Acquire()
	require.False(t, ok)
}

func TestSchedulerClosedLoop(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	start := clock.Now()
	s := NewScheduler(clock, start, start.Add(time.Second), 0)
	require.False(t, s.OpenLoop())
	require.Zero(t, s.Planned())
	slots, lat := drive(clock, s, func(int) time.Duration { return 300 * time.Millisecond })
	require.Len(t, slots, 4) // at 0, 300, 600, 900 ms
	for i, sl := range slots {
		require.Equal(t, start.Add(time.Duration(i)*300*time.Millisecond), sl.Intended)
		require.Equal(t, sl.Intended, sl.Start)
		require.Equal(t, 300*time.Millisecond, lat[i])
	}
	require.Empty(t, clock.slept, "closed loop never waits")
}

func TestSchedulerStop(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	start := clock.Now()
	s := NewScheduler(clock, start, start.Add(time.Hour), 10)
	_, ok := s.Acquire()
	require.True(t, ok)
	s.Stop()
	_, ok = s.Acquire()
	require.False(t, ok)
}

func TestSchedulerSlotsAreSharedAcrossWorkers(t *testing.T) {
	t.Parallel()
	// Time stands still (sleeps return at once), so every worker is always
	// early and the run ends only when the schedule is exhausted: exactly
	// 1000 slots for 1000/s over 1 s, shared among 8 workers, each once.
	clock := frozenClock{newFakeClock().Now()}
	start := clock.Now()
	s := NewScheduler(clock, start, start.Add(time.Second), 1000)
	var mu sync.Mutex
	seen := map[int64]time.Time{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				slot, ok := s.Acquire()
				if !ok {
					return
				}
				mu.Lock()
				_, dup := seen[slot.Seq]
				seen[slot.Seq] = slot.Intended
				mu.Unlock()
				require.False(t, dup)
			}
		})
	}
	wg.Wait()
	require.Len(t, seen, 1000)
	for seq, at := range seen {
		require.Equal(t, start.Add(time.Duration(seq)*time.Millisecond), at)
	}
}

// A run whose workers ask for their first slot after the end (a short run
// on a starved machine) still sends one push, in either loop; no more.
func TestSchedulerFirstSlotEvenWhenLate(t *testing.T) {
	t.Parallel()
	for _, rate := range []float64{0, 100} {
		clock := newFakeClock()
		start := clock.Now()
		s := NewScheduler(clock, start, start.Add(200*time.Millisecond), rate)
		clock.Advance(time.Second)
		slot, ok := s.Acquire()
		require.True(t, ok, "rate %v: the first slot", rate)
		require.Equal(t, int64(0), slot.Seq)
		_, ok = s.Acquire()
		require.False(t, ok, "rate %v: only the first", rate)
	}
	clock := newFakeClock()
	s := NewScheduler(clock, clock.Now(), clock.Now().Add(time.Second), 0)
	s.Stop()
	_, ok := s.Acquire()
	require.False(t, ok, "a stopped run sends nothing")
}
