package actor

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/regina-mq/regina/cache"
	"github.com/regina-mq/regina/internal/crypt"
	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// The push path, top to bottom:
//
//  1. Registry.Push hands each group to its partition's actor (submit,
//     enqueue), starting the actor on demand, and waits for every group or
//     for ctx to end (abandon).
//  2. The actor's goroutine (run) wakes on the first group, drains whole
//     groups into a batch bounded by BatchMaxItems/BatchMaxBytes (take) and
//     runs it (process, push): resolve the partition, collapse repeated
//     transaction ids, mint message ids, ask the cache for a probe
//     watermark, run the store's push transaction, teach the cache what was
//     written, and answer every group of the batch.
//  3. An actor whose mailbox stayed empty for IdleTimeout (BusyIdleTimeout
//     while more than ActorsSoftLimit are live) retires; one that
//     sees the registry close drains its mailbox first.

// errRetired is enqueue's answer when the actor retired between the
// registry's lookup and the enqueue: the caller asks the registry again.
var errRetired = errors.New("actor retired")

// errPanicked reports a batch whose processing panicked (a bug). The outcome
// of its push is unknown, so the groups get a retryable error and the cache
// forgets the partition.
var errPanicked = errors.New("internal error while pushing; the outcome is unknown, retrying with the same transactionId is safe")

// maxPushAttempts bounds the retries of one batch after ErrPartitionMissing
// or ErrWindowChanged (both mean nothing was written).
const maxPushAttempts = 4

// request is one group in flight. The caller owns group; the actor reads the
// items (under mu) and writes the outcome fields before closing done, and
// never touches group: the caller copies the outcome into it after done, so
// a caller that stopped waiting (abandon) races with nothing.
type request struct {
	group *reginatype.PushGroup
	n     int // len(items)
	bytes int // payload and transaction id bytes, for the mailbox bounds
	done  chan struct{}

	// mu guards items: abandon swaps in a deep copy, so that the caller may
	// reuse its buffers once Push returned, even when the actor has yet to
	// read them.
	mu    sync.Mutex
	items []reginatype.PushItem

	// owner is the actor whose mailbox q entered (set by enqueue, on the
	// caller's goroutine).
	owner *actor

	// The outcome, written by the actor before close(done).
	results     []reginatype.PushVerdict
	partitionID partition.UUID
	err         error
}

// Push hands every group to its partition's actor and waits until each is
// answered, filling its Results and PartitionID, or Err. Groups for different
// partitions commit independently.
//
// When ctx ends first, Push stops waiting and returns at once. A group still
// in its mailbox is withdrawn: nothing of it is written, and its Err wraps
// ctx.Err(). A group already in a batch goes on to its verdict (stored or
// duplicate, counted in the metrics and taught to the cache: it is never lost
// or misreported); only its delivery is abandoned, and its Err wraps
// reginatype.ErrOutcomeUnknown and ctx.Err(). A retry with the same
// transaction ids is safe either way. Push never reads Items after it
// returned, so the caller may reuse the payload buffers.
func (r *Registry) Push(ctx context.Context, groups []*reginatype.PushGroup) {
	reqs := make([]*request, len(groups))
	for i, g := range groups {
		q := &request{group: g, n: len(g.Items), items: g.Items, done: make(chan struct{})}
		for k := range g.Items {
			q.bytes += len(g.Items[k].Payload) + len(g.Items[k].TransactionID)
		}
		reqs[i] = q
		if err := ctx.Err(); err != nil {
			q.err = fmt.Errorf("push %s/%s: not sent, nothing written: %w", g.Queue, g.Partition, err)
			close(q.done)
			continue
		}
		if err := r.submit(q); err != nil {
			q.err = err
			close(q.done)
		}
	}
	for _, q := range reqs {
		select {
		case <-q.done:
		case <-ctx.Done():
		}
		q.deliver(ctx)
	}
}

// deliver copies q's outcome into its group, or abandons q when it is not
// answered yet (ctx ended).
func (q *request) deliver(ctx context.Context) {
	g := q.group
	select {
	case <-q.done:
		g.Err = q.err
		if q.err == nil {
			g.Results, g.PartitionID = q.results, q.partitionID
		}
		return
	default:
	}
	if q.owner != nil && q.owner.withdraw(q) {
		q.owner.reg.withdrawn.Add(1)
		g.Err = fmt.Errorf("push %s/%s: gave up waiting before the batch started, nothing written: %w",
			g.Queue, g.Partition, ctx.Err())
		return
	}
	// In a batch: make the actor's view independent of the caller's buffers.
	q.mu.Lock()
	items := make([]reginatype.PushItem, len(q.items))
	for i, it := range q.items {
		it.Payload = append([]byte(nil), it.Payload...)
		items[i] = it
	}
	q.items = items
	q.mu.Unlock()
	select {
	case <-q.done: // answered meanwhile: deliver the verdict after all
		q.deliver(ctx)
	default:
		if q.owner != nil {
			q.owner.reg.abandoned.Add(1)
		}
		g.Err = fmt.Errorf("push %s/%s: gave up waiting for the batch: %w (%w)",
			g.Queue, g.Partition, reginatype.ErrOutcomeUnknown, ctx.Err())
	}
}

// submit puts q in its partition's mailbox, starting the actor if needed.
func (r *Registry) submit(q *request) error {
	k := key(q.group.Queue, q.group.Partition)
	for {
		r.mu.Lock()
		if r.closing {
			r.mu.Unlock()
			return reginatype.ErrShuttingDown
		}
		a := r.actors[k]
		if a == nil {
			a = newActor(r, q.group.Queue, q.group.Partition)
			r.actors[k] = a
			r.live.Store(int64(len(r.actors)))
			r.wg.Add(1)
			go a.run()
		}
		r.mu.Unlock()
		if h := r.hooks.afterLookup; h != nil {
			h(a)
		}
		err := a.enqueue(q)
		if errors.Is(err, errRetired) {
			continue // it retired between lookup and enqueue: start a new one
		}
		if errors.Is(err, reginatype.ErrMailboxFull) {
			r.mailboxFull.Add(1)
		}
		return err
	}
}

func key(queue, part string) string { return queue + "\x00" + part }

// actor serialises the pushes of one partition.
type actor struct {
	reg         *Registry
	key         string
	queue, part string
	log         zerolog.Logger
	wake        chan struct{}

	// guarded by mu
	mu      sync.Mutex
	mailbox []*request
	items   int
	bytes   int
	retired bool

	// owned by the actor goroutine
	ref      reginatype.PartitionRef
	resolved bool
	// refGen and refAt are the registry's optionsGen and the time when ref
	// was read; either moving on makes the actor read it again.
	refGen uint64
	refAt  time.Time
	// allDup is true when the last batch was answered entirely with
	// duplicates: the next one is expected to be too (a retry storm), so
	// it first tries the read-only fast path even when the cache cannot
	// vouch for its hashes.
	allDup  bool
	batch   reginatype.PushBatch
	scratch scratch
	// packed is the actor's slot in the packer (see pack.go).
	packed packed
}

// scratch holds the buffers one batch reuses.
type scratch struct {
	txIDs   []string
	leader  []int
	leaders []int
	results []reginatype.PushVerdict
	// hashes are the batch's leader hashes in batch order (the dedup
	// cache's input); stored those of the leaders a push stored.
	hashes [][16]byte
	stored [][16]byte
	// fps are the payload fingerprints of every item of the batch, in batch
	// order, when the queue checks them (empty otherwise).
	fps []int64
	// sealed holds one item's sealed payload until the batch copies it.
	sealed []byte
}

func newActor(r *Registry, queue, part string) *actor {
	return &actor{
		reg:   r,
		key:   key(queue, part),
		queue: queue,
		part:  part,
		log:   r.log.With().Str("queue", queue).Str("partition", part).Logger(),
		wake:  make(chan struct{}, 1),
	}
}

// enqueue adds q to the mailbox, or refuses it. A group that would cross a
// mailbox bound is refused unless the mailbox is empty (a single large push
// is always accepted; the HTTP body limit bounds it).
func (a *actor) enqueue(q *request) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.retired {
		return errRetired
	}
	cfg := &a.reg.cfg
	if a.items > 0 && (a.items+q.n > cfg.MailboxMaxItems || a.bytes+q.bytes > cfg.MailboxMaxBytes) {
		return reginatype.ErrMailboxFull
	}
	wasEmpty := len(a.mailbox) == 0
	q.owner = a
	a.mailbox = append(a.mailbox, q)
	a.items += q.n
	a.bytes += q.bytes
	a.reg.mailboxDelta(q.n)
	if wasEmpty {
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// withdraw removes q from the mailbox if it is still there, reporting
// whether it was (then nothing of it will be written).
func (a *actor) withdraw(q *request) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, m := range a.mailbox {
		if m == q {
			a.mailbox = append(a.mailbox[:i], a.mailbox[i+1:]...)
			a.items -= q.n
			a.bytes -= q.bytes
			a.reg.mailboxDelta(-q.n)
			return true
		}
	}
	return false
}

// take removes the next batch of whole groups from the mailbox: at least
// one, then as many as fit BatchMaxItems and BatchMaxBytes.
func (a *actor) take(dst []*request) []*request {
	a.mu.Lock()
	defer a.mu.Unlock()
	cfg := &a.reg.cfg
	n, items, bytes := 0, 0, 0
	for n < len(a.mailbox) {
		q := a.mailbox[n]
		if n > 0 && (items+q.n > cfg.BatchMaxItems || bytes+q.bytes > cfg.BatchMaxBytes) {
			break
		}
		items += q.n
		bytes += q.bytes
		n++
	}
	dst = append(dst, a.mailbox[:n]...)
	clear(a.mailbox[:n])
	a.mailbox = a.mailbox[n:]
	if len(a.mailbox) == 0 {
		a.mailbox = a.mailbox[:0:0]
	}
	a.items -= items
	a.bytes -= bytes
	a.reg.mailboxDelta(-items)
	return dst
}

// tryRetire marks the actor retired when its mailbox is empty. It checks
// under the same lock enqueue takes, so no group can slip in after the check.
func (a *actor) tryRetire() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.mailbox) > 0 {
		return false
	}
	a.retired = true
	return true
}

func (a *actor) run() {
	defer a.reg.remove(a)
	pprof.Do(context.Background(), pprof.Labels("queue", a.queue, "partition", a.part), func(ctx context.Context) {
		idle := time.NewTimer(a.reg.cfg.IdleTimeout)
		defer idle.Stop()
		var batch []*request
		for {
			select {
			case <-a.wake:
			case <-idle.C:
				if a.tryRetire() {
					return
				}
			case <-a.reg.stop:
				// Drain: answer everything still waiting, then exit.
				for {
					batch = a.take(batch[:0])
					if len(batch) == 0 {
						if a.tryRetire() {
							return
						}
						continue
					}
					a.process(ctx, batch)
				}
			}
			for {
				batch = a.take(batch[:0])
				if len(batch) == 0 {
					break
				}
				a.process(ctx, batch)
				clear(batch) // answered: keep no request (nor its payloads) alive
			}
			a.release()
			idle.Reset(a.reg.idleTimeout())
		}
	})
}

// release drops the buffers of the last batch once the mailbox is empty:
// an actor waiting for work holds none of its payloads, so the memory of
// many waiting actors stays the size of their structs, not of their
// largest batch. A busy actor keeps them from one batch to the next.
func (a *actor) release() {
	a.batch = reginatype.PushBatch{}
	a.scratch = scratch{}
}

// process runs one push transaction for the groups and answers them. Its ctx
// is the actor's, not a request's: one caller giving up must not cancel the
// batch the others wait for.
func (a *actor) process(ctx context.Context, reqs []*request) {
	if h := a.reg.cfg.BeforeBatch; h != nil {
		n := 0
		for _, q := range reqs {
			n += q.n
		}
		h(a.queue, a.part, n)
	}
	err := a.pushRecovering(ctx, reqs)
	if err != nil {
		a.reg.pushFailures.Add(1)
		a.log.Warn().Err(err).Int("groups", len(reqs)).Msg("push batch failed")
	}
	for _, q := range reqs {
		if err != nil {
			q.err = err
		} else {
			q.partitionID = a.ref.ID
		}
		close(q.done)
	}
}

// pushRecovering runs push and turns a panic into an error for this batch,
// so one bad batch cannot take the broker (and every other partition's
// waiting requests) down with it.
func (a *actor) pushRecovering(ctx context.Context, reqs []*request) (err error) {
	defer func() {
		if v := recover(); v != nil {
			a.log.Error().Interface("panic", v).Str("stack", string(debug.Stack())).Msg("push batch panicked")
			a.reg.cache.Forget(a.ref.ID)
			a.unresolve()
			err = fmt.Errorf("push %s/%s: %w", a.queue, a.part, errPanicked)
		}
	}()
	return a.push(ctx, reqs)
}

// push runs the batch's transaction, retrying when the store says nothing
// was written because the partition vanished or the window was switched on
// or off, and fills each request's results.
func (a *actor) push(ctx context.Context, reqs []*request) error {
	s := &a.scratch
	s.txIDs = s.txIDs[:0]
	for _, q := range reqs {
		q.mu.Lock()
		for i := range q.items {
			s.txIDs = append(s.txIDs, q.items[i].TransactionID)
		}
		q.mu.Unlock()
	}
	n := len(s.txIDs)
	s.results = append(s.results[:0], make([]reginatype.PushVerdict, n)...)

	var lastErr error
	if a.resolved && (a.reg.optionsGen.Load() != a.refGen || time.Since(a.refAt) >= a.reg.cfg.RefreshOptions) {
		a.resolved = false // the queue's options may have changed: read them again
	}
	for range maxPushAttempts {
		if !a.resolved {
			if err := a.resolve(ctx); err != nil {
				return err
			}
		}
		if a.ref.Encrypt && a.reg.cfg.Key == nil {
			// Fails closed: never plaintext into an encrypted queue.
			return fmt.Errorf("push %s/%s: %w", a.queue, a.part, reginatype.ErrNoEncryptionKey)
		}
		a.collapse(n)
		a.buildBatch(reqs)
		// The same window goes to the cache and, as WindowHint, to SQL,
		// which ignores the watermark if the queue's window has grown.
		a.batch.Epoch = a.reg.syncEpoch()
		var known, loading bool
		a.batch.Watermark, known, loading = a.watermark()
		a.batch.ExpectDuplicates = a.ref.WindowSeconds > 0 && (known || a.allDup) &&
			!a.reg.cfg.NoUnlockedDuplicates
		if !a.batch.ExpectDuplicates {
			a.batch.Originals = a.batch.Originals[:0]
		}
		res, err := a.store(ctx, loading)
		switch {
		case err == nil:
			a.allDup = res.FirstOffset < 0
			if res.Unlocked {
				a.reg.unlockedDups.Add(1)
				if len(a.batch.Originals) == len(a.batch.Hashes) {
					a.reg.unlockedByOriginals.Add(1)
				}
			} else if a.batch.ExpectDuplicates {
				a.reg.fastPathMisses.Add(1)
			}
			a.learn(&res)
			a.ref.WindowSeconds = res.WindowSeconds
			a.ref.PayloadCheck = res.PayloadCheck
			a.answer(reqs, &res)
			return nil
		case errors.Is(err, reginatype.ErrPartitionMissing):
			// The queue was deleted (maybe through another broker): its
			// partition id is never used again.
			a.reg.cache.Forget(a.ref.ID)
			a.unresolve()
		case errors.Is(err, reginatype.ErrWindowChanged):
			a.ref.WindowSeconds = res.WindowSeconds
			a.ref.PayloadCheck = res.PayloadCheck
		default:
			// Nothing learned: the outcome may be unknown (a segment may
			// have been written), so drop what the cache holds.
			a.reg.cache.Forget(a.ref.ID)
			if errors.Is(err, errPanicked) {
				a.unresolve() // as pushRecovering does (the packer recovered it)
			}
			return fmt.Errorf("push %s/%s: %w", a.queue, a.part, err)
		}
		lastErr = err
	}
	return fmt.Errorf("push %s/%s: gave up after %d attempts: %w", a.queue, a.part, maxPushAttempts, lastErr)
}

// store runs the batch's push transaction. With loading (a full-window
// probe while the partition's cache loads) it first takes one of the
// registry's loadingProbes slots, so the loads are not starved by probes of
// the partitions they are loading (see hydrate.go).
func (a *actor) store(ctx context.Context, loading bool) (reginatype.PushResult, error) {
	if loading {
		a.reg.loadingProbes <- struct{}{}
		defer func() { <-a.reg.loadingProbes }()
	}
	start := time.Now()
	defer func() { a.reg.cfg.Metrics.ObservePushTransaction(time.Since(start)) }()
	return a.reg.storePush(ctx, a, &a.batch)
}

// setRef makes ref the actor's partition, with its queue's options as read
// at at under the registry's options generation gen.
func (a *actor) setRef(ref reginatype.PartitionRef, gen uint64, at time.Time) {
	a.ref, a.resolved, a.refGen, a.refAt = ref, true, gen, at
	if ref.Encrypt && a.reg.cfg.Key == nil {
		a.log.Warn().Msg("queue has encryptionEnabled but " + crypt.KeyEnv +
			" is not set: its pushes are refused")
	}
}

// collapse picks the batch's leaders: with deduplication on, the first item
// of each transaction id (later ones follow it); off, every item.
func (a *actor) collapse(n int) {
	s := &a.scratch
	if a.ref.WindowSeconds != 0 {
		s.leader, s.leaders = partition.Collapse(s.txIDs, s.leader, s.leaders)
		return
	}
	s.leader = s.leader[:0]
	s.leaders = s.leaders[:0]
	for i := range n {
		s.leader = append(s.leader, i)
		s.leaders = append(s.leaders, i)
	}
}

// buildBatch fills a.batch with the leaders, minting their message ids.
func (a *actor) buildBatch(reqs []*request) {
	s := &a.scratch
	b := &a.batch
	b.Reset()
	b.Partition = a.ref.ID
	b.WindowHint = a.ref.WindowSeconds
	b.Watermark = reginatype.NoWatermark
	s.hashes = s.hashes[:0]
	s.fps = s.fps[:0]
	check := a.ref.ChecksPayloads()
	if check {
		b.Fingerprints = make([]int64, 0, len(s.leaders))
	}
	now := time.Now().UnixMicro()
	li := 0
	idx := 0
	for _, q := range reqs {
		q.mu.Lock()
		for i := range q.items {
			if check {
				// Of the payload as received: the bytes a retry resends.
				s.fps = append(s.fps, crypt.PayloadFingerprint(a.reg.cfg.Key, a.ref.Encrypt, q.items[i].Payload, partition.Fingerprint))
			}
			if li < len(s.leaders) && s.leaders[li] == idx {
				it := &q.items[i]
				id := partition.NewV7()
				s.results[idx] = reginatype.PushVerdict{Status: partition.StatusQueued, MessageID: id}
				body := partition.Body{CreatedAt: now, TransactionID: it.TransactionID, TraceID: it.TraceID,
					HasTrace: it.HasTrace, Payload: it.Payload, ProducerSub: it.ProducerSub}
				// Sealed last: everything that reads the payload (or hashes
				// it) must do so on it.Payload, the plaintext, before here.
				if a.ref.Encrypt && a.reg.cfg.Key != nil {
					s.sealed = a.reg.cfg.Key.Seal(s.sealed[:0], it.Payload)
					body.Payload, body.Encrypted = s.sealed, true
				}
				h := partition.HashTxID(it.TransactionID)
				s.hashes = append(s.hashes, h)
				b.Add(h, id, &body)
				if check {
					b.Fingerprints = append(b.Fingerprints, s.fps[idx])
				}
				li++
			}
			idx++
		}
		q.mu.Unlock()
	}
}

// watermark asks the cache for the batch's probe watermark (window > 0 only)
// and starts a hydration when the cache cannot vouch for the partition. known
// reports that the cache holds every hash of the batch (a prediction that the
// batch is all duplicates, not a proof); the batch's Originals then name
// the segments the cache holds them in. loading reports a full-window probe
// because the partition's load is running.
func (a *actor) watermark() (w int64, known, loading bool) {
	if a.ref.WindowSeconds <= 0 {
		return reginatype.NoWatermark, false, false
	}
	w, found, origs, reason := a.reg.cache.WatermarkOriginals(a.ref.ID, a.ref.WindowSeconds, a.scratch.hashes,
		a.batch.Originals)
	loading = reason == cache.ReasonHydrating
	if needsHydration(reason) {
		loading = a.reg.maybeHydrate(a.ref.ID)
	}
	a.batch.Originals = origs
	return w, found > 0 && found == len(a.scratch.hashes), w < 0 && loading
}

// learn teaches the cache the segment a push wrote: the hashes of the stored
// leaders (the batch minus the duplicates SQL found), in frame order.
func (a *actor) learn(res *reginatype.PushResult) {
	if res.FirstOffset < 0 {
		return // every item was a duplicate: nothing was written
	}
	s := &a.scratch
	s.stored = s.stored[:0]
	d := 0
	for i, h := range s.hashes {
		if d < len(res.DupIndex) && res.DupIndex[d] == i {
			d++
			continue
		}
		s.stored = append(s.stored, h)
	}
	if res.Epoch != a.batch.Epoch || !a.reg.underEpoch(res.Epoch, func() {
		a.reg.cache.Learn(a.ref.ID, res.WindowSeconds, res.FirstOffset, s.stored, res.CreatedAt)
	}) {
		// The database server changed around this push: the next batch's
		// syncEpoch drops the cache; make sure this partition goes too.
		a.reg.cache.Forget(a.ref.ID)
	}
}

// answer turns the transaction's result into per-item verdicts, records
// them in the metrics and wakes long-polling consumers of the queue.
func (a *actor) answer(reqs []*request, res *reginatype.PushResult) {
	s := &a.scratch
	check := len(s.fps) > 0 && res.PayloadCheck != partition.PayloadCheckOff
	reject := check && res.PayloadCheck == partition.PayloadCheckReject
	// ref[i] is the fingerprint of the message item i names (its own for a
	// stored leader, its original's for a duplicate, nil when unknown).
	var ref []*int64
	if check {
		ref = make([]*int64, len(s.fps))
		for i := range s.fps {
			if s.leader[i] == i {
				ref[i] = &s.fps[i]
			}
		}
	}
	// Leaders found in the window: duplicate, with the original's id.
	for k, bi := range res.DupIndex {
		item := s.leaders[bi]
		v := reginatype.PushVerdict{Status: partition.StatusDuplicate, MessageID: res.DupOriginal[k]}
		if check {
			ref[item] = res.DupFingerprint[k]
			v.Payload = partition.ComparePayload(s.fps[item], ref[item])
		}
		s.results[item] = v
	}
	var queued, dups, unknown, conflicts, mismatches int
	firstMismatch := -1
	idx := 0
	for _, q := range reqs {
		q.results = make([]reginatype.PushVerdict, q.n)
		for i := range q.results {
			if l := s.leader[idx]; l != idx {
				// Follower: echo the leader's final message id, and compare
				// with the payload of the message it names.
				v := reginatype.PushVerdict{Status: partition.StatusDuplicate, MessageID: s.results[l].MessageID}
				if check {
					v.Payload = partition.ComparePayload(s.fps[idx], ref[l])
				}
				s.results[idx] = v
			}
			v := s.results[idx]
			if v.Payload == partition.PayloadDifferent {
				mismatches++
				if firstMismatch < 0 {
					firstMismatch = idx
				}
				if reject {
					v.Status = partition.StatusConflict
				}
			}
			q.results[i] = v
			switch {
			case v.Status == partition.StatusQueued:
				queued++
			case v.Status == partition.StatusConflict:
				conflicts++
			case v.MessageID.IsZero():
				unknown++ // a duplicate whose original's segment is gone
			default:
				dups++
			}
			idx++
		}
	}
	if mismatches > 0 {
		a.reg.cfg.Metrics.ForQueue(a.queue).PayloadMismatches(mismatches)
		a.reg.mismatchLog.Warn().Str("queue", a.queue).Str("partition", a.part).
			Str("transactionId", s.txIDs[firstMismatch]).Str("originalMessageId", s.results[firstMismatch].MessageID.String()).
			Str("dedupPayloadCheck", res.PayloadCheck).Int("items", mismatches).
			Msg("transaction id reused with a different payload")
	}
	a.reg.batches.Add(1)
	a.reg.queued.Add(uint64(queued))
	a.reg.duplicates.Add(uint64(dups + unknown))
	m := a.reg.cfg.Metrics
	m.ObserveBatch(queued + dups + unknown)
	mq := m.ForQueue(a.queue)
	mq.Verdicts(queued, dups, unknown)
	mq.Conflicts(conflicts)
	// For each duplicate the probe found, the age of its original (from the
	// original's stored time to this transaction's).
	for _, at := range res.DupCreated {
		mq.ObserveRetryAge(res.CreatedAt.Sub(at))
	}
	if queued > 0 {
		a.reg.signals.notify(a.queue)
	}
}
