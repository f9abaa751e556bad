package actor

import (
	"context"
	"sync"
	"time"

	"github.com/regina-mq/regina/reginatype"
)

// pollInterval is how often a long-poll poller asks the store whether its
// (queue, group, partition) has work: what bounds how late a waiting pop
// sees a push through another broker or a lease that expired.
const pollInterval = 200 * time.Millisecond

// pollKey is what waiting pops share a poller by: the same queue, consumer
// group and partition ("" for any) see the same work.
type pollKey struct {
	queue, group, partition string
}

// poller asks the store every interval whether its key has work, on behalf
// of every pop waiting on that key, and wakes them when it has.
type poller struct {
	req     reginatype.PopRequest // of the first waiter (the group's start point)
	waiting int                   // under pollers.mu
	ready   chan struct{}         // closed when work was seen; then replaced
}

// pollers holds one poller per key with waiting pops: PostgreSQL is asked
// once per interval per key, however many pops wait on it.
type pollers struct {
	mu       sync.Mutex
	m        map[pollKey]*poller
	interval time.Duration
}

// join registers a waiting pop and returns the channel closed when the key's
// poller sees work, starting the poller if the key has none. Every join is
// followed by one leave.
func (ps *pollers) join(l *Linked, req reginatype.PopRequest) <-chan struct{} {
	k := pollKey{req.Queue, req.Group, req.Partition}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.m == nil {
		ps.m = make(map[pollKey]*poller)
	}
	p, ok := ps.m[k]
	if !ok {
		p = &poller{req: req, ready: make(chan struct{})}
		ps.m[k] = p
		go ps.run(l, k, p)
	}
	p.waiting++
	return p.ready
}

// leave unregisters a waiting pop; the poller stops at its next tick once
// no pop waits.
func (ps *pollers) leave(req reginatype.PopRequest) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p, ok := ps.m[pollKey{req.Queue, req.Group, req.Partition}]; ok {
		p.waiting--
	}
}

// count is the number of running pollers.
func (ps *pollers) count() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return len(ps.m)
}

// run is one key's poller: every interval, while pops wait, one store call.
func (ps *pollers) run(l *Linked, k pollKey, p *poller) {
	interval := ps.interval
	if interval <= 0 {
		interval = pollInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-l.reg.stop:
			ps.mu.Lock()
			delete(ps.m, k)
			ps.mu.Unlock()
			return
		}
		ps.mu.Lock()
		if p.waiting <= 0 {
			delete(ps.m, k)
			ps.mu.Unlock()
			return
		}
		req := p.req
		ps.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*interval)
		has, err := l.store.HasWork(ctx, req)
		cancel()
		if err != nil {
			l.reg.log.Debug().Err(err).Str("queue", k.queue).Msg("long-poll check failed")
			continue
		}
		if has {
			ps.mu.Lock()
			close(p.ready)
			p.ready = make(chan struct{})
			ps.mu.Unlock()
		}
	}
}
