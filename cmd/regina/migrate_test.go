package main

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/sqlstore"
)

// A broker refuses to start on a database where an applied migration differs
// from its file (here the recorded checksum of 0001 no longer matches, as
// after an edit of the file), and says which file and what to do.
func TestBrokerRefusesAChangedMigration(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	b.Stop(t)
	d := newDB(t, b.Schema)
	d.exec(t, `UPDATE queen.schema_migrations SET checksum = repeat('0', 64) WHERE version = 1`)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ready := make(chan string, 1)
	err := run(ctx, brokerConfig(t, b.Schema), zerolog.Nop(), ready)
	require.ErrorIs(t, err, sqlstore.ErrMigrationChanged)
	require.ErrorContains(t, err, "sqlstore/migrations/0001_init.up.sql")
	require.Empty(t, ready, "the broker must not serve")
}

// A queue created by a push and one configured without options get the same
// options: partition.DefaultQueueOptions, written down in one place.
func TestQueueDefaultsAreTheSameForPushAndConfigure(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	b.push(t, item{"queue": "bypush", "payload": map[string]any{"a": 1}})
	b.configure(t, "byconfigure", nil)
	d := newDB(t, b.Schema)
	options := func(queue string) partition.QueueOptions {
		var o partition.QueueOptions
		require.NoError(t, d.pool.QueryRow(context.Background(), d.q(`SELECT lease_time, retry_limit, retry_delay,
			max_size, ttl, priority, delayed_processing, window_buffer, dead_letter_queue, dlq_after_max_retries,
			retention_enabled, retention_seconds, completed_retention_seconds, max_wait_time_seconds,
			encryption_enabled, dedup_window_seconds, dedup_payload_check FROM queen.queues WHERE name = $1`), queue).Scan(
			&o.LeaseTime, &o.RetryLimit, &o.RetryDelay, &o.MaxSize, &o.TTL, &o.Priority, &o.DelayedProcessing,
			&o.WindowBuffer, &o.DeadLetterQueue, &o.DLQAfterMaxRetries, &o.RetentionEnabled, &o.RetentionSeconds,
			&o.CompletedRetentionSeconds, &o.MaxWaitTimeSeconds, &o.EncryptionEnabled, &o.DedupWindowSeconds,
			&o.DedupPayloadCheck))
		return o
	}
	require.Equal(t, partition.DefaultQueueOptions(), options("bypush"))
	require.Equal(t, partition.DefaultQueueOptions(), options("byconfigure"))
}
