package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
func TestLong_ScaleFastMode(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs brokers")
	}
	url := sqlstoretest.URL(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "RESULTS.md")
	code := run([]string{"-scale", "-database-url", url, "-regina", filepath.Join(dir, "regina"),
		"-duration", "1s", "-warmup", "200ms", "-connections", "4", "-partitions", "4",
		"-scale-partitions", "1,200", "-scale-hashes", "1k,5k", "-scale-pop", "100,300", "-scale-pop-backlog", "3000",
		"-scale-drain", "200", "-scale-drain-per", "2", "-scale-restart-after", "3s", "-out", out, "-plot-dir", dir})
	require.Zero(t, code)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	doc := string(b)
	for _, want := range []string{
		"### As partitions grow", "| 200 | **",
		"### As the in-window hash count grows", "| Regina msgs/s at 5k hashes / at 1k |",
		"### Pop as partitions grow", "| 300 | **", "| pops/s at 300 partitions / at 100 |", "| pop p99 at 300 partitions / at 100 |",
		"### A restart on a database holding a full window", "| msgs/s of the cold broker from 3s after its start / the warm one |", "| before the restart (warm) |",
		"The restarted broker's msgs/s, 5 s at a time from its first push",
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
	// Every pop answered work: one consumer never saw an empty queue. (The
	// backlog outlasts the phase: 300 messages, drained in about 1.2 s by
	// one consumer on a quiet machine, did not.)
	for line := range strings.Lines(doc) {
		if strings.HasPrefix(line, "| 100 | **") || strings.HasPrefix(line, "| 300 | **") {
			cols := strings.Split(line, "|")
			require.Equal(t, "0", strings.TrimSpace(cols[6]), "a pop answered empty while work waited: %s", line)
		}
	}
}

// The preload models a window in steady state: on a queue with a 2 h window
// it spreads each partition's rows evenly over the window less the reserve,
// up to the start it is given, in offset order; every row is inside the
// queue's window and in a child of the width the broker uses for that
// window (5 min), each child holding its share. It writes in several
// transactions (each its own slice of the span), so the children finished
// early are indexed during the load, and every child ends with a valid GIN
// index attached to the parent's. A second preload into the same
// partitions is refused: its rows would be older than the first's.
func TestPreloadSpreadsOverTheWindow(t *testing.T) {
	ctx := context.Background()
	h := dbHarness(t)
	const (
		window  = 2 * time.Hour
		parts   = 4
		perPart = 660 // a row every 10 s of the 110 min spread
		need    = parts * 10 * perPart
	)
	h.cfg.preloadChunk = parts * 100 // 7 transactions
	child := hashChildSeconds(window)
	require.Equal(t, 300, child)
	sp, err := h.openSpaceChild("_spread", 2, child)
	require.NoError(t, err)
	_, err = sp.store.Configure(ctx, scaleQueue, "", "", hashOptions(window))
	require.NoError(t, err)
	refs, err := h.scalePartitions(ctx, sp, scaleQueue, parts)
	require.NoError(t, err)
	for _, r := range refs {
		require.Equal(t, int(window/time.Second), r.WindowSeconds, "the point's partitions do not carry the configured window")
	}
	start := time.Now().Truncate(time.Millisecond)
	span := preloadSpanFor(start, window)
	require.Equal(t, window-window/12, span.until.Sub(span.from))
	require.NoError(t, h.preload(ctx, sp, refIDs(refs), need, span, child))

	have, err := h.inWindowHashes(ctx, sp, scaleQueue)
	require.NoError(t, err)
	require.EqualValues(t, need, have)

	s := quoteIdent(sp.schema)
	step := span.until.Sub(span.from) / perPart
	type spread struct {
		rows               int
		first, last        time.Time
		minGap, maxGap     time.Duration
		outOfOrder, expire int
	}
	rows, err := h.admin.Query(ctx, `SELECT count(*), min(created_at), max(created_at),
		       min(gap), max(gap), count(*) FILTER (WHERE gap <= interval '0'),
		       count(*) FILTER (WHERE created_at <= now() - make_interval(secs => $1))
		  FROM (SELECT partition_id, created_at,
		               created_at - lag(created_at) OVER (PARTITION BY partition_id ORDER BY first_offset) AS gap
		          FROM `+s+`.log_txns) x
		 GROUP BY partition_id`, int(window/time.Second))
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (spread, error) {
		var x spread
		return x, r.Scan(&x.rows, &x.first, &x.last, &x.minGap, &x.maxGap, &x.outOfOrder, &x.expire)
	})
	require.NoError(t, err)
	require.Len(t, got, parts)
	for _, x := range got {
		require.Equal(t, perPart, x.rows)
		require.Zero(t, x.outOfOrder, "a row with a higher offset is not newer")
		require.Zero(t, x.expire, "a preloaded row is outside the queue's window")
		require.WithinDuration(t, span.from.Add(step), x.first, time.Millisecond)
		require.WithinDuration(t, span.until, x.last, time.Millisecond)
		require.InDelta(t, float64(step), float64(x.minGap), float64(time.Millisecond))
		require.InDelta(t, float64(step), float64(x.maxGap), float64(time.Millisecond))
	}
	// In each child's heap the rows follow each other in time, the
	// partitions' rows of one time side by side, as concurrent pushes
	// would have written them.
	var backwards int
	require.NoError(t, h.admin.QueryRow(ctx, `SELECT count(*) FROM (SELECT created_at,
		       lag(created_at) OVER (PARTITION BY tableoid ORDER BY ctid) AS prev FROM `+s+`.log_txns) x
		 WHERE created_at < prev`).Scan(&backwards))
	require.Zero(t, backwards, "heap rows out of time order")

	// The oldest row leaves the window the reserve after the start.
	require.WithinDuration(t, start.Add(preloadReserve(window)), got[0].first.Add(window), step+time.Millisecond)

	// Every row in a child of 5 minutes that covers it; the children in
	// between hold the same share (30 rows a partition).
	rows, err = h.admin.Query(ctx, `SELECT c.child, c.hi - c.lo, count(l.*),
		       count(*) FILTER (WHERE l.created_at < c.lo OR l.created_at >= c.hi)
		  FROM `+s+`.log_txns l JOIN pg_class r ON r.oid = l.tableoid
		  JOIN `+s+`.sidecar_children() c ON c.child = r.relname
		 GROUP BY 1, 2 ORDER BY min(l.created_at)`)
	require.NoError(t, err)
	type held struct {
		name   string
		width  time.Duration
		n, bad int
	}
	children, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (held, error) {
		var x held
		return x, r.Scan(&x.name, &x.width, &x.n, &x.bad)
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(children), 22)
	require.LessOrEqual(t, len(children), 23)
	total := 0
	for i, c := range children {
		total += c.n
		require.Equal(t, 5*time.Minute, c.width, "child %s", c.name)
		require.Zero(t, c.bad, "child %s holds rows outside its bounds", c.name)
		if i > 0 && i < len(children)-1 {
			require.Equal(t, parts*30, c.n, "child %s", c.name)
		}
	}
	require.Equal(t, parts*perPart, total)

	// Every child has a valid GIN index attached to the parent's.
	var childrenAll, indexed int
	var parentValid bool
	require.NoError(t, h.admin.QueryRow(ctx, `SELECT count(*), count(ci.indexrelid),
		       bool_and(coalesce(pi.indisvalid, false))
		  FROM `+s+`.sidecar_children() c
		  JOIN pg_class r ON r.relname = c.child AND r.relnamespace = $1::regnamespace
		  LEFT JOIN (pg_index ci JOIN pg_class cc ON cc.oid = ci.indexrelid AND cc.relam = (SELECT oid FROM pg_am WHERE amname = 'gin')
		             JOIN pg_inherits ih ON ih.inhrelid = ci.indexrelid
		             JOIN pg_index pi ON pi.indexrelid = ih.inhparent) ON ci.indrelid = r.oid AND ci.indisvalid`,
		sp.schema).Scan(&childrenAll, &indexed, &parentValid))
	require.Equal(t, childrenAll, indexed, "children without a valid GIN index attached to the parent's")
	require.True(t, parentValid, "the parent's GIN index is not valid")

	err = h.preload(ctx, sp, refIDs(refs), need, span, child)
	require.ErrorContains(t, err, "offsets and times would not grow together")
}
