package main

import (
	"sync"
	"time"
)

// PushResult is one push as the worker saw it, after retries.
type PushResult struct {
	Slot  Slot
	Done  time.Time
	Items int
	// Resent marks a duplicate-storm resend of an earlier body.
	Resent bool
	// Final is the last attempt's outcome.
	Final PushOutcome
	// Retries is how many times the body was resent after a 5xx or a
	// network error.
	Retries int
}

// Totals are counters over a set of pushes. Item counters add up:
// Items = Queued + Duplicate + ErrorItems.
type Totals struct {
	Pushes    int64 `json:"pushes"`
	OKPushes  int64 `json:"ok_pushes"`
	Items     int64 `json:"items"`
	Queued    int64 `json:"queued"`
	Duplicate int64 `json:"duplicate"`
	// FailedItems are items answered "failed" inside a 201.
	FailedItems int64 `json:"failed_items"`
	// ErrorItems are items not acknowledged: FailedItems plus every item of
	// a push whose final answer was not a usable 201.
	ErrorItems int64 `json:"error_items"`
	// HTTPErrors counts pushes whose final answer was not 201, by status.
	HTTPErrors    map[int]int64 `json:"http_errors"`
	NetworkErrors int64         `json:"network_errors"`
	// BadAnswers counts 201 answers that could not be read or had the wrong
	// number of results.
	BadAnswers int64 `json:"bad_answers"`
	Retries    int64 `json:"retries"`
	// Duplicate-storm bookkeeping: resent pushes and how their items were
	// answered, and fresh items that the broker called duplicate.
	ResentPushes        int64  `json:"resent_pushes"`
	ResentItems         int64  `json:"resent_items"`
	ResentQueued        int64  `json:"resent_items_queued"`
	ResentDuplicate     int64  `json:"resent_items_duplicate"`
	FreshItems          int64  `json:"fresh_items"`
	FreshDuplicate      int64  `json:"fresh_items_duplicate"`
	FreshDuplicateRetry int64  `json:"fresh_items_duplicate_after_retry"`
	LastError           string `json:"last_error,omitempty"`
}

func (t *Totals) add(r *PushResult) {
	t.Pushes++
	t.Items += int64(r.Items)
	t.Retries += int64(r.Retries)
	o := &r.Final
	switch {
	case o.Status == 0:
		t.NetworkErrors++
	case o.Status != 201:
		if t.HTTPErrors == nil {
			t.HTTPErrors = map[int]int64{}
		}
		t.HTTPErrors[o.Status]++
	case o.Err != nil:
		t.BadAnswers++
	}
	if o.Err != nil {
		t.LastError = o.Err.Error()
	}
	acked := int64(0)
	if o.Status == 201 {
		t.OKPushes++
		t.Queued += int64(o.Queued)
		t.Duplicate += int64(o.Duplicate)
		t.FailedItems += int64(o.Failed)
		acked = int64(o.Queued + o.Duplicate)
	}
	t.ErrorItems += int64(r.Items) - acked
	if r.Resent {
		t.ResentPushes++
		t.ResentItems += int64(r.Items)
		if o.Status == 201 {
			t.ResentQueued += int64(o.Queued)
			t.ResentDuplicate += int64(o.Duplicate)
		}
	} else {
		t.FreshItems += int64(r.Items)
		if o.Status == 201 {
			if r.Retries > 0 {
				// A retried push may have been committed by an attempt
				// whose answer was lost: duplicates are expected then.
				t.FreshDuplicateRetry += int64(o.Duplicate)
			} else {
				t.FreshDuplicate += int64(o.Duplicate)
			}
		}
	}
}

// Errors is the number of items not acknowledged.
func (t *Totals) Errors() int64 { return t.ErrorItems }

// Point is one second of the run's time series.
type Point struct {
	// T is the end of the second, in seconds since the start of the run
	// (the last point may cover less than a second: see Span).
	T      float64 `json:"t"`
	Span   float64 `json:"span_s"`
	Warmup bool    `json:"warmup"`
	// Rates over the point's span, from pushes completed in it.
	MsgsPerSec   float64 `json:"msgs_per_sec"`
	PushesPerSec float64 `json:"pushes_per_sec"`
	P50Ms        float64 `json:"p50_ms"`
	P99Ms        float64 `json:"p99_ms"`
	MaxMs        float64 `json:"max_ms"`
	Queued       int64   `json:"queued"`
	Duplicate    int64   `json:"duplicate"`
	Errors       int64   `json:"errors"`
	// Broker process figures sampled at the end of the second, when known.
	RSSMiB   *float64 `json:"rss_mib,omitempty"`
	CPUCores *float64 `json:"cpu_cores,omitempty"`
}

type secondAcc struct {
	pushes, items             int64
	queued, duplicate, errors int64
	hist                      *Histogram
}

func (a *secondAcc) reset() {
	a.pushes, a.items, a.queued, a.duplicate, a.errors = 0, 0, 0, 0, 0
	a.hist.Reset()
}

// Recorder collects push results from all workers: totals over the whole
// run and over the measured window (pushes sent at or after the end of the
// warmup), a latency histogram of the measured 201 pushes, and a time
// series with one point per second of completion time. Safe for concurrent
// use.
type Recorder struct {
	mu        sync.Mutex
	start     time.Time
	warmupEnd time.Time

	all      Totals
	measured Totals
	hist     *Histogram // measured pushes answered 201
	errHist  *Histogram // measured pushes not answered 201

	cur      secondAcc
	curSec   int // index of the second cur accumulates
	series   []Point
	handed   int // points already returned by Roll
	lastDone time.Time
}

// NewRecorder makes a recorder for a run starting at start whose measured
// window begins at warmupEnd.
func NewRecorder(start, warmupEnd time.Time) *Recorder {
	return &Recorder{
		start:     start,
		warmupEnd: warmupEnd,
		hist:      NewHistogram(),
		errHist:   NewHistogram(),
		cur:       secondAcc{hist: NewHistogram()},
		lastDone:  start,
	}
}

func (r *Recorder) secondOf(t time.Time) int {
	d := t.Sub(r.start)
	if d < 0 {
		return 0
	}
	return int(d / time.Second)
}

// Record adds one push.
func (r *Recorder) Record(res *PushResult) {
	lat := res.Slot.Latency(res.Done)
	r.mu.Lock()
	defer r.mu.Unlock()
	if sec := r.secondOf(res.Done); sec > r.curSec {
		r.rollTo(sec)
	}
	if res.Done.After(r.lastDone) {
		r.lastDone = res.Done
	}
	r.all.add(res)
	ok := res.Final.OK()
	if !res.Slot.Intended.Before(r.warmupEnd) {
		r.measured.add(res)
		if ok {
			r.hist.Record(lat)
		} else {
			r.errHist.Record(lat)
		}
	}
	a := &r.cur
	a.pushes++
	a.items += int64(res.Items)
	acked := int64(0)
	if res.Final.Status == 201 {
		a.queued += int64(res.Final.Queued)
		a.duplicate += int64(res.Final.Duplicate)
		acked = int64(res.Final.Queued + res.Final.Duplicate)
	}
	a.errors += int64(res.Items) - acked
	if ok {
		a.hist.Record(lat)
	}
}

// rollTo closes every second before sec. Caller holds mu.
func (r *Recorder) rollTo(sec int) {
	for r.curSec < sec {
		r.series = append(r.series, r.point(float64(r.curSec+1), 1))
		r.cur.reset()
		r.curSec++
	}
}

func (r *Recorder) point(end, span float64) Point {
	a := &r.cur
	p := Point{
		T:            end,
		Span:         span,
		Warmup:       !r.start.Add(time.Duration(end * float64(time.Second))).After(r.warmupEnd),
		MsgsPerSec:   float64(a.items-a.errors) / span,
		PushesPerSec: float64(a.pushes) / span,
		P50Ms:        ms(a.hist.Quantile(0.50)),
		P99Ms:        ms(a.hist.Quantile(0.99)),
		MaxMs:        ms(a.hist.Max()),
		Queued:       a.queued,
		Duplicate:    a.duplicate,
		Errors:       a.errors,
	}
	return p
}

// Roll closes every whole second that ended by now and returns the points
// closed since the previous Roll (Record closes seconds too, when a push
// completes in a later one).
func (r *Recorder) Roll(now time.Time) []Point {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rollTo(r.secondOf(now))
	out := append([]Point(nil), r.series[r.handed:]...)
	r.handed = len(r.series)
	return out
}

// Finish closes the series at end, including a last partial second when it
// saw any push, and returns the last completion time.
func (r *Recorder) Finish(end time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rollTo(r.secondOf(end))
	span := end.Sub(r.start).Seconds() - float64(r.curSec)
	if r.cur.pushes > 0 && span > 0.001 {
		r.series = append(r.series, r.point(float64(r.curSec)+span, span))
		r.cur.reset()
		r.curSec++
	}
	return r.lastDone
}

// SetProc attaches broker figures to the point ending at second t.
func (r *Recorder) SetProc(t float64, rssMiB, cpuCores *float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.series) - 1; i >= 0; i-- {
		if r.series[i].T == t {
			r.series[i].RSSMiB, r.series[i].CPUCores = rssMiB, cpuCores
			return
		}
	}
}

// Snapshot returns copies of the totals, the histograms and the series.
func (r *Recorder) Snapshot() (all, measured Totals, hist, errHist *Histogram, series []Point, lastDone time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	hist, errHist = NewHistogram(), NewHistogram()
	hist.Merge(r.hist)
	errHist.Merge(r.errHist)
	return copyTotals(r.all), copyTotals(r.measured), hist, errHist, append([]Point(nil), r.series...), r.lastDone
}

// AllTotals returns a copy of the whole-run totals.
func (r *Recorder) AllTotals() Totals {
	r.mu.Lock()
	defer r.mu.Unlock()
	return copyTotals(r.all)
}

func copyTotals(t Totals) Totals {
	if t.HTTPErrors != nil {
		m := make(map[int]int64, len(t.HTTPErrors))
		for k, v := range t.HTTPErrors {
			m[k] = v
		}
		t.HTTPErrors = m
	}
	return t
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// LastT is the T of the last point of the series (-1 when empty).
func (r *Recorder) LastT() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.series) == 0 {
		return -1
	}
	return r.series[len(r.series)-1].T
}
