package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/regina-mq/regina/sqlstore"
)

type config struct {
	databaseURL  string
	natsURL      string
	regina       string
	build        bool
	duration     time.Duration
	warmup       time.Duration
	rounds       int
	connections  int
	partitions   int
	items        int
	payload      int
	natsConns    int
	natsInflight int
	out          string
	jsonOut      string
	command      string
	timeout      time.Duration
	blocks       string
	queenURL     string
	queenDB      string
	// packSenders and packPartitions shape the packed ceilings (packed.go).
	packSenders    int
	packPartitions int
	// natsServer is the pinned nats-server binary blocks C and S start
	// ("" = bin/nats-server-<NATSPinnedVersion>).
	natsServer string
	// itemsLarge is the messages per push of the large-push phases
	// (regina_100, jetstream_100, jetstream_sync_100; 0 = none).
	itemsLarge int
	// onePartitions is the partitions of block P's one-message pushes.
	onePartitions int
	// Block K (consume.go): the drains' backlogs (at batch 10 and 100, and
	// at batch 1), consumers, the steady phase's producers, offered rate
	// (0: half of regina_on, else 2,000) and pop batch.
	consumeBacklog, consumeBacklog1    int
	consumeConsumers, consumeProducers int
	steadyRate                         float64
	steadyBatch                        int

	scale          bool
	scaleParts     []int
	scaleHashes    []int
	scaleRounds    int
	scaleCeiling   bool
	plotDir        string
	preloadDropIdx bool
	// preloadChunk is the rows (over all partitions) of one preload
	// transaction (0 = preloadChunkRows; tests make it small).
	preloadChunk int
	// scaleWindow is the dedup window of the hash points' queue (the
	// partition points keep the default hour).
	scaleWindow time.Duration

	scalePop          []int
	scalePopConsumers int
	scalePopBacklog   int
	scaleRestart      bool
	// scaleRestartAfter is when, after its start, the restarted broker's
	// measured window begins.
	scaleRestartAfter time.Duration

	// The drain phase (scaledrain.go): partitions (0 = none), messages per
	// partition, consumers.
	scaleDrain          int
	scaleDrainPer       int
	scaleDrainConsumers int
	// scaleOnly names the scale phases to run (nil = all of them).
	scaleOnly map[string]bool
}

// defaultBlocks are the compare blocks a run has unless -blocks says
// otherwise (E runs only with -queen-url).
const defaultBlocks = "ABCDEFPSRK"

// blockPhases is the number of phases of each block, for plannedTime.
var blockPhases = map[rune]int{'A': 3, 'B': 4, 'C': 3, 'D': 2, 'E': 2, 'F': 2, 'P': 2, 'S': 3, 'R': 2, 'K': 4}

// wantsBlock reports whether -blocks names the block with letter key.
func (c *config) wantsBlock(key byte) bool {
	return strings.ContainsRune(strings.ToUpper(c.blocks), rune(key))
}

// scalePhases are the names -scale-only accepts.
// The restart phase belongs to the hash points (it runs on the largest).
var scalePhases = []string{"partitions", "hashes", "pop", "drain"}

// scaleWants reports whether scale mode runs the phase called name.
func (c *config) scaleWants(name string) bool { return c.scaleOnly == nil || c.scaleOnly[name] }

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		mult := 1
		switch {
		case strings.HasSuffix(f, "k"), strings.HasSuffix(f, "K"):
			mult, f = 1000, f[:len(f)-1]
		case strings.HasSuffix(f, "M"), strings.HasSuffix(f, "m"):
			mult, f = 1000000, f[:len(f)-1]
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("bad size %q", f)
		}
		out = append(out, v*mult)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("regina-compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.databaseURL, "database-url", "", "PostgreSQL URL; empty = scripts/ensure-postgres.sh regina_compare finds or starts one")
	fs.StringVar(&c.natsURL, "nats-url", "", "block C's NATS server with JetStream (e.g. Debian's on nats://127.0.0.1:4222); empty = start the pinned nats-server with its defaults")
	fs.StringVar(&c.natsServer, "nats-server", "", "the pinned nats-server binary blocks C and S start (empty = bin/nats-server-"+NATSPinnedVersion+", which make compare installs)")
	fs.IntVar(&c.itemsLarge, "items-large", 100, "compare mode: messages per push of the large-push phases (regina_100 in block P, jetstream_100, jetstream_sync_100); 0 = none")
	fs.IntVar(&c.onePartitions, "one-partitions", 1000, "compare mode: partitions of block P's one-message pushes (regina_1)")
	fs.IntVar(&c.consumeBacklog, "consume-backlog", 200000, "compare mode, block K: messages drained at pop batch 10 and 100 (and by River)")
	fs.IntVar(&c.consumeBacklog1, "consume-backlog-1", 20000, "compare mode, block K: messages drained at pop batch 1")
	fs.IntVar(&c.consumeConsumers, "consume-consumers", 4, "compare mode, block K: consumers of a drain or of the steady phase (per group in the group drains)")
	fs.IntVar(&c.consumeProducers, "consume-producers", 8, "compare mode, block K: open-loop producers of the steady phase")
	fs.Float64Var(&c.steadyRate, "steady-rate", 0, "compare mode, block K: msgs/s offered in the steady phase (0 = half of this run's regina_on, else 2000)")
	fs.IntVar(&c.steadyBatch, "steady-batch", 10, "compare mode, block K: pop batch of the steady phase's consumers")
	fs.StringVar(&c.regina, "regina", "bin/regina", "broker binary (relative to the repository root)")
	fs.BoolVar(&c.build, "build", true, "go build the broker into -regina first")
	fs.DurationVar(&c.duration, "duration", 20*time.Second, "measured time per phase")
	fs.DurationVar(&c.warmup, "warmup", 3*time.Second, "warmup per phase, excluded from the figures")
	fs.IntVar(&c.rounds, "rounds", 3, "interleaved rounds of every phase; figures are medians over rounds")
	fs.IntVar(&c.connections, "connections", 16, "concurrent producers (HTTP connections, pgx connections, NATS connections)")
	fs.IntVar(&c.partitions, "partitions", 16, "partitions (NATS: subjects); each push goes to one, chosen uniformly")
	fs.IntVar(&c.items, "items", 10, "messages per push")
	fs.IntVar(&c.payload, "payload", 200, "payload bytes per message (a JSON object; at least 11)")
	fs.IntVar(&c.natsConns, "nats-conns", 0, "NATS publisher connections (0 = -connections)")
	fs.IntVar(&c.natsInflight, "nats-inflight", 256, "async publishes in flight over all NATS connections (split evenly)")
	fs.StringVar(&c.out, "out", "bench/RESULTS.md", "markdown file to write (its compare or scale section is replaced)")
	fs.StringVar(&c.jsonOut, "json", "", "also write every phase result as JSON to this path")
	fs.StringVar(&c.command, "command", "", "how the run was invoked, for the results file (default: this program's arguments)")
	fs.StringVar(&c.blocks, "blocks", defaultBlocks, "compare mode: which blocks to run (A Regina cache on + storm + dedup off, B pgx ceiling + storm, "+
		"C JetStream (defaults, or -nats-url) + storm + large pushes, D Regina cache off + storm, E upstream Queen + storm when -queen-url is given, "+
		"F Regina dedupPayloadCheck off vs report, P Regina large pushes and one-message pushes over -one-partitions, "+
		"S JetStream sync_interval always + storm + large pushes, R River unique inserts + storm)")
	fs.StringVar(&c.queenURL, "queen-url", "", "compare mode: an upstream Queen server you run (http://HOST:PORT); block E gives it the same load as Regina")
	fs.StringVar(&c.queenDB, "queen-database", "", "compare mode: the PostgreSQL database the Queen server uses, when on the local cluster (its backends become \"PG ours\" of the Queen phases)")
	be := fs.String("broker-env", "", "settings given to every broker started, VAR=value,... (e.g. PUSH_SHAPE=single); the others are the defaults")
	fs.IntVar(&c.packSenders, "pack-senders", 4, "compare mode: connections of the packed ceilings (the broker's PUSH_PACK_SENDERS default)")
	fs.IntVar(&c.packPartitions, "pack-partitions", 0, "compare mode: partitions per call of the packed ceilings (0 = -connections / -pack-senders)")
	fs.DurationVar(&c.timeout, "timeout", 0, "stop measuring after this long (0 = from the plan, with a margin)")
	fs.BoolVar(&c.scale, "scale", false, "scale mode: throughput and p99 as partitions and in-window hashes grow")
	sp := fs.String("scale-partitions", "1,1k,100k", "scale mode: partition counts")
	sh := fs.String("scale-hashes", "100k,10M,100M", "scale mode: in-window hash counts preloaded before pushing")
	spop := fs.String("scale-pop", "100,100k", "scale mode: partition counts of the pop phase (1% of them hold work); \"none\" skips it")
	fs.IntVar(&c.scalePopConsumers, "scale-pop-consumers", 1, "scale mode: consumers of the pop phase (pop batch 1 + ack loops)")
	fs.IntVar(&c.scalePopBacklog, "scale-pop-backlog", 100000, "scale mode: messages pushed to the hot partitions before each pop phase")
	sdrain := fs.String("scale-drain", "5k", "scale mode: partitions of the drain phase (a backlog on every partition, drained to the last message); \"none\" skips it")
	fs.IntVar(&c.scaleDrainPer, "scale-drain-per", 4, "scale mode: backlog messages per partition of the drain phase")
	fs.IntVar(&c.scaleDrainConsumers, "scale-drain-consumers", 4, "scale mode: consumers of the drain phase (pop batch 1 + ack loops)")
	sonly := fs.String("scale-only", "", "scale mode: run only these phases, comma-separated ("+strings.Join(scalePhases, ", ")+"); empty = all")
	fs.BoolVar(&c.scaleRestart, "scale-restart", true, "scale mode: push before and after a broker restart on the largest hash point")
	fs.DurationVar(&c.scaleRestartAfter, "scale-restart-after", 30*time.Second, "scale mode: the restarted broker pushes at once and is measured from this long after its start")
	fs.IntVar(&c.scaleRounds, "scale-rounds", 1, "scale mode: rounds per point")
	fs.BoolVar(&c.scaleCeiling, "scale-ceiling", true, "scale mode: also measure the pgx ceiling at every point")
	fs.StringVar(&c.plotDir, "plot-dir", "bench", "scale mode: directory for scale-partitions.png and scale-hashes.png")
	fs.BoolVar(&c.preloadDropIdx, "preload-drop-index", true, "scale mode: drop the GIN index while preloading and rebuild it after (same definition)")
	fs.DurationVar(&c.scaleWindow, "scale-window", 24*time.Hour, "scale mode: dedup window of the hash points' queue (whole seconds, at least 2m); the preload spreads its hashes over it, less a reserve for the run")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	var err error
	if c.scaleParts, err = parseInts(*sp); err != nil {
		return nil, fmt.Errorf("-scale-partitions: %w", err)
	}
	if c.scaleHashes, err = parseInts(*sh); err != nil {
		return nil, fmt.Errorf("-scale-hashes: %w", err)
	}
	if *spop != "none" {
		if c.scalePop, err = parseInts(*spop); err != nil {
			return nil, fmt.Errorf("-scale-pop: %w", err)
		}
	}
	if *sdrain != "none" {
		d, err := parseInts(*sdrain)
		if err != nil || len(d) != 1 {
			return nil, fmt.Errorf("-scale-drain: want one partition count or \"none\" (%q)", *sdrain)
		}
		c.scaleDrain = d[0]
	}
	if *sonly != "" {
		c.scaleOnly = map[string]bool{}
		for f := range strings.SplitSeq(*sonly, ",") {
			f = strings.TrimSpace(f)
			if !slices.Contains(scalePhases, f) {
				return nil, fmt.Errorf("-scale-only: unknown phase %q (want some of %s)", f, strings.Join(scalePhases, ", "))
			}
			c.scaleOnly[f] = true
		}
		if !c.scaleWants("partitions") {
			c.scaleParts = nil
		}
		if !c.scaleWants("hashes") {
			c.scaleHashes = nil
		}
		if !c.scaleWants("pop") {
			c.scalePop = nil
		}
		if !c.scaleWants("drain") {
			c.scaleDrain = 0
		}
	}
	switch {
	case c.duration <= 0:
		return nil, errors.New("-duration must be > 0")
	case c.warmup < 0:
		return nil, errors.New("-warmup must be >= 0")
	case c.rounds < 1 || c.scaleRounds < 1:
		return nil, errors.New("-rounds and -scale-rounds must be >= 1")
	case c.connections < 1 || c.partitions < 1 || c.items < 1 || c.onePartitions < 1 || c.itemsLarge < 0:
		return nil, errors.New("-connections, -partitions, -items and -one-partitions must be >= 1, -items-large >= 0")
	case c.packSenders < 1 || c.packPartitions < 0:
		return nil, errors.New("-pack-senders must be >= 1 and -pack-partitions >= 0")
	case c.payload < 11:
		return nil, errors.New("-payload must be >= 11 (the JSON object around the data)")
	case c.scale && (c.queenURL != "" || c.queenDB != ""):
		return nil, errors.New("-queen-url and -queen-database are for compare mode, not -scale")
	case c.scalePopConsumers < 1 || c.scalePopBacklog < 1:
		return nil, errors.New("-scale-pop-consumers and -scale-pop-backlog must be >= 1")
	case c.scaleDrainPer < 1 || c.scaleDrainConsumers < 1:
		return nil, errors.New("-scale-drain-per and -scale-drain-consumers must be >= 1")
	case c.scaleWindow < minScaleWindow || c.scaleWindow%time.Second != 0 || c.scaleWindow > time.Duration(math.MaxInt32)*time.Second:
		return nil, fmt.Errorf("-scale-window must be whole seconds between %s and 2^31-1 s, not %s", minScaleWindow, c.scaleWindow)
	case c.natsInflight < 1 || c.natsConns < 0:
		return nil, errors.New("-nats-inflight must be >= 1 and -nats-conns >= 0")
	}
	if c.natsConns == 0 {
		c.natsConns = c.connections
	}
	if *be != "" {
		for kv := range strings.SplitSeq(*be, ",") {
			if !strings.Contains(kv, "=") {
				return nil, fmt.Errorf("-broker-env: %q is not VAR=value", kv)
			}
			brokerExtraEnv = append(brokerExtraEnv, kv)
		}
	}
	if c.packPartitions == 0 {
		c.packPartitions = max(1, (c.connections+c.packSenders-1)/c.packSenders)
	}
	if c.command == "" {
		c.command = "regina-compare " + strings.Join(args, " ")
	}
	return c, nil
}

// harness holds everything a run started, so that cleanup can undo it.
type harness struct {
	cfg  *config
	stop context.Context // cancelled by the first signal (or the timeout): stop measuring
	hard context.Context // cancelled by the second signal: abandon the cleanup's waiting
	logf func(format string, args ...any)

	repo   string
	tmp    string
	runTag string

	dbURL      string
	dbname     string
	admin      *pgxpool.Pool
	main       *pgSpace   // compare mode's schema (and the ceiling's pool)
	spaces     []*pgSpace // every schema created and not yet dropped
	postmaster int

	wl *workload
	// wlLarge and wlOne are the compare mode's other push shapes:
	// -items-large messages per push, and one message per push over
	// -one-partitions partitions.
	wlLarge, wlOne *workload

	jetstreams  map[natsMode]*natsPeer // opened by jetStream
	natsPending int
	river       *riverPeer // opened by riverPeer

	queen *queenTarget // nil without -queen-url

	broker *brokerProc

	info    runInfo
	results []*PhaseResult
	scale   *scaleState
	drain   *drainRun // the drain phase's record (scaledrain.go), nil until it ran
}

// runInfo is what RESULTS.md says about the run's setting.
type runInfo struct {
	Started     time.Time  `json:"started"`
	Command     string     `json:"command"`
	Args        string     `json:"args"`
	Machine     Machine    `json:"machine"`
	GoVersion   string     `json:"go_version"`
	PGVersion   string     `json:"pg_version"`
	Peers       []peerInfo `json:"peers,omitempty"`
	Commit      string     `json:"regina_commit"`
	PGWhere     string     `json:"pg_where"`
	PGSettings  string     `json:"pg_settings,omitempty"` // sqlstore.ServerSettingNames not at PostgreSQL's defaults
	Queen       *queenInfo `json:"queen,omitempty"`
	Interrupted bool       `json:"interrupted,omitempty"`
	Crashes     []string   `json:"broker_crashes,omitempty"`
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cfg, err := parseFlags(args, os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "regina-compare:", err)
		return 2
	}
	logf := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
	}

	// First signal: stop measuring, clean up, write what was measured.
	// Second signal: stop waiting (children are killed, not drained).
	stopCtx, stopFn := context.WithCancel(context.Background())
	hardCtx, hardFn := context.WithCancel(context.Background())
	defer stopFn()
	defer hardFn()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	var interrupted atomic.Bool
	go func() {
		<-sigs
		interrupted.Store(true)
		logf("signal: stopping the current phase, then cleaning up (again to cancel at once)")
		stopFn()
		<-sigs
		logf("second signal: cancelling")
		hardFn()
	}()

	h := &harness{cfg: cfg, stop: stopCtx, hard: hardCtx, logf: logf}
	code := 0
	err = h.setup()
	if err == nil {
		if cfg.timeout <= 0 {
			cfg.timeout = h.plannedTime()
		}
		timer := time.AfterFunc(cfg.timeout, func() {
			logf("timeout %s reached: stopping", cfg.timeout)
			interrupted.Store(true)
			stopFn()
		})
		if cfg.scale {
			err = h.runScale()
		} else {
			err = h.runCompare()
		}
		timer.Stop()
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		logf("error: %v", err)
		code = 1
	}
	h.info.Interrupted = interrupted.Load() || stopCtx.Err() != nil
	var summary string
	if len(h.results) > 0 {
		var werr error
		if cfg.scale {
			summary, werr = h.writeScale()
		} else {
			summary, werr = h.writeCompare()
		}
		if werr != nil {
			logf("writing results: %v", werr)
			code = 1
		} else {
			logf("wrote %s", h.outPath())
		}
	}
	h.cleanup()
	if h.info.Interrupted && code == 0 {
		code = 1
	}
	if summary != "" {
		fmt.Println(summary)
	}
	return code
}

// plannedTime bounds the whole run: every phase's warmup and duration plus
// generous margins for broker restarts, preloads and drains.
func (h *harness) plannedTime() time.Duration {
	c := h.cfg
	phase := c.warmup + c.duration + 20*time.Second
	if c.scale {
		n := (len(c.scaleParts)+len(c.scaleHashes))*c.scaleRounds*2 + len(c.scalePop)*c.scaleRounds + 2
		if c.scaleDrain > 0 {
			n += 2
		}
		return time.Duration(n)*phase + 150*time.Minute
	}
	phases := 0
	for _, b := range strings.ToUpper(c.blocks) {
		phases += blockPhases[b]
	}
	if c.queenURL == "" && c.wantsBlock('E') {
		phases -= blockPhases['E']
	}
	return time.Duration(c.rounds*phases)*phase + time.Duration(c.rounds*2)*time.Minute + 10*time.Minute
}

func newTag() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return strconv.FormatInt(time.Now().Unix()-1700000000, 36) + hex.EncodeToString(b[:])
}

func (h *harness) setup() error {
	c := h.cfg
	ctx := h.stop
	var err error
	if h.repo, err = repoRoot(); err != nil {
		return err
	}
	h.runTag = newTag()
	if h.tmp, err = os.MkdirTemp("", "regina-compare-"); err != nil {
		return err
	}
	h.info = runInfo{Started: time.Now().UTC(), Command: redact(c.command), Args: redact(strings.Join(os.Args, " ")),
		Machine: machineInfo(), GoVersion: runtime.Version(), Commit: gitCommit(ctx, h.repo)}
	if gv, err := output(ctx, h.repo, "go", "version"); err == nil {
		h.info.GoVersion = strings.TrimPrefix(gv, "go version ")
	}
	if c.build {
		h.logf("building %s", c.regina)
		if _, err := output(ctx, h.repo, "go", "build", "-o", c.regina, "./cmd/regina"); err != nil {
			return err
		}
	}
	if !filepath.IsAbs(c.regina) {
		c.regina = filepath.Join(h.repo, c.regina)
	}

	if h.dbURL, err = ensurePostgres(ctx, h.repo, c.databaseURL, "regina_compare"); err != nil {
		return err
	}
	pcfg, err := pgxpool.ParseConfig(h.dbURL)
	if err != nil {
		return fmt.Errorf("database url: %w", err)
	}
	h.dbname = pcfg.ConnConfig.Database
	pcfg.MaxConns = 4
	pcfg.ConnConfig.RuntimeParams["application_name"] = "regina-compare"
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if h.admin, err = pgxpool.NewWithConfig(cctx, pcfg); err != nil {
		return err
	}
	var backend int
	if err := h.admin.QueryRow(cctx, "SELECT current_setting('server_version'), pg_backend_pid()").Scan(&h.info.PGVersion, &backend); err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	h.info.PGWhere = fmt.Sprintf("%s:%d/%s", pcfg.ConnConfig.Host, pcfg.ConnConfig.Port, h.dbname)
	nondefault, err := sqlstore.NonDefaultSettings(cctx, h.admin)
	if err != nil {
		return err
	}
	h.info.PGSettings = sqlstore.SettingsText(nondefault)
	if st, err := readStat(backend); err == nil {
		if comm, err := os.ReadFile("/proc/" + strconv.Itoa(st.ppid) + "/comm"); err == nil && strings.HasPrefix(string(comm), "postgres") {
			h.postmaster = st.ppid
		}
	}
	if h.postmaster == 0 {
		h.logf("PostgreSQL is not a local process we can see: its CPU is not reported")
	}
	h.logf("PostgreSQL %s at %s", h.info.PGVersion, h.info.PGWhere)
	if !c.scale {
		if h.main, err = h.openSpace("", c.connections); err != nil {
			return err
		}
	}
	h.wl = newWorkload(c.partitions, c.items, c.payload, 42)
	h.wlLarge = newWorkload(c.partitions, max(c.itemsLarge, 1), c.payload, 42)
	h.wlOne = newWorkload(c.onePartitions, 1, c.payload, 42)

	if !c.scale {
		if err := h.setupPeers(ctx); err != nil {
			return err
		}
		if c.queenURL != "" {
			if err := h.setupQueen(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// cleanup stops what the run started and drops what it created. After a
// second signal it kills instead of waiting.
func (h *harness) cleanup() {
	hard := h.hard.Err() != nil
	if h.broker != nil {
		h.logf("stopping broker %s", h.broker.label)
		h.broker.stop(hard)
		h.broker = nil
	}
	h.cleanupPeers()
	h.cleanupQueen()
	for len(h.spaces) > 0 {
		h.dropSpace(h.spaces[len(h.spaces)-1])
	}
	if h.admin != nil {
		h.admin.Close()
	}
	if h.tmp != "" {
		os.RemoveAll(h.tmp)
	}
}

// startBroker starts a broker on the run's schema, remembered for cleanup.
func (h *harness) startBroker(sp *pgSpace, cacheOn bool, label string) (*brokerProc, error) {
	b, err := startBroker(h.stop, h.cfg.regina, h.dbURL, sp.schema, cacheOn, h.tmp, label)
	if err != nil {
		return nil, err
	}
	h.broker = b
	return b, nil
}

func (h *harness) stopBroker() {
	b := h.broker
	if b == nil {
		return
	}
	h.broker = nil
	select {
	case <-b.done:
		// It exited before we asked: a crash. Keep what its log says.
		tail := tailFile(b.logPath, 4000)
		how := exitText(b)
		h.logf("broker %s (pid %d) had exited by itself (%v: %s); end of its log:\n%s", b.label, b.pid, b.waitErr, how, tail)
		first := tail
		if i := strings.Index(tail, "panic:"); i >= 0 {
			first = tail[i:]
		}
		if j := strings.IndexByte(first, '\n'); j >= 0 {
			first = first[:j]
		}
		h.info.Crashes = append(h.info.Crashes, fmt.Sprintf("%s (%s): %s", b.label, how, tailString(first, 300)))
	default:
		b.stop(h.hard.Err() != nil)
	}
}

// procs names the processes of a phase: the broker (nil: none) and the
// run's PostgreSQL.
func (h *harness) procs(broker *brokerProc) procGroups {
	g := procGroups{postmaster: h.postmaster, dbname: h.dbname}
	if broker != nil {
		g.broker = broker.pid
	}
	return g
}

// outPath is the results file: -out, relative to the repository root.
func (h *harness) outPath() string {
	if filepath.IsAbs(h.cfg.out) {
		return h.cfg.out
	}
	return filepath.Join(h.repo, h.cfg.out)
}

// pgSpace is one schema of the run, migrated by sqlstore (the broker's own
// code), with a pool for the ceiling.
type pgSpace struct {
	schema string
	store  *sqlstore.Store
	// childSeconds is the width of the hash sidecar children the harness's
	// stores create on it (sqlstore.Config.SidecarChildSeconds; 0 = the
	// store's default).
	childSeconds int
}

// openSpace creates and migrates schema regina_cmp_<tag><suffix>.
func (h *harness) openSpace(suffix string, conns int) (*pgSpace, error) {
	return h.openSpaceChild(suffix, conns, 0)
}

// openSpaceChild is openSpace with the hash sidecar children the harness's
// stores create on the schema childSeconds wide (0 = the store's default).
func (h *harness) openSpaceChild(suffix string, conns, childSeconds int) (*pgSpace, error) {
	sp := &pgSpace{schema: "regina_cmp_" + h.runTag + suffix, childSeconds: childSeconds}
	h.spaces = append(h.spaces, sp) // dropped at cleanup even if Open fails half way
	st, err := h.openStore(sp, conns)
	if err != nil {
		return nil, err
	}
	sp.store = st
	h.logf("schema %s", sp.schema)
	return sp, nil
}

// dropSpace closes the schema's pool and drops it. After a second signal it
// still tries, briefly: a DROP SCHEMA is quick.
func (h *harness) dropSpace(sp *pgSpace) {
	h.spaces = slices.DeleteFunc(h.spaces, func(x *pgSpace) bool { return x == sp })
	sp.closeStore()
	if h.admin == nil {
		return
	}
	limit := 2 * time.Minute
	if h.hard.Err() != nil {
		limit = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	if _, err := h.admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{sp.schema}.Sanitize()+" CASCADE"); err != nil {
		h.logf("drop schema %s: %v (drop it by hand)", sp.schema, err)
	} else {
		h.logf("dropped schema %s", sp.schema)
	}
}

var (
	passwordRE   = regexp.MustCompile(`(://[^:/@\s]*):[^@\s]*@`)
	passwordKVRE = regexp.MustCompile(`(password=)[^\s&]+`)
)

// redact hides passwords ("postgres://u:secret@h" -> "postgres://u:***@h",
// "password=secret" -> "password=***").
func redact(s string) string {
	return passwordKVRE.ReplaceAllString(passwordRE.ReplaceAllString(s, "$1:***@"), "$1***")
}

// openStore opens (and migrates) a store on sp's schema with a pool of
// conns.
func (h *harness) openStore(sp *pgSpace, conns int) (*sqlstore.Store, error) {
	ctx, cancel := context.WithTimeout(h.stop, time.Minute)
	defer cancel()
	st, err := sqlstore.Open(ctx, sqlstore.Config{URL: h.dbURL, Schema: sp.schema, MaxConns: int32(conns),
		SidecarChildSeconds: sp.childSeconds, Logger: zerolog.Nop()})
	if err != nil {
		return nil, fmt.Errorf("open store on %s: %w", sp.schema, err)
	}
	return st, nil
}

// closeStore closes the schema's pool (the schema stays).
func (sp *pgSpace) closeStore() {
	if sp.store != nil {
		sp.store.Close()
		sp.store = nil
	}
}
