package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/regina-mq/regina/partition"
)

// QueueName is the queue every producer pushes to.
const QueueName = "faults"

// payloadFor is the payload sent with a transaction id: derived from it, so
// the checker can verify every stored payload without keeping them.
func payloadFor(tx string) []byte {
	h := fnv.New32a()
	h.Write([]byte(tx))
	pad := int(h.Sum32() % 97)
	b := make([]byte, 0, 32+len(tx)+pad)
	b = append(b, `{"tx":`...)
	b = strconv.AppendQuote(b, tx)
	b = append(b, `,"pad":"`...)
	b = append(b, strings.Repeat("x", pad)...)
	return append(b, `"}`...)
}

// pushBody is the JSON body of a batch.
func pushBody(b *Batch) []byte {
	out := make([]byte, 0, 64+len(b.Items)*160)
	out = append(out, `{"items":[`...)
	for i, it := range b.Items {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"queue":`...)
		out = strconv.AppendQuote(out, QueueName)
		out = append(out, `,"partition":`...)
		out = strconv.AppendQuote(out, it.Partition)
		out = append(out, `,"transactionId":`...)
		out = strconv.AppendQuote(out, it.TxID)
		out = append(out, `,"payload":`...)
		out = append(out, payloadFor(it.TxID)...)
		out = append(out, '}')
	}
	return append(out, "]}"...)
}

// endpoints is the set of broker base URLs producers send to.
type endpoints struct {
	mu   sync.RWMutex
	urls []string
}

func (e *endpoints) set(urls ...string) {
	e.mu.Lock()
	e.urls = append([]string(nil), urls...)
	e.mu.Unlock()
}

func (e *endpoints) pick(i int) string {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if len(e.urls) == 0 {
		return ""
	}
	if i < 0 {
		i = -i
	}
	return e.urls[i%len(e.urls)]
}

func (e *endpoints) len() int {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return len(e.urls)
}

// loadPlan is what the producers share.
type loadPlan struct {
	runID      string
	start      time.Time
	partitions []string
	maxItems   int
	stormProb  float64
	twinProb   float64
	repeatProb float64
	timeout    time.Duration
	pause      time.Duration
	// observe, when set, is told every answered request's latency and
	// its count of definite per-item answers (the soak's sampler).
	observe func(time.Duration, int)

	// stopNew is closed when producers must stop starting new batches.
	stopNew chan struct{}
	// giveUpAt (unix nanos, 0 = not yet known) is when producers stop retrying.
	giveUpAt atomic.Int64
	// quiet is a bit set of partition indexes that new batches and storms
	// leave alone for now (retries still go wherever their batch goes).
	quiet atomic.Uint64

	hist   *History
	eps    *endpoints
	client *http.Client
	errs   *errorCounts
}

func (lp *loadPlan) givingUp() bool {
	t := lp.giveUpAt.Load()
	return t != 0 && time.Now().UnixNano() >= t
}

func (lp *loadPlan) stopping() bool {
	select {
	case <-lp.stopNew:
		return true
	default:
		return false
	}
}

// errorCounts buckets the indefinite answers, to show that faults bit.
type errorCounts struct {
	mu      sync.Mutex
	m       map[string]int
	example map[string]string
}

func (e *errorCounts) add(bucket, msg string) {
	e.mu.Lock()
	if e.m == nil {
		e.m = map[string]int{}
		e.example = map[string]string{}
	}
	e.m[bucket]++
	if _, ok := e.example[bucket]; !ok {
		e.example[bucket] = msg
	}
	e.mu.Unlock()
}

// examples returns one message per bucket, in bucket order.
func (e *errorCounts) examples() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for b, m := range e.example {
		if len(m) > 240 {
			m = m[:240] + "..."
		}
		out = append(out, b+": "+strings.TrimSpace(m))
	}
	sort.Strings(out)
	return out
}

func (e *errorCounts) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return sortedCounts(e.m)
}

func errorBucket(httpStatus int, msg string) string {
	m := strings.ToLower(msg)
	switch {
	case httpStatus == 0 && strings.Contains(m, "connection refused"):
		return "refused"
	case httpStatus == 0 && (strings.Contains(m, "timeout") || strings.Contains(m, "deadline")):
		return "timeout"
	case httpStatus == 0 && (strings.Contains(m, "reset") || strings.Contains(m, "eof") || strings.Contains(m, "broken pipe")):
		return "conn-broken"
	case httpStatus == 0 && strings.Contains(m, "context canceled"):
		return "canceled"
	case httpStatus == 0:
		return "net-other"
	case strings.Contains(m, "statement timeout"):
		return "stmt-timeout"
	case strings.Contains(m, "outcome unknown"):
		return "outcome-unknown"
	case strings.Contains(m, "database unavailable"):
		return "db-unavailable"
	case strings.Contains(m, "terminating connection") || strings.Contains(m, "administrator command"):
		return "backend-terminated"
	case strings.Contains(m, "database system is"):
		return "db-restarting"
	case strings.Contains(m, "shutting down"):
		return "broker-shutting-down"
	case strings.Contains(m, "mailbox is full"):
		return "mailbox-full"
	default:
		return "http-" + strconv.Itoa(httpStatus)
	}
}

// wireResult is one element of a 201 push answer.
type wireResult struct {
	Index         *int   `json:"index"`
	MessageID     string `json:"message_id"`
	TransactionID string `json:"transaction_id"`
	QueueName     string `json:"queueName"`
	Status        string `json:"status"`
	PartitionID   string `json:"partition_id"`
	Error         string `json:"error"`
}

// send posts a batch once and records the attempt.
func (lp *loadPlan) send(ctx context.Context, b *Batch, kind Kind, broker string) *Attempt {
	a := &Attempt{Batch: b, Kind: kind, Broker: broker}
	a.Start = time.Since(lp.start)
	defer func() {
		a.End = time.Since(lp.start)
		lp.hist.Add(a)
		if lp.observe != nil && len(a.Results) > 0 {
			n := 0
			for _, r := range a.Results {
				if r.Status.Definite() {
					n++
				}
			}
			lp.observe(a.End-a.Start, n)
		}
	}()
	if broker == "" {
		a.Err = "no broker endpoint"
		return a
	}
	rctx, cancel := context.WithTimeout(ctx, lp.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, broker+"/api/v1/push", bytes.NewReader(pushBody(b)))
	if err != nil {
		a.Err = err.Error()
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := lp.client.Do(req)
	if err != nil {
		a.Err = err.Error()
		lp.errs.add(errorBucket(0, a.Err), a.Err)
		return a
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	resp.Body.Close()
	a.HTTPStatus = resp.StatusCode
	if err != nil {
		// The status line came but the body broke: no per-item answer.
		a.Err = "reading body: " + err.Error()
		lp.errs.add(errorBucket(0, a.Err), a.Err)
		return a
	}
	if resp.StatusCode != http.StatusCreated {
		a.Err = string(body)
		lp.errs.add(errorBucket(resp.StatusCode, a.Err), fmt.Sprintf("http %d %s", resp.StatusCode, a.Err))
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			a.Protocol = fmt.Sprintf("a push answered %d (want 201): %.200s", resp.StatusCode, body)
		}
		return a
	}
	a.Results, a.Protocol = parseResults(b, body)
	for _, r := range a.Results {
		if r.Status == StatusFailed {
			lp.errs.add("item-failed", string(body))
			break
		}
	}
	return a
}

// parseResults checks a 201 body against the batch and returns one result per
// item, or a description of how the body breaks the contract.
func parseResults(b *Batch, body []byte) ([]ItemResult, string) {
	var rs []wireResult
	if err := json.Unmarshal(body, &rs); err != nil {
		return nil, fmt.Sprintf("201 body is not a result array: %v: %.200s", err, body)
	}
	if len(rs) != len(b.Items) {
		return nil, fmt.Sprintf("201 body has %d results for %d items", len(rs), len(b.Items))
	}
	out := make([]ItemResult, len(rs))
	var problems []string
	for i, r := range rs {
		it := b.Items[i]
		if r.Index == nil || *r.Index != i {
			problems = append(problems, fmt.Sprintf("result %d has index %v", i, ptrInt(r.Index)))
		}
		if r.TransactionID != it.TxID {
			problems = append(problems, fmt.Sprintf("result %d has transaction_id %q, sent %q", i, r.TransactionID, it.TxID))
		}
		if r.QueueName != QueueName {
			problems = append(problems, fmt.Sprintf("result %d has queueName %q", i, r.QueueName))
		}
		switch r.Status {
		case "queued", "duplicate":
			id, err := partition.ParseUUID(r.MessageID)
			if err != nil {
				problems = append(problems, fmt.Sprintf("result %d (%s) has message_id %q", i, r.Status, r.MessageID))
				continue
			}
			out[i] = ItemResult{Status: StatusDuplicate, MessageID: id}
			if r.Status == "queued" {
				out[i].Status = StatusQueued
				pid, err := partition.ParseUUID(r.PartitionID)
				if err != nil {
					problems = append(problems, fmt.Sprintf("result %d (queued) has partition_id %q", i, r.PartitionID))
				}
				out[i].PartitionID = pid
			}
		case "failed":
			out[i] = ItemResult{Status: StatusFailed}
		default:
			problems = append(problems, fmt.Sprintf("result %d has status %q", i, r.Status))
		}
	}
	if len(problems) > 0 {
		if len(problems) > 5 {
			problems = append(problems[:5], fmt.Sprintf("and %d more", len(problems)-5))
		}
		return out, strings.Join(problems, "; ")
	}
	return out, ""
}

func ptrInt(p *int) any {
	if p == nil {
		return "missing"
	}
	return *p
}

// producer pushes batches until told to stop.
type producer struct {
	id   int
	lp   *loadPlan
	rng  *rand.Rand
	seq  int
	done []*Batch // recently settled batches, for storms
	// counters
	settled, gaveUp int
}

func (p *producer) run(ctx context.Context) {
	for ctx.Err() == nil && !p.lp.stopping() {
		if len(p.done) > 0 && p.rng.Float64() < p.lp.stormProb {
			p.storm(ctx)
		} else {
			p.deliver(ctx, p.newBatch())
		}
		if p.lp.pause > 0 {
			sleepCtx(ctx, p.lp.pause)
		}
	}
}

// pickPartition picks a partition that is not quiet.
func (p *producer) pickPartition() string {
	quiet := p.lp.quiet.Load()
	for {
		i := p.rng.IntN(len(p.lp.partitions))
		if quiet&(1<<i) == 0 {
			return p.lp.partitions[i]
		}
	}
}

// touchesQuiet reports whether b has an item in a quiet partition.
func (lp *loadPlan) touchesQuiet(b *Batch) bool {
	quiet := lp.quiet.Load()
	if quiet == 0 {
		return false
	}
	for _, it := range b.Items {
		for i, name := range lp.partitions {
			if name == it.Partition && quiet&(1<<i) != 0 {
				return true
			}
		}
	}
	return false
}

func (p *producer) newBatch() *Batch {
	lp := p.lp
	n := 1 + p.rng.IntN(lp.maxItems)
	items := make([]Item, 0, n)
	single := p.rng.IntN(2) == 0
	part := p.pickPartition()
	for i := range n {
		if i > 0 && p.rng.Float64() < lp.repeatProb {
			// The same transaction id twice in one body (same partition):
			// the repeat must be answered duplicate, naming the leader's id.
			items = append(items, items[p.rng.IntN(len(items))])
			continue
		}
		if !single {
			part = p.pickPartition()
		}
		p.seq++
		items = append(items, Item{Partition: part, TxID: fmt.Sprintf("%s-w%02d-%06d", lp.runID, p.id, p.seq)})
	}
	return lp.hist.NewBatch(p.id, items)
}

// deliver sends b until every item has a definite answer or the run gives up.
func (p *producer) deliver(ctx context.Context, b *Batch) {
	lp := p.lp
	definite := make([]bool, len(b.Items))
	open := len(b.Items)
	merge := func(a *Attempt) {
		for i, r := range a.Results {
			if r.Status.Definite() && !definite[i] {
				definite[i] = true
				open--
			}
		}
	}
	slot := p.id + b.ID
	for attempt := 0; ; attempt++ {
		if attempt == 0 && p.rng.Float64() < lp.twinProb {
			// Twin: the same body twice at once, to two brokers when two
			// are up.
			var wg sync.WaitGroup
			var twin *Attempt
			wg.Go(func() {
				twin = lp.send(ctx, b, KindTwin, lp.eps.pick(slot+1))
			})
			a := lp.send(ctx, b, KindFirst, lp.eps.pick(slot))
			wg.Wait()
			merge(a)
			merge(twin)
		} else {
			kind := KindFirst
			if attempt > 0 {
				kind = KindRetry
			}
			merge(lp.send(ctx, b, kind, lp.eps.pick(slot+attempt)))
		}
		if open == 0 {
			p.settled++
			p.done = append(p.done, b)
			if len(p.done) > 64 {
				p.done = p.done[1:]
			}
			return
		}
		if ctx.Err() != nil || lp.givingUp() {
			p.gaveUp++
			return
		}
		back := time.Duration(10<<min(attempt, 5)) * time.Millisecond
		back += time.Duration(p.rng.Int64N(int64(back)))
		sleepCtx(ctx, back)
	}
}

// storm resends an already settled batch 1-3 times at once, to random brokers.
func (p *producer) storm(ctx context.Context) {
	b := p.done[p.rng.IntN(len(p.done))]
	if p.lp.touchesQuiet(b) {
		return
	}
	n := 1 + p.rng.IntN(3)
	var wg sync.WaitGroup
	for range n {
		slot := p.rng.IntN(1 << 20)
		wg.Go(func() {
			p.lp.send(ctx, b, KindStorm, p.lp.eps.pick(slot))
		})
	}
	wg.Wait()
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
