package main

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/regina-mq/regina/internal/procstat"

	"github.com/stretchr/testify/require"
)

func TestParseStat(t *testing.T) {
	t.Parallel()
	// The command name may hold spaces and parentheses.
	line := "1234 (my (odd) name) S 1 1234 1234 0 -1 4194560 2593 0 0 0 1577 423 0 0 20 0 12 0 123456 1234567 890 18446744073709551615\n"
	ps, err := procstat.ParseStat(line)
	ut, st := ps.UTime, ps.STime
	require.NoError(t, err)
	require.Equal(t, uint64(1577), ut)
	require.Equal(t, uint64(423), st)
	_, err = procstat.ParseStat("1234 (x) S 1 2")
	require.Error(t, err)
}

func TestParseStatusRSS(t *testing.T) {
	t.Parallel()
	kb, err := procstat.ParseStatusRSS("Name:\tregina\nVmPeak:\t  900 kB\nVmRSS:\t   23456 kB\nThreads:\t9\n")
	require.NoError(t, err)
	require.Equal(t, int64(23456), kb)
	_, err = procstat.ParseStatusRSS("Name:\tkthreadd\n")
	require.Error(t, err)
}

func TestProcSamplerAndCores(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "77")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	writeStat := func(ut, st int) {
		line := "77 (regina) S 1 77 77 0 -1 0 0 0 0 0 " + strconv.Itoa(ut) + " " + strconv.Itoa(st) + " 0 0 20 0 9 0 1 2 3\n"
		require.NoError(t, os.WriteFile(filepath.Join(dir, "stat"), []byte(line), 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "status"), []byte("VmRSS:\t2048 kB\n"), 0o644))
	p := &ProcSampler{PID: 77, ClkTck: 100, root: root}
	t0 := time.Unix(1000, 0)
	writeStat(100, 50)
	a, err := p.Sample(t0)
	require.NoError(t, err)
	require.Equal(t, int64(2048*1024), a.RSSBytes)
	writeStat(250, 100) // +200 ticks = 2 CPU seconds
	b, err := p.Sample(t0.Add(4 * time.Second))
	require.NoError(t, err)
	require.InDelta(t, 0.5, p.Cores(a, b), 1e-9)
	require.Zero(t, p.Cores(b, a))
}

func TestFindBrokerPIDByName(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	mk := func(pid, comm string) {
		require.NoError(t, os.MkdirAll(filepath.Join(root, pid), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, pid, "comm"), []byte(comm+"\n"), 0o644))
	}
	mk("10", "bash")
	mk("11", "regina-loadtest")
	pid, _ := findBrokerPID(root, 0)
	require.Zero(t, pid)
	mk("12", "regina")
	pid, why := findBrokerPID(root, 0)
	require.Equal(t, 12, pid, why)
	mk("13", "regina")
	pid, why = findBrokerPID(root, 0)
	require.Zero(t, pid)
	require.Contains(t, why, "2 processes named regina")
}
