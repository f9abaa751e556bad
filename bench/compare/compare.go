package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/regina-mq/regina/reginatype"
)

// Phase names. Every system gets the same pushes (see workload).
const (
	phReginaOn       = "regina_on"        // dedup on (1 h window), QUEEN_DEDUP_CACHE=true
	phReginaOnStorm  = "regina_on_storm"  // replay of regina_on's pushes to the same broker
	phReginaNoDedup  = "regina_nodedup"   // dedupWindowSeconds 0, same broker as regina_on
	phReginaOff      = "regina_off"       // dedup on, QUEEN_DEDUP_CACHE=false
	phReginaOffStorm = "regina_off_storm" // replay of regina_off's pushes
	phCeiling        = "ceiling"          // queen.push_segment through pgx, no broker
	phCeilingStorm   = "ceiling_storm"    // replay of ceiling's batches
	phNATS           = "jetstream"        // async publish with Nats-Msg-Id, 1 h window
	phNATSStorm      = "jetstream_storm"  // republish of the same Msg-Ids
)

// Queues of the compare run (all in the run's schema).
const (
	qOn      = "cmp_on"
	qOff     = "cmp_off"
	qNoDedup = "cmp_nodedup"
	qCeiling = "cmp_ceiling"
)

// configureQueue sets a queue's dedupWindowSeconds through the broker's
// configure endpoint (a full replace: every other option is the default).
func configureQueue(ctx context.Context, baseURL, queue string, window int) error {
	body, _ := json.Marshal(map[string]any{"queue": queue, "options": map[string]any{"dedupWindowSeconds": window}})
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/api/v1/configure", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("configure %s: %w", queue, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("configure %s: HTTP %d: %s", queue, resp.StatusCode, b)
	}
	return nil
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

// runCompare runs the rounds. Each round runs four blocks, rotated by one
// per round so that no system always goes first:
//
//	A  broker with the cache on: regina_on, regina_on_storm, regina_nodedup
//	B  pgx ceiling: ceiling, ceiling_storm
//	C  JetStream: jetstream, jetstream_storm
//	D  broker with the cache off: regina_off, regina_off_storm
//
// A storm always follows the phase whose pushes it replays.
func (h *harness) runCompare() error {
	c := h.cfg
	refs, err := h.ensurePartitions(h.stop, h.main, qCeiling, c.partitions)
	if err != nil {
		return err
	}
	tag := func(r int, ph string) string { return h.runTag + "." + strconv.Itoa(r) + "." + ph }
	spec := func(name string, r int, g procGroups) phaseSpec {
		return phaseSpec{name: name, round: r, workers: c.connections, procs: g}
	}
	bspec := func(name string, r int, b *brokerProc) phaseSpec {
		return phaseSpec{name: name, round: r, workers: c.connections, procs: h.procs(b, false), brokerURL: b.url}
	}
	blockA := func(r int) error {
		b, err := h.startBroker(h.main, true, "regina-cache-on-r"+strconv.Itoa(r+1))
		if err != nil {
			return err
		}
		defer h.stopBroker()
		if err := configureQueue(h.stop, b.url, qOn, 3600); err != nil {
			return err
		}
		if err := configureQueue(h.stop, b.url, qNoDedup, 0); err != nil {
			return err
		}
		for _, q := range []string{qOn, qNoDedup} {
			if _, err := h.prime(b.url, q, tag(r, "prime-"+q), c.partitions); err != nil {
				return err
			}
		}
		_, seqs := h.drive(bspec(phReginaOn, r, b), h.reginaWork(b.url, qOn, tag(r, "on"), nil))
		if h.stop.Err() != nil {
			return nil
		}
		h.drive(bspec(phReginaOnStorm, r, b), h.reginaWork(b.url, qOn, tag(r, "on"), seqs))
		if h.stop.Err() != nil {
			return nil
		}
		h.drive(bspec(phReginaNoDedup, r, b), h.reginaWork(b.url, qNoDedup, tag(r, "nd"), nil))
		return nil
	}
	blockB := func(r int) error {
		g := h.procs(nil, false)
		_, seqs := h.drive(spec(phCeiling, r, g), h.ceilingWork(h.main.store, refs, tag(r, "c"), nil))
		if h.stop.Err() != nil {
			return nil
		}
		h.drive(spec(phCeilingStorm, r, g), h.ceilingWork(h.main.store, refs, tag(r, "c"), seqs))
		return nil
	}
	blockC := func(r int) error {
		g := h.procs(nil, true)
		s := spec(phNATS, r, g)
		s.workers = c.natsConns
		_, seqs := h.drive(s, h.natsWork(tag(r, "n"), nil))
		if h.stop.Err() != nil {
			return nil
		}
		s.name = phNATSStorm
		h.drive(s, h.natsWork(tag(r, "n"), seqs))
		return nil
	}
	blockD := func(r int) error {
		b, err := h.startBroker(h.main, false, "regina-cache-off-r"+strconv.Itoa(r+1))
		if err != nil {
			return err
		}
		defer h.stopBroker()
		if err := configureQueue(h.stop, b.url, qOff, 3600); err != nil {
			return err
		}
		if _, err := h.prime(b.url, qOff, tag(r, "prime-"+qOff), c.partitions); err != nil {
			return err
		}
		_, seqs := h.drive(bspec(phReginaOff, r, b), h.reginaWork(b.url, qOff, tag(r, "off"), nil))
		if h.stop.Err() != nil {
			return nil
		}
		h.drive(bspec(phReginaOffStorm, r, b), h.reginaWork(b.url, qOff, tag(r, "off"), seqs))
		return nil
	}
	blocks := []func(int) error{blockA, blockB, blockC, blockD}
	names := []string{"A (Regina, cache on)", "B (pgx ceiling)", "C (JetStream)", "D (Regina, cache off)"}
	for r := range c.rounds {
		h.logf("round %d of %d", r+1, c.rounds)
		for i := range blocks {
			k := (i + r) % len(blocks)
			if h.stop.Err() != nil {
				return nil
			}
			if !strings.ContainsRune(strings.ToUpper(c.blocks), rune('A'+k)) {
				continue
			}
			h.logf(" block %s", names[k])
			if err := blocks[k](r); err != nil {
				return err
			}
		}
	}
	return nil
}
