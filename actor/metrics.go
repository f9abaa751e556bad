package actor

import (
	"context"
	"time"

	"github.com/regina-mq/regina/metrics"
	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// Metrics recording of the push path. actor.go calls these as one-liners;
// the families are defined in package metrics.

// Metrics returns the broker's metrics (Config.Metrics, or the registry's
// own when none was given).
func (r *Registry) Metrics() *metrics.Metrics { return r.cfg.Metrics }

// storePush runs the push transaction of a.batch and records its latency.
func (a *actor) storePush(ctx context.Context) (reginatype.PushResult, error) {
	start := time.Now()
	res, err := a.reg.store.Push(ctx, &a.batch)
	a.reg.cfg.Metrics.ObservePushTransaction(time.Since(start))
	return res, err
}

// observeAnswer records a committed batch: its size, each item's verdict
// (a duplicate answered with the zero UUID is duplicate_unknown_original),
// and for each duplicate the probe found, the age of its original (from the
// original's stored time to this transaction's).
func (a *actor) observeAnswer(groups []*Group, res *reginatype.PushResult) {
	m := a.reg.cfg.Metrics
	q := m.ForQueue(a.queue)
	var queued, dup, unknown int
	for _, g := range groups {
		for i := range g.Results {
			switch r := &g.Results[i]; {
			case r.Status == partition.StatusQueued:
				queued++
			case r.MessageID.IsZero():
				unknown++
			default:
				dup++
			}
		}
	}
	m.ObserveBatch(queued + dup + unknown)
	q.Verdicts(queued, dup, unknown)
	for _, at := range res.DupCreated {
		q.ObserveRetryAge(res.CreatedAt.Sub(at))
	}
}

// metricsSnapshot is the scrape-time part of the metrics.
func (r *Registry) metricsSnapshot() metrics.Snapshot {
	st := r.Stats()
	ps := r.store.PoolStats()
	c, h := &st.DedupCache, &st.Hydrations
	budget := r.cfg.CacheBudgetBytes
	if budget <= 0 {
		budget = defaultCacheBudget
	}
	if r.cfg.Cache == nil {
		budget = 0
	}
	return metrics.Snapshot{
		Actors: st.Actors, MailboxDepth: st.MailboxDepth, MailboxFull: st.MailboxFull, PushFailures: st.PushFailures,
		Pool: metrics.PoolSnapshot{Total: ps.Total, Idle: ps.Idle, Acquired: ps.Acquired, Max: ps.Max,
			EmptyAcquires: ps.EmptyAcquireCount},
		Cache: metrics.CacheSnapshot{
			Hits: c.Hits, Found: c.Found, SentinelsByReason: c.SentinelsByReason,
			Bytes: c.Bytes, Budget: budget, Hashes: c.Hashes,
			Partitions: c.Partitions, Hydrating: c.Hydrating, Tombstones: c.Tombstones, TooBig: c.TooBig,
			Evictions: c.Evictions,
			Hydrations: map[string]uint64{"started": h.Started, "finished": h.Finished, "failed": h.Failed,
				"aborted": h.Aborted, "truncated": h.Truncated, "busy": h.Busy, "too_deep": h.TooDeep},
			HydrationsRunning: h.Running,
		},
	}
}
