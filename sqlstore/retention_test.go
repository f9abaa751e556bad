package sqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// sidecarChild is one row of queen.sidecar_children().
type sidecarChild struct {
	name   string
	lo, hi time.Time
}

func sidecarChildren(t *testing.T, st *sqlstore.Store) []sidecarChild {
	t.Helper()
	rows, err := sqlstoretest.Pool(t).Query(context.Background(),
		schemaSQL(st, `SELECT child, greatest(lo, 'epoch'), hi FROM queen.sidecar_children() ORDER BY lo`))
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sidecarChild, error) {
		var c sidecarChild
		err := r.Scan(&c.name, &c.lo, &c.hi)
		return c, err
	})
	require.NoError(t, err)
	return out
}

// Retention trims the hash sidecar by dropping whole children: a child goes
// once its end lies a full horizon (the longest dedup window or completed
// retention of any queue, at least the floor) in the past, with everything
// in it; a child that might still serve a window stays, and so do its rows;
// a table a dropped child left detached is dropped; children exist 15
// minutes ahead of the clock afterwards. Verdicts follow each queue's own window,
// whatever the sidecar still holds.
func TestRetentionDropsExpiredSidecarChildren(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	pool := sqlstoretest.Pool(t)
	exec := schemaExec(t, st, pool)
	count := func(sql string, args ...any) int64 {
		t.Helper()
		var n int64
		require.NoError(t, pool.QueryRow(ctx, schemaSQL(st, sql), args...).Scan(&n))
		return n
	}
	ref, err := st.EnsurePartition(ctx, "ret", "p")
	require.NoError(t, err)
	configureWindow(t, st, "ret", 3600)
	// Children for the past hours, rows 3 h and 30 min old.
	exec(`SELECT queen.sidecar_ensure(now() - interval '210 minutes', now(), interval '1 hour')`)
	res, err := st.Push(ctx, mustBatch(t, ref, "old", "mid"))
	require.NoError(t, err)
	exec(`UPDATE queen.log_txns SET created_at = now() - interval '3 hours' WHERE first_offset = $1`, res.FirstOffset)
	res, err = st.Push(ctx, mustBatch(t, ref, "recent"))
	require.NoError(t, err)
	exec(`UPDATE queen.log_txns SET created_at = now() - interval '30 minutes' WHERE first_offset = $1`, res.FirstOffset)
	// What a pass interrupted between DETACH and DROP leaves.
	exec(`CREATE TABLE queen.log_txns_20000101_000000 (LIKE queen.log_txns)`)

	// A second queue with a 4-hour window: nothing of the last 4 hours goes.
	_, err = st.EnsurePartition(ctx, "long", "p")
	require.NoError(t, err)
	configureWindow(t, st, "long", 4*3600)
	stats, err := st.RetainOnce(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 1, stats.SidecarChildren, "only the left-over table")
	require.Equal(t, int64(2), count(`SELECT count(*) FROM queen.log_txns`))
	require.Equal(t, int64(0), count(`SELECT count(*) FROM pg_class WHERE oid = to_regclass('queen.log_txns_20000101_000000')`))

	// One hour is the longest window now: the child holding the 3-hour-old
	// row ends at most 2 hours ago and goes; the one holding the
	// 30-minute-old row ends after now - 30 minutes and stays.
	configureWindow(t, st, "long", 3600)
	stats, err = st.RetainOnce(ctx, 100)
	require.NoError(t, err)
	require.GreaterOrEqual(t, stats.SidecarChildren, 1)
	require.Equal(t, int64(1), count(`SELECT count(*) FROM queen.log_txns`), "the 3-hour-old row went with its child")
	require.Equal(t, int64(1), count(`SELECT count(*) FROM queen.log_txns WHERE created_at > now() - interval '31 minutes'`))
	children := sidecarChildren(t, st)
	require.NotEmpty(t, children)
	var now time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT now()").Scan(&now))
	for _, c := range children {
		require.True(t, c.hi.After(now.Add(-time.Hour)), "child %s ends %s, an hour before now", c.name, c.hi)
	}
	require.False(t, children[len(children)-1].hi.Before(now.Add(15*time.Minute)), "children are made 15 minutes ahead")
	for i := 1; i < len(children); i++ {
		require.Equal(t, children[i-1].hi, children[i].lo, "children tile time without gaps")
	}

	// The 30-minute-old original is in the window; "mid" (its row dropped,
	// outside the window) is new.
	res, err = st.Push(ctx, mustBatch(t, ref, "recent", "mid", "fresh"))
	require.NoError(t, err)
	require.Equal(t, []int{0}, res.DupIndex)
	res, err = st.Push(ctx, mustBatch(t, ref, "mid", "fresh"))
	require.NoError(t, err)
	require.Equal(t, []int{0, 1}, res.DupIndex)
}

// A push whose time no child covers (the clock ran past the children made
// ahead, or someone dropped them) creates the children and succeeds.
func TestPushCreatesAMissingSidecarChild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	pool := sqlstoretest.Pool(t)
	ref, err := st.EnsurePartition(ctx, "missing", "p")
	require.NoError(t, err)
	for _, c := range sidecarChildren(t, st) {
		_, err := pool.Exec(ctx, "DROP TABLE "+pgx.Identifier{st.Schema(), c.name}.Sanitize())
		require.NoError(t, err)
	}
	require.Empty(t, sidecarChildren(t, st))
	res, err := st.Push(ctx, mustBatch(t, ref, "a", "b"))
	require.NoError(t, err)
	require.Equal(t, int64(0), res.FirstOffset)
	require.NotEmpty(t, sidecarChildren(t, st))
	res, err = st.Push(ctx, mustBatch(t, ref, "a"))
	require.NoError(t, err)
	require.Equal(t, []int{0}, res.DupIndex)
}

// A database migrated before the sidecar was partitioned, with rows in it,
// is migrated at start: the old table becomes a child (its rows kept, its
// GIN index reused), the schema has the shape of a new one, an original in
// the window is still a duplicate naming its message, one outside it is
// not, and new pushes land in the time-sliced children.
func TestSidecarMigrationKeepsExistingRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := sqlstoretest.Pool(t)
	schema := sqlstoretest.NewSchema(t)
	id := pgx.Identifier{schema}.Sanitize()
	files := sqlFilesCopy(t)
	delete(files, "migrations/0011_sidecar_partitions.up.sql")
	require.NoError(t, sqlstore.MigrateFS(ctx, pool, schema, files))
	var kind string
	require.NoError(t, pool.QueryRow(ctx, "SELECT relkind::text FROM pg_class WHERE oid = $1::regclass", id+".log_txns").Scan(&kind))
	require.Equal(t, "r", kind, "before 0011 the sidecar is one table")

	// Rows as the version-10 functions write them.
	var pid [16]byte
	require.NoError(t, pool.QueryRow(ctx, "SELECT partition_id FROM "+id+`.ensure_partition('old', 'p', '', '',
		30, 3, 0, 0, 0, 0, 0, 0, false, false, false, 0, 0, 0, false, 3600, 'off')`).Scan(&pid))
	push := func(txid string) partition.UUID {
		t.Helper()
		mid := partition.NewV7()
		h := partition.HashTxID(txid)
		var status string
		require.NoError(t, pool.QueryRow(ctx, "SELECT status FROM "+id+".push_segment($1, 3600, -1, $2, $3, $4, $5, NULL)",
			pid, [][]byte{h[:]}, mid[:], []byte(`{}`), []int32{2}).Scan(&status))
		require.Equal(t, "ok", status)
		return mid
	}
	push("aged")
	_, err := pool.Exec(ctx, "UPDATE "+id+".log_txns SET created_at = now() - interval '2 hours'")
	require.NoError(t, err)
	kept := push("kept")

	st := sqlstoretest.OpenSchema(t, schema)
	require.NoError(t, pool.QueryRow(ctx, "SELECT relkind::text FROM pg_class WHERE oid = $1::regclass", id+".log_txns").Scan(&kind))
	require.Equal(t, "p", kind)
	children := sidecarChildren(t, st)
	require.Equal(t, "log_txns_legacy", children[0].name)
	require.Equal(t, int64(0), children[0].lo.Unix(), "the old table covers everything before its end (MINVALUE)")
	var legacyRows int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+id+".log_txns_legacy").Scan(&legacyRows))
	require.Equal(t, int64(2), legacyRows)
	require.Equal(t, schemaShape(t, sqlstoretest.Open(t).Schema()), schemaShape(t, schema))

	ref, err := st.EnsurePartition(ctx, "old", "p")
	require.NoError(t, err)
	res, err := st.Push(ctx, mustBatch(t, ref, "kept", "aged", "new"))
	require.NoError(t, err)
	require.Equal(t, []int{0}, res.DupIndex, "kept is in the window, aged is not")
	require.Equal(t, []partition.UUID{kept}, res.DupOriginal)
	require.Equal(t, int64(2), res.FirstOffset)
	var where string
	require.NoError(t, pool.QueryRow(ctx, "SELECT tableoid::regclass::text FROM "+id+".log_txns WHERE first_offset = 2").Scan(&where))
	require.Regexp(t, `log_txns_(legacy|\d{8}_\d{6})$`, where)
}

func TestSidecarChildSecondsFor(t *testing.T) {
	for _, c := range []struct{ depth, want int }{
		{0, 300},
		{900, 300},    // the sidecar's floor: 3 children
		{3600, 300},   // the default window: 12 children
		{7200, 300},   // 24 children
		{7201, 600},   // 25 at 300 s
		{21600, 900},  // 6 h
		{86400, 3600}, // a day: 24 hourly children
		{7 * 86400, 43200},
		{400 * 86400, 86400}, // beyond 24 days: daily children, however many
	} {
		got := sqlstore.SidecarChildSecondsFor(c.depth)
		assert.Equal(t, c.want, got, "depth %d", c.depth)
		if c.depth <= 24*86400 {
			assert.LessOrEqual(t, (c.depth+got-1)/got, sqlstore.MaxSidecarChildrenPerWindow, "depth %d", c.depth)
		}
		assert.Zero(t, 86400%got, "a slice divides a day")
	}
}
