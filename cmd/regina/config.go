package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Config is everything the broker reads at start, from environment variables
// and flags of the same meaning (a flag wins over its variable).
type Config struct {
	Host             string
	Port             int
	DatabaseURL      string
	Schema           string
	PoolSize         int
	StatementTimeout time.Duration

	RetentionInterval  time.Duration
	RetentionBatchSize int

	DedupCache   bool
	DedupCacheMB int

	MailboxMaxItems int
	MailboxMaxBytes int
	BatchMaxItems   int
	BatchMaxBytes   int
	ActorIdle       time.Duration

	MaxBodyBytes    int
	ReadTimeout     time.Duration
	IdleTimeout     time.Duration
	ShutdownTimeout time.Duration

	LogLevel  string
	LogFormat string
	// PprofAddr, when set, serves net/http/pprof there (e.g. 127.0.0.1:6060).
	PprofAddr string

	// dedupCacheBytes, when > 0, replaces DedupCacheMB << 20 as the dedup
	// cache's budget: tests use it for budgets below 1 MiB.
	dedupCacheBytes int64

	// beforeBatch is a test hook passed to actor.Config.BeforeBatch.
	beforeBatch func(queue, partition string, items int)
}

// setting is one configuration entry: its variable, its flag and how to
// parse it into the Config.
type setting struct {
	env, flag, def, help string
	set                  func(c *Config, v string) error
}

func intSetting(min int, dst func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("%q is not a whole number", v)
		}
		if n < min {
			return fmt.Errorf("%d is below the minimum %d", n, min)
		}
		*dst(c) = n
		return nil
	}
}

func msSetting(min int, dst func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("%q is not a whole number of milliseconds", v)
		}
		if n < min {
			return fmt.Errorf("%d ms is below the minimum %d ms", n, min)
		}
		*dst(c) = time.Duration(n) * time.Millisecond
		return nil
	}
}

func boolSetting(dst func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "1", "true", "yes", "on":
			*dst(c) = true
		case "0", "false", "no", "off":
			*dst(c) = false
		default:
			return fmt.Errorf("%q is not a boolean (true or false)", v)
		}
		return nil
	}
}

func stringSetting(oneOf []string, dst func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error {
		if oneOf != nil {
			ok := false
			for _, o := range oneOf {
				ok = ok || v == o
			}
			if !ok {
				return fmt.Errorf("%q is not one of %s", v, strings.Join(oneOf, ", "))
			}
		}
		*dst(c) = v
		return nil
	}
}

var settings = []setting{
	{"HOST", "host", "0.0.0.0", "address to listen on", stringSetting(nil, func(c *Config) *string { return &c.Host })},
	{"PORT", "port", "6632", "HTTP port", func(c *Config, v string) error {
		if err := intSetting(0, func(c *Config) *int { return &c.Port })(c, v); err != nil {
			return err
		}
		if c.Port > 65535 {
			return fmt.Errorf("%d is not a TCP port", c.Port)
		}
		return nil
	}},
	{"DATABASE_URL", "database-url", "", "PostgreSQL connection string; when empty it is built from PG_*", stringSetting(nil, func(c *Config) *string { return &c.DatabaseURL })},
	{"QUEEN_SCHEMA", "schema", "queen", "PostgreSQL schema holding Regina's tables", func(c *Config, v string) error {
		if v == "" || strings.ContainsAny(v, "\"\x00") {
			return fmt.Errorf("%q is not a usable schema name", v)
		}
		c.Schema = v
		return nil
	}},
	{"DB_POOL_SIZE", "db-pool-size", "16", "PostgreSQL connections", intSetting(1, func(c *Config) *int { return &c.PoolSize })},
	{"DB_STATEMENT_TIMEOUT", "db-statement-timeout", "30000", "statement timeout in ms (0 = server default)", msSetting(0, func(c *Config) *time.Duration { return &c.StatementTimeout })},
	{"RETENTION_INTERVAL", "retention-interval", "300000", "retention pass interval in ms", msSetting(1, func(c *Config) *time.Duration { return &c.RetentionInterval })},
	{"RETENTION_BATCH_SIZE", "retention-batch-size", "1000", "rows deleted per retention step", intSetting(1, func(c *Config) *int { return &c.RetentionBatchSize })},
	{"QUEEN_DEDUP_CACHE", "dedup-cache", "true", "in-window hash cache on or off", boolSetting(func(c *Config) *bool { return &c.DedupCache })},
	{"QUEEN_DEDUP_CACHE_MB", "dedup-cache-mb", "512", "hash cache memory budget in MiB", intSetting(1, func(c *Config) *int { return &c.DedupCacheMB })},
	{"MAILBOX_MAX_ITEMS", "mailbox-max-items", "10000", "items waiting per partition before 503", intSetting(1, func(c *Config) *int { return &c.MailboxMaxItems })},
	{"MAILBOX_MAX_BYTES", "mailbox-max-bytes", "67108864", "payload bytes waiting per partition before 503", intSetting(1, func(c *Config) *int { return &c.MailboxMaxBytes })},
	{"BATCH_MAX_ITEMS", "batch-max-items", "1000", "items per push transaction", intSetting(1, func(c *Config) *int { return &c.BatchMaxItems })},
	{"BATCH_MAX_BYTES", "batch-max-bytes", "8388608", "payload bytes per push transaction", intSetting(1, func(c *Config) *int { return &c.BatchMaxBytes })},
	{"ACTOR_IDLE_TIMEOUT", "actor-idle-timeout", "30000", "ms before an idle partition actor retires", msSetting(1, func(c *Config) *time.Duration { return &c.ActorIdle })},
	{"MAX_BODY_BYTES", "max-body-bytes", "67108864", "largest request body; larger gets 413", intSetting(1024, func(c *Config) *int { return &c.MaxBodyBytes })},
	{"HTTP_READ_TIMEOUT", "http-read-timeout", "60000", "ms to read one request (headers and body); slow clients are cut off", msSetting(1, func(c *Config) *time.Duration { return &c.ReadTimeout })},
	{"HTTP_IDLE_TIMEOUT", "http-idle-timeout", "120000", "ms before an idle keep-alive connection is closed", msSetting(1, func(c *Config) *time.Duration { return &c.IdleTimeout })},
	{"SHUTDOWN_TIMEOUT", "shutdown-timeout", "30000", "ms to drain on SIGTERM", msSetting(0, func(c *Config) *time.Duration { return &c.ShutdownTimeout })},
	{"LOG_LEVEL", "log-level", "info", "debug, info, warn or error", stringSetting([]string{"debug", "info", "warn", "error"}, func(c *Config) *string { return &c.LogLevel })},
	{"PPROF_ADDR", "pprof-addr", "", "serve Go profiling (net/http/pprof) on this address, e.g. 127.0.0.1:6060; empty = off", stringSetting(nil, func(c *Config) *string { return &c.PprofAddr })},
	{"LOG_FORMAT", "log-format", "auto", "json, console or auto (console on a terminal)", stringSetting([]string{"auto", "json", "console"}, func(c *Config) *string { return &c.LogFormat })},
}

// pgVars are the upstream-compatible parts of the database URL, used when
// DATABASE_URL is empty.
var pgVars = []struct{ env, flag, def string }{
	{"PG_HOST", "pg-host", "127.0.0.1"},
	{"PG_PORT", "pg-port", "5432"},
	{"PG_USER", "pg-user", "postgres"},
	{"PG_PASSWORD", "pg-password", ""},
	{"PG_DB", "pg-db", "postgres"},
}

// LoadConfig reads the configuration from getenv and args (without the
// program name). Errors name the variable or flag at fault.
func LoadConfig(args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("regina", flag.ContinueOnError)
	fs.SetOutput(usage)
	flagVals := make(map[string]*string)
	for _, s := range settings {
		flagVals[s.flag] = fs.String(s.flag, "", fmt.Sprintf("%s (env %s, default %q)", s.help, s.env, s.def))
	}
	for _, p := range pgVars {
		flagVals[p.flag] = fs.String(p.flag, "", fmt.Sprintf("used when DATABASE_URL is empty (env %s, default %q)", p.env, p.def))
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	lookup := func(env, fl, def string) (val, source string) {
		if set[fl] {
			return *flagVals[fl], "flag -" + fl
		}
		if v := getenv(env); v != "" {
			return v, env
		}
		return def, env
	}
	for _, s := range settings {
		v, src := lookup(s.env, s.flag, s.def)
		if err := s.set(&c, v); err != nil {
			return c, fmt.Errorf("invalid %s: %w", src, err)
		}
	}
	if c.DatabaseURL == "" {
		vals := make(map[string]string)
		for _, p := range pgVars {
			v, src := lookup(p.env, p.flag, p.def)
			if p.env == "PG_PORT" {
				if n, err := strconv.Atoi(v); err != nil || n <= 0 || n > 65535 {
					return c, fmt.Errorf("invalid %s: %q is not a TCP port", src, v)
				}
			}
			vals[p.env] = v
		}
		u := url.URL{Scheme: "postgres", Host: vals["PG_HOST"] + ":" + vals["PG_PORT"], Path: "/" + vals["PG_DB"]}
		if vals["PG_PASSWORD"] != "" {
			u.User = url.UserPassword(vals["PG_USER"], vals["PG_PASSWORD"])
		} else {
			u.User = url.User(vals["PG_USER"])
		}
		c.DatabaseURL = u.String()
	} else if !strings.HasPrefix(c.DatabaseURL, "postgres://") && !strings.HasPrefix(c.DatabaseURL, "postgresql://") &&
		!strings.Contains(c.DatabaseURL, "=") {
		return c, fmt.Errorf("invalid DATABASE_URL: want postgres://user@host:port/db or key=value form")
	}
	return c, nil
}

// Addr returns the listen address.
func (c Config) Addr() string { return net.JoinHostPort(c.Host, strconv.Itoa(c.Port)) }

func envOrEmpty(k string) string { return os.Getenv(k) }
