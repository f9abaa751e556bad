package actor

import (
	"context"
	"sync"
	"time"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// Long-poll re-check schedule: an in-process push wakes a waiting pop at
// once; pushes through other brokers are seen by re-checking, starting at
// pollMin and doubling up to pollMax.
const (
	pollMin = 100 * time.Millisecond
	pollMax = time.Second
)

// pushSignals wakes long-polling pops when a push to their queue commits.
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

// Pop delivers messages. With wait > 0 an empty pop waits up to wait for a
// push to the queue and tries again (woken at once by a push through this
// broker; pushes through other brokers are seen within pollMax), returning
// empty when the time is up or ctx ends.
func (r *Registry) Pop(ctx context.Context, req reginatype.PopRequest, wait time.Duration) (reginatype.PopResult, error) {
	deadline := time.Now().Add(wait)
	backoff := pollMin
	for {
		// Subscribe before looking, so a push that lands in between wakes us.
		woken := r.signals.wait(req.Queue)
		res, err := r.store.Pop(ctx, req)
		if err != nil || len(res.Messages) > 0 || wait <= 0 {
			return res, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return res, nil
		}
		t := time.NewTimer(min(backoff, left))
		select {
		case <-woken:
			backoff = pollMin
		case <-t.C:
			backoff = min(backoff*2, pollMax)
		case <-ctx.Done():
			t.Stop()
			return res, nil
		case <-r.stop:
			t.Stop()
			return res, nil
		}
		t.Stop()
	}
}

// Ack applies acknowledgements for a consumer group.
func (r *Registry) Ack(ctx context.Context, group string, items []reginatype.AckItem) ([]reginatype.AckResult, error) {
	return r.store.Ack(ctx, group, items)
}

// ExtendLease extends a live lease; see sqlstore.Store.ExtendLease.
func (r *Registry) ExtendLease(ctx context.Context, id partition.UUID, seconds int) (time.Time, bool, bool, error) {
	return r.store.ExtendLease(ctx, id, seconds)
}

// ListDLQ lists dead letters and the total matching.
func (r *Registry) ListDLQ(ctx context.Context, f reginatype.DLQFilter) ([]reginatype.DeadLetter, int64, error) {
	return r.store.ListDLQ(ctx, f)
}

// DeleteConsumerGroup removes a group's cursors (all queues, or one).
func (r *Registry) DeleteConsumerGroup(ctx context.Context, group, queue string, deleteMetadata bool) (int64, error) {
	return r.store.DeleteConsumerGroup(ctx, group, queue, deleteMetadata)
}

// Seek moves a group's cursors on a queue to the end (zero at) or to a time.
func (r *Registry) Seek(ctx context.Context, group, queue, part string, at time.Time) (int64, bool, error) {
	return r.store.Seek(ctx, group, queue, part, at)
}

// SetSubscription moves a group's start point.
func (r *Registry) SetSubscription(ctx context.Context, group string, at time.Time) (int64, error) {
	return r.store.SetSubscription(ctx, group, at)
}

// ReplayDLQ puts dead letters back into their partition as new messages,
// bypassing deduplication (see sqlstore.Store.ReplayDLQ), and wakes
// long-polling consumers of the queue.
func (r *Registry) ReplayDLQ(ctx context.Context, partitionID partition.UUID, txID, group string) ([]reginatype.Replayed, error) {
	queue, out, err := r.store.ReplayDLQ(ctx, partitionID, txID, group)
	if err == nil {
		r.signals.notify(queue)
	}
	return out, err
}
