package sqlstore

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/regina-mq/regina/partition"
)

// queries holds the store's SQL, qualified with the configured schema.
type queries struct {
	ensurePartition                                                                   string
	pushSegment                                                                       string
	pushDups                                                                          string
	pushDupsSegments                                                                  string
	pushSegments                                                                      string
	configure                                                                         string
	deleteQueue                                                                       string
	deletePartitions                                                                  string
	deleteSegments                                                                    string
	deleteLogTxns                                                                     string
	deleteConsumers, deleteDLQ, deleteQueueGroups                                     string
	listQueues                                                                        string
	retentionTargets                                                                  string
	evictionTargets                                                                   string
	purgeSegments                                                                     string
	purgeConsumed                                                                     string
	ensureSidecar, sidecarDropLock, sidecarDropUnlock, sidecarHorizon, expiredSidecar string

	// Citus only (citusQueries).
	citusPopPrepare, citusReady, citusHorizons, citusSetHorizon string
	popPrepare, popHasWork, readyAfterConfigure, popPartitionByName, popCandidates, ensureConsumer, lockConsumer,
	windowBufferBusy, readSegments, popAutoAck, popLease, popNotBefore, popNothing string
	ackPartitionInfo, lockConsumerForAck, resolveOffsets, updateConsumerAfterAck, segmentAt, ackCompletions,
	insertDLQ, extendLease string
	lockPartition, takeDLQ, replayInsert, liveLeases                                                                string
	countDLQ, listDLQ, deleteGroupCursors, deleteGroupMeta, seekTargetsExist, seek, setSubscription, resetUnstarted string
	admin                                                                                                           adminQueries
	traces                                                                                                          traceQueries
	streams                                                                                                         streamQueries
	stats                                                                                                           statsQueries
	delivery                                                                                                        deliveryQueries
}

const queueOptionColumns = `lease_time, retry_limit, retry_delay, max_size, ttl, priority,
	delayed_processing, window_buffer, dead_letter_queue, dlq_after_max_retries,
	retention_enabled, retention_seconds, completed_retention_seconds,
	max_wait_time_seconds, encryption_enabled, dedup_window_seconds, dedup_payload_check`

// queueOptionFields returns pointers to o's fields in queueOptionColumns order
// (the order of queen.ensure_partition's option arguments too), for Scan and
// as query arguments.
func queueOptionFields(o *partition.QueueOptions) []any {
	return []any{&o.LeaseTime, &o.RetryLimit, &o.RetryDelay, &o.MaxSize, &o.TTL, &o.Priority,
		&o.DelayedProcessing, &o.WindowBuffer, &o.DeadLetterQueue, &o.DLQAfterMaxRetries,
		&o.RetentionEnabled, &o.RetentionSeconds, &o.CompletedRetentionSeconds,
		&o.MaxWaitTimeSeconds, &o.EncryptionEnabled, &o.DedupWindowSeconds, &o.DedupPayloadCheck}
}

// queueOptionLiterals renders o as SQL literals in queueOptionColumns order.
func queueOptionLiterals(o partition.QueueOptions) string {
	fields := queueOptionFields(&o)
	lits := make([]string, len(fields))
	for i, f := range fields {
		switch v := f.(type) {
		case *int:
			lits[i] = strconv.Itoa(*v)
		case *bool:
			lits[i] = strconv.FormatBool(*v)
		case *string:
			lits[i] = "'" + strings.ReplaceAll(*v, "'", "''") + "'"
		default:
			panic(fmt.Sprintf("queue option of type %T", f))
		}
	}
	return strings.Join(lits, ", ")
}

func newQueries(schema string) queries {
	q := queries{
		// A queue created here gets the default options, the same values a
		// configure without options writes.
		// The queue's encryption flag comes along (one round trip; the
		// function's OUT columns stay as they are). The statement's snapshot
		// predates a queue the function creates: that one has the default
		// options, so no encryption.
		ensurePartition: `SELECT e.partition_id, e.queue_id, e.window_seconds, e.payload_check,
				coalesce(q.encryption_enabled, false)
			FROM queen.ensure_partition($1, $2, $3, $4, ` + queueOptionLiterals(partition.DefaultQueueOptions()) + `) e
			LEFT JOIN queen.queues q ON q.id = e.queue_id`,
		pushSegment: `SELECT status, window_seconds, first_offset, created_at, dup_idx, dup_ids, dup_created,
				payload_check, dup_fps
			FROM queen.push_segment($1, $2, $3, $4, $5, $6, $7, $8)`,
		pushSegments: `SELECT k, status, window_seconds, first_offset, created_at, dup_idx, dup_ids, dup_created,
				payload_check, dup_fps
			FROM queen.push_segments($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		pushDups: `SELECT status, window_seconds, first_offset, created_at, dup_idx, dup_ids, dup_created,
				payload_check, dup_fps
			FROM queen.push_dups($1, $2, $3, $4, $5)`,
		pushDupsSegments: `SELECT i, window_seconds, payload_check, now, created_at, hashes, fingerprints, ids
			FROM queen.push_dups_segments($1, $2)`,
		configure: `INSERT INTO queen.queues (name, namespace, task, ` + queueOptionColumns + `)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)
			ON CONFLICT (name) DO UPDATE SET
				namespace = EXCLUDED.namespace, task = EXCLUDED.task,
				lease_time = EXCLUDED.lease_time, retry_limit = EXCLUDED.retry_limit,
				retry_delay = EXCLUDED.retry_delay, max_size = EXCLUDED.max_size, ttl = EXCLUDED.ttl,
				priority = EXCLUDED.priority, delayed_processing = EXCLUDED.delayed_processing,
				window_buffer = EXCLUDED.window_buffer, dead_letter_queue = EXCLUDED.dead_letter_queue,
				dlq_after_max_retries = EXCLUDED.dlq_after_max_retries,
				retention_enabled = EXCLUDED.retention_enabled, retention_seconds = EXCLUDED.retention_seconds,
				completed_retention_seconds = EXCLUDED.completed_retention_seconds,
				max_wait_time_seconds = EXCLUDED.max_wait_time_seconds,
				encryption_enabled = EXCLUDED.encryption_enabled,
				dedup_window_seconds = EXCLUDED.dedup_window_seconds,
				dedup_payload_check = EXCLUDED.dedup_payload_check,
				updated_at = now()
			RETURNING id`,
		deleteQueue:      `DELETE FROM queen.queues WHERE name = $1 RETURNING id`,
		deletePartitions: `DELETE FROM queen.partitions WHERE queue_id = $1 RETURNING id`,
		deleteSegments:   `DELETE FROM queen.segments WHERE partition_id = ANY($1::uuid[])`,
		deleteLogTxns:    `DELETE FROM queen.log_txns WHERE partition_id = ANY($1::uuid[])`,
		deleteConsumers:  `DELETE FROM queen.consumers WHERE partition_id = ANY($1::uuid[])`,
		deleteDLQ:        `DELETE FROM queen.dlq WHERE partition_id = ANY($1::uuid[])`,
		deleteQueueGroups: `WITH scan AS (DELETE FROM queen.group_scan WHERE queue_id = $1)
			DELETE FROM queen.consumer_groups WHERE queue_id = $1`,
		listQueues: `SELECT q.id, q.name, q.namespace, q.task, q.created_at,
				(SELECT count(*) FROM queen.partitions p WHERE p.queue_id = q.id)::integer,
				coalesce((SELECT sum(p.next_offset - coalesce(
					(SELECT s.first_offset FROM queen.segments s WHERE s.partition_id = p.id
					  ORDER BY s.first_offset LIMIT 1), p.next_offset))
				  FROM queen.partitions p WHERE p.queue_id = q.id), 0)::bigint,
				` + queueOptionColumns + `
			FROM queen.queues q ORDER BY q.name`,
		// Every partition of a queue with retention enabled, with its
		// settings (the hash sidecar is trimmed by dropping whole children,
		// not per partition).
		retentionTargets: `SELECT p.id, q.name, p.name,
				CASE WHEN q.retention_seconds > 0 THEN q.retention_seconds ELSE 0 END,
				CASE WHEN q.completed_retention_seconds > 0 THEN q.completed_retention_seconds ELSE 0 END
			FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
			WHERE q.retention_enabled AND (q.retention_seconds > 0 OR q.completed_retention_seconds > 0)`,
		// The partitions of queues with maxWaitTimeSeconds, oldest message
		// first.
		evictionTargets: `SELECT p.id, q.name, p.name, q.max_wait_time_seconds
			FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id
			WHERE q.max_wait_time_seconds > 0 ORDER BY p.id`,
		// One bounded, autocommitting step: of the partition's oldest
		// batchSize rows (by offset, through the primary key), the run of
		// expired ones at the start. Only a prefix ever goes: created_at is
		// the pushing transaction's start, so a push that waited for the
		// partition lock can hold a later offset with an earlier created_at
		// than its predecessor; deleting every expired row of the window
		// would then punch a hole into the log. Reading a bounded prefix
		// keeps a pass cheap even when nothing has expired.
		purgeSegments: `DELETE FROM queen.segments s USING (
				SELECT first_offset FROM (
					SELECT first_offset,
					       bool_and(coalesce(created_at < now() - make_interval(secs => $2), false))
					         OVER (ORDER BY first_offset) AS expired
					  FROM (SELECT first_offset, created_at FROM queen.segments
					         WHERE partition_id = $1 ORDER BY first_offset LIMIT $3) o) e
				 WHERE e.expired) d
			WHERE s.partition_id = $1 AND s.first_offset = d.first_offset`,
	}
	q.sidecarDropLock = `SELECT pg_try_advisory_lock(hashtext($$regina.sidecar-drop.queen.log_txns$$))`
	q.sidecarDropUnlock = `SELECT pg_advisory_unlock(hashtext($$regina.sidecar-drop.queen.log_txns$$))`
	q.sidecarHorizon = sidecarHorizonSQL
	q.ensureSidecar = ensureSidecarSQL
	q.expiredSidecar = expiredSidecarSQL
	q.consumerQueries()
	q.admin = newAdminQueries(schema)
	q.traces = newTraceQueries(schema)
	q.streams = newStreamQueries(schema)
	q.stats = newStatsQueries(schema)
	q.delivery = newDeliveryQueries(schema)
	for _, p := range []*string{&q.ensurePartition, &q.pushSegment, &q.pushDups, &q.pushDupsSegments, &q.pushSegments, &q.configure, &q.deleteQueue,
		&q.deletePartitions, &q.deleteSegments, &q.deleteLogTxns, &q.listQueues,
		&q.deleteConsumers, &q.deleteDLQ, &q.deleteQueueGroups,
		&q.retentionTargets, &q.evictionTargets, &q.purgeSegments, &q.purgeConsumed,
		&q.ensureSidecar, &q.sidecarDropLock, &q.sidecarDropUnlock, &q.sidecarHorizon, &q.expiredSidecar,
		&q.popPrepare, &q.popHasWork, &q.readyAfterConfigure, &q.popPartitionByName, &q.popCandidates, &q.ensureConsumer, &q.lockConsumer,
		&q.windowBufferBusy, &q.readSegments, &q.popAutoAck, &q.popLease, &q.popNotBefore, &q.popNothing,
		&q.ackPartitionInfo, &q.lockConsumerForAck, &q.resolveOffsets, &q.updateConsumerAfterAck, &q.segmentAt, &q.ackCompletions,
		&q.insertDLQ, &q.extendLease,
		&q.countDLQ, &q.listDLQ, &q.deleteGroupCursors, &q.deleteGroupMeta, &q.seekTargetsExist, &q.seek,
		&q.setSubscription, &q.resetUnstarted, &q.lockPartition, &q.takeDLQ, &q.replayInsert, &q.liveLeases} {
		*p = qualify(*p, schema)
	}
	return q
}
