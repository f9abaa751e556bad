package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// peerInfo is what RESULTS.md says about a peer system of the run.
type peerInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Where   string `json:"where"`
}

// natsLabel is the phase prefix of a JetStream mode.
func natsLabel(mode natsMode) string {
	if mode == natsSyncAlways {
		return "jetstream_sync"
	}
	return "jetstream"
}

// jetStream returns the run's JetStream peer of mode, opened at the first
// call: the default one is the server -nats-url names, else the pinned
// nats-server started with its defaults; the sync one is always the pinned
// server started with sync_interval always. Each gets the run's push stream
// (file storage, 1 h duplicate window, one subject per partition).
func (h *harness) jetStream(ctx context.Context, mode natsMode) (*natsPeer, error) {
	if p := h.jetstreams[mode]; p != nil {
		return p, nil
	}
	c := h.cfg
	var srv *natsProc
	if mode == natsDefault && c.natsURL != "" {
		srv = userNATS(c.natsURL)
	} else {
		bin, err := pinnedNATSBinary(h.repo, c.natsServer)
		if err != nil {
			return nil, err
		}
		if srv, err = startNATS(ctx, bin, h.tmp, mode); err != nil {
			return nil, err
		}
	}
	p, err := openNATSPeer(ctx, natsLabel(mode), srv)
	if err != nil {
		srv.stop(true)
		return nil, err
	}
	if h.jetstreams == nil {
		h.jetstreams = map[natsMode]*natsPeer{}
	}
	h.jetstreams[mode] = p
	h.info.Peers = append(h.info.Peers, peerInfo{Name: "JetStream (" + p.label + ")", Version: p.Version, Where: p.Where})
	stream := "REGINA_CMP_" + strings.ToUpper(h.runTag)
	if p.subjects, err = p.addStream(stream, "regina-cmp."+h.runTag, time.Hour, c.partitions); err != nil {
		return nil, err
	}
	h.natsPending = max(c.natsInflight/c.natsConns, 1)
	h.logf("NATS %s at %s (%s), stream %s (file storage, 1 h duplicate window), %d connections x %d in flight",
		p.nc.ConnectedServerVersion(), srv.url, mode.durability(), stream, c.natsConns, h.natsPending)
	return p, nil
}

// riverPeer returns the run's River peer (schema regina_cmp_<tag>_river on
// the run's database), made at the first call.
func (h *harness) riverPeer(ctx context.Context) (*riverPeer, error) {
	if h.river != nil {
		return h.river, nil
	}
	p, err := openRiver(ctx, h.dbURL, "regina_cmp_"+h.runTag+"_river", int32(h.cfg.connections))
	if err != nil {
		return nil, err
	}
	h.river = p
	h.info.Peers = append(h.info.Peers, peerInfo{Name: "River", Version: "github.com/riverqueue/river " + p.Version,
		Where: "riverpgxv5 on " + h.info.PGWhere + ", schema " + p.schema + " (River's own migrations), " +
			"unique inserts (`InsertMany`, `river:\"unique\"` on the transaction id, `UniqueOpts{ByArgs: true}`)"})
	h.logf("River %s, schema %s", p.Version, p.schema)
	return p, nil
}

// setupPeers opens the peers of the selected blocks before anything is
// measured, so that a missing one fails the run at once.
func (h *harness) setupPeers(ctx context.Context) error {
	if h.cfg.wantsBlock('C') || h.cfg.wantsBlock('K') {
		if _, err := h.jetStream(ctx, natsDefault); err != nil {
			return err
		}
	}
	if h.cfg.wantsBlock('S') || h.cfg.wantsBlock('K') {
		if _, err := h.jetStream(ctx, natsSyncAlways); err != nil {
			return err
		}
	}
	if h.cfg.wantsBlock('R') || h.cfg.wantsBlock('K') {
		if _, err := h.riverPeer(ctx); err != nil {
			return err
		}
	}
	return nil
}

// cleanupPeers deletes the peers' streams and schema and stops the
// servers the run started.
func (h *harness) cleanupPeers() {
	hard := h.hard.Err() != nil
	for _, mode := range []natsMode{natsDefault, natsSyncAlways} {
		h.jetstreams[mode].close(hard, h.logf)
	}
	h.jetstreams = nil
	if h.river != nil {
		h.river.close(context.Background())
		h.logf("dropped River's schema %s", h.river.schema)
		h.river = nil
	}
}

// Phase names of the peers.
const (
	phNATS100     = "jetstream_100"        // jetstream at -items-large messages per push
	phNATSSync    = "jetstream_sync"       // sync_interval: always
	phNATSSyncSt  = "jetstream_sync_storm" // its storm
	phNATSSync100 = "jetstream_sync_100"   // at -items-large
	phRiver       = "river"                // River unique InsertMany, one per push
	phRiverStorm  = "river_storm"          // the same jobs again: UniqueSkippedAsDuplicate
)

// natsBlock is a JetStream block (C default, S sync always): fresh pushes
// and their storm at -items, then fresh pushes at -items-large.
func (h *harness) natsBlock(mode natsMode, fresh, storm, large string) func(r int) error {
	return func(r int) error {
		p, err := h.jetStream(h.stop, mode)
		if err != nil {
			return err
		}
		c := h.cfg
		g := h.procs(nil)
		g.nats = p.srv.pid
		spec := func(name string) phaseSpec {
			return phaseSpec{name: name, round: r, workers: c.natsConns, procs: g}
		}
		tag := h.phaseTag(r, p.label)
		h.freshThenStorm(spec(fresh), spec(storm), func(replay [][]int32) workFunc { return h.natsWork(p, tag, replay) })
		if h.stop.Err() != nil || c.itemsLarge == 0 {
			return nil
		}
		h.withWorkload(h.wlLarge, func() { h.drive(spec(large), h.natsWork(p, tag+"-l", nil)) })
		return nil
	}
}

// blockRiver is block R: River unique inserts of the same messages, then
// their storm.
func (h *harness) blockRiver(r int) error {
	p, err := h.riverPeer(h.stop)
	if err != nil {
		return err
	}
	cl, err := p.client(nil)
	if err != nil {
		return err
	}
	c := h.cfg
	g := h.procs(nil)
	spec := func(name string) phaseSpec { return phaseSpec{name: name, round: r, workers: c.connections, procs: g} }
	h.freshThenStorm(spec(phRiver), spec(phRiverStorm), func(replay [][]int32) workFunc {
		return h.riverWork(cl, h.phaseTag(r, "river"), replay)
	})
	return nil
}

// riverWork inserts each push's items as River jobs in one InsertMany (one
// transaction), or replays each worker's accepted pushes (every job should
// come back UniqueSkippedAsDuplicate).
func (h *harness) riverWork(cl *river.Client[pgx.Tx], tag string, replay [][]int32) workFunc {
	return func(ctx context.Context, w int, pc *phaseClock, rec *workerRec) {
		var src []int32
		if replay != nil {
			if src = replay[w]; len(src) == 0 {
				return
			}
		}
		n := h.wl.items
		params := make([]river.InsertManyParams, n)
		tx := make([]byte, 0, 64)
		for k := 0; running(ctx, pc); k++ {
			seq := k
			if src != nil {
				seq = int(src[k%len(src)])
			}
			for i := range params {
				tx = appendTx(tx[:0], tag, w, seq, i)
				params[i] = river.InsertManyParams{Args: riverJob{Tx: string(tx), Payload: h.wl.payloadOf(w, seq, i)}}
			}
			cctx, cancel := context.WithTimeout(h.hard, 30*time.Second)
			t0 := time.Now()
			res, err := cl.InsertMany(cctx, params)
			t1 := time.Now()
			cancel()
			if err != nil {
				rec.fail(fmt.Errorf("river InsertMany: %w", err))
				time.Sleep(10 * time.Millisecond)
				continue
			}
			d := countSkipped(res)
			if src == nil {
				rec.record(pc, t0, t1, n-d, d)
				if d == 0 {
					rec.okSeqs = append(rec.okSeqs, int32(seq))
				}
			} else {
				rec.record(pc, t0, t1, d, n-d)
			}
		}
	}
}

// countSkipped counts the jobs River did not insert because a job with
// their unique key was there.
func countSkipped(res []*rivertype.JobInsertResult) int {
	d := 0
	for _, r := range res {
		if r.UniqueSkippedAsDuplicate {
			d++
		}
	}
	return d
}
