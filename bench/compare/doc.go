// Command regina-compare measures Regina side by side with the figures and
// peers it is held to, in one run on one machine with the same messages:
// the raw PostgreSQL ceiling of its own push transaction; NATS JetStream's
// deduplicating publish, twice (nats-server's defaults, which acknowledge
// before an fsync, and `sync_interval: always`, acked = on disk as a Regina
// commit); River's unique inserts on the same PostgreSQL; and, when the
// user runs one and names it, the upstream Queen server. It writes the
// ratios and the raw figures to bench/RESULTS.md and prints, as its last
// line (R: Regina / peer at -items per push, or -items-large for the _100
// keys; N: broker + backends CPU µs per new message at one message per push
// over -one-partitions and at -items per push),
//
//	compare: regina/jetstream=R regina/ceiling=R dedup_on/off=R dup/new=R report/off=R regina/jetstream_sync=R regina/jetstream_sync_100=R regina/jetstream_100=R regina/river=R regina/river_storm=R cpu_us/msg_1=N cpu_us/msg_10=N [regina/queen=R] consume/jetstream_sync_1=R consume/jetstream_sync_10=R consume/jetstream_sync_100=R consume/cpu_us_1=N steady/keepup=R steady/p99_ms=N
//
// (the consume keys: Regina's queue-mode drain / JetStream's durable AckSync
// drain at pop batch 1, 10, 100; broker + backends CPU µs per message
// drained at batch 1; consumed / produced and push->pop p99 of the steady
// phase)
//
// Run it through make, which finds or starts PostgreSQL first:
//
//	make compare                    # 3 rounds x 22 timed phases (24 with Queen) x (3 s warmup + 20 s) plus block K's drains (200,000-message backlogs, minutes each on a loaded machine): about an hour
//	make compare COMPARE_ARGS=-blocks=K   # only the consume side
//	make compare DURATION=5s        # the same, shorter: about 10 minutes
//	make compare COMPARE_ARGS=-blocks=F   # only dedupPayloadCheck report vs off
//	make compare COMPARE_ARGS=-blocks=AP  # only Regina's shapes: the cpu_us keys
//	make compare COMPARE_ARGS=-blocks=APCS   # Regina and both JetStreams
//	make compare COMPARE_ARGS='-blocks ACS -nats-url nats://127.0.0.1:4222'   # block C on a server you run (Debian's 2.9)
//	make compare ITEMS=100 ROUNDS=1 WARMUP=2s
//	make compare COMPARE_ARGS='-blocks AB -nats-conns 1'
//	make compare QUEEN_URL=http://127.0.0.1:6640            # adds block E against your Queen server
//	make compare QUEEN_URL=http://127.0.0.1:6640 QUEEN_DATABASE=queen COMPARE_ARGS='-blocks AE'
//	make compare/scale              # partitions 1..100k, hashes 100k..100M in a 24 h window, pop 100/100k, restart: an hour or more (the 100M preload, both schemas, is the longest part)
//	make compare/scale SCALE_WINDOW=1h SCALE_HASHES=100k,10M   # the hash points on a 1 h window
//	make compare/scale SCALE_HASHES=100k,10M DURATION=10s   # the same up to 10M: under an hour
//	make compare/scale DURATION=5s SCALE_PARTITIONS=1,16,1000 SCALE_HASHES=100k,1M SCALE_POP=100,10k
//	make compare/scale SCALE_ONLY=drain  # only the 5k-partition drain: a few minutes
//
// or directly (go run ./bench/compare -h lists every flag).
//
// # What runs
//
// Everything is on 127.0.0.1. The program
//   - builds bin/regina (go build), and gets a PostgreSQL URL from
//     scripts/ensure-postgres.sh regina_compare (or -database-url);
//   - creates a fresh schema regina_cmp_<tag> (migrated through sqlstore,
//     the broker's own code) and drops it at the end;
//   - starts the pinned nats-server (bin/nats-server-v2.15.3, which make
//     compare installs with go install, like golangci-lint; -nats-server
//     names another binary) twice on free ports of 127.0.0.1, from a
//     configuration file each: with its defaults (block C) and with
//     `jetstream { sync_interval: always }` (block S); -nats-url gives block
//     C a server you run instead (Debian's 2.9 on 127.0.0.1:4222, say:
//     RESULTS.md then says it runs with its own settings). On each it
//     creates one stream (file storage, 1 h duplicate window, one subject
//     per partition), deleted at the end with the servers it started;
//   - for block R, creates schema regina_cmp_<tag>_river in the same
//     database, migrated by River's own migrator (River v0.51.2,
//     riverpgxv5), and drops it at the end;
//   - starts bin/regina itself on a free port, with that schema and every
//     setting at its default except QUEEN_DEDUP_CACHE, and stops it after
//     each block;
//   - with -queen-url (make compare QUEEN_URL=...): checks that the Queen
//     server answers /health, finds its process when it is local (the
//     listener of the URL's port), and configures one queue on it,
//     regina_cmp_<tag> (dedupWindowSeconds 3600; upstream Queen drops that
//     option and says nothing, so the report notes that the answer did not
//     echo it); the queue is deleted at the end. Nothing else is started,
//     stopped or changed there. A Queen that does not answer fails the run
//     before anything is measured.
//
// A first Ctrl-C (or SIGTERM, or the overall timeout) ends the current
// phase, stops what was started, drops the schema and the stream, and
// writes the figures measured so far, marked as interrupted; a second one
// kills instead of waiting.
//
// # The load
//
// Every system gets the same load shape: -connections producers (16), each
// sending pushes of -items messages (10) to one of -partitions partitions
// (16), chosen uniformly, closed loop (the next push leaves when the
// previous one is answered). A message is an immutable 200-byte JSON object
// drawn from 1024 random ones; its transaction id (NATS: Nats-Msg-Id) is
// "<run>.<round>.<phase>-<worker>-<push>-<item>". The partition, ids and
// payloads of a push are a function of (phase, worker, push number), so a
// storm regenerates exactly what was sent before.
//
//   - Regina: HTTP/1.1 keep-alive (fasthttp), one connection per producer,
//     POST /api/v1/push; verdicts are counted from the answer, read as any
//     producer reads it (internal/pushanswer: any 2xx, the body decides).
//     This is our own client (not bin/regina-loadtest) so that the storm
//     can replay exactly the pushes an earlier phase had accepted.
//   - Upstream Queen: the very same client, bodies and shape as Regina
//     (its 200 answers count like Regina's 201; a 200 carrying an error
//     object is an error).
//   - Ceiling: sqlstore.Store.Push, i.e. the broker's own pgx call of
//     queen.push_segment, one pgx connection per producer, with the batch
//     the broker would send for the same push (xxh3 hashes, UUIDv7 ids,
//     encoded frames, window hint 3600, full-window probe). No HTTP, no
//     actor, no group commit.
//   - Packed ceilings (packed.go): sqlstore.Store.PushMany, the statements
//     of the broker's packed shapes, -pack-senders connections (the
//     broker's PUSH_PACK_SENDERS default), each call carrying the batches of
//     -pack-partitions distinct partitions (default -connections /
//     -pack-senders, so as many batches are in flight as in the ceiling);
//     each connection owns its own partitions, as the packer has at most one
//     batch of a partition in flight. ceiling_packed is one transaction per
//     call (queen.push_segments), ceiling_pipelined one per batch
//     (queen.push_segment, pipelined). Ops are batches.
//   - JetStream: one NATS connection per producer (-nats-conns), each item
//     published on its own (JetStream has no batch publish) with
//     PublishAsync and nats.MsgId, at most -nats-inflight (256) publishes in
//     flight over all connections (16 each by default), bounded by our own
//     semaphore. Acks are read in order; an op is one message.
//
// # Phases and rounds
//
// One round is nine blocks, ten with Queen (-blocks selects some); the
// block order rotates by one per round (A B C D F P S R K, then B C D F P S
// R K A, ...), so that no system always runs first or last:
//
//	A  broker, QUEEN_DEDUP_CACHE=true: regina_on (dedup on, 1 h window),
//	   regina_on_storm (replays every push regina_on had accepted, cycling),
//	   regina_nodedup (a queue configured dedupWindowSeconds: 0)
//	B  ceiling, ceiling_storm, ceiling_packed, ceiling_pipelined
//	C  JetStream, nats-server's defaults (or -nats-url): jetstream,
//	   jetstream_storm (republishes the same Msg-Ids), jetstream_100
//	   (-items-large messages per push)
//	D  broker, QUEEN_DEDUP_CACHE=false: regina_off, regina_off_storm
//	E  the user's Queen server (only with -queen-url): queen, queen_storm
//	   (replays every push queen had accepted); its partitions are primed
//	   first, as a fresh Regina's are
//	F  broker, QUEEN_DEDUP_CACHE=true, two queues with a 1 h window:
//	   regina_check_off (dedupPayloadCheck off) and regina_check_report
//	   (report: every stored payload fingerprinted, its fingerprint written
//	   next to its hash), back to back on one broker, their order swapped
//	   every round; the bar is report/off >= 0.95
//	P  broker, QUEEN_DEDUP_CACHE=true, a queue with a 1 h window:
//	   regina_100 (-items-large, 100, messages per push over -partitions),
//	   then regina_1 (one message per push over -one-partitions, 1000,
//	   partitions: the commonest HTTP producer), each shape primed first
//	S  JetStream with `sync_interval: always`: jetstream_sync,
//	   jetstream_sync_storm, jetstream_sync_100
//	R  River: river (each push's messages as River jobs in one InsertMany,
//	   unique by transaction id: `river:"unique"`, UniqueOpts{ByArgs:
//	   true}), river_storm (the same jobs again: UniqueSkippedAsDuplicate)
//	K  the consume side (consume.go): drains of a backlog at pop batch 1,
//	   10 and 100 by Regina (queue mode, then two named groups), JetStream
//	   (durable pull consumer, AckSync on the sync_interval: always server,
//	   Ack on the default one), River workers and Queen (QUEEN_URL); then
//	   steady_regina (and steady_queen): open-loop producers and consumers
//	   together, push->pop latency
//
// Each phase is -warmup (3 s, not counted) plus -duration (20 s). An op
// counts when its answer arrives inside the measured window; msgs/s counts
// the messages answered with the expected verdict (accepted in a fresh
// phase, duplicate in a storm); the other verdict is reported as "wrong"
// and should be 0. A ratio is computed per round from two phases of that
// round and the median over rounds is reported, with every round's value.
//
// CPU comes from /proc, read at the start and the end of each measured
// window: the broker process; the PostgreSQL backends whose process title
// names this run's database ("PG ours") and every child of the postmaster
// alive at the end ("PG all", which includes the WAL writer, the
// checkpointer and other users' backends); nats-server (found as the
// listener of its port); this program (the load generator); and the whole
// machine from /proc/stat. The broker's RSS is read every half second. In
// the Queen phases "broker" is the Queen server process (when local), and
// "PG ours" the backends of -queen-database (unknown without it; "PG all"
// holds Queen's backends when it uses the same cluster).
// RESULTS.md also gives CPU microseconds per message.
//
// # Scale mode (-scale, make compare/scale)
//
// Points: each partition count (-scale-partitions: 1, 1k, 100k) with
// nothing preloaded, then each in-window hash count (-scale-hashes: 100k,
// 10M, 100M) at -partitions partitions. Every point gets two fresh schemas,
// one for Regina and one for the ceiling: the GIN index on log_txns.hashes
// spans the whole table, so a point must not carry another point's rows.
// All points are prepared first (the pop points before the push points, so
// that the hash points' rows are still inside their window when the rounds
// start): partitions created (above 1,000 with one
// INSERT of the rows queen.ensure_partition would write); for the hash
// points, the hashes written by SQL (scalegen.go: INSERT ... SELECT into
// log_txns and segments as the push would have written them: md5-derived
// 16-byte hashes, UUIDv7 ids and encoded frames, next_offset, push_xid and
// last_push_at advanced), with the GIN index dropped for the load, then
// VACUUM ANALYZE. The hash points' queue is configured (the store's
// Configure, as the configure endpoint does) with a dedup window of
// -scale-window (SCALE_WINDOW, 24h); the partition points keep the default
// hour. The preload models that window in steady state: a producer at a
// constant rate leaves its hashes spread evenly over the whole window, and
// the child pushes write holds only the newest slice. So each partition's
// rows are spread evenly in time over the window less a reserve for the run
// (a twelfth: 2 h of a day; the span ends when the point's preparation
// started, both schemas of the point get the same times), offsets growing
// with the times, each transaction writing its own slice of the span, rows
// in the heap in time order; the oldest preloaded hash leaves the window the
// reserve after the preparation started, which outlasts the rest of a
// default run (RESULTS.md names any phase that started after preloaded
// hashes had left). On a log_txns range-partitioned by created_at the
// children for those times are made first with the store's
// sidecar_ensure, sqlstore.SidecarChildSecondsFor(the queue's depth) wide
// (the width the broker uses: 1 h for a day); each child the load has
// finished is vacuumed and GIN-indexed on a second connection while the
// next rows are written, and the parent's index, re-created from its own
// definition, attaches those and builds the rest.
// Then each round (-scale-rounds) runs the pop points, then every push point
// in turn: a fresh broker (default configuration, cache on) on the point's
// schema, one message pushed to every partition and answered, then a wait
// (at most 5 minutes) until the broker's cache loads those pushes started
// have ended (so every partition is loaded and its cache hydrated, as far as
// the budget allows: the "broker start + prime" column; a cold broker's
// loads are what the restart phase shows), one Regina phase, the broker stopped, one ceiling phase. The
// curves (medians over rounds) go into RESULTS.md and are drawn into
// bench/scale-partitions.png and bench/scale-hashes.png (log x axis). The
// bars are Regina's msgs/s at each hash count over the smallest (>= 0.9 up
// to 10M, >= 0.8 at 100M).
//
// The pop points (-scale-pop: 100, 100k partitions; "none" skips them):
// each queue's partitions get one message each, read to the end by a
// queue-mode consumer, so every partition has a consumed cursor; before
// each round's phase, 1% of them (every 100th, at least one) get
// -scale-pop-backlog new messages between them, and -scale-pop-consumers
// (1) run a Queen client's consume loop over HTTP: an any-partition pop
// (batch 1, a lease, wait=false), then an ack. pops/s and the pop's p99 go
// into RESULTS.md and bench/scale-pop.png; bars: pops/s at the largest
// count >= 0.5x the smallest, p99 <= 2x.
//
// The drain phase (-scale-drain: 5k partitions; "none" skips it) runs after
// the rounds on a schema of its own: a fresh broker, -scale-drain-per (4)
// messages pushed to every partition, then -scale-drain-consumers (4) run
// the consume loop above (with a long poll, wait=true&timeout=5000) until
// the last message is acked, or nothing has been acked for two minutes.
// Every ack's time is kept: the drain's section of RESULTS.md (its own
// section, scale-drain) gives msgs/s per tenth of the backlog, the last
// tenth's over the first's as the flatness figure, the time to the last
// message and the load average at the start and the end; bench/scale-drain.png
// draws the rate and the backlog left over time. -scale-only (SCALE_ONLY)
// runs only the phases it names (partitions, hashes, pop, drain); a run of
// the drain alone leaves the scale section of RESULTS.md as it was.
//
// The restart phase (-scale-restart) runs after the rounds on the Regina
// schema of the largest hash point: a warm broker (primed and its cache
// loads waited for, as before a point's phases) pushes (warmup, measured
// window), is stopped with SIGTERM, and a new broker on the same database
// pushes the same load at once, cold, measured from -scale-restart-after
// (30 s) after it was started (its msgs/s per second from its first push
// are kept: RESULTS.md gives them 5 s at a time); bar: after / before >=
// 0.5 (a cold broker is fast within 30 s). A broker that exits by itself during any phase is reported with
// its exit code or signal, the kernel log lines naming its pid (the OOM
// killer) and the end of its log.
//
// Compare mode primes its brokers the same way before their first phase.
//
// # Caveats
//
//   - The machine has 2 cores, shared with PostgreSQL, the broker, the load
//     generator and whatever else runs (other engineers' tests). Absolute
//     rates move a lot from run to run; that is why everything is a same-run
//     ratio, interleaved, median of rounds. The "machine" CPU column shows
//     how much of the box was taken by work that is not this run.
//   - Durability: every Regina, ceiling and River commit waits for a WAL
//     flush (synchronous_commit on, as found). nats-server's defaults
//     acknowledge before syncing the file store (it syncs every 2 minutes);
//     block S's `sync_interval: always` fsyncs before every ack, which is
//     the like-for-like peer, and the one the JetStream bars are on.
//     JetStream also gets its best shape here: async publish with many in
//     flight, while Regina's producers wait for each push.
//   - River has no partitions and no window: its jobs go to its default
//     queue, and a job is a duplicate while one with its key exists in any
//     of River's default unique states (as Queen's unique key). River's
//     client runs inside this program: its CPU is in "load gen".
//   - The ceiling is the push transaction as the broker issues it, through
//     the same pgx code, so it includes the full-window GIN probe. Regina's
//     actor group-commits concurrent pushes to the same partition into one
//     transaction, which the ceiling does not do, so Regina can exceed the
//     "ceiling" (it does at 1 partition).
//   - After each Regina phase the broker's /metrics dedupCache section is
//     read (before and after, as deltas): watermark hits, full-window probes
//     by reason, evictions, hydrations, hashes held. RESULTS.md shows it per
//     phase, so a figure can be tied to what the cache did ("-" when the
//     broker has no such section).
//   - Storms replay pushes that were accepted a few seconds to a minute
//     before; all of them are inside the 1 h window. Replays cycle when a
//     storm outruns its source phase, so a push may be rejected more than
//     once.
//   - The scale preload's frames carry a 2-byte payload and transaction ids
//     whose xxh3 is not the row's hash, and it builds the GIN index in one
//     go (more compact than one grown push by push); the tables are
//     otherwise what the broker writes. A point's hash count
//     grows by what its phases push (RESULTS.md gives the count each point
//     started from), which matters at 100k and not at 10M.
//   - Priming keeps a cold start out of the steady-state figures; its time
//     is reported next to them, and it does grow with the log.
//   - Tables are not reset between rounds: every system's log grows through
//     the run (JetStream's stream as well).
//   - Upstream Queen deduplicates on a unique (partition, transactionId)
//     key with no window, Regina within a 1 h window: both reject every
//     replay of a storm. Queen runs on whatever database and settings its
//     user gave it, possibly another PostgreSQL than Regina's; RESULTS.md
//     says where it ran and what could be measured of it.
//   - Adding a system or a phase: a block in runCompare (its letter in
//     -blocks), its phases in comparePhases, its ratios in writeCompare.
package main
