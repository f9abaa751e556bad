package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// The Makefile installs the nats-server version the program looks for.
func TestMakefilePinsTheNATSVersion(t *testing.T) {
	root, err := repoRoot()
	require.NoError(t, err)
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^NATS_SERVER_VERSION := (\S+)$`).FindSubmatch(mk)
	require.NotNil(t, m, "the Makefile sets NATS_SERVER_VERSION")
	require.Equal(t, NATSPinnedVersion, string(m[1]))
}

func TestNATSConfigSyncAlways(t *testing.T) {
	def := natsConfig(4333, "/tmp/x", natsDefault)
	sync := natsConfig(4333, "/tmp/x", natsSyncAlways)
	require.Contains(t, def, `listen: "127.0.0.1:4333"`)
	require.Contains(t, def, `store_dir: "/tmp/x"`)
	require.NotContains(t, def, "sync_interval")
	require.Contains(t, sync, "sync_interval: always")
}

// The pinned server starts from its configuration file with JetStream in
// both modes, keeps a stream's duplicate window, and is gone after close.
// Skipped when make compare has not installed it into bin/ yet.
func TestPinnedNATSStartsInBothModes(t *testing.T) {
	root, err := repoRoot()
	require.NoError(t, err)
	bin, err := pinnedNATSBinary(root, "")
	if err != nil {
		t.Skip(err)
	}
	for _, mode := range []natsMode{natsDefault, natsSyncAlways} {
		srv, err := startNATS(context.Background(), bin, t.TempDir(), mode)
		require.NoError(t, err)
		p, err := openNATSPeer(context.Background(), natsLabel(mode), srv)
		require.NoError(t, err)
		require.Contains(t, p.Version, NATSPinnedVersion[1:])
		subjects, err := p.addStream("T", "t", time.Minute, 2)
		require.NoError(t, err)
		require.Equal(t, []string{"t.p0", "t.p1"}, subjects)
		js, err := p.nc.JetStream()
		require.NoError(t, err)
		for i, dup := range []bool{false, true} {
			ack, err := js.Publish(subjects[1], []byte("{}"), nats.MsgId("m1"))
			require.NoError(t, err, "publish %d", i)
			require.Equal(t, dup, ack.Duplicate, "publish %d in mode %d", i, mode)
		}
		p.close(false, t.Logf)
		require.False(t, portAnswers(srv.url[len("nats://"):]), "the server stopped")
		_, err = os.Stat(srv.dir)
		require.True(t, os.IsNotExist(err), "its store is removed")
	}
}

// River's peer: its own schema migrated, unique inserts of a push's jobs,
// the same jobs again answered as duplicates; close drops the schema.
func TestRiverUniqueInsertsAndStorm(t *testing.T) {
	h := dbHarness(t)
	h.cfg.connections = 2
	h.wl = newWorkload(4, 5, 200, 42)
	p, err := h.riverPeer(context.Background())
	require.NoError(t, err)
	cl, err := p.client(nil)
	require.NoError(t, err)
	run := func(replay [][]int32) *workerRec {
		now := time.Now()
		pc := &phaseClock{start: now, warmEnd: now, end: now.Add(300 * time.Millisecond)}
		rec := &workerRec{}
		h.riverWork(cl, "rt", replay)(context.Background(), 0, pc, rec)
		return rec
	}
	fresh := run(nil)
	require.Zero(t, fresh.errors, fresh.errSample)
	require.Zero(t, fresh.anomalies)
	require.Positive(t, fresh.ops)
	require.Equal(t, 5*fresh.ops, fresh.msgs)
	storm := run([][]int32{fresh.okSeqs})
	require.Zero(t, storm.errors, storm.errSample)
	require.Zero(t, storm.anomalies, "a replayed job was inserted again")
	require.Positive(t, storm.msgs)

	var jobs int64
	require.NoError(t, p.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+quoteIdent(p.schema)+".river_job").Scan(&jobs))
	// A push answered after the phase's end is inserted but not counted.
	require.True(t, jobs >= fresh.msgs && jobs <= fresh.msgs+5, "one job per accepted message, none per duplicate: %d jobs, %d accepted", jobs, fresh.msgs)

	schema := p.schema
	h.cleanupPeers()
	var left bool
	require.NoError(t, h.admin.QueryRow(context.Background(), "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&left))
	require.False(t, left, "River's schema is dropped")
}
