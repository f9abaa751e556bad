package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
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

// canvas draws lines, rectangles and text on an RGBA image.
type canvas struct {
	img  *image.RGBA
	face font.Face
}

func (c *canvas) fill(r image.Rectangle, col color.Color) {
	draw.Draw(c.img, r.Intersect(c.img.Bounds()), image.NewUniform(col), image.Point{}, draw.Src)
}

func (c *canvas) hline(x0, x1, y int, col color.Color) { c.fill(image.Rect(x0, y, x1+1, y+1), col) }
func (c *canvas) vline(x, y0, y1 int, col color.Color) { c.fill(image.Rect(x, y0, x+1, y1+1), col) }

// line draws a segment of the given width (Bresenham, square pen).
func (c *canvas) line(x0, y0, x1, y1, width int, col color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		c.dot(x0, y0, width, col)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func (c *canvas) dot(x, y, width int, col color.RGBA) {
	lo := -(width - 1) / 2
	for i := lo; i < lo+width; i++ {
		for j := lo; j < lo+width; j++ {
			if image.Pt(x+i, y+j).In(c.img.Bounds()) {
				c.img.SetRGBA(x+i, y+j, col)
			}
		}
	}
}

// text draws s with its baseline-left at (x, y).
func (c *canvas) text(x, y int, s string, col color.Color) {
	d := font.Drawer{Dst: c.img, Src: image.NewUniform(col), Face: c.face, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func (c *canvas) textWidth(s string) int {
	return font.MeasureString(c.face, s).Ceil()
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}

// niceStep returns a 1/2/5 x 10^k step giving about n ticks over span.
func niceStep(span float64, n int) float64 {
	if span <= 0 || n < 1 {
		return 1
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

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
	yStep := niceStep(yMax, 5)
	yTop := math.Ceil(yMax*1.05/yStep) * yStep
	xMax := max(p.xMax, 1)
	xStep := max(niceStep(xMax, 10), 1)
	xTop := math.Ceil(xMax/xStep-0.02) * xStep

	px := func(x float64) int { return r.Min.X + int(math.Round(x/xTop*float64(r.Dx()))) }
	py := func(y float64) int { return r.Max.Y - int(math.Round(y/yTop*float64(r.Dy()))) }

	if p.warmup > 0 {
		c.fill(image.Rect(r.Min.X, r.Min.Y, px(min(p.warmup, xTop)), r.Max.Y), colWarmup)
		c.text(r.Min.X+4, r.Max.Y-5, "warmup", colMuted)
	}
	// Grid and y ticks.
	for v := 0.0; v <= yTop+yStep/2; v += yStep {
		y := py(v)
		if v > 0 {
			c.hline(r.Min.X+1, r.Max.X-1, y, colGrid)
		}
		c.hline(r.Min.X-5, r.Min.X, y, colFrame)
		lab := tickLabel(v, yStep, yTop >= 10000)
		c.text(r.Min.X-8-c.textWidth(lab), y+4, lab, colText)
	}
	// x ticks.
	for v := 0.0; v <= xTop+xStep/2; v += xStep {
		x := px(v)
		if v > 0 {
			c.vline(x, r.Min.Y+1, r.Max.Y-1, colGrid)
		}
		c.vline(x, r.Max.Y, r.Max.Y+5, colFrame)
		lab := tickLabel(v, xStep, false)
		c.text(x-c.textWidth(lab)/2, r.Max.Y+18, lab, colText)
	}
	// Frame.
	c.hline(r.Min.X, r.Max.X, r.Min.Y, colFrame)
	c.hline(r.Min.X, r.Max.X, r.Max.Y, colFrame)
	c.vline(r.Min.X, r.Min.Y, r.Max.Y, colFrame)
	c.vline(r.Max.X, r.Min.Y, r.Max.Y, colFrame)
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
				c.line(x0, y0, x1, y1, 2, s.col)
			}
			c.dot(x1, y1, 4, s.col)
			x0, y0, havePrev = x1, y1, true
		}
	}
	// Title and legend above the panel.
	c.text(r.Min.X, r.Min.Y-7, p.title, colText)
	lx := r.Max.X
	for i := len(p.lines) - 1; i >= 0; i-- {
		s := p.lines[i]
		w := c.textWidth(s.name)
		lx -= w
		c.text(lx, r.Min.Y-7, s.name, colText)
		lx -= 22
		c.fill(image.Rect(lx, r.Min.Y-13, lx+16, r.Min.Y-10), s.col)
		lx -= 14
	}
}

// DrawPlot draws the report's time series as a PNG of w x h pixels: the
// throughput panel on top, p50/p99 latency below.
func DrawPlot(out io.Writer, rep *Report, w, h int) error {
	if w < 300 || h < 250 {
		return fmt.Errorf("plot size %dx%d too small", w, h)
	}
	c := &canvas{img: image.NewRGBA(image.Rect(0, 0, w, h)), face: basicfont.Face7x13}
	c.fill(c.img.Bounds(), colBG)

	title := "regina-loadtest: " + rep.Label
	c.text((w-c.textWidth(title))/2, 18, title, colText)
	nums := fmt.Sprintf("%s msgs/s   %s pushes/s   p50 %s ms   p99 %s ms   p99.9 %s ms   max %s ms",
		fmtNum(rep.MsgsPerSec), fmtNum(rep.PushesPerSec), fmtMs(rep.Latency.P50), fmtMs(rep.Latency.P99),
		fmtMs(rep.Latency.P999), fmtMs(rep.Latency.Max))
	c.text((w-c.textWidth(nums))/2, 34, nums, colText)
	loop := "closed loop"
	if rep.Mode == "open" {
		loop = "open loop at " + fmtNum(rep.Config.Rate) + " pushes/s"
	}
	shape := fmt.Sprintf("%s, %d connections, %d partitions, %d items/push, %d B payload, dup-ratio %.2f, errors %d",
		loop, rep.Config.Connections, rep.Config.Partitions, rep.Config.Items, rep.Config.Payload, rep.Config.DupRatio, rep.Totals.Errors())
	c.text((w-c.textWidth(shape))/2, 50, shape, colMuted)

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
	c.text(right-c.textWidth(xl), h-6, xl, colMuted)
	if n == 0 {
		msg := "no data"
		c.text((w-c.textWidth(msg))/2, h/2, msg, colMuted)
	}
	return png.Encode(out, c.img)
}
