// Command testsum turns `go test -json` (on stdin) into what a person running
// make test needs: a line per package as it finishes ("ok  cmd/regina 52.3s
// 134 tests"), a line naming what is still running after a silence, the whole
// output of every failed test (and of a package that failed outside its tests:
// a build error, a panic, a timeout, leaked goroutines), the slowest tests,
// and one summary line at the end:
//
//	make test: 21 packages, 869 tests: 860 passed, 0 failed, 9 skipped; 84.2 s
//
// It exits 1 when anything failed. -json FILE keeps the raw stream (per-test
// timings for a closer look). The Makefile builds it into bin/ and pipes every
// test target through it.
package main
