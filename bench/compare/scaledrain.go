package main

import (
	"context"
	"fmt"
	"image"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/regina-mq/regina/internal/chart"
)

// The drain phase: a queue of -scale-drain partitions, each holding
// -scale-drain-per messages, read to the last message by
// -scale-drain-consumers consumers running a Queen client's consume loop.
// Where the pop phase measures a steady rate over a fixed window, the drain
// measures the whole backlog, so a rate that falls as the queue empties
// (pops that scan ever more drained partitions to find the few left)
// shows as a last tenth slower than the first.
const (
	phScaleDrain = "drain"
	drainQueue   = "scaledrain"
	// drainWaitMs is the long poll of a drain consumer's pop.
	drainWaitMs = 5000
	// drainStall ends a drain that has acked nothing for this long.
	drainStall = 2 * time.Minute
)

// txSample is one reading of the cluster's oldest transaction: when
// (since the drain started) and its age.
type txSample struct{ at, age time.Duration }

func drainPoint(n int) string { return "drain_partitions=" + strconv.Itoa(n) }

// drainRun is what the drain phase measured.
type drainRun struct {
	partitions, per, consumers int
	total                      int
	backlogTime                time.Duration
	// done holds every acked message's ack time since the drain started,
	// sorted.
	done    []time.Duration
	empties int64 // pops that answered 204 after their long poll
	// oldestTx is the age of the oldest transaction holding a transaction
	// id anywhere in the cluster, sampled every half second: the age of the
	// horizon the consumer groups' catch-ups start from (pop_prepare).
	oldestTx []txSample
	loadAvg  string // /proc/loadavg at the start and at the end
	res      *PhaseResult
	complete bool
}

// ranBesidesDrain reports whether a scale phase other than the drain ran.
func (h *harness) ranBesidesDrain() bool {
	return slices.ContainsFunc(h.results, func(r *PhaseResult) bool { return r.Name != phScaleDrain })
}

// runDrain runs the drain phase on a schema of its own: a fresh broker, the
// backlog pushed to every partition, then the consumers until the last
// message is acked.
func (h *harness) runDrain() error {
	c := h.cfg
	d := &drainRun{partitions: c.scaleDrain, per: c.scaleDrainPer, consumers: c.scaleDrainConsumers, total: c.scaleDrain * c.scaleDrainPer}
	h.logf("preparing the drain of %d partitions", d.partitions)
	sp, err := h.openSpace("_drain", 2)
	if err != nil {
		return err
	}
	sp.closeStore()
	b, err := h.startBroker(sp, true, "regina-drain")
	if err != nil {
		return err
	}
	defer h.stopBroker()
	t := time.Now()
	if err := h.pushSpread(b.url, drainQueue, slices.Collect(func(yield func(int) bool) {
		for p := range d.partitions {
			if !yield(p) {
				return
			}
		}
	}), d.per, h.runTag+".drain"); err != nil {
		if h.stop.Err() != nil {
			return nil
		}
		return fmt.Errorf("drain backlog: %w", err)
	}
	d.backlogTime = time.Since(t)
	h.logf("  backlog of %d messages on %d partitions in %s", d.total, d.partitions, d.backlogTime.Round(time.Millisecond))
	h.consumeDrain(b, d)
	h.drain = d
	return nil
}

// consumeDrain runs the consumers until every message of the backlog is acked,
// nothing is acked for drainStall, or the run stops.
func (h *harness) consumeDrain(b *brokerProc, d *drainRun) {
	ctx, cancel := context.WithCancel(h.stop)
	defer cancel()
	g := h.procs(b)
	load0 := loadAvg()
	h.logf("  %-18s %d consumers, %d messages on %d partitions", phScaleDrain, d.consumers, d.total, d.partitions)
	var acked atomic.Int64
	start := time.Now()
	a := g.snap()
	recs := make([]*workerRec, d.consumers)
	times := make([][]time.Duration, d.consumers)
	empties := make([]int64, d.consumers)
	var end snapshot // at the last ack (written by the consumer that made it)
	var wg sync.WaitGroup
	for w := range d.consumers {
		recs[w] = &workerRec{}
		wg.Go(func() {
			drainConsumer(ctx, b.url, start, recs[w], &times[w], &empties[w], func() {
				if acked.Add(1) == int64(d.total) {
					end = g.snap()
					cancel()
				}
			})
		})
	}
	// The watchdog: the broker's RSS, and the end of a stalled drain.
	var rssMax int64
	var rssSeen bool
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		last, lastAt := int64(0), time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if rss, err := readRSS(b.pid); err == nil {
				rssMax, rssSeen = max(rssMax, rss), true
			}
			var age float64
			if err := h.admin.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM now() - min(xact_start)), 0)::float8
				  FROM pg_stat_activity WHERE backend_xid IS NOT NULL`).Scan(&age); err == nil {
				d.oldestTx = append(d.oldestTx, txSample{at: time.Since(start), age: time.Duration(age * float64(time.Second))})
			}
			if n := acked.Load(); n != last {
				last, lastAt = n, time.Now()
			} else if time.Since(lastAt) > drainStall {
				h.logf("  drain: nothing acked for %s (%d of %d): stopping", drainStall, n, d.total)
				cancel()
				return
			}
		}
	}()
	wg.Wait()
	cancel()
	<-watchDone
	for w := range d.consumers {
		d.done = append(d.done, times[w]...)
		d.empties += empties[w]
	}
	slices.Sort(d.done)
	d.complete = len(d.done) >= d.total
	d.loadAvg = load0 + " to " + loadAvg()

	res := &PhaseResult{Name: phScaleDrain, Point: drainPoint(d.partitions), Partial: !d.complete}
	var lat []uint32
	for _, r := range recs {
		res.Errors += r.errors
		if res.ErrSample == "" {
			res.ErrSample = r.errSample
		}
		lat = append(lat, r.lat...)
	}
	res.Msgs, res.Ops = int64(len(d.done)), int64(len(d.done))
	if n := len(d.done); n > 0 {
		res.Window = d.done[n-1].Seconds()
		res.MsgsPerSec = float64(n) / res.Window
		res.OpsPerSec = res.MsgsPerSec
		// CPU over the drain, to its last ack (the consumers' last long
		// polls after it are not drain work).
		if end.at.IsZero() {
			end = g.snap()
		}
		res.CPU = cpuBetween(a, end)
	}
	slices.Sort(lat)
	res.P50, res.P99, res.P999 = quantileMs(lat, 0.50), quantileMs(lat, 0.99), quantileMs(lat, 0.999)
	if rssSeen {
		v := float64(rssMax) / (1 << 20)
		res.RSSMaxMiB = &v
	}
	d.res = res
	h.results = append(h.results, res)
	first, last := d.tenth(0), d.tenth(9)
	h.logf("    -> %d of %d messages in %s (%s msgs/s); first tenth %s msgs/s, last tenth %s msgs/s; pop p50 %s ms, p99 %s ms; %d empty answers, %d errors; cpu %s",
		len(d.done), d.total, time.Duration(res.Window*float64(time.Second)).Round(time.Millisecond), fmtRate(res.MsgsPerSec),
		fmtRate(first), fmtRate(last), fmtMs(res.P50), fmtMs(res.P99), d.empties, res.Errors, cpuLine(res.CPU))
}

// drainConsumer is a Queen client's consume loop (a long poll): it
// records each pop's latency (pops that answered a message) and, for each
// message acked, the time since start; acked is called after each.
func drainConsumer(ctx context.Context, baseURL string, start time.Time, rec *workerRec, done *[]time.Duration, empties *int64, acked func()) {
	c := newConsumer(baseURL, drainQueue, "wait=true&timeout="+strconv.Itoa(drainWaitMs))
	defer c.close()
	for ctx.Err() == nil {
		out, t0, t1 := c.step(rec)
		if ctx.Err() != nil {
			return
		}
		switch out {
		case popFailed:
			pause := time.NewTimer(50 * time.Millisecond)
			select {
			case <-ctx.Done():
			case <-pause.C:
			}
			pause.Stop()
		case popEmpty:
			*empties++
		case popGot, popAcked:
			rec.lat = append(rec.lat, uint32(min(max(t1.Sub(t0).Microseconds(), 0), 1<<32-1)))
			if out == popAcked {
				*done = append(*done, time.Since(start))
				acked()
			}
		}
	}
}

// loadAvg is the first three fields of /proc/loadavg ("?" when unreadable).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

// tenth returns the msgs/s of the k-th tenth (0..9) of the messages acked:
// a tenth of them over the time from the previous tenth's last ack (the
// drain's start for the first) to its own last ack. 0 when there are fewer
// than ten.
func (d *drainRun) tenth(k int) float64 {
	n := len(d.done)
	if n < 10 {
		return 0
	}
	lo, hi := k*n/10, (k+1)*n/10
	var from time.Duration
	if lo > 0 {
		from = d.done[lo-1]
	}
	span := (d.done[hi-1] - from).Seconds()
	if span <= 0 {
		return 0
	}
	return float64(hi-lo) / span
}

// rateWhile returns the acked msgs/s over the half-second intervals that
// began with a reading of the oldest transaction's age satisfying cond, and
// how long those intervals lasted.
func (d *drainRun) rateWhile(cond func(time.Duration) bool) (float64, time.Duration) {
	var n int
	var span time.Duration
	for i := 0; i+1 < len(d.oldestTx); i++ {
		from, to := d.oldestTx[i].at, d.oldestTx[i+1].at
		if !cond(d.oldestTx[i].age) {
			continue
		}
		lo, _ := slices.BinarySearch(d.done, from)
		hi, _ := slices.BinarySearch(d.done, to)
		n += hi - lo
		span += to - from
	}
	if span <= 0 {
		return 0, 0
	}
	return float64(n) / span.Seconds(), span
}

// plotDir is -plot-dir, relative to the repository root.
func (h *harness) plotDir() string {
	if filepath.IsAbs(h.cfg.plotDir) {
		return h.cfg.plotDir
	}
	return filepath.Join(h.repo, h.cfg.plotDir)
}

// writeDrain writes the drain section of RESULTS.md and scale-drain.png and
// returns the summary's drain figures ("" when the drain did not run).
func (h *harness) writeDrain() (string, error) {
	d := h.drain
	if d == nil || d.res == nil {
		return "", nil
	}
	r := d.res
	var b strings.Builder
	fmt.Fprintf(&b, "## `make compare/scale SCALE_ONLY=drain`: a %s-partition backlog drained to the last message\n\n", shortCount(d.partitions))
	h.settingText(&b)
	fmt.Fprintf(&b, "- Load average (1, 5, 15 min) at the drain's start, then at its end: %s", d.loadAvg)
	if loadHigh(d.loadAvg) {
		b.WriteString(" (**loaded machine**)")
	}
	b.WriteString("\n")
	if len(d.oldestTx) > 0 {
		ages := make([]time.Duration, len(d.oldestTx))
		for i, s := range d.oldestTx {
			ages[i] = s.age
		}
		slices.Sort(ages)
		fmt.Fprintf(&b, "- Oldest transaction holding an id anywhere in the cluster during the drain (sampled every 0.5 s): median %s, max %s.\n"+
			"  A consumer group's catch-up no longer depends on it (its horizon is its last snapshot), but while it holds an\n"+
			"  id PostgreSQL keeps the cursor rows' dead versions in the ready index (the broker's vacuum of the cursor\n"+
			"  table, CURSOR_VACUUM_INTERVAL, removes them unless it is in this database); pops start their scan at the\n"+
			"  group's ready floor, above the dead entries that pile up at the head.",
			ages[len(ages)/2].Round(time.Second), ages[len(ages)-1].Round(time.Second))
		young, yt := d.rateWhile(func(age time.Duration) bool { return age < 10*time.Second })
		old, ot := d.rateWhile(func(age time.Duration) bool { return age >= time.Minute })
		fmt.Fprintf(&b, " Acked msgs/s while that transaction was younger than 10 s: %s (over %s);\n"+
			"  while it was a minute old or more: %s (over %s).\n", fmtRate(young), yt.Round(time.Second), fmtRate(old), ot.Round(time.Second))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "A fresh schema and broker (cache on, default configuration); %d messages pushed to each of %s partitions\n"+
		"(%s messages, pushed in %s); then %d consumers run a Queen client's consume loop through the broker until the\n"+
		"last message is acked: an any-partition pop (`batch=1`, a lease, `wait=true&timeout=%d`), then an ack of the\n"+
		"message. A tenth of the backlog is %s messages; its rate is those messages over the time from the previous tenth's\n"+
		"last ack (the start, for the first) to its own last ack. The flatness figure is the last tenth's rate over the\n"+
		"first's (1 = flat; a pop that costs more as partitions empty shows as less than 1). \"Empty\" counts pops that\n"+
		"waited out their long poll (with several consumers, the last partitions' leases are held by others).\n\n",
		d.per, shortCount(d.partitions), shortCount(d.total), d.backlogTime.Round(100*time.Millisecond), d.consumers, drainWaitMs,
		shortCount(len(d.done)/10))
	b.WriteString("![msgs/s over the drain](scale-drain.png)\n\n")
	first, last := d.tenth(0), d.tenth(9)
	flat := "-"
	var summary string
	if first > 0 {
		flat = "**" + fmtRatio(last/first) + "**"
		summary = fmt.Sprintf(" drain_last/first=%s drain_time=%s", fmtRatio(last/first), time.Duration(r.Window*float64(time.Second)).Round(100*time.Millisecond))
	}
	status := "all"
	if !d.complete {
		status = fmt.Sprintf("**%d of %d (stopped)**", len(d.done), d.total)
	}
	b.WriteString("| partitions | messages | acked | consumers | time to the last message | msgs/s overall | first tenth msgs/s | last tenth msgs/s | last/first | pop p50 ms | pop p99 ms | empty | broker cores | PG ours cores | machine cores | broker RSS MiB | errors |\n" +
		"|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %d | %s | %s | %s | %s | %d |\n",
		shortCount(d.partitions), shortCount(d.total), status, d.consumers, time.Duration(r.Window*float64(time.Second)).Round(100*time.Millisecond),
		fmtRate(r.MsgsPerSec), fmtRate(first), fmtRate(last), flat, fmtMs(r.P50), fmtMs(r.P99), d.empties,
		fmtCores(r.CPU.Broker), fmtCores(r.CPU.PGOurs), fmtCores(r.CPU.Machine), fmtOptUs(r.RSSMaxMiB), r.Errors)
	if len(d.done) >= 10 {
		b.WriteString("\n| tenth of the backlog | 1 | 2 | 3 | 4 | 5 | 6 | 7 | 8 | 9 | 10 |\n|---|---|---|---|---|---|---|---|---|---|---|\n| msgs/s |")
		for k := range 10 {
			fmt.Fprintf(&b, " %s |", fmtRate(d.tenth(k)))
		}
		b.WriteString("\n")
	}
	if r.ErrSample != "" {
		fmt.Fprintf(&b, "\nFirst error: `%s`\n", strings.ReplaceAll(r.ErrSample, "`", "'"))
	}
	path := filepath.Join(h.plotDir(), "scale-drain.png")
	if err := h.drawDrain(path, d); err != nil {
		return "", err
	}
	h.logf("wrote %s", path)
	if err := replaceSection(h.outPath(), "scale-drain", b.String()); err != nil {
		return "", err
	}
	if !h.ranBesidesDrain() {
		if err := h.writeJSON(); err != nil {
			return "", err
		}
	}
	return summary, nil
}

// loadHigh reports whether any of the load averages in s (as loadAvg
// writes them, possibly two readings) is above 2, the brief's mark of a
// loaded machine.
func loadHigh(s string) bool {
	for f := range strings.FieldsSeq(s) {
		if v, err := strconv.ParseFloat(f, 64); err == nil && v > 2 {
			return true
		}
	}
	return false
}

// drainBuckets turns the sorted ack times into msgs/s per bucket of about
// a hundredth of the drain (at least 250 ms): the bucket's end time in
// seconds and its rate.
func drainBuckets(done []time.Duration) (xs, ys []float64) {
	if len(done) == 0 {
		return nil, nil
	}
	width := max(done[len(done)-1]/100, 250*time.Millisecond)
	i := 0
	for end := width; ; end += width {
		n := 0
		for i < len(done) && done[i] <= end {
			i++
			n++
		}
		xs = append(xs, end.Seconds())
		ys = append(ys, float64(n)/width.Seconds())
		if i == len(done) {
			return xs, ys
		}
	}
}

// drawDrain writes a 900x900 PNG: msgs/s over the drain (per bucket, and
// per tenth of the backlog) on top, messages left below, and the age of the
// oldest transaction in the cluster at the bottom.
func (h *harness) drawDrain(path string, d *drainRun) error {
	const w, ht = 900, 900
	c := chart.New(w, ht)
	c.Fill(c.Img.Bounds(), chart.ColBG)
	title := fmt.Sprintf("Regina: draining %s messages from %s partitions", shortCount(d.total), shortCount(d.partitions))
	sub := fmt.Sprintf("%d consumers, pop batch 1 (long poll) + ack; load average %s; %s", d.consumers, d.loadAvg, h.info.Started.Format("2006-01-02"))
	c.Text((w-c.TextWidth(title))/2, 18, title, chart.ColText)
	c.Text((w-c.TextWidth(sub))/2, 36, sub, chart.ColMuted)
	left, right, top, bottom, gap := 72, w-30, 72, ht-44, 56
	ph := (bottom - top - 2*gap) / 3
	xs, ys := drainBuckets(d.done)
	xMax := 1.0
	if len(xs) > 0 {
		xMax = xs[len(xs)-1]
	}
	rate := chart.Series{Name: "msgs/s", Col: color.RGBA{30, 110, 190, 255}, X: xs, Y: ys}
	tenths := chart.Series{Name: "per tenth of the backlog", Col: color.RGBA{210, 50, 40, 255}}
	left0 := chart.Series{Name: "messages left", Col: color.RGBA{30, 110, 190, 255}, X: []float64{0}, Y: []float64{float64(d.total)}}
	if n := len(d.done); n >= 10 {
		for k := range 10 {
			hi := (k + 1) * n / 10
			tenths.X = append(tenths.X, d.done[hi-1].Seconds())
			tenths.Y = append(tenths.Y, d.tenth(k))
		}
	}
	for i, x := range xs {
		left0.X = append(left0.X, x)
		left0.Y = append(left0.Y, left0.Y[i]-ys[i]*(x-left0.X[i]))
	}
	c.DrawPanel(chart.Panel{Rect: image.Rect(left, top, right, top+ph), Title: "msgs/s acked", XMax: xMax, Lines: []chart.Series{rate, tenths}})
	c.DrawPanel(chart.Panel{Rect: image.Rect(left, top+ph+gap, right, top+2*ph+gap), Title: "backlog left (messages)", XMax: xMax, Lines: []chart.Series{left0}})
	oldest := chart.Series{Name: "seconds", Col: color.RGBA{120, 120, 120, 255}}
	for _, s := range d.oldestTx {
		if s.at.Seconds() <= xMax {
			oldest.X = append(oldest.X, s.at.Seconds())
			oldest.Y = append(oldest.Y, s.age.Seconds())
		}
	}
	c.DrawPanel(chart.Panel{Rect: image.Rect(left, top+2*ph+2*gap, right, bottom),
		Title: "age of the oldest transaction in the cluster (the catch-ups' horizon)", XMax: xMax, Lines: []chart.Series{oldest}})
	xl := "seconds since the consumers started"
	c.Text(right-c.TextWidth(xl), ht-6, xl, chart.ColMuted)
	return writePNG(path, c.Img)
}
