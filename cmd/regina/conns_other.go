//go:build !unix

package main

// openFileLimit is unknown off Unix: maxConnections falls back to its
// default.
func openFileLimit() uint64 { return 0 }
