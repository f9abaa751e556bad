package wire

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/metrics"
)

// A handler that panics (here: a backend whose every call panics) answers 500
// with a JSON error instead of taking the broker down.
func TestHandlerPanicIsA500(t *testing.T) {
	t.Parallel()
	s := New(newNilBackend(), Config{Metrics: metrics.New(metrics.Config{})})
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod("GET")
	ctx.Request.SetRequestURI("/health")
	require.NotPanics(t, func() { s.instrumented(&ctx) })
	require.Equal(t, fasthttp.StatusInternalServerError, ctx.Response.StatusCode())
	require.JSONEq(t, `{"error":"Internal error; the request may not have taken effect"}`, string(ctx.Response.Body()))
	require.Equal(t, "*", string(ctx.Response.Header.Peek("Access-Control-Allow-Origin")))
}
