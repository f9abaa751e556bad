package sqlstore_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// urlWith returns the test database URL with the given session settings.
func urlWith(t *testing.T, params map[string]string) string {
	t.Helper()
	u, err := url.Parse(sqlstoretest.URL(t))
	require.NoError(t, err)
	q := u.Query()
	for k, v := range params {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// warned returns the settings named by ws.
func warned(ws []sqlstore.SettingWarning) map[string]string {
	out := map[string]string{}
	for _, w := range ws {
		out[w.Setting] = w.Value
	}
	return out
}

// TestServerSettingsRead reads the settings through a store's connection and
// checks them against pg_settings as another connection reports them; a
// session setting from the database URL (synchronous_commit = off) is seen,
// and jit is the off the broker's sessions force.
func TestServerSettingsRead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := sqlstore.Open(ctx, sqlstore.Config{URL: urlWith(t, map[string]string{"synchronous_commit": "off"}),
		Schema: sqlstoretest.NewSchema(t), MaxConns: 2, Logger: zerolog.Nop()})
	require.NoError(t, err)
	defer st.Close()
	got, err := st.ServerSettings(ctx)
	require.NoError(t, err)

	pool := sqlstoretest.Pool(t)
	var want sqlstore.ServerSettings
	require.NoError(t, pool.QueryRow(ctx, `SELECT
  (SELECT setting FROM pg_settings WHERE name = 'autovacuum') = 'on',
  (SELECT setting FROM pg_settings WHERE name = 'fsync') = 'on',
  (SELECT setting FROM pg_settings WHERE name = 'full_page_writes') = 'on',
  (SELECT setting FROM pg_settings WHERE name = 'wal_compression'),
  (SELECT setting::int FROM pg_settings WHERE name = 'max_connections')`).Scan(
		&want.Autovacuum, &want.Fsync, &want.FullPageWrites, &want.WALCompression, &want.MaxConnections))
	require.NoError(t, pool.QueryRow(ctx, "SELECT current_setting('max_wal_size'), current_setting('shared_buffers')").
		Scan(&want.MaxWALSize, &want.SharedBuffers))
	want.SynchronousCommit = "off"
	want.JIT = false
	require.Equal(t, want, got)

	w := warned(got.Warnings(2))
	require.Equal(t, "off", w["synchronous_commit"], "a session with synchronous_commit = off is warned about")
	_, av := w["autovacuum"]
	require.Equal(t, !want.Autovacuum, av, "autovacuum warned about exactly when the server has it off")
	_, mc := w["max_connections"]
	require.False(t, mc, "a pool of 2 fits in max_connections %d", got.MaxConnections)
	_, mc = warned(got.Warnings(got.MaxConnections + 1))["max_connections"]
	require.True(t, mc, "a pool larger than max_connections is warned about")
}

// TestServerSettingsWarnings decides on settings as the server could report
// them: one warning per setting that works against Regina, none for a server
// at PostgreSQL's defaults.
func TestServerSettingsWarnings(t *testing.T) {
	defaults := sqlstore.ServerSettings{Autovacuum: true, SynchronousCommit: "on", Fsync: true, FullPageWrites: true,
		JIT: true, WALCompression: "off", MaxWALSize: "1GB", SharedBuffers: "128MB", MaxConnections: 100}
	require.Empty(t, defaults.Warnings(16))
	for _, sc := range []string{"local", "remote_write", "remote_apply", "on"} {
		s := defaults
		s.SynchronousCommit = sc
		require.Empty(t, s.Warnings(16), sc)
	}
	bad := sqlstore.ServerSettings{Autovacuum: false, SynchronousCommit: "off", Fsync: false, FullPageWrites: false,
		JIT: true, WALCompression: "lz4", MaxWALSize: "64MB", SharedBuffers: "8MB", MaxConnections: 10}
	ws := bad.Warnings(16)
	require.Equal(t, map[string]string{"autovacuum": "off", "synchronous_commit": "off", "fsync": "off",
		"full_page_writes": "off", "max_connections": "10"}, warned(ws))
	for _, w := range ws {
		require.Contains(t, w.Message, w.Setting)
	}
	require.NotContains(t, warned(bad.Warnings(10)), "max_connections", "a pool of max_connections fits")
}

// TestNonDefaultSettings lists the relevant settings that differ from
// PostgreSQL's built-in defaults: a client's synchronous_commit = off is
// listed with its source, autovacuum exactly when the server has it off, and
// nothing at its default value.
func TestNonDefaultSettings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pcfg, err := pgxpool.ParseConfig(sqlstoretest.URL(t))
	require.NoError(t, err)
	pcfg.MaxConns = 1
	pcfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	defer pool.Close()
	got, err := sqlstore.NonDefaultSettings(ctx, pool)
	require.NoError(t, err)
	byName := map[string]sqlstore.Setting{}
	for _, s := range got {
		byName[s.Name] = s
	}
	require.Equal(t, sqlstore.Setting{Name: "synchronous_commit", Value: "off", Source: "client"}, byName["synchronous_commit"])
	require.Equal(t, "synchronous_commit=off (client)", byName["synchronous_commit"].String())
	var autovacuum bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT current_setting('autovacuum')::bool").Scan(&autovacuum))
	_, listed := byName["autovacuum"]
	require.Equal(t, !autovacuum, listed)
	var atDefault []string
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(array_agg(name), '{}') FROM pg_settings
WHERE name = ANY($1) AND setting = boot_val`, sqlstore.ServerSettingNames).Scan(&atDefault))
	for _, n := range atDefault {
		require.NotContains(t, byName, n)
	}
	require.Contains(t, sqlstore.SettingsText(got), "synchronous_commit=off (client)")
}
