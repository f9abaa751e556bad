package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/regina-mq/regina/partition"
)

// The streams scenario (-scenario streams) runs, next to the ordinary push
// load and while brokers are killed (kill9 and two-brokers by default), a
// stream query the way Queen's SDKs run one: a pusher appends numbered
// messages to a source queue; several runners pop it as the group
// streams.<name> (short leases, so a runner whose cycle died gets its batch
// back quickly), read the partition's state, and commit one cycle per batch
// that appends every message's number to the state value and pushes one
// sink message per source message; a cycle whose answer is lost is retried
// with the same bytes up to 3 times, as the SDKs' HTTP client does. Once the
// load stopped and the runners caught up, the checker proves from the
// database, per source partition: the state lists every stored source
// message exactly once, in offset order; the sink holds exactly one message
// per source message; the group's cursor is at the end.

const (
	streamSource = "faults-streams-src"
	streamSink   = "faults-streams-sink"
	streamName   = "faults.sum"
	streamGroup  = "streams." + streamName
	streamParts  = 4
)

// Violation kinds of the streams scenario.
const (
	VStreamState  = "stream-state"  // the state does not list each source message exactly once
	VStreamSink   = "stream-sink"   // the sink does not hold each source message exactly once
	VStreamCursor = "stream-cursor" // the group's cursor is not at the end of the source
	VStreamSetup  = "stream-setup"  // the query could not be run
)

// streamsLoad is the running stream workload.
type streamsLoad struct {
	r       *runner
	client  *http.Client
	qid     string
	next    atomic.Int64 // last number pushed
	pushed  atomic.Int64 // source messages with a definite answer
	cycles  atomic.Int64 // committed cycles
	failed  atomic.Int64 // cycles answered success:false
	retries atomic.Int64 // cycle retries after a lost answer
	lost    atomic.Int64 // cycles abandoned after 4 attempts without an answer
	stop    chan struct{}
	wg      sync.WaitGroup
}

// post sends a JSON body to a broker and decodes the answer; status 0 is a
// transport error.
func (s *streamsLoad) post(ctx context.Context, base, path string, body []byte, out any) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s: %w: %s", path, err, b)
		}
	}
	return resp.StatusCode, nil
}

// startStreams configures the source, registers the query and starts the
// pusher and the runners.
func (r *runner) startStreams(ctx context.Context) (*streamsLoad, error) {
	s := &streamsLoad{r: r, client: r.lp.client, stop: make(chan struct{})}
	base := r.eps.pick(0)
	cfg, _ := json.Marshal(map[string]any{"queue": streamSource, "options": map[string]any{"leaseTime": 2}})
	if st, err := s.post(ctx, base, "/api/v1/configure", cfg, nil); err != nil || st != http.StatusOK {
		return nil, fmt.Errorf("streams: configure %s: status %d: %w", streamSource, st, orStatus(err))
	}
	reg, _ := json.Marshal(map[string]any{"name": streamName, "source_queue": streamSource, "sink_queue": streamSink,
		"config_hash": "faults-v1", "reset": false})
	var ans struct {
		QueryID string `json:"query_id"`
	}
	if st, err := s.post(ctx, base, "/streams/v1/queries", reg, &ans); err != nil || st != http.StatusOK || ans.QueryID == "" {
		return nil, fmt.Errorf("streams: register: status %d: %w", st, orStatus(err))
	}
	s.qid = ans.QueryID
	s.wg.Add(1)
	go s.pusher(ctx)
	for i := range 3 {
		s.wg.Add(1)
		go s.runner(ctx, i)
	}
	r.logf("streams: query %s (%s) on %s: 1 pusher, 3 runners, leaseTime 2s", streamName, s.qid, streamSource)
	return s, nil
}

// pusher appends batches of numbered messages until the load stops; each
// batch is retried with the same transaction ids until it has a definite
// answer.
func (s *streamsLoad) pusher(ctx context.Context) {
	defer s.wg.Done()
	for i := 0; ; i++ {
		select {
		case <-s.r.lp.stopNew:
			return
		case <-ctx.Done():
			return
		default:
		}
		var items []map[string]any
		for range 5 {
			n := s.next.Add(1)
			items = append(items, map[string]any{"queue": streamSource, "partition": fmt.Sprintf("s%d", n%streamParts),
				"transactionId": "src-" + strconv.FormatInt(n, 10), "payload": map[string]any{"n": n}})
		}
		body, _ := json.Marshal(map[string]any{"items": items})
		for attempt := 0; ctx.Err() == nil; attempt++ {
			var res []struct {
				Status string `json:"status"`
			}
			st, err := s.post(ctx, s.r.eps.pick(i+attempt), "/api/v1/push", body, &res)
			ok := err == nil && st == http.StatusCreated && len(res) == len(items)
			for _, x := range res {
				ok = ok && (x.Status == "queued" || x.Status == "duplicate")
			}
			if ok {
				s.pushed.Add(int64(len(items)))
				break
			}
			sleepCtx(ctx, 50*time.Millisecond)
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
}

type streamMsg struct {
	TransactionID string          `json:"transactionId"`
	PartitionID   string          `json:"partitionId"`
	Partition     string          `json:"partition"`
	LeaseID       string          `json:"leaseId"`
	Data          json.RawMessage `json:"data"`
}

// runner pops the source as the query's group and commits one cycle per
// popped partition until told to stop.
func (s *streamsLoad) runner(ctx context.Context, id int) {
	defer s.wg.Done()
	for turn := id; ; turn++ {
		select {
		case <-s.stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		base := s.r.eps.pick(turn)
		msgs, err := s.pop(ctx, base)
		if err != nil || len(msgs) == 0 {
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		s.cycle(ctx, turn, msgs)
	}
}

func (s *streamsLoad) pop(ctx context.Context, base string) ([]streamMsg, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	q := url.Values{"batch": {"20"}, "wait": {"true"}, "timeout": {"500"}, "consumerGroup": {streamGroup}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/pop/queue/"+streamSource+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil, nil
	}
	var p struct {
		Messages []streamMsg `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		return nil, err
	}
	return p.Messages, nil
}

// cycle folds one partition's batch into its state (the list of applied
// numbers) and commits it with one sink message per source message.
func (s *streamsLoad) cycle(ctx context.Context, turn int, msgs []streamMsg) {
	pid := msgs[0].PartitionID
	get, _ := json.Marshal(map[string]any{"query_id": s.qid, "partition_id": pid, "keys": []string{"applied"}})
	var st struct {
		Rows []struct {
			Value struct {
				Ns []int64 `json:"ns"`
			} `json:"value"`
		} `json:"rows"`
	}
	if code, err := s.post(ctx, s.r.eps.pick(turn), "/streams/v1/state/get", get, &st); err != nil || code != http.StatusOK {
		return // the lease expires and the batch comes back
	}
	var ns []int64
	if len(st.Rows) == 1 {
		ns = st.Rows[0].Value.Ns
	}
	var pushes []map[string]any
	for _, m := range msgs {
		if m.PartitionID != pid {
			break // one partition per pop (partitions=1)
		}
		var p struct {
			N int64 `json:"n"`
		}
		if err := json.Unmarshal(m.Data, &p); err != nil {
			return
		}
		ns = append(ns, p.N)
		pushes = append(pushes, map[string]any{"queue": streamSink, "partition": m.Partition,
			"payload": map[string]any{"n": p.N}})
	}
	last := msgs[len(pushes)-1]
	body, _ := json.Marshal(map[string]any{"query_id": s.qid, "partition_id": pid, "consumer_group": streamGroup,
		"state_ops":  []map[string]any{{"type": "upsert", "key": "applied", "value": map[string]any{"ns": ns}}},
		"push_items": pushes, "release_lease": true,
		"ack": map[string]any{"transactionId": last.TransactionID, "leaseId": last.LeaseID, "status": "completed",
			"count": len(pushes)}})
	for attempt := range 4 {
		if attempt > 0 {
			s.retries.Add(1)
			sleepCtx(ctx, time.Duration(100<<(attempt-1))*time.Millisecond)
		}
		var res struct {
			Success bool   `json:"success"`
			Error   string `json:"error"`
		}
		code, err := s.post(ctx, s.r.eps.pick(turn+attempt), "/streams/v1/cycle", body, &res)
		if err != nil || code >= 500 || code == 0 {
			continue // the SDKs retry network errors and 5xx
		}
		switch {
		case code == http.StatusOK && res.Success:
			s.cycles.Add(1)
		case code == http.StatusOK:
			s.failed.Add(1) // e.g. the lease expired or a retry after a commit
		default:
			s.r.violation(VStreamSetup, "cycle answered %d", code)
		}
		return
	}
	s.lost.Add(1)
}

// finish stops the pusher (with the load), waits until the runners have
// consumed everything pushed (brokers healed), then stops them.
func (s *streamsLoad) finish(ctx context.Context, conn func(context.Context) (*pgx.Conn, error), within time.Duration) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if caught, err := s.caughtUp(ctx, conn); err == nil && caught {
			break
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
	close(s.stop)
	s.wg.Wait()
	s.r.logf("streams: %d source messages pushed; %d cycles committed, %d refused (success:false), %d retried after a lost answer, %d abandoned",
		s.pushed.Load(), s.cycles.Load(), s.failed.Load(), s.retries.Load(), s.lost.Load())
}

// caughtUp reports whether the group's cursor is at the end of every source
// partition.
func (s *streamsLoad) caughtUp(ctx context.Context, conn func(context.Context) (*pgx.Conn, error)) (bool, error) {
	c, err := conn(ctx)
	if err != nil {
		return false, err
	}
	defer c.Close(context.Background())
	var behind int
	err = c.QueryRow(ctx, `SELECT count(*) FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		LEFT JOIN queen.consumers c ON c.partition_id = p.id AND c.consumer_group = $2
		WHERE q.name = $1 AND coalesce(c.cursor_offset, 0) < p.next_offset`, streamSource, streamGroup).Scan(&behind)
	return behind == 0, err
}

// frameNumbers decodes the n of every stored frame of a queue's partitions,
// in offset order.
func frameNumbers(st *DBState) (map[string][]int64, error) {
	out := map[string][]int64{}
	for name, p := range st.Partitions {
		for _, seg := range p.Segments {
			fs, err := partition.DecodeSegment(seg.Frames, seg.FrameCount)
			if err != nil {
				return nil, fmt.Errorf("%s segment %d: %w", name, seg.FirstOffset, err)
			}
			for _, f := range fs {
				var v struct {
					N int64 `json:"n"`
				}
				if err := json.Unmarshal(f.Payload, &v); err != nil {
					return nil, fmt.Errorf("%s: payload %s: %w", name, f.Payload, err)
				}
				out[name] = append(out[name], v.N)
			}
		}
	}
	return out, nil
}

// checkStreams proves the stream's exactly-once effects from the database.
func (r *runner) checkStreams(ctx context.Context, conn *pgx.Conn) error {
	src, err := LoadState(ctx, conn, "queen", streamSource)
	if err != nil {
		return err
	}
	sink, err := LoadState(ctx, conn, "queen", streamSink)
	if err != nil {
		return err
	}
	srcNs, err := frameNumbers(src)
	if err != nil {
		return err
	}
	sinkNs, err := frameNumbers(sink)
	if err != nil {
		return err
	}
	state := map[string][]int64{}
	rows, err := conn.Query(ctx, `SELECT p.name, s.value::text FROM queen.streams_state s
		JOIN queen.partitions p ON p.id = s.partition_id WHERE s.key = 'applied'`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var name, v string
		if err := rows.Scan(&name, &v); err != nil {
			return err
		}
		var val struct {
			Ns []int64 `json:"ns"`
		}
		if err := json.Unmarshal([]byte(v), &val); err != nil {
			return err
		}
		state[name] = val.Ns
	}
	if err := rows.Err(); err != nil {
		return err
	}
	total := 0
	for name, want := range srcNs {
		total += len(want)
		got := state[name]
		if !slices.Equal(got, want) {
			r.violation(VStreamState, "partition %s: the state lists %d numbers, the source stores %d (first difference at %d)",
				name, len(got), len(want), firstDiff(got, want))
		}
		sorted := slices.Clone(want)
		slices.Sort(sorted)
		gotSink := slices.Clone(sinkNs[name])
		slices.Sort(gotSink)
		if !slices.Equal(gotSink, sorted) {
			r.violation(VStreamSink, "partition %s: the sink holds %d messages for %d source messages (first difference at %d)",
				name, len(gotSink), len(sorted), firstDiff(gotSink, sorted))
		}
		var cursor int64
		p := src.Partitions[name]
		err := conn.QueryRow(ctx, `SELECT coalesce((SELECT cursor_offset FROM queen.consumers
			WHERE partition_id = $1 AND consumer_group = $2), 0)`, p.ID.String(), streamGroup).Scan(&cursor)
		if err != nil {
			return err
		}
		if cursor != p.NextOffset {
			r.violation(VStreamCursor, "partition %s: cursor %d, next_offset %d", name, cursor, p.NextOffset)
		}
	}
	for name := range sinkNs {
		if _, ok := srcNs[name]; !ok {
			r.violation(VStreamSink, "sink partition %s has no source partition", name)
		}
	}
	if total == 0 {
		r.violation(VStreamSetup, "the stream's source stored nothing")
	}
	r.logf("streams: checked %d source messages in %d partitions against state and sink", total, len(srcNs))
	return nil
}

// orStatus is err, or an error saying the status was not the expected one.
func orStatus(err error) error {
	if err == nil {
		return errors.New("unexpected answer")
	}
	return err
}

func firstDiff(a, b []int64) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
