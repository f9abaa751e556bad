package sqlstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// planBuffers is the shared buffers (hit + read) an EXPLAIN (ANALYZE,
// BUFFERS, FORMAT JSON) plan's top node reports.
func planBuffers(t *testing.T, plan []byte) (int, string) {
	t.Helper()
	var out []struct {
		Plan map[string]any `json:"Plan"`
	}
	if err := json.Unmarshal(plan, &out); err != nil {
		var one struct {
			Plan map[string]any `json:"Plan"`
		}
		require.NoError(t, json.Unmarshal(plan, &one), "%s", plan)
		out = append(out, one)
	}
	require.NotEmpty(t, out)
	hit, _ := out[0].Plan["Shared Hit Blocks"].(float64)
	read, _ := out[0].Plan["Shared Read Blocks"].(float64)
	return int(hit + read), string(plan)
}

// readyQueue makes a queue of n partitions, one message each, read to the
// end by queue mode; withWork then marks 1% of them (at least one) as having
// unread work in the ready index, as a catch-up would (no segment behind
// it: only the candidate query is run on it). It returns the store, the
// schema and a plain pool.
func readyQueue(t *testing.T, n int, withWork bool) (*sqlstore.Store, string, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	schema := st.Schema()
	pool := sqlstoretest.Pool(t)
	// Before any cursor row exists: every version of them, the dead ones
	// the reading below leaves in the ready index included, is ready from
	// later than this.
	var before time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT now()").Scan(&before))
	_, err := st.EnsurePartition(ctx, "wide", "seed")
	require.NoError(t, err)
	sqlstoretest.FillPartitions(t, schema, "wide", "p", n)
	for {
		res, err := st.Pop(ctx, reginatype.PopRequest{Queue: "wide", Batch: 10000, Partitions: 1000, AutoAck: true})
		require.NoError(t, err)
		if len(res.Messages) == 0 {
			break
		}
	}
	q := func(s string) string { return strings.ReplaceAll(s, "queen.", pgx.Identifier{schema}.Sanitize()+".") }
	if !withWork {
		return st, schema, pool
	}
	// The work has waited since before the history was read, so it comes
	// first in the ready index, ahead of the entries of the cursor rows'
	// dead versions (ready while their message was unread). With "a
	// minute ago" instead, a setup slower than a minute (a loaded machine)
	// put the 10,000 dead entries first, and the walk read them: 188
	// buffers against 7. Vacuum cannot be relied on to remove them: a
	// transaction open in another test holds them visible.
	_, err = pool.Exec(ctx, q(`UPDATE queen.consumers c SET known_end = cursor_offset + 1, avail_at = $1::timestamptz - interval '1 minute'
		  FROM queen.partitions p WHERE p.id = c.partition_id AND p.name LIKE 'p%' AND right(p.name, 2) = '37'`), before)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, q(`ANALYZE queen.consumers; ANALYZE queen.partitions`))
	require.NoError(t, err)
	return st, schema, pool
}

// eachSize runs f for 100 and 10,000 partitions, each in a subtest of its
// own, so that one size's store and pools are closed before the next size
// opens its own (run in one test, the sizes of the two tests below held 20
// connections together, the most of the package: test packages share
// PostgreSQL's 100 connections with each other and with benchmarks).
func eachSize(t *testing.T, f func(t *testing.T, n int)) {
	for _, n := range []int{100, 10000} {
		t.Run(fmt.Sprintf("%d_partitions", n), func(t *testing.T) { f(t, n) })
	}
}

// TestLong_PopCandidatesCostIsFlat: the any-partition pop's candidate query reads
// the same number of buffers with 100 and with 10,000 partitions (1% holding
// work): it walks the ready index, not the partitions.
//
//nolint:tparallel // the sizes run one after the other, each closing its pools first (eachSize)
func TestLong_PopCandidatesCostIsFlat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bufs := map[int]int{}
	eachSize(t, func(t *testing.T, n int) {
		_, schema, pool := readyQueue(t, n, true)
		var qid [16]byte
		require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf(`SELECT id FROM %s.queues WHERE name = 'wide'`,
			pgx.Identifier{schema}.Sanitize())).Scan(&qid))
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		var plan []byte
		require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sqlstore.PopCandidatesSQL(schema),
			qid, reginatype.QueueModeGroup, 1, nil).Scan(&plan))
		require.NoError(t, tx.Rollback(ctx))
		b, text := planBuffers(t, plan)
		if n > 1000 {
			require.NotContains(t, text, `"Seq Scan"`, text)
		}
		require.Contains(t, text, "consumers_ready", text)
		bufs[n] = b
		t.Logf("%d partitions: %d buffers", n, b)
	})
	require.LessOrEqual(t, bufs[10000], bufs[100]+4, "candidate query buffers: %v", bufs)
}

// TestLong_PopCatchUpCostIsFlat: when one partition was pushed since the group's
// last look, queen.pop_prepare (the group's catch-up) reads about the same
// number of buffers with 100 and with 10,000 partitions: it looks at the
// partitions pushed since, not at all of them.
//
//nolint:tparallel // the sizes run one after the other, each closing its pools first (eachSize)
func TestLong_PopCatchUpCostIsFlat(t *testing.T) {
	t.Parallel()
	bufs := map[int]int{}
	eachSize(t, func(t *testing.T, n int) {
		bufs[n] = catchUpBuffers(t, n, []string{"p00037", "p00073"}, func(text string) bool {
			return strings.Contains(text, "p_queue") || strings.Contains(text, "p_group")
		})
		t.Logf("%d partitions: %d buffers in pop_prepare", n, bufs[n])
	})
	// 100x the partitions may add a level to each index it probes, and page
	// splits and dead tuples vary from run to run; scanning the queue would
	// read thousands of buffers.
	require.LessOrEqual(t, bufs[10000], 2*bufs[100]+16, "catch-up buffers: %v", bufs)
}

// TestLong_PopCatchUpOfNothingIsFlat: when nothing was pushed since the
// group's last look (a drain), queen.pop_prepare's look for pushed
// partitions reads about the same buffers with 100 and 10,000 partitions.
// It read every partition of the queue (a condition with OR planned
// through partitions_queue_name) until it became two probes of
// partitions_push_xid.
//
//nolint:tparallel // the sizes run one after the other, each closing its pools first (eachSize)
func TestLong_PopCatchUpOfNothingIsFlat(t *testing.T) {
	t.Parallel()
	bufs := map[int]int{}
	eachSize(t, func(t *testing.T, n int) {
		bufs[n] = catchUpBuffers(t, n, []string{"", ""}, func(text string) bool {
			return strings.Contains(text, "push_xid")
		})
		t.Logf("%d partitions: %d buffers in pop_prepare's look for pushes", n, bufs[n])
	})
	require.Positive(t, bufs[100])
	require.LessOrEqual(t, bufs[10000], 2*bufs[100]+16, "buffers: %v", bufs)
}

// catchUpBuffers makes readyQueue(n) with the group's horizon at now, then
// for each of pushes pushes to that partition ("": nothing) and pops, and
// returns the buffers of the last pop's statements inside pop_prepare that
// counted selects (auto_explain of nested statements).
func catchUpBuffers(t *testing.T, n int, pushes []string, counted func(planText string) bool) int {
	t.Helper()
	ctx := context.Background()
	st, schema, pool := readyQueue(t, n, false)
	var notices []string
	obs, done, err := st.Observed(ctx, func(ctx context.Context, c *pgx.Conn) error {
		for _, s := range []string{"LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
			"SET auto_explain.log_nested_statements = on", "SET auto_explain.log_analyze = on",
			"SET auto_explain.log_buffers = on", "SET auto_explain.log_format = json",
			"SET auto_explain.log_level = notice"} {
			if _, err := c.Exec(ctx, s); err != nil {
				return err
			}
		}
		return nil
	}, func(n *pgconn.Notice) { notices = append(notices, n.Message) })
	require.NoError(t, err)
	defer done()
	// The group's last look saw every partition: its horizon is now
	// (readyQueue's fill stamped them in transactions a catch-up may have
	// seen running). What is measured is the scan of the partitions pushed
	// since the horizon, not where it lies.
	tag, err := pool.Exec(ctx, fmt.Sprintf(`UPDATE %s.group_scan SET horizon = pg_current_xact_id(), running = '{}'`,
		pgx.Identifier{schema}.Sanitize()))
	require.NoError(t, err)
	require.Equal(t, int64(1), tag.RowsAffected(), "queue mode's catch-up row")
	// The first pop warms the connection (plpgsql compiles the function
	// on first use); the last one is measured.
	for _, part := range pushes {
		if part != "" {
			_, err = pool.Exec(ctx, fmt.Sprintf(`UPDATE %s.partitions SET next_offset = next_offset + 1, push_xid = pg_current_xact_id()
				 WHERE name = $1`, pgx.Identifier{schema}.Sanitize()), part)
			require.NoError(t, err)
		}
		notices = nil
		_, err = obs.Pop(ctx, reginatype.PopRequest{Queue: "wide", Batch: 1, AutoAck: true})
		require.NoError(t, err)
	}
	total := 0
	for _, m := range notices {
		i := strings.Index(m, "{")
		require.GreaterOrEqual(t, i, 0, m)
		b, text := planBuffers(t, []byte(m[i:]))
		if !counted(text) {
			continue
		}
		if n > 1000 {
			require.NotContains(t, text, `"Seq Scan"`, text)
		}
		total += b
	}
	require.Positive(t, total, "no counted plan among %d notices", len(notices))
	return total
}
