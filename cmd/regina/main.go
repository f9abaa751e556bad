// Command regina is the Regina message broker: the Queen MQ HTTP API on
// PostgreSQL, with exact, window-bounded deduplication of producer retries.
//
// Configuration comes from environment variables and flags (regina -h lists
// them). SIGINT or SIGTERM stops it gracefully: it stops accepting requests,
// drains every partition mailbox, answers every waiting request and exits; a
// second signal exits at once.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" //nolint:gosec // G108: served only on PPROF_ADDR, its own listener, never on the API port
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/mattn/go-isatty"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/regina-mq/regina/actor"
	"github.com/regina-mq/regina/cache"
	"github.com/regina-mq/regina/internal/auth"
	"github.com/regina-mq/regina/internal/crypt"
	brokermetrics "github.com/regina-mq/regina/metrics"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/wire"
)

func main() {
	// -h prints the help to stdout (regina -h | less); a flag error goes to
	// stderr with a pointer to -h.
	var usage bytes.Buffer
	cfg, err := LoadConfig(os.Args[1:], envOrEmpty, &usage)
	if err != nil {
		if errors.Is(err, errHelp) {
			_, _ = os.Stdout.Write(usage.Bytes())
			os.Exit(0)
		}
		_, _ = os.Stderr.Write(usage.Bytes())
		fmt.Fprintln(os.Stderr, "regina:", err)
		os.Exit(2)
	}
	log := newLogger(cfg)
	_, userLimit := os.LookupEnv("GOMEMLIMIT")
	applyMemoryLimit(cfg, log, userLimit)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal now kills the process
	}()
	if err := run(ctx, cfg, log, nil); err != nil {
		log.Error().Err(err).Msg("regina stopped")
		os.Exit(1)
	}
}

var errHelp = flag.ErrHelp

func newLogger(cfg Config) zerolog.Logger {
	lvl, _ := zerolog.ParseLevel(cfg.LogLevel)
	var l zerolog.Logger
	console := cfg.LogFormat == "console" || (cfg.LogFormat == "auto" && isatty.IsTerminal(os.Stderr.Fd()))
	if console {
		l = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly})
	} else {
		l = zerolog.New(os.Stderr)
	}
	return l.Level(lvl).With().Timestamp().Logger()
}

// run starts the broker (cfg completed by WithDefaults and checked by
// Validate) and blocks until ctx is done, then shuts down in
// order: stop accepting requests, drain actors, stop retention, close the
// pool. It listens before it reaches the database and retries that until
// ctx ends (see openStore); ending ctx meanwhile returns nil. When ready is
// not nil it receives the listen address once serving (connected and
// migrated).
func run(ctx context.Context, cfg Config, log zerolog.Logger, ready chan<- string) error {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	// Auth before anything is opened (Validate has checked its settings;
	// New may still fail to start a JWKS cache).
	authn, err := auth.New(cfg.Auth, auth.Options{Logger: log.With().Str("component", "auth").Logger()})
	if err != nil {
		return fmt.Errorf("JWT settings: %w", err)
	}
	defer authn.Close()
	logAuth(log, cfg.Host, cfg.Auth, authn)
	var key *crypt.Key
	if cfg.EncryptionKey != "" {
		if key, err = crypt.ParseKey(cfg.EncryptionKey); err != nil {
			return fmt.Errorf("%s: %w", crypt.KeyEnv, err) // Validate checked it
		}
	}

	// One Prometheus registry per broker (GET /metrics/prometheus).
	met := brokermetrics.New(brokermetrics.Config{})

	// Listen before the database is reached: while the broker connects
	// (and retries), the probes answer 503 and every other route a
	// retryable 503, so a load balancer and a client see a broker that is
	// starting, not a closed port.
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.Addr())
	if err != nil {
		return fmt.Errorf("listen on %s (HOST/PORT): %w", cfg.Addr(), err)
	}
	defer ln.Close()
	instance := instanceName(ln.Addr())
	maxConns := maxConnections(cfg, openFileLimit())
	srv := wire.NewStarting(wire.Config{MaxBodyBytes: cfg.MaxBodyBytes, MaxBodyBytesInFlight: cfg.MaxBodyBytesInFlight,
		ReadTimeout: cfg.ReadTimeout,
		IdleTimeout: cfg.IdleTimeout, Logger: log, Metrics: met, Auth: authn, Instance: instance,
		DefaultSubscriptionMode: cfg.DefaultSubscriptionMode, EncryptionKey: key != nil,
		MaxConns: maxConns, MaxConnsPerIP: cfg.MaxConnectionsPerIP})
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	if cfg.listening != nil {
		cfg.listening(ln.Addr().String())
	}

	store, err := openStore(ctx, cfg, key, log, met, srv)
	if err != nil {
		sctx, scancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer scancel()
		if serr := srv.Shutdown(sctx); serr != nil {
			log.Warn().Err(serr).Msg("http shutdown")
		}
		if ctx.Err() != nil {
			log.Info().Msg("regina stopped before its database was reached")
			return nil
		}
		return err
	}
	defer closeStore(store, cfg.ShutdownTimeout, log)
	logEncryption(log, key != nil)
	logServerSettings(ctx, log, store, cfg.PoolSize)

	// The maintenance switches, read before serving: a broker started while
	// push maintenance is on refuses pushes from its first request.
	maint, err := store.NewMaintenance(ctx)
	if err != nil {
		return err
	}
	if st := maint.Current(); st.Push || st.Pop {
		log.Warn().Bool("push", st.Push).Bool("pop", st.Pop).Msg("maintenance mode is on")
	}
	registerMaintenanceGauges(met.Registry(), maint)

	// The dedup cache only lowers the probe's span; off (or evicted) it
	// changes no verdict.
	cacheBudget := cfg.cacheBudget()
	dedupCache := cache.New(cache.Config{Enabled: cfg.DedupCache, BudgetBytes: cacheBudget, HotHashes: cfg.dedupCacheHotHashes})
	shape, err := reginatype.ParsePushShape(cfg.PushShape)
	if err != nil {
		return err
	}
	reg := actor.NewRegistry(store, actor.Config{
		PushShape: shape, PackSenders: cfg.PackSenders, PackMaxBatches: cfg.PackMaxPartitions,
		PackWait:        time.Duration(cfg.PackWaitMicros) * time.Microsecond,
		MailboxMaxItems: cfg.MailboxMaxItems, MailboxMaxBytes: cfg.MailboxMaxBytes,
		BatchMaxItems: cfg.BatchMaxItems, BatchMaxBytes: cfg.BatchMaxBytes,
		IdleTimeout: cfg.ActorIdle, Logger: log, BeforeBatch: cfg.beforeBatch,
		Cache: dedupCache, CacheBudgetBytes: cacheBudget, WarmStart: cfg.DedupCache, Metrics: met, Key: key,
		NoUnlockedDuplicates: cfg.noUnlockedDups,
	})
	if cfg.onRegistry != nil {
		cfg.onRegistry(reg)
	}
	met.SetSource(func() brokermetrics.Snapshot {
		s := reg.Snapshot()
		ps := store.PoolStats()
		s.Pool = brokermetrics.PoolSnapshot{Total: ps.Total, Idle: ps.Idle, Acquired: ps.Acquired, Max: ps.Max,
			EmptyAcquires: ps.EmptyAcquireCount}
		return s
	})
	// Pushes go through the actors; the few store calls the push pipeline
	// must know about (long polls, transactions and DLQ replays wake
	// consumers, a deleted queue leaves the cache) through reg.Link; the
	// rest straight to the store.
	linked := reg.Link(store)
	// Pops and acks are group-committed (a lone one goes at once).
	consume := actor.NewConsumeBatcher(store, actor.ConsumeConfig{Senders: cfg.ConsumeSenders, MaxBatch: cfg.ConsumeMaxBatch})
	defer consume.Close()
	registerConsumeCounters(met.Registry(), consume)
	linked.BatchPops(consume)
	srv.Start(wire.Backend{
		Pusher: reg, Popper: linked, Transactor: linked, Replayer: linked, QueueDeleter: linked,
		Acker: batchedAcker{store, consume}, Admin: configuringAdmin{store, reg}, Groups: store, Traces: store, Stats: store, Pinger: store, Maintenance: maint,
		Streams: store, Cycler: linked, Readiness: readiness{store: store, reg: reg}, Pipeline: reg,
	})

	if cfg.PprofAddr != "" {
		pln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.PprofAddr)
		if err != nil {
			return fmt.Errorf("listen on %s (PPROF_ADDR): %w", cfg.PprofAddr, err)
		}
		psrv := &http.Server{Handler: http.DefaultServeMux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = psrv.Serve(pln) }()
		defer psrv.Close()
		log.Info().Str("addr", pln.Addr().String()).Msg("pprof serving")
	}

	retCtx, stopRetention := context.WithCancel(context.Background())
	retDone, maintDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(retDone)
		store.RunRetention(retCtx, cfg.RetentionInterval, cfg.RetentionBatchSize)
	}()
	evictDone, vacDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(evictDone)
		store.RunEviction(retCtx, cfg.EvictionInterval, cfg.EvictionBatchSize)
	}()
	go func() {
		defer close(vacDone)
		store.RunCursorVacuum(retCtx, cfg.CursorVacuumInterval)
	}()
	go func() {
		defer close(maintDone)
		maint.Run(retCtx, cfg.MaintenanceRefresh)
	}()

	// The status and analytics counters: written about once a minute and
	// once more at shutdown, before the pool closes.
	statsCtx, stopStats := context.WithCancel(context.Background())
	statsDone := make(chan struct{})
	statsFlush := time.Duration(cfg.MetricsAggregateSeconds) * time.Second
	if cfg.statsFlush > 0 {
		statsFlush = cfg.statsFlush
	}
	go func() {
		defer close(statsDone)
		srv.RunStats(statsCtx, wire.StatsConfig{SampleInterval: cfg.MetricsSampleInterval,
			FlushInterval: statsFlush, RetentionDays: cfg.MetricsRetentionDays})
	}()

	log.Info().Str("addr", ln.Addr().String()).Str("schema", cfg.Schema).
		Bool("dedup_cache", cfg.DedupCache).Int64("dedup_cache_bytes", cacheBudget).
		Int("max_connections", maxConns).Int("max_connections_per_ip", cfg.MaxConnectionsPerIP).Msg("regina serving")
	if ready != nil {
		ready <- ln.Addr().String()
	}

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		runErr = fmt.Errorf("serve: %w", err)
	}

	log.Info().Msg("shutting down: draining requests and mailboxes")
	sctx, scancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer scancel()
	// Close the actors first so requests still waiting on a mailbox are
	// answered, while the server stops accepting and waits for handlers.
	regErr := make(chan error, 1)
	go func() { regErr <- reg.Close(sctx) }()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn().Err(err).Msg("http shutdown")
	}
	if err := <-regErr; err != nil {
		log.Warn().Err(err).Msg("actor shutdown")
	}
	stopRetention()
	<-retDone
	<-evictDone
	<-vacDone
	stopStats()
	<-statsDone
	<-maintDone
	log.Info().Msg("regina stopped")
	return runErr
}

// poolCloseMin is the least closeStore waits for the pool.
const poolCloseMin = time.Second

// closeStore closes the store's pool, waiting at most wait (poolCloseMin at
// least) for connections still held by requests that outlived the drain:
// shutdown never hangs on them (the process exits and PostgreSQL ends
// their sessions).
func closeStore(store *sqlstore.Store, wait time.Duration, log zerolog.Logger) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		store.Close()
	}()
	t := time.NewTimer(max(wait, poolCloseMin))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		log.Warn().Dur("waited", max(wait, poolCloseMin)).
			Msg("database pool still has connections in use; exiting without waiting for them")
	}
}

// Waits between two attempts to reach the database at start: the first
// retry after connectRetryMin, doubling up to connectRetryMax.
const (
	connectRetryMin = 250 * time.Millisecond
	connectRetryMax = 10 * time.Second
)

// openStore opens the store (connect, migrate), retrying with backoff while
// the database cannot be reached, until ctx ends. Each failed attempt is
// logged at warn with its error and shown by GET /ready. A schema that this
// broker must not touch (a changed migration, one it does not know) or a
// connection string that cannot be parsed fails at once.
func openStore(ctx context.Context, cfg Config, key *crypt.Key, log zerolog.Logger, met *brokermetrics.Metrics,
	srv *wire.Server) (*sqlstore.Store, error) {
	maxWait := connectRetryMax
	if cfg.connectRetryMax > 0 {
		maxWait = cfg.connectRetryMax
	}
	wait := min(connectRetryMin, maxWait)
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 60*time.Second)
		store, err := sqlstore.Open(actx, sqlstore.Config{
			URL: cfg.DatabaseURL, Schema: cfg.Schema, MaxConns: int32(cfg.PoolSize),
			StatementTimeout: cfg.StatementTimeout, SidecarMinSeconds: cfg.RetentionSidecarMinSeconds,
			SidecarChildSeconds: cfg.RetentionSidecarChildSeconds, Citus: sqlstore.CitusMode(cfg.Citus),
			Logger: log.With().Str("component", "sqlstore").Logger(), Key: key,
			// What retention deletes, for the analytics' retention view.
			OnPurge: srv.CountRetention,
			OnRetention: func(st sqlstore.RetentionStats, err error) {
				met.ObserveRetention(st.LogTxns, st.Segments, err != nil && !errors.Is(err, context.Canceled))
			},
		})
		cancel()
		if err == nil {
			if attempt > 1 {
				log.Info().Int("attempts", attempt).Msg("database connected")
			}
			return store, nil
		}
		err = fmt.Errorf("open database (DATABASE_URL / PG_*): %w", err)
		if ctx.Err() != nil {
			return nil, err
		}
		if _, bad := errors.AsType[*pgconn.ParseConfigError](err); bad ||
			errors.Is(err, sqlstore.ErrMigrationChanged) || errors.Is(err, sqlstore.ErrSchemaNewer) ||
			errors.Is(err, sqlstore.ErrWrongKey) || errors.Is(err, sqlstore.ErrKeyMissing) ||
			errors.Is(err, sqlstore.ErrNoCitus) {
			return nil, err
		}
		srv.SetStartError(err)
		log.Warn().Err(err).Int("attempt", attempt).Dur("retry_in", wait).
			Msg("database not reachable; serving 503 until it is, retrying")
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		wait = min(2*wait, maxWait)
	}
}

// readiness is the readiness probe's backend (GET /ready): the store's
// database and schema checks and the registry's mailbox pressure.
type readiness struct {
	store *sqlstore.Store
	reg   *actor.Registry
}

// Readiness implements wire.Readiness.
func (r readiness) Readiness(ctx context.Context) reginatype.Readiness {
	var out reginatype.Readiness
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	st := r.store.CheckReady(pctx)
	cancel()
	out.Database = reginatype.ReadinessCheck{OK: st.Err == nil, LatencyMs: float64(st.Latency.Microseconds()) / 1000}
	if st.Err != nil {
		out.Database.Error = st.Err.Error()
		out.Migrations.Error = "unknown: the database did not answer"
	} else {
		out.Migrations = reginatype.ReadinessCheck{OK: st.Schema.Problem == "", Error: st.Schema.Problem,
			Version: st.Schema.Version, Expected: st.Schema.Expected}
	}
	p := r.reg.Pressure()
	// One hot partition at its bound is that partition's back-pressure (its
	// pushes get 503), not a reason to take the whole broker out of a load
	// balancer: not ready only when at least half the live mailboxes are full.
	out.Mailboxes = reginatype.ReadinessCheck{OK: p.Full*2 < p.Actors || p.Full == 0, Actors: p.Actors, Depth: p.Depth,
		Full: p.Full, Fullest: p.Fullest}
	if !out.Mailboxes.OK {
		out.Mailboxes.Error = fmt.Sprintf("%d of %d partition mailboxes at their bound: pushes to them are refused",
			p.Full, p.Actors)
	}
	return out
}

// instanceName names this broker in what it records (trace events, the
// analytics' replicas): the host name and the port it serves on.
func instanceName(addr net.Addr) string {
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	if ta, ok := addr.(*net.TCPAddr); ok {
		return net.JoinHostPort(host, strconv.Itoa(ta.Port))
	}
	return host
}

// registerMaintenanceGauges exports the maintenance switches this broker
// applies: regina_maintenance_mode{scope="push"|"pop"} (1 = on), and
// upstream's queen_maintenance_mode_enabled (the push switch) for Queen's
// dashboards and alerts.
func registerMaintenanceGauges(reg *prometheus.Registry, m *sqlstore.Maintenance) {
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	const help = "1 while this maintenance switch is on (push: pushes refused with a retryable 503; pop: pops answer 204)"
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "regina_maintenance_mode", Help: help,
			ConstLabels: prometheus.Labels{"scope": "push"}}, func() float64 { return b(m.Current().Push) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "regina_maintenance_mode", Help: help,
			ConstLabels: prometheus.Labels{"scope": "pop"}}, func() float64 { return b(m.Current().Pop) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "queen_maintenance_mode_enabled",
			Help: "upstream Queen's name: 1 while push maintenance is on"}, func() float64 { return b(m.Current().Push) }),
	)
}
