package main

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBackoffDoublesUpToTheCapAndResets(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	b := NewBackoff(300*ms, rand.New(rand.NewPCG(1, 2)))
	for round := range 2 {
		// Each wait is within [d/2, d] for d = 50, 100, 200, 300, 300 ms.
		for i, d := range []time.Duration{50 * ms, 100 * ms, 200 * ms, 300 * ms, 300 * ms} {
			got := b.Next()
			require.GreaterOrEqual(t, got, d/2, "round %d wait %d", round, i)
			require.LessOrEqual(t, got, d, "round %d wait %d", round, i)
		}
		b.Reset()
	}

	// A cap below the first wait, and no backoff at all.
	require.LessOrEqual(t, NewBackoff(10*ms, rand.New(rand.NewPCG(1, 2))).Next(), 10*ms)
	require.Zero(t, NewBackoff(0, rand.New(rand.NewPCG(1, 2))).Next())
}

func TestSchedulerPauseStopsAtTheEnd(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	start := clock.Now()
	s := NewScheduler(clock, start, start.Add(time.Second), 0)
	require.True(t, s.Pause(300*time.Millisecond))
	require.Equal(t, start.Add(300*time.Millisecond), clock.Now())
	require.False(t, s.Pause(5*time.Second), "the run ends during the pause")
	require.Equal(t, start.Add(time.Second), clock.Now(), "the pause ends with the run, not after")
	require.False(t, s.Pause(time.Millisecond))
}
