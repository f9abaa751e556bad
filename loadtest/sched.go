package main

import (
	"sync/atomic"
	"time"
)

// Clock is the time source of the scheduler and the recorder, so tests can
// drive them without real time.
type Clock interface {
	Now() time.Time
	Sleep(d time.Duration)
}

type realClock struct{}

func (realClock) Now() time.Time        { return time.Now() }
func (realClock) Sleep(d time.Duration) { time.Sleep(d) }

// Slot is one push's place in the schedule.
type Slot struct {
	Seq int64
	// Intended is when the push should have been sent. In open loop it is
	// start + Seq/rate whatever the workers were doing; in closed loop it is
	// the actual send time.
	Intended time.Time
	// Start is when the push was actually sent (>= Intended).
	Start time.Time
}

// Lag is how late the push left compared with its schedule.
func (s Slot) Lag() time.Duration { return s.Start.Sub(s.Intended) }

// Latency is the push's latency as a user of the schedule sees it: from the
// intended send time to done. Measuring from Intended rather than Start is
// what avoids coordinated omission: when the broker stalls, the pushes that
// should have been sent during the stall are charged the stall.
func (s Slot) Latency(done time.Time) time.Duration { return done.Sub(s.Intended) }

// Scheduler hands out send slots to any number of workers.
//
// Open loop (interval > 0): slot n is intended at start + n*interval. A
// worker takes the next unclaimed slot, sleeps until its intended time if it
// is early, and sends at once if it is late. Slots are global, not per
// worker, so a slow push delays only its own worker and the other workers
// absorb the schedule; when all of them are busy the backlog shows up as
// latency measured from Intended.
//
// Closed loop (interval == 0): every slot is "now"; workers send back to back.
type Scheduler struct {
	clock    Clock
	start    time.Time
	end      time.Time
	interval time.Duration
	next     atomic.Int64
	stopped  atomic.Bool
	granted  atomic.Bool // a slot was handed out
}

// NewScheduler makes a schedule running from start to end. rate is the
// target pushes per second over all workers; rate <= 0 means closed loop.
func NewScheduler(clock Clock, start, end time.Time, rate float64) *Scheduler {
	s := &Scheduler{clock: clock, start: start, end: end}
	if rate > 0 {
		s.interval = time.Duration(float64(time.Second) / rate)
		if s.interval <= 0 {
			s.interval = 1
		}
	}
	return s
}

// OpenLoop reports whether the schedule has a target rate.
func (s *Scheduler) OpenLoop() bool { return s.interval > 0 }

// Interval is the time between two intended sends (0 in closed loop).
func (s *Scheduler) Interval() time.Duration { return s.interval }

// Acquire blocks until the next slot is due and returns it, or returns
// false when the run is over: the next slot's intended time is at or after
// the end, or the clock has passed the end (slots due before the end but
// not sent are the backlog: Planned minus the pushes sent). The run's
// first slot is an exception: it is handed out however late it is asked
// for (unless the run was stopped), so that every run sends at least one
// push. A short run whose workers start late (a starved machine) would
// otherwise measure nothing at all.
func (s *Scheduler) Acquire() (Slot, bool) {
	now := s.clock.Now()
	if s.stopped.Load() {
		return Slot{}, false
	}
	first := s.granted.CompareAndSwap(false, true)
	if !first && !now.Before(s.end) {
		return Slot{}, false
	}
	if s.interval == 0 {
		return Slot{Seq: s.next.Add(1) - 1, Intended: now, Start: now}, true
	}
	seq := s.next.Add(1) - 1
	intended := s.start.Add(time.Duration(seq) * s.interval)
	if !first && !intended.Before(s.end) {
		return Slot{}, false
	}
	if wait := intended.Sub(now); wait > 0 {
		s.clock.Sleep(wait)
		now = s.clock.Now()
	}
	if !first && (!now.Before(s.end) || s.stopped.Load()) {
		return Slot{}, false
	}
	return Slot{Seq: seq, Intended: intended, Start: now}, true
}

// Planned is the number of slots an open-loop schedule holds (0 in closed
// loop).
func (s *Scheduler) Planned() int64 {
	if s.interval == 0 {
		return 0
	}
	d := s.end.Sub(s.start)
	return int64((d + s.interval - 1) / s.interval)
}

// Pause waits d, or until the end of the run if that comes first, and
// reports whether the run is still on.
func (s *Scheduler) Pause(d time.Duration) bool {
	d = min(d, s.end.Sub(s.clock.Now()))
	if d > 0 && !s.stopped.Load() {
		s.clock.Sleep(d)
	}
	return s.clock.Now().Before(s.end) && !s.stopped.Load()
}

// Stop ends the schedule early: every later Acquire returns false.
func (s *Scheduler) Stop() { s.stopped.Store(true) }
