package main

import (
	"fmt"
	"strings"
	"time"
)

// The restart phase: on the schema of the largest hash point (a database
// holding a full window), a warm broker (primed, its cache loads settled,
// as before a point's phases) pushes, is stopped (SIGTERM), and a new
// broker on the same database pushes the same load at once, cold. The
// second broker's rate is measured from -scale-restart-after (30 s) after
// it was started, and over the warm one's should be >= 0.5 (issue 27: a
// cold broker at 100M is fast within 30 s); its msgs/s over each second
// from its start are kept (the ramp while its cache loads).
const (
	phRestartBefore = "restart_before"
	phRestartAfter  = "restart_after"
	restartPoint    = "restart"
)

// restartState is what the restart phase saw beyond its two phases.
type restartState struct {
	hashes  int64         // in-window hashes when it started
	warmIn  time.Duration // first broker's start to primed and settled
	startup time.Duration // second broker's start to /health 200
	offset  time.Duration // second broker's start to its first push
}

// runRestart runs the restart phase on sp (queue scaleQueue, its partitions
// already there), the Regina schema of hash point point. The first broker
// is primed and waited for (the warm reference); the second is not: the
// warmup is all it gets, as after a real restart.
func (h *harness) runRestart(sp *pgSpace, partitions int, point string) error {
	c := h.cfg
	h.wl = newWorkload(partitions, c.items, c.payload, 42)
	st := &restartState{}
	if have, err := h.inWindowHashes(h.stop, sp, scaleQueue); err == nil {
		st.hashes = have
		h.scale.noteExpired(point, "the restart phase", have)
	}
	h.scale.restart = st
	h.logf("restart phase on %s (%s in-window hashes)", sp.schema, shortCount(int(st.hashes)))
	for i, ph := range []string{phRestartBefore, phRestartAfter} {
		if h.stop.Err() != nil {
			return nil
		}
		t := time.Now()
		b, err := h.startBroker(sp, true, "regina-"+ph)
		if err != nil {
			return err
		}
		spec := phaseSpec{name: ph, round: 0, point: restartPoint, workers: c.connections, procs: h.procs(b), brokerURL: b.url}
		if i == 0 {
			if _, err := h.prime(b.url, scaleQueue, h.runTag+".prime-"+ph, partitions); err != nil {
				if h.stop.Err() != nil {
					return nil
				}
				return err
			}
			st.warmIn = time.Since(t)
			h.logf("  warm broker: every partition primed and its cache loads %s in %s", h.waitCacheSettled(b.url, cacheSettleLimit),
				st.warmIn.Round(time.Millisecond))
		}
		if i == 1 {
			st.startup = time.Since(t)
			h.logf("  restarted broker healthy in %s", st.startup.Round(time.Millisecond))
			// Measured from restartAfter after the start; the pushes start
			// at once (the warmup is the rest of it).
			spec.warmup, spec.timeline = max(c.scaleRestartAfter-time.Since(t), time.Millisecond), true
			st.offset = time.Since(t)
		}
		h.drive(spec, h.reginaWork(b.url, scaleQueue, h.runTag+"."+ph, nil))
		h.stopBroker()
	}
	return nil
}

// writeRestart adds the restart section to b and returns the summary's
// restart ratio.
func (h *harness) writeRestart(b *strings.Builder) string {
	b.WriteString("\n### A restart on a database holding a full window\n\n")
	before := summarize(h.byName(phRestartBefore, restartPoint))
	after := summarize(h.byName(phRestartAfter, restartPoint))
	if after.n == 0 {
		// A cold broker that answered nothing inside its window without an
		// error pushed at 0 msgs/s: a result, not a failed phase.
		for _, r := range h.results {
			if r.Name == phRestartAfter && r.Point == restartPoint && r.Window > 0 && r.Errors == 0 {
				after = phaseSummary{n: 1, broker: r.CPU.Broker, pgOurs: r.CPU.PGOurs, machine: r.CPU.Machine, rss: r.RSSMaxMiB}
			}
		}
	}
	if h.scale == nil || h.scale.restart == nil || before.n == 0 || after.n == 0 || before.rate <= 0 {
		b.WriteString("Not measured in this run.\n")
		return ""
	}
	fmt.Fprintf(b, "On the Regina schema of the largest hash point (%s hashes in its %s window when the phase started): a\n"+
		"warm broker (one push to every partition and its cache loads waited for, %s from its start) pushes the scale\n"+
		"load, is stopped with SIGTERM, and a new broker on the same database pushes the same load at once, cold (no\n"+
		"priming), measured from %s after it was started. The restarted broker answered `/health` %s after it was started.\n\n",
		shortCount(int(h.scale.restart.hashes)), fmtWindow(h.cfg.scaleWindow), h.scale.restart.warmIn.Round(100*time.Millisecond),
		h.cfg.scaleRestartAfter, h.scale.restart.startup.Round(time.Millisecond))
	b.WriteString("| broker | msgs/s | p50 ms | p99 ms | broker cores | PG ours cores | machine cores | broker RSS MiB | cache | errors |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range []struct {
		label, name string
		s           phaseSummary
	}{{"before the restart (warm)", phRestartBefore, before}, {"after the restart (cold)", phRestartAfter, after}} {
		cache := "-"
		for _, r := range h.byName(x.name, restartPoint) {
			cache = r.Cache.short()
		}
		fmt.Fprintf(b, "| %s | **%s** | %s | %s | %s | %s | %s | %s | %s | %d |\n", x.label, fmtRate(x.s.rate), fmtMs(x.s.p50), fmtMs(x.s.p99),
			fmtCores(x.s.broker), fmtCores(x.s.pgOurs), fmtCores(x.s.machine), fmtOptUs(x.s.rss), cache, x.s.errors)
	}
	v := after.rate / before.rate
	rt := ratio{bar: 0.5, med: v, ok: true}
	fmt.Fprintf(b, "\n| ratio | value | bar | verdict |\n|---|---|---|---|\n| msgs/s of the cold broker from %s after its start / the warm one | **%s** | ≥ 0.5 | %s |\n",
		h.cfg.scaleRestartAfter, fmtRatio(v), rt.verdict())
	for _, r := range h.byName(phRestartAfter, restartPoint) {
		if len(r.Timeline) > 0 {
			fmt.Fprintf(b, "\nThe restarted broker's msgs/s, 5 s at a time from its first push (%s after its start): %s\n",
				h.scale.restart.offset.Round(100*time.Millisecond), timelineText(r.Timeline, 5))
		}
	}
	return " restart_after/before=" + fmtRatio(v)
}

// timelineText sums a per-second timeline every step seconds, as msgs/s.
func timelineText(perSec []int64, step int) string {
	var parts []string
	for i := 0; i < len(perSec); i += step {
		var n int64
		j := min(i+step, len(perSec))
		for _, v := range perSec[i:j] {
			n += v
		}
		parts = append(parts, fmtRate(float64(n)/float64(j-i)))
	}
	return strings.Join(parts, " / ")
}
