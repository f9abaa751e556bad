package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

func TestDrainTenthsAndBuckets(t *testing.T) {
	// 100 acks: the first 50 one every 10 ms, the last 50 one every 100 ms.
	d := &drainRun{}
	at := time.Duration(0)
	for i := range 100 {
		if i < 50 {
			at += 10 * time.Millisecond
		} else {
			at += 100 * time.Millisecond
		}
		d.done = append(d.done, at)
	}
	require.InDelta(t, 100.0, d.tenth(0), 0.01, "10 acks in the first 100 ms")
	require.InDelta(t, 10.0, d.tenth(9), 0.01, "10 acks in the last second")
	require.InDelta(t, 0.1, d.tenth(9)/d.tenth(0), 0.001)
	require.Zero(t, (&drainRun{done: d.done[:9]}).tenth(0), "fewer than ten acks have no tenths")

	// Acks by the age of the cluster's oldest transaction: young over the
	// first half second, a minute old after it.
	d.oldestTx = []txSample{{0, time.Second}, {500 * time.Millisecond, 70 * time.Second}, {5500 * time.Millisecond, time.Second}}
	young, yt := d.rateWhile(func(a time.Duration) bool { return a < 10*time.Second })
	old, ot := d.rateWhile(func(a time.Duration) bool { return a >= time.Minute })
	require.InDelta(t, 98.0, young, 0.01, "49 acks in [0, 0.5 s)")
	require.Equal(t, 500*time.Millisecond, yt)
	require.InDelta(t, 10.0, old, 0.01, "50 acks in [0.5 s, 5.5 s)")
	require.Equal(t, 5*time.Second, ot)

	xs, ys := drainBuckets(d.done)
	require.Len(t, ys, len(xs))
	total := 0.0
	for i := range xs {
		w := xs[0]
		if i > 0 {
			w = xs[i] - xs[i-1]
		}
		total += ys[i] * w
	}
	require.InDelta(t, 100.0, total, 0.001, "the buckets hold every ack")
	require.GreaterOrEqual(t, xs[len(xs)-1], d.done[len(d.done)-1].Seconds())
}

func TestScaleOnlyDrain(t *testing.T) {
	c, err := parseFlags([]string{"-scale", "-scale-only", "drain", "-scale-drain", "5k"}, io.Discard)
	require.NoError(t, err)
	require.Empty(t, c.scaleParts)
	require.Empty(t, c.scaleHashes)
	require.Empty(t, c.scalePop)
	require.Equal(t, 5000, c.scaleDrain)

	c, err = parseFlags([]string{"-scale", "-scale-drain", "none"}, io.Discard)
	require.NoError(t, err)
	require.Zero(t, c.scaleDrain)
	require.NotEmpty(t, c.scaleParts)

	_, err = parseFlags([]string{"-scale", "-scale-only", "drian"}, io.Discard)
	require.ErrorContains(t, err, "unknown phase")
	require.True(t, loadHigh("0.5 2.5 1.0 to 1 1 1"))
	require.False(t, loadHigh("0.5 1.5 1.0 to 1 1 2"))
}

// The drain alone: its section and plot are written, the scale section is
// left as it was.
func TestLong_ScaleOnlyDrainRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a broker")
	}
	url := sqlstoretest.URL(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "RESULTS.md")
	before := "<!-- scale:begin -->\nearlier scale figures\n<!-- scale:end -->\n"
	require.NoError(t, os.WriteFile(out, []byte(before), 0o644))
	code := run([]string{"-scale", "-scale-only", "drain", "-database-url", url, "-regina", filepath.Join(dir, "regina"),
		"-connections", "4", "-scale-drain", "150", "-scale-drain-per", "3", "-scale-drain-consumers", "3", "-out", out, "-plot-dir", dir})
	require.Zero(t, code)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	doc := string(b)
	require.Contains(t, doc, before)
	require.Contains(t, doc, "| 150 | 450 | all | 3 |")
	require.Contains(t, doc, "| tenth of the backlog |")
	require.NotContains(t, doc, "exited by itself")
	st, err := os.Stat(filepath.Join(dir, "scale-drain.png"))
	require.NoError(t, err)
	require.Positive(t, st.Size())
}
