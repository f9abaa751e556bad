package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/regina-mq/regina/actor"
	"github.com/regina-mq/regina/internal/auth"
	"github.com/regina-mq/regina/internal/crypt"
	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/wire"
)

// Config is everything the broker reads at start, from environment variables
// and flags of the same meaning (a flag wins over its variable). LoadConfig
// fills it; a Config built in code takes its defaults from WithDefaults.
// Validate reports every problem at once, each naming its variable (and the
// flag, when the value came from one).
type Config struct {
	Host string
	// Port is the HTTP port; 0 picks a free one.
	Port        int
	DatabaseURL string
	Schema      string
	PoolSize    int
	// StatementTimeout bounds every statement; 0 leaves the server's.
	StatementTimeout time.Duration
	// Citus is DB_CITUS: auto (the database has the citus extension), on
	// or off; sqlstore.Config.Citus.
	Citus string

	RetentionInterval  time.Duration
	RetentionBatchSize int
	// RetentionSidecarMinSeconds is the floor of the hash sidecar's depth
	// (RETENTION_SIDECAR_MIN_SECONDS).
	RetentionSidecarMinSeconds int
	// RetentionSidecarChildSeconds is the time slice of one child of the
	// hash sidecar (RETENTION_SIDECAR_CHILD_SECONDS); 0 chooses it from the
	// sidecar's depth (sqlstore.Config.SidecarChildSeconds).
	RetentionSidecarChildSeconds int
	// MaintenanceRefresh is how often the maintenance switches are re-read
	// from the database (a switch flipped through another broker takes
	// effect here within it).
	MaintenanceRefresh time.Duration

	// EvictionInterval and EvictionBatchSize drive the maxWaitTimeSeconds
	// pass (Queen's EVICTION_INTERVAL and EVICTION_BATCH_SIZE).
	EvictionInterval  time.Duration
	EvictionBatchSize int
	// CursorVacuumInterval is how often the cursor table is vacuumed
	// (sqlstore.Store.VacuumCursors); 0 turns it off.
	CursorVacuumInterval time.Duration

	// MetricsSampleInterval is the process sampling period of the
	// analytics; MetricsAggregateSeconds how often the counters are written
	// (one row per minute, broker and queue); MetricsRetentionDays how long
	// the rows are kept.
	MetricsSampleInterval   time.Duration
	MetricsAggregateSeconds int
	MetricsRetentionDays    int

	// DedupCache switches the in-window hash cache on (false: off).
	DedupCache   bool
	DedupCacheMB int
	// MemoryLimitMB is the Go memory limit in MiB (MEMORY_LIMIT_MB); 0
	// derives it from the cache budget (see memoryLimit). GOMEMLIMIT, when
	// set, wins over both.
	MemoryLimitMB int

	MailboxMaxItems int
	MailboxMaxBytes int
	BatchMaxItems   int
	BatchMaxBytes   int
	ActorIdle       time.Duration

	// PushShape, PackSenders, PackMaxPartitions and PackWaitMicros are
	// actor.Config's PushShape, PackSenders, PackMaxBatches and PackWait.
	PushShape         string
	PackSenders       int
	PackMaxPartitions int
	PackWaitMicros    int

	// ConsumeSenders and ConsumeMaxBatch are actor.ConsumeConfig's Senders
	// and MaxBatch (group commit of pops and acks).
	ConsumeSenders  int
	ConsumeMaxBatch int

	MaxBodyBytes int
	// MaxBodyBytesInFlight bounds the request body bytes held at once
	// (wire.Config.MaxBodyBytesInFlight).
	MaxBodyBytesInFlight int
	ReadTimeout          time.Duration
	IdleTimeout          time.Duration
	// MaxConnections bounds the client connections served at once (0: from
	// the open-file limit, see maxConnections); MaxConnectionsPerIP those
	// from one address (0: no bound). One over either is closed as soon as
	// accepted.
	MaxConnections      int
	MaxConnectionsPerIP int
	// ShutdownTimeout bounds the drain on SIGTERM; 0 does not wait.
	ShutdownTimeout time.Duration

	// DefaultSubscriptionMode is the subscriptionMode of a pop that names
	// none ("" = all), as Queen's DEFAULT_SUBSCRIPTION_MODE.
	DefaultSubscriptionMode string

	LogLevel  string
	LogFormat string
	// PprofAddr, when set, serves net/http/pprof there (e.g. 127.0.0.1:6060).
	PprofAddr string

	// fromFlag records the settings (by variable) given by a flag, so that
	// an error names the flag the operator typed.
	fromFlag map[string]string

	// Auth is the JWT configuration (JWT_* variables; no flags, so that
	// secrets stay out of process listings).
	Auth auth.Config
	// EncryptionKey is QUEEN_ENCRYPTION_KEY (no flag, as a secret): 64 hex
	// characters, or empty for no payload encryption.
	EncryptionKey string

	// dedupCacheBytes, when > 0, replaces DedupCacheMB << 20 as the dedup
	// cache's budget: tests use it for budgets below 1 MiB.
	dedupCacheBytes int64
	// dedupCacheHotHashes, when > 0, is cache.Config.HotHashes (tests: a
	// small exact tier puts most of each window in filters).
	dedupCacheHotHashes int

	// statsFlush, when > 0, replaces MetricsAggregateSeconds (tests).
	statsFlush time.Duration
	// onRegistry is a test hook: called with the actor registry at start.
	onRegistry func(*actor.Registry)
	// noUnlockedDups is a test switch: actor.Config.NoUnlockedDuplicates.
	noUnlockedDups bool
	// beforeBatch is a test hook passed to actor.Config.BeforeBatch.
	beforeBatch func(queue, partition string, items int)

	// listening, when set, receives the listen address as soon as the port
	// is open (before the database is reached).
	listening func(addr string)
	// connectRetryMax, when > 0, replaces the longest wait between two
	// attempts to reach the database at start (tests shorten it).
	connectRetryMax time.Duration
}

// The groups of settings, in the order the help (regina -h) lists them.
const (
	groupServer        = "Server"
	groupDatabase      = "Database"
	groupDedup         = "Dedup and cache"
	groupConsumers     = "Consumers"
	groupAuth          = "Auth"
	groupEncryption    = "Encryption"
	groupLimits        = "Limits"
	groupObservability = "Observability"
)

var groupOrder = []string{groupServer, groupDatabase, groupDedup, groupConsumers, groupAuth, groupEncryption,
	groupLimits, groupObservability}

// setting is one configuration entry: its variable, its flag, its group in
// the help, its default (the one place defaults live), one line of help, and
// how to read and check it.
type setting struct {
	env, flag, group, def, help string
	// field points at the Config field: *string, *int, *bool or
	// *time.Duration (read as whole milliseconds).
	field func(*Config) any
	// min and max bound an int or a duration in ms (max 0: no bound).
	min, max int
	// oneOf lists the values a string may take (nil: any).
	oneOf []string
	// zeroIsValue marks a setting whose zero value means something of its
	// own (a free port, no timeout, off): WithDefaults leaves it alone.
	zeroIsValue bool
	// check adds a check of its own.
	check func(c *Config) error
}

var settings = []setting{
	{env: "HOST", group: groupServer, flag: "host", def: "0.0.0.0", help: "address to listen on",
		field: func(c *Config) any { return &c.Host }},
	{env: "PORT", group: groupServer, flag: "port", def: "6632", help: "HTTP port (0 picks a free one)", max: 65535, zeroIsValue: true,
		field: func(c *Config) any { return &c.Port }},
	{env: "DATABASE_URL", group: groupDatabase, flag: "database-url", help: "PostgreSQL connection string; when empty it is built from PG_*",
		field: func(c *Config) any { return &c.DatabaseURL }, check: checkDatabaseURL},
	{env: "QUEEN_SCHEMA", group: groupDatabase, flag: "schema", def: "queen", help: "PostgreSQL schema holding Regina's tables",
		field: func(c *Config) any { return &c.Schema }, check: func(c *Config) error {
			if c.Schema == "" || strings.ContainsAny(c.Schema, "\"\x00") {
				return fmt.Errorf("%q is not a usable schema name", c.Schema)
			}
			return nil
		}},
	{env: "DB_POOL_SIZE", group: groupDatabase, flag: "db-pool-size", def: "16", help: "PostgreSQL connections", min: 1,
		field: func(c *Config) any { return &c.PoolSize }},
	{env: "DB_STATEMENT_TIMEOUT", group: groupDatabase, flag: "db-statement-timeout", def: "30000", zeroIsValue: true,
		help: "statement timeout in ms (0 = server default)", field: func(c *Config) any { return &c.StatementTimeout }},
	{env: "DB_CITUS", group: groupDatabase, flag: "db-citus", def: "auto",
		help:  "run on Citus (docs/scaling.md): auto (when the database has the citus extension), on or off",
		oneOf: []string{"auto", "on", "off"}, field: func(c *Config) any { return &c.Citus }},
	{env: "RETENTION_INTERVAL", group: groupDatabase, flag: "retention-interval", def: "300000", help: "retention pass interval in ms", min: 1,
		field: func(c *Config) any { return &c.RetentionInterval }},
	{env: "RETENTION_BATCH_SIZE", group: groupDatabase, flag: "retention-batch-size", def: "1000", help: "rows deleted per retention step",
		min: 1, field: func(c *Config) any { return &c.RetentionBatchSize }},
	{env: "METRICS_SAMPLE_INTERVAL_MS", group: groupObservability, flag: "metrics-sample-interval", def: "1000",
		help: "ms between process samples (CPU, memory, pool) for the analytics", min: 100,
		field: func(c *Config) any { return &c.MetricsSampleInterval }},
	{env: "METRICS_AGGREGATE_INTERVAL_S", group: groupObservability, flag: "metrics-aggregate-interval", def: "60",
		help: "seconds between writes of the status and analytics counters", min: 1,
		field: func(c *Config) any { return &c.MetricsAggregateSeconds }},
	{env: "METRICS_RETENTION_DAYS", group: groupObservability, flag: "metrics-retention-days", def: "90",
		help: "days the status and analytics counters are kept", min: 1,
		field: func(c *Config) any { return &c.MetricsRetentionDays }},
	{env: "EVICTION_INTERVAL", group: groupConsumers, flag: "eviction-interval", def: "60000",
		help: "ms between maxWaitTimeSeconds eviction passes", min: 1,
		field: func(c *Config) any { return &c.EvictionInterval }},
	{env: "CURSOR_VACUUM_INTERVAL", group: groupConsumers, flag: "cursor-vacuum-interval", def: "10000", zeroIsValue: true,
		help:  "ms between VACUUMs of the cursor table, which keep pops fast beside long transactions (0 = off; not on Citus)",
		field: func(c *Config) any { return &c.CursorVacuumInterval }},
	{env: "EVICTION_BATCH_SIZE", group: groupConsumers, flag: "eviction-batch-size", def: "1000",
		help: "messages an eviction pass deletes at most (and segments per DELETE)", min: 1,
		field: func(c *Config) any { return &c.EvictionBatchSize }},
	{env: "RETENTION_SIDECAR_MIN_SECONDS", group: groupDedup, flag: "retention-sidecar-min-seconds", def: "900",
		help: "keep every segment's hashes at least this long (acks resolve through them)", min: 1,
		field: func(c *Config) any { return &c.RetentionSidecarMinSeconds }},
	{env: "RETENTION_SIDECAR_CHILD_SECONDS", group: groupDedup, flag: "retention-sidecar-child-seconds", def: "0", zeroIsValue: true,
		help: "time slice of one child of the hash sidecar (dropped whole once every window has passed it); " +
			"0 = chosen from the longest window (300 s for one hour, 3600 s for a day)",
		field: func(c *Config) any { return &c.RetentionSidecarChildSeconds }, check: func(c *Config) error {
			if n := c.RetentionSidecarChildSeconds; n != 0 && n < sqlstore.MinSidecarChildSeconds {
				return fmt.Errorf("%d is neither 0 (chosen from the longest window) nor at least %d seconds",
					n, sqlstore.MinSidecarChildSeconds)
			}
			return nil
		}},
	{env: "MAINTENANCE_REFRESH", group: groupServer, flag: "maintenance-refresh", def: "1000",
		help: "ms between reads of the maintenance switches (set through another broker)", min: 1,
		field: func(c *Config) any { return &c.MaintenanceRefresh }},
	{env: "QUEEN_DEDUP_CACHE", group: groupDedup, flag: "dedup-cache", def: "true", help: "in-window hash cache on or off",
		zeroIsValue: true, field: func(c *Config) any { return &c.DedupCache }},
	{env: "QUEEN_DEDUP_CACHE_MB", group: groupDedup, flag: "dedup-cache-mb", def: "512", help: "hash cache memory budget in MiB", min: 1,
		field: func(c *Config) any { return &c.DedupCacheMB }},
	{env: "MEMORY_LIMIT_MB", group: groupDedup, flag: "memory-limit-mb", def: "0", zeroIsValue: true,
		help: "Go memory limit in MiB; 0 = the dedup cache budget + " + strconv.Itoa(memoryOverheadMB) +
			" MiB (GOMEMLIMIT, when set, wins)",
		field: func(c *Config) any { return &c.MemoryLimitMB }},
	{env: "MAILBOX_MAX_ITEMS", group: groupLimits, flag: "mailbox-max-items", def: "10000", help: "items waiting per partition before 503",
		min: 1, field: func(c *Config) any { return &c.MailboxMaxItems }},
	{env: "MAILBOX_MAX_BYTES", group: groupLimits, flag: "mailbox-max-bytes", def: "67108864",
		help: "payload bytes waiting per partition before 503", min: 1,
		field: func(c *Config) any { return &c.MailboxMaxBytes }},
	{env: "BATCH_MAX_ITEMS", group: groupLimits, flag: "batch-max-items", def: "1000", help: "items per push transaction", min: 1,
		field: func(c *Config) any { return &c.BatchMaxItems }},
	{env: "BATCH_MAX_BYTES", group: groupLimits, flag: "batch-max-bytes", def: "8388608", help: "payload bytes per push transaction", min: 1,
		field: func(c *Config) any { return &c.BatchMaxBytes }},
	{env: "PUSH_SHAPE", group: groupDatabase, flag: "push-shape", def: "packed",
		help:  "how ready batches of several partitions reach PostgreSQL: packed (one transaction), pipelined (one round trip, a transaction each) or single",
		oneOf: []string{"packed", "pipelined", "single"}, field: func(c *Config) any { return &c.PushShape }},
	{env: "PUSH_PACK_SENDERS", group: groupDatabase, flag: "push-pack-senders", def: "4",
		help: "packed push transactions in flight at once (batches ready meanwhile share the next one)", min: 1,
		field: func(c *Config) any { return &c.PackSenders }},
	{env: "PUSH_PACK_MAX_PARTITIONS", group: groupDatabase, flag: "push-pack-max-partitions", def: "32",
		help: "partitions per packed push transaction", min: 1, field: func(c *Config) any { return &c.PackMaxPartitions }},
	{env: "PUSH_PACK_WAIT_US", group: groupDatabase, flag: "push-pack-wait-us", def: "0", zeroIsValue: true,
		help:  "microseconds a packed sender waits for more batches (0: never, a lone batch goes at once)",
		field: func(c *Config) any { return &c.PackWaitMicros }},
	{env: "CONSUME_SENDERS", group: groupConsumers, flag: "consume-senders", def: "4",
		help: "pop (and ack) transactions in flight at once; requests arriving meanwhile share the next one", min: 1,
		field: func(c *Config) any { return &c.ConsumeSenders }},
	{env: "CONSUME_MAX_BATCH", group: groupConsumers, flag: "consume-max-batch", def: "64",
		help: "pop (and ack) requests per shared transaction; 1 = each in its own", min: 1,
		field: func(c *Config) any { return &c.ConsumeMaxBatch }},
	{env: "ACTOR_IDLE_TIMEOUT", group: groupServer, flag: "actor-idle-timeout", def: "30000",
		help: "ms before an idle partition actor retires", min: 1, field: func(c *Config) any { return &c.ActorIdle }},
	{env: "MAX_BODY_BYTES", group: groupLimits, flag: "max-body-bytes", def: "67108864", help: "largest request body; larger gets 413",
		min: 1024, field: func(c *Config) any { return &c.MaxBodyBytes }},
	{env: "MAX_BODY_BYTES_IN_FLIGHT", group: groupLimits, flag: "max-body-bytes-in-flight", def: "134217728",
		help: "request body bytes held at once (read, decoded, handled); a body finding no room within " +
			"HTTP_READ_TIMEOUT gets a retryable 503; at least MAX_BODY_BYTES",
		min: 1024, field: func(c *Config) any { return &c.MaxBodyBytesInFlight }, check: func(c *Config) error {
			if c.MaxBodyBytesInFlight < c.MaxBodyBytes {
				return fmt.Errorf("%d is below MAX_BODY_BYTES (%d): a body of that size could never be read",
					c.MaxBodyBytesInFlight, c.MaxBodyBytes)
			}
			return nil
		}},
	{env: "HTTP_READ_TIMEOUT", group: groupLimits, flag: "http-read-timeout", def: "60000",
		help: "ms to read one request (headers and body); slow clients are cut off", min: 1,
		field: func(c *Config) any { return &c.ReadTimeout }},
	{env: "HTTP_IDLE_TIMEOUT", group: groupLimits, flag: "http-idle-timeout", def: "120000",
		help: "ms before an idle keep-alive connection is closed", min: 1,
		field: func(c *Config) any { return &c.IdleTimeout }},
	{env: "MAX_CONNECTIONS", group: groupLimits, flag: "max-connections", def: "0", zeroIsValue: true,
		help: "client connections served at once; more are closed as soon as accepted; 0 = from the open-file limit " +
			"(RLIMIT_NOFILE - DB_POOL_SIZE - 64, at most 10000)",
		field: func(c *Config) any { return &c.MaxConnections }},
	{env: "MAX_CONNECTIONS_PER_IP", group: groupLimits, flag: "max-connections-per-ip", def: "1000", zeroIsValue: true,
		help:  "client connections served at once from one address (0 = no bound; behind a proxy all clients share one)",
		field: func(c *Config) any { return &c.MaxConnectionsPerIP }},
	{env: "SHUTDOWN_TIMEOUT", group: groupServer, flag: "shutdown-timeout", def: "30000", help: "ms to drain on SIGTERM",
		zeroIsValue: true, field: func(c *Config) any { return &c.ShutdownTimeout }},
	{env: "DEFAULT_SUBSCRIPTION_MODE", group: groupConsumers, flag: "default-subscription-mode", zeroIsValue: true,
		help:  "subscriptionMode of a pop that names none: all, from_beginning, new or new-only (empty = all)",
		field: func(c *Config) any { return &c.DefaultSubscriptionMode }, check: func(c *Config) error {
			_, err := wire.SubscriptionSkipsHistory(c.DefaultSubscriptionMode)
			return err
		}},
	{env: "LOG_LEVEL", group: groupObservability, flag: "log-level", def: "info", help: "debug, info, warn or error",
		oneOf: []string{"debug", "info", "warn", "error"}, field: func(c *Config) any { return &c.LogLevel }},
	{env: "PPROF_ADDR", group: groupObservability, flag: "pprof-addr", zeroIsValue: true,
		help:  "serve Go profiling (net/http/pprof) on this address, e.g. 127.0.0.1:6060; empty = off",
		field: func(c *Config) any { return &c.PprofAddr }},
	{env: "LOG_FORMAT", group: groupObservability, flag: "log-format", def: "auto", help: "json, console or auto (console on a terminal)",
		oneOf: []string{"auto", "json", "console"}, field: func(c *Config) any { return &c.LogFormat }},
}

// pgVars are the upstream-compatible parts of the database URL, used when
// DATABASE_URL is empty (they have no Config field of their own).
var pgVars = []struct{ env, flag, typ, def, help string }{
	{"PG_HOST", "pg-host", "string", "127.0.0.1", "server host, when DATABASE_URL is empty"},
	{"PG_PORT", "pg-port", "int", "5432", "server port, when DATABASE_URL is empty"},
	{"PG_USER", "pg-user", "string", "postgres", "user, when DATABASE_URL is empty"},
	{"PG_PASSWORD", "pg-password", "string", "", "password, when DATABASE_URL is empty"},
	{"PG_DB", "pg-db", "string", "postgres", "database, when DATABASE_URL is empty"},
}

// encryptionHelp is the help line of QUEEN_ENCRYPTION_KEY (crypt.KeyEnv).
const encryptionHelp = "64 hex characters (a 32-byte AES-256-GCM key) encrypting payloads at rest; empty: no encryption"

// typeName is the kind of value the setting takes, as the help shows it.
func (s *setting) typeName() string {
	switch s.field(&Config{}).(type) {
	case *int:
		return "int"
	case *bool:
		return "bool"
	case *time.Duration:
		return "ms"
	}
	return "string"
}

// helpEntry is one line pair of the help: "-flag type (ENV, default d)" or,
// for a variable without a flag, "ENV type (default d)", then the help.
type helpEntry struct{ flag, typ, env, def, help string }

func (e helpEntry) write(w io.Writer) {
	var head string
	switch {
	case e.flag != "" && e.def != "":
		head = fmt.Sprintf("-%s %s (%s, default %s)", e.flag, e.typ, e.env, e.def)
	case e.flag != "":
		head = fmt.Sprintf("-%s %s (%s)", e.flag, e.typ, e.env)
	case e.def != "":
		head = fmt.Sprintf("%s %s (default %s)", e.env, e.typ, e.def)
	default:
		head = e.env + " " + e.typ
	}
	fmt.Fprintf(w, "  %s\n      %s\n", head, e.help)
}

// helpEntries are every setting the broker reads, by group: the settings
// table, the PG_* parts of the database URL, the JWT_* variables
// (auth.Settings) and the encryption key. Variables without a flag (secrets:
// they would show in process listings) have an empty flag.
func helpEntries() map[string][]helpEntry {
	by := make(map[string][]helpEntry)
	for i := range settings {
		s := &settings[i]
		by[s.group] = append(by[s.group], helpEntry{s.flag, s.typeName(), s.env, s.def, s.help})
		if s.env == "DATABASE_URL" {
			for _, p := range pgVars {
				by[s.group] = append(by[s.group], helpEntry{p.flag, p.typ, p.env, p.def, p.help})
			}
		}
	}
	for _, a := range auth.Settings {
		by[groupAuth] = append(by[groupAuth], helpEntry{"", a.Type, a.Env, a.Default, a.Help})
	}
	by[groupEncryption] = append(by[groupEncryption], helpEntry{"", "string", crypt.KeyEnv, "", encryptionHelp})
	return by
}

// writeHelp writes regina -h: every setting, grouped, each with its type,
// default, variable and one line.
func writeHelp(w io.Writer) {
	fmt.Fprint(w, `Usage: regina [flags]

Regina serves the Queen MQ HTTP API on PostgreSQL. Every setting below is an
environment variable; most are also a flag (-port 8080 or -port=8080), and a
flag wins over its variable. An empty variable is unset; an unset setting
takes its default. Type ms is a whole number of milliseconds. Invalid values
are all reported at start, each naming its variable, and the broker exits.
`)
	by := helpEntries()
	for _, g := range groupOrder {
		fmt.Fprintf(w, "\n%s", g)
		switch g {
		case groupAuth, groupEncryption:
			fmt.Fprint(w, " (variables only: secrets stay out of process listings)")
		}
		fmt.Fprintln(w, ":")
		for _, e := range by[g] {
			e.write(w)
		}
	}
	fmt.Fprintln(w, "\nGOMEMLIMIT, when set, is Go's memory limit and wins over MEMORY_LIMIT_MB. The PostgreSQL driver\n"+
		"(pgx) also reads the libpq variables (PGSSLMODE, PGPASSFILE, PGTARGETSESSIONATTRS, ...).")
}

// parse reads v into the setting's field; the only error is a value of the
// wrong kind (ranges are Validate's).
func (s *setting) parse(c *Config, v string) error {
	switch p := s.field(c).(type) {
	case *string:
		*p = v
	case *int:
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("%q is not a whole number", v)
		}
		*p = n
	case *time.Duration:
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("%q is not a whole number of milliseconds", v)
		}
		*p = time.Duration(n) * time.Millisecond
	case *bool:
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "1", "true", "yes", "on":
			*p = true
		case "0", "false", "no", "off":
			*p = false
		default:
			return fmt.Errorf("%q is not a boolean (true or false)", v)
		}
	default:
		panic(fmt.Sprintf("setting %s: field of type %T", s.env, p))
	}
	return nil
}

// isZero reports whether the setting's field holds its zero value.
func (s *setting) isZero(c *Config) bool {
	switch p := s.field(c).(type) {
	case *string:
		return *p == ""
	case *int:
		return *p == 0
	case *time.Duration:
		return *p == 0
	case *bool:
		return !*p
	}
	return false
}

// validate checks the setting's value.
func (s *setting) validate(c *Config) error {
	switch p := s.field(c).(type) {
	case *int:
		if *p < s.min {
			return fmt.Errorf("%d is below the minimum %d", *p, s.min)
		}
		if s.max > 0 && *p > s.max {
			return fmt.Errorf("%d is above the maximum %d", *p, s.max)
		}
	case *time.Duration:
		ms := p.Milliseconds()
		if ms < int64(s.min) {
			return fmt.Errorf("%d ms is below the minimum %d ms", ms, s.min)
		}
	case *string:
		if s.oneOf != nil && !contains(s.oneOf, *p) {
			return fmt.Errorf("%q is not one of %s", *p, strings.Join(s.oneOf, ", "))
		}
	}
	if s.check != nil {
		return s.check(c)
	}
	return nil
}

func contains(list []string, v string) bool {
	return slices.Contains(list, v)
}

// checkDatabaseURL accepts a postgres:// URL or the key=value form.
func checkDatabaseURL(c *Config) error {
	u := c.DatabaseURL
	if strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") || strings.Contains(u, "=") {
		return nil
	}
	return errors.New("want postgres://user@host:port/db or key=value form")
}

// source names where a setting's value came from: "PORT", or
// "flag -port (PORT)" when a flag gave it.
func (c Config) source(env, flagName string) string {
	if f, ok := c.fromFlag[env]; ok && f == flagName {
		return "flag -" + flagName + " (" + env + ")"
	}
	return env
}

// WithDefaults returns c with every unset setting at its default. A setting
// whose zero value means something of its own (PORT 0 picks a free port,
// DB_STATEMENT_TIMEOUT and SHUTDOWN_TIMEOUT 0 mean none,
// RETENTION_SIDECAR_CHILD_SECONDS 0 chooses the width from the depth,
// QUEEN_DEDUP_CACHE false is off, PPROF_ADDR empty is off) keeps it. An empty DatabaseURL
// becomes the one the PG_* defaults give.
func (c Config) WithDefaults() Config {
	for i := range settings {
		s := &settings[i]
		if s.zeroIsValue || s.def == "" || !s.isZero(&c) {
			continue
		}
		if err := s.parse(&c, s.def); err != nil {
			panic(fmt.Sprintf("default of %s: %v", s.env, err))
		}
	}
	if c.DatabaseURL == "" {
		vals := map[string]string{}
		for _, p := range pgVars {
			vals[p.env] = p.def
		}
		c.DatabaseURL = pgURL(vals)
	}
	if c.Auth.Algorithm == "" {
		// Not from LoadConfig (auth.FromEnv always names one): auth's
		// defaults, with auth off unless Enabled says otherwise.
		c.Auth = c.Auth.WithDefaults()
	}
	return c
}

// Validate reports every setting that cannot be honoured, all at once
// (joined), each naming its variable and, when a flag gave it, the flag.
func (c Config) Validate() error { return c.validate(nil) }

// validate is Validate, skipping the settings (by variable) whose value
// could not be read at all (LoadConfig reported those already).
func (c Config) validate(unreadable map[string]bool) error {
	var errs []error
	for i := range settings {
		s := &settings[i]
		if unreadable[s.env] {
			continue
		}
		if err := s.validate(&c); err != nil {
			errs = append(errs, fmt.Errorf("invalid %s: %w", c.source(s.env, s.flag), err))
		}
	}
	if err := c.Auth.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("invalid JWT settings: %w", err))
	}
	if c.EncryptionKey != "" {
		if _, err := crypt.ParseKey(c.EncryptionKey); err != nil {
			errs = append(errs, fmt.Errorf("invalid %s: %w", crypt.KeyEnv, err))
		}
	}
	return errors.Join(errs...)
}

// LoadConfig reads the configuration from getenv and args (without the
// program name): a flag wins over its variable, an empty variable is unset,
// an unset setting takes its default. Errors name the variable (and the
// flag) at fault, every one of them at once.
func LoadConfig(args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("regina", flag.ContinueOnError)
	fs.SetOutput(usage)
	// Every flag is read as text: parse gives it its type and reports a bad
	// value with the variable's name, as for the environment. -h prints
	// writeHelp; a bad flag, its error and a pointer to -h.
	fs.Usage = func() {}
	flagVals := make(map[string]*string)
	for _, s := range settings {
		flagVals[s.flag] = fs.String(s.flag, "", s.help)
	}
	for _, p := range pgVars {
		flagVals[p.flag] = fs.String(p.flag, "", p.help)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeHelp(usage)
		} else {
			fmt.Fprintln(usage, "regina -h lists every setting")
		}
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	c.fromFlag = make(map[string]string)
	fs.Visit(func(f *flag.Flag) {
		for _, s := range settings {
			if s.flag == f.Name {
				c.fromFlag[s.env] = f.Name
			}
		}
		for _, p := range pgVars {
			if p.flag == f.Name {
				c.fromFlag[p.env] = f.Name
			}
		}
	})
	lookup := func(env, fl, def string) string {
		if _, ok := c.fromFlag[env]; ok {
			return *flagVals[fl]
		}
		if v := getenv(env); v != "" {
			return v
		}
		return def
	}

	var errs []error
	unreadable := make(map[string]bool)
	for i := range settings {
		s := &settings[i]
		if err := s.parse(&c, lookup(s.env, s.flag, s.def)); err != nil {
			errs = append(errs, fmt.Errorf("invalid %s: %w", c.source(s.env, s.flag), err))
			unreadable[s.env] = true
		}
	}
	// As for every other variable, empty means unset.
	ac, err := auth.FromEnv(func(k string) (string, bool) { v := getenv(k); return v, v != "" })
	if err != nil {
		errs = append(errs, fmt.Errorf("invalid JWT settings: %w", err))
	}
	c.Auth = ac
	c.EncryptionKey = getenv(crypt.KeyEnv)
	if c.DatabaseURL == "" {
		vals := make(map[string]string)
		for _, p := range pgVars {
			v := lookup(p.env, p.flag, p.def)
			if p.env == "PG_PORT" {
				if n, err := strconv.Atoi(v); err != nil || n <= 0 || n > 65535 {
					errs = append(errs, fmt.Errorf("invalid %s: %q is not a TCP port", c.source(p.env, p.flag), v))
				}
			}
			vals[p.env] = v
		}
		c.DatabaseURL = pgURL(vals)
	}
	if len(c.fromFlag) == 0 {
		c.fromFlag = nil
	}
	if err := c.validate(unreadable); err != nil {
		errs = append(errs, err)
	}
	return c, errors.Join(errs...)
}

// pgURL builds the database URL from the PG_* values.
func pgURL(vals map[string]string) string {
	u := url.URL{Scheme: "postgres", Host: net.JoinHostPort(vals["PG_HOST"], vals["PG_PORT"]), Path: "/" + vals["PG_DB"]}
	if vals["PG_PASSWORD"] != "" {
		u.User = url.UserPassword(vals["PG_USER"], vals["PG_PASSWORD"])
	} else {
		u.User = url.User(vals["PG_USER"])
	}
	return u.String()
}

// cacheBudget is the dedup cache's budget in bytes.
func (c Config) cacheBudget() int64 {
	if c.dedupCacheBytes > 0 {
		return c.dedupCacheBytes
	}
	return int64(c.DedupCacheMB) << 20
}

// Addr returns the listen address.
func (c Config) Addr() string { return net.JoinHostPort(c.Host, strconv.Itoa(c.Port)) }

func envOrEmpty(k string) string { return os.Getenv(k) }
