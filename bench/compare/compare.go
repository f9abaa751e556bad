package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/regina-mq/regina/internal/pushanswer"
	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// Phase names. Every system gets the same pushes (see workload).
const (
	phReginaOn       = "regina_on"           // dedup on (1 h window), QUEEN_DEDUP_CACHE=true
	phReginaOnStorm  = "regina_on_storm"     // replay of regina_on's pushes to the same broker
	phReginaNoDedup  = "regina_nodedup"      // dedupWindowSeconds 0, same broker as regina_on
	phReginaOff      = "regina_off"          // dedup on, QUEEN_DEDUP_CACHE=false
	phReginaOffStorm = "regina_off_storm"    // replay of regina_off's pushes
	phCeiling        = "ceiling"             // queen.push_segment through pgx, no broker
	phCeilingStorm   = "ceiling_storm"       // replay of ceiling's batches
	phNATS           = "jetstream"           // async publish with Nats-Msg-Id, 1 h window
	phNATSStorm      = "jetstream_storm"     // republish of the same Msg-Ids
	phQueen          = "queen"               // the user's upstream Queen server (-queen-url)
	phQueenStorm     = "queen_storm"         // replay of queen's pushes
	phCheckOff       = "regina_check_off"    // dedup on, dedupPayloadCheck off (block F)
	phCheckReport    = "regina_check_report" // dedup on, dedupPayloadCheck report, same broker
)

// Queues of the compare run (all in the run's schema).
const (
	qOn          = "cmp_on"
	qOff         = "cmp_off"
	qNoDedup     = "cmp_nodedup"
	qCeiling     = "cmp_ceiling"
	qCheckOff    = "cmp_check_off"
	qCheckReport = "cmp_check_report"
	qLarge       = "cmp_large" // block P: -items-large per push
	qOne         = "cmp_one"   // block P: one message per push, -one-partitions partitions
)

// configurePayloadCheck configures a queue with a 1 h window and the given
// dedupPayloadCheck, and fails unless the answer echoes it.
func configurePayloadCheck(ctx context.Context, baseURL, queue, check string) error {
	body, _ := json.Marshal(map[string]any{"queue": queue,
		"options": map[string]any{"dedupWindowSeconds": 3600, "dedupPayloadCheck": check}})
	b, err := adminRequest(ctx, http.MethodPost, baseURL+"/api/v1/configure", body)
	if err != nil {
		return fmt.Errorf("configure %s: %w", queue, err)
	}
	var ans struct {
		Options struct {
			DedupPayloadCheck string `json:"dedupPayloadCheck"`
		} `json:"options"`
	}
	if json.Unmarshal(b, &ans) != nil || ans.Options.DedupPayloadCheck != check {
		return fmt.Errorf("configure %s: dedupPayloadCheck %q was sent, the answer was %s", queue, check, b)
	}
	return nil
}

// configureQueue sets a queue's dedupWindowSeconds through the broker's
// configure endpoint (a full replace: every other option is the default).
// It returns a note when the answer does not echo the window: upstream
// Queen drops the option (its deduplication has no window).
//
// The options also carry leaseTime at its default (300 s, Regina's and
// Queen's), as Queen's own clients always send known options: Queen's
// current server answers options that hold only an option it does not know
// with HTTP 200 and {"error":"[json.exception.type_error.306] cannot use
// value() with null"}.
func configureQueue(ctx context.Context, baseURL, queue string, window int) (note string, err error) {
	body, _ := json.Marshal(map[string]any{"queue": queue,
		"options": map[string]any{"leaseTime": partition.DefaultQueueOptions().LeaseTime, "dedupWindowSeconds": window}})
	b, err := adminRequest(ctx, http.MethodPost, baseURL+"/api/v1/configure", body)
	if err != nil {
		return "", fmt.Errorf("configure %s: %w", queue, err)
	}
	var ans struct {
		Options struct {
			DedupWindowSeconds *int `json:"dedupWindowSeconds"`
		} `json:"options"`
	}
	if json.Unmarshal(b, &ans) != nil || ans.Options.DedupWindowSeconds == nil {
		return fmt.Sprintf("dedupWindowSeconds %d was sent, but the configure answer does not echo it: the server ignores it", window), nil
	}
	if *ans.Options.DedupWindowSeconds != window {
		return fmt.Sprintf("dedupWindowSeconds %d was sent, but the server answered %d", window, *ans.Options.DedupWindowSeconds), nil
	}
	return "", nil
}

// adminRequest sends a small JSON request and returns the answer's body;
// a status outside 2xx, or a 2xx carrying an error object (how upstream
// Queen sends its errors), is an error.
func adminRequest(ctx context.Context, method, url string, body []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return nil, errors.New(pushanswer.ErrorMessage(resp.StatusCode, b))
	}
	if msg := pushanswer.ErrorInBody(b); msg != "" {
		return nil, fmt.Errorf("HTTP %d with an error body: %s", resp.StatusCode, msg)
	}
	return b, nil
}

// ensurePartitions creates (if needed) partitions p0..p(n-1) of queue and
// returns them in order, with the queue's window.
func (h *harness) ensurePartitions(ctx context.Context, sp *pgSpace, queue string, n int) ([]reginatype.PartitionRef, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	refs := make([]reginatype.PartitionRef, n)
	for i := range n {
		ref, err := sp.store.EnsurePartition(ctx, queue, "p"+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		refs[i] = ref
	}
	return refs, nil
}

// block is a group of phases that share a system under test (a broker
// started for the block, the pgx pool, NATS, the user's Queen server), run
// in one go. A new comparison is a new block: its letter in -blocks, its
// phases in comparePhases, its ratios in writeCompare.
type block struct {
	key  byte // its letter in -blocks
	name string
	run  func(round int) error
	// skip says why the block cannot run in this run ("" = it can).
	skip string
}

// phaseTag is the transaction-id prefix of a phase of round r.
func (h *harness) phaseTag(r int, ph string) string {
	return h.runTag + "." + strconv.Itoa(r) + "." + ph
}

// freshThenStorm runs a fresh phase of pushes, then the storm replaying
// what it had accepted.
func (h *harness) freshThenStorm(fresh, storm phaseSpec, work func(replay [][]int32) workFunc) {
	_, seqs := h.drive(fresh, work(nil))
	if h.stop.Err() != nil {
		return
	}
	h.drive(storm, work(seqs))
}

// withWorkload runs f with wl as the run's load shape, then puts the
// previous one back.
func (h *harness) withWorkload(wl *workload, f func()) {
	prev := h.wl
	h.wl = wl
	defer func() { h.wl = prev }()
	f()
}

// runCompare runs the rounds. Each round runs the blocks, their order
// rotated by one per round so that no system always goes first:
//
//	A  broker with the cache on: regina_on, regina_on_storm, regina_nodedup
//	B  pgx ceiling: ceiling, ceiling_storm, ceiling_packed, ceiling_pipelined
//	C  JetStream, the pinned nats-server with its defaults (or -nats-url):
//	   jetstream, jetstream_storm, jetstream_100
//	D  broker with the cache off: regina_off, regina_off_storm
//	E  the user's upstream Queen server (-queen-url): queen, queen_storm
//	F  broker with the cache on, two queues with dedup on:
//	   regina_check_off and regina_check_report (dedupPayloadCheck off and
//	   report), in alternating order per round
//	P  broker with the cache on, other push shapes: regina_100 (-items-large
//	   per push), regina_1 (one message per push over -one-partitions)
//	S  JetStream, the pinned nats-server with sync_interval always:
//	   jetstream_sync, jetstream_sync_storm, jetstream_sync_100
//	R  River unique inserts: river, river_storm
//
// A storm always follows the phase whose pushes it replays.
func (h *harness) runCompare() error {
	c := h.cfg
	refs, err := h.ensurePartitions(h.stop, h.main, qCeiling, c.partitions)
	if err != nil {
		return err
	}
	tag := h.phaseTag
	spec := func(name string, r int, g procGroups) phaseSpec {
		return phaseSpec{name: name, round: r, workers: c.connections, procs: g}
	}
	bspec := func(name string, r int, b *brokerProc) phaseSpec {
		return phaseSpec{name: name, round: r, workers: c.connections, procs: h.procs(b), brokerURL: b.url}
	}
	configure := func(url, queue string, window int) error {
		note, err := configureQueue(h.stop, url, queue, window)
		if note != "" {
			h.logf("%s: %s", queue, note)
		}
		return err
	}
	freshThenStorm := h.freshThenStorm
	blockA := func(r int) error {
		b, err := h.startBroker(h.main, true, "regina-cache-on-r"+strconv.Itoa(r+1))
		if err != nil {
			return err
		}
		defer h.stopBroker()
		if err := configure(b.url, qOn, 3600); err != nil {
			return err
		}
		if err := configure(b.url, qNoDedup, 0); err != nil {
			return err
		}
		for _, q := range []string{qOn, qNoDedup} {
			if _, err := h.prime(b.url, q, tag(r, "prime-"+q), c.partitions); err != nil {
				return err
			}
		}
		freshThenStorm(bspec(phReginaOn, r, b), bspec(phReginaOnStorm, r, b), func(replay [][]int32) workFunc {
			return h.reginaWork(b.url, qOn, tag(r, "on"), replay)
		})
		if h.stop.Err() != nil {
			return nil
		}
		h.drive(bspec(phReginaNoDedup, r, b), h.reginaWork(b.url, qNoDedup, tag(r, "nd"), nil))
		return nil
	}
	blockB := func(r int) error {
		g := h.procs(nil)
		freshThenStorm(spec(phCeiling, r, g), spec(phCeilingStorm, r, g), func(replay [][]int32) workFunc {
			return h.ceilingWork(h.main.store, refs, tag(r, "c"), replay)
		})
		h.packedPhases(r, g, refs, tag(r, "c"))
		return nil
	}
	blockD := func(r int) error {
		b, err := h.startBroker(h.main, false, "regina-cache-off-r"+strconv.Itoa(r+1))
		if err != nil {
			return err
		}
		defer h.stopBroker()
		if err := configure(b.url, qOff, 3600); err != nil {
			return err
		}
		if _, err := h.prime(b.url, qOff, tag(r, "prime-"+qOff), c.partitions); err != nil {
			return err
		}
		freshThenStorm(bspec(phReginaOff, r, b), bspec(phReginaOffStorm, r, b), func(replay [][]int32) workFunc {
			return h.reginaWork(b.url, qOff, tag(r, "off"), replay)
		})
		return nil
	}
	blockE := func(r int) error {
		q := h.queen
		if _, err := h.prime(q.url, q.queue, tag(r, "prime-queen"), c.partitions); err != nil {
			return err
		}
		g := q.procs(h)
		freshThenStorm(spec(phQueen, r, g), spec(phQueenStorm, r, g), func(replay [][]int32) workFunc {
			return h.reginaWork(q.url, q.queue, tag(r, "q"), replay)
		})
		return nil
	}
	blockF := func(r int) error {
		b, err := h.startBroker(h.main, true, "regina-check-r"+strconv.Itoa(r+1))
		if err != nil {
			return err
		}
		defer h.stopBroker()
		for _, q := range [][2]string{{qCheckOff, "off"}, {qCheckReport, "report"}} {
			if err := configurePayloadCheck(h.stop, b.url, q[0], q[1]); err != nil {
				return err
			}
			if _, err := h.prime(b.url, q[0], tag(r, "prime-"+q[0]), c.partitions); err != nil {
				return err
			}
		}
		order := []struct{ phase, queue, tag string }{{phCheckOff, qCheckOff, "co"}, {phCheckReport, qCheckReport, "cr"}}
		if r%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, o := range order {
			if h.stop.Err() != nil {
				return nil
			}
			h.drive(bspec(o.phase, r, b), h.reginaWork(b.url, o.queue, tag(r, o.tag), nil))
		}
		return nil
	}
	blocks := []block{
		{key: 'A', name: "A (Regina, cache on)", run: blockA},
		{key: 'B', name: "B (pgx ceiling)", run: blockB},
		{key: 'C', name: "C (JetStream, defaults)", run: h.natsBlock(natsDefault, phNATS, phNATSStorm, phNATS100)},
		{key: 'D', name: "D (Regina, cache off)", run: blockD},
		{key: 'E', name: "E (upstream Queen)", run: blockE},
		{key: 'F', name: "F (Regina, dedupPayloadCheck off vs report)", run: blockF},
		{key: 'P', name: "P (Regina, large and one-message pushes)", run: h.blockShapes},
		{key: 'S', name: "S (JetStream, sync_interval always)", run: h.natsBlock(natsSyncAlways, phNATSSync, phNATSSyncSt, phNATSSync100)},
		{key: 'R', name: "R (River unique inserts)", run: h.blockRiver},
		{key: 'K', name: "K (consume: drains and steady, every system)", run: h.blockConsume},
	}
	if h.queen == nil {
		blocks[4].skip = "no -queen-url (make compare QUEEN_URL=http://HOST:PORT) given"
	}
	var active []block
	for _, b := range blocks {
		switch {
		case !c.wantsBlock(b.key):
		case b.skip != "":
			h.logf("block %s skipped: %s", b.name, b.skip)
		default:
			active = append(active, b)
		}
	}
	for r := range c.rounds {
		h.logf("round %d of %d", r+1, c.rounds)
		for i := range active {
			b := active[(i+r)%len(active)]
			if h.stop.Err() != nil {
				return nil
			}
			h.logf(" block %s", b.name)
			if err := b.run(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// Block P's phases.
const (
	phRegina100 = "regina_100" // -items-large messages per push, -partitions partitions
	phReginaOne = "regina_1"   // one message per push over -one-partitions partitions
)

// blockShapes is block P: a broker with the cache on (defaults), its queue
// configured with a 1 h window, the large pushes (-items-large) over
// -partitions partitions, then one-message pushes over -one-partitions.
// Each shape's partitions are primed first.
func (h *harness) blockShapes(r int) error {
	c := h.cfg
	b, err := h.startBroker(h.main, true, "regina-shapes-r"+strconv.Itoa(r+1))
	if err != nil {
		return err
	}
	defer h.stopBroker()
	for _, s := range []struct {
		phase, queue string
		wl           *workload
		skip         bool
	}{
		{phRegina100, qLarge, h.wlLarge, c.itemsLarge == 0},
		{phReginaOne, qOne, h.wlOne, false},
	} {
		if s.skip || h.stop.Err() != nil {
			continue
		}
		if _, err := configureQueue(h.stop, b.url, s.queue, 3600); err != nil {
			return err
		}
		if _, err := h.prime(b.url, s.queue, h.phaseTag(r, "prime-"+s.queue), s.wl.partitions); err != nil {
			return err
		}
		spec := phaseSpec{name: s.phase, round: r, workers: c.connections, procs: h.procs(b), brokerURL: b.url}
		h.withWorkload(s.wl, func() { h.drive(spec, h.reginaWork(b.url, s.queue, h.phaseTag(r, s.queue), nil)) })
	}
	return nil
}
