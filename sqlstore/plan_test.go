package sqlstore_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// The indexes of the hash sidecar's children, as plans name them: the GIN
// index on hashes (log_txns_<slice>_hashes_idx, log_txns_legacy_hashes) and
// the (partition_id, first_offset) one.
var (
	sidecarGIN     = regexp.MustCompile(`(using|on) log_txns_\w*hashes`)
	sidecarOffsets = regexp.MustCompile(`(using|on) log_txns_\w*_partition_id_first_offset_idx`)
	// The same index driving the probe's scan of log_txns (alias l), not
	// the lookup of a found row's fingerprints (alias t, one row by key).
	sidecarOffsetsProbe = regexp.MustCompile(`using log_txns_\w*_partition_id_first_offset_idx on log_txns_\w+ l(_\d+)? `)
)

// explainConn opens a connection (closed when t ends) that reports the plan
// of every statement it runs, nested ones (inside functions) included, as
// notices collected in *notices, with search_path set to schema. extra are
// more SET statements (auto_explain.log_analyze and the like).
func explainConn(t *testing.T, schema string, extra ...string) (*pgx.Conn, *[]string) {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(sqlstoretest.URL(t))
	require.NoError(t, err)
	notices := new([]string)
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { *notices = append(*notices, n.Message) }
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	require.NoError(t, loadAutoExplain(ctx, conn, append(extra, "SET search_path = "+pgx.Identifier{schema}.Sanitize())...))
	return conn, notices
}

// probePlans runs push_segment calls on one connection with auto_explain
// logging the nested statements' plans back to the client, and returns the
// plans of the probe statements (full-window and watermark).
func probePlans(t *testing.T, schema string, calls func(ctx context.Context, conn *pgx.Conn)) (full, watermark []string) {
	t.Helper()
	ctx := context.Background()
	conn, notices := explainConn(t, schema, "SET auto_explain.log_analyze = on", "SET auto_explain.log_buffers = on")
	calls(ctx, conn)
	for _, n := range *notices {
		switch {
		case strings.Contains(n, "l.hashes && p_hashes"):
			full = append(full, n)
		case strings.Contains(n, "l.first_offset > p_watermark"):
			watermark = append(watermark, n)
		}
	}
	return full, watermark
}

// TestLong_ProbePlansStayIndexDriven checks the plans PostgreSQL really runs for
// the probes inside push_segment, including after plpgsql switches to a
// cached generic plan, on a table where a partition-key scan would look
// cheap: the full-window probe must go through the GIN index on hashes, the
// watermark probe through the primary key, and neither may scan log_txns.
func TestLong_ProbePlansStayIndexDriven(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	schema := st.Schema()
	ref, err := st.EnsurePartition(ctx, "plans", "hot")
	require.NoError(t, err)
	pool := sqlstoretest.Pool(t)
	q := func(s string) string { return strings.ReplaceAll(s, "queen.", pgx.Identifier{schema}.Sanitize()+".") }
	// 300 other partitions with 50 segments of 10 hashes each, and 2000
	// segments on the hot one: 35k rows, 350k hashes.
	_, err = pool.Exec(ctx, q(`
		INSERT INTO queen.log_txns (partition_id, first_offset, created_at, hashes)
		SELECT CASE WHEN i < 15000 THEN md5('p' || (i % 300))::uuid ELSE $1::uuid END,
		       CASE WHEN i < 15000 THEN (i / 300) * 10 ELSE (i - 15000) * 10 END,
		       now() - interval '10 minutes',
		       ARRAY(SELECT decode(md5(i || '-' || j), 'hex') FROM generate_series(1, 10) j)
		  FROM generate_series(0, 34999) i`), [16]byte(ref.ID))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, q(`UPDATE queen.partitions SET next_offset = 200000 WHERE id = $1`), [16]byte(ref.ID))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, q(`ANALYZE queen.log_txns`))
	require.NoError(t, err)

	full, wm := probePlans(t, schema, func(ctx context.Context, conn *pgx.Conn) {
		for i := range 8 {
			for _, wide := range []bool{true, false} {
				// A watermark close below the next offset: push_probe
				// switches to the full-window probe when more than 16
				// offsets per hash lie above it.
				w := reginatype.NoWatermark
				if !wide {
					require.NoError(t, conn.QueryRow(ctx, `SELECT next_offset - 10 FROM partitions WHERE id = $1`,
						[16]byte(ref.ID)).Scan(&w))
				}
				b := &reginatype.PushBatch{Partition: ref.ID, WindowHint: 3600, Watermark: w}
				id := partition.NewV7()
				b.Add(partition.HashTxID(fmt.Sprintf("%c-%t", 'a'+i, wide)), id,
					&partition.Body{TransactionID: "x", Payload: []byte("1")})
				var status string
				err := conn.QueryRow(ctx, `SELECT status FROM push_segment($1, $2, $3, $4, $5, $6, $7, $8)`,
					[16]byte(b.Partition), b.WindowHint, b.Watermark, b.Hashes, b.IDs, b.Bodies, b.Ends, b.Fingerprints).Scan(&status)
				require.NoError(t, err)
				require.Equal(t, "ok", status)
			}
		}
	})
	require.Len(t, full, 8)
	require.Len(t, wm, 8)
	for _, p := range append(slices.Clip(full), wm...) {
		require.Regexp(t, `Hash Cond: \((c\.h = h\.h|h\.h = c\.h)\)`, p, "the probe must hash-join the batch's hashes")
		require.NotContains(t, p, "Join Filter", p)
	}
	for _, p := range full {
		require.Regexp(t, sidecarGIN, p, "full-window probe must use the GIN index:\n%s", p)
		require.NotRegexp(t, sidecarOffsetsProbe, p, "full-window probe must not walk the offsets:\n%s", p)
		require.NotContains(t, p, "Seq Scan on log_txns", p)
		require.NotContains(t, p, "Seq Scan on segments", p)
	}
	for _, p := range wm {
		require.Regexp(t, sidecarOffsets, p, "watermark probe must use the (partition_id, first_offset) index:\n%s", p)
		require.NotRegexp(t, sidecarGIN, p, p)
		require.NotContains(t, p, "Seq Scan on segments", p)
		// A child holding a few rows (a new hour's: this test's own
		// pushes) may be read whole, not the one with the preloaded rows.
		for _, m := range regexp.MustCompile(`Seq Scan on (\S+)`).FindAllStringSubmatch(p, -1) {
			var n int64
			require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, m[1]}.Sanitize()).Scan(&n))
			require.Less(t, n, int64(100), "the watermark probe scanned %s:\n%s", m[1], p)
		}
	}
	t.Logf("last full-window plan:\n%s\nlast watermark plan:\n%s", full[len(full)-1], wm[len(wm)-1])
}

// TestFullWindowProbeReadsOnlyTheWindow: the hash sidecar is partitioned by
// created_at, and the full-window probe (and the watermark probe) must read
// only the children that overlap its window, also after plpgsql switches to
// a cached generic plan: with five hours of rows and a one-hour window, the
// plans PostgreSQL runs name no child that ended before the window began
// (nor the empty ones created ahead of the clock).
func TestFullWindowProbeReadsOnlyTheWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	schema := st.Schema()
	ref, err := st.EnsurePartition(ctx, "window", "hot")
	require.NoError(t, err)
	pool := sqlstoretest.Pool(t)
	q := func(s string) string { return strings.ReplaceAll(s, "queen.", pgx.Identifier{schema}.Sanitize()+".") }
	_, err = pool.Exec(ctx, q(`SELECT queen.sidecar_ensure(now() - interval '6 hours', now(), interval '1 hour')`))
	require.NoError(t, err)
	// 2000 segments of 10 hashes in each of the last five hours and in the
	// last ten minutes, on the hot partition.
	_, err = pool.Exec(ctx, q(`
		INSERT INTO queen.log_txns (partition_id, first_offset, created_at, hashes)
		SELECT $1::uuid, i * 10, now() - make_interval(mins => 10 + (5 - i / 2000) * 60),
		       ARRAY(SELECT decode(md5(i || '-' || j), 'hex') FROM generate_series(1, 10) j)
		  FROM generate_series(0, 11999) i`), [16]byte(ref.ID))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, q(`UPDATE queen.partitions SET next_offset = 120000 WHERE id = $1`), [16]byte(ref.ID))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, q(`ANALYZE queen.log_txns`))
	require.NoError(t, err)

	full, wm := probePlans(t, schema, func(ctx context.Context, conn *pgx.Conn) {
		for i := range 8 {
			for _, w := range []int64{reginatype.NoWatermark, 119990} {
				b := &reginatype.PushBatch{Partition: ref.ID, WindowHint: 3600, Watermark: w}
				b.Add(partition.HashTxID(fmt.Sprintf("new-%d-%d", i, w)), partition.NewV7(),
					&partition.Body{TransactionID: "x", Payload: []byte("1")})
				var status string
				require.NoError(t, conn.QueryRow(ctx, `SELECT status FROM push_segment($1, $2, $3, $4, $5, $6, $7, $8)`,
					[16]byte(b.Partition), b.WindowHint, b.Watermark, b.Hashes, b.IDs, b.Bodies, b.Ends, b.Fingerprints).
					Scan(&status))
				require.Equal(t, "ok", status)
			}
		}
	})
	require.NotEmpty(t, full)
	require.Len(t, append(slices.Clip(full), wm...), 16)
	// The children a one-hour window may touch (a minute of margin for the
	// test's own duration, ten for the probe's upper bound).
	rows, err := pool.Query(ctx, q(`SELECT child FROM queen.sidecar_children()
		 WHERE hi > now() - interval '61 minutes' AND lo < now() + interval '10 minutes'`))
	require.NoError(t, err)
	inWindow, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.LessOrEqual(t, len(inWindow), sqlstore.MaxSidecarChildrenPerWindow)
	require.Less(t, len(inWindow), len(sidecarChildren(t, st)), "children outside the window exist")
	child := regexp.MustCompile(`on (log_txns_\w+?) l`)
	for _, p := range append(full, wm...) {
		seen := child.FindAllStringSubmatch(p, -1)
		require.NotEmpty(t, seen, p)
		for _, m := range seen {
			require.Contains(t, inWindow, m[1], "a probe read a child outside its window:\n%s", p)
		}
	}
	for _, p := range full {
		require.Regexp(t, sidecarGIN, p, p)
	}
	t.Logf("last full-window plan:\n%s", full[len(full)-1])
}
