package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/regina-mq/regina/internal/procstat"
)

// This file reads CPU time and resident memory from /proc. Figures are in
// cores (CPU seconds per wall second); nil means unknown.

// clkTck is the kernel's USER_HZ (AT_CLKTCK), 100 when it cannot be read.
var clkTck = procstat.ClockTicks()

// procStat is what /proc/PID/stat tells about one process.
type procStat struct {
	ppid  int
	ticks uint64 // utime + stime
}

// readStat reads /proc/PID/stat.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	st, err := procstat.ParseStat(string(b))
	if err != nil {
		return procStat{}, err
	}
	return procStat{ppid: st.PPID, ticks: st.UTime + st.STime}, nil
}

// readRSS returns VmRSS of pid in bytes.
func readRSS(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	kb, err := procstat.ParseStatusRSS(string(b))
	return kb * 1024, err
}

// machineTicks returns the busy (everything but idle and iowait) and steal
// ticks summed over all CPUs, from the first line of /proc/stat.
func machineTicks() (busy, steal uint64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, false
	}
	var v [8]uint64
	for i := range v {
		v[i], _ = strconv.ParseUint(f[i+1], 10, 64)
	}
	// user nice system idle iowait irq softirq steal
	busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
	return busy, v[7], true
}

// procGroups names the processes whose CPU a phase reports.
type procGroups struct {
	broker     int    // the Regina broker under test, 0 when none
	nats       int    // nats-server, 0 when unknown
	postmaster int    // PostgreSQL's postmaster, 0 when not local
	dbname     string // our database: backends serving it are "ours"
}

// snapshot is one reading of every group's CPU ticks.
type snapshot struct {
	at           time.Time
	broker, nats uint64
	brokerOK     bool
	natsOK       bool
	self         uint64
	pg           map[int]pgProc // every process of the PostgreSQL cluster
	oursKnown    bool           // a database was named: "PG ours" means something
	busy, steal  uint64
	machineOK    bool
}

type pgProc struct {
	ticks uint64
	ours  bool
}

func (g procGroups) snap() snapshot {
	s := snapshot{at: time.Now()}
	if g.broker > 0 {
		if st, err := readStat(g.broker); err == nil {
			s.broker, s.brokerOK = st.ticks, true
		}
	}
	if g.nats > 0 {
		if st, err := readStat(g.nats); err == nil {
			s.nats, s.natsOK = st.ticks, true
		}
	}
	if st, err := readStat(os.Getpid()); err == nil {
		s.self = st.ticks
	}
	if g.postmaster > 0 {
		s.pg, s.oursKnown = pgProcs(g.postmaster, g.dbname), g.dbname != ""
	}
	s.busy, s.steal, s.machineOK = machineTicks()
	return s
}

// pgProcs returns the postmaster and its children. A backend is "ours" when
// its process title names our database ("postgres: 15/main: USER DB HOST
// ...").
func pgProcs(postmaster int, dbname string) map[int]pgProc {
	out := map[int]pgProc{}
	if st, err := readStat(postmaster); err == nil {
		out[postmaster] = pgProc{ticks: st.ticks}
	} else {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readStat(pid)
		if err != nil || st.ppid != postmaster {
			continue
		}
		p := pgProc{ticks: st.ticks}
		if cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && dbname != "" {
			p.ours = backendDatabase(string(bytes.ReplaceAll(cmd, []byte{0}, []byte{' '}))) == dbname
		}
		out[pid] = p
	}
	return out
}

// backendDatabase is the database named in a backend's process title
// ("postgres: [CLUSTER:] USER DB HOST(PORT) STATE", or "... autovacuum
// worker DB"), "" for the cluster's other processes. The user comes first,
// so a database named like a user is not confused with it.
func backendDatabase(title string) string {
	f := strings.Fields(title)
	if len(f) == 0 || f[0] != "postgres:" {
		return ""
	}
	f = f[1:]
	if len(f) > 0 && strings.HasSuffix(f[0], ":") { // cluster name, e.g. "15/main:"
		f = f[1:]
	}
	if len(f) >= 3 && f[0] == "autovacuum" && f[1] == "worker" {
		return f[2]
	}
	if len(f) < 3 || !strings.Contains(f[2], "(") && f[2] != "[local]" {
		return "" // a background process: "checkpointer", "walwriter", ...
	}
	return f[1]
}

// CPU holds the cores each group used over a phase's measured window.
type CPU struct {
	Broker  *float64 `json:"broker,omitempty"`
	PGOurs  *float64 `json:"pg_ours,omitempty"`
	PGAll   *float64 `json:"pg_all,omitempty"`
	NATS    *float64 `json:"nats,omitempty"`
	LoadGen *float64 `json:"loadgen,omitempty"`
	Machine *float64 `json:"machine,omitempty"`
	Steal   *float64 `json:"steal,omitempty"`
}

func cores(d uint64, wall float64) *float64 {
	v := float64(d) / clkTck / wall
	return &v
}

func delta(a, b uint64) uint64 {
	if b < a {
		return 0
	}
	return b - a
}

// cpuBetween turns two snapshots into cores per group. A PostgreSQL process
// that appeared between them is charged all its CPU time; one that exited is
// lost (pools keep their backends, so this is rare).
func cpuBetween(a, b snapshot) CPU {
	wall := b.at.Sub(a.at).Seconds()
	var c CPU
	if wall <= 0 {
		return c
	}
	if a.brokerOK && b.brokerOK {
		c.Broker = cores(delta(a.broker, b.broker), wall)
	}
	if a.natsOK && b.natsOK {
		c.NATS = cores(delta(a.nats, b.nats), wall)
	}
	c.LoadGen = cores(delta(a.self, b.self), wall)
	if a.pg != nil && b.pg != nil {
		var all, ours uint64
		for pid, pb := range b.pg {
			d := pb.ticks
			if pa, ok := a.pg[pid]; ok {
				d = delta(pa.ticks, pb.ticks)
			}
			all += d
			if pb.ours {
				ours += d
			}
		}
		c.PGAll = cores(all, wall)
		if b.oursKnown {
			c.PGOurs = cores(ours, wall)
		}
	}
	if a.machineOK && b.machineOK {
		c.Machine = cores(delta(a.busy, b.busy), wall)
		c.Steal = cores(delta(a.steal, b.steal), wall)
	}
	return c
}
