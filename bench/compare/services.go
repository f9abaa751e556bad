package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/regina-mq/regina/internal/procstat"
)

// childAttr keeps a child out of the terminal's process group (so a Ctrl-C
// reaches only us, and we stop the child in order) and kills it if we die.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// ---------------------------------------------------------------- PostgreSQL

// ensurePostgres returns a connection URL: the given one, else the one
// scripts/ensure-postgres.sh prints (it finds or starts a server and creates
// the database).
func ensurePostgres(ctx context.Context, repo, given, dbname string) (string, error) {
	if given != "" {
		return given, nil
	}
	u, err := output(ctx, repo, filepath.Join(repo, "scripts", "ensure-postgres.sh"), dbname)
	if err != nil {
		return "", fmt.Errorf("find or start PostgreSQL: %w", err)
	}
	return u, nil
}

// ---------------------------------------------------------------- broker

// brokerProc is a bin/regina we started.
type brokerProc struct {
	cmd     *exec.Cmd
	pid     int
	url     string
	label   string
	logPath string
	done    chan struct{}
	waitErr error
}

// brokerEnvPrefixes are the variables the broker reads (see
// docs/operating.md, Configuration). They are removed from the inherited environment so that
// every setting is the broker's default except the ones we set.
var brokerEnvPrefixes = []string{"PORT=", "HOST=", "DATABASE_URL=", "PG_", "QUEEN_", "DB_", "RETENTION_",
	"MAILBOX_", "BATCH_", "ACTOR_", "PUSH_", "MAX_BODY_BYTES=", "SHUTDOWN_TIMEOUT=", "LOG_LEVEL=", "LOG_FORMAT="}

func brokerEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		keep := true
		for _, p := range brokerEnvPrefixes {
			if strings.HasPrefix(kv, p) {
				keep = false
				break
			}
		}
		if keep {
			env = append(env, kv)
		}
	}
	return append(append(env, brokerExtraEnv...), extra...)
}

// startBroker starts bin/regina on a free port of 127.0.0.1 with the given
// schema and cache setting, and waits until /health answers 200.
func startBroker(ctx context.Context, bin, dbURL, schema string, cacheOn bool, logDir, label string) (*brokerProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(logDir, label+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin)
	cmd.Env = brokerEnv(
		"DATABASE_URL="+dbURL,
		"QUEEN_SCHEMA="+schema,
		"HOST=127.0.0.1",
		"PORT="+strconv.Itoa(port),
		"QUEEN_DEDUP_CACHE="+strconv.FormatBool(cacheOn),
		"LOG_LEVEL=warn",
		"LOG_FORMAT=json",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	b := &brokerProc{cmd: cmd, pid: cmd.Process.Pid, url: "http://127.0.0.1:" + strconv.Itoa(port),
		label: label, logPath: logPath, done: make(chan struct{})}
	go func() {
		b.waitErr = cmd.Wait()
		close(b.done)
	}()
	deadline := time.Now().Add(90 * time.Second)
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		select {
		case <-b.done:
			return nil, fmt.Errorf("broker %s exited before serving (%w); log %s:\n%s", label, b.waitErr, logPath, tailFile(logPath, 3000))
		case <-ctx.Done():
			b.stop(true)
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		resp, err := hc.Get(b.url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return b, nil
			}
		}
		if time.Now().After(deadline) {
			b.stop(true)
			return nil, fmt.Errorf("broker %s not healthy after 90s; log %s:\n%s", label, logPath, tailFile(logPath, 3000))
		}
	}
}

// stop ends the broker: SIGTERM and up to 20 s to drain, then SIGKILL;
// at once with hard.
func (b *brokerProc) stop(hard bool) {
	if b == nil {
		return
	}
	select {
	case <-b.done:
		return
	default:
	}
	if !hard {
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.done:
			return
		case <-time.After(20 * time.Second):
		}
	}
	_ = b.cmd.Process.Kill()
	select {
	case <-b.done:
	case <-time.After(5 * time.Second):
	}
}

// ---------------------------------------------------------------- NATS

// natsProc is the NATS server in use: one that answered on 127.0.0.1:4222,
// or one we started (then stopped and its store removed at the end).
type natsProc struct {
	url     string
	pid     int
	binary  string // path of nats-server, "" when unknown
	started bool
	cmd     *exec.Cmd
	dir     string
	done    chan struct{}
}

// findNATSBinary returns the nats-server binary, installing Debian's
// nats-server package when it is missing and we are root.
func findNATSBinary(ctx context.Context, logf func(string, ...any)) (string, error) {
	look := func() string {
		if p, err := exec.LookPath("nats-server"); err == nil {
			return p
		}
		for _, p := range []string{"/usr/sbin/nats-server", "/usr/bin/nats-server", "/usr/local/bin/nats-server"} {
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				return p
			}
		}
		return ""
	}
	if p := look(); p != "" {
		return p, nil
	}
	if os.Geteuid() != 0 {
		return "", errors.New("nats-server is not installed and we are not root: install Debian's nats-server package (apt-get install nats-server) or pass -nats-url")
	}
	logf("nats-server not found; installing Debian's nats-server package with apt-get")
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	for _, args := range [][]string{
		{"-o", "DPkg::Lock::Timeout=300", "update"},
		{"-o", "DPkg::Lock::Timeout=300", "install", "-y", "--no-install-recommends", "nats-server"},
	} {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		cmd := exec.CommandContext(cctx, "apt-get", args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			return "", fmt.Errorf("apt-get %s: %w: %s", strings.Join(args, " "), err, tailString(string(out), 1500))
		}
	}
	if p := look(); p != "" {
		return p, nil
	}
	return "", errors.New("nats-server still missing after apt-get install nats-server")
}

func tailString(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// findNATS returns the server at given, else the one answering on
// 127.0.0.1:4222, else nil (the caller then starts one).
func findNATS(given string) *natsProc {
	if given != "" {
		n := &natsProc{url: given}
		if u, err := url.Parse(given); err == nil {
			if p, err := strconv.Atoi(u.Port()); err == nil && (u.Hostname() == "127.0.0.1" || u.Hostname() == "localhost") {
				n.pid = procstat.ListenerPID("/proc", p)
			}
		}
		return n
	}
	if portAnswers("127.0.0.1:4222") {
		return &natsProc{url: "nats://127.0.0.1:4222", pid: procstat.ListenerPID("/proc", 4222)}
	}
	return nil
}

// startNATS starts nats-server -js on a free port of 127.0.0.1 with a
// temporary store directory.
func startNATS(ctx context.Context, bin, tmpDir string) (*natsProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(tmpDir, "nats-store-")
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(tmpDir, "nats-server.log")
	cmd := exec.Command(bin, "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-sd", dir, "-l", logPath)
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	n := &natsProc{url: "nats://127.0.0.1:" + strconv.Itoa(port), pid: cmd.Process.Pid, binary: bin,
		started: true, cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(n.done)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !portAnswers("127.0.0.1:" + strconv.Itoa(port)) {
		select {
		case <-n.done:
			os.RemoveAll(dir)
			return nil, fmt.Errorf("nats-server exited at start; log %s:\n%s", logPath, tailFile(logPath, 2000))
		case <-ctx.Done():
			n.stop(true)
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			n.stop(true)
			return nil, fmt.Errorf("nats-server did not listen within 20s; log %s", logPath)
		}
	}
	return n, nil
}

// stop ends a server we started and removes its store.
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
