package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/regina-mq/regina/internal/procstat"
)

// The JetStream peers. make compare installs a pinned nats-server
// (NATSPinnedVersion, `go install` into bin/, like golangci-lint; no go.mod
// dependency) and this file starts it twice for the run: once with its
// defaults (acknowledges a publish once it is in the file store's buffers,
// fsyncs every two minutes), once with `sync_interval: always` (fsyncs before
// every acknowledgement: acked = on disk, as Regina's commit). -nats-url
// replaces the default one with a server the user runs (e.g. Debian's 2.9 on
// 127.0.0.1:4222). The functions are small so that other blocks (the consume
// block's pull consumers) build on them: startNATS, connectJetStream,
// natsPeer.addStream, natsPeer.close.

// NATSPinnedVersion is the nats-server version make compare installs into
// bin/nats-server-<version> (the Makefile's NATS_SERVER_VERSION).
const NATSPinnedVersion = "v2.15.3"

// natsMode is how a nats-server we start acknowledges publishes.
type natsMode int

const (
	// natsDefault is nats-server's default file store: an ack once the
	// message is written to the OS, fsync in the background (sync_interval
	// 2 min).
	natsDefault natsMode = iota
	// natsSyncAlways is `jetstream { sync_interval: always }`: every ack
	// follows an fsync.
	natsSyncAlways
)

// durability says what an acknowledgement of the mode promises.
func (m natsMode) durability() string {
	if m == natsSyncAlways {
		return "`sync_interval: always`: every ack follows an fsync (acked = on disk, as a Regina commit)"
	}
	return "defaults: acks before fsync (the file store syncs every 2 min)"
}

// natsProc is a NATS server in use: one the user named (-nats-url), or one
// we started (then stopped and its store removed at the end).
type natsProc struct {
	url     string
	pid     int    // the listener's process when local, 0 when unknown
	binary  string // path of nats-server, "" when unknown
	mode    natsMode
	started bool
	cmd     *exec.Cmd
	dir     string
	done    chan struct{}
}

// pinnedNATSBinary is bin/nats-server-<NATSPinnedVersion> in repo, or an
// error saying how to get it.
func pinnedNATSBinary(repo, given string) (string, error) {
	bin := given
	if bin == "" {
		bin = filepath.Join("bin", "nats-server-"+NATSPinnedVersion)
	}
	if !filepath.IsAbs(bin) {
		bin = filepath.Join(repo, bin)
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() {
		return "", fmt.Errorf("nats-server %s not found at %s: make compare installs it (make bin/nats-server-%s), or pass -nats-server PATH",
			NATSPinnedVersion, bin, NATSPinnedVersion)
	}
	return bin, nil
}

// userNATS describes the server at given (-nats-url); its pid is found when
// it listens on this machine.
func userNATS(given string) *natsProc {
	n := &natsProc{url: given}
	if u, err := url.Parse(given); err == nil {
		if p, err := strconv.Atoi(u.Port()); err == nil && (u.Hostname() == "127.0.0.1" || u.Hostname() == "localhost") {
			n.pid = procstat.ListenerPID("/proc", p)
		}
	}
	if n.pid > 0 {
		if exe, err := os.Readlink("/proc/" + strconv.Itoa(n.pid) + "/exe"); err == nil {
			n.binary = exe
		}
	}
	return n
}

// natsConfig is the server's configuration file: listen on 127.0.0.1:port,
// JetStream in dir, and sync_interval always in natsSyncAlways.
func natsConfig(port int, dir string, mode natsMode) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: \"127.0.0.1:%d\"\n", port)
	b.WriteString("jetstream {\n")
	fmt.Fprintf(&b, "  store_dir: %q\n", dir)
	if mode == natsSyncAlways {
		b.WriteString("  sync_interval: always\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// startNATS starts bin with a configuration file (natsConfig) on a free
// port of 127.0.0.1 with a temporary store directory under tmpDir, and
// waits until it listens.
func startNATS(ctx context.Context, bin, tmpDir string, mode natsMode) (*natsProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(tmpDir, "nats-store-")
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte(natsConfig(port, filepath.Join(dir, "js"), mode)), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	logPath := filepath.Join(dir, "nats-server.log")
	cmd := exec.Command(bin, "-c", conf, "-l", logPath)
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	n := &natsProc{url: "nats://127.0.0.1:" + strconv.Itoa(port), pid: cmd.Process.Pid, binary: bin, mode: mode,
		started: true, cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(n.done)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !portAnswers("127.0.0.1:" + strconv.Itoa(port)) {
		select {
		case <-n.done:
			tail := tailFile(logPath, 2000)
			os.RemoveAll(dir)
			return nil, fmt.Errorf("nats-server exited at start; its log:\n%s", tail)
		case <-ctx.Done():
			n.stop(true)
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			n.stop(true)
			return nil, fmt.Errorf("nats-server did not listen within 20s (log %s)", logPath)
		}
	}
	return n, nil
}

// stop ends a server we started and removes its store; a server the user
// named is left alone.
func (n *natsProc) stop(hard bool) {
	if n == nil || !n.started {
		return
	}
	select {
	case <-n.done:
	default:
		if !hard {
			_ = n.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-n.done:
			case <-time.After(10 * time.Second):
			}
		}
		_ = n.cmd.Process.Kill()
		select {
		case <-n.done:
		case <-time.After(5 * time.Second):
		}
	}
	if n.dir != "" {
		os.RemoveAll(n.dir)
	}
}

// connectJetStream connects to url and checks that JetStream answers.
func connectJetStream(url, name string) (*nats.Conn, error) {
	nc, err := nats.Connect(url, nats.Name(name), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	js, err := nc.JetStream()
	if err == nil {
		_, err = js.AccountInfo()
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("JetStream not available at %s: %w", url, err)
	}
	return nc, nil
}

// natsPeer is one JetStream server under test: its process, an admin
// connection, and the streams the run made on it (deleted by close).
type natsPeer struct {
	label   string // "jetstream" or "jetstream_sync": the phases' prefix
	srv     *natsProc
	nc      *nats.Conn
	streams []string
	// subjects are the partitions' subjects of the run's push stream
	// (harness.jetStream makes it).
	subjects []string
	// Version is the server's version as it reports it (and as its binary
	// says, when known); Where says where it runs and how it was started.
	Version, Where string
}

// openNATSPeer connects to srv (started or named) and describes it.
func openNATSPeer(ctx context.Context, label string, srv *natsProc) (*natsPeer, error) {
	nc, err := connectJetStream(srv.url, "regina-compare-admin")
	if err != nil {
		return nil, err
	}
	p := &natsPeer{label: label, srv: srv, nc: nc, Version: "nats-server " + nc.ConnectedServerVersion()}
	if srv.binary != "" {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if v, err := exec.CommandContext(cctx, srv.binary, "--version").Output(); err == nil {
			p.Version += " (`" + filepath.Base(srv.binary) + " --version`: " + strings.TrimSpace(string(v)) + ")"
		}
	}
	switch {
	case srv.started:
		p.Where = "started for this run: " + srv.binary + " -c <conf>, " + srv.mode.durability()
	default:
		p.Where = "already running at " + srv.url + " (-nats-url; its own durability settings)"
		if srv.pid > 0 {
			if cmd, err := os.ReadFile("/proc/" + strconv.Itoa(srv.pid) + "/cmdline"); err == nil {
				p.Where += ", `" + strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " ")) + "`"
			}
		}
	}
	return p, nil
}

// addStream creates a file-storage stream named name on subjects root.>
// with a duplicate window, and returns one subject per partition
// (root.p0 ...). close deletes it.
func (p *natsPeer) addStream(name, root string, window time.Duration, partitions int) ([]string, error) {
	js, err := p.nc.JetStream()
	if err != nil {
		return nil, err
	}
	if _, err := js.AddStream(&nats.StreamConfig{Name: name, Subjects: []string{root + ".>"},
		Storage: nats.FileStorage, Duplicates: window, Replicas: 1}); err != nil {
		return nil, fmt.Errorf("create stream %s on %s: %w", name, p.srv.url, err)
	}
	p.streams = append(p.streams, name)
	subjects := make([]string, partitions)
	for i := range subjects {
		subjects[i] = root + ".p" + strconv.Itoa(i)
	}
	return subjects, nil
}

// close deletes the peer's streams, closes its connection and stops the
// server when we started it.
func (p *natsPeer) close(hard bool, logf func(string, ...any)) {
	if p == nil {
		return
	}
	if p.nc != nil {
		if js, err := p.nc.JetStream(); err == nil {
			for _, s := range p.streams {
				if err := js.DeleteStream(s); err != nil {
					logf("delete stream %s: %v", s, err)
				}
			}
		}
		p.nc.Close()
	}
	if p.srv.started {
		logf("stopping the nats-server we started (%s)", p.label)
		p.srv.stop(hard)
	}
}
