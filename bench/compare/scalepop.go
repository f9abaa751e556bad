package main

import (
	"context"
	"encoding/json"
	"fmt"
	"image/color"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// The pop phase: any-partition pops on a queue of N partitions of which 1%
// (at least one) hold work, the other 99% only history their readers have
// consumed (the case that used to make a pop scan every partition).
const (
	phScalePop = "pop"
	popQueue   = "scalepop"
)

func popPoint(n int) string { return "pop_partitions=" + strconv.Itoa(n) }

// hotPartitions returns the partitions of n that get work: every 100th
// (p0, p100, ...), at least one.
func hotPartitions(n int) []int {
	var hot []int
	for p := 0; p < n; p += 100 {
		hot = append(hot, p)
	}
	return hot
}

// popPt is one point of the pop curve: its schema and how long its
// preparation took.
type popPt struct {
	name       string
	k          int
	partitions int
	sp         *pgSpace
}

// preparePopPoint creates the point's schema and its history: a broker
// pushes one message to every partition and a queue-mode consumer reads
// them all (auto-ack, 1,000 partitions a pop), so every partition has a
// consumed cursor and none has work.
func (h *harness) preparePopPoint(p *popPt) error {
	t := time.Now()
	h.logf("preparing point %s", p.name)
	var err error
	if p.sp, err = h.openSpace("_"+strconv.Itoa(p.k)+"p", 2); err != nil {
		return err
	}
	p.sp.closeStore()
	b, err := h.startBroker(p.sp, true, "regina-pop-prep-"+strconv.Itoa(p.k))
	if err != nil {
		return err
	}
	defer h.stopBroker()
	if _, err := h.prime(b.url, popQueue, h.runTag+".pop"+strconv.Itoa(p.k), p.partitions); err != nil {
		return err
	}
	read := 0
	for {
		n, err := popDrain(h.stop, b.url)
		if err != nil {
			return fmt.Errorf("reading the history of %s: %w", p.name, err)
		}
		if n == 0 {
			break
		}
		read += n
	}
	if read != p.partitions {
		return fmt.Errorf("point %s: read %d history messages, want %d", p.name, read, p.partitions)
	}
	h.logf("  %d partitions with a consumed message each, in %s", p.partitions, time.Since(t).Round(time.Millisecond))
	return nil
}

// popDrain pops (auto-ack) up to 10,000 messages from up to 1,000 partitions
// of popQueue and returns how many came.
func popDrain(ctx context.Context, baseURL string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		baseURL+"/api/v1/pop/queue/"+popQueue+"?batch=10000&partitions=1000&autoAck=true", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		return 0, nil
	}
	var ans struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("pop: HTTP %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		return 0, fmt.Errorf("pop answer: %w", err)
	}
	return len(ans.Messages), nil
}

// pushBacklog gives each hot partition of the point its share of
// -scale-pop-backlog new messages (pushes of -items), before the phase
// clock starts.
func (h *harness) pushBacklog(baseURL string, p *popPt, tag string) error {
	hot := hotPartitions(p.partitions)
	if err := h.pushSpread(baseURL, popQueue, hot, max(h.cfg.scalePopBacklog/len(hot), 1), tag); err != nil {
		return fmt.Errorf("backlog of %s: %w", p.name, err)
	}
	return nil
}

// pushSpread pushes per new messages to each of queue's partitions parts
// (p<i>), in pushes of up to -items messages to one partition, on
// -connections connections, round-robin over the partitions. Every message
// must be queued.
func (h *harness) pushSpread(baseURL, queue string, parts []int, per int, tag string) error {
	return h.pushSpreadN(baseURL, queue, parts, per, h.cfg.items, tag)
}

// pushSpreadN is pushSpread with items messages per push.
func (h *harness) pushSpreadN(baseURL, queue string, parts []int, per, items int, tag string) error {
	type job struct{ part, from, n int }
	jobs := make(chan job)
	errs := make(chan error, h.cfg.connections)
	var wg sync.WaitGroup
	for range min(h.cfg.connections, len(parts)*((per+items-1)/items)) {
		wg.Go(func() {
			c := newHTTPClient(baseURL)
			defer c.hc.CloseIdleConnections()
			var body []byte
			for j := range jobs {
				body = append(body[:0], `{"items":[`...)
				for i := range j.n {
					if i > 0 {
						body = append(body, ',')
					}
					body = append(body, `{"queue":"`+queue+`","partition":"p`+strconv.Itoa(j.part)+
						`","transactionId":"`+tag+`-`+strconv.Itoa(j.part)+`-`+strconv.Itoa(j.from+i)+`","payload":`...)
					body = append(body, h.wl.payloads[(j.from+i)%nPayloads]...)
					body = append(body, '}')
				}
				body = append(body, "]}"...)
				ans := c.push(body, j.n)
				if q, _, err := pushVerdicts(&ans, j.n); err != nil || q != j.n {
					if err == nil {
						err = fmt.Errorf("%d of %d messages queued", q, j.n)
					}
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
feed:
	for from := 0; from < per; from += items {
		for _, part := range parts {
			select {
			case jobs <- job{part: part, from: from, n: min(items, per-from)}:
			case <-h.stop.Done():
				break feed
			}
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	return h.stop.Err()
}

// popAnswer is the part of a pop's answer the consumer needs for its ack.
type popAnswer struct {
	PartitionID string `json:"partitionId"`
	LeaseID     string `json:"leaseId"`
	Messages    []struct {
		TransactionID string `json:"transactionId"`
	} `json:"messages"`
}

// popWork is a consumer's loop, as a Queen client's consume loop runs it:
// an any-partition pop (batch 1, a lease, wait=false), then an ack of what
// came. An op is one pop that answered a message, its latency the pop
// request's alone. With one consumer (the default), a pop that answers
// empty while the backlog is not read is wrong (an anomaly); with several,
// the one hot partition of a small queue is often leased by another
// consumer, and an empty answer is then right.
func (h *harness) popWork(baseURL string, consumers int) workFunc {
	return func(ctx context.Context, _ int, pc *phaseClock, rec *workerRec) {
		c := newConsumer(baseURL, popQueue, "wait=false")
		defer c.close()
		for running(ctx, pc) {
			switch out, t0, t1 := c.step(rec); out {
			case popFailed:
				time.Sleep(10 * time.Millisecond)
			case popEmpty:
				if consumers == 1 && pc.in(t1) {
					rec.anomalies++ // not an op: its latency is not a pop's
				}
			case popGot, popAcked:
				rec.record(pc, t0, t1, 1, 0)
			}
		}
	}
}

// popOutcome is what one step of a consume loop came to.
type popOutcome int

const (
	popFailed popOutcome = iota // the pop failed (recorded)
	popEmpty                    // the pop answered 204
	popGot                      // a message came, its ack failed (recorded)
	popAcked                    // a message came and was acked
)

// consumer is one connection running a Queen client's consume loop:
// any-partition pops of one message (with a lease), each followed by the
// ack of what came.
type consumer struct {
	hc             *httpClient
	popURI, ackURI string
	req            *fasthttp.Request
	resp           *fasthttp.Response
	ack            []byte
}

// newConsumer makes a consumer of queue; wait is the pop's waiting
// parameters (wait=false, or wait=true&timeout=N).
func newConsumer(baseURL, queue, wait string) *consumer {
	return &consumer{hc: newHTTPClient(baseURL), popURI: baseURL + "/api/v1/pop/queue/" + queue + "?batch=1&" + wait,
		ackURI: baseURL + "/api/v1/ack", req: fasthttp.AcquireRequest(), resp: fasthttp.AcquireResponse()}
}

func (c *consumer) close() {
	c.hc.hc.CloseIdleConnections()
	fasthttp.ReleaseRequest(c.req)
	fasthttp.ReleaseResponse(c.resp)
}

// step pops one message and acks it. It returns what came of it and when
// the pop request started and ended; failures are recorded in rec.
func (c *consumer) step(rec *workerRec) (out popOutcome, t0, t1 time.Time) {
	req, resp := c.req, c.resp
	req.Reset()
	req.Header.SetMethod(fasthttp.MethodGet)
	req.SetRequestURI(c.popURI)
	t0 = time.Now()
	err := c.hc.hc.Do(req, resp)
	t1 = time.Now()
	if err != nil {
		rec.fail(err)
		return popFailed, t0, t1
	}
	switch resp.StatusCode() {
	case http.StatusNoContent:
		return popEmpty, t0, t1
	case http.StatusOK:
	default:
		rec.fail(fmt.Errorf("pop: HTTP %d: %s", resp.StatusCode(), tailString(string(resp.Body()), 200)))
		return popFailed, t0, t1
	}
	var a popAnswer
	if err := json.Unmarshal(resp.Body(), &a); err != nil {
		rec.fail(fmt.Errorf("pop answer: %w", err))
		return popFailed, t0, t1
	}
	if len(a.Messages) != 1 {
		rec.fail(fmt.Errorf("pop answer with %d messages, want 1", len(a.Messages)))
		return popFailed, t0, t1
	}
	c.ack = fmt.Appendf(c.ack[:0], `{"transactionId":%q,"partitionId":%q,"leaseId":%q,"status":"completed"}`,
		a.Messages[0].TransactionID, a.PartitionID, a.LeaseID)
	setPostJSON(req, c.ackURI, c.ack)
	if err := c.hc.hc.Do(req, resp); err != nil {
		rec.fail(err)
		return popGot, t0, t1
	}
	if resp.StatusCode() != http.StatusOK {
		rec.fail(fmt.Errorf("ack: HTTP %d: %s", resp.StatusCode(), tailString(string(resp.Body()), 200)))
		return popGot, t0, t1
	}
	return popAcked, t0, t1
}

// runPopRound runs the pop phase of every point for round r: a fresh broker,
// the backlog pushed to the hot partitions, then the consumers.
func (h *harness) runPopRound(pts []*popPt, r int) error {
	c := h.cfg
	for _, p := range pts {
		if h.stop.Err() != nil {
			return nil
		}
		b, err := h.startBroker(p.sp, true, "regina-pop-"+strconv.Itoa(p.k))
		if err != nil {
			return err
		}
		t := time.Now()
		if err := h.pushBacklog(b.url, p, h.runTag+".b"+strconv.Itoa(r)); err != nil {
			h.stopBroker()
			if h.stop.Err() != nil {
				return nil
			}
			return err
		}
		h.logf("  backlog of %d messages on %d partitions in %s", c.scalePopBacklog, len(hotPartitions(p.partitions)), time.Since(t).Round(time.Millisecond))
		h.drive(phaseSpec{name: phScalePop, round: r, point: p.name, workers: c.scalePopConsumers, procs: h.procs(b), brokerURL: b.url},
			h.popWork(b.url, c.scalePopConsumers))
		h.stopBroker()
	}
	return nil
}

// popRow is one point of the pop table.
type popRow struct {
	partitions int
	s          phaseSummary
	empties    int64
}

func (h *harness) popRows() []popRow {
	var rows []popRow
	parts := slices.Clone(h.cfg.scalePop)
	slices.Sort(parts)
	for _, n := range parts {
		m := h.byName(phScalePop, popPoint(n))
		r := popRow{partitions: n, s: summarize(m)}
		if r.s.n == 0 {
			continue
		}
		for _, res := range m {
			r.empties += res.Anomalies
		}
		rows = append(rows, r)
	}
	return rows
}

// writePop adds the pop section to b, draws scale-pop.png, and returns the
// summary's pop ratios.
func (h *harness) writePop(b *strings.Builder, plotDir string) (string, error) {
	c := h.cfg
	rows := h.popRows()
	b.WriteString("\n### Pop as partitions grow\n\n")
	if len(rows) == 0 {
		b.WriteString("Not measured in this run.\n")
		return "", nil
	}
	fmt.Fprintf(b, "A queue of N partitions, each with one message that a queue-mode consumer has read (so every partition has\n"+
		"a consumed cursor); then 1%% of them (p0, p100, ...; at least one) get %s new messages between them, and %d\n"+
		"consumer(s) run a Queen client's consume loop through the broker: an any-partition pop (`batch=1`, a lease,\n"+
		"`wait=false`), then an ack. pops/s counts pops that answered a message; the latency is the pop request's\n"+
		"alone. A fresh broker serves each phase. \"Empty\" counts pops that answered 204 while work waited (with one\n"+
		"consumer every such answer is wrong).\n\n", shortCount(c.scalePopBacklog), c.scalePopConsumers)
	b.WriteString("![pops/s and p99 by partitions](scale-pop.png)\n\n")
	b.WriteString("| partitions (1% with work) | pops/s | min–max | pop p50 ms | pop p99 ms | empty | broker cores | PG ours cores | machine cores | broker RSS MiB | errors |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(b, "| %s | **%s** | %s–%s | %s | %s | %d | %s | %s | %s | %s | %d |\n", shortCount(r.partitions),
			fmtRate(r.s.rate), fmtRate(r.s.lo), fmtRate(r.s.hi), fmtMs(r.s.p50), fmtMs(r.s.p99), r.empties,
			fmtCores(r.s.broker), fmtCores(r.s.pgOurs), fmtCores(r.s.machine), fmtOptUs(r.s.rss), r.s.errors)
	}
	var summary string
	if len(rows) >= 2 && rows[0].s.rate > 0 && rows[0].s.p99 > 0 {
		lo, hi := rows[0], rows[len(rows)-1]
		rate := ratio{bar: 0.5, med: hi.s.rate / lo.s.rate, ok: true}
		p99 := hi.s.p99 / lo.s.p99
		fmt.Fprintf(b, "\n| ratio | value | bar | verdict |\n|---|---|---|---|\n")
		fmt.Fprintf(b, "| pops/s at %s partitions / at %s | **%s** | ≥ 0.5 | %s |\n", shortCount(hi.partitions), shortCount(lo.partitions), fmtRatio(rate.med), rate.verdict())
		fmt.Fprintf(b, "| pop p99 at %s partitions / at %s | **%s** | ≤ 2 | %s |\n", shortCount(hi.partitions), shortCount(lo.partitions), fmtRatio(p99), atMost(p99, 2))
		summary = fmt.Sprintf(" pop_%s/%s=%s pop_p99_%s/%s=%s", shortCount(hi.partitions), shortCount(lo.partitions), fmtRatio(rate.med),
			shortCount(hi.partitions), shortCount(lo.partitions), fmtRatio(p99))
	}
	var xs []float64
	var xl []string
	thr := curve{name: "Regina any-partition pop", col: color.RGBA{30, 110, 190, 255}}
	lat := thr
	for _, r := range rows {
		x := float64(r.partitions)
		xs = append(xs, x)
		xl = append(xl, shortCount(r.partitions))
		thr.add(x, r.s.rate, true)
		lat.add(x, r.s.p99, true)
	}
	sub := fmt.Sprintf("%d consumer(s), pop batch 1 + ack, 1%% of partitions with work; %s per point; %s", c.scalePopConsumers, c.duration, h.info.Started.Format("2006-01-02"))
	path := filepath.Join(plotDir, "scale-pop.png")
	if err := drawScaleLabeled(path, "Regina any-partition pop as partitions grow", sub, "partitions (log scale)",
		"pops/s", "pop latency p99 (ms)", xs, xl, []curve{thr}, []curve{lat}); err != nil {
		return "", err
	}
	h.logf("wrote %s", path)
	return summary, nil
}

// atMost is the verdict of a ratio with an upper bar.
func atMost(v, bar float64) string {
	if v <= bar {
		return fmt.Sprintf("**met** (%.0f%% under the bar)", (1-v/bar)*100)
	}
	return fmt.Sprintf("**missed** by %.0f%% (%.2f over %.2f)", (v/bar-1)*100, v-bar, bar)
}
