package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoPostgres means no PostgreSQL server binaries are installed.
var ErrNoPostgres = errors.New("no PostgreSQL server binaries (initdb, pg_ctl) in /usr/lib/postgresql/*/bin or on PATH")

// FindPGBin returns the highest-versioned directory holding initdb and pg_ctl.
func FindPGBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) < pgVersion(dirs[j]) })
	for _, dir := range slices.Backward(dirs) {
		if isExec(filepath.Join(dir, "initdb")) && isExec(filepath.Join(dir, "pg_ctl")) {
			return dir, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		d := filepath.Dir(p)
		if isExec(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	return "", ErrNoPostgres
}

func pgVersion(bindir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(bindir)), 64)
	return v
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// cluster is the harness's own throwaway PostgreSQL cluster.
type cluster struct {
	bin     string
	dir     string // everything of this cluster lives here
	data    string
	sock    string
	logFile string
	ctlLog  string
	port    int
	owner   string // "postgres" when running as root, else ""
	uid     int
	gid     int
	// name labels the cluster in messages ("" for the single cluster of the
	// mixed scenario, "n0"/"n1" for the nodes of the failover scenario).
	name string
}

const appName = "regina-faults"

// newCluster prepares the directories of a cluster under base (not started).
func newCluster(bin, base string) (*cluster, error) {
	c := &cluster{bin: bin, dir: base, uid: -1, gid: -1}
	c.data = filepath.Join(base, "data")
	c.sock = filepath.Join(base, "sock")
	c.logFile = filepath.Join(base, "postgres.log")
	c.ctlLog = filepath.Join(base, "pg_ctl.log")
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root needs a 'postgres' system user to own the cluster (initdb refuses root): %w", err)
		}
		c.owner = "postgres"
		c.uid, _ = strconv.Atoi(u.Uid)
		c.gid, _ = strconv.Atoi(u.Gid)
	}
	for _, d := range []string{c.dir, c.sock} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	for _, f := range []string{c.logFile, c.ctlLog} {
		fh, err := os.OpenFile(f, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, err
		}
		fh.Close()
	}
	if c.owner != "" {
		for _, p := range []string{c.dir, c.sock, c.logFile, c.ctlLog} {
			if err := os.Chown(p, c.uid, c.gid); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

// tool runs a PostgreSQL program as the cluster owner, its output appended to
// pg_ctl.log (never a pipe: a daemon inheriting it would block us).
func (c *cluster) tool(ctx context.Context, timeout time.Duration, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	path := filepath.Join(c.bin, name)
	var cmd *exec.Cmd
	if c.owner != "" {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", c.owner, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = "/"
	lf, err := os.OpenFile(c.ctlLog, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer lf.Close()
	fmt.Fprintf(lf, "\n=== %s %s %s\n", time.Now().Format(time.RFC3339Nano), name, strings.Join(args, " "))
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, tail(c.ctlLog, 15))
	}
	return nil
}

func (c *cluster) initdb(ctx context.Context) error {
	return c.tool(ctx, 120*time.Second, "initdb", "-D", c.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
}

// options are the server settings: TCP on 127.0.0.1 only, our own socket dir
// (TCP-only when its path is too long), fsync off (a throwaway cluster; the
// faults are process restarts, not machine crashes).
func (c *cluster) options() string {
	sock := "-k " + c.sock
	if len(c.sock)+len("/.s.PGSQL.65535") > 107 {
		sock = "-k ''"
	}
	o := fmt.Sprintf("-p %d %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200 -c log_min_messages=warning",
		c.port, sock)
	if c.name != "" {
		// A node of the failover pair: its WAL receiver reports this name
		// (pg_stat_replication.application_name).
		o += " -c cluster_name=" + c.name
	}
	return o
}

func (c *cluster) start(ctx context.Context) error {
	return c.startOn(ctx, false)
}

// startOn starts the cluster; keepPort retries on the cluster's own port
// instead of moving to a free one (a node of a multi-host URL must stay where
// the URL says).
func (c *cluster) startOn(ctx context.Context, keepPort bool) error {
	var last error
	for try := range 3 {
		if try > 0 && keepPort {
			sleepCtx(ctx, time.Second)
		} else if c.port == 0 || try > 0 {
			port, err := freePort()
			if err != nil {
				return err
			}
			c.port = port
		}
		last = c.tool(ctx, 90*time.Second, "pg_ctl", "-D", c.data, "-l", c.logFile, "-w", "-t", "60", "-o", c.options(), "start")
		if last == nil {
			return nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("start PostgreSQL: %w\n%s", last, tail(c.logFile, 15))
}

// restart is pg_ctl restart with the given shutdown mode (fast or immediate).
func (c *cluster) restart(ctx context.Context, mode string) error {
	return c.tool(ctx, 120*time.Second, "pg_ctl", "-D", c.data, "-l", c.logFile, "-w", "-t", "90", "-m", mode, "-o", c.options(), "restart")
}

func (c *cluster) running(ctx context.Context) bool {
	if _, err := os.Stat(filepath.Join(c.data, "postmaster.pid")); err != nil {
		return false
	}
	return c.tool(ctx, 30*time.Second, "pg_ctl", "-D", c.data, "status") == nil
}

// stop stops the cluster: fast, then immediate, then SIGKILL of the postmaster.
func (c *cluster) stop() error {
	ctx := context.Background()
	if _, err := os.Stat(filepath.Join(c.data, "postmaster.pid")); err != nil {
		return nil
	}
	err := c.tool(ctx, 90*time.Second, "pg_ctl", "-D", c.data, "-m", "fast", "-w", "-t", "60", "stop")
	if err == nil {
		return nil
	}
	if err2 := c.tool(ctx, 60*time.Second, "pg_ctl", "-D", c.data, "-m", "immediate", "-w", "-t", "30", "stop"); err2 == nil {
		return nil
	}
	if pid := postmasterPID(c.data); pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return err
}

func postmasterPID(data string) int {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// logName is the name of the cluster's server log among the kept evidence.
func (c *cluster) logName() string {
	if c.name == "" {
		return "postgres.log"
	}
	return "postgres-" + c.name + ".log"
}

// url is a connection string to the cluster's postgres database.
func (c *cluster) url(app string) string {
	u := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=10", c.port)
	if app != "" {
		u += "&application_name=" + app
	}
	return u
}

// connect opens a harness session (application_name regina-faults).
func (c *cluster) connect(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last error
	for {
		conn, err := pgx.Connect(ctx, c.url(appName))
		if err == nil {
			return conn, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect to PostgreSQL on port %d: %w", c.port, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// clusterBase picks the directory that holds this run's cluster: under
// <repo>/.data/faults-pg, unless the cluster owner cannot reach it (a repo
// under /root), then under /var/tmp.
func clusterBase(repo, runID string) (root, base string, err error) {
	root = filepath.Join(repo, ".data", "faults-pg")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", "", err
	}
	if os.Geteuid() == 0 && !ownerCanReach(root) {
		root = "/var/tmp/regina-faults-pg"
		if err := os.MkdirAll(root, 0o755); err != nil {
			return "", "", err
		}
		if err := os.Chmod(root, 0o755); err != nil {
			return "", "", err
		}
	}
	return root, filepath.Join(root, runID), nil
}

func ownerCanReach(dir string) bool {
	return exec.Command("runuser", "-u", "postgres", "--", "test", "-x", dir).Run() == nil
}

// reapStale stops and removes clusters of earlier runs whose harness died
// (its pid, the first part of the directory name, is gone).
func reapStale(root, bin string, logf func(string, ...any)) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		pidStr, _, ok := strings.Cut(e.Name(), "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		dir := filepath.Join(root, e.Name())
		c, err := newCluster(bin, dir)
		if err == nil {
			if pm := postmasterPID(c.data); pm > 0 {
				logf("stopping the cluster of a dead earlier run in %s", dir)
				_ = c.stop()
			}
		}
		_ = os.RemoveAll(dir)
	}
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
