package main

import (
	"bytes"
	"image"
	"image/png"
	"testing"

	"github.com/regina-mq/regina/internal/chart"

	"github.com/stretchr/testify/require"
)

func TestDrawPlot(t *testing.T) {
	t.Parallel()
	rep := &Report{Label: "test", Mode: "closed", MsgsPerSec: 12000, Config: Config{Connections: 4, Partitions: 2, Items: 10}}
	for i := range 12 {
		rep.Series = append(rep.Series, Point{T: float64(i + 1), Span: 1, Warmup: i < 2,
			MsgsPerSec: 10000 + float64(i*100), P50Ms: 2, P99Ms: 10 + float64(i), Queued: 100})
	}
	rep.Series = append(rep.Series, Point{T: 12.1, Span: 0.1, MsgsPerSec: 1})
	var buf bytes.Buffer
	require.NoError(t, DrawPlot(&buf, rep, 900, 600))
	img, err := png.Decode(&buf)
	require.NoError(t, err)
	require.Equal(t, image.Rect(0, 0, 900, 600), img.Bounds())
	// Something other than background was drawn in both panels.
	require.True(t, hasColor(img, colThrough))
	require.True(t, hasColor(img, colP99))
	require.True(t, hasColor(img, colWarmup))

	// An empty run still draws.
	buf.Reset()
	require.NoError(t, DrawPlot(&buf, &Report{Label: "empty"}, 900, 600))
	require.Error(t, DrawPlot(&buf, rep, 10, 10))
}

func hasColor(img image.Image, c interface{ RGBA() (r, g, b, a uint32) }) bool {
	wr, wg, wb, _ := c.RGBA()
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bb, _ := img.At(x, y).RGBA()
			if r == wr && g == wg && bb == wb {
				return true
			}
		}
	}
	return false
}

func TestNiceStepAndTickLabels(t *testing.T) {
	t.Parallel()
	require.Equal(t, 5000.0, chart.NiceStep(25000, 5))
	require.Equal(t, 1.0, chart.NiceStep(10, 10))
	require.InDelta(t, 0.02, chart.NiceStep(0.1, 5), 1e-12)
	require.Equal(t, "25k", chart.TickLabel(25000, 5000, true))
	require.Equal(t, "5k", chart.TickLabel(5000, 5000, true))
	require.Equal(t, "12.5k", chart.TickLabel(12500, 2500, true))
	require.Equal(t, "5000", chart.TickLabel(5000, 1000, false))
	require.Equal(t, "250", chart.TickLabel(250, 50, false))
	require.Equal(t, "0.25", chart.TickLabel(0.25, 0.05, false))
	require.Equal(t, "7.5", chart.TickLabel(7.5, 2.5, false))
	require.Equal(t, "0", chart.TickLabel(0, 1, true))
}
