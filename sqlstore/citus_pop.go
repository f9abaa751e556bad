package sqlstore

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/regina-mq/regina/reginatype"
)

// citusPopPrepare is popPrepare on Citus: queen.citus_pop_prepare (the
// queue, a named group's start point), then for an any-partition pop the
// group's catch-up and ready candidates on every worker, unless this store's
// cache of them is fresh (citusRefresh).
func (s *Store) citusPopPrepare(ctx context.Context, req *reginatype.PopRequest) (queueInfo, *time.Time, bool, error) {
	var from *time.Time
	if req.Group != reginatype.QueueModeGroup && !req.SubscriptionFrom.IsZero() {
		from = &req.SubscriptionFrom
	}
	var (
		q       queueInfo
		id      *[16]byte
		subFrom *time.Time
	)
	err := s.pool.QueryRow(ctx, s.sql.citusPopPrepare, req.Queue, req.Group, req.SubscriptionNew, from).
		Scan(&id, &q.leaseTime, &q.delayed, &q.windowBuffer, &q.lim, &subFrom)
	if err != nil || id == nil {
		return q, nil, false, err
	}
	q.id = *id
	if q.leaseTime <= 0 {
		q.leaseTime = 60
	}
	if req.Partition == "" {
		for attempt := 1; ; attempt++ {
			err = s.citusRefresh(ctx, q.id, req.Group, subFrom)
			if err == nil || attempt >= 4 || !isRetryableTxError(err) {
				break
			}
		}
		if err != nil {
			return q, nil, false, err
		}
	}
	return q, subFrom, true, nil
}

// citusCatchUpNow is the catch-up and the ready read on every worker: one
// delegated call of queen.citus_ready_worker per worker, all at once, with
// that worker's horizon. It records the horizons that moved and answers the
// ready candidates of all workers, longest waiting first.
func (s *Store) citusCatchUpNow(ctx context.Context, queue [16]byte, group string, subFrom *time.Time) ([]citusCandidate, error) {
	keys, err := s.citusKeys(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.sql.citusHorizons, queue, group)
	if err != nil {
		return nil, fmt.Errorf("catch-up horizons: %w", err)
	}
	// Per worker: its last snapshot's xmax and running ids, as text.
	type horizon struct{ xmax, running string }
	hs := map[int32]horizon{}
	for rows.Next() {
		var node int32
		var h horizon
		if err := rows.Scan(&node, &h.xmax, &h.running); err != nil {
			rows.Close()
			return nil, fmt.Errorf("catch-up horizons: %w", err)
		}
		hs[node] = h
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("catch-up horizons: %w", err)
	}
	// One delegated call per worker, all at once: the catch-up and the
	// ready read cost one round trip, however many workers.
	type answer struct {
		node          int32
		before        *horizon
		after, runAft *string
		ready         []citusCandidate
		err           error
	}
	answers := make([]answer, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		a := &answers[i]
		var xmax, running *string
		if v, ok := hs[k.node]; ok {
			a.before = &v
			xmax, running = &v.xmax, &v.running
		}
		wg.Go(func() {
			var (
				caught int32
				ready  string
			)
			if err := s.pool.QueryRow(ctx, s.sql.citusReady, k.key, queue, group, subFrom, xmax, running, citusReadyLimit).
				Scan(pgtypeComposite(&caught, &a.after, &a.runAft, &a.node, &ready)); err != nil {
				a.err = fmt.Errorf("catch-up on worker %d: %w", k.node, err)
				return
			}
			cands, perr := parseCitusReady(ready)
			if perr != nil {
				a.err = fmt.Errorf("ready candidates of worker %d: %w", k.node, perr)
			}
			a.ready = cands
		})
	}
	wg.Wait()
	var all []citusCandidate
	for _, a := range answers {
		if a.err != nil {
			return nil, a.err
		}
		all = append(all, a.ready...)
	}
	for _, a := range answers {
		if a.after == nil || a.runAft == nil || (a.before != nil && *a.after == a.before.xmax && *a.runAft == a.before.running) {
			continue
		}
		if _, err := s.pool.Exec(ctx, s.sql.citusSetHorizon, queue, group, a.node, *a.after, *a.runAft); err != nil {
			return nil, fmt.Errorf("catch-up horizon of worker %d: %w", a.node, err)
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].avail.Before(all[j].avail) })
	return all, nil
}

// citusKeys returns one partition key per worker holding shards (cached for
// citusKeysTTL): random ids, one per shard found, then one per worker.
func (s *Store) citusKeys(ctx context.Context) ([]citusNodeKey, error) {
	c := s.citus
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys != nil && time.Since(c.keysAt) < citusKeysTTL {
		return c.keys, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT ON (pl.groupid) pl.groupid, u.k
		  FROM (SELECT gen_random_uuid() AS k FROM generate_series(1, 64 * (SELECT count(*) FROM pg_dist_shard
		                                                                   WHERE logicalrelid = $1::regclass))) u
		  JOIN pg_dist_placement pl ON pl.shardid = get_shard_id_for_distribution_column($1::regclass, u.k)
		 ORDER BY pl.groupid`, c.relName)
	if err != nil {
		return nil, fmt.Errorf("citus worker keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (citusNodeKey, error) {
		var k citusNodeKey
		err := r.Scan(&k.node, &k.key)
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("citus worker keys: %w", err)
	}
	c.keys, c.keysAt = keys, time.Now()
	return keys, nil
}
