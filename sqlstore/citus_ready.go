package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// The any-partition pop's candidates on Citus. On one PostgreSQL a pop
// reads its candidates from the ready index (popCandidates). On Citus that
// read is a multi-shard statement: it would reach every worker on every
// pop. Instead each store keeps, per (queue, group), a cache of the ready
// cursor rows of every worker, filled by the same per-worker delegated call
// that catches the group up (queen.citus_ready_worker, citusCatchUpNow). A
// pop takes its candidates out of the cache (asking no worker for them) and
// locks and re-checks each one on its own worker (popPartition, as before):
// a stale entry costs one single-shard round trip and is dropped.
//
// The cache is filled again (citusRefresh) when it is older than
// citusCatchUpEvery, or when it is empty and this store pushed or acked
// since it was filled. An empty cache within its TTL answers
// no_available_partition without reaching any worker. So a message pushed,
// or a partition released, through another broker is seen by this store's
// pops up to citusCatchUpEvery later (long polls ask again each interval);
// through this store at once when the cache is empty, and at most
// citusCatchUpEvery later otherwise (the cache's own work is served first).

// citusReadyLimit bounds the candidates one worker answers per refresh.
const citusReadyLimit = 64

// citusCatchUpEvery is how long a group's cache of candidates (and so its
// catch-up) is reused by one store (citusRefresh).
const citusCatchUpEvery = 50 * time.Millisecond

// citusCandidate is a cached ready cursor row: its partition, and since
// when it waits (the order in which pops take them).
type citusCandidate struct {
	reginatype.ClaimedPartition
	avail time.Time
}

// citusReady is one (queue, group)'s cache of candidates in one store.
type citusReady struct {
	refresh sync.Mutex // one refresh at a time; the others wait for it
	mu      sync.Mutex // the fields below
	filled  bool
	at      time.Time
	changes uint64 // the store's change count when it was filled
	cands   []citusCandidate
}

// citusChanged counts a push, ack or transaction this store sent (a no-op
// off Citus): an empty cache of candidates is then filled again at once.
func (s *Store) citusChanged() {
	if s.citus != nil {
		s.citus.changes.Add(1)
	}
}

// citusReadyOf returns the cache of gk, made on first use.
func (s *Store) citusReadyOf(gk citusGroupKey) *citusReady {
	if v, ok := s.citus.ready.Load(gk); ok {
		return v.(*citusReady) //nolint:forcetypeassert // only *citusReady is stored
	}
	v, _ := s.citus.ready.LoadOrStore(gk, &citusReady{})
	return v.(*citusReady) //nolint:forcetypeassert // only *citusReady is stored
}

// citusRefresh catches the group up and fills its cache of candidates
// (citusCatchUpNow) unless the cache is fresh: filled less than the TTL ago
// and either holding candidates or filled after this store's last change.
func (s *Store) citusRefresh(ctx context.Context, queue [16]byte, group string, subFrom *time.Time) error {
	r := s.citusReadyOf(citusGroupKey{queue, group})
	r.refresh.Lock()
	defer r.refresh.Unlock()
	now := time.Now()
	changes := s.citus.changes.Load()
	r.mu.Lock()
	fresh := r.filled && now.Sub(r.at) < s.citus.readyTTL && (len(r.cands) > 0 || r.changes == changes)
	r.mu.Unlock()
	if fresh {
		return nil
	}
	cands, err := s.citusCatchUpNow(ctx, queue, group, subFrom)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.filled, r.at, r.changes, r.cands = true, now, changes, cands
	r.mu.Unlock()
	return nil
}

// citusTake removes up to n candidates from the group's cache, longest
// waiting first: concurrent pops of the group through this store never take
// the same one.
func (s *Store) citusTake(queue [16]byte, group string, n int) []popCandidate {
	r := s.citusReadyOf(citusGroupKey{queue, group})
	r.mu.Lock()
	defer r.mu.Unlock()
	n = min(n, len(r.cands))
	out := make([]popCandidate, n)
	for i := range n {
		out[i].ClaimedPartition = r.cands[i].ClaimedPartition
	}
	r.cands = r.cands[n:]
	return out
}

// citusPutBack returns a candidate that may have more to serve (an
// auto-acked pop that filled its batch: no lease holds it) to the end of the
// group's cache.
func (s *Store) citusPutBack(queue [16]byte, group string, c reginatype.ClaimedPartition) {
	r := s.citusReadyOf(citusGroupKey{queue, group})
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.cands {
		if x.ID == c.ID {
			return
		}
	}
	r.cands = append(r.cands, citusCandidate{ClaimedPartition: c, avail: time.Now()})
}

// citusHasReady reports whether the group's cache holds a candidate.
func (s *Store) citusHasReady(queue [16]byte, group string) bool {
	r := s.citusReadyOf(citusGroupKey{queue, group})
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.cands) > 0
}

// parseCitusReady reads citus_ready_worker's ready answer: a JSON array of
// [partition id, name, avail_at].
func parseCitusReady(s string) ([]citusCandidate, error) {
	var rows [][3]string
	if err := json.Unmarshal([]byte(s), &rows); err != nil {
		return nil, fmt.Errorf("ready candidates: %w", err)
	}
	out := make([]citusCandidate, 0, len(rows))
	for _, r := range rows {
		id, err := partition.ParseUUID(r[0])
		if err != nil {
			return nil, fmt.Errorf("ready candidate %q: %w", r[0], err)
		}
		at, err := time.Parse(time.RFC3339Nano, r[2])
		if err != nil {
			return nil, fmt.Errorf("ready candidate %s avail_at %q: %w", r[0], r[2], err)
		}
		out = append(out, citusCandidate{ClaimedPartition: reginatype.ClaimedPartition{ID: id, Name: r[1]}, avail: at})
	}
	return out, nil
}
