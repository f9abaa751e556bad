package wire

import (
	"errors"
	"net"
	"syscall"
)

// peerClosed reports whether the peer of c has closed the connection: a
// non-blocking MSG_PEEK of one byte reads end-of-file or a connection error.
// Nothing is consumed, so fasthttp reads the connection as if unchecked.
// Pending bytes (a pipelined request) and anything that is not a socket
// count as open.
func peerClosed(c net.Conn) bool {
	for {
		u, ok := c.(interface{ NetConn() net.Conn }) // *tls.Conn
		if !ok {
			break
		}
		c = u.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	var b [1]byte
	err = rc.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == nil:
			closed = n == 0
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
		default: // ECONNRESET, ETIMEDOUT, ...
			closed = true
		}
	})
	return err == nil && closed
}
