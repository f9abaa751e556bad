package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// buildBroker compiles ./cmd/regina of the repository into dir.
func buildBroker(ctx context.Context, repo, dir string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		for _, p := range []string{filepath.Join(os.Getenv("GOROOT"), "bin", "go"), "/usr/local/go/bin/go"} {
			if isExec(p) {
				goBin, err = p, nil
				break
			}
		}
		if err != nil {
			return "", errors.New("the go command is not on PATH (needed to build ./cmd/regina)")
		}
	}
	out := filepath.Join(dir, "regina")
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", out, "./cmd/regina")
	cmd.Dir = repo
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/regina: %w\n%s", err, b)
	}
	return out, nil
}

// broker is one slot (A or B) of a broker process, restartable on its port.
type broker struct {
	name    string
	bin     string
	port    int
	logPath string
	dbURL   string
	env     []string // extra settings, applied last
	// onExit is told about exits nobody asked for.
	onExit func(b *broker, err error)

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	exitErr  error
	expected bool
	slow     bool // started with DB_STATEMENT_TIMEOUT=200
	starts   int
}

func (b *broker) url() string { return "http://127.0.0.1:" + strconv.Itoa(b.port) }

func (b *broker) running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done == nil {
		return false
	}
	select {
	case <-b.done:
		return false
	default:
		return true
	}
}

func (b *broker) isSlow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.slow
}

func (b *broker) pid() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil || b.cmd.Process == nil {
		return 0
	}
	return b.cmd.Process.Pid
}

// start launches the broker (slow: with a 200 ms statement timeout) and waits
// until /health answers 200.
func (b *broker) start(ctx context.Context, slow bool) error {
	if b.running() {
		return fmt.Errorf("broker %s is already running", b.name)
	}
	lf, err := os.OpenFile(b.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	env := append(os.Environ(),
		"DATABASE_URL="+b.dbURL,
		"PORT="+strconv.Itoa(b.port),
		"HOST=127.0.0.1",
		"LOG_FORMAT=json",
		"LOG_LEVEL=info",
	)
	if slow {
		env = append(env, "DB_STATEMENT_TIMEOUT=200")
	}
	env = append(env, b.env...)
	cmd := exec.Command(b.bin)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = lf, lf
	// The broker dies with the harness, whatever kills it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	b.mu.Lock()
	b.starts++
	fmt.Fprintf(lf, "{\"harness\":\"start #%d of broker %s at %s, slow=%v, env=%v\"}\n", b.starts, b.name,
		time.Now().Format(time.RFC3339Nano), slow, b.env)
	if err := cmd.Start(); err != nil {
		b.mu.Unlock()
		lf.Close()
		return fmt.Errorf("start broker %s: %w", b.name, err)
	}
	done := make(chan struct{})
	b.cmd, b.done, b.exitErr, b.expected, b.slow = cmd, done, nil, false, slow
	b.mu.Unlock()
	go func() {
		err := cmd.Wait()
		lf.Close()
		b.mu.Lock()
		b.exitErr = err
		expected := b.expected
		close(done)
		b.mu.Unlock()
		if !expected && b.onExit != nil {
			b.onExit(b, err)
		}
	}()
	return b.waitHealthy(ctx, 90*time.Second)
}

// waitHealthy polls /health until it answers 200, the process exits or the
// timeout passes.
func (b *broker) waitHealthy(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 3 * time.Second}
	var last string
	for {
		b.mu.Lock()
		done := b.done
		b.mu.Unlock()
		if done == nil {
			return fmt.Errorf("broker %s is not started", b.name)
		}
		select {
		case <-done:
			return fmt.Errorf("broker %s exited while starting (%w); log:\n%s", b.name, b.exitErr, tail(b.logPath, 10))
		default:
		}
		resp, err := client.Get(b.url() + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("broker %s not healthy after %s (last: %s); log:\n%s", b.name, timeout, last, tail(b.logPath, 10))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// signal sends sig and waits up to timeout for the exit. The exit is expected.
func (b *broker) signal(sig syscall.Signal, timeout time.Duration) (exitErr error, err error) {
	b.mu.Lock()
	if b.done == nil {
		b.mu.Unlock()
		return nil, nil
	}
	select {
	case <-b.done:
		b.mu.Unlock()
		return b.exitErr, nil
	default:
	}
	b.expected = true
	cmd, done := b.cmd, b.done
	b.mu.Unlock()
	if err := cmd.Process.Signal(sig); err != nil {
		return nil, err
	}
	select {
	case <-done:
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.exitErr, nil
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		return nil, fmt.Errorf("broker %s did not exit within %s of %s", b.name, timeout, sig)
	}
}

// kill is kill -9.
func (b *broker) kill() error {
	_, err := b.signal(syscall.SIGKILL, 30*time.Second)
	return err
}

// stop is a graceful stop (SIGTERM); a hang or a failed exit is an error.
func (b *broker) stop(timeout time.Duration) error {
	exitErr, err := b.signal(syscall.SIGTERM, timeout)
	if err != nil {
		return err
	}
	if exitErr != nil {
		return fmt.Errorf("broker %s exited with %w after SIGTERM; log:\n%s", b.name, exitErr, tail(b.logPath, 10))
	}
	return nil
}

// logErrors counts the broker log's lines at level error or warn.
func logLevels(path string) string {
	bs, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	m := map[string]int{}
	for l := range strings.SplitSeq(string(bs), "\n") {
		switch {
		case strings.Contains(l, `"level":"error"`):
			m["error"]++
		case strings.Contains(l, `"level":"warn"`):
			m["warn"]++
		case strings.Contains(l, `"level":"fatal"`), strings.Contains(l, "panic:"):
			m["panic/fatal"]++
		}
	}
	return sortedCounts(m)
}

// readOnlyCounts reads a broker's read-only duplicate path counters from
// its Prometheus metrics: batches proven from the dedup cache's originals,
// by window probes, and the expected duplicates that took the locked path.
func readOnlyCounts(b *broker) ([3]uint64, error) {
	var out [3]uint64
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(b.url() + "/metrics/prometheus")
	if err != nil {
		return out, fmt.Errorf("metrics of broker %s: %w", b.name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return out, fmt.Errorf("metrics of broker %s: %w", b.name, err)
	}
	for l := range strings.Lines(string(body)) {
		for i, prefix := range []string{`regina_push_readonly_batches_total{proof="originals"} `,
			`regina_push_readonly_batches_total{proof="window_probe"} `, "regina_push_readonly_misses_total "} {
			if v, ok := strings.CutPrefix(l, prefix); ok {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					out[i] = uint64(f)
				}
			}
		}
	}
	return out, nil
}
