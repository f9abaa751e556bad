package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The failover scenarios run the brokers against a primary and a
// streaming-replication standby (two throwaway clusters on loopback, made
// with pg_basebackup) through one multi-host DATABASE_URL with
// target_session_attrs=read-write, as a production deployment behind an
// orchestrator (Patroni, pg_auto_failover) would. Each round:
//
//  1. every other round the primary's WAL sender is frozen (SIGSTOP) for
//     -standby-lag, so the standby falls behind: with a synchronous standby
//     commits then wait (and are cut off by the kill: outcome unknown); with
//     an asynchronous one the primary acknowledges commits the standby
//     does not have. The last partition gets no new batch from shortly
//     before the kill until the brokers are healthy again: a partition
//     that is quiet during a failover sees no failed push;
//  2. kill -9 of the primary's postmaster (its backends linger until they
//     notice);
//  3. no primary for a detection delay (the brokers must answer retryable
//     5xx), then the old primary's leftover processes are killed (fencing)
//     and the standby is promoted with pg_ctl promote;
//  4. both brokers must become healthy again without a restart;
//  5. the dead node is rebuilt as the new primary's standby on its old port
//     (pg_basebackup), and, for the synchronous scenario, made synchronous
//     again (synchronous_standby_names = '*').
//
// Until the rebuilt standby streams, the new primary commits alone, as
// pg_auto_failover's primary does while its secondary is away.

// replication is the primary/standby pair of a failover scenario.
type replication struct {
	nodes   [2]*cluster
	primary int
	sync    bool
	// kills are the failovers so far.
	kills []KillWindow
}

func (rp *replication) standby() *cluster { return rp.nodes[1-rp.primary] }

// url is the multi-host connection string the brokers get: both nodes, the
// read-write one is used.
func (rp *replication) url(app string) string {
	u := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5&target_session_attrs=read-write",
		rp.nodes[0].port, rp.nodes[1].port)
	if app != "" {
		u += "&application_name=" + app
	}
	return u
}

// setupReplication initdbs and starts n0, clones n1 from it with
// pg_basebackup and starts it as a streaming standby.
func (r *runner) setupReplication(ctx context.Context, bin, base string) error {
	rp := &replication{sync: r.o.scenario == scenarioFailover}
	// The nodes' owner must be able to reach their directories.
	if err := os.MkdirAll(base, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(base, 0o755); err != nil {
		return err
	}
	for i := range rp.nodes {
		c, err := newCluster(bin, filepath.Join(base, fmt.Sprintf("n%d", i)))
		if err != nil {
			return err
		}
		c.name = fmt.Sprintf("n%d", i)
		rp.nodes[i] = c
		r.clusters = append(r.clusters, c)
	}
	if err := rp.nodes[0].initdb(ctx); err != nil {
		return err
	}
	if err := rp.nodes[0].start(ctx); err != nil {
		return err
	}
	port, err := freePortExcept(rp.nodes[0].port)
	if err != nil {
		return err
	}
	rp.nodes[1].port = port
	r.rep = rp
	r.pg = rp.nodes[0]
	if err := r.addStandby(ctx, rp.nodes[1]); err != nil {
		return err
	}
	mode := "asynchronous"
	if rp.sync {
		mode = "synchronous"
	}
	r.logf("PostgreSQL %s: primary n0 on 127.0.0.1:%d, %s standby n1 on 127.0.0.1:%d (in %s)",
		filepath.Base(filepath.Dir(bin)), rp.nodes[0].port, mode, rp.nodes[1].port, base)
	return nil
}

// addStandby clones sb from the current primary, starts it on its port and
// waits until it streams (and, in the synchronous scenario, until the
// primary treats it as its synchronous standby).
func (r *runner) addStandby(ctx context.Context, sb *cluster) error {
	primary := r.pg
	if err := os.RemoveAll(sb.data); err != nil {
		return err
	}
	if err := sb.tool(ctx, 5*time.Minute, "pg_basebackup", "-D", sb.data, "-h", "127.0.0.1", "-p", strconv.Itoa(primary.port),
		"-U", "postgres", "-X", "stream", "-R", "--checkpoint=fast", "--no-sync"); err != nil {
		return fmt.Errorf("pg_basebackup from %s: %w", primary.name, err)
	}
	// The copy carries the primary's ALTER SYSTEM settings: a standby must
	// not wait for a synchronous standby of its own once promoted (the
	// orchestrator turns that on when a new standby has joined).
	auto := filepath.Join(sb.data, "postgresql.auto.conf")
	b, err := os.ReadFile(auto)
	if err != nil {
		return err
	}
	var keep []string
	for l := range strings.SplitSeq(string(b), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "synchronous_standby_names") {
			keep = append(keep, l)
		}
	}
	if err := os.WriteFile(auto, []byte(strings.Join(keep, "\n")), 0o600); err != nil {
		return err
	}
	if err := sb.startOn(ctx, true); err != nil {
		return err
	}
	return r.waitStandby(ctx, primary, sb.name)
}

// waitStandby waits until the primary streams to the standby named app and,
// in the synchronous scenario, has made it its synchronous standby.
func (r *runner) waitStandby(ctx context.Context, primary *cluster, app string) error {
	conn, err := primary.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if r.rep.sync {
		if _, err := conn.Exec(ctx, `ALTER SYSTEM SET synchronous_standby_names = '*'`); err != nil {
			return fmt.Errorf("set synchronous_standby_names on %s: %w", primary.name, err)
		}
		if _, err := conn.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	var state, syncState string
	for {
		err := conn.QueryRow(ctx, `SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1`, app).Scan(&state, &syncState)
		if err == nil && state == "streaming" && (!r.rep.sync || syncState == "sync") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("standby %s not streaming to %s after 2m (state %q, sync_state %q, err %w)", app, primary.name, state, syncState, err)
		}
		if !sleepCtxOK(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// faultFailover kills the primary, promotes the standby, waits for the
// brokers and rebuilds a standby (see the top of this file).
func (r *runner) faultFailover(ctx context.Context, round int) error {
	rp := r.rep
	old, sb := r.pg, rp.standby()
	frozen := 0
	if r.o.standbyLag > 0 && round%2 == 1 {
		// Freeze the primary's WAL sender (not the standby's receiver: what
		// was sent would wait in the socket and arrive after the kill).
		pid, err := walSenderPID(ctx, old, sb.name)
		if err != nil {
			return err
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return fmt.Errorf("SIGSTOP the WAL sender of %s: %w", old.name, err)
		}
		frozen = pid
		// The last partition is written while the standby is held back,
		// then left alone until the failover is over: no push to it fails,
		// so nothing tells the brokers that what they learned about it is
		// gone (a partition that happens to be quiet during a failover).
		quietFor := min(300*time.Millisecond, r.o.standbyLag/2)
		sleepCtx(ctx, r.o.standbyLag-quietFor)
		r.lp.quiet.Store(1 << (len(r.partitions) - 1))
		sleepCtx(ctx, quietFor)
	}
	defer r.lp.quiet.Store(0)
	pm := postmasterPID(old.data)
	if pm <= 0 {
		return fmt.Errorf("no postmaster.pid in %s", old.data)
	}
	kids := childPIDs(pm)
	if err := syscall.Kill(pm, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill -9 the postmaster of %s: %w", old.name, err)
	}
	killAt := time.Since(r.start)
	r.count("failover", 1)
	// No primary while an orchestrator would notice.
	sleepCtx(ctx, r.t.detect)
	// Fence: what is left of the old primary (the frozen WAL sender too)
	// dies before the standby takes over (a lingering backend could
	// otherwise still acknowledge a commit).
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	waitGone(kids, 10*time.Second)
	rp.kills = append(rp.kills, KillWindow{Kill: killAt, Fenced: time.Since(r.start)})
	t0 := time.Now()
	if err := sb.tool(ctx, 2*time.Minute, "pg_ctl", "-D", sb.data, "-w", "-t", "90", "promote"); err != nil {
		return fmt.Errorf("promote %s: %w", sb.name, err)
	}
	promoted := time.Since(t0)
	rp.primary = 1 - rp.primary
	r.pg = sb
	r.count("promotion", 1)
	r.recover(ctx, r.a, "failover")
	if r.b.running() {
		r.recover(ctx, r.b, "failover")
	}
	r.lp.quiet.Store(0)
	lag := ""
	if frozen > 0 {
		lag = fmt.Sprintf(" (its WAL sender frozen for %s before the kill)", r.o.standbyLag)
	}
	r.logf("failover: kill -9 primary %s (postmaster %d, %d backends left to die)%s; no primary for %.2fs; promoted %s in %.2fs; brokers healthy %.2fs after the kill",
		old.name, pm, len(kids), lag, r.t.detect.Seconds(), sb.name, promoted.Seconds(), (time.Since(r.start) - killAt).Seconds())

	t1 := time.Now()
	if err := r.addStandby(ctx, old); err != nil {
		return fmt.Errorf("rebuild %s as a standby of %s: %w", old.name, sb.name, err)
	}
	r.logf("failover: %s rebuilt with pg_basebackup as the standby of %s in %.2fs", old.name, sb.name, time.Since(t1).Seconds())
	return nil
}

// walSenderPID is the pid of the primary's WAL sender to the standby app.
func walSenderPID(ctx context.Context, primary *cluster, app string) (int, error) {
	conn, err := primary.connect(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var pid int
	if err := conn.QueryRow(ctx, `SELECT pid FROM pg_stat_replication WHERE application_name = $1`, app).Scan(&pid); err != nil {
		return 0, fmt.Errorf("WAL sender of %s to %s: %w", primary.name, app, err)
	}
	return pid, nil
}

// childPIDs lists the processes whose parent is pid.
func childPIDs(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 {
			if pp, _ := strconv.Atoi(f[1]); pp == pid {
				out = append(out, n)
			}
		}
	}
	return out
}

// waitGone waits until none of pids is alive (or the timeout passes).
func waitGone(pids []int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		alive := false
		for _, p := range pids {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p)); err == nil && !strings.Contains(string(b), ") Z ") {
				alive = true
				break
			}
		}
		if !alive {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
