package sqlstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// openCitus opens a store on the test database, skipping the test unless it
// runs on Citus (make test/citus).
func openCitus(t *testing.T) *sqlstore.Store {
	t.Helper()
	st := sqlstoretest.Open(t)
	if !st.Citus() {
		t.Skip("not on Citus: make test/citus runs this against a local Citus cluster")
	}
	return st
}

// remoteLog collects what the coordinator sends to the workers
// (citus.log_remote_commands) on an observed copy of st.
type remoteLog struct {
	mu   sync.Mutex
	cmds []string // "server: command"
}

func (l *remoteLog) observe(t *testing.T, st *sqlstore.Store) *sqlstore.Store {
	t.Helper()
	ctx := context.Background()
	obs, closeObs, err := st.Observed(ctx, func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET citus.log_remote_commands = on; SET client_min_messages = log")
		return err
	}, func(n *pgconn.Notice) {
		if cmd, ok := strings.CutPrefix(n.Message, "issuing "); ok {
			l.mu.Lock()
			l.cmds = append(l.cmds, n.Detail+": "+cmd)
			l.mu.Unlock()
		}
	})
	require.NoError(t, err)
	t.Cleanup(closeObs)
	return obs
}

func (l *remoteLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.cmds
	l.cmds = nil
	return c
}

// TestCitusSinglePartitionPushIsOneDelegatedCall: a push to one partition is
// sent whole to the worker holding it, as one call of queen.push_segment
// (verdict, offsets, probe and inserts in that worker's one transaction),
// with no other remote command (no two-phase commit).
func TestCitusSinglePartitionPushIsOneDelegatedCall(t *testing.T) {
	st := openCitus(t)
	ctx := context.Background()
	ref, err := st.EnsurePartition(ctx, "orders", "p1")
	require.NoError(t, err)
	var log remoteLog
	obs := log.observe(t, st)
	for round, want := range []int{0, 1} { // new, then a duplicate (the probing path)
		b, _ := batchOf(t, ref, "a")
		log.take()
		res, err := obs.Push(ctx, b)
		require.NoError(t, err)
		if want == 0 {
			require.Equal(t, int64(0), res.FirstOffset)
		} else {
			require.Equal(t, []int{0}, res.DupIndex, "round %d", round)
		}
		cmds := log.take()
		require.Len(t, cmds, 1, "round %d: remote commands %q", round, cmds)
		require.Contains(t, cmds[0], ".push_segment(", "round %d", round)
	}
}

// TestCitusPackedPushHasNoTwoPhaseCommit: batches of partitions on
// different workers pushed together go as one delegated call each, each
// its own transaction on its worker: no PREPARE TRANSACTION.
func TestCitusPackedPushHasNoTwoPhaseCommit(t *testing.T) {
	st := openCitus(t)
	ctx := context.Background()
	var bs []*reginatype.PushBatch
	for i := range 8 {
		ref, err := st.EnsurePartition(ctx, "orders", fmt.Sprintf("p%d", i))
		require.NoError(t, err)
		b, _ := batchOf(t, ref, "a", "b")
		bs = append(bs, b)
	}
	var log remoteLog
	obs := log.observe(t, st)
	res := make([]reginatype.PushResult, len(bs))
	errs := make([]error, len(bs))
	obs.PushMany(ctx, reginatype.ShapeOneTransaction, bs, res, errs)
	for i := range bs {
		require.NoError(t, errs[i])
		require.Equal(t, int64(0), res[i].FirstOffset)
	}
	cmds := log.take()
	require.Len(t, cmds, len(bs), "%q", cmds)
	for _, c := range cmds {
		require.Contains(t, c, ".push_segment(")
		require.NotContains(t, c, "PREPARE TRANSACTION")
	}
}

// partitionsOnTwoWorkers ensures partitions of queue until two live on
// different workers and returns them with the worker of the second.
func partitionsOnTwoWorkers(t *testing.T, st *sqlstore.Store, queue string) (a, b reginatype.PartitionRef, bName, worker string) {
	t.Helper()
	ctx := context.Background()
	pool := sqlstoretest.Pool(t)
	node := func(ref reginatype.PartitionRef) string {
		var n string
		require.NoError(t, pool.QueryRow(ctx, `SELECT n.nodename || ':' || n.nodeport FROM pg_dist_placement pl
			JOIN pg_dist_node n ON n.groupid = pl.groupid
			WHERE pl.shardid = get_shard_id_for_distribution_column($1::regclass, $2::uuid)`,
			pgx.Identifier{st.Schema(), "partitions"}.Sanitize(), [16]byte(ref.ID)).Scan(&n))
		return n
	}
	a, err := st.EnsurePartition(ctx, queue, "p0")
	require.NoError(t, err)
	na := node(a)
	for i := 1; i < 64; i++ {
		b, err = st.EnsurePartition(ctx, queue, fmt.Sprintf("p%d", i))
		require.NoError(t, err)
		if nb := node(b); nb != na {
			return a, b, fmt.Sprintf("p%d", i), nb
		}
	}
	t.Fatal("no two partitions on different workers")
	return
}

// TestCitusCrossWorkerTransactionIsAtomic: a transaction (POST
// /api/v1/transaction) pushing to partitions on two workers commits with
// two-phase commit; when one worker refuses to prepare, neither half is
// stored.
func TestCitusCrossWorkerTransactionIsAtomic(t *testing.T) {
	st := openCitus(t)
	ctx := context.Background()
	a, b, bName, worker := partitionsOnTwoWorkers(t, st, "txq")
	pushes := func(tx string) []reginatype.TxnPush {
		return []reginatype.TxnPush{
			{Queue: "txq", Partition: "p0", TransactionID: tx + "-a", Payload: []byte(`{"x":1}`)},
			{Queue: "txq", Partition: bName, TransactionID: tx + "-b", Payload: []byte(`{"x":2}`), Index: 1},
		}
	}
	pool := sqlstoretest.Pool(t)
	count := func() (int, int) {
		var na, nb int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE partition_id = $2), count(*) FILTER (WHERE partition_id = $3)
			FROM `+pgx.Identifier{st.Schema(), "segments"}.Sanitize()+` WHERE partition_id IN ($2, $3) AND $1`,
			true, [16]byte(a.ID), [16]byte(b.ID)).Scan(&na, &nb))
		return na, nb
	}
	_, err := st.Transaction(ctx, pushes("ok"), nil, nil)
	require.NoError(t, err)
	na, nb := count()
	require.Equal(t, [2]int{1, 1}, [2]int{na, nb}, "both halves of a committed transaction")

	// b's worker refuses to prepare: a deferred trigger on the shard of
	// segments holding b raises at PREPARE TRANSACTION.
	var shard string
	require.NoError(t, pool.QueryRow(ctx, `SELECT shard_name($1::regclass, get_shard_id_for_distribution_column($1::regclass, $2::uuid))`,
		pgx.Identifier{st.Schema(), "segments"}.Sanitize(), [16]byte(b.ID)).Scan(&shard))
	wconn, err := pgx.Connect(ctx, "postgres://postgres@"+worker+"/"+pool.Config().ConnConfig.Database+"?sslmode=disable")
	require.NoError(t, err)
	defer wconn.Close(ctx)
	fn := pgx.Identifier{st.Schema(), "refuse_prepare"}.Sanitize()
	// Created on the coordinator, which gives it to the workers.
	_, err = pool.Exec(ctx, `CREATE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'refused at commit'; END $$`)
	require.NoError(t, err)
	_, err = wconn.Exec(ctx, `SET citus.enable_manual_changes_to_shards = on;
		CREATE CONSTRAINT TRIGGER refuse AFTER INSERT ON `+shard+`
		    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION `+fn+`()`)
	require.NoError(t, err)
	_, err = st.Transaction(ctx, pushes("refused"), nil, nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), "refused at commit")
	na, nb = count()
	require.Equal(t, [2]int{1, 1}, [2]int{na, nb}, "neither half of the refused transaction is stored")
	_, err = wconn.Exec(ctx, "SET citus.enable_manual_changes_to_shards = on; DROP TRIGGER refuse ON "+shard)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "DROP FUNCTION "+fn+"()")
	require.NoError(t, err)
}

// TestCitusCatchUpHorizonIsPerWorker: every worker has its own transaction
// ids, so a group's catch-up horizon taken on one worker says nothing about
// another. With one worker's ids run far ahead of the other's, a push on
// either is still found by the next any-partition pop (a horizon shared by
// the workers would hide the pushes of the worker with the smaller ids).
func TestCitusCatchUpHorizonIsPerWorker(t *testing.T) {
	st := openCitus(t)
	ctx := context.Background()
	a, b, _, workerB := partitionsOnTwoWorkers(t, st, "hq")
	pop := func() []string {
		t.Helper()
		res, err := st.Pop(ctx, reginatype.PopRequest{Queue: "hq", Group: "g", Batch: 10, Partitions: 4, AutoAck: true})
		require.NoError(t, err)
		var got []string
		for _, m := range res.Messages {
			got = append(got, m.TransactionID)
		}
		return got
	}
	push := func(ref reginatype.PartitionRef, tx string) {
		t.Helper()
		bt, _ := batchOf(t, ref, tx)
		_, err := st.Push(ctx, bt)
		require.NoError(t, err)
	}
	require.Empty(t, pop()) // the group's horizons are taken on both workers

	// Worker B's ids run 3000 ahead (one id per autocommitted statement).
	pool := sqlstoretest.Pool(t)
	wconn, err := pgx.Connect(ctx, "postgres://postgres@"+workerB+"/"+pool.Config().ConnConfig.Database+"?sslmode=disable")
	require.NoError(t, err)
	defer wconn.Close(ctx)
	for range 3000 {
		_, err := wconn.Exec(ctx, "SELECT pg_current_xact_id()")
		require.NoError(t, err)
	}
	for round := range 3 {
		pa, pb := fmt.Sprintf("a%d", round), fmt.Sprintf("b%d", round)
		push(b, pb)
		require.Equal(t, []string{pb}, pop(), "round %d: the push on the worker with the larger ids", round)
		push(a, pa)
		require.Equal(t, []string{pa}, pop(), "round %d: the push on the worker with the smaller ids", round)
	}
}

// TestCitusCatchUpBesideForeignTransaction: a transaction left open on a
// worker does not hold that worker's catch-up horizon back (the horizon is
// the worker's snapshot xmax, the open transaction one of its running ids),
// and pushes beside it are all delivered, in order.
func TestCitusCatchUpBesideForeignTransaction(t *testing.T) {
	st := openCitus(t)
	ctx := context.Background()
	_, b, _, workerB := partitionsOnTwoWorkers(t, st, "fq")
	pool := sqlstoretest.Pool(t)
	wconn, err := pgx.Connect(ctx, "postgres://postgres@"+workerB+"/"+pool.Config().ConnConfig.Database+"?sslmode=disable")
	require.NoError(t, err)
	defer wconn.Close(ctx)
	tx, err := wconn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var foreign string
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_current_xact_id()::text").Scan(&foreign))

	for i := range 3 {
		id := fmt.Sprintf("m%d", i)
		bt, _ := batchOf(t, b, id)
		_, err := st.Push(ctx, bt)
		require.NoError(t, err)
		res, err := st.Pop(ctx, reginatype.PopRequest{Queue: "fq", Group: "g", Batch: 10, Partitions: 4, AutoAck: true})
		require.NoError(t, err)
		require.Len(t, res.Messages, 1, "push %d beside the open transaction", i)
		require.Equal(t, id, res.Messages[0].TransactionID)
	}
	var past, running bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT bool_or(horizon > $1::text::xid8), bool_or($1::text::xid8 = ANY (running))
		FROM `+pgx.Identifier{st.Schema(), "group_scan_nodes"}.Sanitize()+` WHERE consumer_group = 'g'
		 AND node = (SELECT groupid FROM pg_dist_node WHERE nodename || ':' || nodeport = $2)`, foreign, workerB).Scan(&past, &running))
	require.True(t, past, "the worker's horizon moved past the open transaction %s", foreign)
	require.True(t, running, "the open transaction %s is kept among the running ids", foreign)
}

// TestCitusNamedPopRunsOnOneWorker: a pop of a named partition (its lookup,
// cursor, segments and lease) and its ack reach only the worker holding the
// partition.
func TestCitusNamedPopRunsOnOneWorker(t *testing.T) {
	st := openCitus(t)
	ctx := context.Background()
	ref, err := st.EnsurePartition(ctx, "named", "p7")
	require.NoError(t, err)
	b, _ := batchOf(t, ref, "a", "b")
	_, err = st.Push(ctx, b)
	require.NoError(t, err)
	// The group's first pop writes its start point (consumer_groups, a
	// reference table: every node); the next ones write nothing shared.
	res, err := st.Pop(ctx, reginatype.PopRequest{Queue: "named", Partition: "p7", Group: "g", Batch: 1, AutoAck: true})
	require.NoError(t, err)
	require.Len(t, res.Messages, 1)
	var log remoteLog
	obs := log.observe(t, st)
	log.take()
	res, err = obs.Pop(ctx, reginatype.PopRequest{Queue: "named", Partition: "p7", Group: "g", Batch: 10})
	require.NoError(t, err)
	require.Len(t, res.Messages, 1)
	cmds := log.take()
	require.NotEmpty(t, cmds)
	servers := map[string]bool{}
	for _, c := range cmds {
		server, _, _ := strings.Cut(c, " connectionId")
		servers[server] = true
	}
	require.Len(t, servers, 1, "remote commands of a named pop: %q", cmds)
}
