package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// dbHarness is a harness on the test database with no broker: enough for
// the schema, partition and preload code.
func dbHarness(t *testing.T) *harness {
	t.Helper()
	ctx := context.Background()
	url := sqlstoretest.URL(t)
	admin, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	h := &harness{cfg: &config{items: 10, preloadDropIdx: true}, stop: ctx, hard: ctx, logf: t.Logf,
		runTag: newTag(), dbURL: url, admin: admin}
	t.Cleanup(h.cleanup)
	return h
}

// The generator writes what a push would have: for every partition,
// offsets without gaps up to next_offset, one log_txns row and one
// decodable segment per push, inside the window; the broker's own push
// then finds a generated hash a duplicate (answering the generated message
// id) and stores a new item at next_offset. 1,200 partitions take the bulk
// partition path, and 24,000 hashes the dropped-and-rebuilt GIN index.
func TestPreloadWritesWhatAPushWould(t *testing.T) {
	ctx := context.Background()
	h := dbHarness(t)
	const window = time.Hour
	sp, err := h.openSpaceChild("_gen", 2, hashChildSeconds(window))
	require.NoError(t, err)
	_, err = sp.store.Configure(ctx, scaleQueue, "", "", hashOptions(window))
	require.NoError(t, err)
	const parts, need = 1200, 24000
	refs, err := h.scalePartitions(ctx, sp, scaleQueue, parts)
	require.NoError(t, err)
	require.Len(t, refs, parts)
	require.NoError(t, h.preload(ctx, sp, refIDs(refs), need, preloadSpanFor(time.Now(), window), hashChildSeconds(window)))

	have, err := h.inWindowHashes(ctx, sp, scaleQueue)
	require.NoError(t, err)
	require.EqualValues(t, need, have)

	s := quoteIdent(sp.schema)
	var bad int
	require.NoError(t, h.admin.QueryRow(ctx, `SELECT count(*) FROM `+s+`.partitions p
		WHERE p.name <> $1 AND (p.next_offset <> (SELECT coalesce(sum(frame_count), 0) FROM `+s+`.segments g WHERE g.partition_id = p.id)
		   OR p.next_offset <> (SELECT coalesce(max(first_offset + frame_count), 0) FROM `+s+`.segments g WHERE g.partition_id = p.id)
		   OR p.push_xid IS NULL OR p.last_push_at IS NULL
		   OR p.last_push_at <> (SELECT max(created_at) FROM `+s+`.segments g WHERE g.partition_id = p.id))`, reginatype.DefaultPartition).Scan(&bad))
	require.Zero(t, bad, "partitions whose next_offset, push_xid or last_push_at do not match their segments")
	require.NoError(t, h.admin.QueryRow(ctx, `SELECT count(*) FROM `+s+`.segments g JOIN `+s+`.partitions p ON p.id = g.partition_id
		WHERE p.name = $1`, reginatype.DefaultPartition).Scan(&bad))
	require.Zero(t, bad, "the preload wrote into the queue's Default partition, which no push of the point uses")
	require.NoError(t, h.admin.QueryRow(ctx, `SELECT count(*) FROM `+s+`.segments g FULL JOIN `+s+`.log_txns l USING (partition_id, first_offset)
		WHERE g.partition_id IS NULL OR l.partition_id IS NULL OR g.created_at <> l.created_at
		   OR cardinality(l.hashes) <> g.frame_count`).Scan(&bad))
	require.Zero(t, bad, "segments without their log_txns row or the other way round")
	var gin, valid int
	require.NoError(t, h.admin.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE i.indisvalid)
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam
		JOIN pg_class r ON r.oid = i.indrelid JOIN pg_namespace n ON n.oid = r.relnamespace
		WHERE n.nspname = $1 AND r.relname = 'log_txns' AND am.amname = 'gin'`, sp.schema).Scan(&gin, &valid))
	require.Equal(t, 1, gin, "the GIN index of log_txns was not rebuilt")
	require.Equal(t, 1, valid, "the rebuilt GIN index of log_txns is not valid")

	// One partition's last row: decode it and push one of its hashes.
	ref := refs[7]
	var (
		off     int64
		count   int
		created time.Time
		frames  []byte
		hashes  [][]byte
		next    int64
	)
	require.NoError(t, h.admin.QueryRow(ctx, `SELECT g.first_offset, g.frame_count, g.created_at, g.frames, l.hashes, p.next_offset
		FROM `+s+`.segments g JOIN `+s+`.log_txns l USING (partition_id, first_offset) JOIN `+s+`.partitions p ON p.id = g.partition_id
		WHERE g.partition_id = $1 ORDER BY g.first_offset DESC LIMIT 1`, [16]byte(ref.ID)).Scan(&off, &count, &created, &frames, &hashes, &next))
	require.Equal(t, 10, count)
	fs, err := partition.DecodeSegment(frames, count)
	require.NoError(t, err)
	for k, f := range fs {
		require.Equal(t, "pre-"+strconv.FormatInt(off+int64(k), 10), f.TransactionID)
		require.Equal(t, "{}", string(f.Payload))
		require.Equal(t, created.UnixMicro(), f.CreatedAt)
		require.Equal(t, byte(0x70), f.MessageID[6]&0xf0, "not a UUIDv7")
		var ms int64
		for _, c := range f.MessageID[:6] {
			ms = ms<<8 | int64(c)
		}
		require.InDelta(t, created.UnixMilli(), ms, 1, "the id's time is not the row's")
	}
	require.Greater(t, time.Since(created), time.Duration(0))
	require.Less(t, time.Since(created), time.Hour)

	batch := &reginatype.PushBatch{Partition: ref.ID, WindowHint: ref.WindowSeconds, Watermark: reginatype.NoWatermark}
	body := partition.Body{CreatedAt: time.Now().UnixMicro(), TransactionID: "fresh", Payload: []byte("{}")}
	batch.Add(partition.Hash(hashes[3]), partition.NewV7(), &body)
	batch.Add(partition.HashTxID(h.runTag+"-fresh"), partition.NewV7(), &body)
	res, err := sp.store.Push(ctx, batch)
	require.NoError(t, err)
	require.Equal(t, []int{0}, res.DupIndex)
	require.Equal(t, fs[3].MessageID, res.DupOriginal[0])
	require.Equal(t, next, res.FirstOffset)
}

// The scale mode end to end at toy sizes: every section is written, every
// plot drawn, and no broker exits by itself.
func TestScaleFastMode(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs brokers")
	}
	url := sqlstoretest.URL(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "RESULTS.md")
	code := run([]string{"-scale", "-database-url", url, "-regina", filepath.Join(dir, "regina"),
		"-duration", "1s", "-warmup", "200ms", "-connections", "4", "-partitions", "4",
		"-scale-partitions", "1,200", "-scale-hashes", "1k,5k", "-scale-pop", "100,300", "-scale-pop-backlog", "300",
		"-scale-drain", "200", "-scale-drain-per", "2", "-out", out, "-plot-dir", dir})
	require.Zero(t, code)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	doc := string(b)
	for _, want := range []string{
		"### As partitions grow", "| 200 | **",
		"### As the in-window hash count grows", "| Regina msgs/s at 5k hashes / at 1k |",
		"### Pop as partitions grow", "| 300 | **", "| pops/s at 300 partitions / at 100 |", "| pop p99 at 300 partitions / at 100 |",
		"### A restart on a database holding a full window", "| msgs/s after the restart / before |",
		"a 200-partition backlog drained to the last message", "| 200 | 400 | all | 4 |",
	} {
		require.Contains(t, doc, want)
	}
	require.NotContains(t, doc, "exited by itself")
	require.NotContains(t, doc, "Not measured in this run")
	for _, png := range []string{"scale-partitions.png", "scale-hashes.png", "scale-pop.png", "scale-drain.png"} {
		st, err := os.Stat(filepath.Join(dir, png))
		require.NoError(t, err)
		require.Positive(t, st.Size())
	}
	// Every pop answered work: one consumer never saw an empty queue.
	for line := range strings.Lines(doc) {
		if strings.HasPrefix(line, "| 100 | **") || strings.HasPrefix(line, "| 300 | **") {
			cols := strings.Split(line, "|")
			require.Equal(t, "0", strings.TrimSpace(cols[6]), "a pop answered empty while work waited: %s", line)
		}
	}
}
