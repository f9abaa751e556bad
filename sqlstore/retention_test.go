package sqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// TestRetentionRebuildsAnOutgrownSidecarIndex: every hash is a key of its
// own in log_txns' GIN index, and PostgreSQL never removes entry-tree keys,
// so the index kept growing with every hash ever pushed while the table
// stayed the size of the window (a soak found log_txns growing for as long
// as it ran). A retention pass rebuilds it once it has outgrown its table;
// the rebuilt index still finds the hashes left.
func TestRetentionRebuildsAnOutgrownSidecarIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := sqlstoretest.NewSchema(t)
	st, err := sqlstore.Open(ctx, sqlstore.Config{URL: sqlstoretest.URL(t), Schema: schema, MaxConns: 4,
		Logger: zerolog.Nop(), SidecarReindexMinBytes: 1 << 20})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	pool := sqlstoretest.Pool(t)
	exec := func(sql string) {
		t.Helper()
		_, err := pool.Exec(ctx, schemaSQL(st, sql))
		require.NoError(t, err)
	}
	sizes := func() (idx, tbl int64) {
		t.Helper()
		require.NoError(t, pool.QueryRow(ctx, schemaSQL(st, `SELECT pg_relation_size('queen.log_txns_hashes'),
			pg_table_size('queen.log_txns')`)).Scan(&idx, &tbl))
		return idx, tbl
	}
	const part = `'0190a1b2-0000-7000-8000-000000000001'::uuid`
	// 200,000 hashes pushed and expired: the table is empty again, the index is not.
	exec(`INSERT INTO queen.log_txns (partition_id, first_offset, hashes)
		SELECT ` + part + `, g * 10, ARRAY(SELECT decode(md5(g || '/' || k), 'hex') FROM generate_series(1, 10) k)
		  FROM generate_series(1, 20000) g`)
	exec(`DELETE FROM queen.log_txns`)
	// VACUUM frees the table once no older snapshot (a concurrent test's)
	// can see the deleted rows.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		exec(`VACUUM queen.log_txns`)
		idx, tbl := sizes()
		if idx > 4*tbl {
			break
		}
		if time.Now().After(deadline) {
			// Not this code's doing: another session of the server holds a
			// snapshot older than the DELETE for minutes.
			t.Skipf("VACUUM could not shrink log_txns in 3 minutes (index %d, table %d bytes): an old snapshot is held", idx, tbl)
		}
		time.Sleep(200 * time.Millisecond)
	}
	exec(`INSERT INTO queen.log_txns (partition_id, first_offset, hashes)
		VALUES (` + part + `, 1000000, ARRAY[decode(md5('kept'), 'hex')])`)
	before, _ := sizes()
	require.Greater(t, before, int64(1<<20))

	stats, err := st.RetainOnce(ctx, 100)
	require.NoError(t, err)
	require.True(t, stats.SidecarReindexed)
	after, _ := sizes()
	require.Less(t, after, before/4, "the rebuilt index holds only the live hashes")

	// The rebuilt index is valid and finds the hash left, through the index.
	var valid bool
	require.NoError(t, pool.QueryRow(ctx, schemaSQL(st, `SELECT bool_and(i.indisvalid) FROM pg_index i
		WHERE i.indrelid = 'queen.log_txns'::regclass`)).Scan(&valid))
	require.True(t, valid)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SET LOCAL enable_seqscan = off")
	require.NoError(t, err)
	var n int
	require.NoError(t, tx.QueryRow(ctx, schemaSQL(st, `SELECT count(*) FROM queen.log_txns
		WHERE hashes && ARRAY[decode(md5('kept'), 'hex')]`)).Scan(&n))
	require.Equal(t, 1, n)

	// Nothing outgrown now: the next pass leaves the index alone.
	stats, err = st.RetainOnce(ctx, 100)
	require.NoError(t, err)
	require.False(t, stats.SidecarReindexed)
}
