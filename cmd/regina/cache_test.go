package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/actor"
	"github.com/regina-mq/regina/cache"
	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// dedupCacheView is the "dedupCache" part of GET /metrics.
type dedupCacheView struct {
	Hits              uint64            `json:"hits"`
	Found             uint64            `json:"found"`
	Sentinels         uint64            `json:"sentinels"`
	SentinelsByReason map[string]uint64 `json:"sentinelsByReason"`
	Bytes             int64             `json:"bytes"`
	Partitions        int               `json:"partitions"`
	Hashes            int64             `json:"hashes"`
	Hydrating         int               `json:"hydrating"`
	Tombstones        int               `json:"tombstones"`
	TooBig            int               `json:"tooBig"`
	Evictions         uint64            `json:"evictions"`
	FilterHashes      int64             `json:"filterHashes"`
	FilterHits        uint64            `json:"filterHits"`
	Hydrations        struct {
		Started   uint64 `json:"started"`
		Finished  uint64 `json:"finished"`
		Failed    uint64 `json:"failed"`
		Aborted   uint64 `json:"aborted"`
		Truncated uint64 `json:"truncated"`
		Busy      uint64 `json:"busy"`
		TooDeep   uint64 `json:"tooDeep"`
		Running   int    `json:"running"`
	} `json:"hydrations"`
}

func cacheMetrics(t *testing.T, b *testBroker) dedupCacheView {
	t.Helper()
	status, body := do(t, "GET", b.URL+"/metrics", nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var m struct {
		DedupCache *dedupCacheView `json:"dedupCache"`
	}
	require.NoError(t, json.Unmarshal(body, &m), "%s", body)
	require.NotNil(t, m.DedupCache, "/metrics has no dedupCache: %s", body)
	return *m.DedupCache
}

// add accumulates the counters of v into s (a broker restart resets them).
func (s *dedupCacheView) add(v dedupCacheView) {
	s.Hits += v.Hits
	s.Found += v.Found
	s.Sentinels += v.Sentinels
	s.Evictions += v.Evictions
	s.FilterHits += v.FilterHits
	s.FilterHashes = max(s.FilterHashes, v.FilterHashes)
	if s.SentinelsByReason == nil {
		s.SentinelsByReason = make(map[string]uint64)
	}
	for k, n := range v.SentinelsByReason {
		s.SentinelsByReason[k] += n
	}
	s.Hydrations.Started += v.Hydrations.Started
	s.Hydrations.Finished += v.Hydrations.Finished
	s.Hydrations.Failed += v.Hydrations.Failed
	s.Hydrations.Aborted += v.Hydrations.Aborted
	s.Hydrations.Truncated += v.Hydrations.Truncated
	s.Hydrations.Busy += v.Hydrations.Busy
	s.Hydrations.TooDeep += v.Hydrations.TooDeep
}

// ---------------------------------------------------------------------------
// The differential test: one seeded random sequence, cache on and cache off.

type diffKind int

const (
	diffPush diffKind = iota
	diffAge
	diffConfigure
	diffRestart
	diffSettle
	diffDelete
)

// diffOp is one step of the sequence.
type diffOp struct {
	kind   diffKind
	broker int    // push, configure, restart, delete
	queue  string // age ("" = every queue), configure, delete
	window int    // configure
	check  string // configure: dedupPayloadCheck
	items  []item // push
}

func (o diffOp) String() string {
	switch o.kind {
	case diffPush:
		var sb strings.Builder
		fmt.Fprintf(&sb, "push via broker %d:", o.broker)
		for _, it := range o.items {
			fmt.Fprintf(&sb, " %s/%s/%s", it["queue"], it["partition"], it["transactionId"])
		}
		return sb.String()
	case diffAge:
		return fmt.Sprintf("age %q by %ds", o.queue, diffAgeSeconds)
	case diffConfigure:
		return fmt.Sprintf("configure %s window=%d check=%s via broker %d", o.queue, o.window, o.check, o.broker)
	case diffRestart:
		return fmt.Sprintf("restart broker %d", o.broker)
	case diffSettle:
		return "settle"
	case diffDelete:
		return fmt.Sprintf("delete queue %s via broker %d", o.queue, o.broker)
	}
	return "?"
}

// Ages move rows back by 700 s; windows are 600, 1800 or 3600 s (or 0). No
// accumulated age (a multiple of 700) is within 100 s of a window, so the
// seconds the test itself takes never flip a verdict.
const diffAgeSeconds = 700

var (
	diffQueues  = []string{"q0", "q1", "q2"}
	diffParts   = []string{"p0", "p1", "p2", "p3"}
	diffWindows = []int{600, 1800, 3600, 0}
	// Chosen by the step's position, not the generator, so that the
	// sequence of everything else stays what it was.
	diffChecks = []string{"report", "reject", "off"}
)

type txRec struct{ tx, queue, part string }

// diffGen builds the sequence. Partitions p0 and p1 are written mostly
// through broker 0, p2 mostly through broker 1, p3 through either: the other
// broker's writes are gaps for each cache.
type diffGen struct {
	r       *rand.Rand
	ops     []diffOp
	history []txRec
	nextTx  int
	stale   int
}

func (g *diffGen) brokerFor(part string) int {
	switch part {
	case "p0", "p1":
		if g.r.IntN(10) == 0 {
			return 1
		}
		return 0
	case "p2":
		if g.r.IntN(10) == 0 {
			return 0
		}
		return 1
	}
	return g.r.IntN(2)
}

func (g *diffGen) newTx() string {
	g.nextTx++
	return "tx-" + strconv.Itoa(g.nextTx)
}

// pushOp builds a push of n items, most of them to (queue, part).
func (g *diffGen) pushOp(broker, n int, queue, part string) diffOp {
	op := diffOp{kind: diffPush, broker: broker}
	for range n {
		q, p := queue, part
		if g.r.IntN(5) == 0 {
			q, p = diffQueues[g.r.IntN(len(diffQueues))], diffParts[g.r.IntN(len(diffParts))]
		}
		var tx string
		switch x := g.r.IntN(100); {
		case x < 45 || len(g.history) == 0:
			tx = g.newTx()
		case x < 75: // a recent one
			rec := g.history[len(g.history)-1-g.r.IntN(min(30, len(g.history)))]
			tx = rec.tx
			if g.r.IntN(5) != 0 {
				q, p = rec.queue, rec.part
			}
		case x < 90: // any earlier one
			rec := g.history[g.r.IntN(len(g.history))]
			tx = rec.tx
			if g.r.IntN(5) != 0 {
				q, p = rec.queue, rec.part
			}
		default: // a repeat inside the body
			if len(op.items) == 0 {
				tx = g.newTx()
			} else {
				prev := op.items[g.r.IntN(len(op.items))]
				tx, q, p = prev["transactionId"].(string), prev["queue"].(string), prev["partition"].(string)
			}
		}
		// Repeats carry the original's payload or another one (half each,
		// by position), for the queues whose dedupPayloadCheck compares them.
		op.items = append(op.items, item{"queue": q, "partition": p, "transactionId": tx,
			"payload": map[string]any{"tx": tx, "v": len(g.history) % 2}})
		g.history = append(g.history, txRec{tx, q, p})
	}
	return op
}

func (g *diffGen) randomPush() diffOp {
	q, p := diffQueues[g.r.IntN(len(diffQueues))], diffParts[g.r.IntN(len(diffParts))]
	return g.pushOp(g.brokerFor(p), 1+g.r.IntN(6), q, p)
}

func (g *diffGen) episode() {
	r := g.r
	switch x := r.IntN(100); {
	case x < 55: // a burst of ordinary pushes
		for range 3 + r.IntN(8) {
			g.ops = append(g.ops, g.randomPush())
		}
	case x < 63:
		q := ""
		if r.IntN(3) != 0 {
			q = diffQueues[r.IntN(len(diffQueues))]
		}
		g.ops = append(g.ops, diffOp{kind: diffAge, queue: q})
	case x < 70:
		g.ops = append(g.ops, diffOp{kind: diffConfigure, broker: r.IntN(2),
			queue: diffQueues[r.IntN(len(diffQueues))], window: diffWindows[r.IntN(len(diffWindows))],
			check: diffChecks[len(g.ops)%len(diffChecks)]})
	case x < 75: // a big batch: too big for broker 1's budget
		q, p := diffQueues[r.IntN(len(diffQueues))], diffParts[r.IntN(len(diffParts))]
		g.ops = append(g.ops, g.pushOp(r.IntN(2), 40+r.IntN(40), q, p))
	case x < 79:
		g.ops = append(g.ops, diffOp{kind: diffRestart, broker: r.IntN(2)})
	case x < 81:
		g.ops = append(g.ops, diffOp{kind: diffDelete, broker: r.IntN(2), queue: diffQueues[r.IntN(len(diffQueues))]})
	case x < 91:
		g.ops = append(g.ops, diffOp{kind: diffSettle})
	default:
		g.staleWindow()
	}
}

// staleWindow is the case the cache cannot see by itself: broker 0's cache
// loads a partition under a small window (old hashes are outside it, so they
// are not loaded), then the window grows while broker 0's actor still
// believes the small one, and the old ids are pushed again through it. Its
// watermark is computed for the small window; push_segment must notice the
// hint is stale and probe the whole window.
func (g *diffGen) staleWindow() {
	q := diffQueues[g.r.IntN(len(diffQueues))]
	part := "s" + strconv.Itoa(g.stale)
	g.stale++
	old := g.pushOp(1, 3, q, part) // through broker 1: broker 0 knows nothing yet
	g.ops = append(g.ops,
		diffOp{kind: diffConfigure, broker: 1, queue: q, window: 600},
		old,
		diffOp{kind: diffAge, queue: q},
		diffOp{kind: diffSettle},
		g.pushOp(0, 1, q, part), // broker 0 resolves window 600 and starts loading
		diffOp{kind: diffSettle},
		diffOp{kind: diffConfigure, broker: 1, queue: q, window: []int{1800, 3600}[g.r.IntN(2)]},
	)
	again := diffOp{kind: diffPush, broker: 0}
	for _, it := range old.items {
		again.items = append(again.items, item{"queue": it["queue"], "partition": it["partition"],
			"transactionId": it["transactionId"], "payload": "again"})
	}
	g.ops = append(g.ops, again)
}

func genDiffOps(seed uint64, n int) []diffOp {
	g := &diffGen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	for len(g.ops) < n {
		g.episode()
	}
	return g.ops
}

// diffWorld is two brokers on one schema running the sequence.
type diffWorld struct {
	schema  string
	mutate  [2]func(*Config)
	brokers [2]*testBroker
	d       *db
	labels  map[string]string // message id -> "op.item" of the push that stored it
	stats   [2]dedupCacheView // counters of brokers already stopped
	// regs are the brokers' actor registries (the current ones), fast
	// the duplicate fast path's counters of the stopped ones.
	regs [2]*actor.Registry
	fast fastPathCounts
}

// fastPathCounts are the registries' duplicate fast path counters, and
// the packer's (packed round trips, and the partition batches they carried).
type fastPathCounts struct{ unlocked, byOriginals, misses, packedTxns, packedBatches uint64 }

func (c *fastPathCounts) add(r *actor.Registry) {
	st := r.Stats()
	c.unlocked += st.UnlockedDups
	c.byOriginals += st.UnlockedByOriginals
	c.misses += st.FastPathMisses
	c.packedTxns += st.PackedTransactions
	c.packedBatches += st.PackedBatches
}

func (w *diffWorld) start(t *testing.T, i int) {
	w.brokers[i] = startBroker(t, w.schema, func(c *Config) {
		w.mutate[i](c)
		c.onRegistry = func(r *actor.Registry) { w.regs[i] = r }
	})
}

func newDiffWorld(t *testing.T, mutate [2]func(*Config)) *diffWorld {
	w := &diffWorld{schema: sqlstoretest.NewSchema(t), mutate: mutate, labels: make(map[string]string)}
	for i := range w.brokers {
		w.start(t, i)
	}
	w.d = newDB(t, w.schema)
	return w
}

// settle waits until no broker is loading a partition into its cache.
func (w *diffWorld) settle(t *testing.T) {
	checkFor(t, 30*time.Second, 2*time.Millisecond, func() error {
		for i, b := range w.brokers {
			if m := cacheMetrics(t, b); m.Hydrations.Running != 0 || m.Hydrating != 0 {
				return fmt.Errorf("broker %d: %d loads running, %d partitions hydrating", i, m.Hydrations.Running, m.Hydrating)
			}
		}
		return nil
	})
}

// run executes the sequence and returns one line per pushed item: its status
// and the label of the message it names (its own for queued, the
// original's for a duplicate, "zero" for the all-zero id).
func (w *diffWorld) run(t *testing.T, ops []diffOp) []string {
	var out []string
	for i, op := range ops {
		b := w.brokers[op.broker]
		switch op.kind {
		case diffPush:
			res := b.push(t, op.items...)
			for j, r := range res {
				if r.Status == "queued" {
					w.labels[r.MessageID] = fmt.Sprintf("%d.%d", i, j)
				}
			}
			for j, r := range res {
				name := w.labels[r.MessageID]
				switch {
				case r.MessageID == zeroUUID:
					name = "zero"
				case name == "":
					name = "unknown " + r.MessageID
				}
				line := fmt.Sprintf("op %d item %d: %s %s", i, j, r.Status, name)
				if r.PayloadMismatch != nil {
					line += fmt.Sprintf(" payloadMismatch=%v", *r.PayloadMismatch)
				}
				out = append(out, line)
			}
		case diffAge:
			where := ""
			args := []any{}
			if op.queue != "" {
				where = ` WHERE partition_id IN (SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1)`
				args = append(args, op.queue)
			}
			// The hash sidecar needs children for the times the rows move to.
			w.d.exec(t, `SELECT queen.sidecar_ensure(coalesce((SELECT min(created_at) FROM queen.log_txns), now())
				- make_interval(secs => `+strconv.Itoa(diffAgeSeconds)+`), now(), interval '1 hour')`)
			for _, table := range []string{"queen.log_txns", "queen.segments"} {
				w.d.exec(t, `UPDATE `+table+` SET created_at = created_at - make_interval(secs => `+
					strconv.Itoa(diffAgeSeconds)+`)`+where, args...)
			}
		case diffConfigure:
			opts := map[string]any{"dedupWindowSeconds": op.window}
			if op.check != "" {
				opts["dedupPayloadCheck"] = op.check
			}
			b.configure(t, op.queue, opts)
		case diffRestart:
			w.stats[op.broker].add(cacheMetrics(t, b))
			b.Stop(t)
			w.fast.add(w.regs[op.broker])
			w.start(t, op.broker)
		case diffSettle:
			w.settle(t)
		case diffDelete:
			status, body := do(t, "DELETE", b.URL+"/api/v1/resources/queues/"+op.queue, nil)
			require.Equal(t, http.StatusOK, status, "%s", body)
		}
	}
	w.settle(t)
	for i, b := range w.brokers {
		w.stats[i].add(cacheMetrics(t, b))
		w.fast.add(w.regs[i])
	}
	return out
}

// state is every partition's allocator and stored frames and hashes.
func (w *diffWorld) state(t *testing.T) []string {
	rows, err := w.d.pool.Query(context.Background(), w.d.q(`
		SELECT q.name, p.name, p.next_offset,
		       (SELECT coalesce(sum(frame_count), 0) FROM queen.segments s WHERE s.partition_id = p.id),
		       (SELECT coalesce(sum(cardinality(hashes)), 0) FROM queen.log_txns l WHERE l.partition_id = p.id)
		  FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		 ORDER BY q.name, p.name`))
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var q, p string
		var next, frames, hashes int64
		require.NoError(t, rows.Scan(&q, &p, &next, &frames, &hashes))
		out = append(out, fmt.Sprintf("%s/%s next=%d frames=%d hashes=%d", q, p, next, frames, hashes))
	}
	require.NoError(t, rows.Err())
	return out
}

func diffSeed(t *testing.T) uint64 {
	if s := os.Getenv("REGINA_DIFF_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "REGINA_DIFF_SEED")
		return n
	}
	return 20250601
}

// TestCacheChangesNoVerdict runs one seeded random sequence of pushes (new
// ids, repeats inside and outside the window, repeats inside one body,
// several partitions written through two brokers, big batches, window
// reconfigurations including stale window beliefs, restarts, queue
// deletions, rows aged by SQL) three times on fresh schemas: once with the dedup
// cache on (broker 0 with the default budget, broker 1 with a budget so small
// that it evicts and refuses partitions), once with the kill switch
// (QUEEN_DEDUP_CACHE=false) on both brokers, and once with neither the cache
// nor the duplicate fast path, each batch its own transaction (the
// reference; the other two pack several partitions' batches per round trip:
// one transaction, and pipelined). Queues switch dedupPayloadCheck
// between off, report and reject, and repeats carry the same or another
// payload. With the cache on, the batches it expects to be all duplicates
// are proven from the segments it names (queen.push_dups_segments, packed
// with other partitions'); with it off, by window probes (push_dups).
// Every item must get the same status (payloadMismatch included)
// and name the same message, and the tables must end the same. The
// cache must have been used (watermark hits that found hashes), so the test
// cannot pass vacuously. REGINA_DIFF_SEED picks another sequence.
//
//nolint:tparallel // the "worlds" group must not be parallel: it waits for both worlds before they are compared
func TestCacheChangesNoVerdict(t *testing.T) {
	t.Parallel()
	seed := diffSeed(t)
	ops := genDiffOps(seed, 400)
	t.Logf("seed %d: %d steps", seed, len(ops))
	common := func(c *Config) {
		c.RetentionInterval = 24 * time.Hour // retention must not race the sequence
	}
	// The reference sends every partition batch alone; the others pack the
	// ready batches of several partitions (one sender, so that they queue
	// up): in one transaction with the cache on, pipelined with it off.
	packed := func(c *Config) { c.PushShape, c.PackSenders = "packed", 1 }
	pipelined := func(c *Config) { c.PushShape, c.PackSenders = "pipelined", 1 }
	on := [2]func(*Config){
		// Broker 0 holds only 4 hashes a partition exactly and the rest in
		// Bloom filters (cache.Config.HotHashes): the filter tier against
		// PostgreSQL. Broker 1 holds its windows exactly, in 8 KiB.
		func(c *Config) { common(c); packed(c); c.DedupCache = true; c.dedupCacheHotHashes = 4 },
		func(c *Config) { common(c); packed(c); c.DedupCache = true; c.dedupCacheBytes = 8 << 10 },
	}
	off := [2]func(*Config){
		func(c *Config) { common(c); pipelined(c); c.DedupCache = false },
		func(c *Config) { common(c); pipelined(c); c.DedupCache = false },
	}
	locked := [2]func(*Config){
		func(c *Config) { common(c); c.PushShape = "single"; c.DedupCache = false; c.noUnlockedDups = true },
		func(c *Config) { common(c); c.PushShape = "single"; c.DedupCache = false; c.noUnlockedDups = true },
	}
	var wOn, wOff, wLocked *diffWorld
	var gotOn, gotOff, gotLocked, stateOn, stateOff, stateLocked []string
	t.Run("worlds", func(t *testing.T) {
		t.Run("on", func(t *testing.T) {
			t.Parallel()
			wOn = newDiffWorld(t, on)
			gotOn = wOn.run(t, ops)
			stateOn = wOn.state(t)
		})
		t.Run("off", func(t *testing.T) {
			t.Parallel()
			wOff = newDiffWorld(t, off)
			gotOff = wOff.run(t, ops)
			stateOff = wOff.state(t)
		})
		t.Run("locked", func(t *testing.T) {
			t.Parallel()
			wLocked = newDiffWorld(t, locked)
			gotLocked = wLocked.run(t, ops)
			stateLocked = wLocked.state(t)
		})
	})
	if t.Failed() {
		return
	}
	// The reference is the locked path alone (no cache, no duplicate fast
	// path); cache on and cache off both take the fast path.
	for _, other := range []struct {
		name string
		got  []string
	}{{"cache on", gotOn}, {"cache off (fast path on)", gotOff}} {
		require.Len(t, other.got, len(gotLocked))
		for i := range gotLocked {
			if gotLocked[i] != other.got[i] {
				var op int
				_, err := fmt.Sscanf(gotLocked[i], "op %d", &op)
				require.NoError(t, err)
				t.Fatalf("seed %d: %s changed a verdict at step %d (%s):\nlocked only: %s\n%s: %s",
					seed, other.name, op, ops[op], gotLocked[i], other.name, other.got[i])
			}
		}
	}
	require.Equal(t, stateLocked, stateOff, "the tables differ (cache off)")
	require.Equal(t, stateOff, stateOn, "the tables differ")

	dups, conflicts, mismatches, matches := 0, 0, 0, 0
	for _, l := range gotOff {
		switch {
		case strings.Contains(l, " duplicate "):
			dups++
		case strings.Contains(l, " conflict "):
			conflicts++
		}
		if strings.Contains(l, "payloadMismatch=true") {
			mismatches++
		}
		if strings.Contains(l, "payloadMismatch=false") {
			matches++
		}
	}
	t.Logf("%d items, %d duplicates, %d conflicts, payload compared: %d mismatches, %d matches",
		len(gotOff), dups, conflicts, mismatches, matches)
	require.Positive(t, conflicts, "the sequence must have conflicts (dedupPayloadCheck reject)")
	require.Positive(t, mismatches-conflicts, "the sequence must have reported mismatches (dedupPayloadCheck report)")
	require.Positive(t, matches, "the sequence must have repeats whose payload matched")
	for i, s := range wOn.stats {
		t.Logf("cache on, broker %d: hits=%d found=%d sentinels=%v evictions=%d hydrations=%+v",
			i, s.Hits, s.Found, s.SentinelsByReason, s.Evictions, s.Hydrations)
	}
	require.Greater(t, dups, len(gotOff)/10, "the sequence must have many duplicates")

	// Not vacuous: the cache answered watermarks and found repeated hashes
	// (so SQL had to find them above a lowered watermark), both brokers saw
	// the other's writes as gaps, and the small one evicted and refused.
	b0, b1 := wOn.stats[0], wOn.stats[1]
	require.Greater(t, b0.Hits, uint64(50), "broker 0's cache answered watermarks")
	require.Greater(t, b0.Found, uint64(10), "broker 0's cache found repeated hashes")
	require.Positive(t, b0.FilterHashes, "broker 0 held hashes in filters")
	require.Positive(t, b0.FilterHits, "broker 0's filters lowered watermarks")
	require.Positive(t, b0.SentinelsByReason["gap"]+b1.SentinelsByReason["gap"], "writes through the other broker were gaps")
	require.Positive(t, b0.SentinelsByReason["window"]+b1.SentinelsByReason["window"], "window changes dropped partitions")
	require.Positive(t, b1.Hits, "broker 1's cache answered watermarks")
	require.Positive(t, b1.Evictions+b1.SentinelsByReason["pressure"]+b1.Hydrations.TooDeep,
		"broker 1's budget evicted or refused partitions")
	require.Zero(t, b0.Hydrations.Failed+b1.Hydrations.Failed)
	// Not vacuous either: the duplicate fast path answered batches in both
	// worlds that have it (and only there), and some predictions missed.
	t.Logf("fast path: cache on %+v, cache off %+v, locked only %+v", wOn.fast, wOff.fast, wLocked.fast)
	require.Positive(t, wOn.fast.unlocked, "cache on: the fast path answered batches")
	require.Positive(t, wOff.fast.unlocked, "cache off: the fast path answered batches")
	require.Positive(t, wOn.fast.misses+wOff.fast.misses, "some fast path predictions missed")
	require.Zero(t, wLocked.fast.unlocked+wLocked.fast.misses, "locked only: no fast path")
	// With the cache on, batches were proven from the segments it named
	// (queen.push_dups_segments); without it, only by window probes.
	require.Positive(t, wOn.fast.byOriginals, "cache on: no batch proven from the originals the cache named")
	require.Zero(t, wOff.fast.byOriginals, "cache off: the cache named originals")
	// And the packer carried several partitions' batches in one round trip
	// in both worlds that pack, never in the reference.
	for _, w := range []*diffWorld{wOn, wOff} {
		require.Greater(t, w.fast.packedBatches, w.fast.packedTxns, "no round trip carried two batches")
	}
	require.Zero(t, wLocked.fast.packedTxns, "single: nothing packed")
	for i, s := range wOff.stats {
		require.Zero(t, s.Hits, "kill switch: broker %d's cache answered nothing", i)
		require.Zero(t, s.Hydrations.Started, "kill switch: broker %d loaded nothing", i)
		require.Positive(t, s.SentinelsByReason["disabled"], "kill switch: broker %d counted disabled sentinels", i)
	}
}

// ---------------------------------------------------------------------------
// The actor's use of the cache, through the registry (no HTTP).

type regHarness struct {
	st    *sqlstore.Store
	reg   *actor.Registry
	cache *cache.Cache
}

func newRegHarness(t *testing.T, budget int64) *regHarness {
	t.Helper()
	return newRegHarnessCache(t, cache.Config{Enabled: true, BudgetBytes: budget})
}

// newRegHarnessCache is newRegHarness with a cache configured by cfg.
func newRegHarnessCache(t *testing.T, cfg cache.Config) *regHarness {
	t.Helper()
	budget := cfg.BudgetBytes
	st := sqlstoretest.Open(t)
	c := cache.New(cfg)
	reg := actor.NewRegistry(st, actor.Config{Cache: c, CacheBudgetBytes: budget, Logger: zerolog.Nop()})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, reg.Close(ctx))
	})
	return &regHarness{st: st, reg: reg, cache: c}
}

// push pushes txids to queue/part and returns the statuses.
func (h *regHarness) push(t *testing.T, queue, part string, txids ...string) ([]string, *reginatype.PushGroup) {
	t.Helper()
	g := &reginatype.PushGroup{Queue: queue, Partition: part}
	for _, tx := range txids {
		g.Items = append(g.Items, reginatype.PushItem{TransactionID: tx, Payload: []byte(`{}`)})
	}
	h.reg.Push(context.Background(), []*reginatype.PushGroup{g})
	require.NoError(t, g.Err)
	out := make([]string, len(g.Results))
	for i, r := range g.Results {
		out[i] = r.Status.String()
	}
	return out, g
}

func (h *regHarness) waitKnown(t *testing.T, partitions int) {
	t.Helper()
	checkFor(t, 30*time.Second, 2*time.Millisecond, func() error {
		if s := h.reg.Stats(); s.DedupCache.Partitions != partitions || s.Hydrations.Running != 0 {
			return fmt.Errorf("%d partitions known, %d loads running", s.DedupCache.Partitions, s.Hydrations.Running)
		}
		return nil
	})
}

func hashes(txids ...string) [][16]byte {
	out := make([][16]byte, len(txids))
	for i, tx := range txids {
		out[i] = partition.HashTxID(tx)
	}
	return out
}

// The actor learns exactly the hashes a push stored, at their offsets: the
// leaders minus the duplicates SQL found, in frame order; followers inside
// a body and all-duplicate pushes teach nothing.
func TestActorTeachesTheCacheWhatWasStored(t *testing.T) {
	t.Parallel()
	h := newRegHarness(t, 64<<20)
	st, g := h.push(t, "q", "p", "a", "b") // offsets 0, 1; the cache starts loading
	require.Equal(t, []string{"queued", "queued"}, st)
	p := g.PartitionID
	h.waitKnown(t, 1)
	w, r := h.cache.Watermark(p, 3600, hashes("zzz"))
	require.Equal(t, cache.ReasonNone, r)
	require.Equal(t, int64(1), w, "loaded up to next_offset - 1")

	// b is a duplicate (offset 1), a follower repeats c: stored c, d at 2, 3.
	st, _ = h.push(t, "q", "p", "c", "b", "c", "d")
	require.Equal(t, []string{"queued", "duplicate", "duplicate", "queued"}, st)
	w, _ = h.cache.Watermark(p, 3600, hashes("zzz"))
	require.Equal(t, int64(3), w, "known up to the segment's last offset")
	w, _ = h.cache.Watermark(p, 3600, hashes("d"))
	require.Equal(t, int64(1), w, "d is held at the segment starting at 2")
	w, _ = h.cache.Watermark(p, 3600, hashes("b"))
	require.Equal(t, int64(-1), w, "b is held at the segment starting at 0")

	// An all-duplicate push writes nothing and teaches nothing.
	st, _ = h.push(t, "q", "p", "d", "a")
	require.Equal(t, []string{"duplicate", "duplicate"}, st)
	w, _ = h.cache.Watermark(p, 3600, hashes("zzz"))
	require.Equal(t, int64(3), w)

	// Another writer (here: the store directly, as a second broker would)
	// makes a gap: the cache drops the partition at the next learn, and the
	// duplicate it never saw is still found.
	b := &reginatype.PushBatch{Partition: p, WindowHint: 3600, Watermark: reginatype.NoWatermark}
	b.Add(partition.HashTxID("elsewhere"), partition.NewV7(), &partition.Body{TransactionID: "elsewhere", Payload: []byte(`1`)})
	_, err := h.st.Push(context.Background(), b)
	require.NoError(t, err)
	st, _ = h.push(t, "q", "p", "elsewhere", "e")
	require.Equal(t, []string{"duplicate", "queued"}, st)
	_, r = h.cache.Watermark(p, 3600, hashes("zzz"))
	require.Equal(t, cache.ReasonGap, r)

	// Deleting the queue forgets its partitions.
	existed, err := h.reg.Link(h.st).DeleteQueue(context.Background(), "q")
	require.NoError(t, err)
	require.True(t, existed)
	_, r = h.cache.Watermark(p, 3600, hashes("zzz"))
	require.Equal(t, cache.ReasonUnknown, r)
}

// A partition whose window holds more hashes than the budget could hold is
// not loaded at all: the sidecar's depth is estimated first (two index
// lookups) and the load skipped, with a backoff; pushes keep the full-window
// probe and find the duplicates.
func TestHydrationOfAPartitionTooBigForTheBudget(t *testing.T) {
	t.Parallel()
	const budget = 64 << 10 // ~1500 hashes at most
	h := newRegHarness(t, budget)
	ctx := context.Background()
	ref, err := h.st.EnsurePartition(ctx, "big", "p")
	require.NoError(t, err)
	d := newDB(t, h.st.Schema())
	// 100 segments of 100 hashes (of big-0 ... big-9999): 10k hashes in the
	// window, and no segments (a duplicate of them names the zero id).
	all := make([][]byte, 10000)
	for i := range all {
		h := partition.HashTxID("big-" + strconv.Itoa(i))
		all[i] = h[:]
	}
	d.exec(t, `INSERT INTO queen.log_txns (partition_id, first_offset, created_at, hashes)
		SELECT $1::uuid, i * 100, now() - interval '1 minute', ($2::bytea[])[i * 100 + 1 : i * 100 + 100]
		  FROM generate_series(0, 99) i`, [16]byte(ref.ID), all)
	d.exec(t, `UPDATE queen.partitions SET next_offset = 10000 WHERE id = $1`, [16]byte(ref.ID))

	st, _ := h.push(t, "big", "p", "new-1")
	require.Equal(t, []string{"queued"}, st)
	checkFor(t, 30*time.Second, 2*time.Millisecond, func() error {
		if s := h.reg.Stats(); s.Hydrations.TooDeep != 1 || s.Hydrations.Running != 0 {
			return fmt.Errorf("hydrations %+v", s.Hydrations)
		}
		return nil
	})
	s := h.reg.Stats()
	require.Zero(t, s.Hydrations.Finished, "nothing was read")
	require.Zero(t, s.DedupCache.Partitions)
	require.LessOrEqual(t, s.DedupCache.Bytes, int64(budget))

	// The cache cannot vouch and no reload is tried; verdicts are exact.
	w, _ := h.cache.Watermark(ref.ID, 3600, hashes("x"))
	require.Equal(t, cache.NoWatermark, w)
	st, g := h.push(t, "big", "p", "new-1", "big-1234", "new-2", "big-9999")
	require.Equal(t, []string{"duplicate", "duplicate", "queued", "duplicate"}, st)
	require.Equal(t, partition.ZeroUUID, g.Results[1].MessageID, "preloaded without a segment")
	require.Equal(t, uint64(1), h.reg.Stats().Hydrations.Started, "no reload during the pressure backoff")
}

// A partition whose window is deeper than the cache's exact tier is loaded
// with its older hashes in filters, read row by row from PostgreSQL: the
// cache then vouches for new pushes (watermark, no full-window probe) in
// a fraction of the memory exact keys take, a repeat of a recent id gets its
// exact watermark and one of an old id the full-window probe, and every
// verdict is the database's.
func TestHydrationOfADeepPartitionInFilters(t *testing.T) {
	t.Parallel()
	const n, hot = 20000, 1000
	h := newRegHarnessCache(t, cache.Config{Enabled: true, BudgetBytes: 64 << 20, HotHashes: hot})
	ctx := context.Background()
	ref, err := h.st.EnsurePartition(ctx, "deep", "p")
	require.NoError(t, err)
	d := newDB(t, h.st.Schema())
	// 200 rows of 100 hashes (of deep-0 ... deep-19999), a second apart
	// over the last minutes, and no segments.
	all := make([][]byte, n)
	for i := range all {
		h := partition.HashTxID("deep-" + strconv.Itoa(i))
		all[i] = h[:]
	}
	d.exec(t, `INSERT INTO queen.log_txns (partition_id, first_offset, created_at, hashes)
		SELECT $1::uuid, i * 100, now() - make_interval(secs => 400 - i), ($2::bytea[])[i * 100 + 1 : i * 100 + 100]
		  FROM generate_series(0, 199) i`, [16]byte(ref.ID), all)
	d.exec(t, `UPDATE queen.partitions SET next_offset = $2 WHERE id = $1`, [16]byte(ref.ID), n)

	st, _ := h.push(t, "deep", "p", "new-0")
	require.Equal(t, []string{"queued"}, st)
	checkFor(t, 30*time.Second, 2*time.Millisecond, func() error {
		if s := h.reg.Stats(); s.DedupCache.Partitions != 1 || s.Hydrations.Running != 0 {
			return fmt.Errorf("cache %+v, hydrations %+v", s.DedupCache, s.Hydrations)
		}
		return nil
	})
	s := h.reg.Stats()
	require.EqualValues(t, 1, s.Hydrations.Finished)
	require.Zero(t, s.Hydrations.TooDeep+s.Hydrations.Truncated)
	c := s.DedupCache
	require.GreaterOrEqual(t, c.Hashes, int64(n))
	require.Greater(t, c.FilterHashes, int64(n-hot), "the older hashes are in filters")
	require.Less(t, c.Bytes, int64(n*8), "a fraction of the ~40 B a hash held exactly")

	// New ids: the cache vouches (no full-window probe).
	before := h.reg.Stats().DedupCache
	for i := range 20 {
		st, _ := h.push(t, "deep", "p", "new-a"+strconv.Itoa(i), "new-b"+strconv.Itoa(i))
		require.Equal(t, []string{"queued", "queued"}, st)
	}
	after := h.reg.Stats().DedupCache
	// A filter's false positive (about 2.5e-4 a hash against four blocks;
	// two of these 40 ids were at 20 bits a hash) sends its push to the
	// full-window probe.
	hits, cold := after.Hits-before.Hits, after.SentinelsByReason["cold"]-before.SentinelsByReason["cold"]
	require.EqualValues(t, 20, hits+cold, "every push of new ids got a watermark, or a filter's false positive: %+v", after.SentinelsByReason)
	require.GreaterOrEqual(t, hits, uint64(16))
	// Repeats: of a recent id (held exactly), of an old one (in a filter),
	// and of an id pushed since: all duplicates, the database says so.
	st, _ = h.push(t, "deep", "p", "deep-19990", "new-a3")
	require.Equal(t, []string{"duplicate", "duplicate"}, st)
	require.Equal(t, after.Hits+1, h.reg.Stats().DedupCache.Hits, "recent repeats: held exactly, a watermark")
	st, _ = h.push(t, "deep", "p", "deep-19990", "deep-5", "new-a3", "new-c")
	require.Equal(t, []string{"duplicate", "duplicate", "duplicate", "queued"}, st)
	last := h.reg.Stats().DedupCache
	require.Equal(t, cold+1, last.SentinelsByReason["cold"]-before.SentinelsByReason["cold"],
		"the old id was found in a filter: the full-window probe")
}
