package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// event is one line of go test -json (cmd/test2json), build events included.
type event struct {
	Action     string  `json:"Action"`
	Package    string  `json:"Package"`
	Test       string  `json:"Test"`
	Elapsed    float64 `json:"Elapsed"`
	Output     string  `json:"Output"`
	ImportPath string  `json:"ImportPath"`
}

// summary is the state of a run: counts, the output of each test still
// running (printed if it fails), and the packages still running.
type summary struct {
	out                     io.Writer
	module                  string
	verbose                 bool // print every output line as it comes (go test -v)
	packages, pkgFailed     int
	passed, failed, skipped int
	running                 map[string]map[string]bool // package -> tests started, not ended
	done                    map[string]int             // package -> tests ended
	buf                     map[[2]string][]string     // (package, test) -> output lines
	// panicking are the packages whose test binary panicked (a test's
	// panic, the -timeout one): from the panic on, their output is printed
	// as it comes, whichever test go test attributes it to.
	panicking map[string]bool
	slow      []timing
}

type timing struct {
	name    string
	elapsed float64
}

func newSummary(out io.Writer, module string) *summary {
	return &summary{out: out, module: module, running: map[string]map[string]bool{}, done: map[string]int{},
		buf: map[[2]string][]string{}, panicking: map[string]bool{}}
}

// short is a package's import path without the module's prefix.
func (s *summary) short(pkg string) string {
	if p := strings.TrimPrefix(pkg, s.module); p != pkg && p != "" {
		return p
	}
	return pkg
}

// failed reports whether anything failed.
func (s *summary) anyFailed() bool { return s.failed > 0 || s.pkgFailed > 0 }

// add takes one event.
func (s *summary) add(e event) {
	switch e.Action {
	case "build-output":
		// Compiler errors: shown at once, they are the failure.
		fmt.Fprint(s.out, e.Output)
		return
	case "build-fail":
		return
	}
	key := [2]string{e.Package, e.Test}
	if e.Action == "output" && strings.HasPrefix(e.Output, "panic: ") && !s.panicking[e.Package] {
		s.panicking[e.Package] = true
		fmt.Fprintf(s.out, "--- PANIC %s (in or after %s)\n", s.short(e.Package), e.Test)
	}
	if e.Action == "output" && (s.verbose || s.panicking[e.Package]) {
		fmt.Fprint(s.out, e.Output)
		return
	}
	if e.Test == "" {
		s.addPackage(e, key)
		return
	}
	switch e.Action {
	case "run":
		if s.running[e.Package] == nil {
			s.running[e.Package] = map[string]bool{}
		}
		s.running[e.Package][e.Test] = true
	case "output":
		s.buf[key] = append(s.buf[key], e.Output)
	case "pass", "fail", "skip":
		delete(s.running[e.Package], e.Test)
		s.done[e.Package]++
		switch e.Action {
		case "pass":
			s.passed++
		case "skip":
			s.skipped++
		case "fail":
			s.failed++
			fmt.Fprintf(s.out, "--- FAIL %s %s (%.1fs)\n", s.short(e.Package), e.Test, e.Elapsed)
			for _, l := range s.buf[key] {
				fmt.Fprint(s.out, l)
			}
		}
		if !strings.Contains(e.Test, "/") {
			s.slow = append(s.slow, timing{s.short(e.Package) + " " + e.Test, e.Elapsed})
		}
		delete(s.buf, key)
	}
}

// addPackage takes an event of the package itself (no test).
func (s *summary) addPackage(e event, key [2]string) {
	switch e.Action {
	case "output":
		s.buf[key] = append(s.buf[key], e.Output)
	case "pass", "fail":
		tests := s.done[e.Package]
		switch {
		case e.Action == "pass" && tests == 0:
			// No test selected here (make test/long, -run): not counted.
		case e.Action == "pass":
			s.packages++
			fmt.Fprintf(s.out, "ok    %-28s %6.1fs  %d tests\n", s.short(e.Package), e.Elapsed, tests)
		default:
			s.packages++
			s.pkgFailed++
			fmt.Fprintf(s.out, "FAIL  %-28s %6.1fs  %d tests\n", s.short(e.Package), e.Elapsed, tests)
			// What the package printed outside any test: a panic, a
			// timeout, a TestMain failure, leaked goroutines.
			for _, l := range s.buf[key] {
				if !strings.HasPrefix(l, "FAIL") && !strings.HasPrefix(l, "ok ") {
					fmt.Fprint(s.out, l)
				}
			}
			for name := range s.running[e.Package] {
				fmt.Fprintf(s.out, "      %s was still running: its output follows\n", name)
				for _, l := range s.buf[[2]string{e.Package, name}] {
					fmt.Fprint(s.out, l)
				}
			}
		}
		delete(s.running, e.Package)
		delete(s.buf, key)
	case "skip": // no test files
		delete(s.buf, key)
	}
}

// progress is a line naming the packages still running, for the long
// silences of a big package.
func (s *summary) progress(elapsed time.Duration) string {
	var parts []string
	for pkg, tests := range s.running {
		if len(tests) > 0 || s.done[pkg] > 0 {
			parts = append(parts, fmt.Sprintf("%s (%d done, %d running)", s.short(pkg), s.done[pkg], len(tests)))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	sort.Strings(parts)
	return fmt.Sprintf("..    %.0fs: %s", elapsed.Seconds(), strings.Join(parts, ", "))
}

// line is the summary line.
func (s *summary) line(name string, elapsed time.Duration) string {
	return fmt.Sprintf("%s: %d packages, %d tests: %d passed, %d failed, %d skipped; %.1f s",
		name, s.packages, s.passed+s.failed+s.skipped, s.passed, s.failed, s.skipped, elapsed.Seconds())
}

// slowest are the n slowest top-level tests.
func (s *summary) slowest(n int) []timing {
	sort.Slice(s.slow, func(i, j int) bool { return s.slow[i].elapsed > s.slow[j].elapsed })
	return s.slow[:min(n, len(s.slow))]
}

func main() {
	name := flag.String("name", "tests", "what the summary line calls the run")
	module := flag.String("module", "github.com/regina-mq/regina/", "prefix dropped from package paths")
	keep := flag.String("json", "", "also write the go test -json stream to this file")
	nslow := flag.Int("slowest", 5, "list this many slowest tests before the summary (0: none)")
	every := flag.Duration("progress", 20*time.Second, "print what is still running after this long without a line")
	verbose := flag.Bool("v", false, "print every test's output as it comes, as go test -v does")
	flag.Parse()
	os.Exit(run(os.Stdin, os.Stdout, options{name: *name, module: *module, keep: *keep, slowest: *nslow,
		progress: *every, verbose: *verbose}))
}

// options are run's settings (the flags).
type options struct {
	name, module, keep string
	slowest            int
	progress           time.Duration
	verbose            bool
}

// run reads go test -json from in and writes the summary to out; the exit
// status is 1 when a test or package failed or the stream was not JSON.
func run(in io.Reader, out io.Writer, o options) int {
	start := time.Now()
	raw := io.Discard
	if o.keep != "" {
		f, err := os.Create(o.keep)
		if err != nil {
			fmt.Fprintln(out, "testsum:", err)
			return 1
		}
		defer f.Close()
		raw = f
	}
	s := newSummary(out, o.module)
	s.verbose = o.verbose
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	bad := 0
	tick := time.NewTicker(o.progress)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				for _, t := range s.slowest(o.slowest) {
					fmt.Fprintf(out, "slow  %-50s %6.1fs\n", t.name, t.elapsed)
				}
				fmt.Fprintln(out, s.line(o.name, time.Since(start)))
				if s.anyFailed() || bad > 0 {
					return 1
				}
				return 0
			}
			fmt.Fprintln(raw, l)
			var e event
			if err := json.Unmarshal([]byte(l), &e); err != nil || e.Action == "" {
				// Not an event (go vet, a command's own output): pass
				// it on.
				fmt.Fprintln(out, l)
				if strings.HasPrefix(l, "FAIL") || strings.Contains(l, "build failed") {
					bad++
				}
				last = time.Now()
				continue
			}
			before := s.packages + s.failed
			s.add(e)
			if s.packages+s.failed != before || e.Action == "build-output" {
				last = time.Now()
			}
		case <-tick.C:
			if time.Since(last) >= o.progress {
				if p := s.progress(time.Since(start)); p != "" {
					fmt.Fprintln(out, p)
					last = time.Now()
				}
			}
		}
	}
}
