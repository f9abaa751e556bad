package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/regina-mq/regina/partition"
)

// DefaultWindowSeconds is the deduplication window of a queue created by a
// push; every run of the harness fits inside it.
const DefaultWindowSeconds = 3600

// DBState is what the checker reads from PostgreSQL once the brokers stopped.
type DBState struct {
	Queue            string
	QueueFound       bool
	WindowSeconds    int
	RetentionEnabled bool
	Partitions       map[string]*PartitionState
	// OrphanSegments and OrphanTxns count rows whose partition_id has no
	// partitions row.
	OrphanSegments, OrphanTxns int64
}

// PartitionState is one partition's rows.
type PartitionState struct {
	ID         partition.UUID
	Name       string
	NextOffset int64
	Segments   []SegmentRow // ordered by first_offset
	Txns       []TxnRow     // ordered by first_offset
}

// SegmentRow is one queen.segments row.
type SegmentRow struct {
	FirstOffset int64
	FrameCount  int
	CreatedAt   time.Time
	Frames      []byte
}

// TxnRow is one queen.log_txns row.
type TxnRow struct {
	FirstOffset int64
	CreatedAt   time.Time
	Hashes      [][]byte
}

// LoadState reads the queue's partitions, segments and hash rows.
func LoadState(ctx context.Context, conn *pgx.Conn, schema, queue string) (*DBState, error) {
	q := func(s string) string { return strings.ReplaceAll(s, "queen.", pgx.Identifier{schema}.Sanitize()+".") }
	st := &DBState{Queue: queue, Partitions: map[string]*PartitionState{}}
	var queueID string
	err := conn.QueryRow(ctx, q(`SELECT id::text, dedup_window_seconds, retention_enabled FROM queen.queues WHERE name = $1`), queue).
		Scan(&queueID, &st.WindowSeconds, &st.RetentionEnabled)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read queue: %w", err)
	}
	st.QueueFound = true
	rows, err := conn.Query(ctx, q(`SELECT id::text, name, next_offset FROM queen.partitions WHERE queue_id = $1 ORDER BY name`), queueID)
	if err != nil {
		return nil, fmt.Errorf("read partitions: %w", err)
	}
	var parts []*PartitionState
	for rows.Next() {
		var id string
		p := &PartitionState{}
		if err := rows.Scan(&id, &p.Name, &p.NextOffset); err != nil {
			return nil, err
		}
		if p.ID, err = partition.ParseUUID(id); err != nil {
			return nil, fmt.Errorf("partition id %q: %w", id, err)
		}
		parts = append(parts, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read partitions: %w", err)
	}
	for _, p := range parts {
		st.Partitions[p.Name] = p
		pid := p.ID.String()
		rows, err := conn.Query(ctx, q(`SELECT first_offset, frame_count, created_at, frames FROM queen.segments
			WHERE partition_id = $1 ORDER BY first_offset`), pid)
		if err != nil {
			return nil, fmt.Errorf("read segments of %s: %w", p.Name, err)
		}
		for rows.Next() {
			var s SegmentRow
			if err := rows.Scan(&s.FirstOffset, &s.FrameCount, &s.CreatedAt, &s.Frames); err != nil {
				return nil, err
			}
			p.Segments = append(p.Segments, s)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("read segments of %s: %w", p.Name, err)
		}
		rows, err = conn.Query(ctx, q(`SELECT first_offset, created_at, hashes FROM queen.log_txns
			WHERE partition_id = $1 ORDER BY first_offset`), pid)
		if err != nil {
			return nil, fmt.Errorf("read log_txns of %s: %w", p.Name, err)
		}
		for rows.Next() {
			var t TxnRow
			if err := rows.Scan(&t.FirstOffset, &t.CreatedAt, &t.Hashes); err != nil {
				return nil, err
			}
			p.Txns = append(p.Txns, t)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("read log_txns of %s: %w", p.Name, err)
		}
	}
	if err := conn.QueryRow(ctx, q(`SELECT
		(SELECT count(*) FROM queen.segments s WHERE NOT EXISTS (SELECT 1 FROM queen.partitions p WHERE p.id = s.partition_id)),
		(SELECT count(*) FROM queen.log_txns l WHERE NOT EXISTS (SELECT 1 FROM queen.partitions p WHERE p.id = l.partition_id))`)).
		Scan(&st.OrphanSegments, &st.OrphanTxns); err != nil {
		return nil, fmt.Errorf("count orphan rows: %w", err)
	}
	return st, nil
}

// Violation is one broken promise found by the checker.
type Violation struct {
	Kind      string
	Partition string
	TxID      string
	Detail    string
}

func (v Violation) String() string {
	var b strings.Builder
	b.WriteString(v.Kind)
	if v.Partition != "" {
		b.WriteString(" partition=" + v.Partition)
	}
	if v.TxID != "" {
		b.WriteString(" tx=" + v.TxID)
	}
	if v.Detail != "" {
		b.WriteString(": " + v.Detail)
	}
	return b.String()
}

// Violation kinds.
const (
	VLost          = "lost"           // answered queued, not stored
	VWrongID       = "wrong-id"       // answered queued with an id other than the stored one
	VQueuedTwice   = "queued-twice"   // more than one queued answer for one transaction id
	VStoredTwice   = "stored-twice"   // a transaction id stored more than once in a partition
	VDupWrongID    = "dup-wrong-id"   // duplicate naming another id than the stored original
	VDupZeroID     = "dup-zero-id"    // duplicate answering the zero UUID while retention is off
	VDupNotStored  = "dup-not-stored" // duplicate of something that is not stored
	VPhantom       = "phantom"        // stored but never sent to this partition
	VPayload       = "payload"        // stored payload differs from the one sent
	VMsgIDReused   = "msgid-reused"   // one message id stored for two frames
	VOffsets       = "offsets"        // segments do not tile [0, next_offset)
	VLogTxns       = "log-txns"       // hash rows do not match the segments
	VCorrupt       = "corrupt"        // a segment does not decode
	VPartitionID   = "partition-id"   // queued answer names another partition
	VProtocol      = "protocol"       // a 201 body that breaks the API contract
	VHTTPStatus    = "http-status"    // an answer a valid push must never get
	VQueueConfig   = "queue-config"   // the queue is not what the run assumes
	VBroker        = "broker"         // a broker crashed, hung or did not recover
	VNothingStored = "nothing-stored" // the run stored nothing at all
	VUnresolved    = "unresolved"     // an item never got a definite answer (when every one must)
	VGrowth        = "soak-growth"    // a soak series was not flat after warm-up
)

// CheckOptions adapt the checker to a scenario.
type CheckOptions struct {
	// AsyncKills are the moments (offsets from the run's start) at which the
	// primary of an asynchronous failover scenario was killed. An answer
	// given by the old primary shortly before (or, by a lingering backend,
	// after) a kill may name a commit the standby never received: such
	// answers are counted in CheckStats.Async*, not reported as violations.
	// Everything the new primary stored must still be exact: no id stored
	// twice, gap-free offsets, every later answer right.
	AsyncKills []KillWindow
	// AsyncLag bounds how long before a kill such an answer may have been
	// given (the standby's lag: the WAL receiver's freeze plus slack).
	AsyncLag time.Duration
	// RequireResolved makes an item with no definite answer a violation:
	// every outcome-unknown answer must be resolved by a retry.
	RequireResolved bool
	// Window, when positive, is the retention mode of the soak: the queue
	// has this dedup window (seconds) and retention on. Retention may have
	// removed a prefix of each partition's segments and hash rows (never
	// more); what it removed counts as stored when a consumer received it
	// (Consumed); a transaction id may be stored again once the window
	// after its last copy has passed, and a duplicate may name the zero
	// UUID (its original's segment is gone).
	Window int
	// Consumed is every message consumers received, by (partition,
	// transaction id): retention mode only.
	Consumed map[key][]consumed
}

// KillWindow is one failover: when the primary's postmaster was killed and
// when its last backend was gone (fenced); offsets from the run's start.
// Between the two, backends of the dead postmaster may still commit and
// answer.
type KillWindow struct {
	Kill, Fenced time.Duration
}

// asyncKill returns the kill an answer may have been lost to, if any: the
// request was sent before the old primary was fenced, and answered no
// earlier than AsyncLag before the kill.
func (o CheckOptions) asyncKill(a *Attempt) (time.Duration, bool) {
	for _, k := range o.AsyncKills {
		if a.Start < k.Fenced && a.End >= k.Kill-o.AsyncLag {
			return k.Kill, true
		}
	}
	return 0, false
}

// CheckStats are the counts behind the verdict.
type CheckStats struct {
	Requests, Retries, Twins, Storms     int
	Batches, Items                       int // distinct (partition, transaction id) sent
	QueuedAnswers, DupAnswers, FailedAns int
	NoAnswer                             int // attempts with no per-item answer
	GaveUp, GaveUpStored                 int
	Partitions, Segments, StoredFrames   int
	// Asynchronous failover: queued answers whose message is not stored
	// under the answered id (the commit never reached the standby), of
	// which the id was stored again later by a resend (with a new
	// message_id); answered before the kill, and the longest time before
	// it; answered after the kill (by a backend of the dead postmaster);
	// duplicate answers naming such a lost original.
	AsyncLost, AsyncRestored        int
	AsyncLostBefore, AsyncLostAfter int
	AsyncMaxAge, AsyncMaxLate       time.Duration
	AsyncStaleDups                  int
}

type key struct{ part, tx string }

type answer struct {
	id  partition.UUID
	pid partition.UUID
	att *Attempt
}

type stored struct {
	offset  int64
	seg     int64 // first offset of its segment
	id      partition.UUID
	created time.Time
	inDB    bool // false: removed by retention, known from a consumer
}

// Report is the checker's result.
type Report struct {
	Stats      CheckStats
	Violations []Violation
	// Excerpts holds, per violation key, the history and the stored rows of
	// its transaction id (filled by Check for the violations it finds).
	Excerpts map[string][]string
}

// Check proves the run's promises against the history and the database.
func Check(attempts []*Attempt, st *DBState) *Report {
	return CheckWith(attempts, st, CheckOptions{})
}

// CheckWith is Check with scenario options.
func CheckWith(attempts []*Attempt, st *DBState, opts CheckOptions) *Report {
	r := &Report{Excerpts: map[string][]string{}}
	add := func(kind, part, tx, format string, args ...any) {
		r.Violations = append(r.Violations, Violation{Kind: kind, Partition: part, TxID: tx, Detail: fmt.Sprintf(format, args...)})
	}

	if !st.QueueFound {
		if len(attempts) > 0 {
			add(VQueueConfig, "", "", "queue %q does not exist after the run", st.Queue)
		}
	} else {
		wantWindow := DefaultWindowSeconds
		if opts.Window > 0 {
			wantWindow = opts.Window
		}
		if st.WindowSeconds != wantWindow {
			add(VQueueConfig, "", "", "dedup_window_seconds = %d, the run assumes %d", st.WindowSeconds, wantWindow)
		}
		if st.RetentionEnabled && opts.Window <= 0 {
			add(VQueueConfig, "", "", "retention is enabled; the run assumes it is off")
		}
	}
	if st.OrphanSegments > 0 || st.OrphanTxns > 0 {
		add(VLogTxns, "", "", "%d segments and %d log_txns rows belong to no partition", st.OrphanSegments, st.OrphanTxns)
	}

	// The database: tiling, hash rows, frames.
	storedBy := map[key][]stored{}
	msgIDs := map[partition.UUID]key{}
	names := make([]string, 0, len(st.Partitions))
	for n := range st.Partitions {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		p := st.Partitions[name]
		r.Stats.Partitions++
		checkTiling(p, opts.Window > 0, add)
		txns := map[int64]*TxnRow{}
		for i := range p.Txns {
			t := &p.Txns[i]
			if _, dup := txns[t.FirstOffset]; dup {
				add(VLogTxns, name, "", "two log_txns rows at first_offset %d", t.FirstOffset)
			}
			txns[t.FirstOffset] = t
		}
		// Retention drops the sidecar's children by time: every row it
		// removed is older than every row it kept.
		var oldestTxn time.Time
		for i := range p.Txns {
			if i == 0 || p.Txns[i].CreatedAt.Before(oldestTxn) {
				oldestTxn = p.Txns[i].CreatedAt
			}
		}
		segAt := map[int64]bool{}
		for i := range p.Segments {
			s := &p.Segments[i]
			segAt[s.FirstOffset] = true
			r.Stats.Segments++
			t := txns[s.FirstOffset]
			switch {
			case t == nil && opts.Window > 0 && (len(p.Txns) == 0 || s.FirstOffset < p.Txns[0].FirstOffset ||
				s.CreatedAt.Before(oldestTxn)):
				// Retention removed the hashes of this segment (the sidecar
				// can be shorter than the segments' retention).
			case t == nil:
				add(VLogTxns, name, "", "segment at first_offset %d (%d frames) has no log_txns row", s.FirstOffset, s.FrameCount)
			case len(t.Hashes) != s.FrameCount:
				add(VLogTxns, name, "", "log_txns at first_offset %d has cardinality(hashes) = %d, segment frame_count = %d",
					s.FirstOffset, len(t.Hashes), s.FrameCount)
			}
			frames, err := partition.DecodeSegment(s.Frames, s.FrameCount)
			if err != nil {
				add(VCorrupt, name, "", "segment at first_offset %d (frame_count %d, %d bytes): %v", s.FirstOffset, s.FrameCount, len(s.Frames), err)
				continue
			}
			for k := range frames {
				f := &frames[k]
				off := s.FirstOffset + int64(k)
				r.Stats.StoredFrames++
				kk := key{name, f.TransactionID}
				storedBy[kk] = append(storedBy[kk], stored{offset: off, seg: s.FirstOffset, id: f.MessageID, created: s.CreatedAt, inDB: true})
				if prev, dup := msgIDs[f.MessageID]; dup {
					add(VMsgIDReused, name, f.TransactionID, "message_id %s stored at offset %d is also stored for tx %s in partition %s",
						f.MessageID, off, prev.tx, prev.part)
				} else {
					msgIDs[f.MessageID] = kk
				}
				if want := payloadFor(f.TransactionID); !bytes.Equal(f.Payload, want) {
					add(VPayload, name, f.TransactionID, "offset %d stores payload %.120q, sent %.120q", off, f.Payload, want)
				}
				if t != nil && k < len(t.Hashes) {
					h := partition.HashTxID(f.TransactionID)
					if !bytes.Equal(t.Hashes[k], h[:]) {
						add(VLogTxns, name, f.TransactionID, "log_txns(first_offset %d).hashes[%d] (1-based) = %x, the frame's transaction id hashes to %x",
							s.FirstOffset, k+1, t.Hashes[k], h[:])
					}
				}
			}
		}
		for off, t := range txns {
			if !segAt[off] && (opts.Window <= 0 || (len(p.Segments) > 0 && off >= p.Segments[0].FirstOffset)) {
				// (In retention mode, hash rows below the first segment, or
				// of a partition whose segments all went, outlive their
				// removed segments by design: the sidecar is trimmed by time,
				// a child at a time, after the segments.)
				add(VLogTxns, name, "", "log_txns row at first_offset %d (%d hashes) has no segment", off, len(t.Hashes))
			}
		}
	}

	// Retention mode: what consumers received counts as stored (retention
	// may have removed it since).
	for k, cs := range opts.Consumed {
		for _, c := range cs {
			if !hasID(storedBy[k], c.id) {
				storedBy[k] = append(storedBy[k], stored{offset: -1, seg: -1, id: c.id, created: c.created})
			}
		}
	}

	// The history: every answer against the stored rows.
	queued := map[key][]answer{}
	dups := map[key][]answer{}
	definite := map[key]bool{}
	var sent []key
	seen := map[key]bool{}
	batches := map[*Batch]bool{}
	for _, a := range attempts {
		r.Stats.Requests++
		switch a.Kind {
		case KindRetry:
			r.Stats.Retries++
		case KindTwin:
			r.Stats.Twins++
		case KindStorm:
			r.Stats.Storms++
		}
		if !batches[a.Batch] {
			batches[a.Batch] = true
			r.Stats.Batches++
		}
		for _, it := range a.Batch.Items {
			k := key{it.Partition, it.TxID}
			if !seen[k] {
				seen[k] = true
				sent = append(sent, k)
			}
		}
		if a.Protocol != "" {
			add(VProtocol, "", "", "request #%d to %s (http %d): %s", a.Seq, a.Broker, a.HTTPStatus, a.Protocol)
		}
		if a.HTTPStatus != 0 && a.HTTPStatus != 201 && a.HTTPStatus < 500 {
			add(VHTTPStatus, "", "", "request #%d to %s got http %d for a valid push: %.300s", a.Seq, a.Broker, a.HTTPStatus, a.Err)
		}
		if len(a.Results) == 0 {
			r.Stats.NoAnswer++
			continue
		}
		for i, res := range a.Results {
			if i >= len(a.Batch.Items) {
				break
			}
			it := a.Batch.Items[i]
			k := key{it.Partition, it.TxID}
			switch res.Status {
			case StatusQueued:
				r.Stats.QueuedAnswers++
				queued[k] = append(queued[k], answer{res.MessageID, res.PartitionID, a})
				definite[k] = true
			case StatusDuplicate:
				r.Stats.DupAnswers++
				dups[k] = append(dups[k], answer{res.MessageID, res.PartitionID, a})
				definite[k] = true
			case StatusFailed:
				r.Stats.FailedAns++
			}
		}
	}
	r.Stats.Items = len(sent)

	for _, k := range sent {
		rows := storedBy[k]
		if len(rows) > 1 && (opts.Window <= 0 || !apart(rows, time.Duration(opts.Window)*time.Second)) {
			offs := make([]string, len(rows))
			for i, s := range rows {
				offs[i] = fmt.Sprintf("offset %d id %s", s.offset, s.id)
			}
			why := ""
			if !definite[k] {
				why = " (the producer gave up on it: no definite answer)"
			}
			add(VStoredTwice, k.part, k.tx, "stored %d times: %s%s", len(rows), strings.Join(offs, ", "), why)
		}
		var qs []answer
		for _, q := range queued[k] {
			kill, lost := opts.asyncKill(q.att)
			if !lost || hasID(rows, q.id) {
				qs = append(qs, q)
				continue
			}
			// Acknowledged by a primary that died before its standby had
			// the commit: the asynchronous standby's loss, counted apart.
			r.Stats.AsyncLost++
			if len(rows) > 0 {
				r.Stats.AsyncRestored++
			}
			if q.att.End <= kill {
				r.Stats.AsyncLostBefore++
				r.Stats.AsyncMaxAge = max(r.Stats.AsyncMaxAge, kill-q.att.End)
			} else {
				r.Stats.AsyncLostAfter++
				r.Stats.AsyncMaxLate = max(r.Stats.AsyncMaxLate, q.att.End-kill)
			}
		}
		if len(qs) > 1 && (opts.Window <= 0 || !answersApart(qs, time.Duration(opts.Window)*time.Second)) {
			ids := make([]string, len(qs))
			for i, q := range qs {
				ids[i] = fmt.Sprintf("#%d@%s -> %s", q.att.Seq, q.att.Broker, q.id)
			}
			add(VQueuedTwice, k.part, k.tx, "answered queued %d times: %s", len(qs), strings.Join(ids, ", "))
		}
		p := st.Partitions[k.part]
		for _, q := range qs {
			switch {
			case len(rows) == 0:
				add(VLost, k.part, k.tx, "request #%d to %s answered queued with message_id %s, but nothing is stored (acknowledged message lost)",
					q.att.Seq, q.att.Broker, q.id)
			case !hasID(rows, q.id):
				add(VWrongID, k.part, k.tx, "request #%d to %s answered queued with message_id %s, the stored frame has %s",
					q.att.Seq, q.att.Broker, q.id, rows[0].id)
			}
			if p != nil && q.pid != p.ID {
				add(VPartitionID, k.part, k.tx, "request #%d answered partition_id %s, the partition is %s", q.att.Seq, q.pid, p.ID)
			}
		}
		for _, d := range dups[k] {
			if _, lost := opts.asyncKill(d.att); lost && !d.id.IsZero() && !hasID(rows, d.id) {
				r.Stats.AsyncStaleDups++
				continue
			}
			switch {
			case d.id.IsZero() && opts.Window > 0:
				// Retention removed the original's segment.
			case d.id.IsZero():
				add(VDupZeroID, k.part, k.tx, "request #%d to %s answered duplicate with the zero UUID (original segment gone) but retention is off",
					d.att.Seq, d.att.Broker)
			case len(rows) == 0:
				add(VDupNotStored, k.part, k.tx, "request #%d to %s answered duplicate of %s, but nothing is stored", d.att.Seq, d.att.Broker, d.id)
			case !hasID(rows, d.id):
				add(VDupWrongID, k.part, k.tx, "request #%d to %s answered duplicate of %s, the stored original is %s",
					d.att.Seq, d.att.Broker, d.id, rows[0].id)
			}
		}
		if !definite[k] {
			r.Stats.GaveUp++
			if len(rows) > 0 {
				r.Stats.GaveUpStored++
			}
			if opts.RequireResolved {
				add(VUnresolved, k.part, k.tx, "never got a definite answer (stored %d times): an outcome-unknown answer was not resolved by a retry", len(rows))
			}
		}
	}
	for k, rows := range storedBy {
		if !seen[k] {
			add(VPhantom, k.part, k.tx, "stored at offset %d (id %s) but never sent to this partition", rows[0].offset, rows[0].id)
		}
	}
	if len(attempts) > 0 && r.Stats.QueuedAnswers > 0 && r.Stats.StoredFrames == 0 {
		add(VNothingStored, "", "", "%d queued answers but no stored frame", r.Stats.QueuedAnswers)
	}
	sort.SliceStable(r.Violations, func(i, j int) bool { return r.Violations[i].Kind < r.Violations[j].Kind })

	// Excerpts for the violations tied to a transaction id.
	want := map[key]bool{}
	for _, v := range r.Violations {
		if v.TxID != "" && len(want) < maxExcerpts {
			want[key{v.Partition, v.TxID}] = true
		}
	}
	if len(want) > 0 {
		for _, a := range attempts {
			for i, it := range a.Batch.Items {
				k := key{it.Partition, it.TxID}
				if !want[k] {
					continue
				}
				ek := excerptKey(k.part, k.tx)
				if len(r.Excerpts[ek]) >= 40 {
					continue
				}
				r.Excerpts[ek] = append(r.Excerpts[ek], describeAttempt(a, i))
			}
		}
		for k := range want {
			ek := excerptKey(k.part, k.tx)
			for _, s := range storedBy[k] {
				r.Excerpts[ek] = append(r.Excerpts[ek], fmt.Sprintf("stored: partition %s offset %d message_id %s (segment first_offset %d created_at %s)",
					k.part, s.offset, s.id, s.seg, s.created.UTC().Format(time.RFC3339Nano)))
			}
			if len(storedBy[k]) == 0 {
				r.Excerpts[ek] = append(r.Excerpts[ek], "stored: nothing")
			}
		}
	}
	return r
}

const maxExcerpts = 50

func excerptKey(part, tx string) string { return part + "\x00" + tx }

// apart reports whether every two stored copies are at least window apart
// (a copy stored after the window of the previous one is a new message).
func apart(rows []stored, window time.Duration) bool {
	ts := make([]time.Time, len(rows))
	for i, s := range rows {
		ts[i] = s.created
	}
	return timesApart(ts, window)
}

// answersApart reports whether every two queued answers came at least
// window apart.
func answersApart(qs []answer, window time.Duration) bool {
	ts := make([]time.Time, len(qs))
	for i, q := range qs {
		ts[i] = time.Time{}.Add(q.att.End)
	}
	return timesApart(ts, window)
}

func timesApart(ts []time.Time, window time.Duration) bool {
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	for i := 1; i < len(ts); i++ {
		if ts[i].Sub(ts[i-1]) < window {
			return false
		}
	}
	return true
}

func hasID(rows []stored, id partition.UUID) bool {
	for _, s := range rows {
		if s.id == id {
			return true
		}
	}
	return false
}

func describeAttempt(a *Attempt, i int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "request #%d batch %d producer %d %s to %s at +%.3fs..+%.3fs item %d/%d: ",
		a.Seq, a.Batch.ID, a.Batch.Producer, a.Kind, a.Broker, a.Start.Seconds(), a.End.Seconds(), i, len(a.Batch.Items))
	switch {
	case a.HTTPStatus == 0:
		fmt.Fprintf(&b, "no answer (%s)", a.Err)
	case i < len(a.Results):
		res := a.Results[i]
		fmt.Fprintf(&b, "http %d %s", a.HTTPStatus, res.Status)
		if res.Status.Definite() {
			fmt.Fprintf(&b, " message_id %s", res.MessageID)
		}
	default:
		fmt.Fprintf(&b, "http %d %.200s", a.HTTPStatus, a.Err)
	}
	return b.String()
}

// checkTiling proves the segments tile [0, next_offset); with trimmed (the
// retention mode) they tile [first segment, next_offset): retention removed
// a prefix, never more.
func checkTiling(p *PartitionState, trimmed bool, add func(kind, part, tx, format string, args ...any)) {
	var expect, sum int64
	if trimmed {
		expect = p.NextOffset
		if len(p.Segments) > 0 {
			expect = p.Segments[0].FirstOffset
		}
		sum = expect
	}
	for _, s := range p.Segments {
		if s.FrameCount <= 0 {
			add(VOffsets, p.Name, "", "segment at first_offset %d has frame_count %d", s.FirstOffset, s.FrameCount)
		}
		switch {
		case s.FirstOffset > expect:
			add(VOffsets, p.Name, "", "gap: offsets [%d, %d) are in no segment", expect, s.FirstOffset)
		case s.FirstOffset < expect:
			add(VOffsets, p.Name, "", "overlap: segment at first_offset %d starts inside the previous one (which ends at %d)", s.FirstOffset, expect)
		}
		sum += int64(s.FrameCount)
		if end := s.FirstOffset + int64(s.FrameCount); end > expect {
			expect = end
		}
	}
	if expect != p.NextOffset {
		add(VOffsets, p.Name, "", "segments end at offset %d, next_offset is %d", expect, p.NextOffset)
	}
	if sum != p.NextOffset {
		add(VOffsets, p.Name, "", "sum(frame_count) = %d, next_offset = %d", sum, p.NextOffset)
	}
}
