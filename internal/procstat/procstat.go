// Package procstat reads a process's CPU time and resident memory from
// Linux /proc, and finds the local process listening on a port, for the
// load generator and the comparison harness (which report the broker's,
// PostgreSQL's and other servers' CPU and RSS). It is measurement only, no
// broker code.
package procstat

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Stat is what /proc/PID/stat tells about one process.
type Stat struct {
	PPID int
	// UTime and STime are in clock ticks (see ClockTicks).
	UTime, STime uint64
}

// ParseStat parses a /proc/PID/stat line. The command name (field 2) may
// hold spaces and parentheses, so the fields are counted from the last ')'.
func ParseStat(s string) (Stat, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return Stat{}, errors.New("stat: no ')'")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state), f[1] ppid, f[11] utime (14), f[12] stime (15).
	if len(f) < 13 {
		return Stat{}, fmt.Errorf("stat: %d fields after comm", len(f))
	}
	var st Stat
	var err error
	if st.PPID, err = strconv.Atoi(f[1]); err != nil {
		return Stat{}, fmt.Errorf("stat ppid: %w", err)
	}
	if st.UTime, err = strconv.ParseUint(f[11], 10, 64); err != nil {
		return Stat{}, fmt.Errorf("stat utime: %w", err)
	}
	if st.STime, err = strconv.ParseUint(f[12], 10, 64); err != nil {
		return Stat{}, fmt.Errorf("stat stime: %w", err)
	}
	return st, nil
}

// ParseStatusRSS returns VmRSS in kB from a /proc/PID/status text.
func ParseStatusRSS(s string) (int64, error) {
	for line := range strings.Lines(s) {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			break
		}
		return strconv.ParseInt(f[0], 10, 64)
	}
	return 0, errors.New("status: no VmRSS")
}

// ClockTicks returns the kernel's USER_HZ (AT_CLKTCK from the auxiliary
// vector), 100 when it cannot be read.
func ClockTicks() float64 {
	b, err := os.ReadFile("/proc/self/auxv")
	if err == nil && strconv.IntSize == 64 {
		for len(b) >= 16 {
			k := binary.LittleEndian.Uint64(b)
			v := binary.LittleEndian.Uint64(b[8:])
			if k == 17 && v > 0 { // AT_CLKTCK
				return float64(v)
			}
			if k == 0 {
				break
			}
			b = b[16:]
		}
	}
	return 100
}
