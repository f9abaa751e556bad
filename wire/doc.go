// Package wire is Regina's HTTP front end: the Queen MQ HTTP API on fasthttp.
// It routes requests, decodes and validates JSON (push payloads are kept as
// the raw bytes received, never re-encoded), splits pushes by (queue,
// partition) into actor groups, and writes responses and error bodies
// ({"error": "..."} with the right status).
//
// It depends on package actor (and partition for domain types) only; nothing
// imports wire but cmd/regina.
package wire
