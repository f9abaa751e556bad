package chart

import (
	"image/color"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNiceStep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		span float64
		n    int
		want float64
	}{{100, 5, 20}, {1, 4, 0.25}, {7300, 5, 2000}, {0, 5, 1}, {10, 0, 1}} {
		require.InDelta(t, tc.want, NiceStep(tc.span, tc.n), 1e-9, "%v/%d", tc.span, tc.n)
	}
}

func TestLineReachesBothEnds(t *testing.T) {
	t.Parallel()
	c := New(20, 20)
	red := color.RGBA{255, 0, 0, 255}
	c.Line(2, 3, 17, 11, 1, red)
	require.Equal(t, red, c.Img.RGBAAt(2, 3))
	require.Equal(t, red, c.Img.RGBAAt(17, 11))
	require.NotEqual(t, red, c.Img.RGBAAt(17, 3))
	require.Positive(t, c.TextWidth("abc"))
}
