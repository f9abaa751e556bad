package chart

import (
	"image"
	"image/color"
	"math"
	"slices"
	"strconv"
)

// Colours shared by the time-series plots.
var (
	ColBG     = color.RGBA{255, 255, 255, 255}
	ColFrame  = color.RGBA{60, 60, 60, 255}
	ColGrid   = color.RGBA{225, 225, 225, 255}
	ColText   = color.RGBA{20, 20, 20, 255}
	ColMuted  = color.RGBA{110, 110, 110, 255}
	ColWarmup = color.RGBA{245, 238, 215, 255}
)

// TickLabel formats a tick value compactly ("1.5k", "250", "0.25");
// kilo writes thousands as "k" (for an axis reaching 10000 or more).
func TickLabel(v, step float64, kilo bool) string {
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

// Series is one line of a panel.
type Series struct {
	Name string
	Col  color.RGBA
	X, Y []float64
	// Skip marks points to leave out (a second without answers has no
	// latency); the line breaks around them. Nil leaves none out.
	Skip []bool
}

// Panel is one time-series plot: axes, grid, ticks, title and legend.
type Panel struct {
	Rect   image.Rectangle // plotting area (inside the axes)
	Title  string
	XMax   float64
	Warmup float64 // x below this is shaded as warmup (0 = none)
	Lines  []Series
}

// DrawPanel draws p on the canvas.
func (c *Canvas) DrawPanel(p Panel) {
	r := p.Rect
	yMax := 0.0
	for _, s := range p.Lines {
		for i, v := range s.Y {
			if !s.skipped(i) && !math.IsNaN(v) {
				yMax = max(yMax, v)
			}
		}
	}
	if yMax <= 0 {
		yMax = 1
	}
	yStep := NiceStep(yMax, 5)
	yTop := math.Ceil(yMax*1.05/yStep) * yStep
	xMax := max(p.XMax, 1)
	xStep := max(NiceStep(xMax, 10), 1)
	xTop := math.Ceil(xMax/xStep-0.02) * xStep

	px := func(x float64) int { return r.Min.X + int(math.Round(x/xTop*float64(r.Dx()))) }
	py := func(y float64) int { return r.Max.Y - int(math.Round(y/yTop*float64(r.Dy()))) }

	if p.Warmup > 0 {
		c.Fill(image.Rect(r.Min.X, r.Min.Y, px(min(p.Warmup, xTop)), r.Max.Y), ColWarmup)
		c.Text(r.Min.X+4, r.Max.Y-5, "warmup", ColMuted)
	}
	// Grid and y ticks.
	for v := 0.0; v <= yTop+yStep/2; v += yStep {
		y := py(v)
		if v > 0 {
			c.HLine(r.Min.X+1, r.Max.X-1, y, ColGrid)
		}
		c.HLine(r.Min.X-5, r.Min.X, y, ColFrame)
		lab := TickLabel(v, yStep, yTop >= 10000)
		c.Text(r.Min.X-8-c.TextWidth(lab), y+4, lab, ColText)
	}
	// x ticks.
	for v := 0.0; v <= xTop+xStep/2; v += xStep {
		x := px(v)
		if v > 0 {
			c.VLine(x, r.Min.Y+1, r.Max.Y-1, ColGrid)
		}
		c.VLine(x, r.Max.Y, r.Max.Y+5, ColFrame)
		lab := TickLabel(v, xStep, false)
		c.Text(x-c.TextWidth(lab)/2, r.Max.Y+18, lab, ColText)
	}
	// Frame.
	c.HLine(r.Min.X, r.Max.X, r.Min.Y, ColFrame)
	c.HLine(r.Min.X, r.Max.X, r.Max.Y, ColFrame)
	c.VLine(r.Min.X, r.Min.Y, r.Max.Y, ColFrame)
	c.VLine(r.Max.X, r.Min.Y, r.Max.Y, ColFrame)
	// Data.
	for _, s := range p.Lines {
		havePrev := false
		var x0, y0 int
		for i := range s.X {
			if s.skipped(i) {
				havePrev = false
				continue
			}
			x1, y1 := px(s.X[i]), py(s.Y[i])
			if havePrev {
				c.Line(x0, y0, x1, y1, 2, s.Col)
			}
			c.Dot(x1, y1, 4, s.Col)
			x0, y0, havePrev = x1, y1, true
		}
	}
	// Title and legend above the panel.
	c.Text(r.Min.X, r.Min.Y-7, p.Title, ColText)
	lx := r.Max.X
	for _, s := range slices.Backward(p.Lines) {
		w := c.TextWidth(s.Name)
		lx -= w
		c.Text(lx, r.Min.Y-7, s.Name, ColText)
		lx -= 22
		c.Fill(image.Rect(lx, r.Min.Y-13, lx+16, r.Min.Y-10), s.Col)
		lx -= 14
	}
}

func (s Series) skipped(i int) bool { return s.Skip != nil && s.Skip[i] }
