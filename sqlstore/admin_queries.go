package sqlstore

// adminQueries is the SQL of the read-only views: dedup explain/lookup and
// the admin and status endpoints. None of it writes or locks.
type adminQueries struct {
	explainResolve, explainProbe                      string
	adminNow, adminQueues, adminParts, adminConsumers string
	messagesCount, messagesPage, messageAt            string
	// The list with a status filter (see msgStatusSegments).
	messagesCountStatus, messagesPageStatus string
}

// A message's status (Queen's, see reginatype.MessageDeadLetter) follows
// from its offset and two bounds of its partition: below doneTo it is
// completed (below queue mode's cursor; without queue mode, below every
// named group's cursor; nothing without any group), below busyTo
// processing (under queue mode's live lease), pending after that; a dead
// letter of any group is dead_letter whatever its offset. Both need the
// partition p's queue-mode cursor qm and its named groups' lowest cursor
// ng.cur: statusBounds joins them to a few rows (group is queue mode's
// name); msgStatusSegments to many at once.
func statusBounds(group string) string {
	return `
		  LEFT JOIN queen.consumers qm ON qm.partition_id = p.id AND qm.consumer_group = ` + group + ` AND qm.started
		  LEFT JOIN LATERAL (SELECT min(c.cursor_offset) AS cur FROM queen.consumers c
		                      WHERE c.partition_id = p.id AND c.consumer_group <> ` + group + ` AND c.started) ng ON true`
}

const (
	doneTo = `coalesce(qm.cursor_offset, ng.cur, 0)`
	busyTo = `CASE WHEN qm.lease_id IS NOT NULL AND qm.lease_expires_at > now()
		            THEN greatest(qm.lease_to, qm.cursor_offset) ELSE ` + doneTo + ` END`
	// The messages list's filters: $1 queue, $2 partition, $3 namespace,
	// $4 task (NULL matches everything).
	msgQueueFilter = `($1::text IS NULL OR q.name = $1) AND ($2::text IS NULL OR p.name = $2)
		     AND ($3::text IS NULL OR q.namespace = $3) AND ($4::text IS NULL OR q.task = $4)`
	// $5 from, $6 to: the segments' stored time (NULL: unbounded).
	msgTimeFilter = `($5::timestamptz IS NULL OR s.created_at >= $5) AND ($6::timestamptz IS NULL OR s.created_at <= $6)`
	// The page of a list ordered newest first: w holds the filtered
	// segments with upto, the messages selected up to and including each,
	// and m, those of the segment; the page [$off, $off+$lim) overlaps the
	// segments read. Each comes with its partition's names, status bounds
	// and dead-lettered offsets.
	msgPageColumns = `s.partition_id, s.first_offset, s.frame_count, (w.upto - w.m)::bigint, s.frames,
		       p.name, q.name, q.namespace, q.task, ` + doneTo + `, ` + busyTo + `,
		       coalesce((SELECT array_agg(DISTINCT d.msg_offset) FROM queen.dlq d
		                  WHERE d.partition_id = s.partition_id AND d.msg_offset >= s.first_offset
		                    AND d.msg_offset < s.first_offset + s.frame_count), '{}')`
)

// msgPage reads the page of w; group is queue mode's name, off and lim the
// page's parameters.
func msgPage(group, off, lim string) string {
	return `SELECT ` + msgPageColumns + `
			  FROM w
			  JOIN queen.segments s ON s.partition_id = w.partition_id AND s.first_offset = w.first_offset
			  JOIN queen.partitions p ON p.id = w.partition_id
			  JOIN queen.queues q ON q.id = p.queue_id` + statusBounds(group) + `
			 WHERE w.upto > ` + off + ` AND w.upto - w.m < ` + off + `::bigint + ` + lim + `
			 ORDER BY w.upto`
}

// msgWindow is upto (see msgPageColumns) over f's segments.
const msgWindow = `sum(f.m) OVER (ORDER BY f.created_at DESC, f.partition_id DESC, f.first_offset DESC) AS upto`

// msgStatusSegments (the CTEs st, dl and f) selects the stored segments of
// the list's filters with, in m, how many of their messages have the
// status $8; $7 is queue mode's name. st bounds every partition the
// filters select (the named groups' cursors aggregated over the queues
// selected), dl holds their dead-lettered offsets (through the DLQ's
// (partition_id, msg_offset) index), joined to the segments by range.
var msgStatusSegments = `st AS MATERIALIZED (
		SELECT p.id, ` + doneTo + ` AS done_to, ` + busyTo + ` AS busy_to
		  FROM queen.partitions p
		  JOIN queen.queues q ON q.id = p.queue_id
		  LEFT JOIN queen.consumers qm ON qm.partition_id = p.id AND qm.consumer_group = $7 AND qm.started
		  LEFT JOIN (SELECT c.partition_id, min(c.cursor_offset) AS cur FROM queen.consumers c
		              WHERE c.consumer_group <> $7 AND c.started AND c.queue_id IN (
		                    SELECT q2.id FROM queen.queues q2
		                     WHERE ($1::text IS NULL OR q2.name = $1) AND ($3::text IS NULL OR q2.namespace = $3)
		                       AND ($4::text IS NULL OR q2.task = $4))
		              GROUP BY 1) ng ON ng.partition_id = p.id
		 WHERE ` + msgQueueFilter + `),
	dl AS (SELECT DISTINCT d.partition_id, d.msg_offset FROM queen.dlq d JOIN st ON st.id = d.partition_id),
	f AS (
		SELECT s.partition_id, s.first_offset, s.created_at,
		       CASE $8::text
		         WHEN 'completed' THEN ` + overlap("0", "st.done_to") + ` - count(dl.msg_offset) FILTER (WHERE dl.msg_offset < st.done_to)
		         WHEN 'processing' THEN ` + overlap("st.done_to", "st.busy_to") + ` - count(dl.msg_offset) FILTER (
		                WHERE dl.msg_offset >= st.done_to AND dl.msg_offset < st.busy_to)
		         WHEN 'pending' THEN ` + overlap("st.busy_to", "s.first_offset + s.frame_count") + ` - count(dl.msg_offset) FILTER (
		                WHERE dl.msg_offset >= st.busy_to)
		         ELSE count(dl.msg_offset) END AS m
		  FROM queen.segments s
		  JOIN st ON st.id = s.partition_id
		  LEFT JOIN dl ON dl.partition_id = s.partition_id AND dl.msg_offset >= s.first_offset
		              AND dl.msg_offset < s.first_offset + s.frame_count
		 WHERE ` + msgTimeFilter + `
		 GROUP BY s.partition_id, s.first_offset, s.frame_count, s.created_at, st.done_to, st.busy_to)`

// overlap is the number of a segment's offsets (s) in [lo, hi).
func overlap(lo, hi string) string {
	return `greatest(0, least(s.first_offset + s.frame_count, ` + hi + `) - greatest(s.first_offset, ` + lo + `))`
}

func newAdminQueries(schema string) adminQueries {
	q := adminQueries{
		// Each key's queue and partition (NULL when missing), and the
		// transaction's time.
		explainResolve: `SELECT k.i::integer, q.id, q.dedup_window_seconds, q.dedup_payload_check, q.encryption_enabled, p.id, now()
			  FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(queue, part, i)
			  LEFT JOIN queen.queues q ON q.name = k.queue
			  LEFT JOIN queen.partitions p ON p.queue_id = q.id AND p.name = k.part
			 ORDER BY k.i`,
		// The push probe's shape (queen.push_probe, full window): one GIN
		// index scan for every key's hash drives it, the partition filter is
		// kept out of the index conditions, the matching rows' hashes are
		// unnested once into c (MATERIALIZED) and hash-joined with the keys
		// (Explain turns nested loops off: with a join per key, each key
		// probed the GIN index alone and was compared with every hash of
		// every row it matched, a million comparisons for 1000 keys of one
		// 1000-message push). No window bound, so that copies outside it
		// are seen (as expired); in_window applies the push's bound exactly.
		// The original's id and fingerprint are read per copy found.
		explainProbe: `WITH c AS MATERIALIZED (
			    SELECT l.partition_id AS pid, l.first_offset AS fo, l.created_at AS created, m.h, m.o::integer AS o
			      FROM queen.log_txns l
			     CROSS JOIN LATERAL unnest(l.hashes) WITH ORDINALITY AS m(h, o)
			     WHERE l.hashes && $2::bytea[] AND (l.partition_id = ANY($1::uuid[])) IS TRUE)
			SELECT k.i, c.fo + c.o - 1, c.created,
			       c.created > now() - make_interval(secs => k.w),
			       (SELECT substring(s.frames FROM (c.o - 1) * 16 + 1 FOR 16)
			          FROM queen.segments s
			         WHERE s.partition_id = c.pid AND s.first_offset = c.fo),
			       (SELECT t.fingerprints[c.o]
			          FROM queen.log_txns t
			         WHERE t.partition_id = c.pid AND t.first_offset = c.fo AND t.created_at = c.created)
			  FROM c JOIN unnest($1::uuid[], $2::bytea[], $3::integer[], $4::integer[]) AS k(pid, h, w, i)
			    ON k.h = c.h AND k.pid = c.pid
			 ORDER BY k.i, c.fo, c.o`,
		adminNow: `SELECT now()`,
		adminQueues: `SELECT q.id, q.name, q.namespace, q.task, q.created_at, ` + queueOptionColumns + `
			  FROM queen.queues q
			 WHERE ($1::text IS NULL OR q.name = $1) AND ($2::text IS NULL OR q.namespace = $2)
			   AND ($3::text IS NULL OR q.task = $3)
			 ORDER BY q.name`,
		adminParts: `SELECT p.queue_id, p.id, p.name, p.created_at, p.next_offset,
			       coalesce(o.first_offset, p.next_offset), o.created_at, n.created_at,
			       (SELECT count(*) FROM queen.dlq d WHERE d.partition_id = p.id),
			       (SELECT count(*) FROM queen.dlq d WHERE d.partition_id = p.id AND d.consumer_group = $2)
			  FROM queen.partitions p
			  LEFT JOIN LATERAL (SELECT s.first_offset, s.created_at FROM queen.segments s
			                      WHERE s.partition_id = p.id ORDER BY s.first_offset LIMIT 1) o ON true
			  LEFT JOIN LATERAL (SELECT s.created_at FROM queen.segments s
			                      WHERE s.partition_id = p.id ORDER BY s.first_offset DESC LIMIT 1) n ON true
			 WHERE p.queue_id = ANY($1::uuid[])
			 ORDER BY p.queue_id, p.name`,
		// Every cursor, with the stored time of the oldest message it has not
		// consumed (the segment covering the cursor, or the first after it
		// when retention removed that one).
		adminConsumers: `SELECT c.partition_id, c.consumer_group, c.cursor_offset, c.lease_id, c.lease_expires_at,
			       (c.lease_id IS NOT NULL AND c.lease_expires_at > now()), c.lease_from, c.lease_to,
			       c.retry_count, c.updated_at,
			       ` + oldestPendingAt + `
			  FROM queen.consumers c JOIN queen.partitions p ON p.id = c.partition_id
			 WHERE c.partition_id = ANY($1::uuid[]) AND c.started
			 ORDER BY c.partition_id, c.consumer_group`,
		// Without a status filter: every message of the segments the
		// filters select ($1..$6); the page's $7 is queue mode's name, $8
		// offset, $9 limit.
		messagesCount: `SELECT coalesce(sum(s.frame_count), 0)::bigint
			  FROM queen.segments s
			  JOIN queen.partitions p ON p.id = s.partition_id
			  JOIN queen.queues q ON q.id = p.queue_id
			 WHERE ` + msgQueueFilter + ` AND ` + msgTimeFilter,
		messagesPage: `WITH w AS (
				SELECT f.partition_id, f.first_offset, f.m, ` + msgWindow + `
				  FROM (SELECT s.partition_id, s.first_offset, s.created_at, s.frame_count AS m
				          FROM queen.segments s
				          JOIN queen.partitions p ON p.id = s.partition_id
				          JOIN queen.queues q ON q.id = p.queue_id
				         WHERE ` + msgQueueFilter + ` AND ` + msgTimeFilter + `) f)
			` + msgPage("$7", "$8", "$9"),
		// With one ($8); the page's $9 offset, $10 limit.
		messagesCountStatus: `WITH ` + msgStatusSegments + `
			SELECT coalesce(sum(f.m), 0)::bigint FROM f`,
		messagesPageStatus: `WITH ` + msgStatusSegments + `,
			w AS (SELECT f.partition_id, f.first_offset, f.m, ` + msgWindow + ` FROM f WHERE f.m > 0)
			` + msgPage("$7", "$9", "$10"),
		// The segment covering an offset, with its partition's names and
		// status bounds.
		messageAt: `SELECT s.first_offset, s.frame_count, s.frames, p.name, q.name, q.namespace, q.task,
			       ` + doneTo + `, ` + busyTo + `
			  FROM queen.partitions p
			  JOIN queen.queues q ON q.id = p.queue_id
			  JOIN LATERAL (SELECT s.first_offset, s.frame_count, s.frames FROM queen.segments s
			                 WHERE s.partition_id = p.id AND s.first_offset <= $2
			                 ORDER BY s.first_offset DESC LIMIT 1) s ON true` + statusBounds("$3") + `
			 WHERE p.id = $1`,
	}
	for _, p := range []*string{&q.explainResolve, &q.explainProbe, &q.adminNow, &q.adminQueues, &q.adminParts,
		&q.adminConsumers, &q.messagesCount, &q.messagesPage, &q.messageAt, &q.messagesCountStatus,
		&q.messagesPageStatus} {
		*p = qualify(*p, schema)
	}
	return q
}
