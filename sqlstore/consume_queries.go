package sqlstore

// consumerQueries fills the consume-side SQL (unqualified: newQueries
// qualifies it).
func (q *queries) consumerQueries() {
	// Queue, group start point and the group's catch-up, in one statement
	// of its own (see functions/pop_prepare.sql).
	q.popPrepare = `SELECT queue_id, coalesce(lease_time, 0), coalesce(delayed, 0), coalesce(window_buffer, 0),
		       coalesce(retry_limit, 0), sub_from, caught, scanned
		  FROM queen.pop_prepare($1, $2, $3, $4, $5)`
	q.popPartitionByName = `SELECT id, name FROM queen.partitions WHERE queue_id = $1 AND name = $2`
	// Cursor rows of the group with unread work whose wait is over (no live
	// lease, delayedProcessing and windowBuffer passed), the longest waiting
	// first: an index scan of consumers_ready that stops after $3 rows it
	// could lock (rows other pops hold are skipped, not counted). Its cost
	// does not grow with the queue's partition count.
	// Each comes with what popPartition would read again under the lock
	// (the cursor and the lease), so a candidate costs no second round
	// trip, and with its avail_at. The scan starts at $4, the group's ready
	// floor (NULL: at the head; ready_floor.go).
	q.popCandidates = `SELECT c.partition_id, p.name, c.cursor_offset,
		       (c.lease_id IS NOT NULL AND c.lease_expires_at > now()), c.lease_expires_at, c.avail_at
		  FROM queen.consumers c
		  JOIN queen.partitions p ON p.id = c.partition_id
		 WHERE c.queue_id = $1 AND c.consumer_group = $2 AND c.known_end > c.cursor_offset
		   AND c.avail_at >= coalesce($4::timestamptz, '-infinity') AND c.avail_at <= now()
		 ORDER BY c.avail_at
		 LIMIT $3
		   FOR UPDATE OF c SKIP LOCKED`
	// Whether the group has a cursor row it could be served from now (the
	// named partition's when $3 is not NULL); rows another pop holds count.
	q.popHasWork = `SELECT EXISTS (SELECT 1 FROM queen.consumers c
		 WHERE c.queue_id = $1 AND c.consumer_group = $2 AND c.known_end > c.cursor_offset
		   AND c.avail_at <= now()
		   AND ($3::text IS NULL OR c.partition_id = (SELECT p.id FROM queen.partitions p
		                                              WHERE p.queue_id = $1 AND p.name = $3)))`
	// After a reconfiguration (windowBuffer or delayedProcessing may have
	// shrunk): every cursor row of the queue waiting for a time that is not
	// a live lease's expiry is ready now; a pop re-checks it.
	q.readyAfterConfigure = `UPDATE queen.consumers SET avail_at = now()
		 WHERE queue_id = $1 AND known_end > cursor_offset AND avail_at > now()
		   AND (lease_id IS NULL OR lease_expires_at <= now())`
	// A new cursor starts at 0, or for a group with a start point at the
	// first segment created after it (the partition's end when none is).
	// A named-partition pop makes it started.
	q.ensureConsumer = `INSERT INTO queen.consumers (partition_id, consumer_group, queue_id, cursor_offset, known_end, started)
		SELECT $1, $2, p.queue_id, CASE
			WHEN $3::timestamptz IS NULL THEN 0
			WHEN coalesce((SELECT s.created_at FROM queen.segments s WHERE s.partition_id = $1
			                ORDER BY s.first_offset DESC LIMIT 1), '-infinity') <= $3::timestamptz
			     THEN p.next_offset
			ELSE coalesce((SELECT s.first_offset FROM queen.segments s WHERE s.partition_id = $1
			                 AND s.created_at > $3::timestamptz ORDER BY s.first_offset LIMIT 1),
			              p.next_offset)
			END, p.next_offset, true
		  FROM queen.partitions p WHERE p.id = $1
		ON CONFLICT (partition_id, consumer_group) DO UPDATE SET started = true WHERE NOT consumers.started`
	q.lockConsumer = `SELECT cursor_offset, (lease_id IS NOT NULL AND lease_expires_at > now()), lease_expires_at
		  FROM queen.consumers WHERE partition_id = $1 AND consumer_group = $2
		   FOR UPDATE SKIP LOCKED`
	// The time windowBuffer ends for the partition's newest message.
	q.windowBufferBusy = `SELECT (SELECT created_at + make_interval(secs => $2) FROM queen.segments
		 WHERE partition_id = $1 ORDER BY first_offset DESC LIMIT 1)`
	// The segments holding offsets $2 .. $2+$3-1: the one covering the
	// cursor (when retention removed it, the oldest left) and the ones
	// starting before $2+$3; offsets are dense, so that is $3 messages
	// less the tombstones. Then the first segment after them without its
	// frames (NULL), which says where a read that came up short goes on,
	// or that nothing follows. Bounding by offsets, not by a count of
	// segments, reads only the frames a batch needs: at batch 100 over
	// segments of 10 messages, 10 segments instead of 101.
	q.readSegments = `(SELECT first_offset, frame_count, created_at, frames FROM queen.segments
		 WHERE partition_id = $1
		   AND first_offset >= coalesce((SELECT s.first_offset FROM queen.segments s
		                                  WHERE s.partition_id = $1 AND s.first_offset <= $2
		                                  ORDER BY s.first_offset DESC LIMIT 1), $2)
		   AND first_offset < $2 + $3::integer
		 ORDER BY first_offset)
		UNION ALL
		(SELECT first_offset, frame_count, created_at, NULL FROM queen.segments
		  WHERE partition_id = $1 AND first_offset >= $2 + $3::integer
		  ORDER BY first_offset LIMIT 1)`
	// After an autoAck pop the partition goes to the back of the ready line
	// (waiting since now).
	q.popAutoAck = `UPDATE queen.consumers SET cursor_offset = $3, lease_id = NULL, lease_expires_at = NULL,
		       lease_from = NULL, lease_to = NULL, retry_count = 0, updated_at = now(), avail_at = now(),
		       started = true
		 WHERE partition_id = $1 AND consumer_group = $2`
	// A leased partition waits for its lease: it is ready again when the
	// lease expires (an ack that releases it makes it ready at once).
	q.popLease = `UPDATE queen.consumers SET lease_id = $3, lease_expires_at = now() + make_interval(secs => $4),
		       lease_from = $5, lease_to = $6, cursor_offset = $5, updated_at = now(),
		       avail_at = now() + make_interval(secs => $4), started = true
		 WHERE partition_id = $1 AND consumer_group = $2`
	// A cursor row that turned out not to be servable yet: it waits until
	// $3 (a live lease's expiry, the end of windowBuffer or of
	// delayedProcessing).
	q.popNotBefore = `UPDATE queen.consumers SET avail_at = $3 WHERE partition_id = $1 AND consumer_group = $2`
	// A cursor row with nothing left to read at the cursor (retention
	// removed what known_end promised): no longer ready until a push.
	q.popNothing = `UPDATE queen.consumers SET known_end = cursor_offset WHERE partition_id = $1 AND consumer_group = $2`

	q.ackPartitionInfo = `SELECT q.name, p.name, q.retry_limit FROM queen.partitions p
		  JOIN queen.queues q ON q.id = p.queue_id WHERE p.id = $1`
	q.lockConsumerForAck = `SELECT cursor_offset, lease_id, (lease_id IS NOT NULL AND lease_expires_at > now()),
		       lease_from, lease_to, retry_count
		  FROM queen.consumers WHERE partition_id = $1 AND consumer_group = $2 FOR UPDATE`
	// Every stored occurrence of each hash in the sidecar (GIN-driven and
	// hash-joined, as the full-window probe: functions/resolve_offsets.sql).
	q.resolveOffsets = `SELECT i, msg_offset FROM queen.resolve_offsets($1, $2::bytea[])`
	// An ack of completions in one statement (functions/ack_completions.sql).
	q.ackCompletions = `SELECT queue_name, partition_name, state, codes, released
		  FROM queen.ack_completions($1, $2, $3::bytea[], $4::uuid[])`
	q.updateConsumerAfterAck = `UPDATE queen.consumers SET cursor_offset = $3, retry_count = $5,
		       lease_id = CASE WHEN $4 THEN NULL ELSE lease_id END,
		       lease_expires_at = CASE WHEN $4 THEN NULL ELSE lease_expires_at END,
		       lease_from = CASE WHEN $4 THEN NULL ELSE lease_from END,
		       lease_to = CASE WHEN $4 THEN NULL ELSE lease_to END,
		       avail_at = CASE WHEN $4 THEN now() ELSE avail_at END,
		       updated_at = now()
		 WHERE partition_id = $1 AND consumer_group = $2`
	q.segmentAt = `SELECT first_offset, frame_count, frames FROM queen.segments
		 WHERE partition_id = $1 AND first_offset <= $2 ORDER BY first_offset DESC LIMIT 1`
	q.insertDLQ = `INSERT INTO queen.dlq (partition_id, consumer_group, msg_offset, message_id, transaction_id,
		       trace_id, payload, created_at, error_message, retry_count, producer_sub, encrypted)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
		ON CONFLICT (partition_id, consumer_group, msg_offset) DO UPDATE
		   SET error_message = EXCLUDED.error_message, retry_count = EXCLUDED.retry_count, failed_at = now()`
	q.extendLease = `WITH upd AS (
			UPDATE queen.consumers SET lease_expires_at = greatest(lease_expires_at, now() + make_interval(secs => $2)),
			       avail_at = greatest(lease_expires_at, now() + make_interval(secs => $2)), updated_at = now()
			 WHERE lease_id = $1 AND lease_expires_at > now()
			RETURNING lease_expires_at)
		SELECT lease_expires_at, true FROM upd
		UNION ALL
		SELECT lease_expires_at, false FROM queen.consumers WHERE lease_id = $1 AND lease_expires_at <= now()`

	const dlqWhere = ` FROM queen.dlq d
		  JOIN queen.partitions p ON p.id = d.partition_id
		  JOIN queen.queues q ON q.id = p.queue_id
		 WHERE ($1::text IS NULL OR q.name = $1) AND ($2::text IS NULL OR d.consumer_group = $2)
		   AND ($3::text IS NULL OR p.name = $3)
		   AND ($4::timestamptz IS NULL OR d.failed_at >= $4) AND ($5::timestamptz IS NULL OR d.failed_at <= $5)`
	q.countDLQ = `SELECT count(*)` + dlqWhere
	q.listDLQ = `SELECT d.message_id, d.transaction_id, d.trace_id, d.partition_id, q.name, p.name, d.consumer_group,
		       d.error_message, d.retry_count, d.payload, d.producer_sub, d.created_at, d.failed_at, d.encrypted` + dlqWhere + `
		 ORDER BY d.failed_at DESC, d.msg_offset DESC LIMIT $6 OFFSET $7`
	// The group's catch-up horizon goes with its cursors, so its next pop
	// looks at every partition again. Only the cursors the group started
	// are counted.
	q.deleteGroupCursors = `WITH scan AS (
			DELETE FROM queen.group_scan g WHERE g.consumer_group = $1
			   AND ($2::text IS NULL OR g.queue_id = (SELECT id FROM queen.queues WHERE name = $2)))
		, del AS (
			DELETE FROM queen.consumers c WHERE c.consumer_group = $1
			   AND ($2::text IS NULL OR c.queue_id = (SELECT id FROM queen.queues WHERE name = $2))
			RETURNING c.started)
		SELECT count(*) FILTER (WHERE started) FROM del`
	q.deleteGroupMeta = `DELETE FROM queen.consumer_groups g WHERE g.consumer_group = $1
		   AND ($2::text IS NULL OR g.queue_id = (SELECT id FROM queen.queues WHERE name = $2))`
	q.seekTargetsExist = `SELECT EXISTS (SELECT 1 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		 WHERE q.name = $1 AND ($2::text IS NULL OR p.name = $2))`
	// Only the group's existing cursors move (partitions it never read
	// follow its subscription on their first pop, as upstream); a seek to
	// the end skips partitions that never had a message. RETURNING gives the
	// stored time of each partition's newest message.
	q.seek = `UPDATE queen.consumers c SET cursor_offset = CASE WHEN $4::timestamptz IS NULL THEN p.next_offset
		       ELSE coalesce((SELECT s.first_offset FROM queen.segments s WHERE s.partition_id = p.id
		                        AND s.created_at > $4::timestamptz ORDER BY s.first_offset LIMIT 1), p.next_offset) END,
		       lease_id = NULL, lease_expires_at = NULL, lease_from = NULL, lease_to = NULL, retry_count = 0,
		       known_end = p.next_offset, avail_at = now(), updated_at = now()
		  FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		 WHERE c.partition_id = p.id AND c.consumer_group = $3 AND q.name = $1 AND ($2::text IS NULL OR p.name = $2)
		   AND c.started
		   AND ($4::timestamptz IS NOT NULL OR p.next_offset > 0)
		RETURNING (SELECT s.created_at FROM queen.segments s WHERE s.partition_id = p.id
		            ORDER BY s.first_offset DESC LIMIT 1)`
	q.lockPartition = `SELECT p.next_offset, q.name FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		 WHERE p.id = $1 FOR UPDATE OF p`
	// One row per group that dead-lettered it; several groups can hold the
	// same message, which is replayed once.
	q.takeDLQ = `DELETE FROM queen.dlq WHERE partition_id = $1 AND transaction_id = $2
		   AND ($3::text IS NULL OR consumer_group = $3)
		RETURNING msg_offset, payload, trace_id, producer_sub, encrypted`
	q.replayInsert = `WITH seg AS (
			INSERT INTO queen.segments (partition_id, first_offset, frame_count, frames) VALUES ($1, $2, 1, $3)),
		hashes AS (
			INSERT INTO queen.log_txns (partition_id, first_offset, hashes) VALUES ($1, $2, $4))
		UPDATE queen.partitions SET next_offset = $2 + 1, push_xid = pg_current_xact_id(), last_push_at = now()
		 WHERE id = $1`
	q.liveLeases = `SELECT count(DISTINCT lease_id) FROM queen.consumers
		 WHERE lease_id = ANY($1::uuid[]) AND lease_expires_at > now()`
	q.setSubscription = `UPDATE queen.consumer_groups SET subscription_from = $2 WHERE consumer_group = $1`
	// Cursor rows a catch-up made at the old start point, and the horizon,
	// go: the next pop makes them again at the new one.
	q.resetUnstarted = `WITH scan AS (DELETE FROM queen.group_scan WHERE consumer_group = $1)
		DELETE FROM queen.consumers WHERE consumer_group = $1 AND NOT started`

	// Consumed segments: older than completedRetentionSeconds and below every
	// group's cursor on the partition (kept while no group has read them);
	// only the run of such segments at the start of the log (see purgeSegments).
	q.purgeConsumed = `DELETE FROM queen.segments s USING (
			SELECT first_offset FROM (
				SELECT first_offset,
				       bool_and(coalesce(created_at < now() - make_interval(secs => $2)
				                 AND first_offset + frame_count <= (SELECT min(c.cursor_offset) FROM queen.consumers c
				                                                     WHERE c.partition_id = $1), false))
				         OVER (ORDER BY first_offset) AS expired
				  FROM (SELECT first_offset, frame_count, created_at FROM queen.segments
				         WHERE partition_id = $1 ORDER BY first_offset LIMIT $3) o) e
			 WHERE e.expired) d
		WHERE s.partition_id = $1 AND s.first_offset = d.first_offset`
}
