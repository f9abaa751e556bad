package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// procBroker is a broker running as its own process (bin built by the test),
// so that it can be killed with SIGKILL.
type procBroker struct {
	*testBroker
	cmd    *exec.Cmd
	exited chan error
	logs   *strings.Builder
}

// startHealthy starts p's process, has it killed at the test's end, waits
// until it answers /health on port and returns its URL.
func (p *procBroker) startHealthy(t *testing.T, port int) string {
	t.Helper()
	require.NoError(t, p.cmd.Start())
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { p.kill(t) })
	u := fmt.Sprintf("http://127.0.0.1:%d", port)
	checkFor(t, 60*time.Second, 50*time.Millisecond, func() error {
		s, _, err := tryGet(u + "/health")
		if err != nil || s != http.StatusOK {
			return fmt.Errorf("health: %d %w", s, err)
		}
		return nil
	})
	return u
}

// startProcBroker starts a broker process (brokerProcess) on schema and waits
// until it is healthy.
func startProcBroker(t *testing.T, schema string) *procBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	cmd := brokerProcess(t, "DATABASE_URL="+sqlstoretest.URL(t), fmt.Sprintf("PORT=%d", port), "HOST=127.0.0.1",
		"QUEEN_SCHEMA="+schema, "DB_POOL_SIZE=4")
	p := &procBroker{cmd: cmd, exited: make(chan error, 1), logs: &strings.Builder{}}
	cmd.Stderr = p.logs
	p.testBroker = &testBroker{URL: p.startHealthy(t, port), Schema: schema}
	return p
}

// kill sends SIGKILL and waits for the process to end (idempotent).
func (p *procBroker) kill(t *testing.T) {
	t.Helper()
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("broker did not die within 30s of SIGKILL")
	}
}

// windowRunner is a test-side stream runner: a tumbling window of 4 over
// the payload's n (window w holds n in [4w+1, 4w+4]) summing n, as the SDK
// keeps it: a state row per open window, a sink message and a delete per
// window closed by a later n.
type windowRunner struct {
	qid, group string
}

func windowKey(w int) string { return fmt.Sprintf("tumb:4\u001f%03d", w) }

type windowValue struct {
	Acc struct {
		Sum   int `json:"sum"`
		Count int `json:"count"`
	} `json:"acc"`
	WindowEnd int `json:"windowEnd"`
}

// cycleBody folds a popped batch into the shard's stored windows and
// returns the cycle that commits it.
func (r *windowRunner) cycleBody(t *testing.T, b *testBroker, p popResponse) map[string]any {
	t.Helper()
	rows, _ := b.state(t, map[string]any{"query_id": r.qid, "partition_id": p.PartitionID, "keys": []string{}})
	open := map[int]*windowValue{}
	stored := map[int]bool{}
	for k, raw := range rows {
		var w int
		_, err := fmt.Sscanf(strings.TrimPrefix(k, "tumb:4\u001f"), "%d", &w)
		require.NoError(t, err)
		v := &windowValue{}
		require.NoError(t, json.Unmarshal(raw, v))
		open[w], stored[w] = v, true
	}
	clock := 0
	for _, m := range p.Messages {
		var payload struct{ N int }
		require.NoError(t, json.Unmarshal(m.Data, &payload))
		w := (payload.N - 1) / 4
		if open[w] == nil {
			open[w] = &windowValue{WindowEnd: 4*w + 4}
		}
		open[w].Acc.Sum += payload.N
		open[w].Acc.Count++
		clock = max(clock, payload.N)
	}
	var ws []int
	for w := range open {
		ws = append(ws, w)
	}
	sort.Ints(ws)
	ops, pushes := []map[string]any{}, []item{}
	for _, w := range ws {
		v := open[w]
		if v.WindowEnd < clock { // a later n arrived: the window is closed
			if stored[w] {
				ops = append(ops, map[string]any{"type": "delete", "key": windowKey(w)})
			}
			pushes = append(pushes, item{"queue": "events.sums", "partition": p.Partition,
				"payload": map[string]any{"window": w, "sum": v.Acc.Sum, "count": v.Acc.Count}})
			continue
		}
		ops = append(ops, map[string]any{"type": "upsert", "key": windowKey(w), "value": v})
	}
	last := p.Messages[len(p.Messages)-1]
	return map[string]any{"query_id": r.qid, "partition_id": p.PartitionID, "consumer_group": r.group,
		"state_ops": ops, "push_items": pushes, "release_lease": true,
		"ack": map[string]any{"transactionId": last.TransactionID, "leaseId": last.LeaseID, "status": "completed",
			"count": len(p.Messages)}}
}

// TestStreamsSurviveBrokerKill runs a tumbling-window sum across SIGKILLs of
// the broker process: between cycles, between a pop and its cycle, and
// while a cycle is in flight (then retried, as the SDK's HTTP client does).
// Every source message affects the state and the sink exactly once, and an
// open window's state outlives the broker.
func TestStreamsSurviveBrokerKill(t *testing.T) {
	t.Parallel()
	schema := sqlstoretest.NewSchema(t)

	b := startProcBroker(t, schema)
	pushN(t, b.testBroker, "events", "user-1", 1, 12) // payload n = 1..12
	r := &windowRunner{group: "streams.sums"}
	r.qid = b.register(t, "sums", "events", "h", false)["query_id"].(string)
	pop := func(b *procBroker) popResponse {
		t.Helper()
		return runnerPop(t, b.testBroker, "events", r.group, 3)
	}
	step := func(b *procBroker) {
		t.Helper()
		m := b.cycle(t, r.cycleBody(t, b.testBroker, pop(b)))
		require.Equal(t, true, m["success"], "%v", m)
	}

	// n 1..3: window 0 open. Kill between cycles; its state survives.
	step(b)
	b.kill(t)
	b = startProcBroker(t, schema)
	p46 := pop(b)
	rows, _ := b.state(t, shard(r.qid, p46.PartitionID))
	require.JSONEq(t, `{"acc":{"sum":6,"count":3},"windowEnd":4}`, string(rows[windowKey(0)]))

	// n 4..6 are popped; kill the broker before their cycle. The lease is
	// in the database, so the next broker commits the cycle under it.
	b.kill(t)
	b = startProcBroker(t, schema)
	m := b.cycle(t, r.cycleBody(t, b.testBroker, p46)) // closes window 0 (sum 10)
	require.Equal(t, true, m["success"], "%v", m)

	// n 7..9: the cycle is in flight when the broker dies; whether it
	// committed or not, the retry of the same bytes leaves one effect.
	body := r.cycleBody(t, b.testBroker, pop(b))
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		resp, err := httpClient.Post(b.URL+"/streams/v1/cycle", "application/json", bytes.NewReader(raw))
		if err == nil {
			resp.Body.Close()
		}
	}()
	b.kill(t)
	<-sent
	b = startProcBroker(t, schema)
	m = b.cycle(t, body)
	if m["success"] != true {
		require.Equal(t, "Invalid or expired lease", m["error"], "the first attempt committed and released the lease")
	}

	// n 10..12, then 13 closes window 2.
	step(b)
	pushN(t, b.testBroker, "events", "user-1", 13, 1)
	step(b)

	sink := b.pop(t, "events.sums", "user-1", url.Values{"batch": {"10"}})
	var got []string
	for _, msg := range sink.Messages {
		got = append(got, string(msg.Data))
	}
	require.Len(t, got, 3, "one sink message per closed window: %v", got)
	require.JSONEq(t, `{"window":0,"sum":10,"count":4}`, got[0])
	require.JSONEq(t, `{"window":1,"sum":26,"count":4}`, got[1])
	require.JSONEq(t, `{"window":2,"sum":42,"count":4}`, got[2])
	_, keys := b.state(t, shard(r.qid, sink.PartitionID))
	require.Empty(t, keys, "the sink partition has no state")
	d := newDB(t, schema)
	require.Equal(t, int64(13), d.int(t, `SELECT cursor_offset FROM queen.consumers WHERE consumer_group = $1`, r.group))
	var state string
	require.NoError(t, d.pool.QueryRow(t.Context(), d.q(`SELECT string_agg(key || '=' || value::text, ',') FROM queen.streams_state`)).Scan(&state))
	require.Equal(t, windowKey(3)+`={"acc": {"sum": 13, "count": 1}, "windowEnd": 16}`, state)
}

// TestStreamsExampleRuns runs examples/streams-tumbling against a broker: it
// checks the window sums it reads back from the sink itself and exits 1 on a
// difference.
func TestStreamsExampleRuns(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the example")
	}
	b := startBroker(t, "", nil)
	out, err := exec.Command("go", "run", "../../examples/streams-tumbling", "-url", b.URL, "-events", "23").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "ok: 10 windows, every sum as expected")
}
