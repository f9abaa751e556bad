package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// statsQueries is the SQL of the per-minute counters and samples
// (queen.stats_minutes, queen.system_minutes) and of the status views'
// summaries. Every read is bounded by a time range on the leading column
// of a primary key or index, or by the live leases.
type statsQueries struct {
	record, recordSystem, purge, purgeSystem, series, system, partitionsCreated, leases, topErrors string
	deadLetterOf, sampledBuckets, partitionsBefore                                                 string
}

// statColumns are stats_minutes' counter columns, in reginatype.StatCounters
// order (see counterPtrs).
const statColumns = `push_requests, push_messages, duplicates, pop_requests, pop_messages, pop_empty,
	ack_requests, ack_success, ack_failed, dlq, transactions, lag_count, lag_sum_ms, lag_max_ms, db_errors,
	parked_ms, retention_msgs, completed_retention_msgs, eviction_msgs, retention_runs, ack_refused`

func counterPtrs(c *reginatype.StatCounters) []any {
	return []any{&c.PushRequests, &c.PushMessages, &c.Duplicates, &c.PopRequests, &c.PopMessages, &c.PopEmpty,
		&c.AckRequests, &c.AckSuccess, &c.AckFailed, &c.DLQ, &c.Transactions, &c.LagCount, &c.LagSumMs,
		&c.LagMaxMs, &c.DBErrors, &c.ParkedMs, &c.RetentionMsgs, &c.CompletedRetentionMsgs,
		&c.EvictionMsgs, &c.RetentionRuns, &c.AckRefused}
}

func newStatsQueries(schema string) statsQueries {
	q := statsQueries{
		// Adds to an existing row (a broker flushing twice in a minute).
		record: `INSERT INTO queen.stats_minutes AS s (minute, instance, queue, ` + statColumns + `)
			SELECT $1, $2, r.* FROM unnest($3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[],
			       $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[], $14::bigint[],
			       $15::bigint[], $16::bigint[], $17::bigint[], $18::bigint[], $19::bigint[], $20::bigint[],
			       $21::bigint[], $22::bigint[], $23::bigint[], $24::bigint[]) AS r
			ON CONFLICT (minute, instance, queue) DO UPDATE SET
			  push_requests = s.push_requests + excluded.push_requests,
			  push_messages = s.push_messages + excluded.push_messages,
			  duplicates = s.duplicates + excluded.duplicates,
			  pop_requests = s.pop_requests + excluded.pop_requests,
			  pop_messages = s.pop_messages + excluded.pop_messages,
			  pop_empty = s.pop_empty + excluded.pop_empty,
			  ack_requests = s.ack_requests + excluded.ack_requests,
			  ack_success = s.ack_success + excluded.ack_success,
			  ack_failed = s.ack_failed + excluded.ack_failed,
			  dlq = s.dlq + excluded.dlq,
			  transactions = s.transactions + excluded.transactions,
			  lag_count = s.lag_count + excluded.lag_count,
			  lag_sum_ms = s.lag_sum_ms + excluded.lag_sum_ms,
			  lag_max_ms = greatest(s.lag_max_ms, excluded.lag_max_ms),
			  db_errors = s.db_errors + excluded.db_errors,
			  parked_ms = s.parked_ms + excluded.parked_ms,
			  retention_msgs = s.retention_msgs + excluded.retention_msgs,
			  completed_retention_msgs = s.completed_retention_msgs + excluded.completed_retention_msgs,
			  eviction_msgs = s.eviction_msgs + excluded.eviction_msgs,
			  retention_runs = s.retention_runs + excluded.retention_runs,
			  ack_refused = s.ack_refused + excluded.ack_refused`,
		// A second flush of the same minute replaces the sample (the broker
		// merges what it already wrote before sending it again).
		recordSystem: `INSERT INTO queen.system_minutes (minute, instance, sample) VALUES ($1, $2, $3)
			ON CONFLICT (minute, instance) DO UPDATE SET sample = excluded.sample`,
		purge:       `DELETE FROM queen.stats_minutes WHERE minute < $1`,
		purgeSystem: `DELETE FROM queen.system_minutes WHERE minute < $1`,
		// $1 from, $2 to, $3 bucket, $4 broker rows, $5..$7 queue, namespace,
		// task filters, $8 by queue, $9 by instance.
		series: `SELECT CASE WHEN $3::interval = interval '0' THEN $1::timestamptz
			            ELSE date_bin($3::interval, s.minute, timestamptz '2000-01-01 00:00:00+00') END AS b,
			       CASE WHEN $8::boolean THEN s.queue ELSE '' END AS qn,
			       CASE WHEN $9::boolean THEN s.instance ELSE '' END AS inst,
			       sum(push_requests)::bigint, sum(push_messages)::bigint, sum(duplicates)::bigint,
			       sum(pop_requests)::bigint, sum(pop_messages)::bigint, sum(pop_empty)::bigint,
			       sum(ack_requests)::bigint, sum(ack_success)::bigint, sum(ack_failed)::bigint, sum(dlq)::bigint,
			       sum(transactions)::bigint, sum(lag_count)::bigint, sum(lag_sum_ms)::bigint,
			       max(lag_max_ms)::bigint, sum(db_errors)::bigint, sum(parked_ms)::bigint,
			       sum(retention_msgs)::bigint,
			       sum(completed_retention_msgs)::bigint, sum(eviction_msgs)::bigint,
			       sum(retention_runs)::bigint, sum(ack_refused)::bigint
			  FROM queen.stats_minutes s
			 WHERE s.minute >= $1 AND s.minute < $2
			   AND (CASE WHEN $4::boolean THEN s.queue = '' ELSE s.queue <> '' END)
			   AND ($5::text IS NULL OR s.queue = $5)
			   AND (($6::text IS NULL AND $7::text IS NULL) OR s.queue IN (
			        SELECT q.name FROM queen.queues q
			         WHERE ($6::text IS NULL OR q.namespace = $6) AND ($7::text IS NULL OR q.task = $7)))
			 GROUP BY 1, 2, 3
			 ORDER BY 1, 2, 3`,
		system: `SELECT minute, instance, sample FROM queen.system_minutes
			 WHERE minute >= $1 AND minute < $2 ORDER BY instance, minute`,
		partitionsCreated: `SELECT date_bin($3::interval, p.created_at, timestamptz '2000-01-01 00:00:00+00'),
			       q.name, count(*)
			  FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
			 WHERE p.created_at >= $1 AND p.created_at < $2 AND ($4::text IS NULL OR q.name = $4)
			 GROUP BY 1, 2 ORDER BY 1, 2`,
		// The buckets in which some broker wrote its process sample (it was
		// running): a range scan of the primary key's leading column.
		sampledBuckets: `SELECT DISTINCT date_bin($3::interval, minute, timestamptz '2000-01-01 00:00:00+00')
			  FROM queen.system_minutes WHERE minute >= $1 AND minute < $2 ORDER BY 1`,
		// Per queue named, through the queue's own partitions (the index
		// on queue_id), never the whole table.
		partitionsBefore: `SELECT q.name, (SELECT count(*) FROM queen.partitions p
			                        WHERE p.queue_id = q.id AND p.created_at < $1)
			  FROM queen.queues q WHERE q.name = ANY($2::text[])`,
		// Live leases: the cursors holding one (lease_expires_at > now()),
		// the batch each leased and what of it is acknowledged (the cursor
		// moved past it).
		leases: `SELECT count(*), count(DISTINCT c.partition_id),
			       coalesce(sum(c.lease_to - c.lease_from), 0)::bigint,
			       coalesce(sum(greatest(c.cursor_offset - c.lease_from, 0)), 0)::bigint
			  FROM queen.consumers c
			 WHERE c.lease_id IS NOT NULL AND c.lease_expires_at > now()`,
		deadLetterOf: `SELECT d.error_message, d.retry_count FROM queen.dlq d
			 WHERE d.partition_id = $1 AND d.msg_offset = $2 ORDER BY d.consumer_group LIMIT 1`,
		topErrors: `SELECT coalesce(d.error_message, ''), count(*) FROM queen.dlq d
			 WHERE d.failed_at >= $1 AND d.failed_at < $2
			 GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT $3`,
	}
	for _, p := range []*string{&q.record, &q.recordSystem, &q.purge, &q.purgeSystem, &q.series, &q.system,
		&q.partitionsCreated, &q.leases, &q.topErrors, &q.deadLetterOf, &q.sampledBuckets, &q.partitionsBefore} {
		*p = qualify(*p, schema)
	}
	return q
}

// RecordStats adds one broker's counters of one minute (one row per queue,
// "" for the broker-wide row) and replaces its process sample of that
// minute, in one transaction.
func (s *Store) RecordStats(ctx context.Context, instance string, rows []reginatype.MinuteStats,
	sys []reginatype.SystemMinute) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		byMinute := map[time.Time][]*reginatype.MinuteStats{}
		var order []time.Time
		for i := range rows {
			m := rows[i].Minute
			if _, ok := byMinute[m]; !ok {
				order = append(order, m)
			}
			byMinute[m] = append(byMinute[m], &rows[i])
		}
		for _, m := range order {
			rs := byMinute[m]
			queues := make([]string, len(rs))
			cols := make([][]int64, len(counterPtrs(&reginatype.StatCounters{})))
			for i := range cols {
				cols[i] = make([]int64, len(rs))
			}
			for i, r := range rs {
				queues[i] = r.Queue
				for j, p := range counterPtrs(&r.StatCounters) {
					cols[j][i] = *(p.(*int64)) //nolint:forcetypeassert // counterPtrs holds only *int64
				}
			}
			args := []any{m, instance, queues}
			for _, c := range cols {
				args = append(args, c)
			}
			if _, err := tx.Exec(ctx, s.sql.stats.record, args...); err != nil {
				return fmt.Errorf("record stats: %w", classify(err))
			}
		}
		for i := range sys {
			b, err := json.Marshal(&sys[i].Sample)
			if err != nil {
				return fmt.Errorf("record stats: encode sample: %w", err)
			}
			if _, err := tx.Exec(ctx, s.sql.stats.recordSystem, sys[i].Minute, sys[i].Instance, b); err != nil {
				return fmt.Errorf("record stats: %w", classify(err))
			}
		}
		return nil
	})
}

// PurgeStats deletes the counters and samples of minutes before before.
func (s *Store) PurgeStats(ctx context.Context, before time.Time) error {
	if _, err := s.pool.Exec(ctx, s.sql.stats.purge, before); err != nil {
		return fmt.Errorf("purge stats: %w", classify(err))
	}
	if _, err := s.pool.Exec(ctx, s.sql.stats.purgeSystem, before); err != nil {
		return fmt.Errorf("purge stats: %w", classify(err))
	}
	return nil
}

// StatsSeries sums the counters of q's range per bucket (and queue or
// instance when asked), oldest first; buckets without rows are absent.
func (s *Store) StatsSeries(ctx context.Context, q reginatype.StatsQuery) ([]reginatype.StatsPoint, error) {
	rows, err := s.pool.Query(ctx, s.sql.stats.series, q.From, q.To, q.Bucket, q.Broker, nullText(q.Queue),
		nullText(q.Namespace), nullText(q.Task), q.ByQueue, q.ByInstance)
	if err != nil {
		return nil, fmt.Errorf("stats series: %w", classify(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (reginatype.StatsPoint, error) {
		var p reginatype.StatsPoint
		err := r.Scan(append([]any{&p.Bucket, &p.Queue, &p.Instance}, counterPtrs(&p.StatCounters)...)...)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("stats series: %w", classify(err))
	}
	return out, nil
}

// SystemSamples returns every broker's per-minute samples in [from, to),
// by broker then minute.
func (s *Store) SystemSamples(ctx context.Context, from, to time.Time) ([]reginatype.SystemMinute, error) {
	rows, err := s.pool.Query(ctx, s.sql.stats.system, from, to)
	if err != nil {
		return nil, fmt.Errorf("system samples: %w", classify(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (reginatype.SystemMinute, error) {
		var m reginatype.SystemMinute
		var b []byte
		if err := r.Scan(&m.Minute, &m.Instance, &b); err != nil {
			return m, err
		}
		return m, json.Unmarshal(b, &m.Sample)
	})
	if err != nil {
		return nil, fmt.Errorf("system samples: %w", classify(err))
	}
	return out, nil
}

// PartitionsCreated counts the partitions created in [from, to) per bucket
// and queue (one queue when queue is not empty), oldest first.
func (s *Store) PartitionsCreated(ctx context.Context, from, to time.Time, bucket time.Duration,
	queue string) ([]reginatype.BucketCount, error) {
	rows, err := s.pool.Query(ctx, s.sql.stats.partitionsCreated, from, to, bucket, nullText(queue))
	if err != nil {
		return nil, fmt.Errorf("partitions created: %w", classify(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (reginatype.BucketCount, error) {
		var c reginatype.BucketCount
		err := r.Scan(&c.Bucket, &c.Queue, &c.Count)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("partitions created: %w", classify(err))
	}
	return out, nil
}

// SampledBuckets returns the buckets of [from, to) in which some broker
// wrote a process sample (was running), oldest first. The time series list
// these buckets with zeros where nothing was served, as Queen writes a zero
// row every minute it runs.
func (s *Store) SampledBuckets(ctx context.Context, from, to time.Time, bucket time.Duration) ([]time.Time, error) {
	rows, err := s.pool.Query(ctx, s.sql.stats.sampledBuckets, from, to, bucket)
	if err != nil {
		return nil, fmt.Errorf("sampled buckets: %w", classify(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return nil, fmt.Errorf("sampled buckets: %w", classify(err))
	}
	return out, nil
}

// PartitionsBefore counts the partitions of each queue named that were
// created before at and are still there (queues that do not exist are
// absent).
func (s *Store) PartitionsBefore(ctx context.Context, at time.Time, queues []string) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, s.sql.stats.partitionsBefore, at, queues)
	if err != nil {
		return nil, fmt.Errorf("partitions before: %w", classify(err))
	}
	out := map[string]int64{}
	var (
		name string
		n    int64
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error {
		out[name] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("partitions before: %w", classify(err))
	}
	return out, nil
}

// Leases summarises the live leases now.
func (s *Store) Leases(ctx context.Context) (reginatype.LeaseSummary, error) {
	var l reginatype.LeaseSummary
	if err := s.pool.QueryRow(ctx, s.sql.stats.leases).Scan(&l.Active, &l.Partitions, &l.BatchSize,
		&l.Acked); err != nil {
		return l, fmt.Errorf("leases: %w", classify(err))
	}
	return l, nil
}

// TopDLQErrors returns the most frequent error texts of the dead letters
// that failed in [from, to), at most limit, most frequent first.
func (s *Store) TopDLQErrors(ctx context.Context, from, to time.Time, limit int) ([]reginatype.ErrorCount, error) {
	rows, err := s.pool.Query(ctx, s.sql.stats.topErrors, from, to, limit)
	if err != nil {
		return nil, fmt.Errorf("top dlq errors: %w", classify(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (reginatype.ErrorCount, error) {
		var e reginatype.ErrorCount
		err := r.Scan(&e.Error, &e.Count)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("top dlq errors: %w", classify(err))
	}
	return out, nil
}

// DeadLetterOf returns the error and retry count of the first dead letter
// (by group name) of the message at offset in the partition; found is false
// when no group dead-lettered it.
func (s *Store) DeadLetterOf(ctx context.Context, partitionID partition.UUID, offset int64) (
	errMsg string, retries int, found bool, err error) {
	var msg *string
	err = s.pool.QueryRow(ctx, s.sql.stats.deadLetterOf, partitionID, offset).Scan(&msg, &retries)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, fmt.Errorf("dead letter of message: %w", classify(err))
	}
	if msg != nil {
		errMsg = *msg
	}
	return errMsg, retries, true, nil
}
