// Command faults is Regina's fault-injection harness (issue #7).
//
// It starts its own throwaway PostgreSQL cluster (under .data/faults-pg, or
// /var/tmp when the cluster owner cannot reach the repository), builds
// ./cmd/regina and runs real broker processes against it, drives retrying
// producers over HTTP (every timeout, network error, 5xx and per-item
// "failed" is retried with the same transaction ids; twins send a new batch
// twice at once; storms resend answered batches) while it injects faults
// round-robin:
//
//	kill9        SIGKILL broker A under load, restart it
//	two-brokers  broker B on the same database, traffic split; halfway A is
//	             frozen with SIGSTOP past the client timeout, or (every other
//	             round) killed; B is then stopped with SIGTERM under traffic
//	pg-restart   pg_ctl restart -m fast (immediate on the next round)
//	conn-drop    pg_terminate_backend of every broker connection, repeatedly
//	slow-db      A restarted with DB_STATEMENT_TIMEOUT=200 while an outside
//	             session holds SELECT ... FOR UPDATE on partition rows
//
// With -scenario failover the brokers (A and B, traffic split) run instead
// against a primary and a synchronous streaming standby through one
// multi-host DATABASE_URL with target_session_attrs=read-write; round after
// round the primary's postmaster is killed with SIGKILL (every other round
// after its WAL sender was frozen for -standby-lag), the standby promoted
// with pg_ctl promote, and the dead node rebuilt as the new standby (see
// failover.go). Every item must then also get a definite answer (an
// outcome-unknown answer resolved by a retry). -scenario failover-async does
// the same with an asynchronous standby: answers the old primary gave for
// commits the standby never received are counted and reported apart
// (acknowledged then lost, stored again by a resend), not as violations;
// everything the new primary stores must still be exact.
//
// With -scenario streams a stream query runs beside the push load (faults
// kill9 and two-brokers unless -faults says otherwise; see streams.go): a
// pusher fills a source queue, three runners pop it as the query's group
// and commit cycles (state, one sink message per source message, the ack)
// through whichever broker is up, retrying a cycle whose answer was lost;
// the checker then also proves that each source message affected the state
// and the sink exactly once and that the group consumed everything.
//
// Then it stops the brokers with SIGTERM and proves, from the recorded
// history and the database, per partition: every item answered queued is
// stored exactly once under the answered message_id; no transaction id is
// stored twice; every duplicate names the stored original; segments tile
// [0, next_offset) and log_txns matches them hash for hash; payloads are
// stored as sent; ids a producer gave up on are stored at most once.
//
//	make faults                  # 60 s
//	make faults DURATION=30s
//	make faults ARGS='-scenario failover'
//	make faults ARGS='-scenario streams'
//	make faults ARGS='-scenario failover-async -standby-lag 2s'
//	go run ./loadtest/faults -short
//	go run ./loadtest/faults -faults kill9,slow-db -twins 0.5 -storms 0.3
//	go run ./loadtest/faults -broker-bin ./old-regina -broker-env QUEEN_DEDUP_CACHE=false
//
// On violations (or errors, or -keep) the temporary directory is kept: broker
// logs, postgres.log, history.jsonl (every request and response),
// state.txt (every stored frame, decoded) and violations.txt. The last line
// of output is always
//
//	faults: verdict=clean|violations|error requests=N retries=N faults=N violations=N
//
// and the exit status is 0 only for a clean verdict (1 violations, 2 error).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

type options struct {
	duration  time.Duration
	short     bool
	producers int
	seed      uint64
	history   string
	keep      bool
	repo      string
	kinds     []string // fault kinds to inject (nil = all)
	twinProb  float64
	stormProb float64
	brokerEnv []string // extra KEY=VALUE settings for every broker
	parts     int
	brokerBin string // use this broker binary instead of building ./cmd/regina
	scenario  string // scenarioMixed, scenarioFailover or scenarioFailoverAsync
	// standbyLag freezes the primary's WAL sender this long before every
	// other failover (0 = never).
	standbyLag time.Duration
	brokers    int    // failover scenarios: 1 or 2 brokers
	png        string // soak: where to write the plot
	citusTool  string // citus: start-local-citus.sh
}

// Scenarios.
const (
	// scenarioMixed: one PostgreSQL, the fault kinds of -faults round-robin.
	scenarioMixed = "mixed"
	// scenarioFailover: a primary and a synchronous standby; the primary is
	// killed and the standby promoted, round after round.
	scenarioFailover = "failover"
	// scenarioFailoverAsync: the same with an asynchronous standby, which
	// can lose acknowledged commits; the checker reports them apart.
	scenarioFailoverAsync = "failover-async"
	// scenarioStreams: the mixed scenario (kill9 and two-brokers by
	// default) with a stream query running beside the push load
	// (streams.go); the checker also proves its exactly-once effects.
	scenarioStreams = "streams"
	// scenarioSoak: a long run with consumers, retention and broker
	// restarts, sampled and plotted, then judged flat (soak.go).
	scenarioSoak = "soak"
)

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("faults", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.duration, "duration", 60*time.Second, "load duration (faults are injected round-robin inside it)")
	fs.BoolVar(&o.short, "short", false, "short mode: ~14 s of load, fewer producers and faults (-duration is ignored unless given)")
	fs.IntVar(&o.producers, "producers", 0, "concurrent producers (0 = 16, or 6 with -short)")
	fs.Uint64Var(&o.seed, "seed", 0, "random seed (0 = from the clock)")
	fs.StringVar(&o.history, "history", "", "also write every request and response to this JSONL file")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (broker logs, history, PostgreSQL log) even when clean")
	fs.StringVar(&o.repo, "repo", "", "root of the regina module (default: found from the working directory)")
	kinds := fs.String("faults", "", "comma-separated fault kinds to inject, round-robin (default all: "+faultNames()+")")
	fs.Float64Var(&o.twinProb, "twins", 0.15, "share of new batches sent twice at once (to two brokers when two are up)")
	env := fs.String("broker-env", "", "extra broker settings, comma-separated KEY=VALUE (e.g. QUEEN_DEDUP_CACHE=false,LOG_LEVEL=debug)")
	fs.StringVar(&o.brokerBin, "broker-bin", "", "run this broker binary instead of building ./cmd/regina of -repo")
	fs.IntVar(&o.parts, "partitions", 6, "partitions of the queue (p0, p1, ...)")
	fs.Float64Var(&o.stormProb, "storms", 0.15, "share of producer turns that resend an already answered batch 1-3 times at once")
	fs.StringVar(&o.scenario, "scenario", scenarioMixed, "mixed (one PostgreSQL, -faults round-robin), streams (mixed, kill9 and two-brokers by default, with a stream query running and checked), failover (primary + synchronous standby: kill -9 the primary, promote the standby, repeat), failover-async (the same with an asynchronous standby) soak (consumers, retention and broker restarts for -duration, sampled, plotted to -png and judged flat) or citus (the brokers on a local Citus cluster's coordinator, a worker restarted fast and immediate: -faults worker-restart)")
	fs.IntVar(&o.brokers, "brokers", 2, "failover scenarios: brokers serving the whole run, traffic split (1 or 2)")
	fs.DurationVar(&o.standbyLag, "standby-lag", time.Second, "failover scenarios: freeze the primary's WAL sender this long before every other kill (0 = never)")
	fs.StringVar(&o.citusTool, "citus-tool", "", "citus: the local cluster script (default: shared/tools/citus/start-local-citus.sh beside the repository)")
	fs.StringVar(&o.png, "png", "soak.png", "soak: write the plot of RSS, goroutines, connections, database size, latency and throughput here")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	durationSet := false
	fs.Visit(func(f *flag.Flag) { durationSet = durationSet || f.Name == "duration" })
	if o.short && !durationSet {
		o.duration = 14 * time.Second
		if o.scenario == scenarioSoak {
			o.duration = 30 * time.Second
		}
	}
	if *kinds != "" {
		for k := range strings.SplitSeq(*kinds, ",") {
			k = strings.TrimSpace(k)
			if faultByName(k) == nil {
				return o, fmt.Errorf("-faults: unknown kind %q (known: %s)", k, faultNames())
			}
			o.kinds = append(o.kinds, k)
		}
	}
	if *env != "" {
		for kv := range strings.SplitSeq(*env, ",") {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
				return o, fmt.Errorf("-broker-env: %q is not KEY=VALUE", kv)
			}
			o.brokerEnv = append(o.brokerEnv, strings.TrimSpace(kv))
		}
	}
	if o.twinProb < 0 || o.twinProb > 1 || o.stormProb < 0 || o.stormProb > 1 {
		return o, errors.New("-twins and -storms are shares between 0 and 1")
	}
	if o.parts < 2 || o.parts > 64 {
		return o, fmt.Errorf("-partitions %d: use 2 to 64 (slow-db locks two)", o.parts)
	}
	switch o.scenario {
	case scenarioMixed:
	case scenarioStreams:
		if len(o.kinds) == 0 {
			o.kinds = []string{"kill9", "two-brokers"}
		}
	case scenarioCitus:
		if len(o.kinds) == 0 {
			o.kinds = []string{"worker-restart"}
		}
	case scenarioFailover, scenarioFailoverAsync, scenarioSoak:
		if len(o.kinds) > 0 {
			return o, fmt.Errorf("-faults does not apply to -scenario %s (its fault is the failover)", o.scenario)
		}
	default:
		return o, fmt.Errorf("-scenario %q: use %s, %s, %s, %s, %s or %s", o.scenario, scenarioMixed, scenarioStreams,
			scenarioFailover, scenarioFailoverAsync, scenarioSoak, scenarioCitus)
	}
	if o.brokers < 1 || o.brokers > 2 {
		return o, fmt.Errorf("-brokers %d: use 1 or 2", o.brokers)
	}
	if o.standbyLag < 0 {
		return o, fmt.Errorf("-standby-lag %s is negative", o.standbyLag)
	}
	if o.duration < 5*time.Second {
		return o, fmt.Errorf("-duration %s is too short (minimum 5s)", o.duration)
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, o, os.Stdout)
	stop()
	os.Exit(code)
}

// timing is the shape of a run.
type timing struct {
	warmup, tail, gap     time.Duration
	window, minWindow     time.Duration
	downtime, hold, drain time.Duration
	freeze, timeout       time.Duration
	detect                time.Duration // failover: no primary this long before the promotion
	sweeps, holds         int
}

func timingFor(o options) timing {
	if o.short {
		// No warmup: the short run needs every second of its load for
		// faults (in the failover scenario the first kill lands once the
		// load has started).
		return timing{warmup: 0, tail: time.Second, gap: 500 * time.Millisecond,
			window: 1500 * time.Millisecond, minWindow: time.Second,
			downtime: 200 * time.Millisecond, hold: 300 * time.Millisecond, drain: 20 * time.Second,
			freeze: 2500 * time.Millisecond, timeout: 2 * time.Second, detect: 700 * time.Millisecond, sweeps: 2, holds: 2}
	}
	return timing{warmup: 2 * time.Second, tail: 2 * time.Second, gap: 1500 * time.Millisecond,
		window: 3 * time.Second, minWindow: 1500 * time.Millisecond,
		downtime: 300 * time.Millisecond, hold: 350 * time.Millisecond, drain: 30 * time.Second,
		freeze: 2500 * time.Millisecond, timeout: 2 * time.Second, detect: time.Second, sweeps: 3, holds: 3}
}

type runner struct {
	o         options
	t         timing
	out       *output
	start     time.Time
	loadStart time.Time
	loadEnd   time.Time
	// allKindsRan is closed once every selected fault kind has run.
	allKindsRan chan struct{}
	runID       string
	repo        string
	tmp         string
	pgRoot      string
	pg          *cluster   // the (current primary) PostgreSQL; the coordinator with -scenario citus
	workers     []*cluster // -scenario citus: the workers
	rep         *replication
	soak        *soakRun // the soak scenario's parts (nil otherwise)
	lp          *loadPlan
	clusters    []*cluster // every cluster of the run, for cleanup
	pgBase      string     // directory holding this run's clusters
	a, b        *broker
	eps         *endpoints
	hist        *History
	errs        *errorCounts
	partitions  []string
	rng         *mrand.Rand

	mu     sync.Mutex
	extra  []Violation
	counts map[string]int
}

// output prefixes every line with "faults: " and is safe for concurrent use.
type output struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func (o *output) line(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Fprintf(o.w, "faults: "+format+"\n", args...)
}

func (r *runner) logf(format string, args ...any) {
	r.out.line("+%5.1fs %s", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

func (r *runner) count(name string, n int) {
	r.mu.Lock()
	r.counts[name] += n
	r.mu.Unlock()
}

func (r *runner) violation(kind, format string, args ...any) {
	v := Violation{Kind: kind, Detail: fmt.Sprintf(format, args...)}
	r.mu.Lock()
	r.extra = append(r.extra, v)
	r.mu.Unlock()
	r.logf("VIOLATION %s", v)
}

// faultTotal is the number of injected faults: SIGKILLs, SIGSTOP freezes,
// second-broker windows, PostgreSQL restarts, connection-drop sweeps and lock holds.
func (r *runner) faultTotal() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts["kill9"] + r.counts["freeze"] + r.counts["two-brokers"] + r.counts["pg-restart"] + r.counts["conn-drop"] + r.counts["slow-db"] +
		r.counts["failover"] + r.counts["sigterm-restart"] + r.counts["worker-restart"]
}

// run executes the harness and prints the verdict as its last line; it
// returns the exit status (0 clean, 1 violations, 2 error).
func run(ctx context.Context, o options, w io.Writer) int {
	var idb [3]byte
	_, _ = rand.Read(idb[:])
	seed := o.seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	r := &runner{o: o, t: timingFor(o), out: &output{w: w}, start: time.Now(), runID: hex.EncodeToString(idb[:]),
		eps: &endpoints{}, hist: &History{}, errs: &errorCounts{}, counts: map[string]int{},
		rng: mrand.New(mrand.NewPCG(seed, 0x5eed))}
	r.out.start = r.start
	if o.scenario == scenarioSoak {
		r.soak = &soakRun{r: r, shape: soakShapeFor(o), seen: map[key][]consumed{}}
	}
	if o.parts < 2 {
		o.parts = 6
	}
	for i := range o.parts {
		r.partitions = append(r.partitions, fmt.Sprintf("p%d", i))
	}
	// Everything is bounded: the load, the drain and generous room for
	// building, starting and stopping on a slow machine.
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, o.duration+r.t.drain+15*time.Minute)
	defer cancel()

	rep, err := r.execute(ctx, seed)
	keep := o.keep
	violations := 0
	if rep != nil {
		violations = len(rep.Violations)
	}
	interrupted := parent.Err() != nil
	if interrupted && err != nil {
		err = fmt.Errorf("interrupted: %w", err)
	}
	if (err != nil && !interrupted) || violations > 0 {
		keep = true
	}
	if err != nil && keep && r.tmp != "" {
		if atts := r.hist.Attempts(); len(atts) > 0 {
			_ = writeHistory(filepath.Join(r.tmp, "history.jsonl"), atts)
		}
	}
	r.cleanup(keep)

	requests, retries := 0, 0
	if rep != nil {
		requests, retries = rep.Stats.Requests, rep.Stats.Retries
	} else {
		for _, a := range r.hist.Attempts() {
			requests++
			if a.Kind == KindRetry {
				retries++
			}
		}
	}
	verdict, code := "clean", 0
	switch {
	case err != nil:
		r.out.line("ERROR: %v", err)
		verdict, code = "error", 2
	case violations > 0:
		verdict, code = "violations", 1
	}
	if keep && r.tmp != "" {
		var files []string
		if entries, err := os.ReadDir(r.tmp); err == nil {
			for _, e := range entries {
				if e.Name() != "regina" && e.Name() != ".keep" {
					files = append(files, e.Name())
				}
			}
		}
		r.out.line("evidence kept in %s (%s)", r.tmp, strings.Join(files, ", "))
	}
	r.out.line("verdict=%s requests=%d retries=%d faults=%d violations=%d", verdict, requests, retries, r.faultTotal(), violations)
	return code
}

// execute sets everything up, runs the load with faults and checks. The
// report is nil when the run could not be checked.
func (r *runner) execute(ctx context.Context, seed uint64) (*Report, error) {
	repo, err := findRepo(r.o.repo)
	if err != nil {
		return nil, err
	}
	r.repo = repo
	bin, err := FindPGBin()
	if err != nil {
		return nil, err
	}
	reapStaleTemp(r.logf)
	if r.tmp, err = os.MkdirTemp("", fmt.Sprintf("regina-faults-%d-", os.Getpid())); err != nil {
		return nil, err
	}
	if err := os.Chmod(r.tmp, 0o755); err != nil {
		return nil, err
	}
	root, base, err := clusterBase(repo, fmt.Sprintf("%d-%s", os.Getpid(), r.runID))
	if err != nil {
		return nil, err
	}
	r.pgRoot = root
	r.pgBase = base
	reapStale(root, bin, r.logf)

	r.logf("run %s (seed %d): scenario %s, %s of load, %d producers, partitions %s, queue %q; logs in %s",
		r.runID, seed, r.o.scenario, r.o.duration, r.producerCount(), strings.Join(r.partitions, ","), QueueName, r.tmp)

	type built struct {
		path string
		err  error
	}
	buildc := make(chan built, 1)
	go func() {
		if r.o.brokerBin != "" {
			p, err := filepath.Abs(r.o.brokerBin)
			if err == nil && !isExec(p) {
				err = fmt.Errorf("-broker-bin %s is not an executable file", p)
			}
			buildc <- built{p, err}
			return
		}
		p, err := buildBroker(ctx, repo, r.tmp)
		buildc <- built{p, err}
	}()

	dbURL := ""
	switch r.o.scenario {
	case scenarioCitus:
		if dbURL, err = r.startCitus(ctx, bin); err != nil {
			<-buildc
			return nil, err
		}
		r.logf("Citus cluster: coordinator %s, %d workers", dbURL, len(r.workers))
	case scenarioMixed, scenarioStreams, scenarioSoak:
		if r.pg, err = newCluster(bin, base); err != nil {
			<-buildc
			return nil, err
		}
		r.clusters = append(r.clusters, r.pg)
		if err := r.pg.initdb(ctx); err != nil {
			<-buildc
			return nil, err
		}
		if err := r.pg.start(ctx); err != nil {
			<-buildc
			return nil, err
		}
		r.logf("PostgreSQL %s cluster in %s on 127.0.0.1:%d", filepath.Base(filepath.Dir(bin)), base, r.pg.port)
		dbURL = r.pg.url("")
	default:
		if err := r.setupReplication(ctx, bin, base); err != nil {
			<-buildc
			return nil, err
		}
		dbURL = r.rep.url("")
	}
	bd := <-buildc
	if bd.err != nil {
		return nil, bd.err
	}

	ports := make([]int, 2)
	for i := range ports {
		if ports[i], err = freePortExcept(ports[:i]...); err != nil {
			return nil, err
		}
	}
	onExit := func(b *broker, err error) {
		r.violation(VBroker, "broker %s exited on its own: %v; log tail:\n%s", b.name, err, tail(b.logPath, 8))
	}
	env := r.o.brokerEnv
	if r.soak != nil {
		env = append(r.soak.shape.brokerEnv(), env...)
	}
	r.a = &broker{name: "A", env: env, bin: bd.path, port: ports[0], logPath: filepath.Join(r.tmp, "broker-A.log"), dbURL: dbURL, onExit: onExit}
	r.b = &broker{name: "B", env: env, bin: bd.path, port: ports[1], logPath: filepath.Join(r.tmp, "broker-B.log"), dbURL: dbURL, onExit: onExit}
	if err := r.a.start(ctx, false); err != nil {
		return nil, err
	}
	r.eps.set(r.a.url())
	r.logf("broker A (pid %d) serving on %s", r.a.pid(), r.a.url())
	if r.rep != nil && r.o.brokers == 2 || r.soak != nil {
		// Two brokers on the pair the whole run, traffic split: each one's
		// cache must stay right about what the other wrote across failovers.
		if err := r.b.start(ctx, false); err != nil {
			return nil, err
		}
		r.eps.set(r.a.url(), r.b.url())
		r.logf("broker B (pid %d) serving on %s; DATABASE_URL %s", r.b.pid(), r.b.url(), dbURL)
	}

	lp := &loadPlan{runID: r.runID, start: r.start, partitions: r.partitions, maxItems: 20,
		stormProb: r.o.stormProb, twinProb: r.o.twinProb, repeatProb: 0.03, timeout: r.t.timeout,
		stopNew: make(chan struct{}), hist: r.hist, eps: r.eps, errs: r.errs,
		client: &http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second, DisableCompression: true,
			DialContext: (&net.Dialer{Timeout: 3 * time.Second}).DialContext,
		}}}
	r.lp = lp
	if r.o.short {
		lp.pause = 2 * time.Millisecond
	}
	defer lp.client.CloseIdleConnections()
	if r.soak != nil {
		lp.pause = r.soak.shape.pause
		lp.observe = r.soak.lat.add
		if err := r.soak.configure(ctx); err != nil {
			return nil, err
		}
	}

	// Seed: one item per partition, so every partition row exists before
	// the first fault (slow-db locks them).
	prodCtx, stopProducers := context.WithCancel(ctx)
	defer stopProducers()
	seedCtx, seedCancel := context.WithTimeout(prodCtx, 60*time.Second)
	seedP := &producer{id: 0, lp: lp, rng: mrand.New(mrand.NewPCG(seed, 0))}
	items := make([]Item, len(r.partitions))
	for i, p := range r.partitions {
		items[i] = Item{Partition: p, TxID: fmt.Sprintf("%s-seed-%s", r.runID, p)}
	}
	seedP.deliver(seedCtx, r.hist.NewBatch(0, items))
	seedCancel()
	if seedP.settled != 1 {
		return nil, errors.New("the seed push got no definite answer within 60s")
	}

	var sl *streamsLoad
	if r.o.scenario == scenarioStreams {
		if sl, err = r.startStreams(prodCtx); err != nil {
			return nil, err
		}
	}

	r.loadStart = time.Now()
	r.loadEnd = r.loadStart.Add(r.o.duration)
	r.logf("load starts (%s)", r.o.duration)

	var pwg sync.WaitGroup
	prods := make([]*producer, r.producerCount())
	for i := range prods {
		prods[i] = &producer{id: i + 1, lp: lp, rng: mrand.New(mrand.NewPCG(seed, uint64(i+1)))}
		pwg.Add(1)
		go func(p *producer) {
			defer pwg.Done()
			p.run(prodCtx)
		}(prods[i])
	}
	injErr := make(chan error, 1)
	r.allKindsRan = make(chan struct{})
	soakCtx, stopSoak := context.WithCancel(ctx)
	defer stopSoak()
	stopConsumers := make(chan struct{})
	var swg sync.WaitGroup
	if s := r.soak; s != nil {
		close(r.allKindsRan)
		go func() { injErr <- s.restarts(ctx, r.loadEnd) }()
		for c := range s.shape.mainConsumers {
			swg.Go(func() { s.consumer(soakCtx, stopConsumers, "soak-main", c, "", 100) })
		}
		swg.Go(func() { s.rotate(soakCtx) })
		samplerCtx, stopSampler := context.WithDeadline(soakCtx, r.loadEnd)
		defer stopSampler()
		swg.Go(func() { s.sampler(samplerCtx) })
	} else {
		go func() { injErr <- r.inject(ctx) }()
	}

	sleepUntil(ctx, r.loadEnd)
	// The load lasts until every fault kind ran once (a slow machine may
	// need longer than -duration for that).
	injDone := false
	select {
	case <-r.allKindsRan:
	case err = <-injErr:
		injDone = true
	case <-ctx.Done():
	}
	close(lp.stopNew)
	if !injDone {
		err = <-injErr
	}
	lp.giveUpAt.Store(time.Now().Add(r.t.drain).UnixNano())
	if err != nil {
		stopProducers()
		pwg.Wait()
		return nil, err
	}
	r.logf("load stopped; faults healed; producers finish their retries (at most %s)", r.t.drain)
	done := make(chan struct{})
	go func() { pwg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(r.t.drain + 30*time.Second):
		stopProducers()
		<-done
	case <-ctx.Done():
		stopProducers()
		<-done
		return nil, ctx.Err()
	}
	settled, gaveUp := 0, 0
	for _, p := range prods {
		settled += p.settled
		gaveUp += p.gaveUp
	}
	r.logf("producers done: %d batches settled, %d given up", settled, gaveUp)
	if sl != nil {
		sl.finish(ctx, r.pg.connect, r.t.drain)
	}
	if r.soak != nil {
		close(stopConsumers)
		stopSoak()
		swg.Wait()
		r.logf("consumers stopped: %d messages received, %d acknowledged", r.soak.popped.Load(), r.soak.acked.Load())
	}

	for _, b := range []*broker{r.b, r.a} {
		if b.running() {
			// Which duplicate paths this incarnation took: the checker
			// below holds every one of their verdicts to the stored
			// originals, whichever answered.
			if ro, err := readOnlyCounts(b); err == nil {
				r.logf("broker %s (since its last start): read-only duplicate batches proven from the cache's originals %d, "+
					"by window probes %d; expected duplicates that took the locked path %d", b.name, ro[0], ro[1], ro[2])
			}
			if err := b.stop(60 * time.Second); err != nil {
				r.violation(VBroker, "final graceful stop: %v", err)
			}
		}
	}
	r.logf("brokers stopped with SIGTERM; reading the database")
	if r.soak != nil {
		r.soak.tableSizes(ctx)
	}

	cctx, ccancel := context.WithTimeout(ctx, 5*time.Minute)
	defer ccancel()
	conn, err := r.pg.connect(cctx)
	if err != nil {
		return nil, err
	}
	st, err := LoadState(cctx, conn, "queen", QueueName)
	if err == nil && sl != nil {
		err = r.checkStreams(cctx, conn)
	}
	conn.Close(context.Background())
	if err != nil {
		return nil, err
	}
	attempts := r.hist.Attempts()
	var copts CheckOptions
	if s := r.soak; s != nil {
		copts.Window = s.shape.window
		copts.Consumed = s.seen
	}
	if r.rep != nil {
		copts.RequireResolved = true
		if !r.rep.sync {
			copts.AsyncKills = r.rep.kills
			copts.AsyncLag = r.o.standbyLag + 2*time.Second
		}
	}
	rep := CheckWith(attempts, st, copts)
	if s := r.soak; s != nil {
		grew := s.verdict()
		title := fmt.Sprintf("regina soak: %s, 2 brokers (a restart every %s), %d producers, %d+2 consumers, window %d s, retention %d s / consumed %d s",
			r.o.duration, s.shape.restartEvery, r.producerCount(), s.shape.mainConsumers, s.shape.window, s.shape.retention, s.shape.completed)
		if err := s.plot(r.o.png, title); err != nil {
			r.logf("soak: could not write %s: %v", r.o.png, err)
		} else {
			r.out.line("soak: plot written to %s", r.o.png)
		}
		if len(grew) > 0 && !r.o.short {
			r.violation(VGrowth, "not flat after warm-up: %s", strings.Join(grew, ", "))
		}
	}
	r.mu.Lock()
	rep.Violations = append(r.extra, rep.Violations...)
	r.mu.Unlock()

	if r.o.history != "" {
		if err := writeHistory(r.o.history, attempts); err != nil {
			r.logf("could not write %s: %v", r.o.history, err)
		}
	}
	if len(rep.Violations) > 0 {
		_ = writeHistory(filepath.Join(r.tmp, "history.jsonl"), attempts)
		_ = writeState(filepath.Join(r.tmp, "state.txt"), st)
		_ = writeViolations(filepath.Join(r.tmp, "violations.txt"), rep)
	} else if r.o.keep {
		_ = writeHistory(filepath.Join(r.tmp, "history.jsonl"), attempts)
	}
	r.summary(rep)
	return rep, nil
}

func (r *runner) producerCount() int {
	switch {
	case r.o.producers > 0:
		return r.o.producers
	case r.o.short:
		return 6
	}
	return 16
}

// summary prints the counts and every violation (with its history excerpt).
func (r *runner) summary(rep *Report) {
	s := rep.Stats
	r.mu.Lock()
	c := map[string]int{}
	maps.Copy(c, r.counts)
	r.mu.Unlock()
	if r.rep != nil {
		mode := "asynchronous"
		if r.rep.sync {
			mode = "synchronous"
		}
		r.out.line("faults injected: failover=%d (kill -9 of the primary's postmaster) promotions=%d, %s standby; graceful-stops=%d",
			c["failover"], c["promotion"], mode, c["graceful-stop"])
		if !r.rep.sync {
			r.out.line("asynchronous standby: acknowledged then lost=%d (answered before the kill %d, up to %.3fs before it; after the kill, by a backend of the dead postmaster, %d, up to %.3fs after it); "+
				"of those stored again by a later resend under a new message_id=%d; duplicate answers naming a lost original=%d",
				s.AsyncLost, s.AsyncLostBefore, s.AsyncMaxAge.Seconds(), s.AsyncLostAfter, s.AsyncMaxLate.Seconds(), s.AsyncRestored, s.AsyncStaleDups)
		}
	} else if r.soak != nil {
		r.out.line("faults injected: broker restarts=%d (SIGTERM %d, SIGKILL %d); consumer groups created and deleted=%d",
			c["restart"], c["sigterm-restart"], c["kill9"], c["groups"])
	} else if r.workers != nil {
		r.out.line("faults injected: Citus worker restarts=%d (fast=%d immediate=%d) kill9=%d two-brokers=%d",
			c["worker-restart"], c["worker-restart-fast"], c["worker-restart-immediate"], c["kill9"], c["two-brokers"])
	} else {
		r.out.line("faults injected: kill9=%d freeze=%d two-brokers=%d pg-restart=%d (fast=%d immediate=%d) conn-drop=%d sweeps (%d backends) slow-db=%d lock holds; graceful-stops=%d",
			c["kill9"], c["freeze"], c["two-brokers"], c["pg-restart"], c["pg-restart-fast"], c["pg-restart-immediate"],
			c["conn-drop"], c["conn-drop-backends"], c["slow-db"], c["graceful-stop"])
	}
	r.out.line("indefinite answers (retried): %s", r.errs)
	for _, ex := range r.errs.examples() {
		r.out.line("    e.g. %s", ex)
	}
	r.out.line("history: requests=%d (first/retry/twin/storm = %d/%d/%d/%d) batches=%d tx-ids=%d answers queued=%d duplicate=%d failed-items=%d no-answer=%d gave-up=%d (stored %d)",
		s.Requests, s.Requests-s.Retries-s.Twins-s.Storms, s.Retries, s.Twins, s.Storms, s.Batches, s.Items,
		s.QueuedAnswers, s.DupAnswers, s.FailedAns, s.NoAnswer, s.GaveUp, s.GaveUpStored)
	r.out.line("database: partitions=%d segments=%d frames=%d", s.Partitions, s.Segments, s.StoredFrames)
	r.out.line("broker logs: A {%s} B {%s}", logLevels(r.a.logPath), logLevels(r.b.logPath))
	if len(rep.Violations) == 0 {
		return
	}
	// Every violation gets a line (up to 200 of a kind; all of them go to
	// violations.txt); the first 10 of a kind also get their history
	// excerpt and stored rows.
	byKind := map[string]int{}
	hidden := 0
	for _, v := range rep.Violations {
		byKind[v.Kind]++
		n := byKind[v.Kind]
		if n > 200 {
			hidden++
			continue
		}
		r.out.line("VIOLATION %s", v)
		if n <= 10 && v.TxID != "" {
			for _, l := range rep.Excerpts[excerptKey(v.Partition, v.TxID)] {
				r.out.line("    %s", l)
			}
		}
	}
	if hidden > 0 {
		r.out.line("... and %d more violations (every one is in violations.txt)", hidden)
	}
	r.out.line("violations by kind: %s", sortedCounts(byKind))
}

// writeViolations writes every violation, with the excerpts the checker kept.
func writeViolations(path string, rep *Report) error {
	var b strings.Builder
	for _, v := range rep.Violations {
		b.WriteString(v.String())
		b.WriteByte('\n')
		if v.TxID != "" {
			for _, l := range rep.Excerpts[excerptKey(v.Partition, v.TxID)] {
				b.WriteString("    " + l + "\n")
			}
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// cleanup stops the brokers and the cluster and removes what is not kept.
func (r *runner) cleanup(keep bool) {
	for _, b := range []*broker{r.a, r.b} {
		if b != nil && b.running() {
			_ = b.kill()
		}
	}
	for _, c := range r.clusters {
		if err := c.stop(); err != nil {
			r.out.line("stopping PostgreSQL %s: %v", c.name, err)
		}
		if pm := postmasterPID(c.data); pm > 0 && processAlive(pm) {
			_ = syscall.Kill(pm, syscall.SIGKILL)
		}
		if keep && r.tmp != "" {
			_ = copyFile(c.logFile, filepath.Join(r.tmp, c.logName()))
		}
	}
	if r.pgBase != "" {
		_ = os.RemoveAll(r.pgBase)
		if r.pgRoot != "" {
			_ = os.Remove(r.pgRoot) // only when empty
		}
	}
	if r.tmp != "" {
		if keep {
			// Marks the directory as deliberately kept (reapStaleTemp spares it).
			_ = os.WriteFile(filepath.Join(r.tmp, ".keep"), nil, 0o644)
		} else {
			_ = os.RemoveAll(r.tmp)
		}
	}
}

// reapStaleTemp removes the temporary directories of earlier runs whose
// harness died before cleaning up (its pid is gone and it did not mark the
// directory as kept evidence).
func reapStaleTemp(logf func(string, ...any)) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "regina-faults-*-*"))
	for _, d := range dirs {
		rest := strings.TrimPrefix(filepath.Base(d), "regina-faults-")
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, ".keep")); err == nil {
			continue
		}
		logf("removing %s, left by a dead earlier run", d)
		_ = os.RemoveAll(d)
	}
}

// findRepo returns the root of the regina module: dir if given, else the
// first parent of the working directory holding its go.mod.
func findRepo(dir string) (string, error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		dir = wd
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/regina-mq/regina\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod of github.com/regina-mq/regina in %s or its parents (use -repo)", dir)
		}
	}
}

func freePortExcept(used ...int) (int, error) {
	for range 20 {
		p, err := freePort()
		if err != nil {
			return 0, err
		}
		ok := true
		for _, u := range used {
			ok = ok && u != p
		}
		if ok {
			return p, nil
		}
	}
	return 0, errors.New("no free port")
}

func writeHistory(path string, attempts []*Attempt) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteJSONL(f, attempts); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

// sortedCounts formats a count map as "a=1 b=2" in key order.
func sortedCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}
