// Command streams-tumbling runs a tumbling-window sum against a Regina (or
// Queen) broker using only the HTTP API, the way Queen's streaming SDKs do:
// register the query, pop the source as the group streams.<name>, read the
// partition's state, fold the batch into 5-second windows, and commit each
// partition's cycle (state upserts and deletes, one sink message per closed
// window, the source ack) in one request.
//
//	go run ./examples/streams-tumbling -url http://localhost:6632
//
// It pushes its own events first (-events, spread over two partitions, one
// per simulated second of event time), so that it can check the sums it
// reads back from the sink queue; it exits 1 when they differ.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"
)

const windowMs = 5000

func main() {
	base := flag.String("url", "http://localhost:6632", "broker URL")
	token := flag.String("token", "", "bearer token (brokers with JWT auth on; read-write)")
	events := flag.Int("events", 40, "events to push and sum")
	queue := flag.String("queue", fmt.Sprintf("clicks-%d", time.Now().UnixNano()%1e9), "source queue (the sink is <queue>.sums)")
	flag.Parse()
	c := &client{base: strings.TrimRight(*base, "/"), token: *token, http: &http.Client{Timeout: 30 * time.Second}}
	if err := run(c, *queue, *events); err != nil {
		fmt.Fprintln(os.Stderr, "streams-tumbling:", err)
		os.Exit(1)
	}
}

type client struct {
	base, token string
	http        *http.Client
}

// call sends a request with a JSON body (nil: none) and decodes a JSON
// answer into out; 204 leaves out untouched.
func (c *client) call(method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, c.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if resp.StatusCode == http.StatusNoContent || out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}

type message struct {
	TransactionID string          `json:"transactionId"`
	PartitionID   string          `json:"partitionId"`
	Partition     string          `json:"partition"`
	LeaseID       string          `json:"leaseId"`
	Data          json.RawMessage `json:"data"`
}

type event struct {
	Amount int   `json:"amount"`
	TS     int64 `json:"ts"` // event time, epoch ms
}

type window struct {
	Acc struct {
		Sum   int `json:"sum"`
		Count int `json:"count"`
	} `json:"acc"`
	WindowStart int64 `json:"windowStart"`
	WindowEnd   int64 `json:"windowEnd"`
}

// key is the SDK's key of a tumbling window: tumb:<seconds> US <start ISO> US <user key>.
func key(start int64, userKey string) string {
	return fmt.Sprintf("tumb:%d\u001f%s\u001f%s", windowMs/1000,
		time.UnixMilli(start).UTC().Format("2006-01-02T15:04:05.000Z"), userKey)
}

func run(c *client, queue string, n int) error {
	sink := queue + ".sums"
	name := queue + ".sum_5s"
	group := "streams." + name

	// The events, and the sums the sink must end up with.
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC).UnixMilli()
	want := map[string]int{} // partition/windowStart -> sum
	var items []map[string]any
	for i := range n {
		part := []string{"user-1", "user-2"}[i%2]
		ev := event{Amount: i + 1, TS: t0 + int64(i)*1000}
		items = append(items, map[string]any{"queue": queue, "partition": part,
			"transactionId": fmt.Sprintf("%s-%d", queue, i), "payload": ev})
		want[fmt.Sprintf("%s/%d", part, ev.TS-ev.TS%windowMs)] += ev.Amount
	}
	if err := c.call("POST", "/api/v1/push", map[string]any{"items": items}, nil); err != nil {
		return err
	}

	// Register: the hash fingerprints the operator chain.
	h := sha256.Sum256([]byte("source|window:tumbling:5s:ts|aggregate:sum,count|to:" + sink))
	var reg struct {
		Success bool   `json:"success"`
		QueryID string `json:"query_id"`
		Fresh   bool   `json:"fresh"`
	}
	if err := c.call("POST", "/streams/v1/queries", map[string]any{"name": name, "source_queue": queue,
		"sink_queue": sink, "config_hash": hex.EncodeToString(h[:]), "reset": false}, &reg); err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "registered %s as %s (fresh=%v)\n", name, reg.QueryID, reg.Fresh)

	// The main loop: until the source has nothing left for the group.
	seen := map[string]string{} // partition id -> name
	for idle := 0; idle < 2; {
		var pop struct {
			Messages []message `json:"messages"`
		}
		q := url.Values{"batch": {"7"}, "wait": {"true"}, "timeout": {"500"}, "consumerGroup": {group}, "partitions": {"2"}}
		if err := c.call("GET", "/api/v1/pop/queue/"+url.PathEscape(queue)+"?"+q.Encode(), nil, &pop); err != nil {
			return err
		}
		if len(pop.Messages) == 0 {
			idle++
			continue
		}
		idle = 0
		byPart := map[string][]message{}
		var order []string
		for _, m := range pop.Messages {
			if byPart[m.PartitionID] == nil {
				order = append(order, m.PartitionID)
			}
			byPart[m.PartitionID] = append(byPart[m.PartitionID], m)
			seen[m.PartitionID] = m.Partition
		}
		for _, pid := range order {
			if err := cycle(c, reg.QueryID, pid, group, sink, byPart[pid]); err != nil {
				return err
			}
		}
	}

	// Idle flush: windows that no later event closed are closed now (the
	// SDK's flush timer does this with ripe_at_or_before = now - grace).
	for pid, part := range seen {
		if err := flush(c, reg.QueryID, pid, part, group, sink); err != nil {
			return err
		}
	}

	// Read the sink back and compare.
	got := map[string]int{}
	for {
		var pop struct {
			Messages []message `json:"messages"`
		}
		q := url.Values{"batch": {"100"}, "consumerGroup": {"check"}}
		if err := c.call("GET", "/api/v1/pop/queue/"+url.PathEscape(sink)+"?"+q.Encode(), nil, &pop); err != nil {
			return err
		}
		if len(pop.Messages) == 0 {
			break
		}
		for _, m := range pop.Messages {
			var w struct {
				Sum         int   `json:"sum"`
				Count       int   `json:"count"`
				WindowStart int64 `json:"windowStart"`
			}
			if err := json.Unmarshal(m.Data, &w); err != nil {
				return err
			}
			k := fmt.Sprintf("%s/%d", m.Partition, w.WindowStart)
			if _, dup := got[k]; dup {
				return fmt.Errorf("window %s emitted twice", k)
			}
			got[k] = w.Sum
			fmt.Fprintf(os.Stdout, "%s  %s  sum=%d count=%d\n", m.Partition,
				time.UnixMilli(w.WindowStart).UTC().Format("15:04:05"), w.Sum, w.Count)
		}
		last := pop.Messages[len(pop.Messages)-1]
		if err := c.call("POST", "/api/v1/ack", map[string]any{"transactionId": last.TransactionID,
			"partitionId": last.PartitionID, "leaseId": last.LeaseID, "consumerGroup": "check",
			"status": "completed"}, nil); err != nil {
			return err
		}
	}
	for k, v := range want {
		if got[k] != v {
			return fmt.Errorf("window %s: sum %d, want %d", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		return fmt.Errorf("%d windows emitted, want %d", len(got), len(want))
	}
	fmt.Fprintf(os.Stdout, "ok: %d windows, every sum as expected\n", len(got))
	return nil
}

// cycle folds one partition's batch into its stored windows and commits:
// upserts for windows still open, deletes and sink messages for windows the
// batch closed, and the ack of the batch's last message.
func cycle(c *client, qid, pid, group, sink string, msgs []message) error {
	open, err := state(c, qid, pid, nil)
	if err != nil {
		return err
	}
	stored := map[string]bool{}
	for k := range open {
		stored[k] = true
	}
	var clock int64
	for _, m := range msgs {
		var ev event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			return err
		}
		start := ev.TS - ev.TS%windowMs
		k := key(start, pid)
		w := open[k]
		if w == nil {
			w = &window{WindowStart: start, WindowEnd: start + windowMs}
			open[k] = w
		}
		w.Acc.Sum += ev.Amount
		w.Acc.Count++
		clock = max(clock, ev.TS)
	}
	var keys []string
	for k := range open {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	ops, pushes := []map[string]any{}, []map[string]any{}
	for _, k := range keys {
		w := open[k]
		if w.WindowEnd <= clock { // closed: windowEnd + grace(0) <= clock
			if stored[k] {
				ops = append(ops, map[string]any{"type": "delete", "key": k})
			}
			pushes = append(pushes, emit(sink, msgs[0].Partition, w))
			continue
		}
		ops = append(ops, map[string]any{"type": "upsert", "key": k, "value": w})
	}
	last := msgs[len(msgs)-1]
	return commit(c, map[string]any{"query_id": qid, "partition_id": pid, "consumer_group": group,
		"state_ops": ops, "push_items": pushes, "release_lease": true,
		"ack": map[string]any{"transactionId": last.TransactionID, "leaseId": last.LeaseID,
			"status": "completed", "count": len(msgs)}})
}

// flush closes every stored window of a partition (no ack: it holds no lease).
func flush(c *client, qid, pid, part, group, sink string) error {
	ripe := map[string]any{"key_prefix": fmt.Sprintf("tumb:%d\u001f", windowMs/1000),
		"ripe_at_or_before": time.Now().UnixMilli()}
	open, err := state(c, qid, pid, ripe)
	if err != nil || len(open) == 0 {
		return err
	}
	ops, pushes := []map[string]any{}, []map[string]any{}
	for k, w := range open {
		ops = append(ops, map[string]any{"type": "delete", "key": k})
		pushes = append(pushes, emit(sink, part, w))
	}
	return commit(c, map[string]any{"query_id": qid, "partition_id": pid, "consumer_group": group,
		"state_ops": ops, "push_items": pushes, "ack": nil})
}

func emit(sink, part string, w *window) map[string]any {
	return map[string]any{"queue": sink, "partition": part,
		"payload": map[string]any{"sum": w.Acc.Sum, "count": w.Acc.Count, "windowStart": w.WindowStart}}
}

func state(c *client, qid, pid string, filter map[string]any) (map[string]*window, error) {
	body := map[string]any{"query_id": qid, "partition_id": pid, "keys": []string{}}
	maps.Copy(body, filter)
	var res struct {
		Rows []struct {
			Key   string `json:"key"`
			Value window `json:"value"`
		} `json:"rows"`
	}
	if err := c.call("POST", "/streams/v1/state/get", body, &res); err != nil {
		return nil, err
	}
	out := map[string]*window{}
	for _, r := range res.Rows {
		out[r.Key] = &r.Value
	}
	return out, nil
}

func commit(c *client, body map[string]any) error {
	var res struct {
		Success bool   `json:"success"`
		Error   string `json:"error"`
	}
	if err := c.call("POST", "/streams/v1/cycle", body, &res); err != nil {
		return err
	}
	if !res.Success {
		return errors.New("cycle failed: " + res.Error)
	}
	return nil
}
