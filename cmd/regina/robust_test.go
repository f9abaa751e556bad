package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGracefulShutdownAnswersEveryWaitingPush holds an actor with pushes
// waiting in its mailbox, stops the broker, and checks every one of them is
// answered and stored before it exits.
func TestGracefulShutdownAnswersEveryWaitingPush(t *testing.T) {
	t.Parallel()
	hook, release, first := holdActors()
	defer release()
	b := startBroker(t, "", func(c *Config) { c.beforeBatch = hook })
	d := newDB(t, b.Schema)
	const n = 5
	var wg sync.WaitGroup
	results := make([]int, n)
	for i := range n {
		wg.Go(func() {
			status, _ := b.pushRaw(t, map[string]any{"items": []item{{"queue": "held", "transactionId": fmt.Sprintf("s%d", i)}}})
			results[i] = status
		})
	}
	checkFor(t, 30*time.Second, 5*time.Millisecond, func() error {
		if m, held := metrics(t, b), first.Load(); held == 0 || int64(m.Mailbox)+held != n {
			return errNotYet
		}
		return nil
	})
	stopped := make(chan struct{})
	go func() { b.Stop(t); close(stopped) }()
	// New requests are refused while it drains (503 or connection refused).
	// One that got in before the stop began is answered and stored like any
	// other: count those.
	lateAccepted := 0
	checkFor(t, 30*time.Second, 5*time.Millisecond, func() error {
		req, _ := http.NewRequest(http.MethodPost, b.URL+"/api/v1/push", strings.NewReader(`{"items":[{"queue":"late"}]}`))
		resp, err := httpClient.Do(req)
		if err != nil {
			return nil
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			return nil
		}
		if resp.StatusCode == http.StatusCreated {
			lateAccepted++
		}
		return fmt.Errorf("late push answered %d", resp.StatusCode)
	})
	release()
	wg.Wait()
	<-stopped
	for i, s := range results {
		require.Equal(t, http.StatusCreated, s, "push %d was answered", i)
	}
	_, frames, _, _, _ := d.partitionStats(t, "held", "Default")
	require.Equal(t, int64(n), frames, "everything acknowledged is stored")
	_, lateFrames, _, _, _ := d.partitionStats(t, "late", "Default")
	require.Equal(t, int64(lateAccepted), lateFrames, "refused pushes wrote nothing; accepted ones are stored")
}

// TestSlowClientsAreCutOff opens a connection that sends half a request and
// stalls: the broker closes it after HTTP_READ_TIMEOUT and keeps serving.
func TestSlowClientsAreCutOff(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", func(c *Config) { c.ReadTimeout = 300 * time.Millisecond })
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"items\":"))
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil {
		// fasthttp may answer before closing; it must not be a success.
		require.GreaterOrEqual(t, resp.StatusCode, 400)
		resp.Body.Close()
	}
	// Either way the connection is closed now.
	_, err = conn.Read(make([]byte, 1))
	require.Error(t, err)
	require.Equal(t, "queued", b.push(t, item{"queue": "q"})[0].Status)
}

func TestHugePushesAndBodies(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", func(c *Config) { c.MaxBodyBytes = 8 << 20 })
	// 20,000 items in one push to one partition: one transaction, all queued.
	items := make([]item, 20000)
	for i := range items {
		items[i] = item{"queue": "big", "transactionId": fmt.Sprintf("t%d", i), "payload": i}
	}
	res := b.push(t, items...)
	require.Equal(t, "queued", res[19999].Status)
	// A body over the limit is refused with 413 and a JSON error before it
	// is read: the headers alone announce it (the broker answers once the
	// first byte of the body is there).
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", 9<<20)
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	var e map[string]string
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	require.Contains(t, e["error"], "exceeds")
}
