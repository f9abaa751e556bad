package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/regina-mq/regina/internal/procstat"
)

// queenTarget is the upstream Queen server the user runs and names with
// -queen-url (make compare QUEEN_URL=...). It gets the same load as
// Regina's phases through the same client; nothing is started or stopped,
// and the run's queue on it is deleted at the end.
type queenTarget struct {
	url   string
	queue string
	// pid is the local process listening on the URL's port (its CPU and
	// RSS fill the "broker" columns), 0 when the server is remote or not
	// visible.
	pid int
	// server names it as its /health answer does, where says where it runs.
	server, where string
	// note is what configure said about the dedup window (upstream Queen
	// drops dedupWindowSeconds: its deduplication has no window).
	note       string
	configured bool
}

// setupQueen checks that the Queen server answers and creates the run's
// queue on it, before anything is measured: a Queen that is not there
// fails the run at once, not after the other blocks.
func (h *harness) setupQueen(ctx context.Context) error {
	c := h.cfg
	u, err := url.Parse(c.queenURL)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return fmt.Errorf("-queen-url %q: want http://HOST:PORT", c.queenURL)
	}
	q := &queenTarget{url: strings.TrimRight(c.queenURL, "/"), queue: "regina_cmp_" + h.runTag}
	b, err := adminRequest(ctx, http.MethodGet, q.url+"/health", nil)
	if err != nil {
		return fmt.Errorf("Queen at %s is not healthy: %w", q.url, err)
	}
	var health struct {
		Server  string `json:"server"`
		Version string `json:"version"`
		Status  string `json:"status"`
	}
	_ = json.Unmarshal(b, &health)
	q.server = strings.TrimSpace(health.Server + " " + health.Version)
	if q.server == "" {
		q.server = "unnamed server"
	}
	q.where = "remote: its CPU and memory are not measured"
	if port := procstat.LocalPort(q.url); port > 0 {
		if q.pid = procstat.ListenerPID("/proc", port); q.pid > 0 {
			q.where = "local pid " + strconv.Itoa(q.pid)
			if cmd, err := os.ReadFile("/proc/" + strconv.Itoa(q.pid) + "/cmdline"); err == nil {
				q.where += " (`" + strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " ")) + "`)"
			}
		} else {
			q.where = "local, but no visible process listens on port " + strconv.Itoa(port) + ": its CPU and memory are not measured"
		}
	}
	h.queen = q
	if q.note, err = configureQueue(ctx, q.url, q.queue, 3600); err != nil {
		return fmt.Errorf("Queen at %s: %w", q.url, err)
	}
	q.configured = true
	h.info.Queen = &queenInfo{URL: q.url, Server: q.server, Where: q.where, Queue: q.queue, Note: q.note, Database: c.queenDB}
	h.logf("Queen %s at %s (%s), queue %s", q.server, q.url, q.where, q.queue)
	if q.note != "" {
		h.logf("Queen: %s", q.note)
	}
	return nil
}

// cleanupQueen deletes the run's queue from the Queen server.
func (h *harness) cleanupQueen() {
	q := h.queen
	if q == nil || !q.configured {
		return
	}
	if _, err := adminRequest(context.Background(), http.MethodDelete, q.url+"/api/v1/resources/queues/"+url.PathEscape(q.queue), nil); err != nil {
		h.logf("delete queue %s on Queen: %v (delete it by hand)", q.queue, err)
	} else {
		h.logf("deleted queue %s on Queen", q.queue)
	}
}

// procs names the processes whose CPU a Queen phase reports: the Queen
// server as the broker, and, with -queen-database, the PostgreSQL backends
// serving that database as "PG ours" (else PG ours is unknown; PG all holds
// them when Queen uses the local cluster).
func (q *queenTarget) procs(h *harness) procGroups {
	return procGroups{broker: q.pid, postmaster: h.postmaster, dbname: h.cfg.queenDB}
}

// queenInfo is what RESULTS.md says about the Queen server.
type queenInfo struct {
	URL      string `json:"url"`
	Server   string `json:"server"`
	Where    string `json:"where"`
	Queue    string `json:"queue"`
	Note     string `json:"note,omitempty"`
	Database string `json:"database,omitempty"`
}
