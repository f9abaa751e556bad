package actor

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeStore is an in-memory Store with exact deduplication (no window
// expiry): enough to test the pipeline around the database. Anything that
// tests SQL runs against PostgreSQL elsewhere.
type fakeStore struct {
	// before, when set, runs at the start of EnsurePartition ("ensure"),
	// Push ("push") and LoadHydrations ("load"); tests use it to hold the
	// actor (or a cache load) or to panic.
	before func(op string)
	// epoch is what Epoch reports; tests move it on to act a failover.
	epoch atomic.Uint64
	// depth is what SidecarDepth reports.
	depth atomic.Int64

	// packs counts the PushMany calls with more than one batch.
	packs atomic.Uint64

	// recent is what RecentPartitions lists.
	recent []partition.UUID

	// check is every queue's dedupPayloadCheck ("" is off).
	check partition.PayloadCheck

	mu      sync.Mutex
	fps     map[partition.Hash]int64 // payload fingerprints stored (all partitions)
	refs    map[string]reginatype.PartitionRef
	ensures int
	ids     map[partition.UUID]map[partition.Hash]partition.UUID
	next    map[partition.UUID]int64
	batches []storedBatch
	// loads holds the partitions of each StreamHydrations call.
	loads [][]partition.UUID
}

// storedBatch is one Push call the store saw.
type storedBatch struct {
	TxIDs    []string
	Payloads []string
	Stored   int // leaders written (not duplicates)
}

func (f *fakeStore) Epoch() uint64 { return f.epoch.Load() }

func newFakeStore() *fakeStore {
	return &fakeStore{refs: map[string]reginatype.PartitionRef{}, fps: map[partition.Hash]int64{},
		ids: map[partition.UUID]map[partition.Hash]partition.UUID{}, next: map[partition.UUID]int64{}}
}

func (f *fakeStore) EnsurePartition(_ context.Context, queue, part string) (reginatype.PartitionRef, error) {
	if f.before != nil {
		f.before("ensure")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ensures++
	ref, ok := f.refs[queue+"/"+part]
	if !ok {
		ref = reginatype.PartitionRef{ID: partition.NewV7(), QueueID: partition.NewV7(), WindowSeconds: 3600,
			PayloadCheck: f.check}
		f.refs[queue+"/"+part] = ref
		f.ids[ref.ID] = map[partition.Hash]partition.UUID{}
	}
	return ref, nil
}

func (f *fakeStore) Push(_ context.Context, b *reginatype.PushBatch) (reginatype.PushResult, error) {
	if f.before != nil {
		f.before("push")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	res := reginatype.PushResult{WindowSeconds: 3600, FirstOffset: -1, CreatedAt: time.Now(), Epoch: f.epoch.Load(),
		PayloadCheck: f.check}
	var sb storedBatch
	known := f.ids[b.Partition]
	start := int32(0)
	for i := range b.Len() {
		body, _, err := partition.DecodeBody(b.Bodies[start:b.Ends[i]])
		if err != nil {
			return res, err
		}
		start = b.Ends[i]
		sb.TxIDs = append(sb.TxIDs, body.TransactionID)
		sb.Payloads = append(sb.Payloads, string(body.Payload))
		h := partition.Hash(b.Hashes[i])
		if orig, dup := known[h]; dup {
			res.DupIndex = append(res.DupIndex, i)
			res.DupOriginal = append(res.DupOriginal, orig)
			res.DupCreated = append(res.DupCreated, res.CreatedAt)
			var fp *int64
			if v, ok := f.fps[h]; ok {
				fp = &v
			}
			res.DupFingerprint = append(res.DupFingerprint, fp)
			continue
		}
		if b.Fingerprints != nil {
			f.fps[h] = b.Fingerprints[i]
		}
		var id partition.UUID
		copy(id[:], b.IDs[16*i:16*i+16])
		known[h] = id
		if res.FirstOffset < 0 {
			res.FirstOffset = f.next[b.Partition]
		}
		f.next[b.Partition]++
		sb.Stored++
	}
	f.batches = append(f.batches, sb)
	return res, nil
}

func (f *fakeStore) SidecarDepth(context.Context, partition.UUID) (int64, error) {
	return f.depth.Load(), nil
}

// PushMany pushes each batch as Push does, counting the calls that carried
// more than one batch.
func (f *fakeStore) PushMany(ctx context.Context, _ reginatype.PushShape, bs []*reginatype.PushBatch,
	res []reginatype.PushResult, errs []error) {
	if len(bs) > 1 {
		f.packs.Add(1)
	}
	for i, b := range bs {
		res[i], errs[i] = f.Push(ctx, b)
	}
}

// RecentPartitions lists the partitions recent holds.
func (f *fakeStore) RecentPartitions(_ context.Context, limit int) ([]partition.UUID, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.recent[:min(limit, len(f.recent))]), nil
}

// StreamHydrations reports every partition with an empty window.
func (f *fakeStore) StreamHydrations(_ context.Context, ps []partition.UUID, heads func([]reginatype.Hydration) error,
	_ func(int, int64, time.Time, [][16]byte) error) error {
	if f.before != nil {
		f.before("load")
	}
	f.mu.Lock()
	f.loads = append(f.loads, slices.Clone(ps))
	f.mu.Unlock()
	return heads(make([]reginatype.Hydration, len(ps)))
}

// seen returns a copy of the batches the store saw.
func (f *fakeStore) seen() []storedBatch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.batches)
}

// gate holds the caller of its hold method until released, and reports
// each arrival.
type gate struct {
	arrived chan struct{}
	release chan struct{}
}

func newGate() *gate { return &gate{arrived: make(chan struct{}, 100), release: make(chan struct{})} }

func (g *gate) hold() {
	g.arrived <- struct{}{}
	<-g.release
}

// waitArrival waits until someone is held.
func (g *gate) waitArrival(t *testing.T) {
	t.Helper()
	select {
	case <-g.arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("nobody reached the gate")
	}
}

// holdCalls makes every store call of op ("ensure" or "push") wait at a gate
// until release is called, which lets the held calls and every later one
// through. Set it before the registry's first push.
func (b *testBundle) holdCalls(op string) (g *gate, release func()) {
	g = newGate()
	var holding atomic.Bool
	holding.Store(true)
	b.store.before = func(o string) {
		if o == op && holding.Load() {
			g.hold()
		}
	}
	return g, func() {
		holding.Store(false)
		close(g.release)
	}
}

// testBundle is one registry on a fake store.
type testBundle struct {
	store *fakeStore
	reg   *Registry
}

// setup returns a registry on a fresh fake store, closed at cleanup.
func setup(t *testing.T, cfg Config) *testBundle {
	t.Helper()
	st := newFakeStore()
	cfg.Logger = zerolog.Nop()
	reg := NewRegistry(st, cfg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, reg.Close(ctx))
	})
	return &testBundle{store: st, reg: reg}
}

// group builds a push group of one item per transaction id.
func group(queue, part string, txIDs ...string) *reginatype.PushGroup {
	g := &reginatype.PushGroup{Queue: queue, Partition: part}
	for _, tx := range txIDs {
		g.Items = append(g.Items, reginatype.PushItem{TransactionID: tx, Payload: []byte(`"` + tx + `"`)})
	}
	return g
}

// pushAsync pushes g in the background; the returned channel is closed
// when Push returned.
func (b *testBundle) pushAsync(ctx context.Context, g *reginatype.PushGroup) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.reg.Push(ctx, []*reginatype.PushGroup{g})
	}()
	return done
}

// waitDepth waits until the partition's mailbox holds n items.
func (b *testBundle) waitDepth(t *testing.T, queue, part string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return b.reg.MailboxDepth(queue, part) == n },
		30*time.Second, time.Millisecond, "mailbox of %s/%s never held %d items", queue, part, n)
}

// waitDone waits for a channel from pushAsync.
func waitDone(t *testing.T, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("push did not return")
	}
}

// statuses returns the group's verdicts as strings.
func statuses(g *reginatype.PushGroup) []string {
	out := make([]string, len(g.Results))
	for i, r := range g.Results {
		out[i] = r.Status.String()
	}
	return out
}
