package actor

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// refs is what the registry knows of partitions beyond their actors' lives:
// each queue's options as last read (shared by all its actors) and the ids
// of recently resolved partitions. An actor reads its queue's options at
// least every RefreshOptions; without this, each of a queue's N actors read
// them itself (one Store.EnsurePartition round trip each), so at one message
// per push over 1000 partitions a quarter of the pushes paid a second round
// trip (pprof: EnsurePartition 8-10% of the broker's CPU, docs/performance.md).
// Now a queue's options are read once per RefreshOptions whatever its
// partition count, and an actor that starts again on a partition resolved
// before (after its idle retirement) needs no round trip either.
type refs struct {
	mu     sync.Mutex
	queues map[string]queueRef
	ids    *simplelru.LRU[string, partition.UUID]
}

// queueRef is a queue's options as read at at under the registry's options
// generation gen.
type queueRef struct {
	ref reginatype.PartitionRef // QueueID and the options; ID is not used
	gen uint64
	at  time.Time
}

// maxRememberedIDs bounds the partition ids kept after their actors
// retired (about 100 bytes each).
const maxRememberedIDs = 100_000

func newRefs() *refs {
	ids, _ := simplelru.NewLRU[string, partition.UUID](maxRememberedIDs, nil) // the size is positive: no error
	return &refs{queues: map[string]queueRef{}, ids: ids}
}

// lookup returns the partition's ref from what the registry knows, when its
// id is known and its queue's options were read under gen less than maxAge
// ago; at is when they were read.
func (r *refs) lookup(k, queue string, gen uint64, maxAge time.Duration) (ref reginatype.PartitionRef, at time.Time, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q, fresh := r.queues[queue]
	if !fresh || q.gen != gen || time.Since(q.at) >= maxAge {
		return ref, at, false
	}
	id, known := r.ids.Get(k)
	if !known {
		return ref, at, false
	}
	ref = q.ref
	ref.ID = id
	return ref, q.at, true
}

// remember records a ref read from the store at at under gen.
func (r *refs) remember(k, queue string, ref reginatype.PartitionRef, gen uint64, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if q, ok := r.queues[queue]; !ok || q.gen < gen || (q.gen == gen && q.at.Before(at)) {
		r.queues[queue] = queueRef{ref: ref, gen: gen, at: at}
	}
	r.ids.Add(k, ref.ID)
}

// forget drops the partition's id and its queue's options (the partition
// went missing, or a batch's outcome is unknown): the next resolve reads
// the store.
func (r *refs) forget(k, queue string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.queues, queue)
	r.ids.Remove(k)
}

// resolve makes a.ref current: from what the registry knows when that is
// fresh enough, else from the store (EnsurePartition, which creates the
// queue and the partition when missing).
func (a *actor) resolve(ctx context.Context) error {
	r := a.reg
	gen := r.optionsGen.Load()
	if ref, at, ok := r.refs.lookup(a.key, a.queue, gen, r.cfg.RefreshOptions); ok {
		a.setRef(ref, gen, at)
		return nil
	}
	at := time.Now()
	ref, err := r.store.EnsurePartition(ctx, a.queue, a.part)
	if err != nil {
		return err
	}
	r.refs.remember(a.key, a.queue, ref, gen, at)
	a.setRef(ref, gen, at)
	return nil
}

// unresolve makes the next batch resolve the partition from the store.
func (a *actor) unresolve() {
	a.resolved = false
	a.reg.refs.forget(a.key, a.queue)
}
