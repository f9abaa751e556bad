package main

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// promScrape is one parsed GET /metrics/prometheus.
type promScrape map[string]*dto.MetricFamily

func scrapeProm(t *testing.T, b *testBroker) promScrape {
	t.Helper()
	resp, err := httpClient.Get(b.URL + "/metrics/prometheus")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/plain; version=0.0.4; charset=utf-8", resp.Header.Get("Content-Type"))
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	require.NoError(t, err, "%s", body)
	return mfs
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

// value sums the counters or gauges of a family whose labels include want
// (for histograms: the sample count). 0 when the family is absent.
func (s promScrape) value(name string, want map[string]string) float64 {
	mf := s[name]
	if mf == nil {
		return 0
	}
	var v float64
	for _, m := range mf.GetMetric() {
		if !labelsMatch(m, want) {
			continue
		}
		switch {
		case m.Counter != nil:
			v += m.GetCounter().GetValue()
		case m.Gauge != nil:
			v += m.GetGauge().GetValue()
		case m.Histogram != nil:
			v += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return v
}

// histSum sums the histogram sample sums of a family whose labels include want.
func (s promScrape) histSum(name string, want map[string]string) float64 {
	var v float64
	if mf := s[name]; mf != nil {
		for _, m := range mf.GetMetric() {
			if labelsMatch(m, want) && m.Histogram != nil {
				v += m.GetHistogram().GetSampleSum()
			}
		}
	}
	return v
}

// bucket returns the cumulative count of the histogram bucket le.
func (s promScrape) bucket(name string, want map[string]string, le float64) float64 {
	var v float64
	if mf := s[name]; mf != nil {
		for _, m := range mf.GetMetric() {
			if !labelsMatch(m, want) || m.Histogram == nil {
				continue
			}
			for _, b := range m.GetHistogram().GetBucket() {
				if b.GetUpperBound() == le {
					v += float64(b.GetCumulativeCount())
				}
			}
		}
	}
	return v
}

// labelSets returns, per regina_* family, its number of distinct label sets.
func (s promScrape) labelSets() map[string]int {
	out := make(map[string]int)
	for name, mf := range s {
		if !strings.HasPrefix(name, "regina_") {
			continue
		}
		seen := make(map[string]bool)
		for _, m := range mf.GetMetric() {
			var parts []string
			for _, lp := range m.GetLabel() {
				parts = append(parts, lp.GetName()+"="+lp.GetValue())
			}
			sort.Strings(parts)
			seen[strings.Join(parts, ",")] = true
		}
		out[name] = len(seen)
	}
	return out
}

// Metric values move as pushes, duplicates, retention and acks happen:
// scrape, act, scrape again.
func TestPrometheusMetricsMoveWithTraffic(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", func(c *Config) { c.RetentionInterval = 50 * time.Millisecond })
	d := newDB(t, b.Schema)
	b.configure(t, "m", map[string]any{"retentionEnabled": true, "retentionSeconds": 60})

	s0 := scrapeProm(t, b)
	for _, f := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total",
		"process_resident_memory_bytes", "regina_actors", "regina_mailbox_depth_items", "regina_db_pool_connections",
		"regina_db_pool_max_connections", "regina_dedup_probes_total", "regina_dedup_cache_bytes",
		"regina_dedup_cache_partitions", "regina_retention_deleted_rows_total"} {
		require.Contains(t, s0, f)
	}
	require.Equal(t, 6.0, s0.value("regina_db_pool_max_connections", nil), "DB_POOL_SIZE of the harness")
	m := map[string]string{"queue": "m"}
	verdict := func(s promScrape, v string) float64 {
		return s.value("regina_dedup_verdicts_total", map[string]string{"queue": "m", "verdict": v})
	}

	// A push of three items, one repeating another in the body.
	res := b.push(t, item{"queue": "m", "partition": "p", "transactionId": "a"},
		item{"queue": "m", "partition": "p", "transactionId": "b"},
		item{"queue": "m", "partition": "p", "transactionId": "a"})
	require.Equal(t, []string{"queued", "queued", "duplicate"}, statuses(res))
	s1 := scrapeProm(t, b)
	require.Equal(t, 2.0, verdict(s1, "queued")-verdict(s0, "queued"))
	require.Equal(t, 1.0, verdict(s1, "duplicate")-verdict(s0, "duplicate"))
	require.Equal(t, 0.0, verdict(s1, "duplicate_unknown_original"))
	require.Equal(t, 1.0, s1.value("regina_push_batch_items", nil)-s0.value("regina_push_batch_items", nil))
	require.Equal(t, 3.0, s1.histSum("regina_push_batch_items", nil)-s0.histSum("regina_push_batch_items", nil))
	require.GreaterOrEqual(t, s1.value("regina_push_transaction_duration_seconds", nil)-
		s0.value("regina_push_transaction_duration_seconds", nil), 1.0)
	pushRoute := map[string]string{"route": "/api/v1/push", "method": "POST", "code": "201"}
	require.Equal(t, 1.0, s1.value("regina_http_requests_total", pushRoute)-s0.value("regina_http_requests_total", pushRoute))
	require.Equal(t, 1.0, s1.value("regina_http_request_duration_seconds", map[string]string{"route": "/api/v1/push"}))
	require.Equal(t, 0.0, s1.value("regina_dedup_retry_age_seconds", m), "an in-body repeat is no retry")

	// A retry 30 s after the original (aged in the database, not slept).
	d.exec(t, `UPDATE queen.log_txns SET created_at = created_at - interval '30 seconds'`)
	dup := b.push(t, item{"queue": "m", "partition": "p", "transactionId": "a"})
	require.Equal(t, "duplicate", dup[0].Status)
	require.Equal(t, res[0].MessageID, dup[0].MessageID)
	s2 := scrapeProm(t, b)
	require.Equal(t, 1.0, verdict(s2, "duplicate")-verdict(s1, "duplicate"))
	require.Equal(t, 1.0, s2.value("regina_dedup_retry_age_seconds", m))
	age := s2.histSum("regina_dedup_retry_age_seconds", m)
	require.GreaterOrEqual(t, age, 30.0)
	require.Less(t, age, 90.0)
	require.Equal(t, 0.0, s2.bucket("regina_dedup_retry_age_seconds", m, 10))
	require.Equal(t, 1.0, s2.bucket("regina_dedup_retry_age_seconds", m, 120))

	// Retention removes the original's segment (its hashes stay): the next
	// retry is a duplicate with the zero UUID.
	d.exec(t, `UPDATE queen.segments SET created_at = created_at - interval '2 minutes'`)
	checkFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if scrapeProm(t, b).value("regina_retention_deleted_rows_total", map[string]string{"table": "segments"}) < 1 {
			return errNotYet
		}
		return nil
	})
	gone := b.push(t, item{"queue": "m", "partition": "p", "transactionId": "a"})
	require.Equal(t, "duplicate", gone[0].Status)
	require.Equal(t, zeroUUID, gone[0].MessageID)
	s3 := scrapeProm(t, b)
	require.Equal(t, 1.0, verdict(s3, "duplicate_unknown_original"))
	require.Equal(t, verdict(s2, "duplicate"), verdict(s3, "duplicate"), "counted once, as unknown original")
	require.Equal(t, 2.0, s3.value("regina_dedup_retry_age_seconds", m))
	require.GreaterOrEqual(t, s3.value("regina_retention_passes_total", map[string]string{"result": "ok"}), 1.0)

	// An ack whose hash aged out of the sidecar is unresolvable.
	pushN(t, b, "aged", "Default", 0, 1)
	r := b.pop(t, "aged", "", nil)
	d.exec(t, `SELECT queen.sidecar_ensure(now() - interval '3 hours', now(), interval '1 hour')`)
	d.exec(t, `UPDATE queen.log_txns SET created_at = created_at - interval '2 hours'
		WHERE partition_id IN (SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		                        WHERE q.name = 'aged')`)
	checkFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if d.int(t, `SELECT count(*) FROM queen.log_txns l JOIN queen.partitions p ON p.id = l.partition_id
			JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'aged'`) > 0 {
			return errNotYet
		}
		return nil
	})
	a := b.ack(t, r.Messages[0], "completed", "")
	require.False(t, a.Success)
	require.Equal(t, "unresolvable", *a.Error)
	// The pass that dropped the rows reports when it ends (it may have
	// more children to drop).
	var s4 promScrape
	checkFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		s4 = scrapeProm(t, b)
		if s4.value("regina_retention_deleted_rows_total", map[string]string{"table": "log_txns"}) < 1 {
			return errNotYet
		}
		return nil
	})
	require.Equal(t, 1.0, s4.value("regina_ack_unresolvable_total", map[string]string{"queue": "aged"}))

	// The gauges and the cache's probe counters are live.
	require.GreaterOrEqual(t, s4.value("regina_actors", nil), 1.0)
	require.Greater(t, s4.value("regina_dedup_probes_total", nil), s0.value("regina_dedup_probes_total", nil))
	require.Greater(t, s4.value("regina_db_pool_connections", nil), 0.0)

	// Routes are templates, never raw paths.
	status, _ := do(t, "GET", b.URL+"/api/v1/resources/queues/m", nil)
	require.Equal(t, http.StatusOK, status)
	status, _ = do(t, "GET", b.URL+"/api/v1/no/such/route-xyz", nil)
	require.Equal(t, http.StatusNotFound, status)
	s5 := scrapeProm(t, b)
	require.Equal(t, 1.0, s5.value("regina_http_requests_total",
		map[string]string{"route": "/api/v1/resources/queues/:queue", "method": "GET", "code": "200"}))
	require.GreaterOrEqual(t, s5.value("regina_http_requests_total", map[string]string{"route": "other", "code": "404"}), 1.0)
	for _, mt := range s5["regina_http_requests_total"].GetMetric() {
		for _, lp := range mt.GetLabel() {
			if lp.GetName() == "route" {
				require.NotContains(t, lp.GetValue(), "xyz")
				require.False(t, strings.HasSuffix(lp.GetValue(), "/m"), lp.GetValue())
			}
		}
	}

	// GET /metrics keeps the JSON summary.
	status, body := do(t, "GET", b.URL+"/metrics", nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(body), `"dedupCache"`)
}

// Label cardinality does not grow with partitions: 2,000 partitions of four
// queues give the same label sets as 100.
func TestPrometheusLabelCardinalityIsBounded(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("pushes to 2,000 partitions")
	}
	b := startBroker(t, "", func(c *Config) { c.PoolSize = 16 })
	queues := []string{"card.a", "card.b", "card.c", "card.d"}
	pushParts := func(from, to int) {
		for lo := from; lo < to; lo += 1000 {
			var items []item
			for i := lo; i < min(lo+1000, to); i++ {
				items = append(items, item{"queue": queues[i%len(queues)], "partition": fmt.Sprintf("part-%05d", i),
					"transactionId": fmt.Sprintf("tx-%05d", i)})
			}
			for _, r := range b.push(t, items...) {
				require.Equal(t, "queued", r.Status)
			}
		}
	}
	pushParts(0, 100)
	scrapeProm(t, b) // the scrape route itself appears from the second scrape on
	small := scrapeProm(t, b).labelSets()
	pushParts(100, 2000)
	big := scrapeProm(t, b)
	for fam, n := range big.labelSets() {
		require.Equal(t, small[fam], n, "family %s grew with partitions", fam)
		require.LessOrEqual(t, n, 64, "family %s", fam)
	}
	for name, mf := range big {
		if !strings.HasPrefix(name, "regina_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				require.False(t, strings.HasPrefix(lp.GetValue(), "part-") || strings.HasPrefix(lp.GetValue(), "tx-"),
					"%s has a per-partition or per-transaction label %s=%s", name, lp.GetName(), lp.GetValue())
			}
		}
	}
	require.Equal(t, 2000.0, big.value("regina_dedup_verdicts_total", map[string]string{"verdict": "queued"}))
	require.Equal(t, 500.0, big.value("regina_dedup_verdicts_total", map[string]string{"queue": "card.a", "verdict": "queued"}))
}
