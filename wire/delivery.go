package wire

import (
	"context"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/partition"
)

// deliveryWriteTimeout bounds writing a pop's answer to its client: an
// answer not flushed by then is treated as not delivered (its lease is
// released, an autoAck is not applied).
const deliveryWriteTimeout = 30 * time.Second

// settleTimeout bounds the store call that settles a delivery; it runs
// after the request's own context is gone.
const settleTimeout = 10 * time.Second

// delivery is a pop answer whose lease waits for the answer's fate: consume
// (an autoAck pop) moves the cursors past the messages once the answer was
// written; an answer that was not written releases the lease at once.
type delivery struct {
	group      string
	partitions []partition.UUID
	lease      partition.UUID
	consume    bool
	// mark is the connection's byte count when the answer was handed to
	// fasthttp; size is the answer's body length. An answer counts as
	// written only when at least size bytes went out after mark without a
	// failed write.
	mark, size int64
}

// deliver writes body (a pop's 200 answer) so that the pop's lease d
// follows what happened to it:
//
//   - the client is seen gone before anything is written (watched, its long
//     poll's watch, ended, or its connection reads end-of-file now): nothing is
//     written, the lease is released at once;
//   - the answer is flushed to the connection within deliveryWriteTimeout:
//     an autoAck pop moves its cursors past the messages (before fasthttp
//     reads the connection's next request), a plain pop keeps its lease;
//   - the write fails or times out: the lease is released at once.
//
// "Written" means accepted by the kernel's socket buffer, not received: a
// client that vanishes after that holds the lease until it expires, and an
// autoAck pop's messages are consumed (see docs/semantics.md).
func (s *Server) deliver(ctx *fasthttp.RequestCtx, watched context.Context, d *delivery, body []byte) {
	tc, tracked := ctx.Conn().(*trackedConn)
	if watched.Err() != nil || peerClosed(ctx.Conn()) {
		s.settle(d, false)
		ctx.SetConnectionClose()
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return
	}
	if !tracked || ctx.SetWriteDeadline(time.Now().Add(deliveryWriteTimeout)) != nil {
		// Not a connection of Serve's listener (a test's in-memory one):
		// its fate cannot be learnt; settle as written.
		s.settle(d, true)
		writeRaw(ctx, fasthttp.StatusOK, body)
		return
	}
	// A write deadline set by the handler makes fasthttp flush the answer
	// before it reads anything else from the connection.
	d.mark, d.size = tc.written.Load(), int64(len(body))
	if old := tc.pending.Swap(d); old != nil {
		s.settle(old, false) // cannot happen: fasthttp settled it going idle
	}
	writeRaw(ctx, fasthttp.StatusOK, body)
}

// connState settles the pending delivery of a connection: going idle means
// the answer was flushed; closing means it was written only if enough
// bytes went out after it was handed over and no write failed.
func (s *Server) connState(c net.Conn, st fasthttp.ConnState) {
	tc, ok := c.(*trackedConn)
	if !ok || (st != fasthttp.StateIdle && st != fasthttp.StateClosed) {
		return
	}
	d := tc.pending.Swap(nil)
	if d == nil {
		return
	}
	written := !tc.writeFail.Load() && tc.written.Load()-d.mark >= d.size
	s.settle(d, written)
}

// settle applies a delivery's fate in the store: consumed for an autoAck
// answer that was written, released for one that was not; a plain pop's
// written answer keeps its lease (nothing to do).
func (s *Server) settle(d *delivery, written bool) {
	if written && !d.consume {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	if err := s.b.Acker.SettleDelivery(ctx, d.group, d.partitions, d.lease, written); err != nil {
		// The lease stays until it expires: the messages come back then.
		s.log.Warn().Err(err).Bool("written", written).Msg("settling a pop's lease failed; it ends when it expires")
		return
	}
	if !written {
		s.metrics.PopUndelivered()
	}
}
