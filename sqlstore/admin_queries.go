package sqlstore

// adminQueries is the SQL of the read-only views: dedup explain/lookup and
// the admin and status endpoints. None of it writes or locks.
type adminQueries struct {
	explainResolve, explainProbe                      string
	adminNow, adminQueues, adminParts, adminConsumers string
	messagesCount, messagesPage, messageAt            string
}

func newAdminQueries(schema string) adminQueries {
	const msgFilter = `
		   WHERE ($1::text IS NULL OR q.name = $1) AND ($2::text IS NULL OR p.name = $2)
		     AND ($3::text IS NULL OR q.namespace = $3) AND ($4::text IS NULL OR q.task = $4)
		     AND ($5::timestamptz IS NULL OR s.created_at >= $5) AND ($6::timestamptz IS NULL OR s.created_at <= $6)`
	q := adminQueries{
		// Each key's queue and partition (NULL when missing), and the
		// transaction's time.
		explainResolve: `SELECT k.i::integer, q.id, q.dedup_window_seconds, q.dedup_payload_check, p.id, now()
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
		messagesCount: `SELECT coalesce(sum(s.frame_count), 0)::bigint
			  FROM queen.segments s
			  JOIN queen.partitions p ON p.id = s.partition_id
			  JOIN queen.queues q ON q.id = p.queue_id` + msgFilter,
		// Newest first: segments by (created_at, partition, offset)
		// descending; upto counts the messages up to and including each
		// segment, so only the segments overlapping [offset, offset+limit)
		// are read.
		messagesPage: `WITH f AS (
				SELECT s.partition_id, s.first_offset, s.frame_count,
				       sum(s.frame_count) OVER (ORDER BY s.created_at DESC, s.partition_id DESC, s.first_offset DESC) AS upto
				  FROM queen.segments s
				  JOIN queen.partitions p ON p.id = s.partition_id
				  JOIN queen.queues q ON q.id = p.queue_id` + msgFilter + `)
			SELECT f.partition_id, f.first_offset, f.frame_count, (f.upto - f.frame_count)::bigint, s.frames,
			       p.name, q.name, q.namespace, q.task, coalesce(c.cursor_offset, 0),
			       coalesce(c.lease_id IS NOT NULL AND c.lease_expires_at > now(), false), coalesce(c.lease_to, 0)
			  FROM f
			  JOIN queen.segments s ON s.partition_id = f.partition_id AND s.first_offset = f.first_offset
			  JOIN queen.partitions p ON p.id = f.partition_id
			  JOIN queen.queues q ON q.id = p.queue_id
			  LEFT JOIN queen.consumers c ON c.partition_id = f.partition_id AND c.consumer_group = $9
			 WHERE f.upto > $7 AND f.upto - f.frame_count < $7::bigint + $8
			 ORDER BY f.upto`,
		// The segment covering an offset, with its partition's names and the
		// queue-mode cursor.
		messageAt: `SELECT s.first_offset, s.frame_count, s.frames, p.name, q.name, q.namespace, q.task,
			       coalesce(c.cursor_offset, 0),
			       coalesce(c.lease_id IS NOT NULL AND c.lease_expires_at > now(), false), coalesce(c.lease_to, 0)
			  FROM queen.partitions p
			  JOIN queen.queues q ON q.id = p.queue_id
			  JOIN LATERAL (SELECT s.first_offset, s.frame_count, s.frames FROM queen.segments s
			                 WHERE s.partition_id = p.id AND s.first_offset <= $2
			                 ORDER BY s.first_offset DESC LIMIT 1) s ON true
			  LEFT JOIN queen.consumers c ON c.partition_id = p.id AND c.consumer_group = $3
			 WHERE p.id = $1`,
	}
	for _, p := range []*string{&q.explainResolve, &q.explainProbe, &q.adminNow, &q.adminQueues, &q.adminParts,
		&q.adminConsumers, &q.messagesCount, &q.messagesPage, &q.messageAt} {
		*p = qualify(*p, schema)
	}
	return q
}
