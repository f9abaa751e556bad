// Package scripts holds the repository's shell scripts (ensure-postgres.sh,
// which every make target that needs PostgreSQL runs) and the Go tests that
// run them. It has no Go code of its own.
package scripts
