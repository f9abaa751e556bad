package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/regina-mq/regina/partition"
)

// world is a synthetic run: a history and the database it left behind.
type world struct {
	st      *DBState
	atts    []*Attempt
	batches int
}

func newWorld() *world {
	w := &world{st: &DBState{Queue: QueueName, QueueFound: true, WindowSeconds: DefaultWindowSeconds,
		Partitions: map[string]*PartitionState{}}}
	for _, n := range []string{"p0", "p1"} {
		w.st.Partitions[n] = &PartitionState{ID: partition.NewV7(), Name: n}
	}
	return w
}

// store appends one segment holding txs to partition part (with its
// log_txns row) and returns the frames' message ids.
func (w *world) store(part string, txs ...string) []partition.UUID {
	p := w.st.Partitions[part]
	frames := make([]partition.Frame, len(txs))
	hashes := make([][]byte, len(txs))
	ids := make([]partition.UUID, len(txs))
	for i, tx := range txs {
		ids[i] = partition.NewV7()
		frames[i] = partition.Frame{MessageID: ids[i], Body: partition.Body{CreatedAt: time.Now().UnixMicro(), TransactionID: tx,
			Payload: payloadFor(tx)}}
		h := partition.HashTxID(tx)
		hashes[i] = h[:]
	}
	now := time.Now()
	p.Segments = append(p.Segments, SegmentRow{FirstOffset: p.NextOffset, FrameCount: len(txs), CreatedAt: now,
		Frames: partition.EncodeSegment(frames)})
	p.Txns = append(p.Txns, TxnRow{FirstOffset: p.NextOffset, CreatedAt: now, Hashes: hashes})
	p.NextOffset += int64(len(txs))
	return ids
}

func (w *world) batch(items ...Item) *Batch {
	w.batches++
	return &Batch{ID: w.batches, Producer: 1, Items: items}
}

// send records an attempt of b with the given per-item results (none: no
// answer, as after a network error).
func (w *world) send(b *Batch, kind Kind, results ...ItemResult) *Attempt {
	a := &Attempt{Seq: len(w.atts) + 1, Batch: b, Kind: kind, Broker: "http://127.0.0.1:1",
		Start: time.Duration(len(w.atts)) * time.Millisecond, End: time.Duration(len(w.atts)+1) * time.Millisecond}
	if len(results) > 0 {
		a.HTTPStatus = 201
		a.Results = results
	} else {
		a.Err = "connection refused"
	}
	w.atts = append(w.atts, a)
	return a
}

func (w *world) queued(part string, id partition.UUID) ItemResult {
	return ItemResult{Status: StatusQueued, MessageID: id, PartitionID: w.st.Partitions[part].ID}
}

func dup(id partition.UUID) ItemResult { return ItemResult{Status: StatusDuplicate, MessageID: id} }

var failed = ItemResult{Status: StatusFailed}

// cleanWorld is a run with retries, duplicates, in-body repeats, a failed
// partition, a storm and a given-up id, and no violation.
func cleanWorld() *world {
	w := newWorld()
	// 1: two partitions; p1 fails at first, is retried, then stored.
	b1 := w.batch(Item{"p0", "a"}, Item{"p1", "b"}, Item{"p0", "c"})
	ids0 := w.store("p0", "a", "c")
	w.send(b1, KindFirst, w.queued("p0", ids0[0]), failed, w.queued("p0", ids0[1]))
	idsB := w.store("p1", "b")
	w.send(b1, KindRetry, dup(ids0[0]), w.queued("p1", idsB[0]), dup(ids0[1]))
	// 2: committed but the answer was lost; the retry says duplicate.
	b2 := w.batch(Item{"p1", "d"}, Item{"p1", "d"}) // in-body repeat
	idsD := w.store("p1", "d")
	w.send(b2, KindFirst)
	w.send(b2, KindRetry, dup(idsD[0]), dup(idsD[0]))
	// 3: in-body repeat answered queued + duplicate; a twin answered duplicate.
	b3 := w.batch(Item{"p0", "e"}, Item{"p0", "e"})
	idsE := w.store("p0", "e")
	w.send(b3, KindFirst, w.queued("p0", idsE[0]), dup(idsE[0]))
	w.send(b3, KindTwin, dup(idsE[0]), dup(idsE[0]))
	// 4: a storm of batch 1.
	w.send(b1, KindStorm, dup(ids0[0]), dup(idsB[0]), dup(ids0[1]))
	// 5: given up: never answered, stored once.
	b5 := w.batch(Item{"p1", "f"})
	w.store("p1", "f")
	w.send(b5, KindFirst)
	w.send(b5, KindRetry)
	// 6: given up: never answered, never stored.
	b6 := w.batch(Item{"p0", "g"})
	w.send(b6, KindFirst)
	return w
}

func kinds(r *Report) map[string]int {
	m := map[string]int{}
	for _, v := range r.Violations {
		m[v.Kind]++
	}
	return m
}

func TestCheckCleanWorld(t *testing.T) {
	w := cleanWorld()
	r := Check(w.atts, w.st)
	for _, v := range r.Violations {
		t.Errorf("unexpected violation: %s", v)
	}
	s := r.Stats
	want := CheckStats{Requests: 10, Retries: 3, Twins: 1, Storms: 1, Batches: 5, Items: 7,
		QueuedAnswers: 4, DupAnswers: 10, FailedAns: 1, NoAnswer: 4, GaveUp: 2, GaveUpStored: 1,
		Partitions: 2, Segments: 5, StoredFrames: 6}
	if s != want {
		t.Errorf("stats\n got %+v\nwant %+v", s, want)
	}
}

// Each case breaks the clean world in one way; the checker must name it.
func TestCheckFindsEveryViolation(t *testing.T) {
	cases := []struct {
		name   string
		kind   string
		mutate func(w *world)
	}{
		{"acknowledged message lost", VLost, func(w *world) {
			b := w.batch(Item{"p0", "lost"})
			w.send(b, KindFirst, w.queued("p0", partition.NewV7()))
		}},
		{"queued answer names another id", VWrongID, func(w *world) {
			b := w.batch(Item{"p0", "x"})
			w.store("p0", "x")
			w.send(b, KindFirst, w.queued("p0", partition.NewV7()))
		}},
		{"queued twice", VQueuedTwice, func(w *world) {
			b := w.batch(Item{"p1", "x"})
			id := w.store("p1", "x")[0]
			w.send(b, KindFirst, w.queued("p1", id))
			w.send(b, KindRetry, w.queued("p1", id))
		}},
		{"stored twice (retry written again)", VStoredTwice, func(w *world) {
			b := w.batch(Item{"p0", "x"})
			w.store("p0", "x")
			id2 := w.store("p0", "y", "x")[1]
			w.send(b, KindFirst)
			w.send(b, KindRetry, w.queued("p0", id2))
			w.send(w.batch(Item{"p0", "y"}), KindFirst)
		}},
		{"given-up id stored twice", VStoredTwice, func(w *world) {
			b := w.batch(Item{"p1", "x"})
			w.store("p1", "x")
			w.store("p1", "x")
			w.send(b, KindFirst)
			w.send(b, KindRetry)
		}},
		{"duplicate names another id", VDupWrongID, func(w *world) {
			b := w.batch(Item{"p0", "x"})
			w.store("p0", "x")
			w.send(b, KindFirst, dup(partition.NewV7()))
		}},
		{"duplicate answers the zero uuid", VDupZeroID, func(w *world) {
			b := w.batch(Item{"p0", "x"})
			w.store("p0", "x")
			w.send(b, KindFirst, dup(partition.ZeroUUID))
		}},
		{"duplicate of nothing", VDupNotStored, func(w *world) {
			b := w.batch(Item{"p1", "x"})
			w.send(b, KindFirst, dup(partition.NewV7()))
		}},
		{"phantom frame", VPhantom, func(w *world) { w.store("p0", "never-sent") }},
		{"stored in the wrong partition", VPhantom, func(w *world) {
			// "a" was sent to p0 only.
			w.store("p1", "a")
		}},
		{"payload differs", VPayload, func(w *world) {
			p := w.st.Partitions["p0"]
			s := &p.Segments[0]
			s.Frames = bytes.Replace(s.Frames, []byte(`"tx":"a"`), []byte(`"tx":"A"`), 1)
		}},
		{"message id reused", VMsgIDReused, func(w *world) {
			p := w.st.Partitions["p1"]
			copy(p.Segments[1].Frames[:16], p.Segments[0].Frames[:16])
		}},
		{"gap in offsets", VOffsets, func(w *world) {
			p := w.st.Partitions["p0"]
			p.Segments[1].FirstOffset++
			p.Txns[1].FirstOffset++
			p.NextOffset++
		}},
		{"overlapping segments", VOffsets, func(w *world) {
			p := w.st.Partitions["p0"]
			p.Segments[1].FirstOffset--
			p.Txns[1].FirstOffset--
		}},
		{"next_offset ahead of the segments", VOffsets, func(w *world) { w.st.Partitions["p1"].NextOffset += 3 }},
		{"segment without log_txns", VLogTxns, func(w *world) {
			p := w.st.Partitions["p1"]
			p.Txns = p.Txns[1:]
		}},
		{"log_txns without segment", VLogTxns, func(w *world) {
			p := w.st.Partitions["p1"]
			p.Txns = append(p.Txns, TxnRow{FirstOffset: 99, Hashes: [][]byte{make([]byte, 16)}})
		}},
		{"cardinality differs from frame_count", VLogTxns, func(w *world) {
			p := w.st.Partitions["p0"]
			p.Txns[0].Hashes = p.Txns[0].Hashes[:1]
		}},
		{"hash differs", VLogTxns, func(w *world) {
			p := w.st.Partitions["p0"]
			p.Txns[0].Hashes[1] = make([]byte, 16)
		}},
		{"orphan rows", VLogTxns, func(w *world) { w.st.OrphanSegments = 1 }},
		{"corrupt segment", VCorrupt, func(w *world) {
			p := w.st.Partitions["p0"]
			p.Segments[0].Frames = p.Segments[0].Frames[:len(p.Segments[0].Frames)-1]
		}},
		{"queued answer names another partition", VPartitionID, func(w *world) {
			b := w.batch(Item{"p0", "x"})
			id := w.store("p0", "x")[0]
			w.send(b, KindFirst, ItemResult{Status: StatusQueued, MessageID: id, PartitionID: w.st.Partitions["p1"].ID})
		}},
		{"malformed 201", VProtocol, func(w *world) {
			a := w.send(w.batch(Item{"p0", "x"}), KindFirst)
			a.HTTPStatus, a.Protocol = 201, "201 body has 0 results for 1 items"
		}},
		{"4xx for a valid push", VHTTPStatus, func(w *world) {
			a := w.send(w.batch(Item{"p0", "x"}), KindFirst)
			a.HTTPStatus, a.Err = 400, `{"error":"bad"}`
		}},
		{"window is not the default", VQueueConfig, func(w *world) { w.st.WindowSeconds = 0 }},
		{"retention is on", VQueueConfig, func(w *world) { w.st.RetentionEnabled = true }},
		{"queue missing", VQueueConfig, func(w *world) { w.st.QueueFound = false }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := cleanWorld()
			c.mutate(w)
			r := Check(w.atts, w.st)
			got := kinds(r)
			if got[c.kind] == 0 {
				t.Fatalf("no %s violation; got %v", c.kind, r.Violations)
			}
			for _, v := range r.Violations {
				t.Logf("%s", v)
				if v.TxID != "" && len(r.Excerpts[excerptKey(v.Partition, v.TxID)]) == 0 {
					t.Errorf("violation %s has no history excerpt", v)
				}
			}
		})
	}
}

func TestCheckExcerptShowsHistoryAndRows(t *testing.T) {
	w := cleanWorld()
	b := w.batch(Item{"p0", "x"})
	w.store("p0", "x")
	id2 := w.store("p0", "x")[0]
	w.send(b, KindFirst)
	w.send(b, KindRetry, w.queued("p0", id2))
	r := Check(w.atts, w.st)
	ex := strings.Join(r.Excerpts[excerptKey("p0", "x")], "\n")
	for _, want := range []string{"retry to", "no answer (connection refused)", "http 201 queued message_id " + id2.String(),
		"stored: partition p0 offset 3", "stored: partition p0 offset 4"} {
		if !strings.Contains(ex, want) {
			t.Errorf("excerpt lacks %q:\n%s", want, ex)
		}
	}
}

func TestParseResults(t *testing.T) {
	b := &Batch{Items: []Item{{"p0", "a"}, {"p1", "b"}, {"p0", "a"}}}
	id1, id2, pid := partition.NewV7(), partition.NewV7(), partition.NewV7()
	good := fmt.Sprintf(`[{"index":0,"message_id":"%s","transaction_id":"a","queueName":"faults","status":"queued","partition_id":"%s","trace_id":null},
		{"index":1,"transaction_id":"b","queueName":"faults","status":"failed","error":"x","retryable":true},
		{"index":2,"message_id":"%s","transaction_id":"a","queueName":"faults","status":"duplicate"}]`, id1, pid, id1)
	rs, prob := parseResults(b, []byte(good))
	if prob != "" {
		t.Fatalf("good body: %s", prob)
	}
	want := []ItemResult{{StatusQueued, id1, pid}, {Status: StatusFailed}, {Status: StatusDuplicate, MessageID: id1}}
	for i := range want {
		if rs[i] != want[i] {
			t.Errorf("result %d = %+v, want %+v", i, rs[i], want[i])
		}
	}
	bad := map[string]string{
		"not an array":   `{"error":"x"}`,
		"too few":        fmt.Sprintf(`[{"index":0,"message_id":"%s","transaction_id":"a","queueName":"faults","status":"duplicate"}]`, id2),
		"wrong tx":       strings.Replace(good, `"transaction_id":"b"`, `"transaction_id":"c"`, 1),
		"wrong index":    strings.Replace(good, `"index":1`, `"index":5`, 1),
		"no index":       strings.Replace(good, `"index":1,`, ``, 1),
		"unknown status": strings.Replace(good, `"status":"failed"`, `"status":"ok"`, 1),
		"bad id":         strings.Replace(good, id1.String()+`","transaction_id":"a","queueName":"faults","status":"queued"`, `nope","transaction_id":"a","queueName":"faults","status":"queued"`, 1),
		"wrong queue":    strings.Replace(good, `"queueName":"faults","status":"failed"`, `"queueName":"other","status":"failed"`, 1),
	}
	for name, body := range bad {
		if _, prob := parseResults(b, []byte(body)); prob == "" {
			t.Errorf("%s: no protocol problem found in %s", name, body)
		}
	}
}

func TestPushBodyIsValidJSON(t *testing.T) {
	b := &Batch{Items: []Item{{"p0", "run-w01-000001"}, {"p3", `odd"tx\`}}}
	var v struct {
		Items []struct {
			Queue, Partition, TransactionID string
			Payload                         json.RawMessage
		}
	}
	if err := json.Unmarshal(pushBody(b), &v); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, pushBody(b))
	}
	if len(v.Items) != 2 || v.Items[1].TransactionID != `odd"tx\` || v.Items[1].Partition != "p3" || v.Items[0].Queue != QueueName {
		t.Fatalf("decoded %+v", v)
	}
	for i, it := range v.Items {
		if !bytes.Equal(it.Payload, payloadFor(b.Items[i].TxID)) {
			t.Errorf("item %d payload %s, want %s", i, it.Payload, payloadFor(b.Items[i].TxID))
		}
		if !json.Valid(it.Payload) {
			t.Errorf("payload %s is not JSON", it.Payload)
		}
	}
}

func TestWriteJSONL(t *testing.T) {
	w := cleanWorld()
	var buf bytes.Buffer
	if err := WriteJSONL(&buf, w.atts); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != len(w.atts) {
		t.Fatalf("%d lines for %d attempts", len(lines), len(w.atts))
	}
	var j jsonAttempt
	if err := json.Unmarshal([]byte(lines[1]), &j); err != nil {
		t.Fatal(err)
	}
	if j.Kind != "retry" || j.HTTP != 201 || len(j.Items) != 3 || j.Items[1].Status != "queued" || j.Items[1].PartitionID == "" {
		t.Errorf("line 2 = %+v", j)
	}
}

func TestErrorBucket(t *testing.T) {
	cases := map[string]struct {
		status int
		msg    string
	}{
		"refused":              {0, "dial tcp 127.0.0.1:1: connect: connection refused"},
		"timeout":              {0, "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"},
		"conn-broken":          {0, "read: connection reset by peer"},
		"stmt-timeout":         {503, `{"error":"... canceling statement due to statement timeout (SQLSTATE 57014)"}`},
		"backend-terminated":   {503, `{"error":"... terminating connection due to administrator command"}`},
		"db-restarting":        {503, `{"error":"... the database system is shutting down (SQLSTATE 57P03)"}`},
		"broker-shutting-down": {503, `{"error":"Broker is shutting down; retry on another broker or later"}`},
		"http-500":             {500, `{"error":"?"}`},
	}
	for want, c := range cases {
		if got := errorBucket(c.status, c.msg); got != want {
			t.Errorf("errorBucket(%d, %q) = %s, want %s", c.status, c.msg, got, want)
		}
	}
}

// With an asynchronous standby, an answer the old primary gave around a kill
// for a commit the standby never got is counted apart (and a resend that
// stored the id again is a repeat, not a violation); the same loss outside
// the kill's window, a loss in the synchronous scenario, or an id the new
// primary stored twice are still violations.
func TestCheckAsyncFailover(t *testing.T) {
	w := newWorld()
	lostA := w.batch(Item{"p0", "lost-a"})
	w.send(lostA, KindFirst, w.queued("p0", partition.NewV7())) // answered, then lost
	kill := KillWindow{Kill: time.Duration(len(w.atts)) * time.Millisecond, Fenced: time.Duration(len(w.atts)+2) * time.Millisecond}
	lostB := w.batch(Item{"p1", "lost-b"})
	w.send(lostB, KindFirst, w.queued("p1", partition.NewV7())) // by a lingering backend, after the kill
	for range 5 {
		w.send(w.batch(Item{"p0", "filler"}), KindStorm, ItemResult{}) // time passes; never answered
	}
	ids := w.store("p1", "lost-b")
	w.send(lostB, KindStorm, w.queued("p1", ids[0])) // the resend stores it again
	w.send(lostB, KindStorm, dup(ids[0]))
	opts := CheckOptions{AsyncKills: []KillWindow{kill}, AsyncLag: time.Millisecond, RequireResolved: false}

	rep := CheckWith(w.atts, w.st, opts)
	if len(rep.Violations) != 0 {
		t.Fatalf("violations in an asynchronous loss: %v", rep.Violations)
	}
	s := rep.Stats
	if s.AsyncLost != 2 || s.AsyncLostBefore != 1 || s.AsyncLostAfter != 1 || s.AsyncRestored != 1 {
		t.Errorf("async stats %+v, want lost 2 (1 before, 1 after the kill), 1 restored", s)
	}

	// The synchronous scenario excuses nothing.
	if got := kinds(CheckWith(w.atts, w.st, CheckOptions{})); got[VLost] != 1 || got[VQueuedTwice] != 1 {
		t.Errorf("without async kills: %v, want lost=1 queued-twice=1", got)
	}
	// A loss answered long before the kill is not the standby's lag.
	far := opts
	far.AsyncKills = []KillWindow{{Kill: kill.Kill + time.Second, Fenced: kill.Fenced + time.Second}}
	if got := kinds(CheckWith(w.atts, w.st, far)); got[VLost] != 1 {
		t.Errorf("a loss far from the kill: %v, want lost=1", got)
	}
	// What the new primary stored must be exact.
	w.store("p1", "lost-b")
	if got := kinds(CheckWith(w.atts, w.st, opts)); got[VStoredTwice] != 1 {
		t.Errorf("an id stored twice after the failover: %v, want stored-twice=1", got)
	}
	// Every item must end with a definite answer when required.
	opts.RequireResolved = true
	if got := kinds(CheckWith(w.atts, w.st, opts)); got[VUnresolved] != 1 {
		t.Errorf("an item never answered: %v, want unresolved=1", got)
	}
}
