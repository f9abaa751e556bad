package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWorkloadIsDeterministicAndValidJSON(t *testing.T) {
	a := newWorkload(16, 10, 200, 42)
	b := newWorkload(16, 10, 200, 42)
	for _, p := range a.payloads {
		if len(p) != 200 {
			t.Fatalf("payload of %d bytes, want 200", len(p))
		}
	}
	x := a.appendBody(nil, "q", "tag", 3, 77)
	y := b.appendBody(nil, "q", "tag", 3, 77)
	if !bytes.Equal(x, y) {
		t.Fatal("the same push built twice differs")
	}
	var body struct {
		Items []struct {
			Queue, Partition, TransactionID string
			Payload                         map[string]string
		}
	}
	if err := json.Unmarshal(x, &body); err != nil {
		t.Fatalf("push body is not JSON: %v\n%s", err, x)
	}
	if len(body.Items) != 10 {
		t.Fatalf("%d items, want 10", len(body.Items))
	}
	seen := map[string]bool{}
	for _, it := range body.Items {
		if it.Queue != "q" || it.Partition != "p"+itoa(a.part(3, 77)) || seen[it.TransactionID] {
			t.Fatalf("bad item %+v", it)
		}
		seen[it.TransactionID] = true
	}
	if a.part(3, 77) >= 16 {
		t.Fatal("partition out of range")
	}
}

func itoa(i int) string { return string(appendTx(nil, "", 0, 0, i)[len("-0-0-"):]) }

func TestReplaceSectionKeepsTheOtherSection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "R.md")
	if err := replaceSection(path, "scale", "scale one"); err != nil {
		t.Fatal(err)
	}
	if err := replaceSection(path, "compare", "compare one"); err != nil {
		t.Fatal(err)
	}
	if err := replaceSection(path, "compare", "compare two"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	s := string(b)
	if !strings.Contains(s, "compare two") || strings.Contains(s, "compare one") || !strings.Contains(s, "scale one") {
		t.Fatalf("unexpected file:\n%s", s)
	}
	if strings.Index(s, "compare two") > strings.Index(s, "scale one") {
		t.Fatalf("compare should come before scale:\n%s", s)
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"-database-url postgres://u:secret@h:5432/db": "-database-url postgres://u:***@h:5432/db",
		"postgres://u@h/db":                           "postgres://u@h/db",
		"host=h password=secret dbname=x":             "host=h password=*** dbname=x",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMedianAndQuantile(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Fatalf("median = %v", m)
	}
	if m := median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Fatalf("median = %v", m)
	}
	lat := []uint32{1000, 2000, 3000, 4000}
	if q := quantileMs(lat, 0.5); q != 2 {
		t.Fatalf("p50 = %v", q)
	}
	if v, err := parseInts("1,16,1k,10k,1M"); err != nil || len(v) != 5 || v[3] != 10000 || v[4] != 1000000 {
		t.Fatalf("parseInts = %v, %v", v, err)
	}
}

func TestBackendDatabase(t *testing.T) {
	for title, want := range map[string]string{
		"postgres: 15/main: postgres regina_compare 127.0.0.1(35966) idle": "regina_compare",
		"postgres: queen postgres [local] idle in transaction":             "postgres",
		"postgres: postgres queen 127.0.0.1(1) SELECT":                     "queen",
		"postgres: 15/main: autovacuum worker regina_compare":              "regina_compare",
		"postgres: 15/main: checkpointer":                                  "",
		"postgres: 15/main: logical replication launcher":                  "",
		"postgres: 15/main: autovacuum launcher":                           "",
		"/usr/lib/postgresql/15/bin/postgres -D /var/lib/postgresql":       "",
	} {
		if got := backendDatabase(title); got != want {
			t.Errorf("backendDatabase(%q) = %q, want %q", title, got, want)
		}
	}
}

// RESULTS.md says when the Queen block was not run, and puts a measured
// Queen side by side with Regina: its ratios, its rows in the tables, and
// regina/queen on the summary line.
func TestWriteCompareWithAndWithoutQueen(t *testing.T) {
	core := func(v float64) *float64 { return &v }
	results := func(withQueen bool) []*PhaseResult {
		rs := []*PhaseResult{
			{Name: phReginaOn, MsgsPerSec: 20000, Ops: 2000, Window: 10, CPU: CPU{Broker: core(0.4), PGOurs: core(1.2)}},
			{Name: phReginaOnStorm, MsgsPerSec: 40000, Ops: 4000, Window: 10},
			{Name: phNATS, MsgsPerSec: 40000, Ops: 40000, Window: 10},
			{Name: phNATSSync, MsgsPerSec: 4000, Ops: 4000, Window: 10},
			{Name: phRiver, MsgsPerSec: 10000, Ops: 1000, Window: 10},
			{Name: phRiverStorm, MsgsPerSec: 8000, Ops: 800, Window: 10},
			{Name: phRegina100, MsgsPerSec: 80000, Ops: 800, Window: 10},
			{Name: phNATS100, MsgsPerSec: 40000, Ops: 40000, Window: 10},
			{Name: phNATSSync100, MsgsPerSec: 4000, Ops: 4000, Window: 10},
			{Name: phReginaOne, MsgsPerSec: 5000, Ops: 5000, Window: 10, CPU: CPU{Broker: core(0.2), PGOurs: core(0.3)}},
		}
		if withQueen {
			rs = append(rs,
				&PhaseResult{Name: phQueen, MsgsPerSec: 8000, Ops: 800, Window: 10, CPU: CPU{Broker: core(0.9)}},
				&PhaseResult{Name: phQueenStorm, MsgsPerSec: 5000, Ops: 500, Window: 10})
		}
		return rs
	}
	for _, withQueen := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "RESULTS.md")
		h := &harness{
			cfg:     &config{rounds: 1, out: path, connections: 16, partitions: 16, items: 10, itemsLarge: 100, onePartitions: 1000},
			wl:      newWorkload(16, 10, 200, 42),
			info:    runInfo{Machine: Machine{NProc: 2}},
			results: results(withQueen),
		}
		if withQueen {
			h.info.PGSettings = "autovacuum=off (configuration file)"
			h.queen = &queenTarget{url: "http://127.0.0.1:6640", queue: "regina_cmp_x", server: "C++ Queen Server (libqueen) 1.0.0",
				where: "local pid 42", note: "dedupWindowSeconds 3600 was sent, but the configure answer does not echo it: the server ignores it"}
		}
		summary, err := h.writeCompare()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(path)
		doc := string(b)
		// The issue-27 keys, Regina over each peer and CPU per message
		// (broker + backends over msgs/s: 1.6 cores / 20k, 0.5 / 5k).
		for _, want := range []string{"regina/jetstream=0.50 ", "regina/jetstream_sync=5.00 ", "regina/jetstream_sync_100=20.00 ",
			"regina/jetstream_100=2.00 ", "regina/river=2.00 ", "regina/river_storm=5.00 ", "cpu_us/msg_1=100", "cpu_us/msg_10=80"} {
			if !strings.Contains(summary, want) {
				t.Errorf("summary %q lacks %q", summary, want)
			}
		}
		if !strings.Contains(doc, "| one message per push over 1000 partitions (block P) (`cpu_us/msg_1`) | **100** | 100.0 | ≤ 120 | **met**") ||
			!strings.Contains(doc, "(`cpu_us/msg_10`) | **80** | 80.0 | ≤ 45 | **missed**") {
			t.Errorf("RESULTS.md lacks the CPU bars:\n%s", doc)
		}
		if !withQueen {
			if !strings.Contains(doc, "default settings as found") {
				t.Fatalf("a server at PostgreSQL's defaults is said to be:\n%s", doc)
			}
			if !strings.Contains(doc, "Not measured: no Queen server was given") || strings.Contains(summary, "regina/queen") {
				t.Fatalf("a run without Queen must say so and keep the summary as it was:\n%s\n%s", summary, doc)
			}
			if !strings.Contains(doc, "| queen | the user's upstream Queen server (`QUEEN_URL`), same client and load as Regina: new messages | not measured |") {
				t.Fatalf("the Queen rows must say not measured:\n%s", doc)
			}
			continue
		}
		for _, want := range []string{
			"- Server: C++ Queen Server (libqueen) 1.0.0 at http://127.0.0.1:6640, local pid 42; queue `regina_cmp_x`",
			"does not echo it",
			"| Regina dedup on (cache on) / upstream Queen | 2.50 | 2.50 |",
			"| Regina storm (cache on) / upstream Queen storm | 8.00 | 8.00 |",
			"| queen | upstream Queen at http://127.0.0.1:6640, same client and load as Regina: new messages | **8.0k** |",
			"| queen_storm | retry storm: upstream Queen rejecting replayed pushes | **5.0k** |",
			"\"PG ours\" is unknown without `QUEEN_DATABASE`",
			"settings as found: autovacuum=off (configuration file));",
		} {
			if !strings.Contains(doc, want) {
				t.Errorf("RESULTS.md lacks %q", want)
			}
		}
		if !strings.HasSuffix(summary, " regina/queen=2.50") {
			t.Errorf("summary %q lacks regina/queen", summary)
		}
		if t.Failed() {
			t.Log(doc)
		}
	}
}
