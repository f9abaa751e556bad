package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// queenStandIn answers like the upstream Queen server: 200 for everything
// after its database, verdicts rendered by PostgreSQL (spaces after the
// colons), unknown configure options dropped (and options holding none it
// knows answered with its json.exception error, as its current server
// does), deduplication per (partition, transactionId) with no window.
type queenStandIn struct {
	mu      sync.Mutex
	seen    map[string]bool
	deleted []string
}

func (q *queenStandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/health":
		io.WriteString(w, `{"status":"healthy","database":"connected","server":"C++ Queen Server (libqueen)","version":"1.0.0"}`)
	case r.URL.Path == "/api/v1/configure":
		var req struct {
			Options map[string]any `json:"options"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		if req.Options["leaseTime"] == nil && req.Options["retryLimit"] == nil {
			io.WriteString(w, `{"error":"[json.exception.type_error.306] cannot use value() with null"}`)
			return
		}
		io.WriteString(w, `{"configured":true,"options":{"leaseTime":300,"retryLimit":3}}`)
	case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, "/api/v1/resources/queues/"):
		q.mu.Lock()
		q.deleted = append(q.deleted, strings.TrimPrefix(r.URL.Path, "/api/v1/resources/queues/"))
		q.mu.Unlock()
		io.WriteString(w, `{"deleted": true, "existed": true}`)
	case r.URL.Path == "/api/v1/push":
		var req struct {
			Items []struct{ Partition, TransactionID string }
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var parts []string
		q.mu.Lock()
		for i, it := range req.Items {
			status, key := "queued", it.Partition+"/"+it.TransactionID
			if q.seen[key] {
				status = "duplicate"
			}
			q.seen[key] = true
			parts = append(parts, fmt.Sprintf(`{"index": %d, "status": %q, "transaction_id": %q}`, i, status, it.TransactionID))
		}
		q.mu.Unlock()
		io.WriteString(w, "["+strings.Join(parts, ", ")+"]")
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func TestQueenSetupLoadAndCleanup(t *testing.T) {
	q := &queenStandIn{seen: map[string]bool{}}
	srv := httptest.NewServer(q)
	defer srv.Close()
	h := &harness{cfg: &config{queenURL: srv.URL + "/", items: 10}, stop: context.Background(), runTag: "t1",
		logf: func(string, ...any) {}, wl: newWorkload(4, 10, 200, 42)}
	if err := h.setupQueen(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h.queen.pid != os.Getpid() || !strings.Contains(h.queen.note, "does not echo") || h.queen.server != "C++ Queen Server (libqueen) 1.0.0" {
		t.Fatalf("queen target %+v", h.queen)
	}

	// Queen's 200 answers count like Regina's 201: the fresh phase gets
	// every message as accepted, the storm every replayed one as duplicate.
	run := func(replay [][]int32) *workerRec {
		now := time.Now()
		pc := &phaseClock{start: now, warmEnd: now, end: now.Add(200 * time.Millisecond)}
		rec := &workerRec{}
		h.reginaWork(h.queen.url, h.queen.queue, "tag", replay)(context.Background(), 0, pc, rec)
		return rec
	}
	fresh := run(nil)
	if fresh.msgs == 0 || fresh.errors != 0 || fresh.anomalies != 0 || len(fresh.okSeqs) == 0 || fresh.msgs != 10*fresh.ops {
		t.Fatalf("fresh phase against Queen: %+v", fresh)
	}
	storm := run([][]int32{fresh.okSeqs})
	if storm.msgs == 0 || storm.errors != 0 || storm.anomalies != 0 {
		t.Fatalf("storm against Queen: msgs %d errors %d (%s) anomalies %d", storm.msgs, storm.errors, storm.errSample, storm.anomalies)
	}

	h.cleanupQueen()
	if len(q.deleted) != 1 || q.deleted[0] != h.queen.queue {
		t.Fatalf("deleted %v, want the run's queue %s", q.deleted, h.queen.queue)
	}
}

func TestQueenSetupFailsWhenQueenIsNotThere(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"status":"unhealthy","error":"database disconnected"}`)
	}))
	defer srv.Close()
	for _, u := range []string{srv.URL, "ftp://x", "http://127.0.0.1:1"} {
		h := &harness{cfg: &config{queenURL: u}, runTag: "t2", logf: func(string, ...any) {}}
		if err := h.setupQueen(context.Background()); err == nil {
			t.Errorf("setupQueen(%s) succeeded", u)
		}
		if h.queen != nil && h.queen.configured {
			t.Errorf("%s: a queue was created on a server that failed", u)
		}
	}
}
