package actor

import "sync"

// pushSignals wakes long-polling pops when a push to their queue commits.
// A waiter subscribes (wait) before it looks, so a push that lands in
// between still wakes it.
type pushSignals struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

// wait returns a channel closed at the next push to queue.
func (p *pushSignals) wait(queue string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch == nil {
		p.ch = make(map[string]chan struct{})
	}
	c, ok := p.ch[queue]
	if !ok {
		c = make(chan struct{})
		p.ch[queue] = c
	}
	return c
}

// notify wakes every pop waiting on queue.
func (p *pushSignals) notify(queue string) {
	p.mu.Lock()
	c, ok := p.ch[queue]
	if ok {
		delete(p.ch, queue)
	}
	p.mu.Unlock()
	if ok {
		close(c)
	}
}
