package sqlstore_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// TestLong_StatsQueriesReadOnlyTheirRange fills the tables the status and
// analytics views read (30 days of per-minute counters for 4 queues and 2
// brokers, 30 days of samples, 20000 partitions, 20000 dead letters, 20000
// cursors of which 10 hold a lease) and checks, with the plans PostgreSQL
// really runs (auto_explain), that a one-hour view reads through indexes:
// no statement scans any of those tables whole.
func TestLong_StatsQueriesReadOnlyTheirRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	pool := sqlstoretest.Pool(t)
	q := func(s string) string {
		return strings.ReplaceAll(s, "queen.", pgx.Identifier{st.Schema()}.Sanitize()+".")
	}
	for _, name := range []string{"ns0.q0", "ns1.q1", "ns0.q2", "ns1.q3"} {
		_, err := st.EnsurePartition(ctx, name, "Default")
		require.NoError(t, err)
	}
	for _, s := range []string{
		`INSERT INTO queen.stats_minutes (minute, instance, queue, push_requests, push_messages, pop_messages,
		        lag_count, lag_sum_ms, lag_max_ms)
		 SELECT date_trunc('minute', now()) - make_interval(mins => m), 'b' || b, q, 5, 50, 40, 40, 400, 30
		   FROM generate_series(0, 30 * 1440) m, generate_series(0, 1) b,
		        unnest(ARRAY['', 'ns0.q0', 'ns1.q1', 'ns0.q2', 'ns1.q3']) q`,
		`INSERT INTO queen.system_minutes (minute, instance, sample)
		 SELECT date_trunc('minute', now()) - make_interval(mins => m), 'b' || b, '{}'::jsonb
		   FROM generate_series(0, 30 * 1440) m, generate_series(0, 1) b`,
		`INSERT INTO queen.partitions (queue_id, name, created_at)
		 SELECT (SELECT id FROM queen.queues WHERE name = 'ns' || (i % 2) || '.q' || (i % 4)), 'p' || i,
		        now() - make_interval(secs => i * 130)
		   FROM generate_series(0, 19999) i`,
		`INSERT INTO queen.dlq (partition_id, consumer_group, msg_offset, message_id, transaction_id, payload,
		        created_at, error_message, retry_count, failed_at)
		 SELECT md5('p' || (i % 500))::uuid, 'g', i, md5('m' || i)::uuid, 't' || i, '\x7b7d', now(),
		        'error ' || (i % 7), 3, now() - make_interval(secs => i * 130)
		   FROM generate_series(0, 19999) i`,
		`INSERT INTO queen.consumers (partition_id, queue_id, consumer_group, cursor_offset, lease_id,
		        lease_expires_at, lease_from, lease_to)
		 SELECT md5('c' || i)::uuid, (SELECT id FROM queen.queues ORDER BY name LIMIT 1), 'g',  5,
		        CASE WHEN i < 10 THEN md5('l' || i)::uuid END,
		        CASE WHEN i < 10 THEN now() + interval '1 minute' END,
		        CASE WHEN i < 10 THEN 5 END, CASE WHEN i < 10 THEN 15 END
		   FROM generate_series(0, 19999) i`,
		`ANALYZE queen.queues`, `ANALYZE queen.stats_minutes`, `ANALYZE queen.system_minutes`,
		`ANALYZE queen.partitions`, `ANALYZE queen.dlq`, `ANALYZE queen.consumers`,
	} {
		_, err := pool.Exec(ctx, q(s))
		require.NoError(t, err, s)
	}

	var mu sync.Mutex
	var plans []string
	obs, closeObs, err := st.Observed(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		for _, s := range []string{"LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
			"SET auto_explain.log_level = notice"} {
			if _, err := conn.Exec(ctx, s); err != nil {
				return err
			}
		}
		return nil
	}, func(n *pgconn.Notice) {
		mu.Lock()
		plans = append(plans, n.Message)
		mu.Unlock()
	})
	require.NoError(t, err)
	t.Cleanup(closeObs)

	now := time.Now()
	from, to := now.Add(-time.Hour), now
	calls := map[string]func() error{
		"series": func() error {
			pts, err := obs.StatsSeries(ctx, reginatype.StatsQuery{From: from, To: to, Bucket: time.Minute})
			if err == nil && len(pts) < 59 {
				t.Errorf("series: %d points for an hour", len(pts))
			}
			return err
		},
		"series by queue, namespace filter": func() error {
			_, err := obs.StatsSeries(ctx, reginatype.StatsQuery{From: from, To: to, Bucket: 5 * time.Minute,
				Namespace: "ns1", ByQueue: true})
			return err
		},
		"series broker rows": func() error {
			_, err := obs.StatsSeries(ctx, reginatype.StatsQuery{From: from, To: to, Broker: true, ByInstance: true})
			return err
		},
		"samples": func() error { _, err := obs.SystemSamples(ctx, from, to); return err },
		"partitions created": func() error {
			_, err := obs.PartitionsCreated(ctx, from, to, time.Minute, "")
			return err
		},
		"partitions before": func() error {
			n, err := obs.PartitionsBefore(ctx, from, []string{"ns0.q0", "ns1.q1"})
			if err == nil && (n["ns0.q0"] == 0 || n["ns1.q1"] == 0 || len(n) != 2) {
				t.Errorf("partitions before: %v", n)
			}
			return err
		},
		"sampled buckets": func() error {
			bs, err := obs.SampledBuckets(ctx, from, to, 5*time.Minute)
			if err == nil && len(bs) < 12 {
				t.Errorf("sampled buckets: %d of 5 minutes in an hour", len(bs))
			}
			return err
		},
		"leases": func() error {
			l, err := obs.Leases(ctx)
			if err == nil && (l.Active != 10 || l.BatchSize != 100) {
				t.Errorf("leases: %+v", l)
			}
			return err
		},
		"top errors": func() error { _, err := obs.TopDLQErrors(ctx, from, to, 10); return err },
	}
	for name, call := range calls {
		mu.Lock()
		plans = nil
		mu.Unlock()
		require.NoError(t, call(), name)
		mu.Lock()
		got := strings.Join(plans, "\n")
		mu.Unlock()
		require.NotEmpty(t, got, "%s: no plan logged", name)
		for _, table := range []string{"stats_minutes", "system_minutes", "partitions", "dlq", "consumers"} {
			require.NotContains(t, got, "Seq Scan on "+table, "%s scans %s whole:\n%s", name, table, got)
		}
	}
}
