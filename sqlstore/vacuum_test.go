package sqlstore_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// Beside a transaction idle with an id in another database, the dead
// versions of the cursor rows that pops and acks leave stay in the ready
// index (PostgreSQL does not mark them dead during scans while that id pins
// its snapshots' xmin), and the candidate query reads through them.
// VacuumCursors removes them: the query reads a fraction of the buffers.
func TestVacuumCursorsShortensTheReadyIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A database of its own: the other tests' transactions in the shared
	// test database would hold back the vacuum as much as the stranger.
	u, err := url.Parse(sqlstoretest.URL(t))
	require.NoError(t, err)
	u.Path = "/" + sqlstoretest.Database(t)
	st := sqlstoretest.OpenConfig(t, sqlstore.Config{URL: u.String(), Schema: "vac", MaxConns: 2})
	pool, err := pgxpool.New(ctx, u.String())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	u.Path = "/postgres"
	stranger, err := pgx.Connect(ctx, u.String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = stranger.Close(context.Background()) })
	_, err = stranger.Exec(ctx, "BEGIN; SELECT pg_current_xact_id()")
	require.NoError(t, err)

	const parts, per = 8, 60
	for p := range parts {
		ref, err := st.EnsurePartition(ctx, "vac", fmt.Sprintf("p%d", p))
		require.NoError(t, err)
		var txids []string
		for i := range per {
			txids = append(txids, fmt.Sprintf("p%d-%d", p, i))
		}
		b, _ := batchOf(t, ref, txids...)
		_, err = st.Push(ctx, b)
		require.NoError(t, err)
	}
	// Pop and ack one at a time: two new versions of a cursor row each.
	for range parts * per / 2 {
		res, err := st.Pop(ctx, reginatype.PopRequest{Queue: "vac", Batch: 1})
		require.NoError(t, err)
		require.Len(t, res.Messages, 1)
		m := res.Messages[0]
		_, err = st.Ack(ctx, reginatype.QueueModeGroup, []reginatype.AckItem{{TransactionID: m.TransactionID,
			PartitionID: m.PartitionID, LeaseID: res.LeaseID, HasLease: true, Status: reginatype.AckCompleted}})
		require.NoError(t, err)
	}
	var qid [16]byte
	require.NoError(t, pool.QueryRow(ctx, schemaSQL(st, `SELECT id FROM queen.queues WHERE name = 'vac'`)).Scan(&qid))
	candidateBuffers := func() int {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		var plan []byte
		require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sqlstore.PopCandidatesSQL(st.Schema()),
			qid, reginatype.QueueModeGroup, 1, nil).Scan(&plan))
		b, _ := planBuffers(t, plan)
		return b
	}
	before := candidateBuffers()
	require.NoError(t, st.VacuumCursors(ctx))
	after := candidateBuffers()
	t.Logf("candidate query: %d buffers before the vacuum, %d after", before, after)
	require.Less(t, after*3, before, "the vacuum left the dead versions in the ready index")
}
