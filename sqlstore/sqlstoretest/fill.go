package sqlstoretest

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// FillPartitions gives queue (which must exist) n new partitions named
// prefix00000, prefix00001, ..., each holding one message, in one SQL
// statement: the rows n single-message pushes would leave (a segment with a
// valid frame whose transaction id is "<partition name>-0", its hash-sidecar
// row, the partition's allocator and push stamp). It is how tests and
// benchmarks make queues with tens of thousands of partitions in seconds.
// The sidecar hash is not the transaction id's xxh3 (acks of these messages
// do not resolve; consume them with autoAck).
func FillPartitions(t testing.TB, schema, queue, prefix string, n int) {
	t.Helper()
	sql := strings.ReplaceAll(`
		WITH q AS (SELECT id FROM queen.queues WHERE name = $1),
		p AS (
			INSERT INTO queen.partitions (queue_id, name, next_offset, push_xid, last_push_at)
			SELECT q.id, $2 || lpad(i::text, 5, '0'), 1, pg_current_xact_id(), now()
			  FROM q, generate_series(0, $3::integer - 1) i
			RETURNING id, name),
		s AS (
			INSERT INTO queen.segments (partition_id, first_offset, frame_count, created_at, frames)
			SELECT p.id, 0, 1, now(),
			       decode(md5(p.id::text), 'hex') || '\x00'::bytea
			       || int8send((extract(epoch FROM now()) * 1000000)::bigint)
			       || int2send(length(p.name || '-0')::smallint) || convert_to(p.name || '-0', 'UTF8')
			       || int4send(2) || convert_to('{}', 'UTF8')
			  FROM p)
		INSERT INTO queen.log_txns (partition_id, first_offset, created_at, hashes)
		SELECT p.id, 0, now(), ARRAY[decode(md5(p.name), 'hex')] FROM p`,
		"queen.", pgx.Identifier{schema}.Sanitize()+".")
	_, err := Pool(t).Exec(context.Background(), sql, queue, prefix, n)
	require.NoError(t, err)
}
