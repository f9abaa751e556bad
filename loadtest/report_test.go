package main

import (
	"bytes"
	"math"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/internal/pushanswer"
)

func TestSummaryLine(t *testing.T) {
	t.Parallel()
	r := &Report{
		Label:              "storm 50%",
		MsgsPerSec:         12345.6,
		PushesPerSec:       1234.44,
		Latency:            Latency{P50: 3.21049, P99: 45.678, P999: 1234.6},
		Totals:             Totals{Queued: 100, Duplicate: 50, ErrorItems: 7},
		Broker:             Broker{PID: 42, RSSMax: new(123.456), CPUCores: new(1.234)},
		UnreachableSeconds: 2.345,
	}
	require.Equal(t,
		"loadtest: label=storm_50% msgs/s=12346 pushes/s=1234 p50=3.210 p99=45.68 p999=1235 queued=100 duplicate=50 errors=7 rss_mb=123.5 cpu=1.23 unreachable_s=2.3",
		r.SummaryLine())

	// Unknown broker process, empty label.
	r = &Report{}
	require.Equal(t,
		"loadtest: label=- msgs/s=0 pushes/s=0 p50=0.000 p99=0.000 p999=0.000 queued=0 duplicate=0 errors=0 rss_mb=- cpu=- unreachable_s=0.0",
		r.SummaryLine())
}

func TestSummaryLineKeysParse(t *testing.T) {
	t.Parallel()
	r := &Report{Label: "a=b c", Broker: Broker{RSSMax: new(float64(1)), CPUCores: new(0.5)}}
	fields := strings.Fields(r.SummaryLine())
	require.Equal(t, "loadtest:", fields[0])
	var keys []string
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		require.True(t, ok, f)
		require.NotEmpty(t, v, f)
		keys = append(keys, k)
	}
	require.Equal(t, []string{"label", "msgs/s", "pushes/s", "p50", "p99", "p999", "queued", "duplicate", "errors", "rss_mb", "cpu", "unreachable_s"}, keys)
}

func TestWriteTextMentionsEverything(t *testing.T) {
	t.Parallel()
	r := &Report{
		Label: "x", Mode: "open", Planned: 100, Unsent: 3,
		Config: Config{Rate: 1000, DupRatio: 0.5, Warmup: "1s", MaxBackoff: "1s"},
		Totals: Totals{Pushes: 10, OKPushes: 6, OKStatuses: map[int]int64{200: 6}, Buffered: 20, ErrorBodies: 2,
			HTTPErrors: map[int]int64{503: 2, 500: 1}, NetworkErrors: 3, NetworkErrorKinds: map[string]int64{netRefused: 2, netReset: 1},
			Retries: 4, ResentPushes: 5, LastError: "HTTP 503: overloaded"},
		Latency:            Latency{P50: 1, Count: 6},
		Broker:             Broker{Found: "no process named regina"},
		Outages:            []Outage{{FromS: 1, ToS: 1.5, Failures: 1}, {FromS: 3, ToS: 7, Failures: 2, UntilEnd: true}},
		UnreachableSeconds: 4.5,
		Notes:              []string{"the broker ignored dedupWindowSeconds"},
	}
	var buf bytes.Buffer
	r.WriteText(&buf)
	out := buf.String()
	for _, want := range []string{"open loop at 1000", "6 answered with verdicts (6×200)", "20 buffered", "2 2xx answers carrying an error object",
		"3 HTTP errors (1×500, 2×503)", "3 pushes got no answer (2×connection refused, 1×connection reset)",
		"broker unreachable for 4.5 s: longest stretch without any answer 4.0 s, from 3.0 s to 7.0 s of the run (2 stretches in all)", "still unreachable at the end",
		"4 retries", "5 resent pushes", "3 never sent", "HTTP 503: overloaded", "no process named regina",
		"note        the broker ignored dedupWindowSeconds"} {
		require.Contains(t, out, want)
	}
}

func TestProgressLine(t *testing.T) {
	t.Parallel()
	line := ProgressLine(Point{T: 3, MsgsPerSec: 20000, PushesPerSec: 2000, P99Ms: 12.5}, Totals{Queued: 5, Duplicate: 6, ErrorItems: 7})
	require.Equal(t, "[  3.0s]   20000 msgs/s   2000 pushes/s p99   12.50 ms | queued=5 duplicate=6 errors=7", line)
	line = ProgressLine(Point{T: 4, Pushes: 16, NoAnswer: 16}, Totals{})
	require.Contains(t, line, "| broker unreachable: no answer to 16 pushes")
	line = ProgressLine(Point{T: 4, Pushes: 16, NoAnswer: 1}, Totals{})
	require.Contains(t, line, "| 1 pushes without an answer")
}

func okResult(start time.Time, sent, lat time.Duration, queued, dup int, resent bool) *PushResult {
	at := start.Add(sent)
	return &PushResult{
		Slot:   Slot{Intended: at, Start: at},
		Done:   at.Add(lat),
		Items:  queued + dup,
		Resent: resent,
		Final:  PushOutcome{Status: 201, Kind: pushanswer.OK, Queued: queued, Duplicate: dup},
	}
}

func TestRecorderWarmupSeriesAndTotals(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := NewRecorder(start, start.Add(time.Second))
	ms := time.Millisecond
	// Warmup second: 2 pushes.
	rec.Record(okResult(start, 100*ms, 10*ms, 10, 0, false))
	rec.Record(okResult(start, 500*ms, 10*ms, 10, 0, false))
	require.Empty(t, rec.Roll(start.Add(900*ms)))
	pts := rec.Roll(start.Add(1000 * ms))
	require.Len(t, pts, 1)
	require.True(t, pts[0].Warmup)
	require.Equal(t, 20.0, pts[0].MsgsPerSec)

	// Second 2: a fresh push, a resend, a 503 and a network error.
	rec.Record(okResult(start, 1100*ms, 20*ms, 10, 0, false))
	rec.Record(okResult(start, 1200*ms, 40*ms, 0, 10, true))
	rec.Record(&PushResult{Slot: Slot{Intended: start.Add(1300 * ms)}, Done: start.Add(1301 * ms), Items: 10,
		Final: PushOutcome{Status: 503, Kind: pushanswer.HTTPError}})
	rec.Record(&PushResult{Slot: Slot{Intended: start.Add(1400 * ms)}, Done: start.Add(1500 * ms), Items: 10, Retries: 2})
	// A push completing in second 3 closes second 2 itself.
	rec.Record(okResult(start, 1990*ms, 20*ms, 9, 0, false))
	last := rec.Finish(start.Add(2500 * ms))
	require.Equal(t, start.Add(2010*ms), last)

	all, m, hist, errHist, series, _ := rec.Snapshot()
	require.Len(t, series, 3)
	require.Equal(t, []float64{1, 2, 2.5}, []float64{series[0].T, series[1].T, series[2].T})
	require.False(t, series[1].Warmup)
	require.Equal(t, 10.0, series[1].MsgsPerSec-10) // 20 acked items in second 2
	require.Equal(t, int64(20), series[1].Errors)
	require.Equal(t, 4.0, series[1].PushesPerSec)
	require.Equal(t, 0.5, series[2].Span)
	require.Equal(t, 18.0, series[2].MsgsPerSec, "9 items over half a second")

	require.Equal(t, int64(7), all.Pushes)
	require.Equal(t, int64(5), m.Pushes, "warmup pushes excluded")
	require.Equal(t, int64(19), m.Queued)
	require.Equal(t, int64(10), m.Duplicate)
	require.Equal(t, int64(20), m.ErrorItems)
	require.Equal(t, m.Items, m.Queued+m.Duplicate+m.ErrorItems)
	require.Equal(t, map[int]int64{503: 1}, m.HTTPErrors)
	require.Equal(t, int64(1), m.NetworkErrors)
	require.Equal(t, int64(2), m.Retries)
	require.Equal(t, int64(1), m.ResentPushes)
	require.Equal(t, int64(10), m.ResentDuplicate)
	require.Zero(t, m.FreshDuplicate)
	require.Equal(t, uint64(3), hist.Count())
	require.Equal(t, 40*ms, hist.Max())
	require.Equal(t, uint64(2), errHist.Count())
}

func TestReportJSON(t *testing.T) {
	t.Parallel()
	r := &Report{Label: "j", Totals: Totals{HTTPErrors: map[int]int64{503: 2}}, Broker: Broker{RSSMax: new(1.5)},
		Series: []Point{{T: 1, Span: 1, MsgsPerSec: 10, P50Ms: 1, P99Ms: 2}}}
	var buf bytes.Buffer
	require.NoError(t, writeJSON("-", r, &buf))
	var back map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &back))
	require.Equal(t, map[string]any{"503": 2.0}, back["totals"].(map[string]any)["http_errors"])
	require.Equal(t, 1.5, back["broker"].(map[string]any)["rss_max_mib"])
	require.NotContains(t, back["broker"], "cpu_cores", "unknown figures are left out")
	pt := back["series"].([]any)[0].(map[string]any)
	require.Equal(t, 10.0, pt["msgs_per_sec"])
	require.Equal(t, 2.0, pt["p99_ms"])
}

func TestRecorderQueenAnswersAndOutages(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := NewRecorder(start, start)
	ms := time.Millisecond
	res := func(at time.Duration, items int, o PushOutcome) *PushResult {
		return &PushResult{Slot: Slot{Intended: start.Add(at), Start: start.Add(at)}, Done: start.Add(at + ms), Items: items, Final: o}
	}
	refused := pushanswer.Failure(syscall.ECONNREFUSED)
	// Queen: a 200 with verdicts, a buffered answer, a 200 error object.
	rec.Record(res(0, 3, pushanswer.Read(200, []byte(`[{"status": "queued"}, {"status": "duplicate"}, {"status": "queued"}]`), 3)))
	rec.Record(res(10*ms, 2, pushanswer.Read(200, []byte(`[{"status":"buffered"},{"status":"buffered"}]`), 2)))
	rec.Record(res(20*ms, 2, pushanswer.Read(200, []byte(`{"error":"db down"}`), 2)))
	// A malformed answer with more verdicts than items counts none of them.
	rec.Record(res(30*ms, 1, pushanswer.Read(201, []byte(`[{"status":"queued"},{"status":"queued"}]`), 1)))
	// The broker goes away at 100 ms: two refused pushes, then an answer
	// that completed before the outage began (reported late), then the
	// broker is back at 2 s.
	rec.Record(res(100*ms, 2, refused))
	rec.Record(res(600*ms, 2, refused))
	rec.Record(res(50*ms, 1, pushanswer.Read(201, []byte(`[{"status":"queued"}]`), 1)))
	rec.Record(res(2000*ms, 1, pushanswer.Read(201, []byte(`[{"status":"queued"}]`), 1)))
	// Gone again until the end of the run.
	rec.Record(res(2500*ms, 1, pushanswer.Failure(syscall.ECONNRESET)))
	rec.Finish(start.Add(3 * time.Second))

	_, m, _, _, series, _ := rec.Snapshot()
	require.Equal(t, int64(4), m.Queued)
	require.Equal(t, int64(1), m.Duplicate)
	require.Equal(t, int64(2), m.Buffered)
	require.Equal(t, m.Items, m.Queued+m.Duplicate+m.Buffered+m.ErrorItems)
	require.Equal(t, int64(8), m.ErrorItems)
	require.Equal(t, map[int]int64{200: 2, 201: 2}, m.OKStatuses)
	require.Equal(t, int64(1), m.ErrorBodies)
	require.Equal(t, int64(1), m.BadAnswers)
	require.Equal(t, map[string]int64{netRefused: 2, netReset: 1}, m.NetworkErrorKinds)
	require.Equal(t, int64(3), m.NetworkErrors)
	require.Equal(t, int64(2), series[0].NoAnswer)
	require.Equal(t, int64(7), series[0].Pushes)

	out := rec.Outages()
	require.Len(t, out, 2)
	require.Equal(t, Outage{FromS: 0.101, ToS: 2.001, Failures: 2}, roundOutage(out[0]))
	require.Equal(t, Outage{FromS: 2.501, ToS: 3, Failures: 1, UntilEnd: true}, roundOutage(out[1]))
}

func roundOutage(o Outage) Outage {
	r := func(v float64) float64 { return math.Round(v*1000) / 1000 }
	o.FromS, o.ToS = r(o.FromS), r(o.ToS)
	return o
}
