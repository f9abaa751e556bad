package sqlstore_test

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// TestCatchUpBesideForeignTransaction: a transaction left open in another
// session (idle in transaction with an id, in the same database and in
// another one) holds the cluster's oldest running transaction back, but not
// a group's catch-up. While it is open, pushes to many partitions and pops
// of a named group and of queue mode run together and every message is
// delivered once, in partition order; afterwards a catch-up with nothing
// pushed since looks at no partition, and one after pushes to two partitions
// looks at those two, where the rule of the cluster's oldest transaction
// would reread every partition pushed since the stranger began.
func TestCatchUpBesideForeignTransaction(t *testing.T) {
	t.Parallel()
	for _, where := range []string{"same database", "another database"} {
		t.Run(where, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := sqlstoretest.URL(t)
			if where == "another database" {
				u, err := url.Parse(dsn)
				require.NoError(t, err)
				u.Path = "/postgres"
				dsn = u.String()
			}
			stranger, err := pgx.Connect(ctx, dsn)
			require.NoError(t, err)
			t.Cleanup(func() { _ = stranger.Close(context.Background()) })
			_, err = stranger.Exec(ctx, "BEGIN")
			require.NoError(t, err)
			var strangerXid uint64
			require.NoError(t, stranger.QueryRow(ctx, "SELECT pg_current_xact_id()::text::bigint").Scan(&strangerXid))

			st := sqlstoretest.Open(t)
			pool := sqlstoretest.Pool(t)
			const parts, perPart = 60, 5
			refs := make([]reginatype.PartitionRef, parts)
			for i := range refs {
				refs[i], err = st.EnsurePartition(ctx, "foreign", fmt.Sprintf("p%02d", i))
				require.NoError(t, err)
			}

			// Pushes and the pops of two consumers per group, together.
			groups := []string{reginatype.QueueModeGroup, "g"}
			var mu sync.Mutex
			got := map[string]map[string][]string{} // group -> partition -> transaction ids
			for _, g := range groups {
				got[g] = map[string][]string{}
			}
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			run := func(f func() error) {
				wg.Go(func() { errs <- f() })
			}
			run(func() error {
				for k := range perPart {
					for i, ref := range refs {
						b, _ := batchOf(t, ref, fmt.Sprintf("p%02d-%d", i, k))
						if _, err := st.Push(ctx, b); err != nil {
							return err
						}
					}
				}
				return nil
			})
			for _, g := range groups {
				for range 2 {
					run(func() error { return drainUntil(ctx, st, g, parts*perPart, &mu, got[g]) })
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			for _, g := range groups {
				require.Len(t, got[g], parts, "group %s", g)
				for i := range parts {
					var want []string
					for k := range perPart {
						want = append(want, fmt.Sprintf("p%02d-%d", i, k))
					}
					require.Equal(t, want, got[g][fmt.Sprintf("p%02d", i)], "group %s, partition %d: once each, in order", g, i)
				}
			}

			// The stranger is still open and holds the cluster's oldest
			// transaction back: the rule it replaced would reread every
			// partition now.
			var oldest uint64
			require.NoError(t, pool.QueryRow(ctx, "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint").Scan(&oldest))
			require.LessOrEqual(t, oldest, strangerXid, "the stranger's transaction is the oldest running or older")
			var wouldReread int
			require.NoError(t, pool.QueryRow(ctx, schemaSQL(st,
				`SELECT count(*) FROM queen.partitions WHERE push_xid >= $1::bigint::text::xid8`), oldest).Scan(&wouldReread))
			require.Equal(t, parts, wouldReread)

			scanned := func(g string) (n int) {
				require.NoError(t, pool.QueryRow(ctx, schemaSQL(st,
					`SELECT scanned FROM queen.pop_prepare('foreign', $1, false, NULL, true)`), g).Scan(&n))
				return n
			}
			for _, g := range groups {
				scanned(g) // the pushes the drain's last catch-up saw running
				require.Zero(t, scanned(g), "group %s: nothing pushed since its last look", g)
			}
			for _, i := range []int{7, 42} {
				b, _ := batchOf(t, refs[i], fmt.Sprintf("p%02d-%d", i, perPart))
				_, err := st.Push(ctx, b)
				require.NoError(t, err)
			}
			for _, g := range groups {
				require.Equal(t, 2, scanned(g), "group %s: the two partitions pushed since its last look", g)
				require.Zero(t, scanned(g), "group %s", g)
				res, err := st.Pop(ctx, reginatype.PopRequest{Queue: "foreign", Group: g, Batch: 10, Partitions: 10, AutoAck: true})
				require.NoError(t, err)
				require.Len(t, res.Messages, 2, "group %s", g)
			}

			// The stranger's transaction was open throughout.
			var still uint64
			require.NoError(t, stranger.QueryRow(ctx, "SELECT pg_current_xact_id()::text::bigint").Scan(&still))
			require.Equal(t, strangerXid, still)
			_, err = stranger.Exec(ctx, "ROLLBACK")
			require.NoError(t, err)
		})
	}
}

// drainUntil pops (batch 3, leased) and acks for group until the group has
// received want messages in all, recording each partition's transaction ids
// in the order received.
func drainUntil(ctx context.Context, st *sqlstore.Store, group string, want int, mu *sync.Mutex,
	got map[string][]string) error {
	total := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, v := range got {
			n += len(v)
		}
		return n
	}
	for idle := 0; total() < want; {
		res, err := st.Pop(ctx, reginatype.PopRequest{Queue: "foreign", Group: group, Batch: 3})
		if err != nil {
			return err
		}
		if len(res.Messages) == 0 {
			if idle++; idle > 100000 {
				return fmt.Errorf("group %s: stalled at %d of %d", group, total(), want)
			}
			continue
		}
		idle = 0
		mu.Lock()
		items := make([]reginatype.AckItem, 0, len(res.Messages))
		for _, m := range res.Messages {
			got[m.PartitionName] = append(got[m.PartitionName], m.TransactionID)
			items = append(items, reginatype.AckItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID,
				LeaseID: res.LeaseID, HasLease: true, Status: reginatype.AckCompleted})
		}
		mu.Unlock()
		results, err := st.Ack(ctx, group, items)
		if err != nil {
			return err
		}
		for i, r := range results {
			if !r.Success {
				return fmt.Errorf("group %s: ack %s: %s", group, items[i].TransactionID, r.Error)
			}
		}
	}
	return nil
}
