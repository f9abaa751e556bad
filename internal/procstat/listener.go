package procstat

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// LocalPort is the port of a URL pointing at this machine (a loopback or
// unspecified address, or "localhost"), 0 otherwise, so that a local
// process listening on the same port is never taken for a remote server.
func LocalPort(raw string) int {
	u, err := url.Parse(raw)
	if err != nil {
		return 0
	}
	if h := u.Hostname(); h != "localhost" {
		ip := net.ParseIP(h)
		if ip == nil || (!ip.IsLoopback() && !ip.IsUnspecified()) {
			return 0
		}
	}
	p := u.Port()
	if p == "" {
		if u.Scheme == "https" {
			return 443
		}
		return 80
	}
	n, _ := strconv.Atoi(p)
	return n
}

// ListenerPID finds the process holding a TCP socket in LISTEN state on
// port, via root/net/tcp{,6} and root/PID/fd (root is "/proc"; tests pass
// a fake tree). 0 when none is visible.
func ListenerPID(root string, port int) int {
	inodes := map[string]bool{}
	for _, name := range []string{"net/tcp", "net/tcp6"} {
		b, err := os.ReadFile(filepath.Join(root, name)) //nolint:gosec // G304: a /proc file under the given root
		if err != nil {
			continue
		}
		for ino := range listenInodes(string(b), port) {
			inodes[ino] = true
		}
	}
	if len(inodes) == 0 {
		return 0
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fdDir := filepath.Join(root, e.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil {
				continue
			}
			if ino, ok := strings.CutPrefix(link, "socket:["); ok && inodes[strings.TrimSuffix(ino, "]")] {
				return pid
			}
		}
	}
	return 0
}

// listenInodes returns the inodes of sockets in /proc/net/tcp format
// listening (state 0A) on port.
func listenInodes(table string, port int) map[string]bool {
	out := map[string]bool{}
	want := fmt.Sprintf(":%04X", port)
	for line := range strings.Lines(table) {
		f := strings.Fields(line)
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		if len(f) < 10 || f[3] != "0A" || !strings.HasSuffix(f[1], want) {
			continue
		}
		out[f[9]] = true
	}
	return out
}
