// Package chart draws the PNG plots of the load generator and the
// comparison harness: an RGBA canvas with filled rectangles, Bresenham lines
// with a square pen, basicfont text, and "nice" axis steps. It is drawing
// only (no broker code), so the load generator, an outside client, may use it.
package chart

import (
	"image"
	"image/color"
	"image/draw"
	"math"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Canvas draws on an RGBA image with a fixed font.
type Canvas struct {
	Img  *image.RGBA
	Face font.Face
}

// New returns a w x h canvas using basicfont.Face7x13.
func New(w, h int) *Canvas {
	return &Canvas{Img: image.NewRGBA(image.Rect(0, 0, w, h)), Face: basicfont.Face7x13}
}

// Fill paints r (clipped to the image) with col.
func (c *Canvas) Fill(r image.Rectangle, col color.Color) {
	draw.Draw(c.Img, r.Intersect(c.Img.Bounds()), image.NewUniform(col), image.Point{}, draw.Src)
}

// HLine draws a one-pixel horizontal line from x0 to x1 at y.
func (c *Canvas) HLine(x0, x1, y int, col color.Color) { c.Fill(image.Rect(x0, y, x1+1, y+1), col) }

// VLine draws a one-pixel vertical line from y0 to y1 at x.
func (c *Canvas) VLine(x, y0, y1 int, col color.Color) { c.Fill(image.Rect(x, y0, x+1, y1+1), col) }

// Line draws a segment of the given width (Bresenham, square pen).
func (c *Canvas) Line(x0, y0, x1, y1, width int, col color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		c.Dot(x0, y0, width, col)
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

// Dot paints a width x width square centred on (x, y).
func (c *Canvas) Dot(x, y, width int, col color.RGBA) {
	lo := -(width - 1) / 2
	for i := lo; i < lo+width; i++ {
		for j := lo; j < lo+width; j++ {
			if image.Pt(x+i, y+j).In(c.Img.Bounds()) {
				c.Img.SetRGBA(x+i, y+j, col)
			}
		}
	}
}

// Text draws s with its baseline-left at (x, y).
func (c *Canvas) Text(x, y int, s string, col color.Color) {
	d := font.Drawer{Dst: c.Img, Src: image.NewUniform(col), Face: c.Face, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

// TextWidth returns the width of s in pixels.
func (c *Canvas) TextWidth(s string) int { return font.MeasureString(c.Face, s).Ceil() }

// NiceStep returns a 1/2/2.5/5 x 10^k step giving about n ticks over span.
func NiceStep(span float64, n int) float64 {
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
