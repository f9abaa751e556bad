package wire

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/valyala/fasthttp"
	"golang.org/x/sync/semaphore"
)

// UnauthenticatedBodyBytes bounds the body of a request served without a
// verified token while authentication is on (a route whose path is in
// JWT_SKIP_PATHS): larger gets 413.
const UnauthenticatedBodyBytes = 64 << 10

// Bodies are read by the broker, not by fasthttp (StreamRequestBody): only
// once the request is routed, authorized and its parameters checked does
// Handle read the body (readBody), so a refused request costs its headers
// and the first byte of its body (fasthttp's prefetch, MaxRequestBodySize
// 1), whatever its Content-Length. Every
// body read holds its bytes in the server's budget of bytes in flight
// (Config.MaxBodyBytesInFlight) until its handler returns; a request that
// cannot get them within the read timeout is answered 503.

// chunkedStep is the first reservation of a body of unknown length
// (chunked); it doubles as the body grows.
const chunkedStep = 64 << 10

// errBodyTooLarge is a body over its limit.
var errBodyTooLarge = errors.New("body too large")

// readBody reads the request's body within its limit and the budget of
// bytes in flight. It returns the release of the bytes held (call it when
// the handler returned) and true, or answers the request itself (413, 503
// or 408/400 for a body that did not arrive) and returns false.
func (s *Server) readBody(ctx *fasthttp.RequestCtx) (release func(), ok bool) {
	stream := ctx.RequestBodyStream()
	cl := ctx.Request.Header.ContentLength()
	if stream == nil || cl == 0 || cl == -2 {
		return func() {}, true // no body, or read already (a request built in code)
	}
	limit := s.cfg.MaxBodyBytes
	if a := s.cfg.Auth; a != nil && a.Enabled() && ctx.UserValue(identityKey{}) == nil {
		limit = min(limit, UnauthenticatedBodyBytes)
	}
	if cl > limit {
		s.bodyTooLarge(ctx, limit)
		return nil, false
	}
	var held int64
	release = func() {
		if held > 0 {
			s.bodies.Release(held)
			held = 0
		}
	}
	wctx, cancel := context.WithTimeout(ctx, s.cfg.ReadTimeout)
	defer cancel()
	reserve := func(n int) bool {
		if int64(n) <= held {
			return true
		}
		if err := s.bodies.Acquire(wctx, int64(n)-held); err != nil {
			return false
		}
		held = int64(n)
		return true
	}
	want := cl
	if cl < 0 {
		want = min(chunkedStep, limit+1)
	}
	if !reserve(want) {
		s.bodyBudgetFull(ctx)
		return nil, false
	}
	// A buffer of its own, handed to the request without a copy: nothing
	// recycles it while anything (a handler's goroutine) may still hold a
	// slice of it.
	buf, err := readLimited(stream, nil, cl, limit, reserve)
	switch {
	case errors.Is(err, errBodyTooLarge):
		release()
		s.bodyTooLarge(ctx, limit)
		return nil, false
	case errors.Is(err, errBudget):
		release()
		s.bodyBudgetFull(ctx)
		return nil, false
	case err != nil:
		release()
		ctx.SetConnectionClose()
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			writeError(ctx, fasthttp.StatusRequestTimeout, "Request timeout")
		} else {
			writeError(ctx, fasthttp.StatusBadRequest, "Bad request: the body could not be read: "+err.Error())
		}
		return nil, false
	}
	ctx.Request.SetBodyRaw(buf)
	return release, true
}

// errBudget is a body whose next bytes found no room in the budget.
var errBudget = errors.New("body budget full")

// readLimited reads a body of length cl (-1: chunked, unknown) into buf,
// refusing one over limit, reserving its growth first (reserve false: no
// room).
func readLimited(r io.Reader, buf []byte, cl, limit int, reserve func(int) bool) ([]byte, error) {
	if cl >= 0 {
		buf = grow(buf, cl)
		n, err := io.ReadFull(r, buf[:cl])
		return buf[:n], err
	}
	for {
		if len(buf) == cap(buf) {
			next := min(max(2*cap(buf), chunkedStep), limit+1)
			if next <= len(buf) {
				return buf, errBodyTooLarge
			}
			if !reserve(next) {
				return buf, errBudget
			}
			buf = grow(buf, next)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > limit {
			return buf, errBodyTooLarge
		}
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// grow returns buf with a capacity of at least n, its content kept.
func grow(buf []byte, n int) []byte {
	if cap(buf) >= n {
		return buf[:n]
	}
	out := make([]byte, n)
	copy(out, buf)
	return out
}

func (s *Server) bodyTooLarge(ctx *fasthttp.RequestCtx, limit int) {
	ctx.SetConnectionClose()
	writeError(ctx, fasthttp.StatusRequestEntityTooLarge, "Request body exceeds the limit of "+itoa(limit)+" bytes")
}

func (s *Server) bodyBudgetFull(ctx *fasthttp.RequestCtx) {
	s.metrics.BodyBudgetFull()
	ctx.SetConnectionClose()
	ctx.Response.Header.Set("Retry-After", "1")
	b := []byte(`{"error":"Too many request bodies in flight (MAX_BODY_BYTES_IN_FLIGHT); nothing was done; retry with backoff","retryable":true}`)
	writeRaw(ctx, fasthttp.StatusServiceUnavailable, b)
}

// newBodyBudget is the budget of body bytes in flight: at least one body
// of the largest size fits.
func newBodyBudget(cfg Config) *semaphore.Weighted {
	return semaphore.NewWeighted(int64(max(cfg.MaxBodyBytesInFlight, cfg.MaxBodyBytes+1)))
}
