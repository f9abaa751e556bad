package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Machine describes where the run happened.
type Machine struct {
	NProc    int    `json:"nproc"`
	MemGiB   string `json:"mem_gib"`
	CPUModel string `json:"cpu_model"`
	Kernel   string `json:"kernel"`
	OS       string `json:"os"`
}

func machineInfo() Machine {
	m := Machine{NProc: runtime.NumCPU(), MemGiB: "?", CPUModel: "?", Kernel: "?", OS: "?"}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					if kb, err := strconv.ParseFloat(f[0], 64); err == nil {
						m.MemGiB = strconv.FormatFloat(kb/(1<<20), 'f', 1, 64)
					}
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "PRETTY_NAME="); ok {
				m.OS = strings.Trim(v, `"`)
			}
		}
	}
	return m
}

// repoRoot finds the module root (the directory holding go.mod) from the
// working directory up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			bytes.Contains(b, []byte("module github.com/regina-mq/regina")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the regina repository (no go.mod for github.com/regina-mq/regina above the working directory)")
		}
		dir = parent
	}
}

// output runs a command with a timeout and returns its trimmed stdout.
func output(ctx context.Context, dir string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2000 {
			msg = msg[len(msg)-2000:]
		}
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
	}
	return strings.TrimSpace(string(out)), nil
}

// gitCommit returns the repository's HEAD commit, marked "+dirty" when the
// work tree has uncommitted changes (other engineers' work in progress is
// then part of what was measured).
func gitCommit(ctx context.Context, repo string) string {
	head, err := output(ctx, repo, "git", "rev-parse", "--short=12", "HEAD")
	if err != nil {
		return "unknown"
	}
	if st, err := output(ctx, repo, "git", "status", "--porcelain", "--untracked-files=no"); err == nil && st != "" {
		head += "+dirty"
	}
	return head
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// portAnswers reports whether something accepts TCP connections on addr.
func portAnswers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// tailFile returns the last n bytes of a file, for error messages.
func tailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
