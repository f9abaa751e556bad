// Command regina-loadtest drives a running broker that speaks the Queen MQ
// HTTP API (Regina, or the upstream Queen server) with push traffic the way
// real producers do, and reports what the broker sustained.
//
// It is an outside client: it imports nothing from the broker, builds its
// own request bodies and reads the answers as any HTTP client would
// (internal/pushanswer, shared with bench/compare).
//
// # What it sends
//
// -connections workers each hold one keep-alive connection and send
// POST /api/v1/push bodies of -items items. Each push goes to one of
// -partitions partitions ("p0", "p1", ...) chosen uniformly; every item has
// a payload object of about -payload bytes and a transaction id
// "<runid>-<worker>-<seq>-<i>" that is unique per item and per run, so fresh
// pushes never collide, even with earlier runs against the same queue.
//
// -dup-ratio simulates a retry storm: that share of pushes resends the exact
// body of an earlier, already answered push (same transaction ids, same
// partition), drawn uniformly from a ring of the last -dup-ring pushes. With
// deduplication on, every resent item should come back "duplicate" and
// every fresh item "queued"; the report counts both exceptions ("queued
// again", "fresh items answered duplicate"), so a run doubles as a check of
// the broker's exact deduplication. -dedup-window sets the queue's
// dedupWindowSeconds first (0 turns dedup off), -reset deletes the queue
// before the run.
//
// # What counts as an answer
//
// Any 2xx status is an answer and the body decides: an array holds one
// verdict per item ("queued", "duplicate", "failed"; upstream Queen also
// answers "buffered" when its database failed and the items went to its
// local failover file). Regina answers a push 201; upstream Queen answers
// 200, and also sends its database errors as 200 with an {"error": ...}
// object: that is an error, retryable like a 5xx, never an acknowledgement.
// A 2xx that cannot be read, or holds a verdict count other than the item
// count, is a "bad answer". Buffered items are neither acknowledged (not in
// msgs/s) nor errors; the report counts them apart. -dedup-window sends
// dedupWindowSeconds with configure; a broker whose answer does not echo it
// (upstream Queen drops the option: its deduplication has no window) gets a
// note in the report and on stderr.
//
// # When the broker is gone
//
// After a push that got no verdicts (no answer at all: connection refused,
// reset, closed, timed out; an error status such as 503 or 401; a 2xx error
// object) a connection waits before its next request: 50 ms, doubling with
// every consecutive failure up to -max-backoff (1 s; 0 never waits), each
// wait drawn from [d/2, d]; a push answered with verdicts resets it. So a
// broker that is gone (or refuses every push) costs a few requests per
// connection per second, not a busy loop, and the run still ends on time
// (a wait never outlasts the run) with its report. Real producers back off
// too (Queen's Go client waits 1 s, 2 s, 4 s). The
// report counts the pushes without an answer by kind and lists the outages:
// stretches from the first push without an answer to the next answer (or
// the end of the run), i.e. the time the broker was unreachable.
//
// -retries resends a push after a retryable failure (no answer, a 5xx, a 2xx
// error object; not a 4xx), with the same body, after the connection's
// backoff; no retry starts after the end of the run.
// Retries are counted separately, and the push's latency includes them. A
// resend in a duplicate storm is drawn only from pushes whose every item
// was acknowledged.
//
// # How it measures
//
// Closed loop (-rate 0, the default): every worker sends its next push as
// soon as the previous one is answered. This finds the broker's capacity
// for that many concurrent producers.
//
// Open loop (-rate N): pushes are scheduled at N per second over all
// workers, push k intended at start + k/N. A worker takes the next slot,
// waits for its time if early, sends at once if late. Latency is measured
// from the intended send time, not from when the push actually left.
// Measuring from the actual send time would hide stalls: while the broker
// is stuck, a closed set of workers simply stops sending, and the pushes
// that users would have sent during the stall are never timed
// ("coordinated omission"). Charging the schedule keeps them in: a 1 s
// stall at 1000 pushes/s shows up as ~1000 pushes with 0..1 s of extra
// latency. The report also gives the largest send lag and, if the run ends
// with a backlog, how many planned pushes were never sent. Use enough
// -connections for the target rate (rate x expected latency), or the
// generator itself becomes the bottleneck.
//
// Latency per push goes into an HDR-style log-linear histogram (exact below
// 256 ns, then 128 linear buckets per power of two up to 60 s: under 0.4%
// relative error) for p50, p90, p99, p99.9, plus exact max and mean. Only
// pushes answered with verdicts are in it; the others get their own
// histogram.
// -warmup runs first and is left out of the totals, the rates and the
// histogram (a push belongs to the warmup when it was sent, or scheduled,
// before its end). The measured window runs from the end of the warmup to
// the last answer; msgs/s counts items acknowledged (queued or duplicate)
// over it.
//
// With -pid, or when it can find the broker (the owner of the socket
// listening on -url's port, else the only process named "regina"), it reads
// /proc/PID/status (VmRSS) and /proc/PID/stat (utime+stime) once a second,
// and reports the RSS maximum and last value and the cores the broker used
// on average over the measured window. Only the broker process is counted,
// not PostgreSQL.
//
// # Output
//
// A progress line on stderr every second (rewritten in place on a
// terminal), then a text report on stdout (on stderr with -json -), the
// JSON report (-json: configuration, totals, latency, broker figures and a
// per-second series of msgs/s, pushes/s, p50, p99, RSS and CPU), a PNG
// (-plot: throughput and p50/p99 latency over time, 900x600), and last on
// stdout a one-line summary for scripts:
//
//	loadtest: label=L msgs/s=N pushes/s=N p50=MS p99=MS p999=MS queued=N duplicate=N errors=N rss_mb=N cpu=CORES unreachable_s=S
//
// errors counts items not acknowledged; rss_mb and cpu are "-" when the
// broker process is unknown; unreachable_s is the total length of the
// outages. The folders of -json and -plot are created, and both paths
// checked for writing, before the run starts. The exit status is 1 when
// the run could not start (an output cannot be written, the broker is not
// healthy, configure failed) or a file could not be written after all, 2
// for bad flags; errors during the run are reported, not fatal.
//
// # Examples
//
//	go build -o bin/regina-loadtest ./loadtest
//
//	# capacity: 16 producers as fast as they can, 10 s
//	bin/regina-loadtest -url http://127.0.0.1:6632 -duration 10s -plot /tmp/lt.png -json /tmp/lt.json
//
//	# retry storm: half the pushes resend an earlier body, dedup window 1 h
//	bin/regina-loadtest -dedup-window 3600 -dup-ratio 0.5 -label storm
//
//	# fixed offered load, latency without coordinated omission
//	bin/regina-loadtest -rate 2000 -connections 64 -warmup 2s -duration 20s
//
//	# dedup off, fresh queue, big batches, quiet for scripts
//	bin/regina-loadtest -reset -dedup-window 0 -items 100 -quiet
//
//	# the same load against an upstream Queen server, to compare
//	bin/regina-loadtest -url http://127.0.0.1:6640 -queue lt_queen -label queen -json out/queen.json
//
//	# a broker with JWT auth on: the token goes out as a bearer token
//	REGINA_LOADTEST_TOKEN=$(cat token.jwt) bin/regina-loadtest -duration 30s
package main
