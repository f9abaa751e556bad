package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/internal/pushanswer"
	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
)

// PhaseResult is what one phase of one round measured.
type PhaseResult struct {
	Name  string `json:"name"`
	Round int    `json:"round"`
	// Label of the shape point (scale mode), e.g. "partitions=1000".
	Point string `json:"point,omitempty"`
	// MsgsPerSec counts the messages of the expected verdict (accepted for
	// a fresh phase, rejected as duplicates for a storm) answered inside the
	// measured window, per second of it.
	MsgsPerSec float64 `json:"msgs_per_sec"`
	// Produced is the messages pushed per second of a steady phase (block
	// K), where MsgsPerSec counts the messages consumed.
	Produced float64 `json:"produced_per_sec,omitempty"`
	// OpsPerSec counts pushes (Regina, ceiling) or messages (JetStream).
	OpsPerSec float64 `json:"ops_per_sec"`
	Msgs      int64   `json:"msgs"`
	Ops       int64   `json:"ops"`
	// Anomalies are messages answered with the other verdict (a fresh
	// message called duplicate, or a replayed one accepted again).
	Anomalies int64   `json:"anomalies"`
	Errors    int64   `json:"errors"`
	ErrSample string  `json:"error_sample,omitempty"`
	Window    float64 `json:"window_seconds"`
	// Latency per op (a push, or one message's publish-to-ack), in ms.
	P50       float64  `json:"p50_ms"`
	P99       float64  `json:"p99_ms"`
	P999      float64  `json:"p999_ms"`
	CPU       CPU      `json:"cpu"`
	RSSMaxMiB *float64 `json:"broker_rss_max_mib,omitempty"`
	Partial   bool     `json:"partial,omitempty"`
	// Cache is the broker's /metrics dedupCache section over the phase
	// (counters as deltas from the phase start, sizes at its end), when the
	// broker reports one.
	Cache *cacheStats `json:"dedup_cache,omitempty"`
	// Timeline is the messages of the expected verdict answered in each
	// second from the phase's start, warmup included (phases that ask for
	// it: the restart phase's).
	Timeline []int64 `json:"timeline,omitempty"`
}

// cacheStats is the part of the broker's /metrics "dedupCache" section the
// report shows.
type cacheStats struct {
	Hits       int64 `json:"hits"`
	Sentinels  int64 `json:"sentinels"`
	Evictions  int64 `json:"evictions"`
	Partitions int64 `json:"partitions"`
	Hashes     int64 `json:"hashes"`
	Bytes      int64 `json:"bytes"`
	Hydrations struct {
		Started  int64 `json:"started"`
		Finished int64 `json:"finished"`
		Failed   int64 `json:"failed"`
		Aborted  int64 `json:"aborted"`
	} `json:"hydrations"`
	SentinelsByReason map[string]int64 `json:"sentinelsByReason"`
}

// brokerCache reads the dedupCache section of the broker's /metrics; nil
// when there is none.
func brokerCache(baseURL string) *cacheStats {
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(baseURL + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var m struct {
		DedupCache *cacheStats `json:"dedupCache"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&m) != nil {
		return nil
	}
	return m.DedupCache
}

// cacheDelta turns two readings into the phase's figures.
func cacheDelta(a, b *cacheStats) *cacheStats {
	if a == nil || b == nil {
		return b
	}
	d := *b
	d.Hits -= a.Hits
	d.Sentinels -= a.Sentinels
	d.Evictions -= a.Evictions
	d.Hydrations.Started -= a.Hydrations.Started
	d.Hydrations.Finished -= a.Hydrations.Finished
	d.Hydrations.Failed -= a.Hydrations.Failed
	d.Hydrations.Aborted -= a.Hydrations.Aborted
	d.SentinelsByReason = map[string]int64{}
	for k, v := range b.SentinelsByReason {
		if v -= a.SentinelsByReason[k]; v != 0 {
			d.SentinelsByReason[k] = v
		}
	}
	return &d
}

func (c *cacheStats) String() string {
	if c == nil {
		return "-"
	}
	s := fmt.Sprintf("hits %d, full probes %d", c.Hits, c.Sentinels)
	if len(c.SentinelsByReason) > 0 {
		keys := make([]string, 0, len(c.SentinelsByReason))
		for k := range c.SentinelsByReason {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %d", k, c.SentinelsByReason[k]))
		}
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s + fmt.Sprintf(", evictions %d, hydrations %d/%d done, holds %d hashes of %d partitions in %.0f MiB",
		c.Evictions, c.Hydrations.Finished, c.Hydrations.Started, c.Hashes, c.Partitions, float64(c.Bytes)/(1<<20))
}

// phaseClock is a phase's schedule: warmup from start to warmEnd, measured
// window from warmEnd to end. An op counts when it completes in the window.
type phaseClock struct{ start, warmEnd, end time.Time }

func (pc *phaseClock) in(t time.Time) bool { return !t.Before(pc.warmEnd) && !t.After(pc.end) }

func running(ctx context.Context, pc *phaseClock) bool {
	return ctx.Err() == nil && time.Now().Before(pc.end)
}

// workerRec is one worker's tally. Only its own goroutine(s) write it.
type workerRec struct {
	lat       []uint32 // microseconds per op completed in the window
	msgs      int64
	ops       int64
	anomalies int64
	errors    int64
	errSample string
	// okSeqs are the pushes fully accepted (fresh phases): what a storm
	// replays.
	okSeqs []int32
	// perSec counts the messages of the expected verdict answered in each
	// second from the phase's start, warmup included (nil: not kept).
	perSec []int64
}

func (r *workerRec) fail(err error) {
	r.errors++
	if r.errSample == "" && err != nil {
		r.errSample = err.Error()
	}
}

// record tallies one op that completed at t1 after starting at t0, carrying
// msgs messages of the expected verdict and bad of the other.
func (r *workerRec) record(pc *phaseClock, t0, t1 time.Time, msgs, bad int) {
	if r.perSec != nil {
		if s := int(t1.Sub(pc.start) / time.Second); s >= 0 && s < len(r.perSec) {
			r.perSec[s] += int64(msgs)
		}
	}
	if !pc.in(t1) {
		return
	}
	r.ops++
	r.msgs += int64(msgs)
	r.anomalies += int64(bad)
	us := t1.Sub(t0).Microseconds()
	r.lat = append(r.lat, uint32(min(max(us, 0), 1<<32-1)))
}

type workFunc func(ctx context.Context, w int, pc *phaseClock, rec *workerRec)

// phaseSpec names a phase and says whose CPU to read.
type phaseSpec struct {
	name      string
	round     int
	point     string
	workers   int
	procs     procGroups
	brokerURL string // to read the broker's /metrics before and after
	// warmup, when > 0, replaces -warmup for this phase.
	warmup time.Duration
	// timeline keeps the phase's msgs/s per second (PhaseResult.Timeline).
	timeline bool
}

// drive runs one phase: spec.workers goroutines of work for warmup +
// duration, CPU read at the end of the warmup and at the end, the broker's
// RSS every half second. It returns the result and each worker's accepted
// pushes (for a storm to replay).
func (h *harness) drive(spec phaseSpec, work workFunc) (*PhaseResult, [][]int32) {
	ctx := h.stop
	now := time.Now()
	warmup := h.cfg.warmup
	if spec.warmup > 0 {
		warmup = spec.warmup
	}
	pc := &phaseClock{start: now, warmEnd: now.Add(warmup), end: now.Add(warmup + h.cfg.duration)}
	h.logf("  %-18s round %d%s: %s warmup + %s", spec.name, spec.round+1, pointSuffix(spec.point), warmup.Round(time.Millisecond), h.cfg.duration)

	var (
		a, b    snapshot
		haveA   bool
		stopAt  time.Time
		rssMax  int64
		rssSeen bool
	)
	var cache0 *cacheStats
	if spec.brokerURL != "" {
		cache0 = brokerCache(spec.brokerURL)
	}
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		wt := time.NewTimer(time.Until(pc.warmEnd))
		defer wt.Stop()
		select {
		case <-wt.C:
		case <-ctx.Done():
			stopAt = time.Now()
			return
		}
		a, haveA = spec.procs.snap(), true
		et := time.NewTimer(time.Until(pc.end))
		defer et.Stop()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			if spec.procs.broker > 0 {
				if rss, err := readRSS(spec.procs.broker); err == nil {
					rssMax, rssSeen = max(rssMax, rss), true
				}
			}
			select {
			case <-tick.C:
				continue
			case <-et.C:
			case <-ctx.Done():
				stopAt = time.Now()
			}
			b = spec.procs.snap()
			return
		}
	}()

	recs := make([]*workerRec, spec.workers)
	var wg sync.WaitGroup
	for w := range spec.workers {
		recs[w] = &workerRec{}
		if spec.timeline {
			recs[w].perSec = make([]int64, int(pc.end.Sub(pc.start)/time.Second)+1)
		}
		wg.Go(func() {
			work(ctx, w, pc, recs[w])
		})
	}
	wg.Wait()
	<-samplerDone

	res := &PhaseResult{Name: spec.name, Round: spec.round, Point: spec.point}
	if spec.brokerURL != "" {
		res.Cache = cacheDelta(cache0, brokerCache(spec.brokerURL))
	}
	end := pc.end
	if !stopAt.IsZero() && stopAt.Before(end) {
		end = stopAt
		res.Partial = true
	}
	res.Window = end.Sub(pc.warmEnd).Seconds()
	seqs := make([][]int32, spec.workers)
	for w, r := range recs {
		res.Msgs += r.msgs
		seqs[w] = r.okSeqs
		if r.perSec != nil {
			if res.Timeline == nil {
				res.Timeline = make([]int64, len(r.perSec))
			}
			for i, v := range r.perSec {
				res.Timeline[i] += v
			}
		}
	}
	res.tally(recs)
	if haveA && !b.at.IsZero() {
		res.CPU = cpuBetween(a, b)
	}
	if rssSeen {
		v := float64(rssMax) / (1 << 20)
		res.RSSMaxMiB = &v
	}
	line := fmt.Sprintf("    -> %s msgs/s, p50 %s ms, p99 %s ms", fmtRate(res.MsgsPerSec), fmtMs(res.P50), fmtMs(res.P99))
	if res.Anomalies > 0 || res.Errors > 0 {
		line += fmt.Sprintf(", anomalies %d, errors %d", res.Anomalies, res.Errors)
		if res.ErrSample != "" {
			line += " (" + res.ErrSample + ")"
		}
	}
	line += ", cpu " + cpuLine(res.CPU)
	if res.RSSMaxMiB != nil {
		line += fmt.Sprintf(", broker RSS %.0f MiB", *res.RSSMaxMiB)
	}
	h.logf("%s", line)
	if res.Cache != nil {
		h.logf("       dedup cache: %s", res.Cache)
	}
	h.results = append(h.results, res)
	return res, seqs
}

func pointSuffix(p string) string {
	if p == "" {
		return ""
	}
	return " [" + p + "]"
}

func quantileMs(sorted []uint32, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return float64(sorted[i]) / 1000
}

// ---------------------------------------------------------------- Regina over HTTP

// httpClient holds one keep-alive connection to the broker.
type httpClient struct {
	hc  *fasthttp.HostClient
	uri string
}

func newHTTPClient(baseURL string) *httpClient {
	addr := baseURL[len("http://"):]
	return &httpClient{
		hc: &fasthttp.HostClient{
			Addr:                          addr,
			MaxConns:                      1,
			ReadTimeout:                   30 * time.Second,
			WriteTimeout:                  30 * time.Second,
			MaxIdleConnDuration:           time.Minute,
			DisableHeaderNamesNormalizing: true,
			NoDefaultUserAgentHeader:      true,
			ReadBufferSize:                16 << 10,
		},
		uri: baseURL + "/api/v1/push",
	}
}

// push sends one body of nItems items and judges the answer as any
// producer would (internal/pushanswer): any 2xx, the body decides, so
// Regina's 201 and upstream Queen's 200 count alike.
func (c *httpClient) push(body []byte, nItems int) pushanswer.Answer {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	setPostJSON(req, c.uri, body)
	if err := c.hc.Do(req, resp); err != nil {
		return pushanswer.Failure(err)
	}
	return pushanswer.Read(resp.StatusCode(), resp.Body(), nItems)
}

// pushVerdicts reduces an answer to its queued and duplicate counts, or an
// error when it is not a full set of stored verdicts (an error status, a
// failed or buffered item, a bad body).
func pushVerdicts(a *pushanswer.Answer, nItems int) (queued, dup int, err error) {
	if a.Kind != pushanswer.OK {
		return 0, 0, a.Err
	}
	if a.Acked() != nItems {
		err = fmt.Errorf("HTTP %d with %d queued + %d duplicate + %d buffered + %d failed for %d items",
			a.Status, a.Queued, a.Duplicate, a.Buffered, a.Failed, nItems)
	}
	return a.Queued, a.Duplicate, err
}

// reginaWork pushes fresh bodies to queue (replay == nil, every item should
// be queued), or replays each worker's accepted pushes of an earlier phase
// in order, cycling (every item should be duplicate).
func (h *harness) reginaWork(baseURL, queue, tag string, replay [][]int32) workFunc {
	return func(ctx context.Context, w int, pc *phaseClock, rec *workerRec) {
		c := newHTTPClient(baseURL)
		defer c.hc.CloseIdleConnections()
		var src []int32
		if replay != nil {
			if src = replay[w]; len(src) == 0 {
				return
			}
		}
		n := h.wl.items
		buf := make([]byte, 0, 512*n)
		for k := 0; running(ctx, pc); k++ {
			seq := k
			if src != nil {
				seq = int(src[k%len(src)])
			}
			buf = h.wl.appendBody(buf[:0], queue, tag, w, seq)
			t0 := time.Now()
			ans := c.push(buf, n)
			t1 := time.Now()
			if ans.Kind != pushanswer.OK {
				rec.fail(ans.Err)
				time.Sleep(10 * time.Millisecond) // a dead broker must not turn this into a busy loop
				continue
			}
			q, d, err := pushVerdicts(&ans, n)
			if err != nil {
				rec.fail(err)
			}
			if src == nil {
				rec.record(pc, t0, t1, q, d)
				if q == n {
					rec.okSeqs = append(rec.okSeqs, int32(seq))
				}
			} else {
				rec.record(pc, t0, t1, d, q)
			}
		}
	}
}

// ---------------------------------------------------------------- the pgx ceiling

// fillBatch makes batch worker w's push seq to ref, of len(bodies) items:
// the transaction ids and payloads the broker would get for it, created at
// created (unix µs), with no watermark (a full-window probe). tx is scratch
// space for the ids; fillBatch returns it, grown as needed.
func (h *harness) fillBatch(batch *reginatype.PushBatch, ref reginatype.PartitionRef, bodies []partition.Body,
	tx []byte, tag string, w, seq int, created int64) []byte {
	batch.Reset()
	batch.Partition, batch.WindowHint, batch.Watermark = ref.ID, ref.WindowSeconds, reginatype.NoWatermark
	for i := range bodies {
		tx = appendTx(tx[:0], tag, w, seq, i)
		id := string(tx)
		bodies[i] = partition.Body{CreatedAt: created, TransactionID: id, Payload: h.wl.payloadOf(w, seq, i)}
		batch.Add(partition.HashTxID(id), partition.NewV7(), &bodies[i])
	}
	return tx
}

// ceilingWork calls queen.push_segment through pgx (sqlstore.Store.Push,
// the statement the broker runs) with the same batches the broker would
// send: same transaction ids and payloads, 16-byte xxh3 hashes, UUIDv7 ids,
// encoded frame bodies, a full-window probe. No broker in between.
func (h *harness) ceilingWork(store *sqlstore.Store, refs []reginatype.PartitionRef, tag string, replay [][]int32) workFunc {
	return func(ctx context.Context, w int, pc *phaseClock, rec *workerRec) {
		var src []int32
		if replay != nil {
			if src = replay[w]; len(src) == 0 {
				return
			}
		}
		n := h.wl.items
		batch := &reginatype.PushBatch{}
		tx := make([]byte, 0, 64)
		bodies := make([]partition.Body, n)
		for k := 0; running(ctx, pc); k++ {
			seq := k
			if src != nil {
				seq = int(src[k%len(src)])
			}
			ref := refs[h.wl.part(w, seq)%len(refs)]
			tx = h.fillBatch(batch, ref, bodies, tx, tag, w, seq, time.Now().UnixMicro())
			cctx, cancel := context.WithTimeout(h.hard, 30*time.Second)
			t0 := time.Now()
			res, err := store.Push(cctx, batch)
			t1 := time.Now()
			cancel()
			if err != nil {
				rec.fail(err)
				time.Sleep(10 * time.Millisecond)
				continue
			}
			d := len(res.DupIndex)
			if src == nil {
				rec.record(pc, t0, t1, n-d, d)
				if d == 0 {
					rec.okSeqs = append(rec.okSeqs, int32(seq))
				}
			} else {
				rec.record(pc, t0, t1, d, n-d)
			}
		}
	}
}

// ---------------------------------------------------------------- NATS JetStream

var errAckTimeout = errors.New("no publish ack within 30s of the phase end")

// natsWork publishes each push's items one message each, asynchronously
// with Nats-Msg-Id = the transaction id, to the partition's subject, at most
// h.natsPending in flight per connection (one connection per worker), to
// peer p's push stream. Acks are read in order by a second goroutine; an
// op is one message, its latency from the publish call's return to its
// ack. replay as for Regina.
func (h *harness) natsWork(p *natsPeer, tag string, replay [][]int32) workFunc {
	return func(ctx context.Context, w int, pc *phaseClock, rec *workerRec) {
		var src []int32
		if replay != nil {
			if src = replay[w]; len(src) == 0 {
				return
			}
		}
		nc, err := nats.Connect(p.srv.url, nats.Name("regina-compare"), nats.Timeout(5*time.Second))
		if err != nil {
			rec.fail(err)
			return
		}
		defer nc.Close()
		// In-flight publishes are bounded by sem, not by the client's own
		// stall (PublishAsyncMaxPending): that one can miss its wake-up when
		// every pending ack lands between registering a publish and starting
		// to wait, and then sleeps out its whole StallWait.
		js, err := nc.JetStream(nats.PublishAsyncMaxPending(2*h.natsPending + 64))
		if err != nil {
			rec.fail(err)
			return
		}
		type pending struct {
			t0 time.Time
			f  nats.PubAckFuture
		}
		ch := make(chan pending, h.natsPending+64)
		sem := make(chan struct{}, h.natsPending)
		dctx, cancel := context.WithDeadline(h.hard, pc.end.Add(30*time.Second))
		defer cancel()
		collected := make(chan struct{})
		go func() { // the only writer of rec until collected closes
			defer close(collected)
			for p := range ch {
				select {
				case ack := <-p.f.Ok():
					t1 := time.Now()
					if src == nil {
						if ack.Duplicate {
							rec.record(pc, p.t0, t1, 0, 1)
						} else {
							rec.record(pc, p.t0, t1, 1, 0)
						}
					} else if ack.Duplicate {
						rec.record(pc, p.t0, t1, 1, 0)
					} else {
						rec.record(pc, p.t0, t1, 0, 1)
					}
				case err := <-p.f.Err():
					rec.fail(err)
				case <-dctx.Done():
					rec.fail(errAckTimeout)
				}
				<-sem
			}
		}()
		var (
			pubErrs   int64
			pubSample error
			okSeqs    []int32
		)
		subjects := p.subjects
		tx := make([]byte, 0, 64)
		for k := 0; running(ctx, pc); k++ {
			seq := k
			if src != nil {
				seq = int(src[k%len(src)])
			}
			subj := subjects[h.wl.part(w, seq)%len(subjects)]
			ok := true
			for i := range h.wl.items {
				tx = appendTx(tx[:0], tag, w, seq, i)
				sem <- struct{}{}
				f, err := js.PublishAsync(subj, h.wl.payloadOf(w, seq, i), nats.MsgId(string(tx)))
				if err != nil {
					<-sem
					pubErrs++
					if pubSample == nil {
						pubSample = err
					}
					ok = false
					continue
				}
				ch <- pending{t0: time.Now(), f: f}
			}
			if ok && src == nil {
				okSeqs = append(okSeqs, int32(seq))
			}
		}
		close(ch)
		<-collected
		rec.errors += pubErrs
		if rec.errSample == "" && pubSample != nil {
			rec.errSample = pubSample.Error()
		}
		rec.okSeqs = okSeqs
	}
}

// ---------------------------------------------------------------- formatting

func fmtRate(v float64) string {
	switch {
	case v >= 100000:
		return strconv.FormatFloat(v/1000, 'f', 0, 64) + "k"
	case v >= 1000:
		return strconv.FormatFloat(v/1000, 'f', 1, 64) + "k"
	default:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
}

func fmtMs(v float64) string {
	switch {
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
}

func fmtCores(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', 2, 64)
}

func cpuLine(c CPU) string {
	return fmt.Sprintf("broker %s, pg ours %s (all %s), nats %s, loadgen %s, machine %s",
		fmtCores(c.Broker), fmtCores(c.PGOurs), fmtCores(c.PGAll), fmtCores(c.NATS), fmtCores(c.LoadGen), fmtCores(c.Machine))
}

// prime pushes one fresh message to every partition of queue (on the
// run's connections) and waits for all answers, so that a broker that just
// started has loaded every partition (actor, cache hydration) before the
// phase clock starts. It returns how long that took.
func (h *harness) prime(baseURL, queue, tag string, partitions int) (time.Duration, error) {
	t := time.Now()
	ctx, cancel := context.WithTimeout(h.stop, 15*time.Minute)
	defer cancel()
	next := make(chan int)
	errs := make(chan error, h.cfg.connections)
	var wg sync.WaitGroup
	for range min(h.cfg.connections, partitions) {
		wg.Go(func() {
			c := newHTTPClient(baseURL)
			defer c.hc.CloseIdleConnections()
			for p := range next {
				body := []byte(`{"items":[{"queue":"` + queue + `","partition":"p` + strconv.Itoa(p) +
					`","transactionId":"` + tag + `-prime-` + strconv.Itoa(p) + `","payload":` + string(h.wl.payloads[p%nPayloads]) + `}]}`)
				ans := c.push(body, 1)
				if _, _, err := pushVerdicts(&ans, 1); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
feed:
	for p := range partitions {
		select {
		case next <- p:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return time.Since(t), fmt.Errorf("priming %s: %w", queue, err)
	default:
	}
	return time.Since(t), ctx.Err()
}

// setPostJSON makes req a POST of the JSON body to uri (req reset first).
func setPostJSON(req *fasthttp.Request, uri string, body []byte) {
	req.Reset()
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI(uri)
	req.Header.SetContentType("application/json")
	req.SetBody(body)
}

// tally adds the workers' operations, errors, anomalies and latencies to
// r and sets its rates and latency quantiles (r.Msgs and r.Window
// already set).
func (r *PhaseResult) tally(recs []*workerRec) {
	var lat []uint32
	for _, w := range recs {
		r.Ops += w.ops
		r.Errors += w.errors
		r.Anomalies += w.anomalies
		if r.ErrSample == "" {
			r.ErrSample = w.errSample
		}
		lat = append(lat, w.lat...)
	}
	if r.Window > 0 {
		r.MsgsPerSec = float64(r.Msgs) / r.Window
		r.OpsPerSec = float64(r.Ops) / r.Window
	}
	slices.Sort(lat)
	r.P50, r.P99, r.P999 = quantileMs(lat, 0.50), quantileMs(lat, 0.99), quantileMs(lat, 0.999)
}
