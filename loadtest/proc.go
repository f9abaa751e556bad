package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/regina-mq/regina/internal/procstat"
)

// ProcSample is one reading of a process's CPU time and resident memory.
type ProcSample struct {
	At       time.Time
	CPUTicks uint64 // utime + stime, in clock ticks
	RSSBytes int64
}

// ProcSampler reads /proc/PID/stat and /proc/PID/status.
type ProcSampler struct {
	PID    int
	ClkTck float64
	root   string // "/proc", replaced in tests
}

// NewProcSampler samples process pid.
func NewProcSampler(pid int) *ProcSampler {
	return &ProcSampler{PID: pid, ClkTck: procstat.ClockTicks(), root: "/proc"}
}

// Sample reads the process's current CPU ticks and RSS.
func (p *ProcSampler) Sample(now time.Time) (ProcSample, error) {
	dir := filepath.Join(p.root, strconv.Itoa(p.PID))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return ProcSample{}, err
	}
	ps, err := procstat.ParseStat(string(stat))
	ut, st := ps.UTime, ps.STime
	if err != nil {
		return ProcSample{}, err
	}
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return ProcSample{}, err
	}
	kb, err := procstat.ParseStatusRSS(string(status))
	if err != nil {
		return ProcSample{}, err
	}
	return ProcSample{At: now, CPUTicks: ut + st, RSSBytes: kb * 1024}, nil
}

// Cores is the average number of cores the process used between a and b.
func (p *ProcSampler) Cores(a, b ProcSample) float64 {
	wall := b.At.Sub(a.At).Seconds()
	if wall <= 0 || b.CPUTicks < a.CPUTicks || p.ClkTck <= 0 {
		return 0
	}
	return float64(b.CPUTicks-a.CPUTicks) / p.ClkTck / wall
}

// FindBrokerPID looks for the broker's process: first the owner of the TCP
// socket listening on port, then a single process whose command name is
// "regina". It returns 0 and a reason when it finds none or several.
func FindBrokerPID(port int) (int, string) {
	return findBrokerPID("/proc", port)
}

func findBrokerPID(root string, port int) (int, string) {
	if port > 0 {
		if pid := procstat.ListenerPID(root, port); pid > 0 {
			return pid, fmt.Sprintf("listening on port %d", port)
		}
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return 0, err.Error()
	}
	var found []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(root, e.Name(), "comm"))
		if err == nil && string(bytes.TrimSpace(comm)) == "regina" {
			found = append(found, pid)
		}
	}
	switch len(found) {
	case 0:
		return 0, "no process named regina"
	case 1:
		return found[0], "the only process named regina"
	default:
		return 0, fmt.Sprintf("%d processes named regina %v, none listening on port %d; pass -pid", len(found), found, port)
	}
}
