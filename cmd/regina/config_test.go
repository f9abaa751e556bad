package main

import (
	"bytes"
	"flag"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/internal/auth"
)

// configTestEnv is a fake environment: LoadConfig never sees the real one.
func configTestEnv(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func configTestLoad(t *testing.T, args []string, vars map[string]string) (Config, error) {
	t.Helper()
	return LoadConfig(args, configTestEnv(vars), io.Discard)
}

func TestLoadConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := configTestLoad(t, nil, nil)
	require.NoError(t, err)
	require.Equal(t, Config{
		Host:                         "0.0.0.0",
		Port:                         6632,
		DatabaseURL:                  "postgres://postgres@127.0.0.1:5432/postgres",
		Schema:                       "queen",
		PoolSize:                     16,
		StatementTimeout:             30 * time.Second,
		Citus:                        "auto",
		RetentionInterval:            300_000 * time.Millisecond,
		MetricsSampleInterval:        time.Second,
		MetricsAggregateSeconds:      60,
		MetricsRetentionDays:         90,
		RetentionBatchSize:           1000,
		RetentionSidecarMinSeconds:   900,
		RetentionSidecarChildSeconds: 0,
		EvictionInterval:             time.Minute,
		CursorVacuumInterval:         10 * time.Second,
		EvictionBatchSize:            1000,
		MaintenanceRefresh:           time.Second,
		DedupCache:                   true,
		DedupCacheMB:                 512,
		MailboxMaxItems:              10_000,
		MailboxMaxBytes:              64 << 20,
		BatchMaxItems:                1000,
		BatchMaxBytes:                8 << 20,
		ActorIdle:                    30 * time.Second,
		PushShape:                    "packed",
		PackSenders:                  4,
		PackMaxPartitions:            32,
		ConsumeSenders:               4,
		ConsumeMaxBatch:              64,
		MaxBodyBytes:                 64 << 20,
		MaxBodyBytesInFlight:         128 << 20,
		MaxConnectionsPerIP:          1000,
		ReadTimeout:                  60 * time.Second,
		IdleTimeout:                  120 * time.Second,
		ShutdownTimeout:              30 * time.Second,
		LogLevel:                     "info",
		LogFormat:                    "auto",
		Auth: auth.Config{Algorithm: auth.Auto, ClockSkew: auth.DefaultClockSkew, SkipPaths: auth.DefaultSkipPaths,
			JWKSRefreshInterval: auth.DefaultJWKSRefreshInterval, JWKSTimeout: auth.DefaultJWKSTimeout,
			JWKSMinRefresh: auth.DefaultJWKSMinRefresh},
	}, c)
	require.Equal(t, "0.0.0.0:6632", c.Addr())
}

func TestLoadConfigEmptyVariableMeansUnset(t *testing.T) {
	t.Parallel()
	c, err := configTestLoad(t, nil, map[string]string{"PORT": "", "QUEEN_SCHEMA": "", "DATABASE_URL": "", "PG_PORT": ""})
	require.NoError(t, err)
	require.Equal(t, 6632, c.Port)
	require.Equal(t, "queen", c.Schema)
	require.Equal(t, "postgres://postgres@127.0.0.1:5432/postgres", c.DatabaseURL)
}

func TestLoadConfigDatabaseURLAndPort(t *testing.T) {
	t.Parallel()
	const dsn = "postgres://app:pw@db.example:5433/regina?sslmode=disable"
	c, err := configTestLoad(t, nil, map[string]string{
		"DATABASE_URL": dsn,
		"PORT":         "7001",
		// Ignored when DATABASE_URL is set, even when invalid.
		"PG_HOST": "elsewhere",
		"PG_PORT": "not-a-port",
	})
	require.NoError(t, err)
	require.Equal(t, dsn, c.DatabaseURL)
	require.Equal(t, 7001, c.Port)
	require.Equal(t, "0.0.0.0:7001", c.Addr())
	require.Equal(t, "queen", c.Schema)
	require.True(t, c.DedupCache)
}

func TestLoadConfigDatabaseURLForms(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"postgres://u@h/db",
		"postgresql://u@h:5432/db",
		"host=db user=app dbname=regina",
	} {
		t.Run(dsn, func(t *testing.T) {
			t.Parallel()
			c, err := configTestLoad(t, nil, map[string]string{"DATABASE_URL": dsn})
			require.NoError(t, err)
			require.Equal(t, dsn, c.DatabaseURL)
		})
	}
}

func TestLoadConfigPGVars(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		vars     map[string]string
		args     []string
		want     string
		password string
	}{
		{
			name: "without password",
			vars: map[string]string{"PG_HOST": "db.internal", "PG_PORT": "6543", "PG_USER": "app", "PG_DB": "regina"},
			want: "postgres://app@db.internal:6543/regina",
		},
		{
			name:     "with password",
			vars:     map[string]string{"PG_HOST": "db.internal", "PG_USER": "app", "PG_PASSWORD": "s3cret", "PG_DB": "regina"},
			want:     "postgres://app:s3cret@db.internal:5432/regina",
			password: "s3cret",
		},
		{
			name:     "password with special characters",
			vars:     map[string]string{"PG_USER": "app", "PG_PASSWORD": "p@ss:w/rd?#%1 x"},
			password: "p@ss:w/rd?#%1 x",
		},
		{
			name:     "flags",
			vars:     map[string]string{"PG_HOST": "env-host", "PG_PASSWORD": "env-pw"},
			args:     []string{"-pg-host", "flag-host", "-pg-port=7777", "-pg-user", "fu", "-pg-password", "fp", "-pg-db", "fdb"},
			want:     "postgres://fu:fp@flag-host:7777/fdb",
			password: "fp",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := configTestLoad(t, tc.args, tc.vars)
			require.NoError(t, err)
			if tc.want != "" {
				require.Equal(t, tc.want, c.DatabaseURL)
			}
			u, err := url.Parse(c.DatabaseURL)
			require.NoError(t, err, c.DatabaseURL)
			require.Equal(t, "postgres", u.Scheme)
			pw, ok := u.User.Password()
			require.Equal(t, tc.password != "", ok)
			require.Equal(t, tc.password, pw, "password survives URL escaping in %s", c.DatabaseURL)
		})
	}

	t.Run("special characters are escaped", func(t *testing.T) {
		t.Parallel()
		c, err := configTestLoad(t, nil, map[string]string{"PG_USER": "app", "PG_PASSWORD": "p@ss:w/rd?#"})
		require.NoError(t, err)
		require.Equal(t, "postgres://app:p%40ss%3Aw%2Frd%3F%23@127.0.0.1:5432/postgres", c.DatabaseURL)
		u, err := url.Parse(c.DatabaseURL)
		require.NoError(t, err)
		require.Equal(t, "127.0.0.1:5432", u.Host)
		require.Equal(t, "/postgres", u.Path)
		require.Equal(t, "app", u.User.Username())
	})
}

func TestLoadConfigFlagBeatsEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"PORT":                 "7000",
		"HOST":                 "10.0.0.1",
		"DATABASE_URL":         "postgres://env@h/db",
		"QUEEN_DEDUP_CACHE":    "false",
		"RETENTION_INTERVAL":   "-5", // invalid, but the flag overrides it
		"RETENTION_BATCH_SIZE": "50",
		"LOG_LEVEL":            "debug",
	}
	c, err := configTestLoad(t, []string{
		"-port", "8000",
		"--host=127.0.0.1",
		"-database-url", "postgres://flag@h/db",
		"-dedup-cache=on",
		"-retention-interval", "1500",
		"-log-level", "warn",
	}, env)
	require.NoError(t, err)
	require.Equal(t, 8000, c.Port)
	require.Equal(t, "127.0.0.1", c.Host)
	require.Equal(t, "postgres://flag@h/db", c.DatabaseURL)
	require.True(t, c.DedupCache)
	require.Equal(t, 1500*time.Millisecond, c.RetentionInterval)
	require.Equal(t, "warn", c.LogLevel)
	require.Equal(t, 50, c.RetentionBatchSize, "variables without a flag still apply")
}

func TestLoadConfigValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env, value string
		check      func(t *testing.T, c Config)
	}{
		{"PORT", "0", func(t *testing.T, c Config) { require.Equal(t, 0, c.Port) }},
		{"PORT", "65535", func(t *testing.T, c Config) { require.Equal(t, 65535, c.Port) }},
		{"PORT", " 8080 ", func(t *testing.T, c Config) { require.Equal(t, 8080, c.Port) }},
		{"QUEEN_DEDUP_CACHE", "off", func(t *testing.T, c Config) { require.False(t, c.DedupCache) }},
		{"QUEEN_DEDUP_CACHE", "0", func(t *testing.T, c Config) { require.False(t, c.DedupCache) }},
		{"QUEEN_DEDUP_CACHE", "NO", func(t *testing.T, c Config) { require.False(t, c.DedupCache) }},
		{"QUEEN_DEDUP_CACHE", " Yes ", func(t *testing.T, c Config) { require.True(t, c.DedupCache) }},
		{"QUEEN_DEDUP_CACHE_MB", "1", func(t *testing.T, c Config) { require.Equal(t, 1, c.DedupCacheMB) }},
		{"MEMORY_LIMIT_MB", "300", func(t *testing.T, c Config) { require.Equal(t, 300, c.MemoryLimitMB) }},
		{"RETENTION_INTERVAL", "1", func(t *testing.T, c Config) { require.Equal(t, time.Millisecond, c.RetentionInterval) }},
		{"RETENTION_SIDECAR_CHILD_SECONDS", "60", func(t *testing.T, c Config) {
			require.Equal(t, 60, c.RetentionSidecarChildSeconds)
		}},
		{"RETENTION_SIDECAR_CHILD_SECONDS", "0", func(t *testing.T, c Config) {
			require.Zero(t, c.RetentionSidecarChildSeconds, "0 is a value of its own: chosen from the depth")
		}},
		{"DB_STATEMENT_TIMEOUT", "0", func(t *testing.T, c Config) { require.Zero(t, c.StatementTimeout) }},
		{"SHUTDOWN_TIMEOUT", "2500", func(t *testing.T, c Config) { require.Equal(t, 2500*time.Millisecond, c.ShutdownTimeout) }},
		{"MAX_BODY_BYTES", "1024", func(t *testing.T, c Config) { require.Equal(t, 1024, c.MaxBodyBytes) }},
		{"QUEEN_SCHEMA", "regina_test", func(t *testing.T, c Config) { require.Equal(t, "regina_test", c.Schema) }},
		{"LOG_LEVEL", "error", func(t *testing.T, c Config) { require.Equal(t, "error", c.LogLevel) }},
		{"LOG_FORMAT", "json", func(t *testing.T, c Config) { require.Equal(t, "json", c.LogFormat) }},
		{"DEFAULT_SUBSCRIPTION_MODE", "new-only", func(t *testing.T, c Config) {
			require.Equal(t, "new-only", c.DefaultSubscriptionMode)
		}},
		{"HOST", "127.0.0.1", func(t *testing.T, c Config) { require.Equal(t, "127.0.0.1:6632", c.Addr()) }},
	}
	for _, tc := range tests {
		t.Run(tc.env+"="+tc.value, func(t *testing.T) {
			t.Parallel()
			c, err := configTestLoad(t, nil, map[string]string{tc.env: tc.value})
			require.NoError(t, err)
			tc.check(t, c)
		})
	}
}

// TestConfigAddrIPv6 checks that Addr is something net.Listen accepts for an
// IPv6 HOST. Regression test: Addr used to join with a bare ":", so HOST=::1
// gave "::1:6632", which net.Listen rejects ("too many colons in address").
func TestConfigAddrIPv6(t *testing.T) {
	t.Parallel()
	for _, host := range []string{"::1", "::"} {
		t.Run(host, func(t *testing.T) {
			t.Parallel()
			c, err := configTestLoad(t, nil, map[string]string{"HOST": host})
			require.NoError(t, err)
			h, p, err := net.SplitHostPort(c.Addr())
			require.NoError(t, err, "Addr() = %q", c.Addr())
			require.Equal(t, host, h)
			require.Equal(t, "6632", p)
		})
	}
}

func TestLoadConfigInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env, flag, value string
	}{
		{"PORT", "port", "abc"},
		{"PORT", "port", "70000"},
		{"PORT", "port", "-1"},
		{"PORT", "port", "80.5"},
		{"RETENTION_INTERVAL", "retention-interval", "-5"},
		{"RETENTION_INTERVAL", "retention-interval", "0"},
		{"RETENTION_INTERVAL", "retention-interval", "5m"},
		{"RETENTION_BATCH_SIZE", "retention-batch-size", "0"},
		{"RETENTION_SIDECAR_CHILD_SECONDS", "retention-sidecar-child-seconds", "59"},
		{"RETENTION_SIDECAR_CHILD_SECONDS", "retention-sidecar-child-seconds", "1"},
		{"RETENTION_SIDECAR_CHILD_SECONDS", "retention-sidecar-child-seconds", "-60"},
		{"EVICTION_INTERVAL", "eviction-interval", "0"},
		{"EVICTION_BATCH_SIZE", "eviction-batch-size", "0"},
		{"QUEEN_DEDUP_CACHE", "dedup-cache", "maybe"},
		{"QUEEN_DEDUP_CACHE_MB", "dedup-cache-mb", "0"},
		{"QUEEN_DEDUP_CACHE_MB", "dedup-cache-mb", "lots"},
		{"MEMORY_LIMIT_MB", "memory-limit-mb", "-1"},
		{"LOG_LEVEL", "log-level", "loud"},
		{"LOG_LEVEL", "log-level", "INFO"},
		{"LOG_FORMAT", "log-format", "xml"},
		{"DEFAULT_SUBSCRIPTION_MODE", "default-subscription-mode", "latest"},
		{"DATABASE_URL", "database-url", "nonsense"},
		{"QUEEN_SCHEMA", "schema", `bad"name`},
		{"DB_POOL_SIZE", "db-pool-size", "0"},
		{"DB_STATEMENT_TIMEOUT", "db-statement-timeout", "-1"},
		{"MAILBOX_MAX_ITEMS", "mailbox-max-items", "0"},
		{"MAX_BODY_BYTES", "max-body-bytes", "1023"},
		{"SHUTDOWN_TIMEOUT", "shutdown-timeout", "soon"},
		{"PG_PORT", "pg-port", "0"},
		{"PG_PORT", "pg-port", "65536"},
		{"PG_PORT", "pg-port", "postgres"},
	}
	for _, tc := range tests {
		t.Run(tc.env+"="+tc.value, func(t *testing.T) {
			t.Parallel()
			_, err := configTestLoad(t, nil, map[string]string{tc.env: tc.value})
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.env)
			require.NotContains(t, err.Error(), "flag -")
		})
		t.Run("-"+tc.flag+"="+tc.value, func(t *testing.T) {
			t.Parallel()
			_, err := configTestLoad(t, []string{"-" + tc.flag + "=" + tc.value}, nil)
			require.Error(t, err)
			if tc.env == "DATABASE_URL" {
				// The URL shape check runs after the flag/variable merge and
				// names the variable.
				require.Contains(t, err.Error(), "DATABASE_URL")
				return
			}
			require.Contains(t, err.Error(), "flag -"+tc.flag)
		})
	}
}

func TestLoadConfigBadArguments(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		args  []string
		msg   string
		usage bool
	}{
		{"unknown flag", []string{"-bogus"}, "-bogus", true},
		{"flag without value", []string{"-port"}, "-port", true},
		{"positional argument", []string{"serve"}, `unexpected argument "serve"`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var usage bytes.Buffer
			_, err := LoadConfig(tc.args, configTestEnv(nil), &usage)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.msg)
			if tc.usage {
				require.Contains(t, usage.String(), "regina -h lists every setting")
			}
		})
	}

	t.Run("help", func(t *testing.T) {
		t.Parallel()
		var usage bytes.Buffer
		_, err := LoadConfig([]string{"-h"}, configTestEnv(nil), &usage)
		require.ErrorIs(t, err, flag.ErrHelp)
		for _, want := range []string{"-port int (PORT, default 6632)", "-dedup-cache-mb int (QUEEN_DEDUP_CACHE_MB, default 512)",
			"-pg-password string (PG_PASSWORD)"} {
			require.Contains(t, usage.String(), want, "usage lists %q:\n%s", want, usage.String())
		}
	})
}

// Every problem is reported at once, each naming its variable (and the flag
// that gave it).
func TestLoadConfigReportsEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := configTestLoad(t, []string{"-db-pool-size", "0"}, map[string]string{
		"PORT": "70000", "RETENTION_INTERVAL": "5m", "LOG_LEVEL": "loud", "QUEEN_SCHEMA": `a"b`, "PG_PORT": "x",
	})
	require.Error(t, err)
	for _, want := range []string{
		`invalid PORT: 70000 is above the maximum 65535`,
		`invalid RETENTION_INTERVAL: "5m" is not a whole number of milliseconds`,
		`invalid LOG_LEVEL: "loud" is not one of debug, info, warn, error`,
		`invalid QUEEN_SCHEMA: "a\"b" is not a usable schema name`,
		`invalid PG_PORT: "x" is not a TCP port`,
		`invalid flag -db-pool-size (DB_POOL_SIZE): 0 is below the minimum 1`,
	} {
		require.Contains(t, err.Error(), want)
	}
	require.Equal(t, 1, strings.Count(err.Error(), "RETENTION_INTERVAL"), "an unreadable value is reported once")
}

// A Config built in code takes the same defaults LoadConfig gives, except
// where its zero value means something (a free port, no timeouts, no cache,
// no pprof, no per-address connection bound, no cursor-table vacuum).
func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	loaded, err := configTestLoad(t, nil, nil)
	require.NoError(t, err)
	got := Config{}.WithDefaults()
	require.NoError(t, got.Validate())
	want := loaded
	want.Port, want.StatementTimeout, want.ShutdownTimeout, want.DedupCache = 0, 0, 0, false
	want.MaxConnectionsPerIP, want.CursorVacuumInterval = 0, 0
	require.Equal(t, want, got)
	require.Equal(t, got, got.WithDefaults(), "idempotent")
	require.Equal(t, loaded, loaded.WithDefaults(), "a loaded Config is complete")

	kept := Config{Port: 7000, PoolSize: 3, LogLevel: "debug"}.WithDefaults()
	require.Equal(t, 7000, kept.Port)
	require.Equal(t, 3, kept.PoolSize)
	require.Equal(t, "debug", kept.LogLevel)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	c := Config{BatchMaxItems: -1, MaxBodyBytes: 10, LogFormat: "xml", DatabaseURL: "nonsense"}.WithDefaults()
	err := c.Validate()
	require.Error(t, err)
	for _, want := range []string{"BATCH_MAX_ITEMS", "MAX_BODY_BYTES", "LOG_FORMAT", "DATABASE_URL"} {
		require.Contains(t, err.Error(), want)
	}
	require.NotContains(t, err.Error(), "flag -")
}

func TestLoadConfigAuth(t *testing.T) {
	t.Parallel()
	c, err := configTestLoad(t, nil, map[string]string{"JWT_ENABLED": "true", "JWT_SECRET": "s", "JWT_CLOCK_SKEW": "7"})
	require.NoError(t, err)
	require.True(t, c.Auth.Enabled)
	require.Equal(t, []byte("s"), c.Auth.Secret)
	require.Equal(t, 7*time.Second, c.Auth.ClockSkew)
	require.Equal(t, auth.DefaultSkipPaths, c.Auth.SkipPaths, "empty JWT_SKIP_PATHS means unset, like every variable")

	_, err = configTestLoad(t, nil, map[string]string{"JWT_ENABLED": "maybe"})
	require.ErrorContains(t, err, "JWT_ENABLED")
	_, err = configTestLoad(t, nil, map[string]string{"JWT_ALGORITHM": "none"})
	require.ErrorContains(t, err, "JWT_ALGORITHM")
	// Reported with every other problem, at once.
	_, err = configTestLoad(t, nil, map[string]string{"JWT_ENABLED": "true", "JWT_ALGORITHM": "RS256", "PORT": "70000"})
	require.ErrorContains(t, err, "JWT_ALGORITHM=RS256 needs JWT_PUBLIC_KEY or JWT_JWKS_URL")
	require.ErrorContains(t, err, "invalid PORT")
}

func TestLogAuth(t *testing.T) {
	t.Parallel()
	logged := func(host string, cfg auth.Config) string {
		a, err := auth.New(cfg, auth.Options{})
		require.NoError(t, err)
		defer a.Close()
		var buf bytes.Buffer
		logAuth(zerolog.New(&buf), host, cfg, a)
		return buf.String()
	}
	for _, host := range []string{"127.0.0.1", "::1", "[::1]", "localhost", "127.0.0.2"} {
		out := logged(host, auth.Config{})
		require.Contains(t, out, `"auth":false`, host)
		require.NotContains(t, out, `"level":"warn"`, host)
	}
	for _, host := range []string{"0.0.0.0", "::", "", "10.0.0.5", "broker.internal"} {
		out := logged(host, auth.Config{})
		require.Contains(t, out, `"level":"warn"`, host)
		require.Contains(t, out, "HOST is not a loopback address", host)
	}
	out := logged("0.0.0.0", auth.Config{Enabled: true, Algorithm: auth.HS256, Secret: []byte("0123456789abcdef0123456789abcdef"),
		SkipPaths: auth.DefaultSkipPaths})
	require.Contains(t, out, `"auth":true`)
	require.Contains(t, out, `"algorithms":["HS256"]`)
	require.NotContains(t, out, `"level":"warn"`)
}

// TestMaxConnections: MAX_CONNECTIONS when set; else the open-file limit
// less the pool and the headroom, between its floor and its ceiling.
func TestMaxConnections(t *testing.T) {
	t.Parallel()
	cfg := Config{PoolSize: 16}
	require.Equal(t, 1024-16-fdHeadroom, maxConnections(cfg, 1024))
	require.Equal(t, defaultMaxConnections, maxConnections(cfg, 1<<20))
	require.Equal(t, defaultMaxConnections, maxConnections(cfg, 0))
	require.Equal(t, minAutoConnections, maxConnections(cfg, 50))
	cfg.MaxConnections = 7
	require.Equal(t, 7, maxConnections(cfg, 1024))
}
