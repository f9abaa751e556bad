package sqlstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// dbNow is the database's clock (the one sidecar_ensure and retention use).
func dbNow(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, sqlstoretest.Pool(t).QueryRow(context.Background(), "SELECT now()").Scan(&now))
	return now
}

// dropSidecarChildren drops every child of the store's hash sidecar, so that
// the next Open or retention pass creates them all.
func dropSidecarChildren(t *testing.T, st *sqlstore.Store) {
	t.Helper()
	pool := sqlstoretest.Pool(t)
	for _, c := range sidecarChildren(t, st) {
		_, err := pool.Exec(context.Background(), "DROP TABLE "+pgx.Identifier{st.Schema(), c.name}.Sanitize())
		require.NoError(t, err)
	}
	require.Empty(t, sidecarChildren(t, st))
}

// requireContiguous fails unless the children tile time: each begins where
// the previous one ends.
func requireContiguous(t *testing.T, children []sidecarChild) {
	t.Helper()
	require.NotEmpty(t, children)
	for i := 1; i < len(children); i++ {
		require.True(t, children[i-1].hi.Equal(children[i].lo), "gap or overlap between %s (ends %s) and %s (begins %s)",
			children[i-1].name, children[i-1].hi, children[i].name, children[i].lo)
	}
}

// since returns the children that begin at from or later.
func since(children []sidecarChild, from time.Time) []sidecarChild {
	for i, c := range children {
		if !c.lo.Before(from) {
			return children[i:]
		}
	}
	return nil
}

// requireSlices fails unless every child spans exactly width, aligned to
// the epoch.
func requireSlices(t *testing.T, children []sidecarChild, width time.Duration) {
	t.Helper()
	for _, c := range children {
		require.Equal(t, width, c.hi.Sub(c.lo), "child %s [%s, %s)", c.name, c.lo, c.hi)
		require.Zero(t, c.lo.Unix()%int64(width/time.Second), "child %s begins at %s, not on a slice boundary", c.name, c.lo)
	}
}

// With the default configuration and a queue at the default one-hour
// window, the children Open and a retention pass create are five minutes
// wide (SidecarChildSecondsFor(3600)), aligned and contiguous: Open's from
// the previous slice (the rest of the last hour in at most two hour-aligned
// children), a pass's from the current slice, both to at least 15 minutes
// ahead.
func TestSidecarChildrenForTheDefaultWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	ref, err := st.EnsurePartition(ctx, "width", "p")
	require.NoError(t, err)
	require.Equal(t, partition.DefaultDedupWindowSeconds, ref.WindowSeconds)

	// A restart with the queue there.
	dropSidecarChildren(t, st)
	t0 := dbNow(t)
	reopened := sqlstoretest.OpenSchema(t, st.Schema())
	children := sidecarChildren(t, reopened)
	requireContiguous(t, children)
	require.False(t, children[0].lo.After(t0.Add(-time.Hour)), "Open covers the last hour: first child begins %s", children[0].lo)
	prev := t0.Truncate(5 * time.Minute).Add(-5 * time.Minute)
	back := 0
	for back < len(children) && children[back].lo.Before(prev) {
		back++
	}
	require.LessOrEqual(t, back, 2, "the last hour before the previous slice is filled with hour-aligned children")
	require.Zero(t, children[0].lo.Unix()%3600, "first child %s", children[0].name)
	requireSlices(t, children[back:], 5*time.Minute)
	require.False(t, children[back].lo.After(prev), "the previous slice has a five-minute child")
	require.False(t, children[len(children)-1].hi.Before(t0.Add(15*time.Minute)),
		"Open makes children 15 minutes ahead: last ends %s", children[len(children)-1].hi)

	// A retention pass with no children left.
	dropSidecarChildren(t, st)
	t0 = dbNow(t)
	_, err = reopened.RetainOnce(ctx, 100)
	require.NoError(t, err)
	t1 := dbNow(t)
	children = sidecarChildren(t, reopened)
	requireSlices(t, children, 5*time.Minute)
	requireContiguous(t, children)
	require.False(t, children[0].lo.After(t0), "the current slice is covered: first child begins %s", children[0].lo)
	require.True(t, children[0].lo.After(t1.Add(-5*time.Minute)), "a pass creates nothing behind the current slice: %s", children[0].lo)
	require.False(t, children[len(children)-1].hi.Before(t0.Add(15*time.Minute)),
		"a pass makes children 15 minutes ahead: last ends %s", children[len(children)-1].hi)

	res, err := reopened.Push(ctx, mustBatch(t, ref, "a"))
	require.NoError(t, err)
	require.Equal(t, int64(0), res.FirstOffset)
}

// syncBuffer is a bytes.Buffer safe for the store's logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// widthLogs returns the "hash sidecar child width" lines logged so far.
func (s *syncBuffer) widthLogs(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for line := range bytes.SplitSeq(bytes.TrimSpace(s.b.Bytes()), []byte("\n")) {
		var m map[string]any
		require.NoError(t, json.Unmarshal(line, &m), "%s", line)
		if m["message"] == "hash sidecar child width" {
			out = append(out, m)
		}
	}
	return out
}

// When a queue's window grows to a day, the next retention pass creates
// hourly children (SidecarChildSecondsFor(86400)) after the five-minute
// ones already there, which keep their bounds: the first new child ends on
// the next full hour, the others span an hour each, three hours ahead, with
// no gap or overlap anywhere. The width is logged once per change.
func TestSidecarWidthFollowsTheLongestWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var logs syncBuffer
	st := sqlstoretest.OpenConfig(t, sqlstore.Config{Logger: zerolog.New(&logs).Level(zerolog.InfoLevel)})
	_, err := st.EnsurePartition(ctx, "daily", "p")
	require.NoError(t, err)
	t0 := dbNow(t)
	_, err = st.RetainOnce(ctx, 100)
	require.NoError(t, err)
	before := sidecarChildren(t, st)
	requireSlices(t, since(before, t0.Truncate(5*time.Minute).Add(-5*time.Minute)), 5*time.Minute)
	requireContiguous(t, before)
	lines := logs.widthLogs(t)
	require.Len(t, lines, 1, "the width is logged when it is first chosen, not at every pass")
	require.InDelta(t, 300, lines[0]["child_seconds"], 0)

	configureWindow(t, st, "daily", 86400)
	t0 = dbNow(t)
	_, err = st.RetainOnce(ctx, 100)
	require.NoError(t, err)
	after := sidecarChildren(t, st)
	requireContiguous(t, after)
	require.Greater(t, len(after), len(before))
	require.Equal(t, before, after[:len(before)], "existing children keep their bounds")
	added := after[len(before):]
	for i, c := range added {
		require.Zero(t, c.hi.Unix()%3600, "child %s ends at %s, not on an hour", c.name, c.hi)
		if i > 0 {
			require.Equal(t, time.Hour, c.hi.Sub(c.lo), "child %s", c.name)
		} else {
			require.LessOrEqual(t, c.hi.Sub(c.lo), time.Hour, "child %s", c.name)
		}
	}
	require.False(t, added[len(added)-1].hi.Before(t0.Add(3*time.Hour)), "three hourly slices ahead: last ends %s",
		added[len(added)-1].hi)
	lines = logs.widthLogs(t)
	require.Len(t, lines, 2)
	require.InDelta(t, 3600, lines[1]["child_seconds"], 0)
	require.InDelta(t, 300, lines[1]["was_seconds"], 0)
	require.InDelta(t, 86400, lines[1]["depth_seconds"], 0)

	// Another pass at the same depth: nothing new, nothing logged.
	_, err = st.RetainOnce(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, after, sidecarChildren(t, st))
	require.Len(t, logs.widthLogs(t), 2)
}

// An explicit SidecarChildSeconds is a fixed width: every child the store
// makes has it, a day-long window does not change it. One under a minute
// (what sidecar_ensure refuses) is refused by Open, before it connects.
func TestExplicitSidecarChildSecondsIsFixed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.OpenConfig(t, sqlstore.Config{SidecarChildSeconds: 600})
	_, err := st.EnsurePartition(ctx, "fixed", "p")
	require.NoError(t, err)
	configureWindow(t, st, "fixed", 86400)
	t0 := dbNow(t)
	_, err = st.RetainOnce(ctx, 100)
	require.NoError(t, err)
	children := sidecarChildren(t, st)
	requireSlices(t, children, 10*time.Minute)
	requireContiguous(t, children)
	require.False(t, children[len(children)-1].hi.Before(t0.Add(30*time.Minute)), "three slices ahead")

	for _, n := range []int{59, 1, -60} {
		_, err := sqlstore.Open(ctx, sqlstore.Config{URL: sqlstoretest.URL(t), Schema: sqlstoretest.NewSchema(t),
			SidecarChildSeconds: n})
		require.ErrorContains(t, err, "at least 60 s", "SidecarChildSeconds %d", n)
	}
}

// Retention drops a five-minute child only once its whole range lies past
// the horizon (the one-hour window): the children that end before it go
// with their rows, the ones that end after it stay with theirs.
func TestRetentionDropsOnlyNarrowChildrenPastTheHorizon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	pool := sqlstoretest.Pool(t)
	exec := schemaExec(t, st, pool)
	ref, err := st.EnsurePartition(ctx, "narrow", "p")
	require.NoError(t, err)
	dropSidecarChildren(t, st)
	exec(`SELECT queen.sidecar_ensure(now() - interval '3 hours', now() + interval '15 minutes', interval '5 minutes')`)
	for _, age := range []string{"2 hours", "55 minutes", "30 minutes"} {
		res, err := st.Push(ctx, mustBatch(t, ref, "aged-"+age))
		require.NoError(t, err)
		exec(`UPDATE queen.log_txns SET created_at = now() - $2::interval WHERE first_offset = $1`, res.FirstOffset, age)
	}
	before := sidecarChildren(t, st)
	requireSlices(t, before, 5*time.Minute)
	requireContiguous(t, before)

	t0 := dbNow(t)
	stats, err := st.RetainOnce(ctx, 100)
	require.NoError(t, err)
	t1 := dbNow(t)
	after := map[string]sidecarChild{}
	for _, c := range sidecarChildren(t, st) {
		after[c.name] = c
	}
	dropped, kept := 0, 0
	for _, c := range before {
		got, ok := after[c.name]
		switch {
		case !c.hi.After(t0.Add(-time.Hour)):
			require.False(t, ok, "child %s ends %s, past the horizon: dropped", c.name, c.hi)
			dropped++
		case c.hi.After(t1.Add(-time.Hour)):
			require.True(t, ok, "child %s ends %s, inside the horizon: kept", c.name, c.hi)
			require.Equal(t, c, got)
			kept++
		}
	}
	require.GreaterOrEqual(t, dropped, 20, "two hours of five-minute children are past the horizon")
	require.GreaterOrEqual(t, kept, 12, "the last hour's children stay")
	// A child ending between the two clock readings may go either way.
	require.GreaterOrEqual(t, stats.SidecarChildren, dropped)
	require.LessOrEqual(t, stats.SidecarChildren, dropped+1)

	r, err := pool.Query(ctx, schemaSQL(st, `SELECT (now() - created_at)::text FROM queen.log_txns ORDER BY created_at`))
	require.NoError(t, err)
	rows, err := pgx.CollectRows(r, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, rows, 2, "the 2-hour-old row went with its child, the others stay: %v", rows)
}

// A duplicate whose original lies in an older child of the sidecar (a
// five-minute child before the current one, inside the window) is found by
// every probe path, together with one whose original is in the current
// child.
func TestDuplicateFoundAcrossSidecarChildren(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	pool := sqlstoretest.Pool(t)
	ref, err := st.EnsurePartition(ctx, "across", "p")
	require.NoError(t, err)
	orig := map[string]partition.UUID{}
	for _, tx := range []string{"z", "older", "current"} {
		b, ids := batchOf(t, ref, tx)
		_, err := st.Push(ctx, b)
		require.NoError(t, err)
		orig[tx] = ids[0]
	}
	// "older" (offset 1) moves to the child of seven minutes ago.
	_, err = pool.Exec(ctx, schemaSQL(st, `UPDATE queen.log_txns SET created_at = now() - interval '7 minutes'
		WHERE first_offset = 1`))
	require.NoError(t, err)
	var children int
	require.NoError(t, pool.QueryRow(ctx, schemaSQL(st,
		`SELECT count(DISTINCT tableoid) FROM queen.log_txns WHERE first_offset IN (1, 2)`)).Scan(&children))
	require.Equal(t, 2, children, "the two originals are in different children")

	for _, c := range []struct {
		name      string
		watermark int64
		fast      bool
	}{
		{"full window", reginatype.NoWatermark, false},
		{"watermark", 0, false}, // the cache vouches for offset 0: both originals are above it
		{"fast path", reginatype.NoWatermark, true},
	} {
		b := mustBatch(t, ref, "older", "current")
		b.Watermark, b.ExpectDuplicates = c.watermark, c.fast
		res, err := st.Push(ctx, b)
		require.NoError(t, err, c.name)
		require.Equal(t, []int{0, 1}, res.DupIndex, c.name)
		require.Equal(t, []partition.UUID{orig["older"], orig["current"]}, res.DupOriginal, c.name)
	}
}

// With a retention interval longer than half the 15 minutes children are
// made ahead, RunRetention makes them two intervals ahead as it starts (so
// the pushes until the next pass find theirs), at most
// MaxSidecarChildrenPerWindow slices: 80 minutes for a 40-minute interval,
// two hours of five-minute children for a daily one.
func TestRetentionLoopMakesChildrenPastTheNextPass(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		every, ahead time.Duration
	}{
		{40 * time.Minute, 80 * time.Minute},
		{24 * time.Hour, sqlstore.MaxSidecarChildrenPerWindow * 5 * time.Minute},
	} {
		t.Run(c.every.String(), func(t *testing.T) {
			t.Parallel()
			st := sqlstoretest.Open(t)
			pool := sqlstoretest.Pool(t)
			t0 := dbNow(t)
			last := func() time.Time {
				var hi time.Time
				require.NoError(t, pool.QueryRow(context.Background(),
					schemaSQL(st, `SELECT max(hi) FROM queen.sidecar_children()`)).Scan(&hi))
				return hi
			}
			require.True(t, last().Before(t0.Add(c.ahead)), "Open makes children 15 minutes ahead, not %s", c.ahead)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				st.RunRetention(ctx, c.every, 100)
			}()
			t.Cleanup(func() { cancel(); <-done })
			require.Eventually(t, func() bool { return !last().Before(t0.Add(c.ahead)) }, 10*time.Second, 20*time.Millisecond)
			children := sidecarChildren(t, st)
			requireSlices(t, since(children, t0.Truncate(5*time.Minute).Add(-5*time.Minute)), 5*time.Minute)
			requireContiguous(t, children)
			t1 := dbNow(t)
			require.True(t, last().Before(t1.Add(c.ahead+5*time.Minute)), "no further than %s ahead: %s", c.ahead, last())
		})
	}
}
