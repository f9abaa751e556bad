package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
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

func tailString(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
