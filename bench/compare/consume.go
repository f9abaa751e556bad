package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/riverqueue/river"
	"github.com/valyala/fasthttp"
)

// Block K, the consume side: drains of a backlog (every system) and a
// steady phase (producers and consumers together, Regina and Queen).
//
//   - Drains: a backlog of -consume-backlog messages (-consume-backlog-1 for
//     batch 1) over -partitions partitions is written first (not measured),
//     then -consume-consumers consumers each loop "pop up to B, ack them
//     all" until the last message is acked; msgs/s is the backlog over the
//     time to its last ack, CPU the consumers' window. Regina and Queen:
//     queue mode (consume_<sys>_B), then the same backlog read again by two
//     named consumer groups, -consume-consumers consumers each
//     (consume_<sys>_groups_B: both groups' messages count). JetStream: a
//     stream per drain with the same messages, one durable pull consumer
//     shared by the consumers (Fetch(B)), each message acked with AckSync
//     on the `sync_interval: always` server (consume_jetstream_sync_B) and
//     with Ack on the default one (consume_jetstream_B). River: the jobs
//     inserted first, then a client whose workers complete them
//     (consume_river: River fetches and completes in its own batches).
//   - Steady (steady_<sys>): -consume-producers producers open loop (a push of
//     -items messages leaves every interval on its schedule, whatever the
//     previous one took) at -steady-rate msgs/s in all (0: half of this
//     run's regina_on, else 2,000), and -consume-consumers consumers
//     (batch -steady-batch, wait=true) for warmup + duration: produced and
//     consumed msgs/s, push→pop latency of every message consumed (its
//     payload carries its send time), CPU per consumed message.
//   - Wake (wake_<sys>, wake.go): a pop waiting on an empty partition, one
//     push, the time from the push's answer to the pop's answer.
//
// Ratios (the last line's keys): consume/jetstream_sync_B = Regina's
// queue-mode drain / JetStream's durable AckSync drain at batch B;
// consume/cpu_us_1 = broker + backends CPU µs per message of Regina's batch-1
// drain; steady/keepup = consumed / produced; steady/p99_ms;
// consume/wake_p50_ms.

// Phase names of block K (the batch is appended to the drains').
const (
	phConsRegina       = "consume_regina_"
	phConsReginaGroups = "consume_regina_groups_"
	phConsQueen        = "consume_queen_"
	phConsQueenGroups  = "consume_queen_groups_"
	phConsNATSSync     = "consume_jetstream_sync_"
	phConsNATS         = "consume_jetstream_"
	phConsRiver        = "consume_river"
	phSteadyRegina     = "steady_regina"
	phSteadyQueen      = "steady_queen"
)

// consumeBatches are the drains' pop batches.
var consumeBatches = []int{1, 10, 100}

// consumeGroups are the named groups of the group drains.
var consumeGroups = []string{"cg_a", "cg_b"}

// backlogFor is the drained backlog at batch size b.
func (h *harness) backlogFor(b int) int {
	if b == 1 {
		return h.cfg.consumeBacklog1
	}
	return h.cfg.consumeBacklog
}

// drainTimeout bounds one drain.
func (h *harness) drainTimeout() time.Duration {
	return max(10*(h.cfg.warmup+h.cfg.duration), 5*time.Minute)
}

// drainPhase runs consumers until total messages are consumed (or the run stops
// or drainTimeout passes) and records the phase: msgs/s is the messages
// over the time to the last one, latency per pop+ack round.
func (h *harness) drainPhase(name string, round, consumers, total int, g procGroups,
	consume func(ctx context.Context, w int, got *drainCount, rec *workerRec)) *PhaseResult {
	h.logf("  %-26s round %d: drain of %d messages, %d consumers", name, round+1, total, consumers)
	ctx, cancel := context.WithTimeout(h.stop, h.drainTimeout())
	defer cancel()
	recs := make([]*workerRec, consumers)
	a := g.snap()
	got := &drainCount{start: time.Now()}
	var wg sync.WaitGroup
	for w := range consumers {
		recs[w] = &workerRec{}
		wg.Go(func() { consume(ctx, w, got, recs[w]) })
	}
	wg.Wait()
	b := g.snap()
	res := &PhaseResult{Name: name, Round: round, Msgs: got.n.Load()}
	res.Window = time.Duration(got.last.Load()).Seconds()
	if got.n.Load() < int64(total) {
		res.Partial = true
	}
	res.tally(recs)
	res.CPU = cpuBetween(a, b)
	line := fmt.Sprintf("    -> %s msgs/s (%d in %.1f s), pop+ack p50 %s ms, p99 %s ms", fmtRate(res.MsgsPerSec), res.Msgs, res.Window,
		fmtMs(res.P50), fmtMs(res.P99))
	if res.Errors > 0 || res.Partial {
		line += fmt.Sprintf(", errors %d, partial %t (%s)", res.Errors, res.Partial, res.ErrSample)
	}
	h.logf("%s, cpu %s", line, cpuLine(res.CPU))
	h.results = append(h.results, res)
	return res
}

// drainCount counts a drain's messages and remembers when the latest came
// (the drain's end: a consumer may go on waiting for more).
type drainCount struct {
	n     atomic.Int64
	last  atomic.Int64 // since start, ns
	start time.Time
}

func (d *drainCount) add(k int) {
	d.n.Add(int64(k))
	d.stamp()
}

func (d *drainCount) set(k int64) {
	if d.n.Swap(k) != k {
		d.stamp()
	}
}

func (d *drainCount) stamp() {
	t := int64(time.Since(d.start))
	for {
		old := d.last.Load()
		if t <= old || d.last.CompareAndSwap(old, t) {
			return
		}
	}
}

// consumeBatching reads the broker's consume batcher counters
// (regina_consume_*_total): requests and the transactions that served them,
// per kind; "" when the server has none (Queen).
func consumeBatching(baseURL string) string {
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(baseURL + "/metrics/prometheus")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return ""
	}
	v := map[string]string{}
	for line := range strings.SplitSeq(string(body), "\n") {
		for _, k := range []string{"batches", "requests"} {
			for _, kind := range []string{"pop", "ack"} {
				prefix := "regina_consume_" + k + `_total{kind="` + kind + `"} `
				if rest, ok := strings.CutPrefix(line, prefix); ok {
					v[kind+k] = rest
				}
			}
		}
	}
	if len(v) < 4 {
		return ""
	}
	return fmt.Sprintf("pops %s in %s transactions, acks %s in %s", v["poprequests"], v["popbatches"], v["ackrequests"], v["ackbatches"])
}

// consumeMsg is the part of a popped message a consumer needs.
type consumeMsg struct {
	TransactionID string          `json:"transactionId"`
	PartitionID   string          `json:"partitionId"`
	LeaseID       string          `json:"leaseId"`
	Data          json.RawMessage `json:"data"`
}

// batchConsumer is one HTTP connection running "pop up to B, ack them all"
// (Regina and Queen speak the same API).
type batchConsumer struct {
	hc             *httpClient
	popURI, ackURI string
	group          string
	req            *fasthttp.Request
	resp           *fasthttp.Response
	ack            []byte
}

func newBatchConsumer(baseURL, queue, group string, batch int, wait string) *batchConsumer {
	u := baseURL + "/api/v1/pop/queue/" + queue + "?batch=" + strconv.Itoa(batch) + "&" + wait
	if group != "" {
		u += "&consumerGroup=" + group
	}
	return &batchConsumer{hc: newHTTPClient(baseURL), popURI: u, ackURI: baseURL + "/api/v1/ack/batch", group: group,
		req: fasthttp.AcquireRequest(), resp: fasthttp.AcquireResponse()}
}

func (c *batchConsumer) close() {
	c.hc.hc.CloseIdleConnections()
	fasthttp.ReleaseRequest(c.req)
	fasthttp.ReleaseResponse(c.resp)
}

// step pops up to B messages and acks them all; it returns them (nil on
// 204 or a failure, recorded in rec).
func (c *batchConsumer) step(rec *workerRec) []consumeMsg {
	req, resp := c.req, c.resp
	req.Reset()
	req.Header.SetMethod(fasthttp.MethodGet)
	req.SetRequestURI(c.popURI)
	if err := c.hc.hc.Do(req, resp); err != nil {
		rec.fail(err)
		return nil
	}
	switch resp.StatusCode() {
	case http.StatusNoContent:
		return nil
	case http.StatusOK:
	default:
		rec.fail(fmt.Errorf("pop: HTTP %d: %s", resp.StatusCode(), tailString(string(resp.Body()), 200)))
		return nil
	}
	var a struct {
		Messages []consumeMsg `json:"messages"`
	}
	if err := json.Unmarshal(resp.Body(), &a); err != nil {
		rec.fail(fmt.Errorf("pop answer: %w", err))
		return nil
	}
	if len(a.Messages) == 0 {
		rec.fail(errors.New("pop answered 200 with no message"))
		return nil
	}
	c.ack = append(c.ack[:0], `{"acknowledgments":[`...)
	for i, m := range a.Messages {
		if i > 0 {
			c.ack = append(c.ack, ',')
		}
		c.ack = fmt.Appendf(c.ack, `{"transactionId":%q,"partitionId":%q,"leaseId":%q,"status":"completed"}`,
			m.TransactionID, m.PartitionID, m.LeaseID)
	}
	c.ack = append(c.ack, ']')
	if c.group != "" {
		c.ack = fmt.Appendf(c.ack, `,"consumerGroup":%q`, c.group)
	}
	c.ack = append(c.ack, '}')
	setPostJSON(req, c.ackURI, c.ack)
	if err := c.hc.hc.Do(req, resp); err != nil {
		rec.fail(err)
		return nil
	}
	if resp.StatusCode() != http.StatusOK {
		rec.fail(fmt.Errorf("ack: HTTP %d: %s", resp.StatusCode(), tailString(string(resp.Body()), 200)))
		return nil
	}
	return a.Messages
}

// httpDrainWork is a drain consumer of queue: group "" is queue mode. It
// stops when mine (its group's count) reaches total; every message also
// counts in the phase's got.
func httpDrainWork(baseURL, queue, group string, mine *atomic.Int64, batch, total int) func(ctx context.Context, w int, got *drainCount, rec *workerRec) {
	return func(ctx context.Context, _ int, got *drainCount, rec *workerRec) {
		c := newBatchConsumer(baseURL, queue, group, batch, "wait=false")
		defer c.close()
		count := func() int64 {
			if mine != nil {
				return mine.Load()
			}
			return got.n.Load()
		}
		for ctx.Err() == nil && count() < int64(total) {
			t0 := time.Now()
			ms := c.step(rec)
			if len(ms) == 0 {
				if rec.errors > 100 {
					return
				}
				continue
			}
			if mine != nil {
				mine.Add(int64(len(ms)))
			}
			got.add(len(ms))
			rec.ops++
			rec.lat = append(rec.lat, uint32(min(time.Since(t0).Microseconds(), 1<<32-1)))
		}
	}
}

// httpDrains runs one system's drains (Regina's or Queen's API at url): for
// each batch, a backlog, its queue-mode drain, then its drain by the named
// groups.
func (h *harness) httpDrains(url, sys string, r int, g procGroups, queueMode, groups string) error {
	c := h.cfg
	parts := make([]int, c.partitions)
	for i := range parts {
		parts[i] = i
	}
	for _, bsz := range consumeBatches {
		if h.stop.Err() != nil {
			return nil
		}
		n := h.backlogFor(bsz)
		queue := "cmp_cons_" + sys + "_" + strconv.Itoa(r) + "_" + strconv.Itoa(bsz) + "_" + h.runTag
		if _, err := configureQueue(h.stop, url, queue, 3600); err != nil {
			return err
		}
		t := time.Now()
		if err := h.pushSpreadN(url, queue, parts, (n+len(parts)-1)/len(parts), max(c.itemsLarge, c.items), h.phaseTag(r, queue)); err != nil {
			return fmt.Errorf("backlog of %s: %w", queue, err)
		}
		total := ((n + len(parts) - 1) / len(parts)) * len(parts)
		h.logf("  backlog of %d messages in %s written in %s", total, queue, time.Since(t).Round(time.Millisecond))
		h.drainPhase(queueMode+strconv.Itoa(bsz), r, c.consumeConsumers, total, g, httpDrainWork(url, queue, "", nil, bsz, total))
		if s := consumeBatching(url); s != "" {
			h.logf("    broker's consume batcher so far: %s", s)
		}
		if h.stop.Err() != nil {
			return nil
		}
		// Both named groups read the same backlog, each to its end.
		per := c.consumeConsumers
		counts := make([]atomic.Int64, len(consumeGroups))
		h.drainPhase(groups+strconv.Itoa(bsz), r, per*len(consumeGroups), total*len(consumeGroups), g,
			func(ctx context.Context, w int, got *drainCount, rec *workerRec) {
				k := w / per
				httpDrainWork(url, queue, consumeGroups[k], &counts[k], bsz, total)(ctx, w, got, rec)
			})
	}
	return nil
}

// natsDrains runs JetStream's drains of mode: per batch, a stream with the
// backlog and one durable pull consumer shared by the consumers.
func (h *harness) natsDrains(mode natsMode, r int) error {
	c := h.cfg
	p, err := h.jetStream(h.stop, mode)
	if err != nil {
		return err
	}
	g := h.procs(nil)
	g.nats = p.srv.pid
	phase := phConsNATS
	if mode == natsSyncAlways {
		phase = phConsNATSSync
	}
	for _, bsz := range consumeBatches {
		if h.stop.Err() != nil {
			return nil
		}
		n := h.backlogFor(bsz)
		stream := fmt.Sprintf("REGINA_CONS_%s_%d_%d", strings.ToUpper(h.runTag), r, bsz)
		root := fmt.Sprintf("regina-cons.%s.%d.%d", h.runTag, r, bsz)
		subjects, err := p.addStream(stream, root, time.Hour, c.partitions)
		if err != nil {
			return err
		}
		js, err := p.nc.JetStream(nats.PublishAsyncMaxPending(1024))
		if err != nil {
			return err
		}
		t := time.Now()
		for i := range n {
			if _, err := js.PublishAsync(subjects[i%len(subjects)], h.wl.payloads[i%nPayloads]); err != nil {
				return fmt.Errorf("backlog of %s: %w", stream, err)
			}
			if i%512 == 511 || i == n-1 {
				select {
				case <-js.PublishAsyncComplete():
				case <-time.After(5 * time.Minute):
					return fmt.Errorf("backlog of %s: not acknowledged in 5 minutes", stream)
				}
			}
		}
		durable := "drain"
		if _, err := js.AddConsumer(stream, &nats.ConsumerConfig{Durable: durable, AckPolicy: nats.AckExplicitPolicy,
			MaxAckPending: -1, AckWait: time.Minute}); err != nil {
			return fmt.Errorf("consumer on %s: %w", stream, err)
		}
		h.logf("  backlog of %d messages in stream %s written in %s", n, stream, time.Since(t).Round(time.Millisecond))
		h.drainPhase(phase+strconv.Itoa(bsz), r, c.consumeConsumers, n, g, func(ctx context.Context, w int, got *drainCount, rec *workerRec) {
			nc, err := connectJetStream(p.srv.url, "regina-compare-consumer-"+strconv.Itoa(w))
			if err != nil {
				rec.fail(err)
				return
			}
			defer nc.Close()
			cjs, _ := nc.JetStream()
			sub, err := cjs.PullSubscribe("", durable, nats.Bind(stream, durable))
			if err != nil {
				rec.fail(err)
				return
			}
			for ctx.Err() == nil && got.n.Load() < int64(n) {
				t0 := time.Now()
				msgs, err := sub.Fetch(bsz, nats.MaxWait(time.Second))
				if err != nil && !errors.Is(err, nats.ErrTimeout) {
					rec.fail(err)
					if rec.errors > 100 {
						return
					}
				}
				for _, m := range msgs {
					if mode == natsSyncAlways {
						err = m.AckSync()
					} else {
						err = m.Ack()
					}
					if err != nil {
						rec.fail(err)
					}
				}
				if len(msgs) > 0 {
					got.add(len(msgs))
					rec.ops++
					rec.lat = append(rec.lat, uint32(min(time.Since(t0).Microseconds(), 1<<32-1)))
				}
			}
		})
	}
	return nil
}

// riverCountWorker completes every job at once, counting them.
type riverCountWorker struct {
	river.WorkerDefaults[riverJob]
	done *atomic.Int64
}

// Work completes the job.
func (w *riverCountWorker) Work(context.Context, *river.Job[riverJob]) error {
	w.done.Add(1)
	return nil
}

// riverDrain inserts the backlog as River jobs, then starts a client whose
// workers complete them; the phase ends when River has marked every job
// completed (its completer batches those updates).
func (h *harness) riverDrain(r int) error {
	c := h.cfg
	p, err := h.riverPeer(h.stop)
	if err != nil {
		return err
	}
	n := h.cfg.consumeBacklog
	ins, err := p.client(nil)
	if err != nil {
		return err
	}
	tag := h.phaseTag(r, "river-drain")
	params := make([]river.InsertManyParams, 0, 1000)
	t := time.Now()
	for i := 0; i < n; i += 1000 {
		params = params[:0]
		for k := i; k < min(i+1000, n); k++ {
			params = append(params, river.InsertManyParams{Args: riverJob{Tx: tag + "-" + strconv.Itoa(k), Payload: h.wl.payloads[k%nPayloads]}})
		}
		if _, err := ins.InsertMany(h.stop, params); err != nil {
			return fmt.Errorf("river backlog: %w", err)
		}
	}
	h.logf("  backlog of %d River jobs written in %s", n, time.Since(t).Round(time.Millisecond))
	var done atomic.Int64
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverCountWorker{done: &done})
	cl, err := p.client(&river.Config{Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10 * c.consumeConsumers}},
		Workers: workers, FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond})
	if err != nil {
		return err
	}
	countSQL := "SELECT count(*) FROM " + pgx.Identifier{p.schema, "river_job"}.Sanitize() + " WHERE state = 'completed' AND args->>'tx' LIKE $1"
	h.drainPhase(phConsRiver, r, 1, n, h.procs(nil), func(ctx context.Context, _ int, got *drainCount, rec *workerRec) {
		if err := cl.Start(ctx); err != nil {
			rec.fail(err)
			return
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = cl.Stop(sctx)
		}()
		for ctx.Err() == nil {
			var k int64
			if err := p.pool.QueryRow(ctx, countSQL, tag+"-%").Scan(&k); err != nil {
				rec.fail(err)
				return
			}
			got.set(k)
			rec.ops = k // an op is a job here
			if k >= int64(n) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	h.logf("  River workers ran %d jobs", done.Load())
	return nil
}

// steady runs the steady phase on the API at url (queue fresh): open-loop
// producers at rate msgs/s and batch consumers together.
func (h *harness) steady(name, url, queue string, r int, g procGroups, rate float64) {
	c := h.cfg
	now := time.Now()
	pc := &phaseClock{start: now, warmEnd: now.Add(c.warmup), end: now.Add(c.warmup + c.duration)}
	h.logf("  %-26s round %d: %.0f msgs/s offered by %d producers, %d consumers (batch %d), %s warmup + %s",
		name, r+1, rate, c.consumeProducers, c.consumeConsumers, c.steadyBatch, c.warmup, c.duration)
	var a, b snapshot
	var produced, consumed, pops atomic.Int64
	var mu sync.Mutex
	var lat []uint32
	var errs atomic.Int64
	var errSample atomic.Value
	fail := func(err error) {
		errs.Add(1)
		errSample.CompareAndSwap(nil, err.Error())
	}
	interval := time.Duration(float64(time.Second) * float64(c.items*c.consumeProducers) / rate)
	tag := h.phaseTag(r, name)
	var wg sync.WaitGroup
	for w := range c.consumeProducers {
		wg.Go(func() {
			hc := newHTTPClient(url)
			defer hc.hc.CloseIdleConnections()
			var body []byte
			next := pc.start.Add(time.Duration(w) * interval / time.Duration(c.consumeProducers))
			for seq := 0; running(h.stop, pc); seq++ {
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
				next = next.Add(interval)
				body = append(body[:0], `{"items":[`...)
				sent := time.Now().UnixMicro()
				for i := range c.items {
					if i > 0 {
						body = append(body, ',')
					}
					body = fmt.Appendf(body, `{"queue":%q,"partition":"p%d","transactionId":"%s-%d-%d-%d","payload":{"ts":%d,"pad":%q}}`,
						queue, (w*7+seq)%c.partitions, tag, w, seq, i, sent, strings.Repeat("x", max(c.payload-40, 1)))
				}
				body = append(body, "]}"...)
				ans := hc.push(body, c.items)
				q, _, err := pushVerdicts(&ans, c.items)
				if err != nil {
					fail(err)
					continue
				}
				if pc.in(time.Now()) {
					produced.Add(int64(q))
				}
			}
		})
	}
	for range c.consumeConsumers {
		wg.Go(func() {
			cons := newBatchConsumer(url, queue, "", c.steadyBatch, "wait=true&timeout=1000")
			defer cons.close()
			rec := &workerRec{}
			var mine []uint32
			for running(h.stop, pc) {
				ms := cons.step(rec)
				t := time.Now()
				if !pc.in(t) {
					continue
				}
				consumed.Add(int64(len(ms)))
				if len(ms) > 0 {
					pops.Add(1)
				}
				for _, m := range ms {
					var p struct {
						TS int64 `json:"ts"`
					}
					if json.Unmarshal(m.Data, &p) == nil && p.TS > 0 {
						mine = append(mine, uint32(min(max(t.UnixMicro()-p.TS, 0), 1<<32-1)))
					}
				}
			}
			if rec.errors > 0 {
				fail(errors.New(rec.errSample))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	time.Sleep(time.Until(pc.warmEnd))
	a = g.snap()
	wg.Wait()
	b = g.snap()
	res := &PhaseResult{Name: name, Round: r, Window: b.at.Sub(a.at).Seconds(), Msgs: consumed.Load(), Ops: pops.Load(),
		Errors: errs.Load()}
	if s, ok := errSample.Load().(string); ok {
		res.ErrSample = s
	}
	if res.Window > 0 {
		res.MsgsPerSec = float64(consumed.Load()) / res.Window
		res.Produced = float64(produced.Load()) / res.Window
	}
	slices.Sort(lat)
	res.P50, res.P99, res.P999 = quantileMs(lat, 0.50), quantileMs(lat, 0.99), quantileMs(lat, 0.999)
	res.CPU = cpuBetween(a, b)
	h.logf("    -> produced %s, consumed %s msgs/s, push→pop p50 %s ms, p99 %s ms, errors %d, cpu %s",
		fmtRate(res.Produced), fmtRate(res.MsgsPerSec), fmtMs(res.P50), fmtMs(res.P99), res.Errors, cpuLine(res.CPU))
	h.results = append(h.results, res)
}

// steadyRate is the steady phase's offered load: -steady-rate, else half of
// this run's regina_on (the push capacity at this shape), else 2,000.
func (h *harness) steadyRate() float64 {
	if h.cfg.steadyRate > 0 {
		return h.cfg.steadyRate
	}
	if s := summarize(h.byName(phReginaOn, "")); s.n > 0 && s.rate > 0 {
		return s.rate / 2
	}
	return 2000
}

// blockConsume is block K.
func (h *harness) blockConsume(r int) error {
	b, err := h.startBroker(h.main, true, "regina-consume-r"+strconv.Itoa(r+1))
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			h.stopBroker()
		}
	}()
	if err := h.httpConsume(b.url, "regina", "cmp_steady_", r, h.procs(b), phConsRegina, phConsReginaGroups, phSteadyRegina, phWakeRegina); err != nil {
		return err
	}
	h.stopBroker()
	stopped = true
	for _, mode := range []natsMode{natsSyncAlways, natsDefault} {
		if h.stop.Err() != nil {
			return nil
		}
		if err := h.natsDrains(mode, r); err != nil {
			return err
		}
	}
	if h.stop.Err() == nil {
		if err := h.riverDrain(r); err != nil {
			return err
		}
	}
	if q := h.queen; q != nil && h.stop.Err() == nil {
		return h.httpConsume(q.url, "queen", "cmp_steady_q_", r, q.procs(h), phConsQueen, phConsQueenGroups, phSteadyQueen, phWakeQueen)
	}
	return nil
}

// httpConsume runs a Queen-API broker's drains (queue mode and groups),
// then its steady phase on a queue named steadyPrefix + round + run tag,
// then its long-poll wake-ups (wake).
func (h *harness) httpConsume(url, system, steadyPrefix string, r int, g procGroups, phDrain, phGroups, phSteady, phWake string) error {
	if err := h.httpDrains(url, system, r, g, phDrain, phGroups); err != nil {
		return err
	}
	if h.stop.Err() != nil {
		return nil
	}
	q := steadyPrefix + strconv.Itoa(r) + "_" + h.runTag
	if _, err := configureQueue(h.stop, url, q, 3600); err != nil {
		return err
	}
	h.steady(phSteady, url, q, r, g, h.steadyRate())
	if h.stop.Err() != nil {
		return nil
	}
	return h.wakePhase(h.stop, phWake, url, steadyPrefix+"wake_", r)
}

// consumeText writes block K's section of RESULTS.md and returns the last
// line's keys.
func (h *harness) consumeText(b *strings.Builder) string {
	if len(h.byName(phConsRegina+"1", "")) == 0 && len(h.byName(phSteadyRegina, "")) == 0 && len(h.byName(phWakeRegina, "")) == 0 {
		return ""
	}
	c := h.cfg
	fmt.Fprintf(b, "\n### Consume (block K)\n\n")
	fmt.Fprintf(b, "Drains: a backlog of %d messages (%d at batch 1) over %d partitions, %d-byte payloads, written first and not measured; "+
		"%d consumers each loop \"pop up to B (wait=false), ack them all (ack/batch)\" until the last ack; msgs/s = backlog / time to the "+
		"last ack. Groups: the same backlog read again by %d named consumer groups, %d consumers each (both groups' messages count). "+
		"JetStream: one durable pull consumer shared by the consumers, `Fetch(B)`, each message acked (`AckSync` on the "+
		"`sync_interval: always` server, `Ack` on the default one). River: the jobs inserted first, then one client with %d workers "+
		"completing them, until River has marked every job completed. CPU per message: broker + this run's backends (Regina), "+
		"nats-server (JetStream), backends (River; its client runs in the load generator).\n\n",
		c.consumeBacklog, c.consumeBacklog1, c.partitions, c.payload, c.consumeConsumers, len(consumeGroups), c.consumeConsumers, 10*c.consumeConsumers)
	bars := []ratio{}
	keys := []string{}
	for _, bsz := range consumeBatches {
		bar := map[int]float64{1: 0.5, 10: 1, 100: 2}[bsz]
		r := h.ratioOf("consume/jetstream_sync_"+strconv.Itoa(bsz), "Regina queue-mode drain / JetStream durable `AckSync`, batch "+strconv.Itoa(bsz),
			phConsRegina+strconv.Itoa(bsz), phConsNATSSync+strconv.Itoa(bsz), bar)
		bars = append(bars, r)
		keys = append(keys, r.key+"="+r.value())
		bars = append(bars, h.ratioOf("", "Regina two named groups / JetStream durable `AckSync` (per group: half), batch "+strconv.Itoa(bsz),
			phConsReginaGroups+strconv.Itoa(bsz), phConsNATSSync+strconv.Itoa(bsz), 2*bar))
	}
	b.WriteString("| ratio | value | per round | bar | verdict |\n|---|---|---|---|---|\n")
	for _, r := range bars {
		key := ""
		if r.key != "" {
			key = " (`" + r.key + "`)"
		}
		fmt.Fprintf(b, "| %s%s | **%s** | %s | ≥ %g | %s |\n", r.label, key, r.value(), r.roundsText(), r.bar, r.verdict())
	}
	cpu := h.cpuBarOf("consume/cpu_us_1", "Regina queue-mode drain at batch 1, pop+ack per message", phConsRegina+"1", 400)
	fmt.Fprintf(b, "| CPU µs per message drained%s (`%s`) | **%s** | %s | ≤ %g | %s |\n", ", "+cpu.label, cpu.key, cpu.value(), cpu.roundsText(), cpu.bar, cpu.verdict())
	keys = append(keys, cpu.key+"="+cpu.value())

	b.WriteString("\n| drain | batch 1 | batch 10 | batch 100 | CPU µs/msg at 1 / 10 / 100 |\n|---|---|---|---|---|\n")
	for _, row := range []struct{ label, prefix string }{
		{"Regina, queue mode", phConsRegina}, {"Regina, 2 named groups", phConsReginaGroups},
		{"JetStream durable, `AckSync`, `sync_interval: always`", phConsNATSSync}, {"JetStream durable, `Ack`, defaults", phConsNATS},
		{"upstream Queen, queue mode", phConsQueen}, {"upstream Queen, 2 named groups", phConsQueenGroups},
	} {
		cells := []string{}
		cpus := []string{}
		for _, bsz := range consumeBatches {
			s := summarize(h.byName(row.prefix+strconv.Itoa(bsz), ""))
			if s.n == 0 {
				cells = append(cells, "-")
				cpus = append(cpus, "-")
				continue
			}
			cells = append(cells, fmtRate(s.rate))
			cpus = append(cpus, fmtOptUs(consumeCPU(h.byName(row.prefix+strconv.Itoa(bsz), ""))))
		}
		fmt.Fprintf(b, "| %s | %s | %s |\n", row.label, strings.Join(cells, " | "), strings.Join(cpus, " / "))
	}
	if s := summarize(h.byName(phConsRiver, "")); s.n > 0 {
		fmt.Fprintf(b, "| River workers completing jobs | %s (River fetches in its own batches) | | | %s |\n", fmtRate(s.rate),
			fmtOptUs(consumeCPU(h.byName(phConsRiver, ""))))
	}

	b.WriteString("\nSteady: producers open loop (a push of " + strconv.Itoa(c.items) + " messages leaves on its schedule) and " +
		strconv.Itoa(c.consumeConsumers) + " consumers (batch " + strconv.Itoa(c.steadyBatch) + ", wait=true) together; latency is push→pop " +
		"of every message consumed in the window.\n\n| phase | offered msgs/s | produced | consumed | keepup | p50 ms | p99 ms | CPU µs per consumed |\n|---|---|---|---|---|---|---|---|\n")
	for _, ph := range []string{phSteadyRegina, phSteadyQueen} {
		rs := h.byName(ph, "")
		if len(rs) == 0 {
			continue
		}
		var prod, cons, p50, p99, keep []float64
		for _, r := range rs {
			prod, cons, p50, p99 = append(prod, r.Produced), append(cons, r.MsgsPerSec), append(p50, r.P50), append(p99, r.P99)
			if r.Produced > 0 {
				keep = append(keep, r.MsgsPerSec/r.Produced)
			}
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", ph, fmtRate(h.steadyRate()), fmtRate(median(prod)), fmtRate(median(cons)),
			fmtRatio(median(keep)), fmtMs(median(p50)), fmtMs(median(p99)), fmtOptUs(consumeCPU(rs)))
		if ph == phSteadyRegina {
			keys = append(keys, "steady/keepup="+fmtRatio(median(keep)), "steady/p99_ms="+strconv.FormatFloat(median(p99), 'f', 0, 64))
		}
	}
	keys = append(keys, h.wakeText(b)...)
	return strings.Join(keys, " ")
}

// wakeText writes the long-poll wake-up rows of block K and returns the
// last line's key (consume/wake_p50_ms, Regina's median over rounds).
func (h *harness) wakeText(b *strings.Builder) []string {
	var keys []string
	header := false
	for _, ph := range []string{phWakeRegina, phWakeQueen} {
		rs := h.byName(ph, "")
		if len(rs) == 0 {
			continue
		}
		if !header {
			fmt.Fprintf(b, "\nLong-poll wake-up: a pop waits (`wait=true`, one partition, autoAck) on an empty partition, one message "+
				"is pushed %s later; latency from the push's answer (its commit) to the pop's answer, 0 when the pop was answered "+
				"first; %d samples a round, medians over rounds.\n\n| phase | p50 ms | p99 ms | samples | errors |\n|---|---|---|---|---|\n",
				wakeSettle, wakeSamples)
			header = true
		}
		var p50, p99 []float64
		var n, errs int64
		for _, r := range rs {
			p50, p99 = append(p50, r.P50), append(p99, r.P99)
			n, errs = n+r.Ops, errs+r.Errors
		}
		fmt.Fprintf(b, "| %s | %s | %s | %d | %d |\n", ph, fmtMs(median(p50)), fmtMs(median(p99)), n, errs)
		if ph == phWakeRegina {
			keys = append(keys, "consume/wake_p50_ms="+strconv.FormatFloat(median(p50), 'f', 2, 64))
		}
	}
	return keys
}

// consumeCPU is the median over rounds of the CPU µs per message consumed
// (broker + backends, or nats-server, whichever the phase measured).
func consumeCPU(rs map[int]*PhaseResult) *float64 {
	var v []float64
	for _, r := range rs {
		if r.MsgsPerSec <= 0 {
			continue
		}
		var cores float64
		known := false
		for _, p := range []*float64{r.CPU.Broker, r.CPU.PGOurs, r.CPU.NATS} {
			if p != nil {
				cores += *p
				known = true
			}
		}
		if known {
			v = append(v, cores/r.MsgsPerSec*1e6)
		}
	}
	if len(v) == 0 {
		return nil
	}
	m := median(v)
	return &m
}
