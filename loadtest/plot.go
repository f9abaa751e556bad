package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"

	"github.com/regina-mq/regina/internal/chart"
)

var (
	colBG      = chart.ColBG
	colText    = chart.ColText
	colMuted   = chart.ColMuted
	colWarmup  = chart.ColWarmup
	colThrough = color.RGBA{30, 110, 190, 255}
	colP50     = color.RGBA{40, 150, 70, 255}
	colP99     = color.RGBA{210, 50, 40, 255}
)

// DrawPlot draws the report's time series as a PNG of w x h pixels: the
// throughput panel on top, p50/p99 latency below.
func DrawPlot(out io.Writer, rep *Report, w, h int) error {
	if w < 300 || h < 250 {
		return fmt.Errorf("plot size %dx%d too small", w, h)
	}
	c := chart.New(w, h)
	c.Fill(c.Img.Bounds(), colBG)

	title := "regina-loadtest: " + rep.Label
	c.Text((w-c.TextWidth(title))/2, 18, title, colText)
	nums := fmt.Sprintf("%s msgs/s   %s pushes/s   p50 %s ms   p99 %s ms   p99.9 %s ms   max %s ms",
		fmtNum(rep.MsgsPerSec), fmtNum(rep.PushesPerSec), fmtMs(rep.Latency.P50), fmtMs(rep.Latency.P99),
		fmtMs(rep.Latency.P999), fmtMs(rep.Latency.Max))
	c.Text((w-c.TextWidth(nums))/2, 34, nums, colText)
	loop := "closed loop"
	if rep.Mode == "open" {
		loop = "open loop at " + fmtNum(rep.Config.Rate) + " pushes/s"
	}
	shape := fmt.Sprintf("%s, %d connections, %d partitions, %d items/push, %d B payload, dup-ratio %.2f, errors %d",
		loop, rep.Config.Connections, rep.Config.Partitions, rep.Config.Items, rep.Config.Payload, rep.Config.DupRatio, rep.Totals.Errors())
	c.Text((w-c.TextWidth(shape))/2, 50, shape, colMuted)

	// A last partial second shorter than half a second is too noisy to draw
	// (it stays in the JSON series).
	pts := rep.Series
	if k := len(pts); k > 0 && pts[k-1].Span < 0.5 {
		pts = pts[:k-1]
	}
	n := len(pts)
	xs := make([]float64, n)
	thr := make([]float64, n)
	p50 := make([]float64, n)
	p99 := make([]float64, n)
	none := make([]bool, n)
	noLat := make([]bool, n)
	xMax := 0.0
	for i, p := range pts {
		xs[i] = p.T - p.Span/2
		thr[i] = p.MsgsPerSec
		p50[i], p99[i] = p.P50Ms, p.P99Ms
		noLat[i] = p.Queued+p.Duplicate == 0
		xMax = max(xMax, p.T)
	}
	warmup := 0.0
	for _, p := range pts {
		if p.Warmup {
			warmup = p.T
		}
	}

	left, right := 72, w-20
	top := 80
	bottom := h - 40
	gap := 50
	ph := (bottom - top - gap) / 2
	upper := image.Rect(left, top, right, top+ph)
	lower := image.Rect(left, top+ph+gap, right, bottom)

	c.DrawPanel(chart.Panel{Rect: upper, Title: "throughput (msgs/s)", XMax: xMax, Warmup: warmup,
		Lines: []chart.Series{{Name: "msgs/s", Col: colThrough, X: xs, Y: thr, Skip: none}}})
	c.DrawPanel(chart.Panel{Rect: lower, Title: "push latency (ms)", XMax: xMax, Warmup: warmup,
		Lines: []chart.Series{
			{Name: "p50", Col: colP50, X: xs, Y: p50, Skip: noLat},
			{Name: "p99", Col: colP99, X: xs, Y: p99, Skip: noLat},
		}})
	xl := "time (s)"
	c.Text(right-c.TextWidth(xl), h-6, xl, colMuted)
	if n == 0 {
		msg := "no data"
		c.Text((w-c.TextWidth(msg))/2, h/2, msg, colMuted)
	}
	return png.Encode(out, c.Img)
}
