package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// scenarioCitus runs the brokers on the coordinator of a local Citus cluster
// (a coordinator and two workers, from the shared start-local-citus.sh) and
// restarts a worker, fast and immediate in turn, under load
// (-faults worker-restart by default).
const scenarioCitus = "citus"

// findCitusTool is -citus-tool, else start-local-citus.sh in shared/tools/citus
// beside the repository (or beside its parent, for a worktree).
func findCitusTool(flagged, repo string) (string, error) {
	if flagged != "" {
		return filepath.Abs(flagged)
	}
	for _, up := range []string{"..", filepath.Join("..", "..")} {
		p := filepath.Join(repo, up, "shared", "tools", "citus", "start-local-citus.sh")
		if isExec(p) {
			return filepath.Clean(p), nil
		}
	}
	return "", errors.New("-scenario citus: no start-local-citus.sh found beside the repository; give -citus-tool")
}

// startCitus starts the local Citus cluster in r.tmp/citus and makes r.pg the
// coordinator and r.workers the workers (all stopped by cleanup). It returns
// the coordinator's URL.
func (r *runner) startCitus(ctx context.Context, bin string) (string, error) {
	tool, err := findCitusTool(r.o.citusTool, r.repo)
	if err != nil {
		return "", err
	}
	var ports []int
	for range 3 {
		p, err := freePortExcept(ports...)
		if err != nil {
			return "", err
		}
		ports = append(ports, p)
	}
	dir := filepath.Join(r.tmp, "citus")
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, tool, "--dir", dir, "--ports", fmt.Sprintf("%d,%d,%d", ports[0], ports[1], ports[2]))
	logf, err := os.Create(filepath.Join(r.tmp, "citus-start.log"))
	if err != nil {
		return "", err
	}
	defer logf.Close()
	cmd.Stderr = logf
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("start the Citus cluster (%s): %w\n%s", tool, err, tail(logf.Name(), 15))
	}
	url := strings.TrimPrefix(strings.TrimSpace(string(out)), "DATABASE_URL=")
	for i, port := range ports {
		c, err := newCluster(bin, filepath.Join(r.tmp, fmt.Sprintf("citus-ctl-n%d", i)))
		if err != nil {
			return "", err
		}
		c.data = filepath.Join(dir, fmt.Sprintf("n%d", i))
		c.logFile = filepath.Join(dir, fmt.Sprintf("n%d.log", i))
		c.sock = filepath.Join(dir, "sock")
		c.port = port
		c.name = fmt.Sprintf("citus-n%d", i)
		r.clusters = append(r.clusters, c)
		if i == 0 {
			r.pg = c
		} else {
			r.workers = append(r.workers, c)
		}
	}
	return url + "?sslmode=disable", nil
}

// faultWorkerRestart restarts one Citus worker under load: worker 1 fast,
// worker 1 immediate, worker 2 fast, worker 2 immediate, ... The brokers
// stay on the coordinator; pushes routed to the restarting worker fail (the
// producers retry) and no acknowledged push may be lost.
func (r *runner) faultWorkerRestart(ctx context.Context, round int) error {
	if len(r.workers) == 0 {
		return errors.New("worker-restart needs -scenario citus")
	}
	w := r.workers[(round/2)%len(r.workers)]
	mode := "fast"
	if round%2 == 1 {
		mode = "immediate"
	}
	t0 := time.Now()
	// No -o: pg_ctl restart starts it with the options it was started with.
	if err := w.tool(ctx, 120*time.Second, "pg_ctl", "-D", w.data, "-l", w.logFile, "-w", "-t", "90", "-m", mode, "restart"); err != nil {
		return err
	}
	r.count("worker-restart", 1)
	r.count("worker-restart-"+mode, 1)
	up := time.Since(t0)
	r.recover(ctx, r.a, "Citus worker restart")
	r.logf("worker-restart: %s pg_ctl restart -m %s took %.2fs; broker A healthy again after %.2fs",
		w.name, mode, up.Seconds(), time.Since(t0).Seconds())
	return nil
}
