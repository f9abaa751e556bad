package sqlstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/regina-mq/regina/reginatype"
)

// citusPopPrepare is popPrepare on Citus: queen.citus_pop_prepare (the
// queue, a named group's start point), then for an any-partition pop the
// group's catch-up on every worker (citusCatchUp).
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
			err = s.citusCatchUp(ctx, q.id, req.Group, subFrom)
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

// citusCatchUp catches the group up on every worker: one delegated call of
// queen.citus_catch_up_worker per worker, with that worker's horizon, and
// records the horizons that moved.
//
// It is skipped when the group caught up through this store less than
// citusCatchUpEvery ago and this store sent no push since: a pop then
// reaches no worker for the catch-up. A push through another broker is
// therefore seen by this broker's pops up to citusCatchUpEvery later (its
// long polls ask every 200 ms anyway); one through this broker at once.
func (s *Store) citusCatchUp(ctx context.Context, queue [16]byte, group string, subFrom *time.Time) error {
	gk := citusGroupKey{queue, group}
	now := time.Now()
	pushes := s.citus.pushes.Load()
	if v, ok := s.citus.caught.Load(gk); ok {
		if c, ok := v.(citusCaught); ok && c.pushes == pushes && now.Sub(c.at) < citusCatchUpEvery {
			return nil
		}
	}
	if err := s.citusCatchUpNow(ctx, queue, group, subFrom); err != nil {
		return err
	}
	s.citus.caught.Store(gk, citusCaught{at: now, pushes: pushes})
	return nil
}

// citusCatchUpEvery bounds how long a group's catch-up through one store is
// skipped while the store pushed nothing (citusCatchUp).
const citusCatchUpEvery = 50 * time.Millisecond

// citusCatchUpNow is the catch-up itself: one delegated call per worker.
func (s *Store) citusCatchUpNow(ctx context.Context, queue [16]byte, group string, subFrom *time.Time) error {
	keys, err := s.citusKeys(ctx)
	if err != nil {
		return err
	}
	rows, err := s.pool.Query(ctx, s.sql.citusHorizons, queue, group)
	if err != nil {
		return fmt.Errorf("catch-up horizons: %w", err)
	}
	// Per worker: its last snapshot's xmax and running ids, as text.
	type horizon struct{ xmax, running string }
	hs := map[int32]horizon{}
	for rows.Next() {
		var node int32
		var h horizon
		if err := rows.Scan(&node, &h.xmax, &h.running); err != nil {
			rows.Close()
			return fmt.Errorf("catch-up horizons: %w", err)
		}
		hs[node] = h
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("catch-up horizons: %w", err)
	}
	// One delegated call per worker, all at once: the catch-up costs one
	// round trip, however many workers.
	type answer struct {
		node          int32
		before        *horizon
		after, runAft *string
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
			var caught int32
			if err := s.pool.QueryRow(ctx, s.sql.citusCatchUp, k.key, queue, group, subFrom, xmax, running).
				Scan(pgtypeComposite(&caught, &a.after, &a.runAft, &a.node)); err != nil {
				a.err = fmt.Errorf("catch-up on worker %d: %w", k.node, err)
			}
		})
	}
	wg.Wait()
	for _, a := range answers {
		if a.err != nil {
			return a.err
		}
	}
	for _, a := range answers {
		if a.after == nil || a.runAft == nil || (a.before != nil && *a.after == a.before.xmax && *a.runAft == a.before.running) {
			continue
		}
		if _, err := s.pool.Exec(ctx, s.sql.citusSetHorizon, queue, group, a.node, *a.after, *a.runAft); err != nil {
			return fmt.Errorf("catch-up horizon of worker %d: %w", a.node, err)
		}
	}
	return nil
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
