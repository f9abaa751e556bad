package main

import (
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"slices"
	"strconv"

	"github.com/regina-mq/regina/internal/chart"
)

// Drawing primitives come from internal/chart, shared with loadtest.

var (
	colBG    = color.RGBA{255, 255, 255, 255}
	colFrame = color.RGBA{60, 60, 60, 255}
	colGrid  = color.RGBA{225, 225, 225, 255}
	colText  = color.RGBA{20, 20, 20, 255}
	colMuted = color.RGBA{110, 110, 110, 255}
)

// canvas adds the scale plots' panels to the shared drawing primitives.
type canvas struct{ *chart.Canvas }

func yTick(v, step float64) string {
	if v == 0 {
		return "0"
	}
	if step >= 1000 {
		k := v / 1000
		dec := 0
		if math.Mod(step, 1000) != 0 {
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

// curve is one line of a scale plot; a point with ok false is not drawn.
type curve struct {
	name string
	col  color.RGBA
	x, y []float64
	ok   []bool
}

func (c *curve) add(x, y float64, ok bool) {
	c.x = append(c.x, x)
	c.y = append(c.y, y)
	c.ok = append(c.ok, ok && y > 0)
}

// logPanel draws curves over a log10 x axis with ticks at xs.
func (c *canvas) logPanel(r image.Rectangle, title string, xs []float64, xl []string, curves []curve, valueLabel func(float64) string) {
	yMax := 0.0
	for _, cv := range curves {
		for i, v := range cv.y {
			if cv.ok[i] {
				yMax = max(yMax, v)
			}
		}
	}
	if yMax <= 0 {
		yMax = 1
	}
	yStep := chart.NiceStep(yMax, 5)
	yTop := math.Ceil(yMax*1.08/yStep) * yStep
	lx0, lx1 := math.Inf(1), math.Inf(-1)
	for _, x := range xs {
		lx0, lx1 = min(lx0, math.Log10(max(x, 1))), max(lx1, math.Log10(max(x, 1)))
	}
	if lx1-lx0 < 1e-9 {
		lx0, lx1 = lx0-0.5, lx1+0.5
	}
	pad := (lx1 - lx0) * 0.06
	lx0, lx1 = lx0-pad, lx1+pad
	px := func(x float64) int {
		return r.Min.X + int(math.Round((math.Log10(max(x, 1))-lx0)/(lx1-lx0)*float64(r.Dx())))
	}
	py := func(y float64) int { return r.Max.Y - int(math.Round(y/yTop*float64(r.Dy()))) }

	for v := 0.0; v <= yTop+yStep/2; v += yStep {
		y := py(v)
		if v > 0 {
			c.HLine(r.Min.X+1, r.Max.X-1, y, colGrid)
		}
		c.HLine(r.Min.X-5, r.Min.X, y, colFrame)
		lab := yTick(v, yStep)
		c.Text(r.Min.X-8-c.TextWidth(lab), y+4, lab, colText)
	}
	for i, x := range xs {
		X := px(x)
		c.VLine(X, r.Min.Y+1, r.Max.Y-1, colGrid)
		c.VLine(X, r.Max.Y, r.Max.Y+5, colFrame)
		c.Text(X-c.TextWidth(xl[i])/2, r.Max.Y+18, xl[i], colText)
	}
	c.HLine(r.Min.X, r.Max.X, r.Min.Y, colFrame)
	c.HLine(r.Min.X, r.Max.X, r.Max.Y, colFrame)
	c.VLine(r.Min.X, r.Min.Y, r.Max.Y, colFrame)
	c.VLine(r.Max.X, r.Min.Y, r.Max.Y, colFrame)
	for _, cv := range curves {
		have := false
		var x0, y0 int
		for i := range cv.x {
			if !cv.ok[i] {
				have = false
				continue
			}
			x1, y1 := px(cv.x[i]), py(cv.y[i])
			if have {
				c.Line(x0, y0, x1, y1, 2, cv.col)
			}
			c.Dot(x1, y1, 6, cv.col)
			c.Text(x1+6, y1-6, valueLabel(cv.y[i]), cv.col)
			x0, y0, have = x1, y1, true
		}
	}
	c.Text(r.Min.X, r.Min.Y-7, title, colText)
	lx := r.Max.X
	for _, cv := range slices.Backward(curves) {
		w := c.TextWidth(cv.name)
		lx -= w
		c.Text(lx, r.Min.Y-7, cv.name, colText)
		lx -= 22
		c.Fill(image.Rect(lx, r.Min.Y-13, lx+16, r.Min.Y-10), cv.col)
		lx -= 14
	}
}

// drawScale writes a 900x640 PNG: throughput on top, p99 below, both over
// a log x axis.
func drawScale(path, title, sub, xlabel string, xs []float64, xl []string, thr, p99 []curve) error {
	return drawScaleLabeled(path, title, sub, xlabel, "throughput (msgs/s)", "push latency p99 (ms)", xs, xl, thr, p99)
}

// drawScaleLabeled is drawScale with the two panels' titles given.
func drawScaleLabeled(path, title, sub, xlabel, thrTitle, p99Title string, xs []float64, xl []string, thr, p99 []curve) error {
	const w, h = 900, 640
	c := &canvas{chart.New(w, h)}
	c.Fill(c.Img.Bounds(), colBG)
	c.Text((w-c.TextWidth(title))/2, 18, title, colText)
	c.Text((w-c.TextWidth(sub))/2, 36, sub, colMuted)
	left, right, top, bottom, gap := 72, w-30, 72, h-44, 56
	ph := (bottom - top - gap) / 2
	c.logPanel(image.Rect(left, top, right, top+ph), thrTitle, xs, xl, thr, fmtRate)
	c.logPanel(image.Rect(left, top+ph+gap, right, bottom), p99Title, xs, xl, p99, fmtMs)
	c.Text(right-c.TextWidth(xlabel), h-6, xlabel, colMuted)
	return writePNG(path, c.Img)
}

// writePNG encodes img into the file at path.
func writePNG(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
