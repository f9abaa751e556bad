package main

import (
	"context"
	"encoding/json"
	"fmt"
	"image/color"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
)

const (
	phScaleRegina  = "regina"
	phScaleCeiling = "ceiling"
)

func partsPoint(n int) string  { return "partitions=" + strconv.Itoa(n) }
func hashesPoint(n int) string { return "hashes=" + strconv.Itoa(n) }

// shortCount writes 1000 as 1k, 10000000 as 10M.
func shortCount(n int) string {
	switch {
	case n >= 1000000 && n%1000000 == 0:
		return strconv.Itoa(n/1000000) + "M"
	case n >= 1000000:
		return strconv.FormatFloat(float64(n)/1e6, 'f', 2, 64) + "M"
	case n >= 1000 && n%1000 == 0:
		return strconv.Itoa(n/1000) + "k"
	case n >= 1000:
		return strconv.FormatFloat(float64(n)/1e3, 'f', 1, 64) + "k"
	}
	return strconv.Itoa(n)
}

// scaleState records what the hash points really started from.
type scaleState struct {
	hashesAtStart map[string]int64 // point -> in-window hashes of the Regina queue when its phase started
	ceilAtStart   map[string]int64
	preloadTime   map[string]time.Duration
	preloaded     map[string]int64 // point -> hashes its preload wrote into the Regina schema
	// expired lists the phases that started with fewer hashes in their
	// window than the point's preload wrote (preloaded rows had left it).
	expired []string
	startup map[string][]time.Duration // broker start to every partition answered, per round
	restart *restartState
}

// scalePt is one point of a scale curve, with its schemas: one for Regina,
// one for the ceiling (each point has its own, because the GIN index on
// log_txns.hashes spans the whole table, so a point must not see the rows
// of the others).
type scalePt struct {
	name       string
	k          int
	partitions int
	preload    int
	// window is the dedup window of the point's queue (0: the default,
	// which a push's implicit queue creation gives).
	window    time.Duration
	reg, ceil *pgSpace
	ceilRefs  []reginatype.PartitionRef
}

const scaleQueue = "scale"

// runScale measures push throughput and p99 as the partition count grows,
// then as the in-window hash count grows, and any-partition pops as the
// partition count grows. Every point's schemas are prepared first
// (partitions created, hashes preloaded, pop history read); then the rounds
// run every point in turn, so that the noise of the machine spreads over
// all points; then the restart phase runs on the largest hash point.
func (h *harness) runScale() error {
	c := h.cfg
	h.scale = &scaleState{hashesAtStart: map[string]int64{}, ceilAtStart: map[string]int64{}, preloadTime: map[string]time.Duration{},
		preloaded: map[string]int64{}, startup: map[string][]time.Duration{}}
	base := h.wl
	defer func() { h.wl = base }()
	parts := slices.Clone(c.scaleParts)
	slices.Sort(parts)
	hashes := slices.Clone(c.scaleHashes)
	slices.Sort(hashes)
	var pts []*scalePt
	for _, n := range parts {
		pts = append(pts, &scalePt{name: partsPoint(n), k: len(pts) + 1, partitions: n})
	}
	for _, n := range hashes {
		pts = append(pts, &scalePt{name: hashesPoint(n), k: len(pts) + 1, partitions: c.partitions, preload: n, window: c.scaleWindow})
	}
	// The pop points first: their history is slow to write at 100k
	// partitions, and the hash points' rows must still be inside their
	// window when the rounds start.
	var pops []*popPt
	for _, n := range slices.Sorted(slices.Values(c.scalePop)) {
		pops = append(pops, &popPt{name: popPoint(n), k: len(pts) + len(pops) + 1, partitions: n})
	}
	for _, p := range pops {
		if h.stop.Err() != nil {
			return nil
		}
		if err := h.preparePopPoint(p); err != nil {
			return err
		}
	}
	for _, p := range pts {
		if h.stop.Err() != nil {
			return nil
		}
		if err := h.prepareScalePoint(p); err != nil {
			return err
		}
	}
	for r := range c.scaleRounds {
		if err := h.runPopRound(pops, r); err != nil {
			return err
		}
		for _, p := range pts {
			if h.stop.Err() != nil {
				return nil
			}
			h.wl = newWorkload(p.partitions, c.items, c.payload, 42)
			tag := h.runTag + "." + strconv.Itoa(p.k) + "." + strconv.Itoa(r)
			if have, err := h.inWindowHashes(h.stop, p.reg, scaleQueue); err == nil {
				h.scale.hashesAtStart[p.name+"/"+strconv.Itoa(r)] = have
				h.scale.noteExpired(p.name, p.name+", round "+strconv.Itoa(r+1), have)
			}
			t := time.Now()
			b, err := h.startBroker(p.reg, true, "regina-scale-"+strconv.Itoa(p.k))
			if err != nil {
				return err
			}
			if _, err := h.prime(b.url, scaleQueue, tag, p.partitions); err != nil {
				if h.stop.Err() != nil {
					return nil
				}
				return err
			}
			settled := h.waitCacheSettled(b.url, cacheSettleLimit)
			h.scale.startup[p.name] = append(h.scale.startup[p.name], time.Since(t))
			h.logf("  broker started, every partition primed and its cache loads %s in %s", settled, time.Since(t).Round(time.Millisecond))
			h.drive(phaseSpec{name: phScaleRegina, round: r, point: p.name, workers: c.connections, procs: h.procs(b), brokerURL: b.url},
				h.reginaWork(b.url, scaleQueue, tag, nil))
			h.stopBroker()
			if p.ceil == nil || h.stop.Err() != nil {
				continue
			}
			if have, err := h.inWindowHashes(h.stop, p.ceil, scaleQueue); err == nil {
				h.scale.ceilAtStart[p.name+"/"+strconv.Itoa(r)] = have
				h.scale.noteExpired(p.name, p.name+" ceiling, round "+strconv.Itoa(r+1), have)
			}
			// The ceiling's pool is opened for its phase only: seven idle
			// pools of -connections would exhaust max_connections.
			st, err := h.openStore(p.ceil, c.connections)
			if err != nil {
				return err
			}
			h.drive(phaseSpec{name: phScaleCeiling, round: r, point: p.name, workers: c.connections, procs: h.procs(nil)},
				h.ceilingWork(st, p.ceilRefs, tag+"c", nil))
			st.Close()
		}
	}
	if c.scaleDrain > 0 && h.stop.Err() == nil {
		if err := h.runDrain(); err != nil {
			return err
		}
	}
	// The restart phase runs on the largest hash point (the last point).
	if c.scaleRestart && len(hashes) > 0 && h.stop.Err() == nil {
		last := pts[len(pts)-1]
		return h.runRestart(last.reg, last.partitions, last.name)
	}
	return nil
}

// cacheSettleLimit bounds the wait for the cache loads the priming started.
const cacheSettleLimit = 5 * time.Minute

// waitCacheSettled waits until the broker's dedup cache has no load running
// or queued and no partition hydrating (the loads the priming pushes
// started), at most limit. It says how that ended, for the log.
func (h *harness) waitCacheSettled(baseURL string, limit time.Duration) string {
	hc := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(limit)
	for {
		var m struct {
			DedupCache *struct {
				Hydrating  int `json:"hydrating"`
				Partitions int `json:"partitions"`
				Hydrations struct {
					Running int `json:"running"`
				} `json:"hydrations"`
			} `json:"dedupCache"`
		}
		resp, err := hc.Get(baseURL + "/metrics")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&m)
			resp.Body.Close()
		}
		switch {
		case err != nil:
			return "unknown (" + err.Error() + ")"
		case m.DedupCache == nil:
			return "off"
		case m.DedupCache.Hydrating == 0 && m.DedupCache.Hydrations.Running == 0:
			return fmt.Sprintf("settled (%d partitions held)", m.DedupCache.Partitions)
		case time.Now().After(deadline) || h.stop.Err() != nil:
			return fmt.Sprintf("still running after %s", limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// noteExpired records phase (of point) as started after some of the point's
// preloaded hashes had left the window: have in-window hashes, fewer than
// the preload wrote.
func (st *scaleState) noteExpired(point, phase string, have int64) {
	if pre, ok := st.preloaded[point]; ok && have < pre {
		st.expired = append(st.expired, fmt.Sprintf("%s (%s in the window, %s preloaded)", phase, shortCount(int(have)), shortCount(int(pre))))
	}
}

// hashOptions are the options of a hash point's queue: the defaults, with
// the dedup window.
func hashOptions(window time.Duration) partition.QueueOptions {
	o := partition.DefaultQueueOptions()
	o.DedupWindowSeconds = int(window / time.Second)
	return o
}

// hashChildSeconds is the width of the hash sidecar children for a hash
// point's queue: the one the broker uses for that depth.
func hashChildSeconds(window time.Duration) int {
	return sqlstore.SidecarChildSecondsFor(hashOptions(window).SidecarRetentionSeconds())
}

// prepareScalePoint creates the point's schemas, its partitions and its
// preloaded hashes. A hash point's queue is configured first (through the
// store's Configure, as the configure endpoint does) with the point's
// window, and both schemas get the same span of preloaded times
// (preloadSpanFor, from the start of the preparation).
func (h *harness) prepareScalePoint(p *scalePt) error {
	c := h.cfg
	t := time.Now()
	h.logf("preparing point %s", p.name)
	span := preloadSpanFor(t, p.window)
	child := 0
	if p.window > 0 {
		child = hashChildSeconds(p.window)
	}
	prepare := func(sp *pgSpace) ([]reginatype.PartitionRef, error) {
		if p.window > 0 {
			if _, err := sp.store.Configure(h.stop, scaleQueue, "", "", hashOptions(p.window)); err != nil {
				return nil, fmt.Errorf("point %s: %w", p.name, err)
			}
		}
		refs, err := h.scalePartitions(h.stop, sp, scaleQueue, p.partitions)
		if err != nil {
			return nil, err
		}
		if p.preload > 0 {
			h.logf("  preloading %s hashes into %d partitions of %s, window %s, spread over %s", shortCount(p.preload), p.partitions,
				sp.schema, p.window, span.until.Sub(span.from).Round(time.Second))
			if err := h.preload(h.stop, sp, refIDs(refs), p.preload, span, child); err != nil {
				return nil, fmt.Errorf("point %s: %w", p.name, err)
			}
		}
		return refs, nil
	}
	var err error
	if p.reg, err = h.openSpaceChild("_"+strconv.Itoa(p.k)+"r", 2, child); err != nil {
		return err
	}
	if _, err := prepare(p.reg); err != nil {
		return err
	}
	if p.preload > 0 {
		if have, err := h.inWindowHashes(h.stop, p.reg, scaleQueue); err == nil {
			h.scale.preloaded[p.name] = have
		}
	}
	p.reg.closeStore()
	if c.scaleCeiling {
		if p.ceil, err = h.openSpaceChild("_"+strconv.Itoa(p.k)+"c", 2, child); err != nil {
			return err
		}
		if p.ceilRefs, err = prepare(p.ceil); err != nil {
			return err
		}
		p.ceil.closeStore()
	}
	h.scale.preloadTime[p.name] = time.Since(t)
	return nil
}

// refIDs returns the partition ids of refs.
func refIDs(refs []reginatype.PartitionRef) [][16]byte {
	ids := make([][16]byte, len(refs))
	for i, r := range refs {
		ids[i] = r.ID
	}
	return ids
}

// scalePartitions is ensurePartitions for large counts: partition p0
// through the store (which creates the queue with the default options),
// the others with one INSERT of the rows queen.ensure_partition would
// insert, then every ref in order p0..p(n-1).
func (h *harness) scalePartitions(ctx context.Context, sp *pgSpace, queue string, n int) ([]reginatype.PartitionRef, error) {
	if n <= 1000 {
		return h.ensurePartitions(ctx, sp, queue, n)
	}
	first, err := h.ensurePartitions(ctx, sp, queue, 1)
	if err != nil {
		return nil, err
	}
	s := quoteIdent(sp.schema)
	if _, err := h.admin.Exec(ctx, `INSERT INTO `+s+`.partitions (id, queue_id, name)
		SELECT `+s+`.partition_id_of($1, 'p' || i), $1, 'p' || i FROM generate_series(1, $2::int - 1) i
		ON CONFLICT (id) DO NOTHING`, [16]byte(first[0].QueueID), n); err != nil {
		return nil, fmt.Errorf("create %d partitions of %s: %w", n, queue, err)
	}
	rows, err := h.admin.Query(ctx, `SELECT id FROM `+s+`.partitions WHERE queue_id = $1 AND name ~ '^p[0-9]+$'
		ORDER BY substr(name, 2)::int`, [16]byte(first[0].QueueID))
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[[16]byte])
	if err != nil {
		return nil, err
	}
	if len(ids) != n {
		return nil, fmt.Errorf("queue %s has %d partitions p<i>, want %d", queue, len(ids), n)
	}
	refs := make([]reginatype.PartitionRef, n)
	for i, id := range ids {
		refs[i] = first[0]
		refs[i].ID = partition.UUID(id)
	}
	return refs, nil
}

// queuePartitions returns the ids of queue's partitions.
func (h *harness) queuePartitions(ctx context.Context, sp *pgSpace, queue string) ([][16]byte, error) {
	s := quoteIdent(sp.schema)
	rows, err := h.admin.Query(ctx, "SELECT p.id FROM "+s+".partitions p JOIN "+s+".queues q ON q.id = p.queue_id WHERE q.name = $1 ORDER BY p.name", queue)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[[16]byte])
}

// inWindowHashes counts the hashes of queue's partitions inside the queue's
// dedup window (younger than dedup_window_seconds).
func (h *harness) inWindowHashes(ctx context.Context, sp *pgSpace, queue string) (int64, error) {
	ids, err := h.queuePartitions(ctx, sp, queue)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	s := quoteIdent(sp.schema)
	var n int64
	err = h.admin.QueryRow(ctx, "SELECT coalesce(sum(cardinality(hashes)), 0) FROM "+s+".log_txns "+
		"WHERE partition_id = ANY($1) AND created_at > now() - make_interval(secs => (SELECT dedup_window_seconds FROM "+s+
		".queues WHERE name = $2))", ids, queue).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count the in-window hashes of %s in %s: %w", queue, sp.schema, err)
	}
	return n, nil
}

// ---------------------------------------------------------------- scale report

type scaleRow struct {
	label        string
	n            int // the point's nominal size
	x            float64
	regina, ceil phaseSummary
	startR       int64
	startup      time.Duration // median broker start + priming
}

func (h *harness) scaleRows(points []int, point func(int) string, label func(int) string, byHashes bool) []scaleRow {
	var rows []scaleRow
	for _, n := range points {
		pt := point(n)
		r := scaleRow{label: label(n), n: n, x: float64(n),
			regina: summarize(h.byName(phScaleRegina, pt)), ceil: summarize(h.byName(phScaleCeiling, pt))}
		if r.regina.n == 0 && r.ceil.n == 0 {
			continue
		}
		if h.scale != nil {
			var su []float64
			for _, d := range h.scale.startup[pt] {
				su = append(su, float64(d))
			}
			r.startup = time.Duration(median(su))
			var v []float64
			for k, c := range h.scale.hashesAtStart {
				if strings.HasPrefix(k, pt+"/") {
					v = append(v, float64(c))
				}
			}
			if len(v) > 0 && byHashes {
				r.startR = int64(median(v))
				r.x = median(v)
			}
		}
		rows = append(rows, r)
	}
	return rows
}

func (h *harness) writeScale() (string, error) {
	// The drain has a section of its own; a run of the drain alone
	// leaves the scale section as it was.
	drainSummary, err := h.writeDrain()
	if err != nil || !h.ranBesidesDrain() {
		return drainSummary, err
	}
	c := h.cfg
	parts := slices.Clone(c.scaleParts)
	slices.Sort(parts)
	hashes := slices.Clone(c.scaleHashes)
	slices.Sort(hashes)
	pRows := h.scaleRows(parts, partsPoint, func(n int) string { return shortCount(n) }, false)
	hRows := h.scaleRows(hashes, hashesPoint, func(n int) string { return shortCount(n) }, true)

	var b strings.Builder
	fmt.Fprintf(&b, "## `make compare/scale`: cost as partitions and the in-window log grow\n\n")
	h.settingText(&b)
	pops := "none"
	if len(c.scalePop) > 0 {
		pops = joinInts(slices.Sorted(slices.Values(c.scalePop)))
	}
	partSizes, hashSizes := "none", "none"
	if len(parts) > 0 {
		partSizes = joinInts(parts) + " (the default 1 h window)"
	}
	if len(hashes) > 0 {
		hashSizes = joinInts(hashes) + " (a " + fmtWindow(c.scaleWindow) + " window)"
	}
	fmt.Fprintf(&b, "- Sizes: partitions %s; in-window hashes %s; pop partitions %s; %d round(s) per point; Regina with the default configuration (cache on); ceiling = `queen.push_segment` through pgx on a queue of its own\n",
		partSizes, hashSizes, pops, c.scaleRounds)

	row := func(r scaleRow, extra string) string {
		ratio, ceilRate, ceilP99 := "-", "-", "-"
		if r.ceil.n > 0 && r.ceil.rate > 0 {
			ratio = fmtRatio(r.regina.rate / r.ceil.rate)
			ceilRate, ceilP99 = fmtRate(r.ceil.rate), fmtMs(r.ceil.p99)
		}
		return fmt.Sprintf("| %s%s | **%s** | %s–%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d/%d |\n", r.label, extra,
			fmtRate(r.regina.rate), fmtRate(r.regina.lo), fmtRate(r.regina.hi), fmtMs(r.regina.p50), fmtMs(r.regina.p99),
			ceilRate, ceilP99, ratio,
			fmtCores(r.regina.broker), fmtCores(r.regina.pgOurs), fmtCores(r.regina.machine), fmtOptUs(r.regina.rss),
			r.startup.Round(10*time.Millisecond), r.regina.anomalies+r.ceil.anomalies, r.regina.errors+r.ceil.errors)
	}
	head := "| %s | Regina msgs/s | min–max | Regina p50 ms | Regina p99 ms | ceiling msgs/s | ceiling p99 ms | Regina/ceiling | broker cores | PG ours cores | machine cores | broker RSS MiB | broker start + prime | wrong/errors |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
	b.WriteString("\nEvery point has fresh schemas of its own (one for Regina, one for the ceiling: the GIN index spans the whole\n" +
		"`log_txns` table, so a point must not carry the rows of another). All points are prepared first; then each round\n" +
		"runs every point in turn, and figures are medians over rounds. Before each Regina phase a fresh broker starts and\n" +
		"one message is pushed to every partition, and the cache loads those pushes started are waited for (so every\n" +
		"partition is loaded, its cache hydrated as far as its budget allows) before the warmup; that time is the\n" +
		"\"broker start + prime\" column. A cold broker, whose loads run during its pushes, is the restart phase below.\n")

	b.WriteString("\n### As partitions grow\n\n")
	b.WriteString("![throughput and p99 by partitions](scale-partitions.png)\n\n")
	fmt.Fprintf(&b, head, "partitions")
	for _, r := range pRows {
		b.WriteString(row(r, ""))
	}

	b.WriteString("\n### As the in-window hash count grows\n\n")
	w := c.scaleWindow
	fmt.Fprintf(&b, "Hashes were preloaded with SQL (`generate_series` into `log_txns`/`segments`, `next_offset` advanced, GIN\n"+
		"index rebuilt, VACUUM ANALYZE) into the pushed partitions of a queue configured with a %s dedup window\n"+
		"(`-scale-window`), then pushed to. The preload models a window in steady state: its hashes are spread evenly in\n"+
		"time over the %s before the point's preparation started (the window less a reserve of %s, a twelfth, for the\n"+
		"run itself: the oldest preloaded hash leaves the window that long after), offsets growing with the times, in\n"+
		"`log_txns` children of %s (`sqlstore.SidecarChildSecondsFor` of the window: the width the broker uses), so the\n"+
		"child the pushes write holds only the newest slice. In parentheses: what the Regina schema held in its window\n"+
		"when its phases started (median over rounds); every phase adds its own pushes.\n\n",
		fmtWindow(w), fmtWindow(w-preloadReserve(w)), fmtWindow(preloadReserve(w)), fmtWindow(time.Duration(hashChildSeconds(w))*time.Second))
	if len(h.scale.expired) > 0 {
		fmt.Fprintf(&b, "**Preloaded hashes had left the window** when these phases started (the run outlasted the reserve): %s.\n\n",
			strings.Join(h.scale.expired, "; "))
	}
	b.WriteString("![throughput and p99 by in-window hashes](scale-hashes.png)\n\n")
	fmt.Fprintf(&b, head, "target hashes (at start)")
	for _, r := range hRows {
		extra := ""
		if r.startR > 0 {
			extra = " (" + shortCount(int(r.startR)) + ")"
		}
		b.WriteString(row(r, extra))
	}
	var pre []string
	for _, n := range hashes {
		if d, ok := h.scale.preloadTime[hashesPoint(n)]; ok {
			pre = append(pre, shortCount(n)+": "+d.Round(time.Second).String())
		}
	}
	if len(pre) > 0 {
		fmt.Fprintf(&b, "\nPreparation time per point (partitions, preload, index rebuild, VACUUM ANALYZE; both schemas when the ceiling runs): %s.\n", strings.Join(pre, ", "))
	}

	plotDir := c.plotDir
	if !filepath.IsAbs(plotDir) {
		plotDir = filepath.Join(h.repo, plotDir)
	}
	var summary strings.Builder
	summary.WriteString("compare/scale:")
	for _, r := range pRows {
		fmt.Fprintf(&summary, " p%s=%s", r.label, fmtRate(r.regina.rate))
	}
	b.WriteString("\n### The bar\n\n")
	if len(hRows) >= 2 && hRows[0].regina.rate > 0 {
		lo := hRows[0]
		b.WriteString("| ratio | value | bar | verdict |\n|---|---|---|---|\n")
		for _, hi := range hRows[1:] {
			v := hi.regina.rate / lo.regina.rate
			rt := ratio{bar: hashBar(hi.n), med: v, ok: true}
			fmt.Fprintf(&b, "| Regina msgs/s at %s hashes / at %s | **%s** | ≥ %s | %s |\n",
				hi.label, lo.label, fmtRatio(v), fmtRatio(rt.bar), rt.verdict())
			if hi.ceil.n > 0 && lo.ceil.rate > 0 {
				fmt.Fprintf(&b, "| ceiling msgs/s at %s / at %s (context) | %s | | |\n", hi.label, lo.label, fmtRatio(hi.ceil.rate/lo.ceil.rate))
			}
			if lo.regina.p99 > 0 {
				fmt.Fprintf(&b, "| Regina p99 at %s / at %s (context) | %s | | |\n", hi.label, lo.label, fmtRatio(hi.regina.p99/lo.regina.p99))
			}
			fmt.Fprintf(&summary, " hashes_%s/%s=%s", hi.label, lo.label, fmtRatio(v))
		}
	} else {
		b.WriteString("Not measured (needs at least two hash sizes).\n")
	}

	popSummary, err := h.writePop(&b, plotDir)
	if err != nil {
		return "", err
	}
	summary.WriteString(popSummary)
	summary.WriteString(h.writeRestart(&b))
	summary.WriteString(drainSummary)

	b.WriteString("\n### Every phase\n\nPhases where more than 1% of the ops failed are marked and left out of every median and ratio. The cache column is the broker's `/metrics` dedupCache over the phase: watermark hits / full-window probes /\nevictions / hydrations finished of started, then the hashes it held at the end.\n\n")
	b.WriteString("| round | point | system | msgs/s | p50 ms | p99 ms | broker | PG ours | PG all | load gen | machine | broker RSS MiB | cache | wrong | errors |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range h.results {
		fmt.Fprintf(&b, "| %d | %s | %s%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %d |\n", r.Round+1, r.Point, r.Name,
			invalidNote(r), fmtRate(r.MsgsPerSec), fmtMs(r.P50), fmtMs(r.P99),
			fmtCores(r.CPU.Broker), fmtCores(r.CPU.PGOurs), fmtCores(r.CPU.PGAll), fmtCores(r.CPU.LoadGen), fmtCores(r.CPU.Machine),
			fmtOptUs(r.RSSMaxMiB), r.Cache.short(), r.Anomalies, r.Errors)
	}

	// Plots.
	for _, p := range []struct {
		file, title, xlabel string
		rows                []scaleRow
	}{
		{"scale-partitions.png", "Regina push throughput and p99 as partitions grow", "partitions (log scale)", pRows},
		{"scale-hashes.png", "Regina push throughput and p99 as in-window hashes grow", "in-window hashes at phase start (log scale)", hRows},
	} {
		if len(p.rows) == 0 {
			continue
		}
		var xs []float64
		var xl []string
		reg := curve{name: "Regina", col: color.RGBA{30, 110, 190, 255}}
		ceil := curve{name: "pgx ceiling", col: color.RGBA{210, 50, 40, 255}}
		regP := reg
		ceilP := ceil
		for _, r := range p.rows {
			xs = append(xs, r.x)
			xl = append(xl, shortCount(int(r.x)))
			reg.add(r.x, r.regina.rate, r.regina.n > 0)
			ceil.add(r.x, r.ceil.rate, r.ceil.n > 0)
			regP.add(r.x, r.regina.p99, r.regina.n > 0)
			ceilP.add(r.x, r.ceil.p99, r.ceil.n > 0)
		}
		sub := fmt.Sprintf("%d connections, %d msgs/push, %d-byte payloads, %s per point; %s", c.connections, c.items, h.wl.payload, c.duration, h.info.Started.Format("2006-01-02"))
		thr, lat := []curve{reg}, []curve{regP}
		if slices.Contains(ceil.ok, true) {
			thr, lat = append(thr, ceil), append(lat, ceilP)
		}
		if err := drawScale(filepath.Join(plotDir, p.file), p.title, sub, p.xlabel, xs, xl, thr, lat); err != nil {
			return "", err
		}
		h.logf("wrote %s", filepath.Join(plotDir, p.file))
	}

	if err := replaceSection(h.outPath(), "scale", b.String()); err != nil {
		return "", err
	}
	if err := h.writeJSON(); err != nil {
		return "", err
	}
	return summary.String(), nil
}

// fmtWindow writes a window as people say it: 24 h, 90 min, 45 s.
func fmtWindow(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return strconv.Itoa(int(d/time.Hour)) + " h"
	case d >= time.Minute && d%time.Minute == 0:
		return strconv.Itoa(int(d/time.Minute)) + " min"
	case d%time.Second == 0:
		return strconv.Itoa(int(d/time.Second)) + " s"
	}
	return d.String()
}

func joinInts(v []int) string {
	var s []string
	for _, n := range v {
		s = append(s, shortCount(n))
	}
	return strings.Join(s, ", ")
}

// hashBar is issue 12's bar for push throughput with n in-window hashes
// against the smallest point: 0.9 up to 10M, 0.8 beyond (100M).
func hashBar(n int) float64 {
	if n > 10000000 {
		return 0.8
	}
	return 0.9
}
