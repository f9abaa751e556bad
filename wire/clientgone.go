package wire

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// clientGoneEvery is how often a push still waiting for its verdict, or a
// long poll still waiting for work, checks whether its client's connection
// is gone. A request answered sooner is never checked.
const clientGoneEvery = 100 * time.Millisecond

// clientContext returns the context a push or a long poll waits under and
// a stop function the handler must call when the wait has returned. The context carries ctx's
// values and ends only when the client's connection is seen closed by its
// peer (checked every clientGoneEvery while the push waits): fasthttp's own
// RequestCtx never reports that, and ends only at shutdown, when every
// waiting push must still get its verdict.
//
// For a push: when it ends, the pushes still in a mailbox are withdrawn (nothing of them
// is written; nobody is left to answer) and the ones already in a batch go on
// to their verdict (see actor.Registry.Push). This is what keeps a retry
// storm from filling PostgreSQL with work for clients that timed out and
// resent. For a long poll: the wait ends, so no message is taken for a
// client that is gone (see deliver for one taken just before).
//
// Detection is best effort: a connection that cannot be inspected (not a
// socket), a client that pipelined another request behind this one, or a
// TLS client that sent close_notify before closing is never seen closed; a
// client that half-closes its sending side after the request is seen as
// gone.
func clientContext(ctx *fasthttp.RequestCtx) (context.Context, func()) {
	c, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &connWatch{conn: ctx.Conn(), cancel: cancel}
	w.mu.Lock()
	w.timer = time.AfterFunc(clientGoneEvery, w.check)
	w.mu.Unlock()
	return c, w.stop
}

// connWatch checks one request's connection until stopped.
type connWatch struct {
	conn   net.Conn
	cancel context.CancelFunc

	mu      sync.Mutex // guards timer and stopped; held across a check
	timer   *time.Timer
	stopped bool
}

func (w *connWatch) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	if peerClosed(w.conn) {
		w.cancel()
		return
	}
	w.timer.Reset(clientGoneEvery)
}

// stop ends the watch; no check runs after it returns (a check in progress
// holds mu).
func (w *connWatch) stop() {
	w.mu.Lock()
	w.stopped = true
	w.timer.Stop()
	w.mu.Unlock()
	w.cancel()
}

// finishing is the context a write runs its store call under: ctx's values
// without its end. fasthttp ends a RequestCtx when the server shuts down,
// and the shutdown waits for the handlers (bounded by SHUTDOWN_TIMEOUT): a
// write already in the store is finished and answered with its outcome, not
// cut short into "outcome unknown". Waits (long polls) keep ctx's end.
func finishing(ctx *fasthttp.RequestCtx) context.Context { return context.WithoutCancel(ctx) }
