package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

const zeroUUID = "00000000-0000-0000-0000-000000000000"

// The seed's "What to expect" table, row by row, through HTTP.
func TestSeedTable(t *testing.T) {
	t.Parallel()

	t.Run("same id, same partition, inside the window: duplicate, nothing written, original id", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, "", nil)
		d := newDB(t, b.Schema)
		first := b.push(t, item{"queue": "orders", "partition": "p1", "transactionId": "order:1:v1", "payload": map[string]any{"n": 1}})
		require.Equal(t, "queued", first[0].Status)
		require.NotNil(t, first[0].PartitionID)
		require.Equal(t, "order:1:v1", first[0].TransactionID)
		require.Equal(t, "orders", first[0].QueueName)
		segs, frames, logRows, _, next := d.partitionStats(t, "orders", "p1")

		second := b.push(t, item{"queue": "orders", "partition": "p1", "transactionId": "order:1:v1", "payload": map[string]any{"n": 2}})
		require.Equal(t, "duplicate", second[0].Status)
		require.Equal(t, first[0].MessageID, second[0].MessageID)
		require.Nil(t, second[0].PartitionID, "duplicates carry no partition_id")

		segs2, frames2, logRows2, _, next2 := d.partitionStats(t, "orders", "p1")
		require.Equal(t, [4]int64{segs, frames, logRows, next}, [4]int64{segs2, frames2, logRows2, next2},
			"a duplicate writes no row and moves no allocator")
	})

	t.Run("same id, different partition: both queued", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, "", nil)
		a := b.push(t, item{"queue": "orders", "partition": "a", "transactionId": "x"})
		c := b.push(t, item{"queue": "orders", "partition": "b", "transactionId": "x"})
		require.Equal(t, "queued", a[0].Status)
		require.Equal(t, "queued", c[0].Status)
		require.NotEqual(t, a[0].MessageID, c[0].MessageID)
		require.NotEqual(t, *a[0].PartitionID, *c[0].PartitionID)
	})

	t.Run("same id twice in one body: one frame, the repeat echoes the leader", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, "", nil)
		d := newDB(t, b.Schema)
		res := b.push(t,
			item{"queue": "orders", "transactionId": "t1", "payload": 1},
			item{"queue": "orders", "transactionId": "t2", "payload": 2},
			item{"queue": "orders", "transactionId": "t1", "payload": 3},
		)
		require.Equal(t, []string{"queued", "queued", "duplicate"}, statuses(res))
		require.Equal(t, res[0].MessageID, res[2].MessageID)
		_, frames, _, hashes, next := d.partitionStats(t, "orders", "Default")
		require.Equal(t, int64(2), frames)
		require.Equal(t, int64(2), hashes)
		require.Equal(t, int64(2), next)

		// A repeat in one body of an id already stored echoes the original.
		again := b.push(t, item{"queue": "orders", "transactionId": "t1"}, item{"queue": "orders", "transactionId": "t1"})
		require.Equal(t, []string{"duplicate", "duplicate"}, statuses(again))
		require.Equal(t, res[0].MessageID, again[0].MessageID)
		require.Equal(t, res[0].MessageID, again[1].MessageID)
	})

	t.Run("same id after the window closed: queued as a new message", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, "", nil)
		d := newDB(t, b.Schema)
		b.configure(t, "orders", map[string]any{"dedupWindowSeconds": 60})
		first := b.push(t, item{"queue": "orders", "transactionId": "late"})
		require.Equal(t, "queued", first[0].Status)
		// Inside the window it is still a duplicate.
		require.Equal(t, "duplicate", b.push(t, item{"queue": "orders", "transactionId": "late"})[0].Status)
		// Age the original past the 60 s window.
		d.exec(t, `UPDATE queen.log_txns SET created_at = created_at - interval '61 seconds'`)
		d.exec(t, `UPDATE queen.segments SET created_at = created_at - interval '61 seconds'`)
		again := b.push(t, item{"queue": "orders", "transactionId": "late"})
		require.Equal(t, "queued", again[0].Status)
		require.NotEqual(t, first[0].MessageID, again[0].MessageID)
		_, frames, _, _, _ := d.partitionStats(t, "orders", "Default")
		require.Equal(t, int64(2), frames)
	})

	t.Run("duplicate whose original segment was deleted by retention: zero UUID", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, "", nil)
		d := newDB(t, b.Schema)
		b.configure(t, "orders", map[string]any{"retentionEnabled": true, "retentionSeconds": 60})
		first := b.push(t, item{"queue": "orders", "transactionId": "gone"})
		require.Equal(t, "queued", first[0].Status)
		// The segment ages past retentionSeconds, its hashes stay inside the
		// dedup window (3600 s).
		d.exec(t, `UPDATE queen.segments SET created_at = created_at - interval '2 minutes'`)
		st := sqlstoretest.OpenSchema(t, b.Schema)
		stats, err := st.RetainOnce(context.Background(), 10)
		require.NoError(t, err)
		require.Equal(t, int64(1), stats.Segments)
		require.Equal(t, int64(0), stats.LogTxns)

		dup := b.push(t, item{"queue": "orders", "transactionId": "gone"})
		require.Equal(t, "duplicate", dup[0].Status)
		require.Equal(t, zeroUUID, dup[0].MessageID)
		segs, _, _, _, next := d.partitionStats(t, "orders", "Default")
		require.Equal(t, int64(0), segs, "the duplicate wrote nothing")
		require.Equal(t, int64(1), next)
	})

	t.Run("configured without dedupWindowSeconds: window is 3600 (full replace)", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, "", nil)
		d := newDB(t, b.Schema)
		res := b.configure(t, "orders", map[string]any{"dedupWindowSeconds": 86400, "leaseTime": 30})
		require.Equal(t, true, res["configured"])
		require.EqualValues(t, 86400, res["options"].(map[string]any)["dedupWindowSeconds"])
		res = b.configure(t, "orders", map[string]any{"leaseTime": 30})
		opts := res["options"].(map[string]any)
		require.EqualValues(t, 3600, opts["dedupWindowSeconds"])
		require.EqualValues(t, 30, opts["leaseTime"])
		require.EqualValues(t, 3, opts["retryLimit"], "every option left out takes its default")
		require.Equal(t, int64(3600), d.int(t, `SELECT dedup_window_seconds FROM queen.queues WHERE name = 'orders'`))
		res = b.configure(t, "fresh", nil)
		require.EqualValues(t, 3600, res["options"].(map[string]any)["dedupWindowSeconds"])
		// A queue created by a push has the default window too.
		b.push(t, item{"queue": "auto.created.q"})
		require.Equal(t, int64(3600), d.int(t, `SELECT dedup_window_seconds FROM queen.queues WHERE name = 'auto.created.q'`))
		var ns, task string
		require.NoError(t, d.pool.QueryRow(context.Background(), d.q(`SELECT namespace, task FROM queen.queues WHERE name = 'auto.created.q'`)).Scan(&ns, &task))
		require.Equal(t, "auto", ns)
		require.Equal(t, "created", task)
	})

	t.Run("dedupWindowSeconds 0: no check, log_txns still written", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, "", nil)
		d := newDB(t, b.Schema)
		b.configure(t, "orders", map[string]any{"dedupWindowSeconds": 0})
		r1 := b.push(t, item{"queue": "orders", "transactionId": "same"})
		r2 := b.push(t, item{"queue": "orders", "transactionId": "same"}, item{"queue": "orders", "transactionId": "same"})
		require.Equal(t, []string{"queued", "queued", "queued"}, append(statuses(r1), statuses(r2)...))
		require.NotEqual(t, r1[0].MessageID, r2[0].MessageID)
		require.NotEqual(t, r2[0].MessageID, r2[1].MessageID)
		_, frames, logRows, hashes, next := d.partitionStats(t, "orders", "Default")
		require.Equal(t, int64(3), frames)
		require.Equal(t, int64(2), logRows, "log_txns is written with dedup off (acks resolve through it)")
		require.Equal(t, int64(3), hashes)
		require.Equal(t, int64(3), next)

		// Switching dedup back on makes the stored ids duplicates again.
		b.configure(t, "orders", nil)
		r3 := b.push(t, item{"queue": "orders", "transactionId": "same"})
		require.Equal(t, "duplicate", r3[0].Status)
		require.Equal(t, r1[0].MessageID, r3[0].MessageID, "the earliest occurrence is the original")
	})
}

func statuses(rs []pushResult) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Status
	}
	return out
}

func TestPushMixedNewAndDuplicate(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	first := b.push(t, item{"queue": "q", "transactionId": "a"}, item{"queue": "q", "transactionId": "b"})
	res := b.push(t,
		item{"queue": "q", "transactionId": "c", "payload": "new"},
		item{"queue": "q", "transactionId": "a"},
		item{"queue": "q", "transactionId": "d", "payload": "new too"},
		item{"queue": "q", "transactionId": "b"},
	)
	require.Equal(t, []string{"queued", "duplicate", "queued", "duplicate"}, statuses(res))
	require.Equal(t, first[0].MessageID, res[1].MessageID)
	require.Equal(t, first[1].MessageID, res[3].MessageID)
	segs, frames, logRows, hashes, next := d.partitionStats(t, "q", "Default")
	require.Equal(t, []int64{2, 4, 2, 4, 4}, []int64{segs, frames, logRows, hashes, next})
	// The new items got the next two offsets, in request order.
	require.Equal(t, int64(2), d.int(t, `SELECT frame_count FROM queen.segments WHERE first_offset = 2`))
}

func TestPushAllDuplicatesWritesNothing(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	b.push(t, item{"queue": "q", "transactionId": "a"}, item{"queue": "q", "transactionId": "b"})
	var xminBefore string
	require.NoError(t, d.pool.QueryRow(context.Background(), d.q(`SELECT xmin::text FROM queen.partitions`)).Scan(&xminBefore))
	segs, frames, logRows, hashes, next := d.partitionStats(t, "q", "Default")

	res := b.push(t, item{"queue": "q", "transactionId": "b"}, item{"queue": "q", "transactionId": "a"}, item{"queue": "q", "transactionId": "a"})
	require.Equal(t, []string{"duplicate", "duplicate", "duplicate"}, statuses(res))

	segs2, frames2, logRows2, hashes2, next2 := d.partitionStats(t, "q", "Default")
	require.Equal(t, []int64{segs, frames, logRows, hashes, next}, []int64{segs2, frames2, logRows2, hashes2, next2})
	var xminAfter string
	require.NoError(t, d.pool.QueryRow(context.Background(), d.q(`SELECT xmin::text FROM queen.partitions`)).Scan(&xminAfter))
	require.Equal(t, xminBefore, xminAfter, "the allocator row was not rewritten")
}

// racePush sends n concurrent single-item pushes of one transaction id,
// alternating between the brokers, and returns the results.
func racePush(t *testing.T, n int, brokers ...*testBroker) []pushResult {
	t.Helper()
	results := make([]pushResult, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			b := brokers[i%len(brokers)]
			status, body := do(t, "POST", b.URL+"/api/v1/push",
				map[string]any{"items": []item{{"queue": "race", "partition": "p", "transactionId": "one-and-only", "payload": i}}})
			if status != http.StatusCreated {
				t.Errorf("push %d: %d %s", i, status, body)
				return
			}
			var rs []pushResult
			if err := json.Unmarshal(body, &rs); err != nil || len(rs) != 1 {
				t.Errorf("push %d: bad body %s", i, body)
				return
			}
			results[i] = rs[0]
		})
	}
	close(start)
	wg.Wait()
	return results
}

func requireExactlyOneQueued(t *testing.T, results []pushResult) {
	t.Helper()
	queued := 0
	var id string
	for _, r := range results {
		if r.Status == "queued" {
			queued++
			id = r.MessageID
		}
	}
	require.Equal(t, 1, queued, "exactly one push is queued")
	for _, r := range results {
		require.Equal(t, id, r.MessageID, "every duplicate names the original")
	}
}

func TestConcurrentSameTransactionID(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	requireExactlyOneQueued(t, racePush(t, 50, b))
	_, frames, _, _, next := d.partitionStats(t, "race", "p")
	require.Equal(t, int64(1), frames)
	require.Equal(t, int64(1), next)
}

func TestTwoBrokersOneDatabase(t *testing.T) {
	t.Parallel()
	schema := sqlstoretest.NewSchema(t)
	// Both start at once: migrations must serialise.
	var b1, b2 *testBroker
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); b1 = startBroker(t, schema, nil) }()
	go func() { defer wg.Done(); b2 = startBroker(t, schema, nil) }()
	wg.Wait()
	require.NotNil(t, b1)
	require.NotNil(t, b2)
	d := newDB(t, schema)
	files, err := filepath.Glob("../../sqlstore/migrations/*.up.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	require.Equal(t, int64(len(files)), d.int(t, `SELECT count(*) FROM queen.schema_migrations`), "each migration applied once")

	requireExactlyOneQueued(t, racePush(t, 50, b1, b2))
	_, frames, _, _, next := d.partitionStats(t, "race", "p")
	require.Equal(t, int64(1), frames)
	require.Equal(t, int64(1), next)

	// Offsets stay gap-free when both brokers write one partition.
	for i := range 20 {
		b := []*testBroker{b1, b2}[i%2]
		b.push(t, item{"queue": "race", "partition": "p", "transactionId": fmt.Sprintf("seq-%d", i)})
	}
	_, frames, _, _, next = d.partitionStats(t, "race", "p")
	require.Equal(t, int64(21), frames)
	require.Equal(t, int64(21), next)
	require.Equal(t, int64(0), d.int(t, `
		SELECT count(*) FROM (SELECT first_offset, frame_count,
		       lead(first_offset) OVER (ORDER BY first_offset) AS nxt FROM queen.segments) s
		 WHERE nxt IS NOT NULL AND nxt <> first_offset + frame_count`), "segments tile the offsets")
}

// installCommitFailure makes every commit that inserted a segment into a
// partition named in <schema>.fail_commit fail at COMMIT, through a deferred
// constraint trigger.
func installCommitFailure(t *testing.T, d *db) {
	t.Helper()
	d.exec(t, `CREATE TABLE queen.fail_commit (partition_name text PRIMARY KEY)`)
	d.exec(t, `CREATE FUNCTION queen.fail_commit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF EXISTS (SELECT 1 FROM queen.fail_commit f JOIN queen.partitions p ON p.name = f.partition_name
			            WHERE p.id = NEW.partition_id) THEN
				RAISE EXCEPTION 'injected failure at commit';
			END IF;
			RETURN NULL;
		END $$`)
	d.exec(t, `CREATE CONSTRAINT TRIGGER fail_commit AFTER INSERT ON queen.segments
		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION queen.fail_commit_fn()`)
}

func TestCommitErrorIsRetryable(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	b.push(t, item{"queue": "q", "partition": "bad", "transactionId": "warmup"}) // creates the partition
	installCommitFailure(t, d)
	d.exec(t, `INSERT INTO queen.fail_commit VALUES ('bad')`)

	status, body := b.pushRaw(t, map[string]any{"items": []item{{"queue": "q", "partition": "bad", "transactionId": "t"}}})
	require.GreaterOrEqual(t, status, 500, "an error at COMMIT is a retryable 5xx: %s", body)
	var e map[string]any
	require.NoError(t, json.Unmarshal(body, &e))
	require.Equal(t, true, e["retryable"])
	require.Contains(t, e["error"], "transactionId")
	_, frames, _, _, next := d.partitionStats(t, "q", "bad")
	require.Equal(t, []int64{1, 1}, []int64{frames, next}, "the failed commit left nothing")

	// The client's retry with the same transaction id is safe.
	d.exec(t, `DELETE FROM queen.fail_commit`)
	res := b.push(t, item{"queue": "q", "partition": "bad", "transactionId": "t"})
	require.Equal(t, "queued", res[0].Status)
	require.Equal(t, "duplicate", b.push(t, item{"queue": "q", "partition": "bad", "transactionId": "t"})[0].Status)
}

func TestPushSpanningPartitionsCommitsEachIndependently(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	b.push(t, item{"queue": "q", "partition": "bad", "transactionId": "warmup"})
	installCommitFailure(t, d)
	d.exec(t, `INSERT INTO queen.fail_commit VALUES ('bad')`)

	res := b.push(t,
		item{"queue": "q", "partition": "good", "transactionId": "g1"},
		item{"queue": "q", "partition": "bad", "transactionId": "b1"},
		item{"queue": "other", "transactionId": "o1"},
	)
	require.Equal(t, []string{"queued", "failed", "queued"}, statuses(res))
	require.True(t, res[1].Retryable)
	require.NotEmpty(t, res[1].Error)
	_, goodFrames, _, _, _ := d.partitionStats(t, "q", "good")
	_, badFrames, _, _, _ := d.partitionStats(t, "q", "bad")
	_, otherFrames, _, _, _ := d.partitionStats(t, "other", "Default")
	require.Equal(t, []int64{1, 1, 1}, []int64{goodFrames, badFrames, otherFrames})

	// Retrying the whole request: the committed items are duplicates with
	// their original ids, the failed one is queued now.
	d.exec(t, `DELETE FROM queen.fail_commit`)
	again := b.push(t,
		item{"queue": "q", "partition": "good", "transactionId": "g1"},
		item{"queue": "q", "partition": "bad", "transactionId": "b1"},
		item{"queue": "other", "transactionId": "o1"},
	)
	require.Equal(t, []string{"duplicate", "queued", "duplicate"}, statuses(again))
	require.Equal(t, res[0].MessageID, again[0].MessageID)
	require.Equal(t, res[2].MessageID, again[2].MessageID)
}

// holdActors returns a BeforeBatch hook that blocks the batches of queue
// "held" until release is called, and counts the items of the first one.
func holdActors() (hook func(q, p string, n int), release func(), firstBatch *atomic.Int64) {
	ch := make(chan struct{})
	var once sync.Once
	firstBatch = new(atomic.Int64)
	return func(q, p string, n int) {
			if q == "held" {
				firstBatch.CompareAndSwap(0, int64(n))
				<-ch
			}
		}, func() {
			once.Do(func() { close(ch) })
		}, firstBatch
}

func TestActorBatchesConcurrentPushes(t *testing.T) {
	t.Parallel()
	hook, release, first := holdActors()
	defer release()
	b := startBroker(t, "", func(c *Config) { c.beforeBatch = hook })
	d := newDB(t, b.Schema)

	const n = 30
	var wg sync.WaitGroup
	results := make([][]pushResult, n)
	for i := range n {
		wg.Go(func() {
			status, body := b.pushRaw(t, map[string]any{"items": []item{{"queue": "held", "transactionId": fmt.Sprintf("t%d", i)}}})
			if status != http.StatusCreated {
				t.Errorf("push %d: %d %s", i, status, body)
				return
			}
			_ = json.Unmarshal(body, &results[i])
		})
	}
	// Wait until every push is either in the held batch or in the mailbox.
	checkFor(t, 30*time.Second, 5*time.Millisecond, func() error {
		if m, held := metrics(t, b), first.Load(); held == 0 || int64(m.Mailbox)+held != n {
			return fmt.Errorf("mailbox holds %d items, the held batch %d", m.Mailbox, held)
		}
		return nil
	})
	release()
	wg.Wait()
	for i := range n {
		require.Len(t, results[i], 1)
		require.Equal(t, "queued", results[i][0].Status)
	}
	segs, frames, _, _, _ := d.partitionStats(t, "held", "Default")
	require.Equal(t, int64(n), frames)
	require.Equal(t, int64(2), segs, "the held batch, then the %d waiting pushes in one transaction", n-first.Load())
}

type metricsView struct {
	Actors   int `json:"actors"`
	Mailbox  int `json:"mailboxDepth"`
	Messages struct {
		Withdrawn uint64 `json:"withdrawn"`
		Abandoned uint64 `json:"abandoned"`
	} `json:"messages"`
}

// rawPush sends a push of one item per transaction id to queue on a
// connection of its own and returns the connection without reading the
// answer: closing it is a client that gave up.
func rawPush(t *testing.T, b *testBroker, queue string, txids ...string) net.Conn {
	t.Helper()
	items := make([]item, len(txids))
	for i, tx := range txids {
		items[i] = item{"queue": queue, "transactionId": tx, "payload": map[string]any{"i": i}}
	}
	body, err := json.Marshal(map[string]any{"items": items})
	require.NoError(t, err)
	u, err := url.Parse(b.URL)
	require.NoError(t, err)
	c, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = fmt.Fprintf(c, "POST /api/v1/push HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"+
		"Content-Length: %d\r\n\r\n%s", u.Host, len(body), body)
	require.NoError(t, err)
	return c
}

// TestPushOfAGoneClient: a client that disconnects while its push waits in a
// mailbox has it dropped before it reaches PostgreSQL (nothing written: a
// retry of its transaction ids is queued, not a duplicate); one that
// disconnects once its push is in a batch does not: the batch commits, and a
// retry is answered duplicate.
func TestPushOfAGoneClient(t *testing.T) {
	t.Parallel()
	hook, release, first := holdActors()
	defer release()
	b := startBroker(t, "", func(c *Config) { c.beforeBatch = hook })
	d := newDB(t, b.Schema)

	inBatch := rawPush(t, b, "held", "a1")
	checkFor(t, 30*time.Second, 5*time.Millisecond, func() error {
		if first.Load() != 1 {
			return errors.New("the first push is not in the held batch yet")
		}
		return nil
	})
	queued := rawPush(t, b, "held", "b1", "b2")
	checkFor(t, 30*time.Second, 5*time.Millisecond, func() error {
		if m := metrics(t, b); m.Mailbox != 2 {
			return fmt.Errorf("mailbox holds %d items, want 2", m.Mailbox)
		}
		return nil
	})
	require.NoError(t, inBatch.Close())
	require.NoError(t, queued.Close())
	checkFor(t, 30*time.Second, 5*time.Millisecond, func() error {
		if m := metrics(t, b); m.Messages.Withdrawn != 1 || m.Messages.Abandoned != 1 || m.Mailbox != 0 {
			return fmt.Errorf("withdrawn %d, abandoned %d, mailbox %d; want 1, 1, 0",
				m.Messages.Withdrawn, m.Messages.Abandoned, m.Mailbox)
		}
		return nil
	})
	release()

	again := b.push(t,
		item{"queue": "held", "transactionId": "a1"},
		item{"queue": "held", "transactionId": "b1"},
		item{"queue": "held", "transactionId": "b2"},
	)
	require.Equal(t, []string{"duplicate", "queued", "queued"}, statuses(again))
	_, frames, _, _, _ := d.partitionStats(t, "held", "Default")
	require.Equal(t, int64(3), frames)
}

func metrics(t *testing.T, b *testBroker) metricsView {
	t.Helper()
	status, body := do(t, "GET", b.URL+"/metrics", nil)
	require.Equal(t, http.StatusOK, status)
	var m metricsView
	require.NoError(t, json.Unmarshal(body, &m))
	return m
}

func TestFullMailboxAnswers503(t *testing.T) {
	t.Parallel()
	hook, release, _ := holdActors()
	defer release()
	b := startBroker(t, "", func(c *Config) {
		c.beforeBatch = hook
		c.MailboxMaxItems = 3
	})
	d := newDB(t, b.Schema)

	var wg sync.WaitGroup
	accepted := make(chan []pushResult, 10)
	send := func(tx string) {
		defer wg.Done()
		status, body := b.pushRaw(t, map[string]any{"items": []item{{"queue": "held", "transactionId": tx}}})
		if status != http.StatusCreated {
			t.Errorf("push %s: %d %s", tx, status, body)
			return
		}
		var rs []pushResult
		_ = json.Unmarshal(body, &rs)
		accepted <- rs
	}
	// One push is taken into the held batch, three fill the mailbox.
	wg.Add(1)
	go send("in-flight")
	checkFor(t, 30*time.Second, 5*time.Millisecond, func() error {
		if metrics(t, b).Actors != 1 || metrics(t, b).Mailbox != 0 {
			return errNotYet
		}
		return nil
	})
	for i := range 3 {
		wg.Add(1)
		go send(fmt.Sprintf("waiting-%d", i))
	}
	checkFor(t, 30*time.Second, 5*time.Millisecond, func() error {
		if metrics(t, b).Mailbox != 3 {
			return errNotYet
		}
		return nil
	})
	status, body := b.pushRaw(t, map[string]any{"items": []item{{"queue": "held", "transactionId": "one-too-many"}}})
	require.Equal(t, http.StatusServiceUnavailable, status)
	var e map[string]any
	require.NoError(t, json.Unmarshal(body, &e))
	require.Contains(t, e["error"], "mailbox is full")
	require.Equal(t, true, e["retryable"])

	// Other partitions are not affected.
	require.Equal(t, "queued", b.push(t, item{"queue": "free", "transactionId": "x"})[0].Status)

	release()
	wg.Wait()
	close(accepted)
	n := 0
	for rs := range accepted {
		require.Equal(t, "queued", rs[0].Status)
		n++
	}
	require.Equal(t, 4, n)
	_, frames, _, _, _ := d.partitionStats(t, "held", "Default")
	require.Equal(t, int64(4), frames, "the refused push wrote nothing")
	// And the partition recovers.
	require.Equal(t, "queued", b.push(t, item{"queue": "held", "transactionId": "one-too-many"})[0].Status)
}

func TestIdleActorsRetire(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", func(c *Config) { c.ActorIdle = 20 * time.Millisecond })
	for i := range 5 {
		b.push(t, item{"queue": "q", "partition": fmt.Sprintf("p%d", i)})
	}
	checkFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		if n := metrics(t, b).Actors; n != 0 {
			return fmt.Errorf("%d actors alive", n)
		}
		return nil
	})
	// A retired partition's actor comes back on the next push, and dedup
	// still holds across the restart of the actor.
	r := b.push(t, item{"queue": "q", "partition": "p0", "transactionId": "again"})
	require.Equal(t, "queued", r[0].Status)
	checkFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		if n := metrics(t, b).Actors; n != 0 {
			return fmt.Errorf("%d actors alive", n)
		}
		return nil
	})
	r2 := b.push(t, item{"queue": "q", "partition": "p0", "transactionId": "again"})
	require.Equal(t, "duplicate", r2[0].Status)
	require.Equal(t, r[0].MessageID, r2[0].MessageID)
}
