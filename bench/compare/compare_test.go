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
