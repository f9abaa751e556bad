package sqlstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// eagerJITURL returns the test database URL with JIT switched on and made as
// eager as PostgreSQL allows (every statement with a cost above 0 is
// compiled, inlined and optimized), as a server configured that way would
// give every session.
func eagerJITURL(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(sqlstoretest.URL(t))
	require.NoError(t, err)
	q := u.Query()
	q.Set("jit", "on")
	q.Set("jit_above_cost", "0")
	q.Set("jit_inline_above_cost", "0")
	q.Set("jit_optimize_above_cost", "0")
	u.RawQuery = q.Encode()
	return u.String()
}

// explainedPlan is one plan auto_explain reported.
type explainedPlan struct {
	Query string
	JIT   bool
	Raw   string
}

// planLog collects auto_explain's plans (sent to the client as notices).
type planLog struct {
	mu    sync.Mutex
	plans []explainedPlan
	bad   []string
}

func (l *planLog) notice(n *pgconn.Notice) {
	i := strings.IndexByte(n.Message, '{')
	if !strings.Contains(n.Message, "plan:") || i < 0 {
		return
	}
	var p struct {
		QueryText string          `json:"Query Text"`
		JIT       json.RawMessage `json:"JIT"`
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := json.Unmarshal([]byte(n.Message[i:]), &p); err != nil {
		l.bad = append(l.bad, n.Message)
		return
	}
	l.plans = append(l.plans, explainedPlan{Query: p.QueryText, JIT: p.JIT != nil, Raw: n.Message[i:]})
}

// take returns the plans collected since the last call.
func (l *planLog) take(t *testing.T) []explainedPlan {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Empty(t, l.bad, "auto_explain notices that are not JSON plans")
	out := l.plans
	l.plans = nil
	return out
}

// autoExplain makes a connection report the plan of every statement it runs,
// nested ones (inside functions) included, with EXPLAIN ANALYZE's details,
// JIT among them.
func autoExplain(ctx context.Context, conn *pgx.Conn) error {
	return loadAutoExplain(ctx, conn, "SET auto_explain.log_analyze = on", "SET auto_explain.log_format = json")
}

// loadAutoExplain loads auto_explain into conn's session so that it reports
// the plan of every statement, nested ones included, as a notice to the
// client, then runs the extra SET statements.
func loadAutoExplain(ctx context.Context, conn *pgx.Conn, extra ...string) error {
	for _, s := range append([]string{
		"LOAD 'auto_explain'",
		"SET auto_explain.log_min_duration = 0",
		"SET auto_explain.log_nested_statements = on",
		"SET auto_explain.log_level = notice",
	}, extra...) {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

func requireJITAvailable(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	var ok bool
	require.NoError(t, sqlstoretest.Pool(t).QueryRow(ctx, "SELECT pg_jit_available()").Scan(&ok))
	if !ok {
		t.Skip("this PostgreSQL server cannot JIT-compile (pg_jit_available() is false): nothing to guard against")
	}
}

// TestNoJITOnBrokerStatements runs the broker's hot statements (push with
// both probes and a duplicate, hydration, explain, pop, ack, transaction,
// retention, configure) through connections made exactly as the broker makes
// them, against sessions where JIT is as eager as it can be: no plan may be
// JIT-compiled. A JIT-compiled push costs tens of ms to seconds of LLVM work
// for a statement that runs in microseconds, at every execution.
func TestNoJITOnBrokerStatements(t *testing.T) {
	t.Parallel()
	requireJITAvailable(t)
	ctx := context.Background()
	st, err := sqlstore.Open(ctx, sqlstore.Config{URL: eagerJITURL(t), Schema: sqlstoretest.NewSchema(t),
		MaxConns: 2, Logger: zerolog.Nop()})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	var log planLog
	obs, closeObs, err := st.Observed(ctx, autoExplain, log.notice)
	require.NoError(t, err)
	t.Cleanup(closeObs)

	ref, err := obs.EnsurePartition(ctx, "jit", "p")
	require.NoError(t, err)
	txids := make([]string, 10)
	for i := range txids {
		txids[i] = fmt.Sprintf("tx-%d", i)
	}
	b, _ := batchOf(t, ref, txids...)
	res, err := obs.Push(ctx, b) // full-window probe
	require.NoError(t, err)
	require.Empty(t, res.DupIndex)
	b, _ = batchOf(t, ref, "tx-0", "tx-new")
	b.Watermark = 0 // watermark probe; tx-0 at offset 0 is below it
	_, err = obs.Push(ctx, b)
	require.NoError(t, err)
	b, _ = batchOf(t, ref, "tx-1", "tx-2")
	res, err = obs.Push(ctx, b) // all duplicates: the original ids are read
	require.NoError(t, err)
	require.Equal(t, []int{0, 1}, res.DupIndex)
	push := log.take(t)

	phases := map[string]func() error{
		"hydration": func() error { _, err := obs.LoadHydration(ctx, ref.ID, 1000); return err },
		"explain": func() error {
			_, err := obs.Explain(ctx, []reginatype.ExplainKey{{Queue: "jit", Partition: "p", TransactionID: "tx-3"}})
			return err
		},
		"pop and ack": func() error {
			pop, err := obs.Pop(ctx, reginatype.PopRequest{Queue: "jit", Group: reginatype.QueueModeGroup, Batch: 3, Partitions: 1})
			if err != nil {
				return err
			}
			if len(pop.Messages) != 3 {
				return fmt.Errorf("popped %d messages, want 3", len(pop.Messages))
			}
			_, err = obs.Ack(ctx, reginatype.QueueModeGroup, []reginatype.AckItem{{TransactionID: "tx-0",
				PartitionID: ref.ID, LeaseID: pop.LeaseID, HasLease: true, Status: reginatype.AckCompleted}})
			return err
		},
		"transaction": func() error {
			_, err := obs.Transaction(ctx, []reginatype.TxnPush{{Queue: "jit", Partition: "p", TransactionID: "tx-txn",
				Payload: []byte(`{}`)}}, nil, nil)
			return err
		},
		"retention": func() error { _, err := obs.RetainOnce(ctx, 100); return err },
		"configure": func() error {
			_, err := obs.Configure(ctx, "jit2", "jit2", "", partition.DefaultQueueOptions())
			return err
		},
	}
	all := push
	for name, run := range phases {
		require.NoError(t, run(), name)
		plans := log.take(t)
		require.NotEmpty(t, plans, "%s: no plan reported", name)
		all = append(all, plans...)
	}

	var full, watermark int
	for _, p := range push {
		if strings.Contains(p.Query, "l.hashes && p_hashes") {
			full++
		}
		if strings.Contains(p.Query, "l.first_offset > p_watermark") {
			watermark++
		}
	}
	require.Equal(t, 2, full, "full-window probes seen (first push, all-duplicate push)")
	require.Equal(t, 1, watermark, "watermark probes seen")
	for _, p := range all {
		require.False(t, p.JIT, "JIT-compiled:\n%s", p.Raw)
	}
}

// TestNoJITInsideFunctions calls queen.push_segment from a session that has
// JIT on and as eager as it can be (a caller that is not the broker's pool,
// e.g. behind a pooler that drops startup parameters): the statements inside
// the function must still not be JIT-compiled. The same session JIT-compiles
// the probe's own statement when it runs it outside the function, which shows
// the setting is live.
func TestNoJITInsideFunctions(t *testing.T) {
	t.Parallel()
	requireJITAvailable(t)
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	ref, err := st.EnsurePartition(ctx, "jitfn", "p")
	require.NoError(t, err)

	cfg, err := pgx.ParseConfig(eagerJITURL(t))
	require.NoError(t, err)
	var log planLog
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { log.notice(n) }
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.NoError(t, autoExplain(cctx, conn))

	b, _ := batchOf(t, ref, "a", "b", "c")
	var status string
	require.NoError(t, conn.QueryRow(cctx, schemaSQL(st, `SELECT status FROM queen.push_segment($1, $2, $3, $4, $5, $6, $7, $8)`),
		[16]byte(b.Partition), b.WindowHint, b.Watermark, b.Hashes, b.IDs, b.Bodies, b.Ends, b.Fingerprints).Scan(&status))
	require.Equal(t, "ok", status)
	var probe int
	for _, p := range log.take(t) {
		if strings.Contains(p.Query, "l.hashes && p_hashes") {
			probe++
		}
		if strings.Contains(p.Query, "push_segment") {
			continue // the caller's own statement: the session's business
		}
		require.False(t, p.JIT, "JIT-compiled inside push_segment:\n%s", p.Raw)
	}
	require.Equal(t, 1, probe, "the full-window probe's plan was not reported")

	// The control: the same session compiles a statement of its own.
	var n int
	require.NoError(t, conn.QueryRow(cctx, schemaSQL(st, `SELECT count(*) FROM queen.log_txns l WHERE l.hashes && $1`),
		b.Hashes).Scan(&n))
	require.Equal(t, 1, n)
	control := log.take(t)
	require.Len(t, control, 1)
	require.True(t, control[0].JIT, "the control statement was not JIT-compiled: the session is not eager\n%s", control[0].Raw)
}
