package main

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// exitText says how a broker that exited by itself ended: its exit code, or
// the signal that killed it, and whatever the kernel log says about its pid
// (the OOM killer names the process it kills).
func exitText(b *brokerProc) string {
	var parts []string
	if ps := b.cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			parts = append(parts, "killed by signal "+ws.Signal().String())
		} else {
			parts = append(parts, "exit code "+strconv.Itoa(ps.ExitCode()))
		}
	}
	if lines := kernelLinesAbout(b.pid); len(lines) > 0 {
		parts = append(parts, "kernel log: "+strings.Join(lines, " / "))
	} else {
		parts = append(parts, "nothing about it in the kernel log (dmesg)")
	}
	return strings.Join(parts, "; ")
}

// kernelLinesAbout returns the dmesg lines that name pid (an OOM kill, a
// segfault), empty when dmesg cannot be read.
func kernelLinesAbout(pid int) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "dmesg").Output()
	if err != nil {
		return nil
	}
	var lines []string
	needles := []string{fmt.Sprintf("process %d ", pid), fmt.Sprintf("pid=%d,", pid), fmt.Sprintf("[%d]", pid), fmt.Sprintf("(%d)", pid)}
	for line := range strings.Lines(string(out)) {
		for _, n := range needles {
			if strings.Contains(line, n) {
				lines = append(lines, strings.TrimSpace(line))
				break
			}
		}
	}
	return lines
}
