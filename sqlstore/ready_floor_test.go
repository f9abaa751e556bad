package sqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// A pop scans the ready index from the group's floor (the oldest candidate
// its last scan returned), not from the head. A row made ready below the
// floor (here by hand; a long transaction's now() or a lease that expired
// behind the floor does the same) is still served: a scan from the floor
// that comes up short scans from the head too.
func TestPopServesRowsBelowTheReadyFloor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	for _, p := range []string{"a", "b", "c"} {
		ref, err := st.EnsurePartition(ctx, "floor", p)
		require.NoError(t, err)
		b, _ := batchOf(t, ref, "m-"+p)
		_, err = st.Push(ctx, b)
		require.NoError(t, err)
	}
	pop := func() string {
		t.Helper()
		res, err := st.Pop(ctx, reginatype.PopRequest{Queue: "floor", Batch: 1, AutoAck: true})
		require.NoError(t, err)
		if len(res.Messages) == 0 {
			return res.Empty
		}
		require.Len(t, res.Messages, 1)
		return res.Messages[0].TransactionID
	}
	first := pop() // sets the floor at the oldest ready row
	require.Contains(t, []string{"m-a", "m-b", "m-c"}, first)

	// One of the two rows left becomes ready an hour before the floor.
	pool := sqlstoretest.Pool(t)
	var below string
	require.NoError(t, pool.QueryRow(ctx, schemaSQL(st, `UPDATE queen.consumers c SET avail_at = now() - interval '1 hour'
		  FROM queen.partitions p
		 WHERE p.id = c.partition_id AND c.known_end > c.cursor_offset
		   AND p.id = (SELECT c2.partition_id FROM queen.consumers c2 JOIN queen.partitions p2 ON p2.id = c2.partition_id
		                JOIN queen.queues q ON q.id = p2.queue_id
		               WHERE q.name = 'floor' AND c2.known_end > c2.cursor_offset ORDER BY p2.name LIMIT 1)
		RETURNING 'm-' || p.name`)).Scan(&below))

	got := []string{first, pop(), pop()}
	require.ElementsMatch(t, []string{"m-a", "m-b", "m-c"}, got, "every message served, the one below the floor too")
	require.Equal(t, "no_available_partition", pop())
	require.NotEqual(t, below, got[0])
}

// Beside a transaction idle with an id in the same database, no vacuum
// removes the dead versions of the cursor rows pops and acks leave, and a
// candidate scan from the head of the ready index reads through all of
// them. From the ready floor (the oldest ready row's avail_at, where the
// last scan's first candidate was) it reads a fraction of the buffers.
func TestReadyFloorSkipsDeadVersionsBesideAStranger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, qid := churnBesideStranger(t, "floor", true)
	require.NoError(t, st.VacuumCursors(ctx)) // removes nothing the stranger's id may need
	var floor time.Time
	require.NoError(t, pool.QueryRow(ctx, schemaSQL(st, `SELECT min(avail_at) FROM queen.consumers
		 WHERE queue_id = $1 AND known_end > cursor_offset AND avail_at <= now()`), qid).Scan(&floor))
	head, fromFloor := candidateBuffers(t, pool, st, qid, nil), candidateBuffers(t, pool, st, qid, &floor)
	t.Logf("candidate query beside a stranger in the same database: %d buffers from the head, %d from the floor", head, fromFloor)
	require.Less(t, fromFloor*3, head, "the floor did not skip the dead versions")
}
