package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// valid tells whether a phase counts in medians and ratios: it measured
// something and less than 1% of its ops failed (a broker that died mid-phase
// leaves a figure that says nothing about throughput).
func (r *PhaseResult) valid() bool {
	return r.Window > 0 && r.Ops > 0 && r.Errors*100 <= r.Ops
}

// byName returns the valid results of one phase (and point), by round.
func (h *harness) byName(name, point string) map[int]*PhaseResult {
	out := map[int]*PhaseResult{}
	for _, r := range h.results {
		if r.Name == name && r.Point == point && r.valid() {
			out[r.Round] = r
		}
	}
	return out
}

// invalidNote is the phase tables' mark for a phase left out.
func invalidNote(r *PhaseResult) string {
	switch {
	case r.Partial && !r.valid():
		return " (partial; left out)"
	case r.Ops == 0 && r.Errors == 0:
		return " (nothing answered in the window; left out)"
	case r.Partial:
		return " (partial)"
	case !r.valid():
		return " (errors; left out)"
	}
	return ""
}

// phaseSummary is a phase's figures over rounds: medians, and the range of
// msgs/s.
type phaseSummary struct {
	n                 int
	rate, lo, hi      float64
	p50, p99          float64
	broker, pgOurs    *float64
	pgAll, nats       *float64
	loadgen, machine  *float64
	steal, rss        *float64
	anomalies, errors int64
	errSample         string
	partial           bool
	brokerUs, pgUs    *float64 // CPU microseconds per message
	natsUs, loadgenUs *float64
	machineUs         *float64
}

func medianOpt(rs []*PhaseResult, f func(*PhaseResult) *float64) *float64 {
	var v []float64
	for _, r := range rs {
		if p := f(r); p != nil {
			v = append(v, *p)
		}
	}
	if len(v) == 0 {
		return nil
	}
	m := median(v)
	return &m
}

// perMsg is CPU microseconds per message: cores / (msgs/s) * 1e6.
func perMsg(rs []*PhaseResult, f func(*PhaseResult) *float64) *float64 {
	return medianOpt(rs, func(r *PhaseResult) *float64 {
		c := f(r)
		if c == nil || r.MsgsPerSec <= 0 {
			return nil
		}
		v := *c / r.MsgsPerSec * 1e6
		return &v
	})
}

func summarize(m map[int]*PhaseResult) phaseSummary {
	var rs []*PhaseResult
	for _, r := range m {
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b *PhaseResult) int { return a.Round - b.Round })
	s := phaseSummary{n: len(rs)}
	if len(rs) == 0 {
		return s
	}
	var rates, p50, p99 []float64
	for _, r := range rs {
		rates = append(rates, r.MsgsPerSec)
		p50 = append(p50, r.P50)
		p99 = append(p99, r.P99)
		s.anomalies += r.Anomalies
		s.errors += r.Errors
		if s.errSample == "" {
			s.errSample = r.ErrSample
		}
		s.partial = s.partial || r.Partial
	}
	s.rate, s.p50, s.p99 = median(rates), median(p50), median(p99)
	s.lo, s.hi = slices.Min(rates), slices.Max(rates)
	s.broker = medianOpt(rs, func(r *PhaseResult) *float64 { return r.CPU.Broker })
	s.pgOurs = medianOpt(rs, func(r *PhaseResult) *float64 { return r.CPU.PGOurs })
	s.pgAll = medianOpt(rs, func(r *PhaseResult) *float64 { return r.CPU.PGAll })
	s.nats = medianOpt(rs, func(r *PhaseResult) *float64 { return r.CPU.NATS })
	s.loadgen = medianOpt(rs, func(r *PhaseResult) *float64 { return r.CPU.LoadGen })
	s.machine = medianOpt(rs, func(r *PhaseResult) *float64 { return r.CPU.Machine })
	s.steal = medianOpt(rs, func(r *PhaseResult) *float64 { return r.CPU.Steal })
	s.rss = medianOpt(rs, func(r *PhaseResult) *float64 { return r.RSSMaxMiB })
	s.brokerUs = perMsg(rs, func(r *PhaseResult) *float64 { return r.CPU.Broker })
	s.pgUs = perMsg(rs, func(r *PhaseResult) *float64 { return r.CPU.PGOurs })
	s.natsUs = perMsg(rs, func(r *PhaseResult) *float64 { return r.CPU.NATS })
	s.loadgenUs = perMsg(rs, func(r *PhaseResult) *float64 { return r.CPU.LoadGen })
	s.machineUs = perMsg(rs, func(r *PhaseResult) *float64 { return r.CPU.Machine })
	return s
}

// ratio is one same-run ratio: num's msgs/s over den's, round by round
// (the two phases of a round ran minutes apart at most), and the median.
type ratio struct {
	key, label string
	num, den   string
	bar        float64 // 0: context only
	rounds     []float64
	med        float64
	ok         bool
}

func (h *harness) ratioOf(key, label, num, den string, bar float64) ratio {
	r := ratio{key: key, label: label, num: num, den: den, bar: bar}
	a, b := h.byName(num, ""), h.byName(den, "")
	for round := range h.cfg.rounds {
		x, okx := a[round]
		y, oky := b[round]
		if okx && oky && y.MsgsPerSec > 0 {
			r.rounds = append(r.rounds, x.MsgsPerSec/y.MsgsPerSec)
		}
	}
	if len(r.rounds) > 0 {
		r.med, r.ok = median(r.rounds), true
	}
	return r
}

func fmtRatio(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

func (r ratio) value() string {
	if !r.ok {
		return "n/a"
	}
	return fmtRatio(r.med)
}

func (r ratio) roundsText() string {
	var s []string
	for _, v := range r.rounds {
		s = append(s, fmtRatio(v))
	}
	return strings.Join(s, " / ")
}

func (r ratio) verdict() string {
	switch {
	case !r.ok:
		return "not measured"
	case r.med >= r.bar:
		return fmt.Sprintf("**met** (%+.0f%% over the bar)", (r.med/r.bar-1)*100)
	default:
		return fmt.Sprintf("**missed** by %.0f%% (%.2f short of %.2f)", (1-r.med/r.bar)*100, r.bar-r.med, r.bar)
	}
}

// ---------------------------------------------------------------- RESULTS.md

const resultsHeader = `# Regina benchmark results

Written by ` + "`make compare`" + ` and ` + "`make compare/scale`" + ` (program: ` + "`bench/compare`" + `, method
and caveats in ` + "`bench/compare/doc.go`" + `). Each command replaces only its own section below.
Figures are from a 2-core shared machine on which other work ran at the same time:
read the same-run **ratios**, not the absolute rates.
`

// replaceSection writes body between the section's markers in path,
// keeping everything else (the file is created when missing).
func replaceSection(path, section, body string) error {
	begin, end := "<!-- "+section+":begin -->", "<!-- "+section+":end -->"
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	doc := string(old)
	if strings.TrimSpace(doc) == "" {
		doc = resultsHeader
	}
	block := begin + "\n" + strings.TrimSpace(body) + "\n" + end
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i >= 0 && j > i {
		doc = doc[:i] + block + doc[j+len(end):]
	} else {
		// compare goes before scale.
		if k := strings.Index(doc, "<!-- scale:begin -->"); section == "compare" && k >= 0 {
			doc = doc[:k] + block + "\n\n" + doc[k:]
		} else {
			doc = strings.TrimRight(doc, "\n") + "\n\n" + block + "\n"
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}

func (h *harness) settingText(b *strings.Builder) {
	i := h.info
	c := h.cfg
	fmt.Fprintf(b, "- Command: `%s`\n", i.Command)
	fmt.Fprintf(b, "  (`%s`)\n", i.Args)
	fmt.Fprintf(b, "- Machine: %d × %s, %s GiB memory, %s, kernel %s\n", i.Machine.NProc, i.Machine.CPUModel, i.Machine.MemGiB, i.Machine.OS, i.Machine.Kernel)
	fmt.Fprintf(b, "- Versions: %s; PostgreSQL %s (%s, %s); Regina commit `%s`", i.GoVersion, i.PGVersion, i.PGWhere,
		pgSettingsText(i.PGSettings), i.Commit)
	b.WriteString("\n")
	for _, p := range i.Peers {
		fmt.Fprintf(b, "- %s: %s, %s\n", p.Name, p.Version, p.Where)
	}
	if strings.HasSuffix(i.Commit, "+dirty") {
		b.WriteString("  (`+dirty`: the work tree had uncommitted changes of other engineers when the broker was built)\n")
	}
	fmt.Fprintf(b, "- Load shape: %d connections, %d partitions, %d messages per push, %d-byte payloads; warmup %s + %s measured per phase",
		c.connections, c.partitions, c.items, h.wl.payload, c.warmup, c.duration)
	if !c.scale {
		fmt.Fprintf(b, "; %d interleaved rounds; JetStream: %d connections × %d async publishes in flight", c.rounds, c.natsConns, h.natsPending)
	}
	b.WriteString("\n")
	fmt.Fprintf(b, "- Started %s, %s\n", i.Started.Format(time.RFC3339), map[bool]string{true: "**interrupted before the end: partial figures**", false: "ran to the end"}[i.Interrupted])
	for _, c := range i.Crashes {
		fmt.Fprintf(b, "- **A broker exited by itself during a phase**: %s (the phase's errors column counts the failed pushes)\n", strings.ReplaceAll(c, "|", "\\|"))
	}
}

// phaseInfo names a phase of make compare and says what it measures.
type phaseInfo struct{ name, what string }

// comparePhases lists the phases of compare mode in the order of the
// report's tables. A new phase is added here (and to a block of
// runCompare).
func (h *harness) comparePhases() []phaseInfo {
	queen := "the user's upstream Queen server (`QUEEN_URL`)"
	if h.queen != nil {
		queen = "upstream Queen at " + h.queen.url
	}
	return []phaseInfo{
		{phReginaOn, "Regina, dedup on (1 h window), `QUEEN_DEDUP_CACHE=true`: new messages"},
		{phReginaOff, "Regina, dedup on, `QUEEN_DEDUP_CACHE=false`: new messages"},
		{phReginaNoDedup, "Regina, `dedupWindowSeconds: 0`: new messages"},
		{phCeiling, "`queen.push_segment` through pgx, no broker: new messages"},
		{phCeilingPacked, "`queen.push_segments` through pgx, no broker: " + h.packedWhat("one transaction")},
		{phCeilingPipelined, "`queen.push_segment` pipelined through pgx, no broker: " + h.packedWhat("a transaction each")},
		{phNATS, "JetStream (block C: " + h.natsWhat(natsDefault) + ") async publish, `Nats-Msg-Id`, 1 h window, file storage: new messages"},
		{phNATSSync, "JetStream (block S: `sync_interval: always`), same publish: new messages"},
		{phRiver, "River (block R) unique `InsertMany`, one call (transaction) per push, same PostgreSQL: new messages"},
		{phRegina100, "Regina, dedup on, cache on (block P): " + strconv.Itoa(h.cfg.itemsLarge) + " messages per push: new messages"},
		{phNATS100, "JetStream (block C), " + strconv.Itoa(h.cfg.itemsLarge) + " messages per push: new messages"},
		{phNATSSync100, "JetStream (block S, `sync_interval: always`), " + strconv.Itoa(h.cfg.itemsLarge) + " messages per push: new messages"},
		{phReginaOne, "Regina, dedup on, cache on (block P): one message per push over " + strconv.Itoa(h.cfg.onePartitions) + " partitions: new messages"},
		{phQueen, queen + ", same client and load as Regina: new messages"},
		{phCheckOff, "Regina, dedup on, `dedupPayloadCheck: off` (block F): new messages"},
		{phCheckReport, "Regina, dedup on, `dedupPayloadCheck: report` (block F, same broker): new messages, fingerprints stored"},
		{phReginaOnStorm, "retry storm: Regina (cache on) rejecting replayed pushes"},
		{phReginaOffStorm, "retry storm: Regina (cache off) rejecting replayed pushes"},
		{phCeilingStorm, "retry storm: `queen.push_segment` rejecting replayed batches"},
		{phNATSStorm, "retry storm: JetStream rejecting republished Msg-Ids"},
		{phNATSSyncSt, "retry storm: JetStream (`sync_interval: always`) rejecting republished Msg-Ids"},
		{phRiverStorm, "retry storm: River answering `UniqueSkippedAsDuplicate` to the same jobs"},
		{phQueenStorm, "retry storm: upstream Queen rejecting replayed pushes"},
	}
}

// queenText writes the section on the user's Queen server and returns the
// headline ratio (Regina's new messages over Queen's).
func (h *harness) queenText(b *strings.Builder) ratio {
	b.WriteString("\n### Against upstream Queen (`make compare QUEEN_URL=...`)\n\n")
	headline := h.ratioOf("regina/queen", "Regina dedup on (cache on) / upstream Queen", phReginaOn, phQueen, 0)
	q := h.queen
	if q == nil {
		b.WriteString("Not measured: no Queen server was given. `make compare QUEEN_URL=http://HOST:PORT` (a Queen server you run)\n" +
			"adds block E: the same load, through the same client, against it, side by side with Regina in every table below.\n")
		return headline
	}
	fmt.Fprintf(b, "- Server: %s at %s, %s; queue `%s` (created for the run, deleted at the end).\n", q.server, q.url, q.where, q.queue)
	if q.note != "" {
		fmt.Fprintf(b, "- Deduplication: %s (upstream Queen drops the option: it deduplicates on a unique (partition, transactionId)\n"+
			"  key with no window, while `regina_on` has a 1 h window; both reject every replayed push of a storm).\n", q.note)
	}
	if h.cfg.queenDB != "" {
		fmt.Fprintf(b, "- CPU: \"broker\" is the Queen server process; \"PG ours\" the backends of its database `%s`.\n", h.cfg.queenDB)
	} else {
		b.WriteString("- CPU: \"broker\" is the Queen server process (when local); \"PG ours\" is unknown without `QUEEN_DATABASE`\n" +
			"  (\"PG all\" includes Queen's backends when it uses this PostgreSQL cluster).\n")
	}
	b.WriteString("\n| ratio | value | per round |\n|---|---|---|\n")
	for _, r := range []ratio{
		headline,
		h.ratioOf("", "Regina dedup on (cache off) / upstream Queen", phReginaOff, phQueen, 0),
		h.ratioOf("", "Regina dedup off / upstream Queen", phReginaNoDedup, phQueen, 0),
		h.ratioOf("", "Regina storm (cache on) / upstream Queen storm", phReginaOnStorm, phQueenStorm, 0),
		h.ratioOf("", "upstream Queen duplicates / new", phQueenStorm, phQueen, 0),
	} {
		fmt.Fprintf(b, "| %s | %s | %s |\n", r.label, r.value(), r.roundsText())
	}
	return headline
}

func fmtOptUs(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', 1, 64)
}

func (h *harness) writeCompare() (string, error) {
	bars := []ratio{
		h.ratioOf("regina/jetstream", "Regina dedup on (cache on) / JetStream dedup publish, defaults (acks before fsync)", phReginaOn, phNATS, 0.7),
		h.ratioOf("regina/ceiling", "Regina dedup on (cache on) / raw PostgreSQL ceiling", phReginaOn, phCeiling, 0.7),
		h.ratioOf("dedup_on/off", "Regina dedup on (cache on) / dedup off", phReginaOn, phReginaNoDedup, 0.9),
		h.ratioOf("dup/new", "Regina duplicates rejected / new accepted (cache on)", phReginaOnStorm, phReginaOn, 2.0),
		h.ratioOf("report/off", "Regina dedupPayloadCheck report / off (block F)", phCheckReport, phCheckOff, 0.95),
		h.ratioOf("regina/jetstream_sync", "Regina dedup on (cache on) / JetStream `sync_interval: always` (acked = fsynced)", phReginaOn, phNATSSync, 5),
		h.ratioOf("regina/jetstream_sync_100", "Regina / JetStream `sync_interval: always`, "+strconv.Itoa(h.cfg.itemsLarge)+" msgs/push", phRegina100, phNATSSync100, 20),
		h.ratioOf("regina/jetstream_100", "Regina / JetStream defaults, "+strconv.Itoa(h.cfg.itemsLarge)+" msgs/push", phRegina100, phNATS100, 1.5),
		h.ratioOf("regina/river", "Regina dedup on (cache on) / River unique inserts", phReginaOn, phRiver, 2),
		h.ratioOf("regina/river_storm", "Regina storm (cache on) / River storm", phReginaOnStorm, phRiverStorm, 4),
	}
	cpuBars := []cpuBar{
		h.cpuBarOf("cpu_us/msg_1", "one message per push over "+strconv.Itoa(h.cfg.onePartitions)+" partitions (block P)", phReginaOne, 120),
		h.cpuBarOf("cpu_us/msg_10", strconv.Itoa(h.cfg.items)+" messages per push over "+strconv.Itoa(h.cfg.partitions)+" partitions (block A)", phReginaOn, 45),
		h.cpuBarOf("cpu_us/verdict_storm", "retry storm, per duplicate verdict (block A)", phReginaOnStorm, 20),
	}
	context := []ratio{
		h.ratioOf("", "Regina dedup on, cache off / JetStream", phReginaOff, phNATS, 0),
		h.ratioOf("", "Regina dedup on, cache off / ceiling", phReginaOff, phCeiling, 0),
		h.ratioOf("", "Regina cache on / cache off (dedup on)", phReginaOn, phReginaOff, 0),
		h.ratioOf("", "Regina dedup off / ceiling", phReginaNoDedup, phCeiling, 0),
		h.ratioOf("", "Regina duplicates / new, cache off", phReginaOffStorm, phReginaOff, 0),
		h.ratioOf("", "Regina storm (cache on) / ceiling storm", phReginaOnStorm, phCeilingStorm, 0),
		h.ratioOf("", "Regina storm (cache on) / JetStream storm", phReginaOnStorm, phNATSStorm, 0),
		h.ratioOf("", "Regina storm (cache on) / JetStream `sync_interval: always` storm", phReginaOnStorm, phNATSSyncSt, 0),
		h.ratioOf("", "JetStream `sync_interval: always` / defaults", phNATSSync, phNATS, 0),
		h.ratioOf("", "River / ceiling", phRiver, phCeiling, 0),
		h.ratioOf("", "Ceiling duplicates / new", phCeilingStorm, phCeiling, 0),
		h.ratioOf("", "JetStream duplicates / new", phNATSStorm, phNATS, 0),
		h.ratioOf("", "Ceiling / JetStream", phCeiling, phNATS, 0),
		h.ratioOf("", "Regina dedup on (cache on) / packed ceiling", phReginaOn, phCeilingPacked, 0),
		h.ratioOf("", "Packed ceiling / single-partition ceiling", phCeilingPacked, phCeiling, 0),
		h.ratioOf("", "Pipelined ceiling / single-partition ceiling", phCeilingPipelined, phCeiling, 0),
		h.ratioOf("", "Packed ceiling / JetStream", phCeilingPacked, phNATS, 0),
	}

	var b strings.Builder
	fmt.Fprintf(&b, "## `make compare`: Regina vs the raw PostgreSQL ceiling vs NATS JetStream vs River\n\n")
	h.settingText(&b)

	b.WriteString("\n### The bar (median of the per-round ratios)\n\n")
	b.WriteString("| ratio | value | per round | bar | verdict |\n|---|---|---|---|---|\n")
	for _, r := range bars {
		fmt.Fprintf(&b, "| %s (`%s`) | **%s** | %s | ≥ %g | %s |\n", r.label, r.key, r.value(), r.roundsText(), r.bar, r.verdict())
	}
	b.WriteString("\nCPU per new message (broker + this run's PostgreSQL backends, µs of CPU per message with the expected verdict):\n\n")
	b.WriteString("| shape | value | per round | bar | verdict |\n|---|---|---|---|---|\n")
	for _, r := range cpuBars {
		fmt.Fprintf(&b, "| %s (`%s`) | **%s** | %s | ≤ %g | %s |\n", r.label, r.key, r.value(), r.roundsText(), r.bar, r.verdict())
	}
	b.WriteString("\nOne more bar (10M in-window hashes ≥ 0.9× 100k) is measured by `make compare/scale`, below.\n")

	queen := h.queenText(&b)
	consumeKeys := h.consumeText(&b)

	b.WriteString("\n### Other same-run ratios (context, no bar)\n\n| ratio | value | per round |\n|---|---|---|\n")
	for _, r := range context {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r.label, r.value(), r.roundsText())
	}

	b.WriteString("\n### CPU-normalised ratios (context, no bar)\n\n")
	b.WriteString("Throughput per core of the system's own processes, so that other work on the machine cancels out as far as\n" +
		"possible: messages per second divided by the cores used by the broker + PostgreSQL backends of this run\n" +
		"(Regina), the backends (ceiling) or nats-server (JetStream); \"with client\" adds the load generator (HTTP\n" +
		"client, pgx driver, NATS client). It estimates the throughput ratio on a dedicated CPU-bound box; it ignores\n" +
		"waiting (commit flushes, lock waits), which costs no CPU.\n\n")
	b.WriteString("| ratio | server side | per round | with client | per round |\n|---|---|---|---|---|\n")
	for _, e := range []struct{ label, num, den string }{
		{"Regina dedup on (cache on) / JetStream", phReginaOn, phNATS},
		{"Regina dedup on (cache on) / JetStream `sync_interval: always`", phReginaOn, phNATSSync},
		{"Regina dedup on (cache on) / River (River's client runs in the load generator: read \"with client\")", phReginaOn, phRiver},
		{"Regina dedup on (cache on) / ceiling", phReginaOn, phCeiling},
		{"Regina dedup on (cache on) / packed ceiling", phReginaOn, phCeilingPacked},
		{"Packed ceiling / single-partition ceiling", phCeilingPacked, phCeiling},
		{"Pipelined ceiling / single-partition ceiling", phCeilingPipelined, phCeiling},
		{"Regina dedup on (cache on) / dedup off", phReginaOn, phReginaNoDedup},
		{"Regina duplicates / new (cache on)", phReginaOnStorm, phReginaOn},
		{"Regina dedupPayloadCheck report / off", phCheckReport, phCheckOff},
		{"Regina dedup on (cache off) / JetStream", phReginaOff, phNATS},
		{"Regina dedup on (cache off) / ceiling", phReginaOff, phCeiling},
		{"Regina duplicates / new (cache off)", phReginaOffStorm, phReginaOff},
		{"Regina dedup on (cache on) / upstream Queen", phReginaOn, phQueen},
		{"Regina storm (cache on) / upstream Queen storm", phReginaOnStorm, phQueenStorm},
	} {
		srv, cli := h.effRatio(e.num, e.den, false), h.effRatio(e.num, e.den, true)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", e.label, srv.value(), srv.roundsText(), cli.value(), cli.roundsText())
	}

	phases := h.comparePhases()
	b.WriteString("\n### Raw figures (median over rounds)\n\n")
	b.WriteString("msgs/s counts messages with the expected verdict (accepted, or rejected as duplicate in a storm) answered\n" +
		"inside the measured window. Latency is per push (Regina, ceiling) or per message publish→ack (JetStream).\n" +
		"CPU is in cores over the measured window, read from /proc: the broker process; PostgreSQL backends serving\n" +
		"this run's database (\"PG ours\") and the whole cluster including its background writers and other users\n" +
		"(\"PG all\"); nats-server; the load generator (this program: HTTP client, pgx driver or NATS client); the\n" +
		"whole machine (busy, of " + strconv.Itoa(h.info.Machine.NProc) + ").\n\n")
	b.WriteString("| phase | what | msgs/s | min–max | p50 ms | p99 ms | broker | PG ours | PG all | NATS | load gen | machine | broker RSS MiB | wrong verdicts | errors |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	sums := map[string]phaseSummary{}
	for _, p := range phases {
		s := summarize(h.byName(p.name, ""))
		sums[p.name] = s
		if s.n == 0 {
			fmt.Fprintf(&b, "| %s | %s | not measured | | | | | | | | | | | | |\n", p.name, p.what)
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | **%s** | %s–%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %d |\n",
			p.name, p.what, fmtRate(s.rate), fmtRate(s.lo), fmtRate(s.hi), fmtMs(s.p50), fmtMs(s.p99),
			fmtCores(s.broker), fmtCores(s.pgOurs), fmtCores(s.pgAll), fmtCores(s.nats), fmtCores(s.loadgen), fmtCores(s.machine),
			fmtOptUs(s.rss), s.anomalies, s.errors)
	}
	for _, p := range phases {
		if s := sums[p.name]; s.errSample != "" {
			fmt.Fprintf(&b, "\nFirst error in %s: `%s`\n", p.name, strings.ReplaceAll(s.errSample, "`", "'"))
		}
	}

	b.WriteString("\n### CPU per message (µs of CPU per message with the expected verdict, median over rounds)\n\n")
	b.WriteString("| phase | broker | PG ours | NATS | load gen | whole machine |\n|---|---|---|---|---|---|\n")
	for _, p := range phases {
		s := sums[p.name]
		if s.n == 0 {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", p.name, fmtOptUs(s.brokerUs), fmtOptUs(s.pgUs), fmtOptUs(s.natsUs), fmtOptUs(s.loadgenUs), fmtOptUs(s.machineUs))
	}

	b.WriteString("\n### What limits Regina in this run\n\n")
	b.WriteString(h.limitsText(sums))

	b.WriteString("\n### Every phase\n\nPhases where more than 1% of the ops failed are marked and left out of every median and ratio. The cache column is the broker's `/metrics` dedupCache over the phase: watermark hits / full-window probes /\nevictions / hydrations finished of started, then the hashes it held at the end.\n\n")
	b.WriteString("| round | phase | msgs/s | p50 ms | p99 ms | broker | PG ours | PG all | NATS | load gen | machine | steal | broker RSS MiB | cache | wrong | errors |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range h.results {
		fmt.Fprintf(&b, "| %d | %s%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %d |\n",
			r.Round+1, r.Name, invalidNote(r), fmtRate(r.MsgsPerSec), fmtMs(r.P50), fmtMs(r.P99),
			fmtCores(r.CPU.Broker), fmtCores(r.CPU.PGOurs), fmtCores(r.CPU.PGAll), fmtCores(r.CPU.NATS), fmtCores(r.CPU.LoadGen),
			fmtCores(r.CPU.Machine), fmtCores(r.CPU.Steal), fmtOptUs(r.RSSMaxMiB), r.Cache.short(), r.Anomalies, r.Errors)
	}

	if err := replaceSection(h.outPath(), "compare", b.String()); err != nil {
		return "", err
	}
	if err := h.writeJSON(); err != nil {
		return "", err
	}
	summary := fmt.Sprintf("compare: regina/jetstream=%s regina/ceiling=%s dedup_on/off=%s dup/new=%s report/off=%s "+
		"regina/jetstream_sync=%s regina/jetstream_sync_100=%s regina/jetstream_100=%s regina/river=%s regina/river_storm=%s cpu_us/msg_1=%s cpu_us/msg_10=%s",
		bars[0].value(), bars[1].value(), bars[2].value(), bars[3].value(), bars[4].value(),
		bars[5].value(), bars[6].value(), bars[7].value(), bars[8].value(), bars[9].value(), cpuBars[0].value(), cpuBars[1].value())
	if h.queen != nil {
		summary += " regina/queen=" + queen.value()
	}
	if consumeKeys != "" {
		summary += " " + consumeKeys
	}
	return summary, nil
}

// natsWhat says how block C's or S's server acknowledges.
func (h *harness) natsWhat(mode natsMode) string {
	if mode == natsDefault && h.cfg.natsURL != "" {
		return "the server at -nats-url " + h.cfg.natsURL + ", its own durability settings"
	}
	return "nats-server " + NATSPinnedVersion + " " + mode.durability()
}

// cpuBar is a bar on CPU per message: the median over rounds of (broker +
// this run's backends) cores / msgs/s, in µs, at most bar.
type cpuBar struct {
	key, label string
	bar        float64
	rounds     []float64
	med        float64
	ok         bool
}

// cpuBarOf computes phase's CPU per message, round by round.
func (h *harness) cpuBarOf(key, label, phase string, bar float64) cpuBar {
	r := cpuBar{key: key, label: label, bar: bar}
	rs := h.byName(phase, "")
	for round := range h.cfg.rounds {
		if x, ok := rs[round]; ok {
			if v := cpuPerMessage(x); v != nil {
				r.rounds = append(r.rounds, *v)
			}
		}
	}
	if len(r.rounds) > 0 {
		r.med, r.ok = median(r.rounds), true
	}
	return r
}

// cpuPerMessage is (broker + PG ours) CPU µs per message of r, nil when
// either is unknown.
func cpuPerMessage(r *PhaseResult) *float64 {
	if r.CPU.Broker == nil || r.CPU.PGOurs == nil || r.MsgsPerSec <= 0 {
		return nil
	}
	v := (*r.CPU.Broker + *r.CPU.PGOurs) / r.MsgsPerSec * 1e6
	return &v
}

func (r cpuBar) value() string {
	if !r.ok {
		return "n/a"
	}
	return strconv.FormatFloat(r.med, 'f', 0, 64)
}

func (r cpuBar) roundsText() string {
	var s []string
	for _, v := range r.rounds {
		s = append(s, strconv.FormatFloat(v, 'f', 1, 64))
	}
	return strings.Join(s, " / ")
}

func (r cpuBar) verdict() string {
	switch {
	case !r.ok:
		return "not measured"
	case r.med <= r.bar:
		return fmt.Sprintf("**met** (%.0f%% under the bar)", (1-r.med/r.bar)*100)
	default:
		return fmt.Sprintf("**missed** by %.0f%% (%.1f µs over %g)", (r.med/r.bar-1)*100, r.med-r.bar, r.bar)
	}
}

// limitsText says, from the CPU figures, where the time went.
func (h *harness) limitsText(sums map[string]phaseSummary) string {
	var b strings.Builder
	nproc := float64(h.info.Machine.NProc)
	on, ceil, nats := sums[phReginaOn], sums[phCeiling], sums[phNATS]
	if on.n == 0 {
		return "Regina was not measured.\n"
	}
	if on.machine != nil {
		fmt.Fprintf(&b, "- During `regina_on` the machine was %.0f%% busy (%.2f of %.0f cores).", *on.machine/nproc*100, *on.machine, nproc)
		parts := []string{}
		if on.broker != nil {
			parts = append(parts, fmt.Sprintf("the broker %.2f", *on.broker))
		}
		if on.pgOurs != nil {
			parts = append(parts, fmt.Sprintf("PostgreSQL backends of this run %.2f", *on.pgOurs))
		}
		if on.pgAll != nil && on.pgOurs != nil {
			parts = append(parts, fmt.Sprintf("the rest of PostgreSQL (WAL writer, checkpointer, other users) %.2f", *on.pgAll-*on.pgOurs))
		}
		if on.loadgen != nil {
			parts = append(parts, fmt.Sprintf("the load generator %.2f", *on.loadgen))
		}
		if on.pgAll != nil && on.broker != nil && on.loadgen != nil {
			parts = append(parts, fmt.Sprintf("everything else on the machine %.2f", max(*on.machine-*on.pgAll-*on.broker-*on.loadgen, 0)))
		}
		if len(parts) > 0 {
			fmt.Fprintf(&b, " Of that: %s.", strings.Join(parts, ", "))
		}
		if on.pgAll != nil && on.broker != nil && on.loadgen != nil {
			if other := *on.machine - *on.pgOurs - *on.broker - *on.loadgen; other > 0.3 {
				fmt.Fprintf(&b, " **%.2f cores went to work that is not this run's**: the throughput ratios carry that noise; the CPU-normalised ratios above are steadier.", other)
			}
		}
		if *on.machine >= 0.85*nproc {
			b.WriteString(" The machine was CPU-saturated, so the rate is set by CPU per message (below), not by waiting.")
		} else {
			b.WriteString(" The machine had idle CPU, so part of the limit is latency (round trips, commit flushes, lock waits), not CPU.")
		}
		b.WriteString("\n")
	}
	if on.brokerUs != nil && on.pgUs != nil {
		fmt.Fprintf(&b, "- Per message, Regina costs %.1f µs of broker CPU and %.1f µs of PostgreSQL backend CPU", *on.brokerUs, *on.pgUs)
		if ceil.pgUs != nil {
			fmt.Fprintf(&b, " (the ceiling's backends: %.1f µs; its driver: %s µs)", *ceil.pgUs, fmtOptUs(ceil.loadgenUs))
		}
		if on.loadgenUs != nil {
			fmt.Fprintf(&b, "; the HTTP load generator adds %.1f µs", *on.loadgenUs)
		}
		b.WriteString(".")
		if *on.brokerUs > *on.pgUs {
			b.WriteString(" **The broker process spends more CPU per message than PostgreSQL does**: on a 2-core box that CPU comes out of PostgreSQL's share, which is the main reason Regina stays below the ceiling.")
		} else {
			b.WriteString(" PostgreSQL spends more CPU per message than the broker: the push transaction itself dominates.")
		}
		b.WriteString("\n")
	}
	if st, so, cs := sums[phReginaOnStorm], sums[phReginaOffStorm], sums[phCeilingStorm]; st.pgUs != nil {
		fmt.Fprintf(&b, "- A rejected duplicate costs PostgreSQL %.1f µs per message through Regina with the cache on", *st.pgUs)
		if so.pgUs != nil {
			fmt.Fprintf(&b, ", %.1f µs with the cache off", *so.pgUs)
		}
		if cs.pgUs != nil {
			fmt.Fprintf(&b, ", %.1f µs through the ceiling (full-window GIN probe; nothing written, commit without a flush wait)", *cs.pgUs)
		}
		if on.pgUs != nil {
			fmt.Fprintf(&b, "; an accepted message costs it %.1f µs", *on.pgUs)
		}
		b.WriteString(".\n")
	}
	if nats.n > 0 && nats.natsUs != nil {
		fmt.Fprintf(&b, "- JetStream (block C, %s): nats-server %.1f µs and its client %s µs of CPU per message, while every Regina and ceiling commit waits for a WAL flush.\n",
			h.natsWhat(natsDefault), *nats.natsUs, fmtOptUs(nats.loadgenUs))
	}
	if ceil.n > 0 && on.n > 0 {
		fmt.Fprintf(&b, "- p99 push latency: Regina %s ms, ceiling %s ms (pushes of %d messages).\n", fmtMs(on.p99), fmtMs(ceil.p99), h.cfg.items)
	}
	return b.String()
}

func (h *harness) writeJSON() error {
	if h.cfg.jsonOut == "" {
		return nil
	}
	b, err := json.MarshalIndent(map[string]any{"info": h.info, "results": h.results}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(h.cfg.jsonOut, append(b, '\n'), 0o644)
}

// ownCores is the CPU of the phase's own processes: broker, our PostgreSQL
// backends, nats-server, and with client the load generator. nil when a
// needed figure is unknown.
func ownCores(r *PhaseResult, withClient bool) *float64 {
	c := r.CPU
	if c.PGOurs == nil {
		return nil
	}
	v := *c.PGOurs
	if c.Broker != nil {
		v += *c.Broker
	}
	if c.NATS != nil {
		v += *c.NATS
	}
	if withClient {
		if c.LoadGen == nil {
			return nil
		}
		v += *c.LoadGen
	}
	return &v
}

// effRatio is the per-round ratio of msgs/s per own core.
func (h *harness) effRatio(num, den string, withClient bool) ratio {
	r := ratio{num: num, den: den}
	a, b := h.byName(num, ""), h.byName(den, "")
	for round := range h.cfg.rounds {
		x, okx := a[round]
		y, oky := b[round]
		if !okx || !oky {
			continue
		}
		cx, cy := ownCores(x, withClient), ownCores(y, withClient)
		if cx == nil || cy == nil || *cx <= 0 || *cy <= 0 || y.MsgsPerSec <= 0 {
			continue
		}
		r.rounds = append(r.rounds, (x.MsgsPerSec / *cx)/(y.MsgsPerSec / *cy))
	}
	if len(r.rounds) > 0 {
		r.med, r.ok = median(r.rounds), true
	}
	return r
}

// short is the cache column of the phase tables.
func (c *cacheStats) short() string {
	if c == nil {
		return "-"
	}
	return fmt.Sprintf("%d / %d / %d / %d of %d, %s", c.Hits, c.Sentinels, c.Evictions, c.Hydrations.Finished, c.Hydrations.Started, shortCount(int(c.Hashes)))
}

// pgSettingsText is the header's account of the server's settings: those
// Regina relies on that differ from PostgreSQL's defaults, as found.
func pgSettingsText(nondefault string) string {
	if nondefault == "" {
		return "default settings as found"
	}
	return "settings as found: " + nondefault
}
