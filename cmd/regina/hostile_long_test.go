package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// The heavy versions of the hostile-client tests (make hostile): a broker
// process per scenario, figures logged ("figure:" lines) for
// docs/reliability.md. Loopback only; each scenario bounded in time.

// hostileBroker is a broker process started for a scenario.
type hostileBroker struct {
	*procBroker
	pid int
}

// startHostileBroker starts a broker process on a fresh schema with env
// added, under an open-file limit of nofile (0: the test's own).
func startHostileBroker(t *testing.T, nofile int, env ...string) *hostileBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	env = append([]string{"DATABASE_URL=" + sqlstoretest.URL(t), fmt.Sprintf("PORT=%d", port), "HOST=127.0.0.1",
		"QUEEN_SCHEMA=" + sqlstoretest.NewSchema(t), "DB_POOL_SIZE=4", "LOG_LEVEL=warn"}, env...)
	cmd := brokerProcess(t, env...)
	if nofile > 0 {
		prlimit, err := exec.LookPath("prlimit")
		if err != nil {
			t.Skip("prlimit (util-linux) is needed to lower the broker's open-file limit")
		}
		cmd.Args = append([]string{prlimit, fmt.Sprintf("--nofile=%d:%d", nofile, nofile), "--"}, cmd.Path)
		cmd.Path = prlimit
	}
	p := &procBroker{cmd: cmd, exited: make(chan error, 1), logs: &strings.Builder{}}
	var logMu sync.Mutex
	cmd.Stderr = writerFunc(func(b []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return p.logs.Write(b)
	})
	p.testBroker = &testBroker{URL: p.startHealthy(t, port)}
	return &hostileBroker{procBroker: p, pid: cmd.Process.Pid}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// memKiB is the broker process's resident set and its peak (VmRSS,
// VmHWM), in KiB.
func (h *hostileBroker) memKiB(t *testing.T) (rss, peak int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.pid))
	require.NoError(t, err)
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = n
		case "VmHWM:":
			peak = n
		}
	}
	return rss, peak
}

// alive fails the test if the broker process exited.
func (h *hostileBroker) alive(t *testing.T) {
	t.Helper()
	select {
	case err := <-h.exited:
		t.Fatalf("the broker exited: %v\n%s", err, h.logs.String())
	default:
	}
}

// flood opens n idle connections to addr from source address ip (dial
// timeout 2 s each) and returns them and how many could not be opened.
func flood(t *testing.T, addr, ip string, n int) (conns []net.Conn, failed int) {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			failed++
			continue
		}
		conns = append(conns, c)
	}
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return conns, failed
}

// pushPopOnce pushes one message and pops it back through the test's
// client (from 127.0.0.1).
func pushPopOnce(t *testing.T, b *testBroker, queue, tx string) {
	t.Helper()
	b.push(t, item{"queue": queue, "transactionId": tx, "payload": 1})
	got := b.pop(t, queue, "", url.Values{"autoAck": {"true"}})
	require.Len(t, got.Messages, 1)
	require.Equal(t, tx, got.Messages[0].TransactionID)
}

// TestLong_HostileConnectionFlood: 3,000 idle connections from one address
// against the default per-address cap, then 3,000 from four addresses
// against a broker whose open-file limit (1,024) is below its connection
// bound, so that accepts fail with EMFILE. The broker never exits, serves
// another address during the first flood, and serves again once idle
// connections time out in the second.
func TestLong_HostileConnectionFlood(t *testing.T) {
	t.Run("per-address cap", func(t *testing.T) {
		h := startHostileBroker(t, 4096)
		addr := strings.TrimPrefix(h.URL, "http://")
		_, base := h.memKiB(t)
		conns, failed := flood(t, addr, "127.0.0.2", 3000)
		// The broker closes the excess: wait until the count is settled.
		checkFor(t, 30*time.Second, 50*time.Millisecond, func() error {
			if n := scrapeProm(t, h.testBroker).value("regina_connections_refused_total",
				map[string]string{"reason": "max_connections_per_ip"}); n < float64(len(conns)-1000) {
				return fmt.Errorf("%v refused", n)
			}
			return nil
		})
		start := time.Now()
		pushPopOnce(t, h.testBroker, "flood", "t1")
		served := time.Since(start)
		h.alive(t)
		rss, peak := h.memKiB(t)
		open := scrapeProm(t, h.testBroker).value("regina_connections_open", nil)
		t.Logf("figure: per-address flood: %d dialled (%d failed), %.0f held open, %d closed by the cap; "+
			"another address pushed and popped in %v; RSS %d MiB (peak %d MiB, %d MiB before)",
			len(conns), failed, open, len(conns)-int(open)+1, served.Round(time.Millisecond), rss>>10, peak>>10, base>>10)
	})
	t.Run("EMFILE", func(t *testing.T) {
		h := startHostileBroker(t, 1024, "MAX_CONNECTIONS=5000", "MAX_CONNECTIONS_PER_IP=0", "HTTP_READ_TIMEOUT=5000")
		addr := strings.TrimPrefix(h.URL, "http://")
		start := time.Now()
		var all []net.Conn
		failed := 0
		for i := 2; i <= 5; i++ {
			c, f := flood(t, addr, fmt.Sprintf("127.0.0.%d", i), 750)
			all, failed = append(all, c...), failed+f
		}
		checkFor(t, 30*time.Second, 100*time.Millisecond, func() error {
			if n := scrapeProm(t, h.testBroker).value("regina_connections_refused_total",
				map[string]string{"reason": "accept_error"}); n == 0 {
				return errors.New("no failed accept yet")
			}
			return nil
		})
		h.alive(t)
		// A client whose connection was open before the flood is served at
		// once (the test's keep-alive connection).
		pushPopOnce(t, h.testBroker, "emfile", "t1")
		existing := time.Since(start)
		// A new connection waits in the backlog until descriptors free up:
		// the idle connections time out (HTTP_READ_TIMEOUT, 5 s).
		fresh := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		checkFor(t, 90*time.Second, 200*time.Millisecond, func() error {
			resp, err := fresh.Get(h.URL + "/health/live")
			if err != nil {
				return err
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("live: %d", resp.StatusCode)
			}
			return nil
		})
		servedNew := time.Since(start)
		h.alive(t)
		fails := scrapeProm(t, h.testBroker).value("regina_connections_refused_total",
			map[string]string{"reason": "accept_error"})
		rss, peak := h.memKiB(t)
		t.Logf("figure: EMFILE flood (open-file limit 1024, %d connections from 4 addresses, %d failed to dial): "+
			"%.0f failed accepts backed off, never exited; a client connected before pushed and popped %v after "+
			"the flood began, a new connection was served %v after it (idle connections cut at 5 s); "+
			"RSS %d MiB (peak %d MiB)", len(all), failed, fails, existing.Round(time.Millisecond),
			servedNew.Round(time.Millisecond), rss>>10, peak>>10)
	})
}

// TestLong_HostileGhostPolls: 100 rounds of 3 ghost long polls (with and
// without autoAck) closing while a message is pushed: every message is
// consumed once by the live consumer, none lost or leased to a ghost.
func TestLong_HostileGhostPolls(t *testing.T) {
	for _, autoAck := range []bool{false, true} {
		t.Run(fmt.Sprintf("autoAck=%t", autoAck), func(t *testing.T) {
			h := startHostileBroker(t, 0)
			b := h.testBroker
			b.configure(t, "ghosts", map[string]any{"leaseTime": 300})
			q := "?wait=true&timeout=120000"
			if autoAck {
				q += "&autoAck=true"
			}
			const rounds = 100
			got := map[string]bool{}
			for r := range rounds {
				var gs []net.Conn
				for range 3 {
					gs = append(gs, ghostPoll(t, b, "/api/v1/pop/queue/ghosts"+q))
				}
				// Let the polls park before they leave.
				checkFor(t, 10*time.Second, 5*time.Millisecond, func() error {
					if n := scrapeProm(t, b).value("regina_connections_open", nil); n < 3 {
						return fmt.Errorf("%v open", n)
					}
					return nil
				})
				for _, g := range gs {
					require.NoError(t, g.Close())
				}
				tx := fmt.Sprintf("m%d", r)
				b.push(t, item{"queue": "ghosts", "transactionId": tx, "payload": r})
				params := url.Values{"wait": {"true"}, "timeout": {"10000"}, "autoAck": {"true"}}
				m := b.pop(t, "ghosts", "", params).Messages
				require.Len(t, m, 1, "round %d", r)
				require.False(t, got[m[0].TransactionID], "delivered twice")
				got[m[0].TransactionID] = true
			}
			require.Len(t, got, rounds)
			h.alive(t)
			undelivered := scrapeProm(t, b).value("regina_pop_undelivered_total", nil)
			t.Logf("figure: ghost polls (autoAck=%t): %d messages pushed under %d ghosts, %d consumed once each, "+
				"%.0f answers found their client gone (lease released at once)", autoAck, rounds, 3*rounds, len(got), undelivered)
		})
	}
}

// sendBody posts a body of size bytes (chunked when size < 0: 100 MB in
// 1 MiB chunks) with the headers given on a raw connection, writing while
// the broker reads, and returns the answer's status (0: none).
func sendBody(addr, path, headers string, size int) int {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0
	}
	defer c.Close()
	chunked := size < 0
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s", path, headers)
	if chunked {
		head += "Transfer-Encoding: chunked\r\n\r\n"
	} else {
		head += fmt.Sprintf("Content-Length: %d\r\n\r\n", size)
	}
	go func() {
		if _, err := io.WriteString(c, head); err != nil {
			return
		}
		chunk := bytes.Repeat([]byte("x"), 1<<20)
		if chunked {
			for range 100 {
				if _, err := fmt.Fprintf(c, "%x\r\n%s\r\n", len(chunk), chunk); err != nil {
					return
				}
			}
			_, _ = io.WriteString(c, "0\r\n\r\n")
			return
		}
		for sent := 0; sent < size; sent += len(chunk) {
			if _, err := c.Write(chunk[:min(len(chunk), size-sent)]); err != nil {
				return
			}
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(120 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestLong_HostileBodies: 16 concurrent 60 MB POSTs and a 100 MB chunked
// one without a token, then 16 concurrent 60 MB bodies with a token (not
// JSON: refused once read), against a broker with auth on. The peak RSS
// stays near its idle figure for the first (the bodies are never read) and
// within MAX_BODY_BYTES_IN_FLIGHT for the second.
func TestLong_HostileBodies(t *testing.T) {
	h := startHostileBroker(t, 0, "JWT_ENABLED=true", "JWT_SECRET="+string(authSecret), "HTTP_READ_TIMEOUT=20000")
	addr := strings.TrimPrefix(h.URL, "http://")
	_, idle := h.memKiB(t)
	statuses := func(n, size int, headers string) map[int]int {
		var mu sync.Mutex
		out := map[int]int{}
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				s := sendBody(addr, "/api/v1/push", headers, size)
				mu.Lock()
				out[s]++
				mu.Unlock()
			})
		}
		wg.Wait()
		return out
	}
	unauth := statuses(16, 60<<20, "")
	chunked := statuses(1, -1, "")
	h.alive(t)
	_, peakUnauth := h.memKiB(t)
	require.Equal(t, map[int]int{http.StatusUnauthorized: 16}, unauth)
	require.Equal(t, map[int]int{http.StatusUnauthorized: 1}, chunked)
	tok := "Authorization: Bearer " + hsToken(t, "producer", "read-write") + "\r\n"
	authed := statuses(16, 60<<20, tok)
	h.alive(t)
	_, peakAuth := h.memKiB(t)
	for s := range authed {
		require.Contains(t, []int{http.StatusBadRequest, http.StatusServiceUnavailable}, s, "%v", authed)
	}
	status, body := rawRequest(t, h.testBroker, "POST /api/v1/push", strings.TrimSuffix(tok, "\r\n"),
		`{"items":[{"queue":"after","transactionId":"t1","payload":1}]}`)
	require.Equal(t, http.StatusCreated, status, "%s", body)
	t.Logf("figure: bodies with auth on: idle peak RSS %d MiB; 16 x 60 MB + 100 MB chunked without a token: %v, "+
		"peak %d MiB; 16 x 60 MB with a token (not JSON): %v, peak %d MiB (MAX_BODY_BYTES_IN_FLIGHT 128 MiB)",
		idle>>10, unauth, peakUnauth>>10, authed, peakAuth>>10)
}
