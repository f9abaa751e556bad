package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config is the run's configuration as given by the flags.
type Config struct {
	URL         string  `json:"url"`
	Queue       string  `json:"queue"`
	Connections int     `json:"connections"`
	Partitions  int     `json:"partitions"`
	Rotate      bool    `json:"rotate,omitempty"`
	Items       int     `json:"items"`
	Payload     int     `json:"payload_bytes"`
	DupRatio    float64 `json:"dup_ratio"`
	DupRing     int     `json:"dup_ring"`
	Rate        float64 `json:"rate"`
	Duration    string  `json:"duration"`
	Warmup      string  `json:"warmup"`
	DedupWindow int     `json:"dedup_window"`
	Reset       bool    `json:"reset"`
	Retries     int     `json:"retries"`
	MaxBackoff  string  `json:"max_backoff"`
	Timeout     string  `json:"timeout"`
	PID         int     `json:"pid"`
	Label       string  `json:"label"`
}

// Latency holds push latency figures in milliseconds.
type Latency struct {
	Count uint64  `json:"count"`
	Min   float64 `json:"min_ms"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

// LatencyOf summarises a histogram.
func LatencyOf(h *Histogram) Latency {
	return Latency{
		Count: h.Count(),
		Min:   ms(h.Min()),
		Mean:  ms(h.Mean()),
		P50:   ms(h.Quantile(0.50)),
		P90:   ms(h.Quantile(0.90)),
		P99:   ms(h.Quantile(0.99)),
		P999:  ms(h.Quantile(0.999)),
		Max:   ms(h.Max()),
	}
}

// Broker holds the broker process figures; nil fields are unknown.
type Broker struct {
	PID      int      `json:"pid,omitempty"`
	Found    string   `json:"found,omitempty"`
	RSSMax   *float64 `json:"rss_max_mib,omitempty"`
	RSSLast  *float64 `json:"rss_last_mib,omitempty"`
	CPUCores *float64 `json:"cpu_cores,omitempty"`
	// GoroutinesMax/Last and ActorsMax/Last are what the broker's GET
	// /metrics reported each second of the measured window (Regina's
	// cpu.goroutines and actors; unknown for another broker).
	GoroutinesMax  *int `json:"goroutines_max,omitempty"`
	GoroutinesLast *int `json:"goroutines_last,omitempty"`
	ActorsMax      *int `json:"actors_max,omitempty"`
	ActorsLast     *int `json:"actors_last,omitempty"`
	// ClkTck is the tick rate used to turn utime+stime into seconds.
	ClkTck float64 `json:"clk_tck,omitempty"`
}

// Report is everything a run measured.
type Report struct {
	Label     string    `json:"label"`
	RunID     string    `json:"run_id"`
	StartedAt time.Time `json:"started_at"`
	Config    Config    `json:"config"`
	// Mode is "closed" (as fast as possible) or "open" (target rate).
	Mode string `json:"mode"`
	// WindowSeconds is the measured window: from the end of the warmup to
	// the last answer of a measured push.
	WindowSeconds float64 `json:"window_seconds"`
	MsgsPerSec    float64 `json:"msgs_per_sec"`
	PushesPerSec  float64 `json:"pushes_per_sec"`
	// Totals over the measured window; AllTotals include the warmup.
	Totals    Totals `json:"totals"`
	AllTotals Totals `json:"all_totals"`
	// Latency of measured pushes answered 2xx with verdicts (including
	// retries), from the intended send time; ErrorLatency of the others.
	Latency      Latency `json:"latency"`
	ErrorLatency Latency `json:"error_latency"`
	// Open loop only: pushes the schedule planned and how many of them the
	// generator never sent because every worker was busy at the end.
	Planned int64 `json:"planned_pushes,omitempty"`
	Unsent  int64 `json:"unsent_pushes,omitempty"`
	// MaxLagMs is the largest delay between a push's intended and actual
	// send time (open loop).
	MaxLagMs float64 `json:"max_send_lag_ms,omitempty"`
	Broker   Broker  `json:"broker"`
	Series   []Point `json:"series"`
	// Outages are the stretches of the run in which no push got an answer
	// (the broker was unreachable); UnreachableSeconds is their total.
	Outages            []Outage `json:"outages,omitempty"`
	UnreachableSeconds float64  `json:"unreachable_seconds"`
	// Notes are things the run could not do as asked (e.g. a setting the
	// broker ignored).
	Notes []string `json:"notes,omitempty"`
}

// fmtNum prints a count or rate without a fractional part.
func fmtNum(v float64) string { return strconv.FormatFloat(math.Round(v), 'f', 0, 64) }

// fmtMs prints milliseconds with three significant decimals for small
// values and fewer for large ones.
func fmtMs(v float64) string {
	switch {
	case v < 10:
		return strconv.FormatFloat(v, 'f', 3, 64)
	case v < 1000:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
}

func fmtOpt(v *float64, prec int) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', prec, 64)
}

// cleanLabel makes a label safe for a key=value line.
func cleanLabel(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(r rune) rune {
		if r <= ' ' || r == '=' || r == 0x7f {
			return '_'
		}
		return r
	}, s)
}

// SummaryLine is the one-line summary printed last on stdout.
func (r *Report) SummaryLine() string {
	return fmt.Sprintf("loadtest: label=%s msgs/s=%s pushes/s=%s p50=%s p99=%s p999=%s queued=%d duplicate=%d errors=%d rss_mb=%s cpu=%s unreachable_s=%s",
		cleanLabel(r.Label),
		fmtNum(r.MsgsPerSec), fmtNum(r.PushesPerSec),
		fmtMs(r.Latency.P50), fmtMs(r.Latency.P99), fmtMs(r.Latency.P999),
		r.Totals.Queued, r.Totals.Duplicate, r.Totals.Errors(),
		fmtOpt(r.Broker.RSSMax, 1), fmtOpt(r.Broker.CPUCores, 2), strconv.FormatFloat(r.UnreachableSeconds, 'f', 1, 64))
}

// WriteText writes the human-readable report.
func (r *Report) WriteText(w io.Writer) {
	t := &r.Totals
	c := &r.Config
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	p("== regina-loadtest %s (run %s)", r.Label, r.RunID)
	rate := "closed loop"
	if r.Mode == "open" {
		rate = fmt.Sprintf("open loop at %s pushes/s", fmtNum(c.Rate))
	}
	p("target      %s queue=%s, %s", c.URL, c.Queue, rate)
	rot := ""
	if c.Rotate {
		rot = " in turn"
	}
	p("shape       %d connections, %d partitions%s, %d items/push, %d B payload, dup-ratio %.2f, retries %d",
		c.Connections, c.Partitions, rot, c.Items, c.Payload, c.DupRatio, c.Retries)
	p("window      %.2fs measured (warmup %s excluded)", r.WindowSeconds, c.Warmup)
	p("throughput  %s msgs/s, %s pushes/s", fmtNum(r.MsgsPerSec), fmtNum(r.PushesPerSec))
	items := fmt.Sprintf("%d total: %d queued, %d duplicate, %d failed, %d not acknowledged", t.Items, t.Queued, t.Duplicate, t.FailedItems, t.ErrorItems)
	if t.Buffered > 0 {
		items += fmt.Sprintf("; %d buffered (upstream Queen's failover file after a database error: not stored yet, not in msgs/s)", t.Buffered)
	}
	p("items       %s", items)
	errBodies := ""
	if t.ErrorBodies > 0 {
		errBodies = fmt.Sprintf(", %d 2xx answers carrying an error object", t.ErrorBodies)
	}
	p("pushes      %d total: %d answered with verdicts%s, %s%s, %d without an answer, %d bad answers, %d retries",
		t.Pushes, t.OKPushes, fmtCodes(t.OKStatuses, " (", ")"), fmtHTTPErrors(t.HTTPErrors), errBodies, t.NetworkErrors, t.BadAnswers, t.Retries)
	if t.NetworkErrors > 0 || len(r.Outages) > 0 {
		p("no answer   %s", r.unreachableText())
	}
	if c.DupRatio > 0 || t.FreshDuplicate > 0 {
		p("dedup       %d resent pushes (%d items: %d duplicate, %d queued again); %d fresh items answered duplicate (+%d after a retry)",
			t.ResentPushes, t.ResentItems, t.ResentDuplicate, t.ResentQueued, t.FreshDuplicate, t.FreshDuplicateRetry)
	}
	if r.Mode == "open" {
		p("schedule    %d pushes planned, %d never sent (backlog at the end), max send lag %s ms", r.Planned, r.Unsent, fmtMs(r.MaxLagMs))
	}
	l := &r.Latency
	p("latency ms  p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  mean %s  (%d pushes answered with verdicts)",
		fmtMs(l.P50), fmtMs(l.P90), fmtMs(l.P99), fmtMs(l.P999), fmtMs(l.Max), fmtMs(l.Mean), l.Count)
	if e := &r.ErrorLatency; e.Count > 0 {
		p("errors ms   p50 %s  p99 %s  max %s  (%d pushes without verdicts)", fmtMs(e.P50), fmtMs(e.P99), fmtMs(e.Max), e.Count)
	}
	if t.LastError != "" {
		p("last error  %s", t.LastError)
	}
	for _, n := range r.Notes {
		p("note        %s", n)
	}
	b := &r.Broker
	if b.PID > 0 {
		p("broker      pid %d (%s): RSS max %s MiB, last %s MiB; CPU %s cores on average",
			b.PID, b.Found, fmtOpt(b.RSSMax, 1), fmtOpt(b.RSSLast, 1), fmtOpt(b.CPUCores, 2))
	} else {
		p("broker      process unknown (%s): no RSS/CPU", b.Found)
	}
	if b.GoroutinesMax != nil {
		p("broker      goroutines max %d, last %d; partition actors max %d, last %d",
			*b.GoroutinesMax, *b.GoroutinesLast, *b.ActorsMax, *b.ActorsLast)
	}
}

func fmtHTTPErrors(m map[int]int64) string {
	var n int64
	for _, v := range m {
		n += v
	}
	return fmt.Sprintf("%d HTTP errors%s", n, fmtCodes(m, " (", ")"))
}

// fmtCodes renders counts by key, sorted: "3×500, 2×503" between pre and
// post, or "" when there are none.
func fmtCodes[K cmp.Ordered](m map[K]int64, pre, post string) string {
	if len(m) == 0 {
		return ""
	}
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d×%v", m[k], k)
	}
	return pre + strings.Join(parts, ", ") + post
}

// unreachableText says how often and how long the broker gave no answer.
func (r *Report) unreachableText() string {
	t := &r.Totals
	s := fmt.Sprintf("%d pushes got no answer%s", t.NetworkErrors, fmtCodes(t.NetworkErrorKinds, " (", ")"))
	if len(r.Outages) == 0 {
		return s
	}
	longest := r.Outages[0]
	for _, o := range r.Outages {
		if o.Seconds() > longest.Seconds() {
			longest = o
		}
	}
	s += fmt.Sprintf("; broker unreachable for %.1f s: longest stretch without any answer %.1f s, from %.1f s to %.1f s of the run (%d stretches in all)",
		r.UnreachableSeconds, longest.Seconds(), longest.FromS, longest.ToS, len(r.Outages))
	if r.Outages[len(r.Outages)-1].UntilEnd {
		s += ", still unreachable at the end"
	}
	return s + "; each connection backed off up to " + r.Config.MaxBackoff
}

// ProgressLine is the live line printed once a second.
func ProgressLine(p Point, all Totals) string {
	w := ""
	if p.Warmup {
		w = " warmup"
	}
	line := fmt.Sprintf("[%5.1fs%s] %7s msgs/s %6s pushes/s p99 %7s ms | queued=%d duplicate=%d errors=%d",
		p.T, w, fmtNum(p.MsgsPerSec), fmtNum(p.PushesPerSec), fmtMs(p.P99Ms), all.Queued, all.Duplicate, all.Errors())
	switch {
	case p.NoAnswer > 0 && p.NoAnswer == p.Pushes:
		line += fmt.Sprintf(" | broker unreachable: no answer to %d pushes", p.NoAnswer)
	case p.NoAnswer > 0:
		line += fmt.Sprintf(" | %d pushes without an answer", p.NoAnswer)
	}
	return line
}
