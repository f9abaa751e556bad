package sqlstore

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// PopMany serves several pops with one transaction and one commit (group
// commit; actor.ConsumeBatcher gathers them). Each pop's catch-up
// (queen.pop_prepare) runs first, outside that transaction and once per
// (queue, group, route), so the shared transaction holds no catch-up's rows.
// The pops then run one after the other inside it, exactly as each would
// alone: a pop sees the leases the earlier ones took (their rows' avail_at
// moved), so two pops of the batch never take the same partition. When the
// shared transaction fails, each pop is run again alone, so one pop's
// failure is its own. res[i] and errs[i] answer reqs[i].
func (s *Store) PopMany(ctx context.Context, reqs []reginatype.PopRequest, res []reginatype.PopResult, errs []error) {
	if len(reqs) == 1 { // a lone pop: Pop's round trips (popFused)
		res[0], errs[0] = s.Pop(ctx, reqs[0])
		return
	}
	type prepKey struct {
		queue, group string
		catchUp, new bool
		from         time.Time
	}
	type prepared struct {
		q       queueInfo
		subFrom *time.Time
	}
	preps := make([]prepared, len(reqs))
	seen := make(map[prepKey]int, len(reqs))
	live := make([]int, 0, len(reqs))
	for i := range reqs {
		req := &reqs[i]
		normalizePop(req)
		res[i], errs[i] = reginatype.PopResult{}, nil
		k := prepKey{req.Queue, req.Group, req.Partition == "", req.SubscriptionNew, req.SubscriptionFrom}
		if j, ok := seen[k]; ok {
			switch {
			case errs[j] != nil:
				errs[i] = errs[j]
			case res[j].Empty == "queue_not_found":
				res[i].Empty = "queue_not_found"
			default:
				preps[i] = preps[j]
				live = append(live, i)
			}
			continue
		}
		seen[k] = i
		q, subFrom, found, err := s.popPrepare(ctx, req)
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("pop %s/%s: %w", req.Queue, req.Partition, classify(err))
		case !found:
			res[i].Empty = "queue_not_found"
		default:
			preps[i] = prepared{q, subFrom}
			live = append(live, i)
		}
	}
	if len(live) == 0 {
		return
	}
	if len(live) > 1 {
		err := s.inPipeTx(ctx, func(tx *pipeTx) error {
			for _, i := range live {
				r, err := s.popIn(ctx, tx, &preps[i].q, preps[i].subFrom, &reqs[i])
				if err != nil {
					return err
				}
				res[i] = r
			}
			return nil
		})
		if err == nil {
			return
		}
		s.log.Debug().Err(err).Int("pops", len(live)).Msg("batched pops failed together; each runs alone")
	}
	for _, i := range live {
		res[i], errs[i] = s.popAlone(ctx, &preps[i].q, preps[i].subFrom, &reqs[i])
	}
}

// AckMany applies several acknowledgement requests with one transaction
// and one commit (group commit; actor.ConsumeBatcher gathers them). Every
// (partition, group) of every request is applied in (partition, group)
// order, so two batches lock cursor rows in the same order and never
// deadlock; a (partition, group) acked by two requests of the batch is
// applied for them in request order, each seeing what the earlier one did,
// as if they had come one after the other. When the shared transaction
// fails, each request is applied again alone (Ack), so one request's
// failure is its own. res[i] and errs[i] answer reqs[i].
func (s *Store) AckMany(ctx context.Context, reqs []reginatype.AckRequest, res [][]reginatype.AckResult, errs []error) {
	type unit struct {
		pid   partition.UUID
		group string
		req   int
		idx   []int
	}
	var units []unit
	for r := range reqs {
		if reqs[r].Group == "" {
			reqs[r].Group = reginatype.QueueModeGroup
		}
		res[r], errs[r] = make([]reginatype.AckResult, len(reqs[r].Items)), nil
		at := make(map[partition.UUID]int)
		for i, it := range reqs[r].Items {
			k, ok := at[it.PartitionID]
			if !ok {
				k = len(units)
				at[it.PartitionID] = k
				units = append(units, unit{pid: it.PartitionID, group: reqs[r].Group, req: r})
			}
			units[k].idx = append(units[k].idx, i)
		}
	}
	if len(reqs) > 1 {
		slices.SortStableFunc(units, func(a, b unit) int {
			if c := bytes.Compare(a.pid[:], b.pid[:]); c != 0 {
				return c
			}
			if c := cmp.Compare(a.group, b.group); c != 0 {
				return c
			}
			return cmp.Compare(a.req, b.req)
		})
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			for _, u := range units {
				for _, i := range u.idx {
					res[u.req][i] = reginatype.AckResult{}
				}
				if s.citus == nil && !s.ackInGo && completionsOnly(reqs[u.req].Items, u.idx) {
					// One statement in the shared transaction.
					if err := s.ackCompletionsSQL(ctx, tx, u.group, u.pid, reqs[u.req].Items, u.idx, res[u.req]); err != nil {
						return fmt.Errorf("partition %s: %w", u.pid, err)
					}
					continue
				}
				if err := s.ackPartition(ctx, tx, u.group, u.pid, reqs[u.req].Items, u.idx, res[u.req]); err != nil {
					return fmt.Errorf("partition %s: %w", u.pid, err)
				}
			}
			return nil
		})
		if err == nil {
			return
		}
		s.log.Debug().Err(err).Int("requests", len(reqs)).Msg("batched acks failed together; each runs alone")
	}
	for r := range reqs {
		res[r], errs[r] = s.Ack(ctx, reqs[r].Group, reqs[r].Items)
	}
}
