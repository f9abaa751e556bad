//go:build unix

package main

import "syscall"

// openFileLimit is RLIMIT_NOFILE's soft limit (Go raises it to the hard
// limit at start), 0 when it cannot be read.
func openFileLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	return l.Cur
}
