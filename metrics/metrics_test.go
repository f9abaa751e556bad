package metrics

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

func gather(t *testing.T, m *Metrics) string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, m.WriteText(&buf))
	p := expfmt.NewTextParser(model.UTF8Validation)
	_, err := p.TextToMetricFamilies(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err, "the output parses as the text format")
	return buf.String()
}

func TestQueueLabelsAreCapped(t *testing.T) {
	m := New(Config{MaxQueueLabels: 3})
	for i := range 10 {
		q := m.ForQueue(fmt.Sprintf("q%d", i))
		q.Verdicts(1, 1, 0)
		q.ObserveRetryAge(time.Second)
		m.UnresolvableAck(fmt.Sprintf("q%d", i))
	}
	require.Equal(t, "q0", m.QueueLabel("q0"))
	require.Equal(t, OtherQueue, m.QueueLabel("q9"))
	out := gather(t, m)
	for _, q := range []string{"q0", "q1", "q2", OtherQueue} {
		require.Contains(t, out, `regina_dedup_verdicts_total{queue="`+q+`",verdict="queued"}`)
	}
	require.NotContains(t, out, `queue="q3"`)
	require.Contains(t, out, `regina_dedup_verdicts_total{queue="__other__",verdict="queued"} 7`)
	require.Contains(t, out, `regina_ack_unresolvable_total{queue="__other__"} 7`)
	require.Contains(t, out, `regina_dedup_retry_age_seconds_count{queue="__other__"} 7`)
}

func TestSnapshotFamiliesNeedASource(t *testing.T) {
	m := New(Config{})
	out := gather(t, m)
	require.NotContains(t, out, "regina_actors")
	require.Contains(t, out, "go_goroutines")
	require.Contains(t, out, `regina_retention_deleted_rows_total{table="segments"} 0`)

	m.SetSource(func() Snapshot {
		return Snapshot{Actors: 3, MailboxDepth: 7, Pool: PoolSnapshot{Total: 4, Idle: 1, Acquired: 2, Max: 16},
			Packed:   PackedSnapshot{RoundTrips: 4, Batches: 9},
			ReadOnly: ReadOnlySnapshot{ByOriginals: 6, ByWindowProbe: 2, Misses: 1},
			Cache: CacheSnapshot{Hits: 5, SentinelsByReason: map[string]uint64{"unknown": 2, "gap": 1},
				Hydrations: map[string]uint64{"started": 1}}}
	})
	m.ObserveRetention(10, 2, false)
	m.ObserveRetention(0, 0, true)
	out = gather(t, m)
	for _, line := range []string{
		"regina_actors 3", "regina_mailbox_depth_items 7", `regina_db_pool_connections{state="acquired"} 2`,
		`regina_db_pool_connections{state="constructing"} 1`, "regina_db_pool_max_connections 16",
		`regina_dedup_probes_total{cause="cache_hit",path="watermark"} 5`,
		`regina_dedup_probes_total{cause="unknown",path="full_window"} 2`,
		`regina_retention_deleted_rows_total{table="log_txns"} 10`,
		`regina_retention_passes_total{result="error"} 1`,
		"regina_push_packed_round_trips_total 4", "regina_push_packed_batches_total 9",
		`regina_push_readonly_batches_total{proof="originals"} 6`,
		`regina_push_readonly_batches_total{proof="window_probe"} 2`,
		"regina_push_readonly_misses_total 1",
	} {
		require.Contains(t, out, line+"\n", "missing %q", line)
	}
}

// Every series the Grafana dashboard queries is one this package exports.
func TestDashboardUsesExportedSeries(t *testing.T) {
	raw, err := os.ReadFile("../dashboards/regina.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))

	m := New(Config{})
	m.SetSource(func() Snapshot {
		return Snapshot{Cache: CacheSnapshot{SentinelsByReason: map[string]uint64{"unknown": 0},
			Hydrations: map[string]uint64{"started": 0}}}
	})
	m.ForQueue("q").ObserveRetryAge(time.Second)
	m.UnresolvableAck("q")
	m.ObserveHTTP("/api/v1/push", "POST", 201, time.Millisecond)
	m.ObserveBatch(1)
	m.ObservePushTransaction(time.Millisecond)
	mfs, err := m.Registry().Gather()
	require.NoError(t, err)
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	series := regexp.MustCompile(`\b(?:regina|go|process)_[a-z_]+`)
	n := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, s := range series.FindAllString(tg.Expr, -1) {
				fam := s
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if f, ok := strings.CutSuffix(s, suf); ok && have[f] {
						fam = f
					}
				}
				require.True(t, have[fam], "panel %q queries %s, which is not exported", p.Title, s)
				n++
			}
		}
	}
	require.Greater(t, n, 20)
}
