package main

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ghostPoll opens a raw connection to b, sends a pop (path and query) and
// returns the connection: the test closes it without reading, as a client
// whose own timeout gave up on a long poll.
func ghostPoll(t *testing.T, b *testBroker, pathQuery string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(b.URL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: regina\r\n\r\n", pathQuery)
	require.NoError(t, err)
	return c
}

// openConnections is the broker's regina_connections_open.
func openConnections(t *testing.T, b *testBroker) float64 {
	t.Helper()
	return scrapeProm(t, b).value("regina_connections_open", nil)
}

// TestGhostLongPollLosesNothing: a long poll whose client is gone ends
// (its connection is closed and uncounted) and never takes a message for
// nobody. Messages pushed right after ghosts left are served to a live
// consumer at once (not after leaseTime); with autoAck exactly once, never
// marked consumed for a ghost.
func TestGhostLongPollLosesNothing(t *testing.T) {
	t.Parallel()
	for _, autoAck := range []bool{false, true} {
		t.Run(fmt.Sprintf("autoAck=%t", autoAck), func(t *testing.T) {
			t.Parallel()
			b := startBroker(t, "", nil)
			d := newDB(t, b.Schema)
			const queue = "ghosts"
			b.configure(t, queue, map[string]any{"leaseTime": 300})
			base := openConnections(t, b)
			query := "?wait=true&timeout=120000"
			if autoAck {
				query += "&autoAck=true"
			}
			const rounds = 5
			for round := range rounds {
				ghosts := make([]net.Conn, 3)
				for i := range ghosts {
					ghosts[i] = ghostPoll(t, b, "/api/v1/pop/queue/"+queue+query)
				}
				// The ghosts' connections are accepted (their polls park or
				// are about to) before they leave.
				checkFor(t, 10*time.Second, 10*time.Millisecond, func() error {
					if n := openConnections(t, b); n < base+float64(len(ghosts)) {
						return fmt.Errorf("%v connections open, want %v", n, base+float64(len(ghosts)))
					}
					return nil
				})
				for _, g := range ghosts {
					require.NoError(t, g.Close())
				}
				// Pushed at once: a ghost still parked may take it before
				// its watch sees the client gone; it must give it back.
				tx := fmt.Sprintf("m%d", round)
				b.push(t, item{"queue": queue, "transactionId": tx, "payload": map[string]any{"round": round}})
				params := url.Values{"wait": {"true"}, "timeout": {"10000"}}
				if autoAck {
					params.Set("autoAck", "true")
				}
				got := b.pop(t, queue, "", params)
				require.Len(t, got.Messages, 1, "round %d: the message did not come back within 10s (lease 300s)", round)
				require.Equal(t, tx, got.Messages[0].TransactionID)
				if !autoAck {
					require.True(t, b.ack(t, got.Messages[0], "completed", "").Success)
				}
				// Exactly once: nothing more to pop.
				require.Empty(t, b.pop(t, queue, "", url.Values{"autoAck": {"true"}}).Messages)
			}
			// Every message consumed exactly once, none left leased.
			require.EqualValues(t, rounds, d.int(t, `SELECT cursor_offset FROM queen.consumers`))
			require.Zero(t, d.int(t, `SELECT count(*) FROM queen.consumers WHERE lease_id IS NOT NULL`))
			// The ghosts' connections are all closed.
			checkFor(t, 10*time.Second, 10*time.Millisecond, func() error {
				if n := openConnections(t, b); n > base {
					return fmt.Errorf("%v connections open, want %v", n, base)
				}
				return nil
			})
		})
	}
}

// TestAutoAckAnsweredIsConsumed: a live client's autoAck pop is consumed
// by the time its answer arrives (the cursor moves before the broker reads
// the connection's next request), so the next pop on the same connection
// sees the next message.
func TestAutoAckAnsweredIsConsumed(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	const queue = "autoack-live"
	for i := range 3 {
		b.push(t, item{"queue": queue, "partition": "p", "transactionId": fmt.Sprintf("t%d", i), "payload": i})
	}
	for i := range 3 {
		got := b.pop(t, queue, "p", url.Values{"autoAck": {"true"}})
		require.Len(t, got.Messages, 1)
		require.Equal(t, fmt.Sprintf("t%d", i), got.Messages[0].TransactionID)
		require.Empty(t, got.Messages[0].LeaseID)
	}
	status, _ := do(t, "GET", b.URL+"/api/v1/pop/queue/"+queue+"/partition/p?autoAck=true", nil)
	require.Equal(t, http.StatusNoContent, status)
}
