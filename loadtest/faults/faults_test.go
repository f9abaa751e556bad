package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

var lastLineRE = regexp.MustCompile(`^faults: verdict=(clean|violations|error) requests=(\d+) retries=(\d+) faults=(\d+) violations=(\d+)$`)

// syncBuffer is a bytes.Buffer safe for the harness's concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func lastLine(out string) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	return lines[len(lines)-1]
}

// TestLong_FaultsShort runs the whole harness in short mode: its own PostgreSQL,
// real brokers, every fault kind, then the checker. It must end clean.
func TestLong_FaultsShort(t *testing.T) {
	ctx, cancel := harnessContext(t)
	defer cancel()
	o, err := parseFlags([]string{"-short"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := runClean(ctx, t, o)
	for _, kind := range []string{"kill9: SIGKILL", "two-brokers: broker B", "pg-restart: pg_ctl restart", "conn-drop:", "slow-db:"} {
		if !strings.Contains(out, kind) {
			t.Errorf("the short run did not exercise %q", kind)
		}
	}
}

// harnessContext skips when the harness cannot run here and bounds it by the
// test's deadline.
func harnessContext(t *testing.T) (context.Context, context.CancelFunc) {
	t.Helper()
	if testing.Short() {
		t.Skip("faults: skipped with -short (the harness starts PostgreSQL and brokers and runs ~30s); run go test ./loadtest/faults or make faults")
	}
	if _, err := FindPGBin(); err != nil {
		t.Skipf("faults: %v; install PostgreSQL (Debian: apt-get install postgresql) to run the fault-injection harness", err)
	}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			t.Skip("faults: running as root needs a 'postgres' system user to own the throwaway cluster (initdb refuses root)")
		}
	}
	if dl, ok := t.Deadline(); ok {
		return context.WithDeadline(context.Background(), dl.Add(-30*time.Second))
	}
	return context.WithTimeout(context.Background(), 12*time.Minute)
}

// runClean runs the harness and fails the test unless the verdict is clean
// with requests sent and faults injected. It returns the output.
func runClean(ctx context.Context, t *testing.T, o options) (string, []string) {
	t.Helper()
	var out syncBuffer
	code := run(ctx, o, &out)
	t.Logf("harness output:\n%s", out.String())
	last := lastLine(out.String())
	m := lastLineRE.FindStringSubmatch(last)
	if m == nil {
		t.Fatalf("last line %q is not a verdict line", last)
	}
	if code != 0 || m[1] != "clean" || m[5] != "0" {
		t.Fatalf("harness verdict: %q (exit %d); see the output above", last, code)
	}
	if m[2] == "0" || m[4] == "0" {
		t.Fatalf("harness sent no request or injected no fault: %q", last)
	}
	return out.String(), m
}

// TestLong_FailoverShort runs the failover scenario in short mode: a primary and
// a synchronous standby, brokers on a multi-host URL, the primary killed
// and the standby promoted (twice, the second time with the standby held
// behind). It must end clean with at least one promotion.
func TestLong_FailoverShort(t *testing.T) {
	ctx, cancel := harnessContext(t)
	defer cancel()
	o, err := parseFlags([]string{"-short", "-scenario", "failover"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := runClean(ctx, t, o)
	if !regexp.MustCompile(`failover: kill -9 primary n0 .* promoted n1`).MatchString(out) {
		t.Errorf("no promotion in the output")
	}
	if !strings.Contains(out, "synchronous standby") {
		t.Errorf("the run did not say its standby was synchronous")
	}
}

// TestLong_StreamsShort runs the streams scenario in short mode: a stream query
// (pop, state, cycle with sink pushes and ack) beside the push load while
// brokers are killed and frozen; the checker proves every source message
// reached the state and the sink exactly once.
func TestLong_StreamsShort(t *testing.T) {
	ctx, cancel := harnessContext(t)
	defer cancel()
	o, err := parseFlags([]string{"-short", "-scenario", "streams"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := runClean(ctx, t, o)
	if !regexp.MustCompile(`streams: checked [1-9]\d* source messages in 4 partitions against state and sink`).MatchString(out) {
		t.Errorf("the streams checker did not run over stored messages")
	}
	if !regexp.MustCompile(`streams: \d+ source messages pushed; [1-9]\d* cycles committed`).MatchString(out) {
		t.Errorf("no cycle committed")
	}
	if !strings.Contains(out, "kill9: SIGKILL") {
		t.Errorf("no broker was killed")
	}
}

// TestLong_SoakShort runs the soak scenario in short mode (~30 s of load):
// producers with retries and storms, consumers in groups (new ones racing
// for their first pop), retention every second on a 20 s window, a broker
// restart every 8 s. The checker, in its retention mode, must end clean; the
// flatness verdict and the plot are printed (30 s is too short to judge
// flatness on a shared machine, so only the long run enforces it).
func TestLong_SoakShort(t *testing.T) {
	ctx, cancel := harnessContext(t)
	defer cancel()
	png := filepath.Join(t.TempDir(), "soak.png")
	o, err := parseFlags([]string{"-short", "-scenario", "soak", "-png", png}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := runClean(ctx, t, o)
	for _, want := range []string{"soak: broker A stopped with SIGTERM", "soak: broker B killed with SIGKILL",
		"soak: verdict=", "soak: rss A", "soak: plot written to"} {
		if !strings.Contains(out, want) {
			t.Errorf("the short soak did not print %q", want)
		}
	}
	m := regexp.MustCompile(`soak: verdict=.* popped=(\d+) acked=(\d+) restarts=(\d+) groups=(\d+)`).FindStringSubmatch(out)
	if m == nil || m[1] == "0" || m[2] == "0" || m[4] == "0" {
		t.Errorf("the consumers received or acknowledged nothing, or no group rotated: %v", m)
	}
	if fi, err := os.Stat(png); err != nil || fi.Size() == 0 {
		t.Errorf("no plot: %v", err)
	}
}

// A run that cannot start still ends with a verdict line (verdict=error) and
// a non-zero status.
func TestVerdictLineOnSetupError(t *testing.T) {
	var out syncBuffer
	o, err := parseFlags([]string{"-duration", "5s", "-repo", t.TempDir()}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	code := run(context.Background(), o, &out)
	if code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	last := lastLine(out.String())
	if last != "faults: verdict=error requests=0 retries=0 faults=0 violations=0" {
		t.Errorf("last line %q", last)
	}
	if !strings.Contains(out.String(), "ERROR: no go.mod of github.com/regina-mq/regina") {
		t.Errorf("output does not say why:\n%s", out.String())
	}
}

func TestParseFlags(t *testing.T) {
	var errOut bytes.Buffer
	o, err := parseFlags([]string{"-short"}, &errOut)
	if err != nil || o.duration != 14*time.Second || !o.short {
		t.Errorf("-short: %+v %v", o, err)
	}
	o, err = parseFlags([]string{"-short", "-duration", "20s"}, &errOut)
	if err != nil || o.duration != 20*time.Second {
		t.Errorf("-short -duration 20s: %+v %v", o, err)
	}
	o, err = parseFlags(nil, &errOut)
	if err != nil || o.duration != 60*time.Second || o.short {
		t.Errorf("defaults: %+v %v", o, err)
	}
	if _, err := parseFlags([]string{"-duration", "1s"}, &errOut); err == nil {
		t.Error("-duration 1s accepted")
	}
	if _, err := parseFlags([]string{"extra"}, &errOut); err == nil {
		t.Error("a positional argument accepted")
	}
	o, err = parseFlags([]string{"-faults", "kill9, slow-db", "-twins", "0.5"}, &errOut)
	if err != nil || len(o.kinds) != 2 || o.kinds[1] != "slow-db" || o.twinProb != 0.5 || o.stormProb != 0.15 {
		t.Errorf("-faults kill9,slow-db -twins 0.5: %+v %v", o, err)
	}
	if _, err := parseFlags([]string{"-faults", "meteor"}, &errOut); err == nil {
		t.Error("an unknown fault kind accepted")
	}
	o, err = parseFlags([]string{"-scenario", "failover-async", "-standby-lag", "2s"}, &errOut)
	if err != nil || o.scenario != scenarioFailoverAsync || o.standbyLag != 2*time.Second {
		t.Errorf("-scenario failover-async -standby-lag 2s: %+v %v", o, err)
	}
	o, err = parseFlags([]string{"-scenario", "streams"}, &errOut)
	if err != nil || o.scenario != scenarioStreams || len(o.kinds) != 2 || o.kinds[0] != "kill9" || o.kinds[1] != "two-brokers" {
		t.Errorf("-scenario streams: %+v %v", o, err)
	}
	if _, err := parseFlags([]string{"-scenario", "meteor"}, &errOut); err == nil {
		t.Error("an unknown scenario accepted")
	}
	if _, err := parseFlags([]string{"-scenario", "failover", "-faults", "kill9"}, &errOut); err == nil {
		t.Error("-faults accepted with the failover scenario")
	}
}
