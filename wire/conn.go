package wire

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/regina-mq/regina/metrics"
)

// Backoff after a failed accept (too many open files, out of buffers, a
// connection aborted before it was taken): the first wait, doubled up to the
// last. The listener keeps serving the connections it has meanwhile.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// listener is what Serve hands fasthttp: it never fails for a reason a
// client can cause (a failed accept is retried after a backoff; only
// closing it ends Accept), it closes at once a connection over the total
// or per-IP cap (before fasthttp reads a byte of it), and it hands out
// trackedConns.
type listener struct {
	net.Listener
	maxConns, perIP int
	log             zerolog.Logger
	met             *metrics.Metrics

	mu      sync.Mutex
	open    int
	byIP    map[netip.Addr]int
	lastLog time.Time // of the last accept error logged (one a second at most)
}

func newListener(ln net.Listener, maxConns, perIP int, log zerolog.Logger, met *metrics.Metrics) *listener {
	return &listener{Listener: ln, maxConns: maxConns, perIP: perIP, log: log, met: met,
		byIP: make(map[netip.Addr]int)}
}

// Accept returns the next connection within the caps. It returns an error
// only once the listener is closed.
func (l *listener) Accept() (net.Conn, error) {
	wait := time.Duration(0)
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil, err
			}
			wait = min(max(2*wait, acceptBackoffMin), acceptBackoffMax)
			l.logAcceptError(err, wait)
			l.met.ConnectionRefused(metrics.ConnAcceptError)
			time.Sleep(wait)
			continue
		}
		wait = 0
		ip := remoteIP(c)
		if reason := l.admit(ip); reason != "" {
			_ = c.Close()
			l.met.ConnectionRefused(reason)
			continue
		}
		l.met.ConnectionsOpen(1)
		return &trackedConn{Conn: c, l: l, ip: ip}, nil
	}
}

// admit counts a new connection from ip, or says which cap it is over.
func (l *listener) admit(ip netip.Addr) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.maxConns > 0 && l.open >= l.maxConns {
		return metrics.ConnMaxConnections
	}
	if l.perIP > 0 && ip.IsValid() {
		if l.byIP[ip] >= l.perIP {
			return metrics.ConnMaxPerIP
		}
		l.byIP[ip]++
	}
	l.open++
	return ""
}

// release uncounts a closed connection.
func (l *listener) release(ip netip.Addr) {
	l.met.ConnectionsOpen(-1)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.perIP > 0 && ip.IsValid() {
		if n := l.byIP[ip] - 1; n > 0 {
			l.byIP[ip] = n
		} else {
			delete(l.byIP, ip)
		}
	}
}

func (l *listener) logAcceptError(err error, wait time.Duration) {
	l.mu.Lock()
	now := time.Now()
	logIt := now.Sub(l.lastLog) >= time.Second
	if logIt {
		l.lastLog = now
	}
	open := l.open
	l.mu.Unlock()
	if logIt {
		l.log.Warn().Err(err).Int("open_connections", open).Dur("retry_in", wait).
			Msg("accept failed; serving the open connections and retrying")
	}
}

// remoteIP is the connection's peer address without its port; the zero
// Addr when it has none (not TCP).
func remoteIP(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}

// trackedConn is a connection accepted by the listener. It counts the bytes
// written to it and remembers a failed write, so that a pop whose answer
// rides on it learns whether the answer left the broker (see deliver), and
// it uncounts itself from the caps when closed.
type trackedConn struct {
	net.Conn
	l  *listener
	ip netip.Addr

	written   atomic.Int64
	writeFail atomic.Bool
	closed    atomic.Bool

	// pending is the pop answer written on this connection whose fate is
	// not settled yet (at most one: fasthttp reads the next request only
	// after the response was flushed and the connection went idle).
	pending atomic.Pointer[delivery]
}

func (c *trackedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	if err != nil {
		c.writeFail.Store(true)
	}
	return n, err
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.release(c.ip)
	}
	return err
}

// NetConn returns the connection it wraps (peerClosed looks through it).
func (c *trackedConn) NetConn() net.Conn { return c.Conn }
