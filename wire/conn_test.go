package wire

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/metrics"
)

// emfileListener fails its first accepts as a process out of file
// descriptors does, then accepts.
type emfileListener struct {
	net.Listener
	failures atomic.Int32
}

func (l *emfileListener) Accept() (net.Conn, error) {
	if l.failures.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// serveOn serves a starting server (no backend: /health/live answers) on
// ln and returns its base URL and its metrics.
func serveOn(t *testing.T, ln net.Listener, cfg Config) (string, *metrics.Metrics) {
	t.Helper()
	cfg.Metrics = metrics.New(metrics.Config{})
	s := NewStarting(cfg)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		_ = ln.Close()
		_ = s.Shutdown(t.Context())
		select {
		case err := <-served:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after the listener closed")
		}
	})
	return "http://" + ln.Addr().String(), cfg.Metrics
}

func live(t *testing.T, base string) int {
	t.Helper()
	resp, err := http.Get(base + "/health/live")
	require.NoError(t, err)
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestAcceptErrorsAreTransient: accepts failing with EMFILE are retried
// after a backoff; Serve never returns for them and serves the next
// connection.
func TestAcceptErrorsAreTransient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	fl := &emfileListener{Listener: ln}
	fl.failures.Store(6)
	base, met := serveOn(t, fl, Config{})
	require.Equal(t, http.StatusOK, live(t, base))
	require.LessOrEqual(t, fl.failures.Load(), int32(0), "the failing accepts were not all retried")
	require.Equal(t, 6.0, refused(t, met, metrics.ConnAcceptError))
}

// refused is regina_connections_refused_total{reason}.
func refused(t *testing.T, met *metrics.Metrics, reason string) float64 {
	t.Helper()
	mfs, err := met.Registry().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "regina_connections_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// closedByServer reports whether the server closed c without a word
// within 5 s.
func closedByServer(t *testing.T, c net.Conn) bool {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	n, err := c.Read(make([]byte, 1))
	return n == 0 && errors.Is(err, io.EOF)
}

// TestConnectionCaps: connections over the per-address cap are closed as
// accepted while another address is still served; over the total cap
// every address is refused until a connection closes.
func TestConnectionCaps(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	const perIP, total = 4, 6
	base, met := serveOn(t, ln, Config{MaxConns: total, MaxConnsPerIP: perIP})
	dialFrom := func(ip string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		c, err := d.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	// Four idle connections from 127.0.0.1 are held; the fifth and sixth are
	// closed at once.
	var held []net.Conn
	for range perIP {
		held = append(held, dialFrom("127.0.0.1"))
	}
	for range 2 {
		require.True(t, closedByServer(t, dialFrom("127.0.0.1")), "a connection over the per-address cap was kept")
	}
	require.Equal(t, 2.0, refused(t, met, metrics.ConnMaxPerIP))
	// Another address is served (its client's connection stays open: the
	// total is then 5 of 6).
	other := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	resp, err := other.Get(base + "/health/live")
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	// The sixth connection fills the total: a seventh, from anywhere, is closed.
	held = append(held, dialFrom("127.0.0.3"))
	require.True(t, closedByServer(t, dialFrom("127.0.0.4")), "a connection over the total cap was kept")
	require.Equal(t, 1.0, refused(t, met, metrics.ConnMaxConnections))
	// Closing one frees its place.
	require.NoError(t, held[0].Close())
	require.Eventually(t, func() bool {
		c := dialFrom("127.0.0.4")
		defer c.Close()
		_, err := c.Write([]byte("GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n"))
		if err != nil {
			return false
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 12)
		n, _ := io.ReadFull(c, buf)
		return n == 12 && string(buf) == "HTTP/1.1 200"
	}, 10*time.Second, 20*time.Millisecond)
}
