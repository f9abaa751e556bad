package sqlstore_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

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
	st, pool, qid := churnBesideStranger(t, "vac", false)
	before := candidateBuffers(t, pool, st, qid, nil)
	require.NoError(t, st.VacuumCursors(ctx))
	after := candidateBuffers(t, pool, st, qid, nil)
	t.Logf("candidate query: %d buffers before the vacuum, %d after", before, after)
	require.Less(t, after*3, before, "the vacuum left the dead versions in the ready index")
}

// churnBesideStranger opens a store (schema and queue name) in a database of
// its own, so that the other tests' transactions in the shared test
// database hold back nothing here; holds a transaction with an id open in
// that database (sameDB) or in database postgres; pushes 8 partitions of 60
// messages and pops and acks half of them one at a time: two new versions
// of a cursor row each. It returns the store, a pool on its database and
// the queue's id.
func churnBesideStranger(t *testing.T, name string, sameDB bool) (*sqlstore.Store, *pgxpool.Pool, [16]byte) {
	t.Helper()
	ctx := context.Background()
	u, err := url.Parse(sqlstoretest.URL(t))
	require.NoError(t, err)
	u.Path = "/" + sqlstoretest.Database(t)
	st := sqlstoretest.OpenConfig(t, sqlstore.Config{URL: u.String(), Schema: name, MaxConns: 2})
	pool, err := pgxpool.New(ctx, u.String())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	if !sameDB {
		u.Path = "/postgres"
	}
	stranger, err := pgx.Connect(ctx, u.String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = stranger.Close(context.Background()) })
	_, err = stranger.Exec(ctx, "BEGIN; SELECT pg_current_xact_id()")
	require.NoError(t, err)

	const parts, per = 8, 60
	for p := range parts {
		ref, err := st.EnsurePartition(ctx, name, fmt.Sprintf("p%d", p))
		require.NoError(t, err)
		var txids []string
		for i := range per {
			txids = append(txids, fmt.Sprintf("p%d-%d", p, i))
		}
		b, _ := batchOf(t, ref, txids...)
		_, err = st.Push(ctx, b)
		require.NoError(t, err)
	}
	for range parts * per / 2 {
		res, err := st.Pop(ctx, reginatype.PopRequest{Queue: name, Batch: 1})
		require.NoError(t, err)
		require.Len(t, res.Messages, 1)
		m := res.Messages[0]
		_, err = st.Ack(ctx, reginatype.QueueModeGroup, []reginatype.AckItem{{TransactionID: m.TransactionID,
			PartitionID: m.PartitionID, LeaseID: res.LeaseID, HasLease: true, Status: reginatype.AckCompleted}})
		require.NoError(t, err)
	}
	var qid [16]byte
	require.NoError(t, pool.QueryRow(ctx, schemaSQL(st, `SELECT id FROM queen.queues WHERE name = $1`), name).Scan(&qid))
	return st, pool, qid
}

// candidateBuffers is the buffers the candidate query of queue qid's queue
// mode reads for one candidate, from floor (nil: from the head).
func candidateBuffers(t *testing.T, pool *pgxpool.Pool, st *sqlstore.Store, qid [16]byte, floor *time.Time) int {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var plan []byte
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sqlstore.PopCandidatesSQL(st.Schema()),
		qid, reginatype.QueueModeGroup, 1, floor).Scan(&plan))
	b, _ := planBuffers(t, plan)
	return b
}
