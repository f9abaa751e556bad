package sqlstore_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// TestSegmentsStayInline checks migration 0012: the segment of a 10-item push
// of 200-byte payloads (~2.3 KB, above PostgreSQL's default TOAST threshold)
// is stored in the heap row, with no TOAST chunk; a segment larger than a
// page still goes out of line, and both read back whole.
func TestSegmentsStayInline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := sqlstoretest.NewSchema(t)
	st := sqlstoretest.OpenSchema(t, schema)
	pool := sqlstoretest.Pool(t)
	ref, err := st.EnsurePartition(ctx, "inline", "p1")
	require.NoError(t, err)

	payload := []byte(`"` + string(bytes.Repeat([]byte("x"), 200)) + `"`)
	push := func(n int) int64 {
		b := &reginatype.PushBatch{Partition: ref.ID, WindowHint: ref.WindowSeconds, Watermark: reginatype.NoWatermark}
		for k := range n {
			tx := fmt.Sprintf("tx-%d-%d", n, k)
			b.Add(partition.HashTxID(tx), partition.NewV7(), &partition.Body{CreatedAt: 1, TransactionID: tx, Payload: payload})
		}
		res, err := st.Push(ctx, b)
		require.NoError(t, err)
		require.Empty(t, res.DupIndex)
		return res.FirstOffset
	}
	var toast string
	require.NoError(t, pool.QueryRow(ctx, "SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = $1::regclass",
		pgx.Identifier{schema, "segments"}.Sanitize()).Scan(&toast))
	chunks := func() (n int) {
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+toast).Scan(&n))
		return n
	}
	size := func(first int64) (n int) {
		require.NoError(t, pool.QueryRow(ctx, "SELECT octet_length(frames) FROM "+pgx.Identifier{schema, "segments"}.Sanitize()+
			" WHERE partition_id = $1 AND first_offset = $2", ref.ID, first).Scan(&n))
		return n
	}

	small := push(10)
	require.Greater(t, size(small), 2100, "the segment must be above the default TOAST threshold for this test to mean anything")
	require.Zero(t, chunks(), "a 10-item segment must stay in the heap row")

	large := push(100)
	require.Greater(t, size(large), 8160)
	require.Positive(t, chunks(), "a segment larger than a page goes out of line")

	for _, tx := range []string{"tx-10-9", "tx-100-0", "tx-100-99"} {
		m, ok, err := st.GetMessage(ctx, ref.ID, tx)
		require.NoError(t, err)
		require.True(t, ok, tx)
		require.Equal(t, tx, m.TransactionID)
		require.JSONEq(t, string(payload), string(m.Payload), tx)
	}
}
