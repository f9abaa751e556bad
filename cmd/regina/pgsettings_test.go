package main

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// At start the broker logs the PostgreSQL settings it relies on (one info
// line) and warns once per setting that works against it: here a database URL
// with synchronous_commit = off, and autovacuum exactly when the server has
// it off.
func TestStartLogsServerSettings(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(sqlstoretest.URL(t))
	require.NoError(t, err)
	q := u.Query()
	q.Set("synchronous_commit", "off")
	u.RawQuery = q.Encode()
	logs := &syncBuffer{}
	startBrokerLog(t, "", func(c *Config) { c.DatabaseURL = u.String() }, logs)

	var info map[string]any
	warns := map[string]map[string]any{}
	for line := range strings.Lines(logs.String()) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		switch {
		case m["message"] == "PostgreSQL settings":
			require.Nil(t, info, "one info line")
			info = m
		case m["level"] == "warn" && m["setting"] != nil:
			warns[m["setting"].(string)] = m
		}
	}
	require.NotNil(t, info, "the settings' info line:\n%s", logs.String())
	require.Equal(t, "off", info["synchronous_commit"])
	require.Equal(t, false, info["jit"], "the broker's sessions run with jit = off")
	require.InDelta(t, 6, info["pool_size"], 0)
	for _, k := range []string{"autovacuum", "fsync", "full_page_writes", "wal_compression", "max_wal_size",
		"shared_buffers", "max_connections"} {
		require.Contains(t, info, k)
	}
	require.Contains(t, warns, "synchronous_commit")
	require.Contains(t, warns["synchronous_commit"]["message"], "can be lost in a crash")
	_, av := warns["autovacuum"]
	require.Equal(t, info["autovacuum"] == false, av, "autovacuum warned about exactly when it is off:\n%s", logs.String())
	require.NotContains(t, warns, "max_connections", "a pool of 6 fits")
}
