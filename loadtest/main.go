package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/segmentio/encoding/json"

	"github.com/regina-mq/regina/internal/procstat"
	"github.com/regina-mq/regina/internal/pushanswer"
)

type options struct {
	url         string
	token       string
	queue       string
	connections int
	partitions  int
	rotate      bool
	items       int
	payload     int
	dupRatio    float64
	dupRing     int
	rate        float64
	duration    time.Duration
	warmup      time.Duration
	dedupWindow int
	reset       bool
	retries     int
	maxBackoff  time.Duration
	timeout     time.Duration
	pid         int
	jsonPath    string
	plotPath    string
	label       string
	quiet       bool
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("regina-loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.url, "url", "http://127.0.0.1:6632", "broker base URL")
	fs.StringVar(&o.token, "token", "", "JWT sent as \"Authorization: Bearer <token>\" on every request (a broker with auth on); default $REGINA_LOADTEST_TOKEN")
	fs.StringVar(&o.queue, "queue", "loadtest", "queue to push to")
	fs.IntVar(&o.connections, "connections", 16, "concurrent workers, each with its own keep-alive connection")
	fs.IntVar(&o.partitions, "partitions", 16, "partitions; each push targets one, chosen uniformly")
	fs.BoolVar(&o.rotate, "rotate", false, "write the partitions in turn (push k to partition k mod -partitions) instead of at random: with many partitions each idles for a lap, so its actor retires and the dedup cache evicts it")
	fs.IntVar(&o.items, "items", 10, "items per push")
	fs.IntVar(&o.payload, "payload", 200, "approximate payload size per item, in bytes")
	fs.Float64Var(&o.dupRatio, "dup-ratio", 0, "share of pushes (0..1) that resend an earlier push's exact body (retry storm)")
	fs.IntVar(&o.dupRing, "dup-ring", 4096, "how many recent pushes a resend is drawn from")
	fs.Float64Var(&o.rate, "rate", 0, "target pushes/s over all workers (open loop); 0 = closed loop, as fast as possible")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "measured run time (after the warmup)")
	fs.DurationVar(&o.warmup, "warmup", 0, "warmup before the measured window, excluded from the stats")
	fs.IntVar(&o.dedupWindow, "dedup-window", -1, "configure the queue with this dedupWindowSeconds first (0 = dedup off); -1 = leave the queue alone")
	fs.BoolVar(&o.reset, "reset", false, "delete the queue before the run")
	fs.IntVar(&o.retries, "retries", 0, "resend a push after a 5xx, an error body or no answer, up to N times (after the connection's backoff)")
	fs.DurationVar(&o.maxBackoff, "max-backoff", time.Second, "longest wait of a connection after consecutive pushes without verdicts (no answer, an error status): 50ms, doubling, up to this; 0 = never wait")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "per-request timeout")
	fs.IntVar(&o.pid, "pid", 0, "broker PID to sample RSS and CPU from; 0 = find it (the listener of -url's port, else a process named regina)")
	fs.StringVar(&o.jsonPath, "json", "", "write the JSON report to this path (- = stdout)")
	fs.StringVar(&o.plotPath, "plot", "", "draw throughput and latency over time into this PNG")
	fs.StringVar(&o.label, "label", "", "name of the run in reports (default: derived from the shape)")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress line and no text report: only the summary line (and -json/-plot)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: regina-loadtest [flags]\n\nDrives a Regina / Queen MQ broker with push traffic and reports throughput and latency.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if o.token == "" {
		o.token = os.Getenv("REGINA_LOADTEST_TOKEN")
	}
	switch {
	case o.connections < 1:
		return nil, errors.New("-connections must be >= 1")
	case o.partitions < 1:
		return nil, errors.New("-partitions must be >= 1")
	case o.items < 1:
		return nil, errors.New("-items must be >= 1")
	case o.payload < 0:
		return nil, errors.New("-payload must be >= 0")
	case o.dupRatio < 0 || o.dupRatio > 1:
		return nil, errors.New("-dup-ratio must be within 0..1")
	case o.dupRing < 1:
		return nil, errors.New("-dup-ring must be >= 1")
	case o.rate < 0:
		return nil, errors.New("-rate must be >= 0")
	case o.duration <= 0:
		return nil, errors.New("-duration must be > 0")
	case o.warmup < 0:
		return nil, errors.New("-warmup must be >= 0")
	case o.dedupWindow < -1:
		return nil, errors.New("-dedup-window must be >= -1")
	case o.retries < 0:
		return nil, errors.New("-retries must be >= 0")
	case o.maxBackoff < 0:
		return nil, errors.New("-max-backoff must be >= 0")
	case o.timeout <= 0:
		return nil, errors.New("-timeout must be > 0")
	case o.queue == "":
		return nil, errors.New("-queue must not be empty")
	}
	if o.label == "" {
		o.label = defaultLabel(o)
	}
	return o, nil
}

func defaultLabel(o *options) string {
	s := fmt.Sprintf("c%d-p%d-i%d", o.connections, o.partitions, o.items)
	if o.rotate {
		s += "-rot"
	}
	if o.rate > 0 {
		s += "-r" + strconv.FormatFloat(o.rate, 'f', -1, 64)
	}
	if o.dupRatio > 0 {
		s += "-dup" + strconv.FormatFloat(o.dupRatio, 'f', -1, 64)
	}
	return s
}

// newRunID returns a short id unique per run: seconds since 2020 in base 36
// plus random hex, so transaction ids never collide across runs.
func newRunID() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return strconv.FormatInt(time.Now().Unix()-1577836800, 36) + hex.EncodeToString(b[:])
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "regina-loadtest:", err)
		return 2
	}
	for _, out := range []struct{ flag, path string }{{"-json", o.jsonPath}, {"-plot", o.plotPath}} {
		if err := prepareOutput(out.path); err != nil {
			fmt.Fprintf(stderr, "regina-loadtest: %s: %v\n", out.flag, err)
			return 1
		}
	}
	rep, err := execute(o, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "regina-loadtest:", err)
		return 1
	}
	if !o.quiet {
		text := stdout
		if o.jsonPath == "-" {
			text = stderr
		}
		rep.WriteText(text)
	}
	status := 0
	if o.jsonPath != "" {
		if err := writeJSON(o.jsonPath, rep, stdout); err != nil {
			fmt.Fprintln(stderr, "regina-loadtest: json:", err)
			status = 1
		}
	}
	if o.plotPath != "" {
		if err := writePlot(o.plotPath, rep); err != nil {
			fmt.Fprintln(stderr, "regina-loadtest: plot:", err)
			status = 1
		}
	}
	fmt.Fprintln(stdout, rep.SummaryLine())
	return status
}

// prepareOutput makes sure that path can be written after the run, before
// the run starts: it creates the missing folders and checks that a file can
// be created (or the existing one overwritten) there, so that a long run
// never ends with nowhere to put its result. "" and "-" need nothing.
func prepareOutput(path string) error {
	if path == "" || path == "-" {
		return nil
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cannot create the folder of %s: %w", path, err)
	}
	if st, err := os.Stat(path); err == nil {
		if st.IsDir() {
			return fmt.Errorf("%s is a directory", path)
		}
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("cannot overwrite %s: %w", path, err)
		}
		return f.Close()
	}
	f, err := os.CreateTemp(dir, ".regina-loadtest-*")
	if err != nil {
		return fmt.Errorf("cannot write into %s: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

func writeJSON(path string, rep *Report, stdout io.Writer) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if path == "-" {
		_, err = stdout.Write(b)
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func writePlot(path string, rep *Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := DrawPlot(f, rep, 900, 600); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// procState tracks broker samples over the run.
type procState struct {
	sampler *ProcSampler
	first   *ProcSample // first sample at or after the warmup end
	prev    *ProcSample
	last    *ProcSample
	rssMax  int64
	failed  error
}

func (ps *procState) sample(now, warmupEnd time.Time) (rss, cores *float64) {
	if ps == nil || ps.failed != nil {
		return nil, nil
	}
	s, err := ps.sampler.Sample(now)
	if err != nil {
		ps.failed = err
		return nil, nil
	}
	r := float64(s.RSSBytes) / (1 << 20)
	rss = &r
	if ps.prev != nil {
		c := ps.sampler.Cores(*ps.prev, s)
		cores = &c
	}
	ps.prev = &s
	if !now.Before(warmupEnd) {
		if ps.first == nil {
			ps.first = &s
		}
		ps.last = &s
		ps.rssMax = max(ps.rssMax, s.RSSBytes)
	}
	return rss, cores
}

func execute(o *options, stderr io.Writer) (*Report, error) {
	admin, err := NewClient(o.url, o.token, o.timeout)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	if err := admin.Health(); err != nil {
		return nil, fmt.Errorf("broker not healthy: %w", err)
	}
	if o.reset {
		if err := admin.DeleteQueue(o.queue); err != nil {
			return nil, fmt.Errorf("reset: %w", err)
		}
	}
	var notes []string
	if o.dedupWindow >= 0 {
		note, err := admin.Configure(o.queue, o.dedupWindow)
		if err != nil {
			return nil, fmt.Errorf("configure: %w", err)
		}
		if note != "" {
			notes = append(notes, note)
			fmt.Fprintln(stderr, "regina-loadtest: note:", note)
		}
	}

	broker := Broker{}
	var ps *procState
	pid, found := o.pid, "from -pid"
	if pid == 0 {
		pid, found = FindBrokerPID(procstat.LocalPort(o.url))
	}
	broker.Found = found
	if pid > 0 {
		ps = &procState{sampler: NewProcSampler(pid)}
		broker.PID, broker.ClkTck = pid, ps.sampler.ClkTck
		if _, err := ps.sampler.Sample(time.Now()); err != nil {
			broker.Found = fmt.Sprintf("pid %d unreadable: %v", pid, err)
			broker.PID, ps = 0, nil
		}
	}

	workers := make([]*Client, o.connections)
	for i := range workers {
		if workers[i], err = NewClient(o.url, o.token, o.timeout); err != nil {
			return nil, err
		}
		defer workers[i].Close()
	}

	runID := newRunID()
	clock := realClock{}
	start := clock.Now()
	warmupEnd := start.Add(o.warmup)
	end := warmupEnd.Add(o.duration)
	sched := NewScheduler(clock, start, end, o.rate)
	rec := NewRecorder(start, warmupEnd)
	ring := NewDupRing(o.dupRing)
	var cursor *atomic.Uint64
	if o.rotate {
		cursor = new(atomic.Uint64)
	}
	var gor brokerCounts
	gorDone := make(chan struct{})
	var maxLag atomic.Int64
	var issued atomic.Int64

	// Ctrl-C ends the run early; the report covers what ran.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		if _, ok := <-sigs; ok {
			sched.Stop()
		}
	}()

	stopTicker := make(chan struct{})
	tickerDone := make(chan struct{})
	isTTY := isTerminal(stderr)
	ps.sample(start, warmupEnd)
	go func() { // its own loop: a slow /metrics never delays the ticker
		defer close(gorDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopTicker:
				return
			case now := <-t.C:
				gor.sample(admin, !now.Before(warmupEnd))
			}
		}
	}()
	go func() {
		defer close(tickerDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		printed := false
		for {
			select {
			case <-stopTicker:
				if printed && isTTY {
					fmt.Fprintln(stderr)
				}
				return
			case now := <-t.C:
				pts := rec.Roll(now)
				rss, cores := ps.sample(now, warmupEnd)
				if len(pts) == 0 {
					continue
				}
				lastPt := pts[len(pts)-1]
				rec.SetProc(lastPt.T, rss, cores)
				if o.quiet {
					continue
				}
				line := ProgressLine(lastPt, rec.AllTotals())
				if isTTY {
					fmt.Fprintf(stderr, "\r%s\x1b[K", line)
				} else {
					fmt.Fprintln(stderr, line)
				}
				printed = true
			}
		}
	}()

	var wg sync.WaitGroup
	seed := mrand.Uint64()
	for w := range o.connections {
		wg.Go(func() {
			c := workers[w]
			b := NewBodyBuilder(runID, o.queue, w, o.partitions, o.items, o.payload, seed)
			if cursor != nil {
				b.Rotate(cursor)
			}
			rnd := mrand.New(mrand.NewPCG(seed^0x9e3779b97f4a7c15, uint64(w)))
			bo := NewBackoff(o.maxBackoff, rnd)
			for {
				slot, ok := sched.Acquire()
				if !ok {
					return
				}
				issued.Add(1)
				for lag := int64(slot.Lag()); ; {
					cur := maxLag.Load()
					if lag <= cur || maxLag.CompareAndSwap(cur, lag) {
						break
					}
				}
				body, resent := ChooseBody(rnd, o.dupRatio, ring, b)
				res := pushWithRetries(clock, sched, bo, c, body, o.retries)
				res.Slot, res.Resent = slot, resent
				rec.Record(&res)
				if !resent && res.Final.Kind == pushanswer.OK && res.Final.Acked() == body.Items {
					ring.Add(body)
				}
				if res.Final.Kind != pushanswer.OK {
					sched.Pause(bo.Next())
				} else {
					bo.Reset()
				}
			}
		})
	}
	wg.Wait()
	finish := clock.Now()
	close(stopTicker)
	<-tickerDone
	<-gorDone
	lastDone := rec.Finish(finish)
	rss, cores := ps.sample(finish, warmupEnd)
	rec.SetProc(rec.LastT(), rss, cores)

	all, measured, hist, errHist, series, _ := rec.Snapshot()
	windowEnd := lastDone
	if windowEnd.Before(warmupEnd) {
		windowEnd = finish
	}
	window := windowEnd.Sub(warmupEnd).Seconds()
	rep := &Report{
		Label:     o.label,
		RunID:     runID,
		StartedAt: start.UTC(),
		Config: Config{
			URL: o.url, Queue: o.queue, Connections: o.connections, Partitions: o.partitions, Rotate: o.rotate,
			Items: o.items, Payload: o.payload, DupRatio: o.dupRatio, DupRing: o.dupRing, Rate: o.rate,
			Duration: o.duration.String(), Warmup: o.warmup.String(), DedupWindow: o.dedupWindow,
			Reset: o.reset, Retries: o.retries, MaxBackoff: o.maxBackoff.String(), Timeout: o.timeout.String(), PID: o.pid, Label: o.label,
		},
		Notes:         notes,
		Mode:          "closed",
		WindowSeconds: window,
		Totals:        measured,
		AllTotals:     all,
		Latency:       LatencyOf(hist),
		ErrorLatency:  LatencyOf(errHist),
		Broker:        broker,
		Series:        series,
		Outages:       rec.Outages(),
	}
	for _, out := range rep.Outages {
		rep.UnreachableSeconds += out.Seconds()
	}
	if window > 0 {
		rep.MsgsPerSec = float64(measured.Queued+measured.Duplicate) / window
		rep.PushesPerSec = float64(measured.Pushes) / window
	}
	if sched.OpenLoop() {
		rep.Mode = "open"
		rep.Planned = sched.Planned()
		rep.Unsent = max(rep.Planned-issued.Load(), 0)
		rep.MaxLagMs = ms(time.Duration(maxLag.Load()))
	}
	gor.sample(admin, true)
	gor.report(&rep.Broker)
	if ps != nil {
		if ps.failed != nil {
			rep.Broker.Found += fmt.Sprintf("; sampling stopped: %v", ps.failed)
		}
		if ps.last != nil {
			rmax := float64(ps.rssMax) / (1 << 20)
			rlast := float64(ps.last.RSSBytes) / (1 << 20)
			rep.Broker.RSSMax, rep.Broker.RSSLast = &rmax, &rlast
			if ps.first != nil && ps.first != ps.last {
				c := ps.sampler.Cores(*ps.first, *ps.last)
				rep.Broker.CPUCores = &c
			}
		}
	}
	return rep, nil
}

// pushWithRetries sends body, resending it as is after a retryable failure
// (no answer, a 5xx, a 2xx error object) up to retries times, each time
// after the connection's backoff; no retry starts after the end of the run.
func pushWithRetries(clock Clock, sched *Scheduler, bo *Backoff, c *Client, body *Body, retries int) PushResult {
	res := PushResult{Items: body.Items}
	for {
		res.Final = c.Push(body.Data, body.Items)
		res.Done = clock.Now()
		if !res.Final.Retryable() || res.Retries >= retries || !sched.Pause(bo.Next()) {
			return res
		}
		res.Retries++
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// brokerCounts tracks the goroutines and partition actors a Regina broker
// reports in GET /metrics (a broker without them leaves them unknown). One
// goroutine samples it, then report reads it.
type brokerCounts struct {
	goroutinesMax, goroutinesLast, actorsMax, actorsLast int
	seen, failed                                         bool
}

// sample reads the broker's counts once (measured: after the warmup).
func (g *brokerCounts) sample(c *Client, measured bool) {
	if g.failed {
		return
	}
	gr, actors, ok := c.BrokerCounts()
	if !ok {
		g.failed = !g.seen // never answered: stop asking
		return
	}
	if !measured {
		return
	}
	g.seen = true
	g.goroutinesMax, g.goroutinesLast = max(g.goroutinesMax, gr), gr
	g.actorsMax, g.actorsLast = max(g.actorsMax, actors), actors
}

func (g *brokerCounts) report(b *Broker) {
	if !g.seen {
		return
	}
	b.GoroutinesMax, b.GoroutinesLast = &g.goroutinesMax, &g.goroutinesLast
	b.ActorsMax, b.ActorsLast = &g.actorsMax, &g.actorsLast
}
