package main

// The soak scenario (-scenario soak, make soak): the producers of the mixed
// scenario (retries, twins, storms) at a steady pace, consumers popping and
// acknowledging in consumer groups (one for the whole run, and short-lived
// ones created and deleted in turn, several consumers starting a new group
// at once), retention running every few seconds on a queue with a short
// dedup window, and a broker restart every few minutes (SIGTERM and kill -9
// in turn, A and B in turn). A sampler records, every -sample: each broker's
// RSS and goroutines, PostgreSQL connections and database size, push latency
// p50/p99 and throughput; they are plotted to -png and judged flat after
// warm-up by flatRule. The checker then runs in its retention mode: what
// retention removed is vouched for by what the consumers received.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/regina-mq/regina/internal/chart"
	"github.com/regina-mq/regina/internal/procstat"
	"github.com/regina-mq/regina/partition"
)

// soakShape is the shape of a soak run, scaled to its duration.
type soakShape struct {
	window, completed, retention int // queue options, seconds
	sidecarMin                   int // RETENTION_SIDECAR_MIN_SECONDS
	retentionEvery               time.Duration
	restartEvery                 time.Duration
	rotateEvery                  time.Duration
	sample                       time.Duration
	pause                        time.Duration // between a producer's turns
	mainConsumers                int
}

func soakShapeFor(o options) soakShape {
	if o.short {
		return soakShape{window: 20, completed: 3, retention: 120, sidecarMin: 1,
			retentionEvery: time.Second, restartEvery: 8 * time.Second, rotateEvery: 6 * time.Second,
			sample: time.Second, pause: 20 * time.Millisecond, mainConsumers: 2}
	}
	s := soakShape{window: 120, completed: 30, retention: 900, sidecarMin: 60,
		retentionEvery: 5 * time.Second, pause: 50 * time.Millisecond, mainConsumers: 4}
	// A restart every few minutes: five per run, at least a minute apart.
	s.restartEvery = max(o.duration/5, time.Minute)
	s.rotateEvery = max(o.duration/8, 30*time.Second)
	s.sample = min(max(o.duration/240, 2*time.Second), 10*time.Second)
	return s
}

// consumed is what a consumer received: a message with its stored time.
type consumed struct {
	id      partition.UUID
	created time.Time
}

// soakRun holds the soak's moving parts.
type soakRun struct {
	r     *runner
	shape soakShape

	mu   sync.Mutex
	seen map[key][]consumed // every message a consumer received (by partition, tx)

	popped, acked atomic.Int64
	lat           latencyWindow
	samples       []sample
}

// latencyWindow collects push latencies between two samples.
type latencyWindow struct {
	mu    sync.Mutex
	ms    []float64
	items int
}

func (l *latencyWindow) add(d time.Duration, items int) {
	l.mu.Lock()
	l.ms = append(l.ms, float64(d.Microseconds())/1000)
	l.items += items
	l.mu.Unlock()
}

func (l *latencyWindow) take() ([]float64, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ms, n := l.ms, l.items
	l.ms, l.items = nil, 0
	return ms, n
}

// sample is one point of the time series. NaN marks a value not read.
type sample struct {
	t                    float64 // seconds since the load started
	rssA, rssB           float64 // MiB
	goA, goB             float64
	conns                float64
	dbMiB                float64
	backlog              float64 // messages soak-main has not consumed yet
	p50, p99             float64 // ms
	pushed, consumedRate float64 // items/s
}

// soakConfigure sets the queue's options (short window, retention) on A.
func (s *soakRun) configure(ctx context.Context) error {
	body, _ := json.Marshal(map[string]any{"queue": QueueName, "options": map[string]any{
		"dedupWindowSeconds": s.shape.window, "retentionEnabled": true,
		"retentionSeconds": s.shape.retention, "completedRetentionSeconds": s.shape.completed,
		"leaseTime": 60,
	}})
	for range 20 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.r.a.url()+"/api/v1/configure", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := s.r.lp.client.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated {
				return nil
			}
			err = fmt.Errorf("http %d: %s", resp.StatusCode, b)
		}
		if !sleepCtxOK(ctx, 500*time.Millisecond) {
			return ctx.Err()
		}
		s.r.logf("configure %s: %v (retrying)", QueueName, err)
	}
	return fmt.Errorf("could not configure queue %s", QueueName)
}

// brokerEnv is what every soak broker runs with.
func (sh soakShape) brokerEnv() []string {
	return []string{
		"RETENTION_INTERVAL=" + strconv.FormatInt(sh.retentionEvery.Milliseconds(), 10),
		"RETENTION_SIDECAR_MIN_SECONDS=" + strconv.Itoa(sh.sidecarMin),
		// The shortest slices: the sidecar is trimmed a minute at a time,
		// so a run of minutes shows it flat.
		"RETENTION_SIDECAR_CHILD_SECONDS=60",
	}
}

// consumer pops from the queue in group and acknowledges everything it
// received, until stop is closed (it finishes the pop and ack in flight, so
// no lease or cursor row appears after it returned) or ctx ends; each pop
// and ack goes to a broker in turn.
func (s *soakRun) consumer(ctx context.Context, stop <-chan struct{}, group string, n int, from string, batch int) {
	r := s.r
	client := r.lp.client
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return ctx.Err() != nil
		}
	}
	for i := 0; !stopped(); i++ {
		base := r.eps.pick(n + i)
		if base == "" {
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		q := url.Values{"consumerGroup": {group}, "batch": {strconv.Itoa(batch)}, "wait": {"true"}, "timeout": {"1000"}}
		if from != "" {
			q.Set("subscriptionMode", from)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, base+"/api/v1/pop/queue/"+QueueName+"?"+q.Encode(), nil)
		resp, err := client.Do(req)
		if err != nil {
			cancel()
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		switch {
		case err != nil:
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		case resp.StatusCode == http.StatusNoContent:
			continue
		case resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout:
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		case resp.StatusCode != http.StatusOK:
			if ctx.Err() == nil {
				r.violation(VHTTPStatus, "pop of group %s from %s answered %d: %.300s", group, base, resp.StatusCode, body)
			}
			sleepCtx(ctx, 500*time.Millisecond)
			continue
		}
		var pr struct {
			Messages []struct {
				ID            string `json:"id"`
				TransactionID string `json:"transactionId"`
				Partition     string `json:"partition"`
				PartitionID   string `json:"partitionId"`
				LeaseID       string `json:"leaseId"`
				CreatedAt     string `json:"createdAt"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(body, &pr); err != nil {
			r.violation(VProtocol, "pop of group %s answered 200 with a body that does not decode (%v): %.300s", group, err, body)
			continue
		}
		acks := make([]map[string]any, 0, len(pr.Messages))
		s.mu.Lock()
		for _, m := range pr.Messages {
			id, err := partition.ParseUUID(m.ID)
			if err != nil {
				r.violation(VProtocol, "pop of group %s: message id %q: %v", group, m.ID, err)
				continue
			}
			created, _ := time.Parse(time.RFC3339Nano, m.CreatedAt)
			k := key{m.Partition, m.TransactionID}
			if !slices.ContainsFunc(s.seen[k], func(c consumed) bool { return c.id == id }) {
				s.seen[k] = append(s.seen[k], consumed{id, created})
			}
			acks = append(acks, map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID,
				"leaseId": m.LeaseID, "status": "completed"})
		}
		s.mu.Unlock()
		s.popped.Add(int64(len(pr.Messages)))
		if len(acks) > 0 && s.ack(ctx, group, acks, n+i) {
			s.acked.Add(int64(len(acks)))
		}
	}
}

// ack sends one ack batch until a broker answers it (a restart in between
// is fine: the lease lives in the database).
func (s *soakRun) ack(ctx context.Context, group string, acks []map[string]any, slot int) bool {
	body, _ := json.Marshal(map[string]any{"acknowledgments": acks, "consumerGroup": group})
	for attempt := 0; ; attempt++ {
		base := s.r.eps.pick(slot + attempt)
		if base != "" {
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			req, _ := http.NewRequestWithContext(rctx, http.MethodPost, base+"/api/v1/ack/batch", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := s.r.lp.client.Do(req)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				cancel()
				switch {
				case resp.StatusCode == http.StatusOK:
					return true
				case resp.StatusCode < 500 || resp.StatusCode == http.StatusInternalServerError:
					s.r.violation(VHTTPStatus, "ack batch of group %s to %s answered %d: %.300s", group, base, resp.StatusCode, b)
					return false
				}
			} else {
				cancel()
			}
		}
		if attempt > 300 || ctx.Err() != nil && attempt > 50 {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rotate runs short-lived consumer groups one after another: two consumers
// start each new group at once (its first pops race), read for half a
// period, stop, and the group is deleted.
func (s *soakRun) rotate(ctx context.Context) {
	for k := 0; ; k++ {
		group := fmt.Sprintf("soak-r%d", k)
		from := ""
		if k%2 == 1 {
			from = "new"
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for c := range 2 {
			wg.Go(func() { s.consumer(ctx, stop, group, 100+c, from, 100) })
		}
		sleepCtxOK(ctx, s.shape.rotateEvery/2)
		close(stop)
		wg.Wait()
		s.r.count("groups", 1)
		if ctx.Err() != nil {
			return
		}
		s.deleteGroup(ctx, group)
		if !sleepCtxOK(ctx, s.shape.rotateEvery/2) {
			return
		}
	}
}

func (s *soakRun) deleteGroup(ctx context.Context, group string) {
	for attempt := range 50 {
		base := s.r.eps.pick(attempt)
		req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, base+"/api/v1/consumer-groups/"+group, nil)
		resp, err := s.r.lp.client.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			if resp.StatusCode < 500 || resp.StatusCode == http.StatusInternalServerError {
				s.r.violation(VHTTPStatus, "DELETE consumer group %s answered %d: %.300s", group, resp.StatusCode, b)
				return
			}
		}
		if !sleepCtxOK(ctx, 200*time.Millisecond) {
			return
		}
	}
}

// restarts restarts a broker every restartEvery until the load ends: A and
// B in turn, SIGTERM and kill -9 in turn; the other one serves meanwhile.
func (s *soakRun) restarts(ctx context.Context, until time.Time) error {
	r := s.r
	for round := 0; ; round++ {
		next := time.Now().Add(s.shape.restartEvery)
		if next.After(until) {
			sleepUntil(ctx, until)
			return ctx.Err()
		}
		if !sleepUntil(ctx, next) {
			return ctx.Err()
		}
		// A SIGTERM, B SIGKILL, A SIGKILL, B SIGTERM, again: under load
		// (producers and consumers still send to it), then the other
		// broker serves alone until it is back.
		b, other := r.a, r.b
		if round%2 == 1 {
			b, other = r.b, r.a
		}
		if m := round % 4; m == 0 || m == 3 {
			t0 := time.Now()
			if err := b.stop(60 * time.Second); err != nil {
				r.violation(VBroker, "soak restart: graceful stop of broker %s: %v", b.name, err)
			}
			r.count("graceful-stop", 1)
			r.count("sigterm-restart", 1)
			r.logf("soak: broker %s stopped with SIGTERM in %s", b.name, time.Since(t0).Round(time.Millisecond))
		} else {
			if err := b.kill(); err != nil {
				return err
			}
			r.count("kill9", 1)
			r.logf("soak: broker %s killed with SIGKILL", b.name)
		}
		r.eps.set(other.url())
		if err := b.start(ctx, false); err != nil {
			return fmt.Errorf("soak restart of broker %s: %w", b.name, err)
		}
		r.count("restart", 1)
		r.eps.set(r.a.url(), r.b.url())
		r.logf("soak: broker %s (pid %d) serving again", b.name, b.pid())
	}
}

// sampler records a sample every shape.sample until ctx ends.
func (s *soakRun) sampler(ctx context.Context) {
	conn, err := s.r.pg.connect(ctx)
	if err != nil {
		s.r.logf("soak sampler: %v", err)
		return
	}
	defer func() { conn.Close(context.Background()) }()
	t := time.NewTicker(s.shape.sample)
	defer t.Stop()
	last := time.Now()
	lastPopped := s.popped.Load()
	client := &http.Client{Timeout: 3 * time.Second}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		span := now.Sub(last).Seconds()
		last = now
		sm := sample{t: now.Sub(s.r.loadStart).Seconds()}
		sm.rssA, sm.goA = brokerStats(client, s.r.a)
		sm.rssB, sm.goB = brokerStats(client, s.r.b)
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var conns, size, backlog int64
		if err := conn.QueryRow(qctx, `SELECT (SELECT count(*) FROM pg_stat_activity WHERE application_name = 'regina'),
			pg_database_size(current_database()),
			(SELECT coalesce(sum(p.next_offset - coalesce(c.cursor_offset, 0)), 0)::bigint FROM queen.partitions p
			   LEFT JOIN queen.consumers c ON c.partition_id = p.id AND c.consumer_group = 'soak-main')`).Scan(&conns, &size, &backlog); err == nil {
			sm.conns, sm.dbMiB, sm.backlog = float64(conns), float64(size)/(1<<20), float64(backlog)
		} else {
			sm.conns, sm.dbMiB, sm.backlog = math.NaN(), math.NaN(), math.NaN()
			if ctx.Err() == nil {
				// The connection may have been cut; take a new one.
				conn.Close(context.Background())
				if c, err := s.r.pg.connect(ctx); err == nil {
					conn = c
				}
			}
		}
		cancel()
		ms, items := s.lat.take()
		sm.p50, sm.p99 = quantile(ms, 0.5), quantile(ms, 0.99)
		sm.pushed = float64(items) / span
		p := s.popped.Load()
		sm.consumedRate = float64(p-lastPopped) / span
		lastPopped = p
		s.mu.Lock()
		s.samples = append(s.samples, sm)
		s.mu.Unlock()
	}
}

// tableSizes prints the size of Regina's tables (with indexes and TOAST)
// and their live and dead rows, so growth can be pinned on one.
func (s *soakRun) tableSizes(ctx context.Context) {
	conn, err := s.r.pg.connect(ctx)
	if err != nil {
		return
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT relname, pg_total_relation_size(relid), n_live_tup, n_dead_tup
		  FROM pg_stat_user_tables WHERE schemaname = 'queen' ORDER BY 2 DESC`)
	if err != nil {
		return
	}
	var parts []string
	for rows.Next() {
		var name string
		var size, live, dead int64
		if rows.Scan(&name, &size, &live, &dead) == nil {
			parts = append(parts, fmt.Sprintf("%s %.1f MiB (%d live, %d dead rows)", name, float64(size)/(1<<20), live, dead))
		}
	}
	rows.Close()
	s.r.out.line("soak: tables at the end: %s", strings.Join(parts, "; "))
}

// brokerStats reads a broker's RSS (MiB, from /proc) and goroutines (from
// its Prometheus metrics); NaN when it is not up.
func brokerStats(client *http.Client, b *broker) (rss, goroutines float64) {
	rss, goroutines = math.NaN(), math.NaN()
	pid := b.pid()
	if pid == 0 || !b.running() {
		return
	}
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		if kb, err := procstat.ParseStatusRSS(string(st)); err == nil {
			rss = float64(kb) / 1024
		}
	}
	resp, err := client.Get(b.url() + "/metrics/prometheus")
	if err != nil {
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for l := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(l, "go_goroutines "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				goroutines = f
			}
		}
	}
	return
}

// quantile of unsorted values (NaN for none).
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// flatRule is the soak's verdict on a series: after warm-up (the first
// third), the median of the last third may exceed the median of the middle
// third by at most growth (a share) plus slack (absolute, in the series'
// unit); for throughput, the last third's median must keep at least
// 1/(1+growth) of the middle third's.
type flatRule struct {
	name        string
	unit        string
	growth      float64
	slack       float64
	higherIsBad bool
	get         func(sample) float64
}

var flatRules = []flatRule{
	{"rss A", "MiB", 0.20, 8, true, func(s sample) float64 { return s.rssA }},
	{"rss B", "MiB", 0.20, 8, true, func(s sample) float64 { return s.rssB }},
	{"goroutines A", "", 0.20, 10, true, func(s sample) float64 { return s.goA }},
	{"goroutines B", "", 0.20, 10, true, func(s sample) float64 { return s.goB }},
	{"pg connections", "", 0.20, 4, true, func(s sample) float64 { return s.conns }},
	{"database size", "MiB", 0.20, 8, true, func(s sample) float64 { return s.dbMiB }},
	{"backlog", "msgs", 0.20, 5000, true, func(s sample) float64 { return s.backlog }},
	{"push p50", "ms", 1.0, 5, true, func(s sample) float64 { return s.p50 }},
	{"push p99", "ms", 1.0, 20, true, func(s sample) float64 { return s.p99 }},
	{"pushed", "items/s", 1.0, 0, false, func(s sample) float64 { return s.pushed }},
}

// flatRuleText states the rule as the soak prints it.
const flatRuleText = "flat = after warm-up (first third), the median of the last third is at most the middle third's +20% " +
	"(+8 MiB RSS and database, +10 goroutines, +4 connections, +5000 messages of backlog); latency at most 2x (+5 ms p50, +20 ms p99); throughput at least half"

// judge applies a rule; it returns the two medians and whether the series is flat.
func (fr flatRule) judge(samples []sample) (mid, last float64, flat bool) {
	n := len(samples)
	if n < 6 {
		return math.NaN(), math.NaN(), true
	}
	vals := func(from, to int) []float64 {
		var v []float64
		for _, s := range samples[from:to] {
			if x := fr.get(s); !math.IsNaN(x) {
				v = append(v, x)
			}
		}
		return v
	}
	mid, last = quantile(vals(n/3, 2*n/3), 0.5), quantile(vals(2*n/3, n), 0.5)
	if math.IsNaN(mid) || math.IsNaN(last) {
		return mid, last, true
	}
	if fr.higherIsBad {
		return mid, last, last <= mid*(1+fr.growth)+fr.slack
	}
	return mid, last, last*(1+fr.growth)+fr.slack >= mid
}

// verdict prints the flatness of every series; it returns the names of those
// that grew.
func (s *soakRun) verdict() []string {
	s.mu.Lock()
	samples := slices.Clone(s.samples)
	s.mu.Unlock()
	r := s.r
	r.out.line("soak: %d samples every %s; rule: %s", len(samples), s.shape.sample, flatRuleText)
	var grew []string
	for _, fr := range flatRules {
		mid, last, flat := fr.judge(samples)
		word := "flat"
		if !flat {
			word = "GREW"
			if !fr.higherIsBad {
				word = "FELL"
			}
			grew = append(grew, fr.name)
		}
		r.out.line("soak: %-14s middle third %s, last third %s %s: %s", fr.name, fmtVal(mid), fmtVal(last), fr.unit, word)
	}
	v := "flat"
	if len(grew) > 0 {
		v = "not flat (" + strings.Join(grew, ", ") + ")"
	}
	r.out.line("soak: verdict=%s popped=%d acked=%d restarts=%d groups=%d", v, s.popped.Load(), s.acked.Load(),
		r.counts["restart"], r.counts["groups"])
	return grew
}

func fmtVal(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// plot draws the series to path (a PNG).
func (s *soakRun) plot(path, title string) error {
	s.mu.Lock()
	samples := slices.Clone(s.samples)
	s.mu.Unlock()
	const w, h = 1200, 1250
	c := chart.New(w, h)
	c.Fill(c.Img.Bounds(), chart.ColBG)
	c.Text((w-c.TextWidth(title))/2, 18, title, chart.ColText)
	sub := "shaded: warm-up (first third); " + "flat = last third's median within the stated bound of the middle third's"
	c.Text((w-c.TextWidth(sub))/2, 34, sub, chart.ColMuted)
	n := len(samples)
	xs := make([]float64, n)
	xMax := 0.0
	for i, sm := range samples {
		xs[i] = sm.t
		xMax = max(xMax, sm.t)
	}
	warm := xMax / 3
	if n > 0 {
		warm = samples[n/3].t
	}
	series := func(name string, col color.RGBA, get func(sample) float64) chart.Series {
		ys := make([]float64, n)
		skip := make([]bool, n)
		for i, sm := range samples {
			ys[i] = get(sm)
			skip[i] = math.IsNaN(ys[i])
		}
		return chart.Series{Name: name, Col: col, X: xs, Y: ys, Skip: skip}
	}
	blue, orange, green, red := color.RGBA{31, 119, 180, 255}, color.RGBA{255, 127, 14, 255}, color.RGBA{44, 160, 44, 255}, color.RGBA{214, 39, 40, 255}
	panels := []chart.Panel{
		{Title: "broker RSS (MiB)", Lines: []chart.Series{series("A", blue, func(s sample) float64 { return s.rssA }), series("B", orange, func(s sample) float64 { return s.rssB })}},
		{Title: "broker goroutines", Lines: []chart.Series{series("A", blue, func(s sample) float64 { return s.goA }), series("B", orange, func(s sample) float64 { return s.goB })}},
		{Title: "PostgreSQL connections of the brokers", Lines: []chart.Series{series("connections", green, func(s sample) float64 { return s.conns })}},
		{Title: "database size (MiB)", Lines: []chart.Series{series("pg_database_size", red, func(s sample) float64 { return s.dbMiB })}},
		{Title: "backlog of group soak-main (messages pushed, not yet acknowledged)", Lines: []chart.Series{series("backlog", green, func(s sample) float64 { return s.backlog })}},
		{Title: "push latency (ms)", Lines: []chart.Series{series("p50", blue, func(s sample) float64 { return s.p50 }), series("p99", red, func(s sample) float64 { return s.p99 })}},
		{Title: "throughput (items/s)", Lines: []chart.Series{series("pushed (answered)", blue, func(s sample) float64 { return s.pushed }), series("consumed", green, func(s sample) float64 { return s.consumedRate })}},
	}
	left, right, top, bottom := 72, w-20, 70, h-40
	gap := 45
	ph := (bottom - top - gap*(len(panels)-1)) / len(panels)
	for i, p := range panels {
		y0 := top + i*(ph+gap)
		p.Rect = image.Rect(left, y0, right, y0+ph)
		p.XMax, p.Warmup = xMax, warm
		c.DrawPanel(p)
	}
	xl := "time since the load started (s)"
	c.Text(right-c.TextWidth(xl), h-6, xl, chart.ColMuted)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, c.Img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
