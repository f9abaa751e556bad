// Package wire is Regina's HTTP front end: the Queen MQ HTTP API on fasthttp.
// It routes requests, decodes and validates JSON (push payloads are kept as
// the raw bytes received, never re-encoded), splits pushes by (queue,
// partition) into groups, and writes responses and error bodies
// ({"error": "..."} with the right status). With JWT auth on it checks every
// routed request against its route's Role (internal/auth) before the
// handler runs, and stamps the token's sub on pushed items.
//
// It calls the broker only through the small interfaces it declares in
// backend.go (Pusher, Popper, Acker, ...), speaks the vocabulary of package
// reginatype, and imports neither actor nor sqlstore: cmd/regina wires the
// real implementations in. Nothing imports wire but cmd/regina.
package wire
