package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const mod = "github.com/regina-mq/regina/"

// stream is a go test -json run of two packages: one passes (a skipped test,
// a subtest), one fails a test and leaves another running (a timeout).
var stream = strings.Join([]string{
	`{"Action":"start","Package":"github.com/regina-mq/regina/wire"}`,
	`{"Action":"run","Package":"github.com/regina-mq/regina/wire","Test":"TestA"}`,
	`{"Action":"run","Package":"github.com/regina-mq/regina/wire","Test":"TestA/sub"}`,
	`{"Action":"output","Package":"github.com/regina-mq/regina/wire","Test":"TestA/sub","Output":"quiet success\n"}`,
	`{"Action":"pass","Package":"github.com/regina-mq/regina/wire","Test":"TestA/sub","Elapsed":0.1}`,
	`{"Action":"pass","Package":"github.com/regina-mq/regina/wire","Test":"TestA","Elapsed":0.2}`,
	`{"Action":"run","Package":"github.com/regina-mq/regina/wire","Test":"TestB"}`,
	`{"Action":"skip","Package":"github.com/regina-mq/regina/wire","Test":"TestB","Elapsed":0}`,
	`{"Action":"pass","Package":"github.com/regina-mq/regina/wire","Elapsed":1.5}`,
	`{"Action":"output","Package":"github.com/regina-mq/regina/metrics","Output":"ok  \tmetrics\t0.01s [no tests to run]\n"}`,
	`{"Action":"pass","Package":"github.com/regina-mq/regina/metrics","Elapsed":0.01}`,
	`{"Action":"run","Package":"github.com/regina-mq/regina/sqlstore","Test":"TestC"}`,
	`{"Action":"output","Package":"github.com/regina-mq/regina/sqlstore","Test":"TestC","Output":"    c_test.go:9: want 1, got 2\n"}`,
	`{"Action":"fail","Package":"github.com/regina-mq/regina/sqlstore","Test":"TestC","Elapsed":3.25}`,
	`{"Action":"run","Package":"github.com/regina-mq/regina/sqlstore","Test":"TestD"}`,
	`{"Action":"output","Package":"github.com/regina-mq/regina/sqlstore","Test":"TestD","Output":"    d_test.go:3: waiting\n"}`,
	`{"Action":"output","Package":"github.com/regina-mq/regina/sqlstore","Test":"TestE","Output":"panic: test timed out after 15m0s\n"}`,
	`{"Action":"output","Package":"github.com/regina-mq/regina/sqlstore","Test":"TestE","Output":"goroutine 7 [running]:\n"}`,
	`{"Action":"pass","Package":"github.com/regina-mq/regina/sqlstore","Test":"TestE","Elapsed":1}`,
	`{"Action":"fail","Package":"github.com/regina-mq/regina/sqlstore","Elapsed":900}`,
	`{"Action":"skip","Package":"github.com/regina-mq/regina/bench","Output":"?   \tbench\t[no test files]\n"}`,
}, "\n") + "\n"

func TestSummaryCountsAndShowsFailures(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	code := run(strings.NewReader(stream), &out, options{name: "make test", module: mod, slowest: 2, progress: time.Hour})
	require.Equal(t, 1, code, "a failure is exit 1")
	got := out.String()
	lines := strings.Split(strings.TrimSpace(got), "\n")
	require.Regexp(t, `^make test: 2 packages, 5 tests: 3 passed, 1 failed, 1 skipped; \d+\.\d s$`, lines[len(lines)-1])
	require.Contains(t, got, "ok    wire")
	require.Contains(t, got, "FAIL  sqlstore")
	require.Contains(t, got, "--- FAIL sqlstore TestC (3.2s)\n    c_test.go:9: want 1, got 2\n", "a failed test's output is shown")
	require.Contains(t, got, "panic: test timed out after 15m0s\ngoroutine 7 [running]:\n",
		"a panic is shown with what follows, even when go test gives it to a test that then passes")
	require.Contains(t, got, "TestD was still running: its output follows\n    d_test.go:3: waiting\n")
	require.NotContains(t, got, "quiet success", "a passing test's output is not")
	require.Contains(t, got, "slow  sqlstore TestC")
	require.Equal(t, 2, strings.Count(got, "slow  "))
}

func TestSummaryPassesOnSuccess(t *testing.T) {
	t.Parallel()
	ok := stream[:strings.Index(stream, `{"Action":"run","Package":"github.com/regina-mq/regina/sqlstore"`)]
	var out bytes.Buffer
	require.Zero(t, run(strings.NewReader(ok), &out, options{name: "make test", module: mod, slowest: 5, progress: time.Hour}), out.String())
	require.Regexp(t, `make test: 1 packages, 3 tests: 2 passed, 0 failed, 1 skipped; \d+\.\d s\n$`, out.String())
	require.NotContains(t, out.String(), "metrics", "a package that ran no test is not listed")
}

func TestSummaryBuildFailure(t *testing.T) {
	t.Parallel()
	in := `{"ImportPath":"github.com/regina-mq/regina/wire","Action":"build-output","Output":"wire/push.go:3:1: syntax error\n"}
{"ImportPath":"github.com/regina-mq/regina/wire","Action":"build-fail"}
{"Action":"start","Package":"github.com/regina-mq/regina/wire"}
{"Action":"output","Package":"github.com/regina-mq/regina/wire","Output":"FAIL\tgithub.com/regina-mq/regina/wire [build failed]\n"}
{"Action":"fail","Package":"github.com/regina-mq/regina/wire","Elapsed":0,"FailedBuild":"github.com/regina-mq/regina/wire"}
`
	var out bytes.Buffer
	require.Equal(t, 1, run(strings.NewReader(in), &out, options{name: "make test", module: mod, slowest: 5, progress: time.Hour}))
	require.Contains(t, out.String(), "wire/push.go:3:1: syntax error")
	require.Contains(t, out.String(), "FAIL  wire")
}

func TestSummaryVerbose(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	run(strings.NewReader(stream), &out, options{name: "make test", module: mod, progress: time.Hour, verbose: true})
	require.Contains(t, out.String(), "quiet success", "-v shows a passing test's output")
	require.Equal(t, 1, strings.Count(out.String(), "want 1, got 2"), "and a failure's once")
}
