package sqlstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// TestAckCompletionsMatchesGo: queen.ack_completions (an ack of completions
// in one statement) and the reads and rules in Go (applyAcks) give the same
// answers and leave the same cursor rows, step by step, over a random run of
// pops and acks on two stores: completions with the live lease, a stale or
// foreign lease, no lease, unknown ids, ids acked twice in one request or
// again later, ids of several partitions in one request, requests
// group-committed together (AckMany), acks after a
// failed ack released the lease or after it expired, consumer groups that never popped, ids
// stored twice (dedup off).
//
//nolint:tparallel // the seeds run one after the other (each opens two stores)
func TestAckCompletionsMatchesGo(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{7, 11, 42, 5, 3, 99} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { ackCompletionsScenario(t, seed) })
	}
}

func ackCompletionsScenario(t *testing.T, seed uint64) {
	ctx := context.Background()
	pool := sqlstoretest.Pool(t)
	type side struct {
		st     *sqlstore.Store
		leases map[string]partition.UUID // pop name -> lease id
		parts  map[string]partition.UUID // partition name -> id
	}
	sides := [2]*side{}
	for k := range sides {
		st := sqlstoretest.OpenConfig(t, sqlstore.Config{MaxConns: 2})
		st.SetAckInGo(k == 1)
		sides[k] = &side{st: st, leases: map[string]partition.UUID{}, parts: map[string]partition.UUID{}}
	}
	const nParts, perPart = 3, 12
	for _, sd := range sides {
		configureWindow(t, sd.st, "acks", 0) // dedup off: ids stored twice below
		for p := range nParts {
			name := fmt.Sprintf("p%d", p)
			ref, err := sd.st.EnsurePartition(ctx, "acks", name)
			require.NoError(t, err)
			sd.parts[name] = ref.ID
			var txids []string
			for i := range perPart {
				txids = append(txids, fmt.Sprintf("%s-m%02d", name, i))
			}
			b, _ := batchOf(t, ref, txids...)
			_, err = sd.st.Push(ctx, b)
			require.NoError(t, err)
			// A second copy of the first half (dedup off): an ack takes
			// the first copy not yet consumed, else the last.
			b, _ = batchOf(t, ref, txids[:perPart/2]...)
			res, err := sd.st.Push(ctx, b)
			require.NoError(t, err)
			require.Empty(t, res.DupIndex, "dedup is off")
		}
	}
	rng := rand.New(rand.NewPCG(seed, 26))
	groups := []string{"", "g1", "never"}
	var popped []string // pop names, in order
	tally := map[string]int{}
	popPart := map[string]string{}         // pop name -> the partition it leased
	defer func() { t.Logf("%v", tally) }() // what the run exercised
	for step := range 400 {
		group := groups[rng.IntN(2)]
		if rng.IntN(3) == 0 {
			// A pop of one partition on both sides (an any-partition pop's
			// choice depends on timestamps): the same messages, leases of
			// their own.
			name := fmt.Sprintf("pop%d", step)
			batch := 1 + rng.IntN(4)
			part := fmt.Sprintf("p%d", rng.IntN(nParts))
			var got [2][]string
			for k, sd := range sides {
				res, err := sd.st.Pop(ctx, reginatype.PopRequest{Queue: "acks", Partition: part, Group: group, Batch: batch})
				require.NoError(t, err)
				sd.leases[name] = res.LeaseID
				if k == 0 && len(res.Claimed) > 0 {
					popPart[name] = res.Claimed[0].Name
				}
				for _, m := range res.Messages {
					got[k] = append(got[k], m.TransactionID)
				}
			}
			require.Equal(t, got[0], got[1], "step %d: pops differ", step)
			popped = append(popped, name)
			continue
		}
		if rng.IntN(10) == 0 {
			// Leases of a partition (the last pop's, mostly) expire on both
			// sides (their ids stay: an expired lease is not a released one).
			p := fmt.Sprintf("p%d", rng.IntN(nParts))
			if len(popped) > 0 && popPart[popped[len(popped)-1]] != "" && rng.IntN(4) > 0 {
				p = popPart[popped[len(popped)-1]]
			}
			for _, sd := range sides {
				_, err := pool.Exec(ctx, schemaSQL(sd.st, `UPDATE queen.consumers
					SET lease_expires_at = now() - interval '1 second' WHERE partition_id = $1 AND lease_id IS NOT NULL`), sd.parts[p])
				require.NoError(t, err)
			}
			continue
		}
		if rng.IntN(4) == 0 && len(popped) > 0 {
			// A failed ack (not completions: the Go path on both sides)
			// releases a lease, so later completions meet a released one.
			name := popped[rng.IntN(len(popped))]
			p := fmt.Sprintf("p%d", rng.IntN(nParts))
			tx := fmt.Sprintf("%s-m%02d", p, rng.IntN(perPart))
			var ans [2][]reginatype.AckResult
			for k, sd := range sides {
				res, err := sd.st.Ack(ctx, group, []reginatype.AckItem{{TransactionID: tx, PartitionID: sd.parts[p],
					LeaseID: sd.leases[name], HasLease: true, Status: reginatype.AckFailed}})
				require.NoError(t, err)
				ans[k] = res
			}
			require.Equal(t, ans[0], ans[1], "step %d: failed ack", step)
			continue
		}
		// A request of completions.
		n := 1 + rng.IntN(5)
		type item struct {
			tx, part, lease string // lease: a pop name, "" (none) or "foreign"
		}
		items := make([]item, n)
		for i := range items {
			p := fmt.Sprintf("p%d", rng.IntN(nParts))
			it := item{part: p, tx: fmt.Sprintf("%s-m%02d", p, rng.IntN(perPart))}
			switch rng.IntN(10) {
			case 0:
				it.tx = "unknown-" + it.tx
			case 1:
				it.part = fmt.Sprintf("p%d", rng.IntN(nParts)) // maybe another partition's id
			}
			switch r := rng.IntN(10); {
			case r < 3:
				it.lease = ""
			case r == 3:
				it.lease = "foreign"
			case len(popped) > 0:
				it.lease = popped[len(popped)-1-rng.IntN(min(len(popped), 3))]
				if lp := popPart[it.lease]; lp != "" && rng.IntN(2) == 0 {
					it.part = lp // the id of a message of the partition that lease holds
					it.tx = fmt.Sprintf("%s-m%02d", lp, rng.IntN(perPart))
				}
			}
			items[i] = it
		}
		if rng.IntN(4) == 0 {
			group = groups[2]
		}
		var ans [2][]reginatype.AckResult
		split := n > 1 && rng.IntN(3) == 0 // as two requests group-committed together (AckMany)
		for k, sd := range sides {
			req := make([]reginatype.AckItem, n)
			for i, it := range items {
				req[i] = reginatype.AckItem{TransactionID: it.tx, PartitionID: sd.parts[it.part], Status: reginatype.AckCompleted}
				switch it.lease {
				case "":
				case "foreign":
					req[i].LeaseID, req[i].HasLease = partition.NewV7(), true
				default:
					req[i].LeaseID, req[i].HasLease = sd.leases[it.lease], true
				}
			}
			if split {
				reqs := []reginatype.AckRequest{{Group: group, Items: req[:n/2]}, {Group: group, Items: req[n/2:]}}
				res, errs := make([][]reginatype.AckResult, 2), make([]error, 2)
				sd.st.AckMany(ctx, reqs, res, errs)
				require.NoError(t, errs[0])
				require.NoError(t, errs[1])
				ans[k] = slices.Concat(res[0], res[1])
				continue
			}
			res, err := sd.st.Ack(ctx, group, req)
			require.NoError(t, err)
			ans[k] = res
		}
		require.Equal(t, ans[0], ans[1], "step %d: acks of %+v (group %q)", step, items, group)
		for i, r := range ans[0] {
			kind := fmt.Sprintf("success=%v err=%q refused=%v released=%v lease=%v", r.Success, r.Error, r.Refused, r.LeaseReleased, items[i].lease != "")
			tally[kind]++
		}
	}
	// The cursor rows end the same (lease ids aside: each side has its own).
	rows := func(sd *side) []string {
		var out []string
		for p := range nParts {
			for _, g := range []string{reginatype.QueueModeGroup, "g1", "never"} {
				var cursor, retries int64
				var leased, ready bool
				err := pool.QueryRow(ctx, schemaSQL(sd.st, `SELECT cursor_offset, retry_count, lease_id IS NOT NULL, avail_at <= now()
					  FROM queen.consumers WHERE partition_id = $1 AND consumer_group = $2`), sd.parts[fmt.Sprintf("p%d", p)], g).
					Scan(&cursor, &retries, &leased, &ready)
				if err != nil {
					out = append(out, fmt.Sprintf("p%d/%s: %v", p, g, err))
					continue
				}
				out = append(out, fmt.Sprintf("p%d/%s: cursor %d retries %d leased %v ready %v", p, g, cursor, retries, leased, ready))
			}
		}
		return out
	}
	require.Equal(t, rows(sides[0]), rows(sides[1]))
}
