package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strconv"

	"github.com/regina-mq/regina/internal/chart"
)

var (
	colBG      = color.RGBA{255, 255, 255, 255}
	colFrame   = color.RGBA{60, 60, 60, 255}
	colGrid    = color.RGBA{225, 225, 225, 255}
	colText    = color.RGBA{20, 20, 20, 255}
	colMuted   = color.RGBA{110, 110, 110, 255}
	colWarmup  = color.RGBA{245, 238, 215, 255}
	colThrough = color.RGBA{30, 110, 190, 255}
	colP50     = color.RGBA{40, 150, 70, 255}
	colP99     = color.RGBA{210, 50, 40, 255}
)

// canvas adds this plot's panels to the shared drawing primitives.
type canvas struct{ *chart.Canvas }

// tickLabel formats a tick value compactly ("1.5k", "250", "0.25");
// kilo writes thousands as "k" (for an axis reaching 10000 or more).
func tickLabel(v, step float64, kilo bool) string {
	if v == 0 {
		return "0"
	}
	if kilo {
		k := v / 1000
		dec := 0
		switch {
		case math.Mod(step, 100) != 0:
			dec = 2
		case math.Mod(step, 1000) != 0:
			dec = 1
		}
		return strconv.FormatFloat(k, 'f', dec, 64) + "k"
	}
	dec := 0
	for s := step; s < 1 && dec < 4; s *= 10 {
		dec++
	}
	if step-math.Floor(step) > 1e-9 && dec == 0 {
		dec = 1
	}
	return strconv.FormatFloat(v, 'f', dec, 64)
}

type series struct {
	name string
	col  color.RGBA
	x, y []float64
	// skip marks points to leave out (a second without answers has no
	// latency); the line breaks around them.
	skip []bool
}

type panel struct {
	rect   image.Rectangle // plotting area (inside the axes)
	title  string
	xMax   float64
	warmup float64
	lines  []series
}

func (c *canvas) drawPanel(p panel) {
	r := p.rect
	yMax := 0.0
	for _, s := range p.lines {
		for i, v := range s.y {
			if !s.skip[i] && !math.IsNaN(v) {
				yMax = max(yMax, v)
			}
		}
	}
	if yMax <= 0 {
		yMax = 1
	}
	yStep := chart.NiceStep(yMax, 5)
	yTop := math.Ceil(yMax*1.05/yStep) * yStep
	xMax := max(p.xMax, 1)
	xStep := max(chart.NiceStep(xMax, 10), 1)
	xTop := math.Ceil(xMax/xStep-0.02) * xStep

	px := func(x float64) int { return r.Min.X + int(math.Round(x/xTop*float64(r.Dx()))) }
	py := func(y float64) int { return r.Max.Y - int(math.Round(y/yTop*float64(r.Dy()))) }

	if p.warmup > 0 {
		c.Fill(image.Rect(r.Min.X, r.Min.Y, px(min(p.warmup, xTop)), r.Max.Y), colWarmup)
		c.Text(r.Min.X+4, r.Max.Y-5, "warmup", colMuted)
	}
	// Grid and y ticks.
	for v := 0.0; v <= yTop+yStep/2; v += yStep {
		y := py(v)
		if v > 0 {
			c.HLine(r.Min.X+1, r.Max.X-1, y, colGrid)
		}
		c.HLine(r.Min.X-5, r.Min.X, y, colFrame)
		lab := tickLabel(v, yStep, yTop >= 10000)
		c.Text(r.Min.X-8-c.TextWidth(lab), y+4, lab, colText)
	}
	// x ticks.
	for v := 0.0; v <= xTop+xStep/2; v += xStep {
		x := px(v)
		if v > 0 {
			c.VLine(x, r.Min.Y+1, r.Max.Y-1, colGrid)
		}
		c.VLine(x, r.Max.Y, r.Max.Y+5, colFrame)
		lab := tickLabel(v, xStep, false)
		c.Text(x-c.TextWidth(lab)/2, r.Max.Y+18, lab, colText)
	}
	// Frame.
	c.HLine(r.Min.X, r.Max.X, r.Min.Y, colFrame)
	c.HLine(r.Min.X, r.Max.X, r.Max.Y, colFrame)
	c.VLine(r.Min.X, r.Min.Y, r.Max.Y, colFrame)
	c.VLine(r.Max.X, r.Min.Y, r.Max.Y, colFrame)
	// Data.
	for _, s := range p.lines {
		havePrev := false
		var x0, y0 int
		for i := range s.x {
			if s.skip[i] {
				havePrev = false
				continue
			}
			x1, y1 := px(s.x[i]), py(s.y[i])
			if havePrev {
				c.Line(x0, y0, x1, y1, 2, s.col)
			}
			c.Dot(x1, y1, 4, s.col)
			x0, y0, havePrev = x1, y1, true
		}
	}
	// Title and legend above the panel.
	c.Text(r.Min.X, r.Min.Y-7, p.title, colText)
	lx := r.Max.X
	for i := len(p.lines) - 1; i >= 0; i-- {
		s := p.lines[i]
		w := c.TextWidth(s.name)
		lx -= w
		c.Text(lx, r.Min.Y-7, s.name, colText)
		lx -= 22
		c.Fill(image.Rect(lx, r.Min.Y-13, lx+16, r.Min.Y-10), s.col)
		lx -= 14
	}
}

// DrawPlot draws the report's time series as a PNG of w x h pixels: the
// throughput panel on top, p50/p99 latency below.
func DrawPlot(out io.Writer, rep *Report, w, h int) error {
	if w < 300 || h < 250 {
		return fmt.Errorf("plot size %dx%d too small", w, h)
	}
	c := &canvas{chart.New(w, h)}
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

	c.drawPanel(panel{rect: upper, title: "throughput (msgs/s)", xMax: xMax, warmup: warmup,
		lines: []series{{name: "msgs/s", col: colThrough, x: xs, y: thr, skip: none}}})
	c.drawPanel(panel{rect: lower, title: "push latency (ms)", xMax: xMax, warmup: warmup,
		lines: []series{
			{name: "p50", col: colP50, x: xs, y: p50, skip: noLat},
			{name: "p99", col: colP99, x: xs, y: p99, skip: noLat},
		}})
	xl := "time (s)"
	c.Text(right-c.TextWidth(xl), h-6, xl, colMuted)
	if n == 0 {
		msg := "no data"
		c.Text((w-c.TextWidth(msg))/2, h/2, msg, colMuted)
	}
	return png.Encode(out, c.Img)
}
