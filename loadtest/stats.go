package main

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/regina-mq/regina/internal/pushanswer"
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
// Items = Queued + Duplicate + Buffered + ErrorItems.
type Totals struct {
	Pushes int64 `json:"pushes"`
	// OKPushes are pushes answered 2xx with one verdict per item; OKStatuses
	// counts them by status (Regina answers 201, upstream Queen 200).
	OKPushes   int64         `json:"ok_pushes"`
	OKStatuses map[int]int64 `json:"ok_statuses,omitempty"`
	Items      int64         `json:"items"`
	Queued     int64         `json:"queued"`
	Duplicate  int64         `json:"duplicate"`
	// Buffered are items upstream Queen answered "buffered": written to its
	// local failover file because its database failed, not stored yet.
	// They are neither acknowledged (not in msgs/s) nor errors.
	Buffered int64 `json:"buffered"`
	// FailedItems are items answered "failed" (or an unknown status).
	FailedItems int64 `json:"failed_items"`
	// ErrorItems are items not acknowledged: FailedItems plus every item of
	// a push whose final answer held no verdict for it.
	ErrorItems int64 `json:"error_items"`
	// HTTPErrors counts pushes whose final answer was not 2xx, by status.
	HTTPErrors map[int]int64 `json:"http_errors"`
	// ErrorBodies counts 2xx answers carrying an error object instead of
	// verdicts (upstream Queen sends its failed pushes as 200).
	ErrorBodies int64 `json:"error_bodies"`
	// NetworkErrors counts pushes that got no answer at all, by kind in
	// NetworkErrorKinds (connection refused, reset, ...).
	NetworkErrors     int64            `json:"network_errors"`
	NetworkErrorKinds map[string]int64 `json:"network_error_kinds,omitempty"`
	// BadAnswers counts 2xx answers that could not be read or had the wrong
	// number of verdicts.
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

// counted reports whether an answer's item verdicts count: a usable 2xx,
// or a malformed one as far as it could be read, unless it holds more
// verdicts than items were pushed (then none of them is believed).
func counted(o *PushOutcome, items int) bool {
	if o.Kind != pushanswer.OK && o.Kind != pushanswer.Malformed {
		return false
	}
	return o.Queued+o.Duplicate+o.Buffered+o.Failed <= items
}

func bump[K comparable](m *map[K]int64, k K) {
	if *m == nil {
		*m = map[K]int64{}
	}
	(*m)[k]++
}

func (t *Totals) add(r *PushResult) {
	t.Pushes++
	t.Items += int64(r.Items)
	t.Retries += int64(r.Retries)
	o := &r.Final
	switch o.Kind {
	case pushanswer.OK:
		t.OKPushes++
		bump(&t.OKStatuses, o.Status)
	case pushanswer.NoAnswer:
		t.NetworkErrors++
		bump(&t.NetworkErrorKinds, netErrorKind(o.Err))
	case pushanswer.HTTPError:
		bump(&t.HTTPErrors, o.Status)
	case pushanswer.ErrorBody:
		t.ErrorBodies++
	case pushanswer.Malformed:
		t.BadAnswers++
	}
	if o.Err != nil {
		t.LastError = o.Err.Error()
	}
	ok := counted(o, r.Items)
	t.ErrorItems += int64(r.Items)
	if ok {
		t.Queued += int64(o.Queued)
		t.Duplicate += int64(o.Duplicate)
		t.Buffered += int64(o.Buffered)
		t.FailedItems += int64(o.Failed)
		t.ErrorItems -= int64(o.Queued + o.Duplicate + o.Buffered)
	}
	if r.Resent {
		t.ResentPushes++
		t.ResentItems += int64(r.Items)
		if ok {
			t.ResentQueued += int64(o.Queued)
			t.ResentDuplicate += int64(o.Duplicate)
		}
	} else {
		t.FreshItems += int64(r.Items)
		if ok {
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
	Pushes       int64   `json:"pushes"`
	Queued       int64   `json:"queued"`
	Duplicate    int64   `json:"duplicate"`
	Errors       int64   `json:"errors"`
	// NoAnswer counts the point's pushes that got no answer at all
	// (connection refused, reset, ...).
	NoAnswer int64 `json:"no_answer"`
	// Broker process figures sampled at the end of the second, when known.
	RSSMiB   *float64 `json:"rss_mib,omitempty"`
	CPUCores *float64 `json:"cpu_cores,omitempty"`
}

type secondAcc struct {
	pushes, items, noAnswer   int64
	queued, duplicate, errors int64
	hist                      *Histogram
}

func (a *secondAcc) reset() {
	a.pushes, a.items, a.noAnswer, a.queued, a.duplicate, a.errors = 0, 0, 0, 0, 0, 0
	a.hist.Reset()
}

// Outage is a stretch of the run in which pushes got no answer at all: it
// begins with the first push that failed on its connection after the last
// answered one, and ends with the next answer (of any status) or with the
// run.
type Outage struct {
	// FromS and ToS are seconds since the start of the run.
	FromS float64 `json:"from_s"`
	ToS   float64 `json:"to_s"`
	// Failures counts the pushes that got no answer within it.
	Failures int64 `json:"failures"`
	// UntilEnd marks an outage still going on when the run ended.
	UntilEnd bool `json:"until_end,omitempty"`
}

// Seconds is the outage's length.
func (o Outage) Seconds() float64 { return o.ToS - o.FromS }

// Recorder collects push results from all workers: totals over the whole
// run and over the measured window (pushes sent at or after the end of the
// warmup), a latency histogram of the measured pushes answered with
// verdicts, a time series with one point per second of completion time,
// and the outages (stretches without any answer). Safe for concurrent use.
type Recorder struct {
	mu        sync.Mutex
	start     time.Time
	warmupEnd time.Time

	all      Totals
	measured Totals
	hist     *Histogram // measured pushes answered 2xx with verdicts
	errHist  *Histogram // the other measured pushes

	downSince time.Time // first push without an answer since the last answer; zero when none
	downFails int64
	outages   []Outage

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
	ok := res.Final.Kind == pushanswer.OK
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
	a.errors += int64(res.Items)
	if counted(&res.Final, res.Items) {
		a.queued += int64(res.Final.Queued)
		a.duplicate += int64(res.Final.Duplicate)
		a.errors -= int64(res.Final.Queued + res.Final.Duplicate + res.Final.Buffered)
	}
	if ok {
		a.hist.Record(lat)
	}
	r.trackOutage(res)
}

// trackOutage opens an outage at a push without an answer and closes it at
// the next answer completed after it began (workers report out of order by
// a few microseconds, so an answer from before the outage closes nothing).
// Caller holds mu.
func (r *Recorder) trackOutage(res *PushResult) {
	if res.Final.Kind == pushanswer.NoAnswer {
		r.cur.noAnswer++
		if r.downSince.IsZero() {
			r.downSince = res.Done
		}
		r.downFails++
		return
	}
	if !r.downSince.IsZero() && !res.Done.Before(r.downSince) {
		r.closeOutage(res.Done, false)
	}
}

func (r *Recorder) closeOutage(end time.Time, untilEnd bool) {
	if end.Before(r.downSince) {
		end = r.downSince
	}
	r.outages = append(r.outages, Outage{
		FromS: r.downSince.Sub(r.start).Seconds(), ToS: end.Sub(r.start).Seconds(),
		Failures: r.downFails, UntilEnd: untilEnd,
	})
	r.downSince, r.downFails = time.Time{}, 0
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
		MsgsPerSec:   float64(a.queued+a.duplicate) / span,
		PushesPerSec: float64(a.pushes) / span,
		P50Ms:        ms(a.hist.Quantile(0.50)),
		P99Ms:        ms(a.hist.Quantile(0.99)),
		MaxMs:        ms(a.hist.Max()),
		Pushes:       a.pushes,
		Queued:       a.queued,
		Duplicate:    a.duplicate,
		Errors:       a.errors,
		NoAnswer:     a.noAnswer,
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
// saw any push, and an outage still going on, and returns the last
// completion time.
func (r *Recorder) Finish(end time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.downSince.IsZero() {
		r.closeOutage(end, true)
	}
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

// Outages returns the stretches of the run without any answer.
func (r *Recorder) Outages() []Outage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.outages)
}

// AllTotals returns a copy of the whole-run totals.
func (r *Recorder) AllTotals() Totals {
	r.mu.Lock()
	defer r.mu.Unlock()
	return copyTotals(r.all)
}

func copyTotals(t Totals) Totals {
	t.HTTPErrors = maps.Clone(t.HTTPErrors)
	t.OKStatuses = maps.Clone(t.OKStatuses)
	t.NetworkErrorKinds = maps.Clone(t.NetworkErrorKinds)
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
