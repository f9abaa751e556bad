package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"
)

// fault is one kind of injected failure. run performs one bounded window of
// it (round counts earlier windows of the same kind) and leaves the system
// serving again.
type fault struct {
	name string
	run  func(r *runner, ctx context.Context, round int) error
}

var faultKinds = []fault{
	{"kill9", (*runner).faultKill9},
	{"two-brokers", (*runner).faultTwoBrokers},
	{"pg-restart", (*runner).faultPGRestart},
	{"conn-drop", (*runner).faultConnDrop},
	{"slow-db", (*runner).faultSlowDB},
	{"worker-restart", (*runner).faultWorkerRestart},
}

func faultByName(name string) *fault {
	for i := range faultKinds {
		if faultKinds[i].name == name {
			return &faultKinds[i]
		}
	}
	return nil
}

func faultNames() string {
	names := make([]string, len(faultKinds))
	for i, f := range faultKinds {
		names[i] = f.name
	}
	return strings.Join(names, ",")
}

// inject runs fault windows round-robin from the end of the warmup until the
// tail of the load phase, then heals everything.
func (r *runner) inject(ctx context.Context) error {
	if !sleepUntil(ctx, r.loadStart.Add(r.t.warmup)) {
		return ctx.Err()
	}
	var kinds []fault
	for _, f := range faultKinds {
		if f.name != "worker-restart" { // only with -scenario citus (its default)
			kinds = append(kinds, f)
		}
	}
	if len(r.o.kinds) > 0 {
		kinds = nil
		for _, k := range r.o.kinds {
			kinds = append(kinds, *faultByName(k))
		}
	}
	if r.rep != nil {
		kinds = []fault{{"failover", (*runner).faultFailover}}
	}
	rounds := map[string]int{}
	for i := 0; ; i++ {
		// Every kind runs at least once, however slow the machine: the
		// load goes on until then (see allKindsRan).
		if i == len(kinds) {
			close(r.allKindsRan)
		}
		if i >= len(kinds) && time.Until(r.loadEnd) < r.t.tail+r.t.minWindow {
			break
		}
		if err := r.ensureServing(ctx); err != nil {
			return err
		}
		f := kinds[i%len(kinds)]
		if err := f.run(r, ctx, rounds[f.name]); err != nil {
			return fmt.Errorf("fault %s: %w", f.name, err)
		}
		rounds[f.name]++
		if !sleepCtxOK(ctx, r.t.gap) {
			return ctx.Err()
		}
	}
	return r.heal(ctx)
}

// faultKill9 kills broker A with SIGKILL under load and restarts it.
func (r *runner) faultKill9(ctx context.Context, round int) error {
	return r.kill9(ctx, r.a, "")
}

func (r *runner) kill9(ctx context.Context, b *broker, why string) error {
	pid := b.pid()
	if err := b.kill(); err != nil {
		return err
	}
	r.count("kill9", 1)
	down := time.Now()
	sleepCtx(ctx, r.t.downtime+time.Duration(r.rng.Int64N(int64(r.t.downtime))))
	if err := b.start(ctx, false); err != nil {
		return err
	}
	r.logf("kill9: SIGKILL broker %s (pid %d)%s; back serving after %.2fs (pid %d)", b.name, pid, why,
		time.Since(down).Seconds(), b.pid())
	return nil
}

// faultTwoBrokers starts broker B on the same database and splits traffic
// between A and B; halfway, A is frozen with SIGSTOP for longer than the
// producers' timeout (they time out and fail over to B, then A resumes and
// finishes what it had in flight) or, every other round, killed with SIGKILL;
// finally B is stopped gracefully under traffic.
func (r *runner) faultTwoBrokers(ctx context.Context, round int) error {
	if err := r.b.start(ctx, false); err != nil {
		return err
	}
	r.eps.set(r.a.url(), r.b.url())
	r.count("two-brokers", 1)
	r.logf("two-brokers: broker B (pid %d) serving next to A; traffic split between them", r.b.pid())
	sleepCtx(ctx, r.t.window/2)
	if round%2 == 0 {
		if err := r.freeze(ctx, r.a); err != nil {
			return err
		}
	} else {
		if err := r.kill9(ctx, r.a, " while B serves"); err != nil {
			return err
		}
	}
	sleepCtx(ctx, r.t.window/2)
	t0 := time.Now()
	if err := r.b.stop(60 * time.Second); err != nil {
		r.violation(VBroker, "graceful stop of broker B under traffic: %v", err)
	}
	r.eps.set(r.a.url())
	r.count("graceful-stop", 1)
	r.logf("two-brokers: broker B stopped with SIGTERM under traffic in %.2fs", time.Since(t0).Seconds())
	return nil
}

// freeze stops a broker with SIGSTOP for longer than the producers' request
// timeout, then resumes it with SIGCONT.
func (r *runner) freeze(ctx context.Context, b *broker) error {
	pid := b.pid()
	if pid == 0 {
		return fmt.Errorf("broker %s is not running", b.name)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	r.count("freeze", 1)
	d := r.t.freeze
	sleepCtx(ctx, d)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		return err
	}
	r.recover(ctx, b, "SIGCONT")
	r.logf("freeze: SIGSTOP broker %s (pid %d) for %s while B serves, then SIGCONT", b.name, pid, d)
	return nil
}

// faultPGRestart restarts PostgreSQL (fast, then immediate on the next
// round) under load and waits for the brokers to recover.
func (r *runner) faultPGRestart(ctx context.Context, round int) error {
	mode := "fast"
	if round%2 == 1 {
		mode = "immediate"
	}
	t0 := time.Now()
	if err := r.pg.restart(ctx, mode); err != nil {
		return err
	}
	r.count("pg-restart", 1)
	r.count("pg-restart-"+mode, 1)
	up := time.Since(t0)
	r.recover(ctx, r.a, "PostgreSQL restart")
	r.logf("pg-restart: pg_ctl restart -m %s took %.2fs; broker A healthy again after %.2fs", mode, up.Seconds(), time.Since(t0).Seconds())
	return nil
}

// recover waits for a broker to be healthy after a database fault; a broker
// that does not recover on its own is a violation (and is restarted).
func (r *runner) recover(ctx context.Context, b *broker, after string) {
	if !b.running() {
		return // its unexpected exit is already reported
	}
	if err := b.waitHealthy(ctx, 60*time.Second); err != nil {
		if ctx.Err() != nil {
			return
		}
		r.violation(VBroker, "broker %s did not recover within 60s after %s: %v", b.name, after, err)
		_ = b.kill()
		if err := b.start(ctx, b.isSlow()); err != nil {
			r.violation(VBroker, "broker %s could not be restarted: %v", b.name, err)
		}
	}
}

// faultConnDrop terminates every broker connection, a few times in a row.
func (r *runner) faultConnDrop(ctx context.Context, round int) error {
	total := 0
	for range r.t.sweeps {
		conn, err := r.pg.connect(ctx)
		if err != nil {
			return err
		}
		var n int
		err = conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'regina'`).Scan(&n)
		conn.Close(context.Background())
		if err != nil {
			return fmt.Errorf("pg_terminate_backend: %w", err)
		}
		total += n
		r.count("conn-drop", 1)
		r.count("conn-drop-backends", n)
		sleepCtx(ctx, 300*time.Millisecond)
	}
	r.recover(ctx, r.a, "pg_terminate_backend")
	r.logf("conn-drop: %d sweeps of pg_terminate_backend killed %d broker connections", r.t.sweeps, total)
	return nil
}

// faultSlowDB restarts broker A gracefully with DB_STATEMENT_TIMEOUT=200,
// holds SELECT ... FOR UPDATE on some partition rows for longer than that
// from an outside session (so pushes time out), then restarts A normally.
func (r *runner) faultSlowDB(ctx context.Context, round int) error {
	if err := r.restartA(ctx, true); err != nil {
		return err
	}
	held := 0
	var names []string
	for range r.t.holds {
		names = r.pickPartitions(2)
		hold := r.t.hold + time.Duration(r.rng.Int64N(int64(r.t.hold)))
		if err := r.holdLocks(ctx, names, hold); err != nil {
			return err
		}
		held++
		r.count("slow-db", 1)
		sleepCtx(ctx, 200*time.Millisecond)
	}
	if err := r.restartA(ctx, false); err != nil {
		return err
	}
	r.logf("slow-db: broker A restarted with DB_STATEMENT_TIMEOUT=200; %d FOR UPDATE holds of %s-%s on partition rows (last %v); A restarted normally",
		held, r.t.hold, 2*r.t.hold, names)
	return nil
}

func (r *runner) holdLocks(ctx context.Context, names []string, hold time.Duration) error {
	conn, err := r.pg.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '10s'`); err != nil {
		return err
	}
	rows, err := tx.Query(ctx, `SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = $1 AND p.name = ANY($2) FOR UPDATE OF p`, QueueName, names)
	if err != nil {
		return fmt.Errorf("lock partition rows: %w", err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("lock partition rows: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("no partition rows named %v to lock", names)
	}
	sleepCtx(ctx, hold)
	return tx.Rollback(context.Background())
}

// restartA stops broker A with SIGTERM (it must drain and exit 0) and starts
// it again.
func (r *runner) restartA(ctx context.Context, slow bool) error {
	if r.a.running() {
		if err := r.a.stop(60 * time.Second); err != nil {
			r.violation(VBroker, "graceful restart of broker A: %v", err)
		}
		r.count("graceful-stop", 1)
	}
	return r.a.start(ctx, slow)
}

func (r *runner) pickPartitions(n int) []string {
	idx := r.rng.Perm(len(r.partitions))
	out := make([]string, 0, n)
	for _, i := range idx[:min(n, len(idx))] {
		out = append(out, r.partitions[i])
	}
	return out
}

// ensureServing restarts broker A if it died on its own (already reported).
func (r *runner) ensureServing(ctx context.Context) error {
	if !r.a.running() {
		r.logf("broker A is not running; restarting it")
		if err := r.a.start(ctx, false); err != nil {
			return err
		}
	}
	if r.rep != nil && r.o.brokers == 2 && !r.b.running() {
		r.logf("broker B is not running; restarting it")
		return r.b.start(ctx, false)
	}
	return nil
}

// heal leaves the system as at the start: PostgreSQL up, broker A running
// with the default settings and healthy, broker B stopped.
func (r *runner) heal(ctx context.Context) error {
	if r.b.running() {
		if err := r.b.stop(60 * time.Second); err != nil {
			r.violation(VBroker, "graceful stop of broker B: %v", err)
		}
	}
	r.eps.set(r.a.url())
	if !r.pg.running(ctx) {
		r.logf("PostgreSQL is not running; starting it")
		if err := r.pg.start(ctx); err != nil {
			return err
		}
	}
	switch {
	case !r.a.running():
		return r.a.start(ctx, false)
	case r.a.isSlow():
		return r.restartA(ctx, false)
	}
	return r.a.waitHealthy(ctx, 60*time.Second)
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	return sleepCtxOK(ctx, time.Until(t))
}

func sleepCtxOK(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	sleepCtx(ctx, d)
	return ctx.Err() == nil
}
