package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// minScaleWindow is the shortest -scale-window: the preload needs some
// window to spread over, and sidecar_ensure a child of at least a minute.
const minScaleWindow = 2 * time.Minute

// preloadReserve is the newest part of a hash point's window that its
// preload leaves empty, for the run itself: a twelfth of the window (2 h of
// the default day, 5 min of an hour). The oldest preloaded row leaves the
// window reserve after the point's preparation started, so the reserve must
// outlast everything from there to the point's last phase. In a default make
// compare/scale run the longest such stretch is the 100M point's: its own
// preparation (both schemas), then every point's phases, the drain and the
// restart phase on it; the 100k point waits through the 10M and 100M
// preparations and the phases before its own. Both fit in 2 h on this
// machine with room to spare. A phase started after preloaded rows had left
// the window is named in RESULTS.md (scaleState.expired).
func preloadReserve(window time.Duration) time.Duration { return window / 12 }

// timeSpan is (from, until]: the times a preload gives its rows.
type timeSpan struct{ from, until time.Time }

// preloadSpanFor is the span of a hash point's preload: the window, less
// the reserve, up to start (when the point's preparation started). Both of
// the point's schemas get the same span.
func preloadSpanFor(start time.Time, window time.Duration) timeSpan {
	return timeSpan{from: start.Add(-(window - preloadReserve(window))), until: start}
}

// preloadChunkRows is how many rows (over all partitions) one preload
// transaction writes.
const preloadChunkRows = 100000

// preload adds about need hashes to the partitions ids (all of one queue),
// evenly, straight into log_txns and segments, rows as the push transaction
// would have written them: per row h.cfg.items messages at consecutive
// offsets, a log_txns row of 16-byte hashes (md5 of a run-unique string:
// random, so a push never hits one by chance), a segment of UUIDv7 message
// ids followed by encoded frame bodies (transaction id "pre-<offset>",
// payload {}), and the partition's next_offset, push_xid and last_push_at
// advanced as a push advances them.
//
// The rows of a partition are spread evenly in time over span (a producer
// at a constant rate: row j of n at from + (until-from)*(j+1)/n), and
// offsets grow with the times, as in a real log. A transaction writes the
// next rows of every partition, so chunk i of n holds the i-th slice of the
// span. The partitions must hold no row newer than span.from.
//
// It works on both layouts of log_txns: a plain table, or one
// range-partitioned by created_at, whose children for span are created
// first (ensureLogChildren, childSeconds wide). With -preload-drop-index the
// GIN index is dropped for the load and rebuilt from its own definition.
func (h *harness) preload(ctx context.Context, sp *pgSpace, ids [][16]byte, need int, span timeSpan, childSeconds int) error {
	s := quoteIdent(sp.schema)
	items := h.cfg.items
	if len(ids) == 0 {
		return errors.New("preload: no partitions")
	}
	if !span.from.Before(span.until) {
		return fmt.Errorf("preload: empty span %s..%s", span.from.Format(time.RFC3339), span.until.Format(time.RFC3339))
	}
	conn, err := h.admin.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("preload: %w", err)
	}
	defer conn.Release()
	var newest *time.Time
	if err := conn.QueryRow(ctx, `SELECT max(l.created_at) FROM `+s+`.partitions p
		CROSS JOIN LATERAL (SELECT created_at FROM `+s+`.log_txns l WHERE l.partition_id = p.id
		                     ORDER BY l.first_offset DESC LIMIT 1) l
		WHERE p.id = ANY($1)`, ids).Scan(&newest); err != nil {
		return fmt.Errorf("preload: newest row: %w", err)
	}
	if newest != nil && newest.After(span.from) {
		return fmt.Errorf("preload: the partitions hold a row of %s, after the span's start %s: offsets and times would not grow together",
			newest.Format(time.RFC3339), span.from.Format(time.RFC3339))
	}
	partitioned, err := logTxnsPartitioned(ctx, conn.Conn(), sp.schema)
	if err != nil {
		return err
	}
	if partitioned {
		if err := h.ensureLogChildren(ctx, conn.Conn(), sp.schema, span.from, span.until.Add(time.Second), childSeconds); err != nil {
			return err
		}
	}
	perPart := (need + len(ids)*items - 1) / (len(ids) * items)
	var indexDefs []string
	if h.cfg.preloadDropIdx && perPart*len(ids)*items >= 20000 {
		if indexDefs, err = dropGINIndexes(ctx, conn.Conn(), sp.schema); err != nil {
			return err
		}
	}
	// On an error the indexes are not rebuilt: the run stops and the
	// point's schema is dropped.
	var ix *childIndexer
	if partitioned && len(indexDefs) > 0 {
		if ix, err = h.startChildIndexer(ctx, conn.Conn(), sp.schema, indexDefs); err != nil {
			return err
		}
		defer ix.stop()
	}
	chunk := max(1, h.chunkRows()/len(ids)) // rows per partition per transaction
	tag := sp.schema + "."
	start := time.Now()
	for done := 0; done < perPart; done += chunk {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		k := min(chunk, perPart-done)
		if err := preloadChunk(ctx, conn.Conn(), s, ids, items, done, k, perPart, span, tag); err != nil {
			return fmt.Errorf("preload rows %d.. of %d per partition: %w", done, perPart, err)
		}
		if ix != nil {
			if err := ix.handOff(span.at(done+k, perPart)); err != nil {
				return err
			}
		}
	}
	layout := "plain"
	if partitioned {
		layout = "range-partitioned"
	}
	h.logf("  inserted %s hashes in %s (%s log_txns, %s to %s)", shortCount(perPart*len(ids)*items), time.Since(start).Round(time.Millisecond),
		layout, span.from.Format(time.DateTime), span.until.Format(time.TimeOnly))
	if ix != nil {
		t := time.Now()
		if err := ix.finish(); err != nil {
			return err
		}
		h.logf("  %d children vacuumed and GIN-indexed during the load (%s building; %s waited for after it)",
			ix.built, ix.took.Round(time.Millisecond), time.Since(t).Round(time.Millisecond))
		if err := ix.vacuumRest(ctx, conn.Conn()); err != nil {
			return err
		}
	}
	// Rebuild the index (attaching the children's that exist), then let the
	// planner and the visibility map see the new rows.
	return h.vacuumAfter(ctx, sp, conn.Conn(), &indexDefs, ix != nil)
}

// chunkRows is how many rows (over all partitions) one preload transaction
// writes.
func (h *harness) chunkRows() int {
	if h.cfg.preloadChunk > 0 {
		return h.cfg.preloadChunk
	}
	return preloadChunkRows
}

// at is the time of row j (1-based) of n spread over the span.
func (sp timeSpan) at(j, n int) time.Time {
	return sp.from.Add(time.Duration(float64(sp.until.Sub(sp.from)) * float64(j) / float64(n)))
}

// preloadChunk writes rows done..done+k-1 (of perPart) of every partition
// ids in one transaction, row j at span.from + (span length)*(j+1)/perPart.
// The rows go into the heap in time order, the partitions' rows of one time
// next to each other, as concurrent pushes to them interleave (so loading
// one partition's window reads about as many pages as after real pushes).
func preloadChunk(ctx context.Context, conn *pgx.Conn, s string, ids [][16]byte, items, done, k, perPart int, span timeSpan, tag string) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }() // after Commit: a no-op
	spanSecs := span.until.Sub(span.from).Seconds()
	last := span.at(done+k, perPart)
	stmts := []struct {
		sql  string
		args []any
	}{
		{`CREATE TEMP TABLE preload ON COMMIT DROP AS
		 SELECT p.id AS pid, p.next_offset + g::bigint * $2::int AS off,
		        $4::timestamptz + make_interval(secs => $5::float8 * ($6::bigint + g + 1) / $7::bigint) AS at
		   FROM ` + s + `.partitions p
		  CROSS JOIN generate_series(0, $3::int - 1) g
		  WHERE p.id = ANY($1)`, []any{ids, items, k, span.from, spanSecs, done, perPart}},
		{`INSERT INTO ` + s + `.log_txns (partition_id, first_offset, created_at, hashes)
		 SELECT pid, off, at, ARRAY(SELECT decode(md5($2::text || pid::text || '.' || off::text || '.' || j::text), 'hex')
		                              FROM generate_series(1, $1::int) j)
		   FROM preload ORDER BY at, pid`, []any{items, tag}},
		// frames: frame_count UUIDv7 ids (48-bit ms time, version 7, 12
		// bits of sequence, then gen_random_uuid's variant and random
		// bits), then the bodies (partition.AppendBody: flags, created
		// µs, transaction id, payload, big-endian lengths).
		{`INSERT INTO ` + s + `.segments (partition_id, first_offset, frame_count, created_at, frames)
		 SELECT pid, off, $1::int, at,
		        (SELECT string_agg(int8send((ms << 16) | 28672 | (j & 4095)) || substring(uuid_send(gen_random_uuid()) FROM 9 FOR 8),
		                           ''::bytea ORDER BY j)
		           FROM generate_series(0, $1::int - 1) j)
		        || (SELECT string_agg('\x00'::bytea || int8send(us) || int2send(length(tx)::int2) || convert_to(tx, 'UTF8')
		                              || int4send(2) || '\x7b7d'::bytea, ''::bytea ORDER BY j)
		              FROM generate_series(0, $1::int - 1) j, LATERAL (SELECT 'pre-' || (off + j)::text AS tx) x)
		   FROM preload,
		        LATERAL (SELECT (extract(epoch FROM at) * 1000)::bigint AS ms,
		                        (extract(epoch FROM at) * 1000000)::bigint AS us) t
		  ORDER BY at, pid`, []any{items}},
		{`UPDATE ` + s + `.partitions SET next_offset = next_offset + $2::bigint * $3::int,
		        push_xid = pg_current_xact_id(), last_push_at = $4
		  WHERE id = ANY($1)`, []any{ids, k, items, last}},
	}
	for _, st := range stmts {
		if _, err := tx.Exec(ctx, st.sql, st.args...); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// logTxnsPartitioned reports whether schema.log_txns is a partitioned table.
func logTxnsPartitioned(ctx context.Context, conn *pgx.Conn, schema string) (bool, error) {
	var yes bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_partitioned_table pt
		JOIN pg_class c ON c.oid = pt.partrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = 'log_txns')`, schema).Scan(&yes)
	if err != nil {
		return false, fmt.Errorf("is log_txns partitioned: %w", err)
	}
	return yes, nil
}

// ensureLogChildren makes sure a range-partitioned log_txns has children
// covering [from, to), through the store's own code: its SQL function
// sidecar_ensure, with children childSeconds wide (the width the broker
// uses for the schema's depth, sqlstore.SidecarChildSecondsFor; it keeps
// existing children and fills only the gaps). Without that function the
// children the store made at its start are all there is, and a row outside
// them fails the preload with PostgreSQL's "no partition of relation" error.
func (h *harness) ensureLogChildren(ctx context.Context, conn *pgx.Conn, schema string, from, to time.Time, childSeconds int) error {
	var have bool
	if err := conn.QueryRow(ctx, "SELECT to_regprocedure($1) IS NOT NULL",
		quoteIdent(schema)+".sidecar_ensure(timestamptz, timestamptz, interval)").Scan(&have); err != nil {
		return fmt.Errorf("look for sidecar_ensure: %w", err)
	}
	if !have {
		return nil
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT "+quoteIdent(schema)+".sidecar_ensure($1, $2, make_interval(secs => $3))", from, to, childSeconds).Scan(&n); err != nil {
		return fmt.Errorf("create log_txns children for %s..%s: %w", from.Format(time.DateTime), to.Format(time.DateTime), err)
	}
	h.logf("  created %d log_txns children of %s for %s..%s", n, time.Duration(childSeconds)*time.Second,
		from.Format(time.DateTime), to.Format(time.TimeOnly))
	return nil
}

// dropGINIndexes drops schema.log_txns's GIN indexes and returns their
// definitions, to be run again by vacuumAfter. On a partitioned table the
// parent's index is dropped (its children's go with it) and its definition
// loses ONLY, so that running it again indexes every child.
func dropGINIndexes(ctx context.Context, conn *pgx.Conn, schema string) ([]string, error) {
	rows, err := conn.Query(ctx, "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = 'log_txns' AND indexdef ILIKE '%USING gin%'", schema)
	if err != nil {
		return nil, err
	}
	type idx struct{ name, def string }
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (idx, error) {
		var i idx
		return i, r.Scan(&i.name, &i.def)
	})
	if err != nil {
		return nil, err
	}
	var defs []string
	for _, i := range list {
		if _, err := conn.Exec(ctx, "DROP INDEX "+quoteIdent(schema)+"."+quoteIdent(i.name)); err != nil {
			return nil, fmt.Errorf("drop index %s: %w", i.name, err)
		}
		defs = append(defs, strings.Replace(i.def, " ON ONLY ", " ON ", 1))
	}
	return defs, nil
}

// preloadIndexMem is maintenance_work_mem for the GIN builds after a
// preload. More is slower: building one child of 4.5M random hashes (a
// 100M-hash day in hourly children) took 19-31 s with 16-64 MB, 26-27 s
// with 128-256 MB and 38 s with 1 GB (the accumulator is a red-black tree
// of random keys: a larger one misses the CPU caches on more of its
// comparisons).
const preloadIndexMem = "64MB"

// vacuumAfter rebuilds dropped indexes and runs VACUUM ANALYZE on the tables
// the preload wrote. logVacuumed: every child of log_txns was vacuumed
// already (childIndexer), so it is only analyzed (a VACUUM would read every
// GIN index whole for its statistics).
func (h *harness) vacuumAfter(ctx context.Context, sp *pgSpace, conn *pgx.Conn, indexDefs *[]string, logVacuumed bool) error {
	s := quoteIdent(sp.schema)
	if len(*indexDefs) > 0 {
		if _, err := conn.Exec(ctx, "SET maintenance_work_mem = '"+preloadIndexMem+"'"); err != nil {
			return fmt.Errorf("set maintenance_work_mem: %w", err)
		}
		for _, def := range *indexDefs {
			t := time.Now()
			if _, err := conn.Exec(ctx, def); err != nil {
				return fmt.Errorf("rebuild index: %w (%s)", err, def)
			}
			h.logf("  rebuilt GIN index in %s", time.Since(t).Round(time.Millisecond))
		}
		*indexDefs = nil
		if _, err := conn.Exec(ctx, "RESET maintenance_work_mem"); err != nil {
			return fmt.Errorf("reset maintenance_work_mem: %w", err)
		}
	}
	t := time.Now()
	stmts := []string{"VACUUM (ANALYZE) " + s + ".log_txns", "VACUUM (ANALYZE) " + s + ".segments", "VACUUM (ANALYZE) " + s + ".partitions"}
	if logVacuumed {
		stmts[0] = "ANALYZE " + s + ".log_txns"
	}
	for _, st := range stmts {
		if _, err := conn.Exec(ctx, st); err != nil {
			return fmt.Errorf("%s: %w", st, err)
		}
	}
	h.logf("  vacuum analyze in %s", time.Since(t).Round(time.Millisecond))
	var logHeap, logIdx, segHeap, segIdx string
	if err := conn.QueryRow(ctx, `SELECT pg_size_pretty(sum(pg_table_size(relid))), pg_size_pretty(sum(pg_indexes_size(relid))),
		       pg_size_pretty(pg_table_size($2::regclass)), pg_size_pretty(pg_indexes_size($2::regclass))
		  FROM pg_partition_tree($1::regclass)`, s+".log_txns", s+".segments").Scan(&logHeap, &logIdx, &segHeap, &segIdx); err != nil {
		return fmt.Errorf("table sizes: %w", err)
	}
	h.logf("  on disk: log_txns %s + indexes %s, segments %s + indexes %s", logHeap, logIdx, segHeap, segIdx)
	return nil
}

// logChild is a child of a range-partitioned log_txns and its bounds.
type logChild struct {
	name   string
	lo, hi time.Time
}

// childIndexer vacuums and GIN-indexes the children of log_txns a preload
// has finished (every row it writes later is newer than their upper bound)
// on a connection of its own, while the preload writes the next ones: the
// index builds of a large preload take as long as its inserts, and the two
// overlap. It builds the children's indexes with the dropped parent
// index's own definition; re-creating the parent index afterwards
// (vacuumAfter) attaches them and builds only the rest.
type childIndexer struct {
	h        *harness
	schema   string
	using    []string   // " USING ..." of each dropped parent GIN index
	children []logChild // every child, by lower bound
	next     int        // children[:next] were handed to the worker
	todo     chan logChild
	done     chan struct{}
	close    sync.Once
	cancel   context.CancelFunc
	failed   atomic.Bool
	// Written by the worker, read after done is closed.
	err   error
	built int
	took  time.Duration
}

// startChildIndexer lists schema.log_txns's children (sidecar_children)
// and starts the worker on a connection of the admin pool. indexDefs are
// the parent GIN definitions dropGINIndexes returned.
func (h *harness) startChildIndexer(ctx context.Context, conn *pgx.Conn, schema string, indexDefs []string) (*childIndexer, error) {
	ix := &childIndexer{h: h, schema: schema}
	for _, def := range indexDefs {
		i := strings.Index(def, " USING ")
		if i < 0 {
			return nil, fmt.Errorf("index definition without USING: %s", def)
		}
		ix.using = append(ix.using, def[i:])
	}
	rows, err := conn.Query(ctx, "SELECT child, lo, hi FROM "+quoteIdent(schema)+".sidecar_children() ORDER BY lo")
	if err != nil {
		return nil, fmt.Errorf("list the children of log_txns: %w", err)
	}
	ix.children, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (logChild, error) {
		var c logChild
		return c, r.Scan(&c.name, &c.lo, &c.hi)
	})
	if err != nil {
		return nil, fmt.Errorf("list the children of log_txns: %w", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	wconn, err := h.admin.Acquire(wctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("connection for the child indexes: %w", err)
	}
	if _, err := wconn.Exec(wctx, "SET maintenance_work_mem = '"+preloadIndexMem+"'"); err != nil {
		wconn.Release()
		cancel()
		return nil, fmt.Errorf("set maintenance_work_mem: %w", err)
	}
	ix.cancel = cancel
	ix.todo = make(chan logChild, len(ix.children))
	ix.done = make(chan struct{})
	go func() {
		defer close(ix.done)
		defer func() {
			if ix.err != nil {
				// Possibly mid-statement: do not give the session back.
				_ = wconn.Conn().Close(context.Background())
			}
			wconn.Release()
		}()
		for c := range ix.todo {
			if ix.err != nil {
				continue
			}
			t := time.Now()
			if err := ix.index(wctx, wconn.Conn(), c); err != nil {
				ix.err = err
				ix.failed.Store(true)
				continue
			}
			ix.built++
			ix.took += time.Since(t)
		}
	}()
	return ix, nil
}

// index vacuums child c (before its index exists, so the VACUUM does not
// read the GIN index) and builds its GIN indexes.
func (ix *childIndexer) index(ctx context.Context, conn *pgx.Conn, c logChild) error {
	child := quoteIdent(ix.schema) + "." + quoteIdent(c.name)
	if _, err := conn.Exec(ctx, "VACUUM (ANALYZE) "+child); err != nil {
		return fmt.Errorf("vacuum %s: %w", c.name, err)
	}
	for _, u := range ix.using {
		if _, err := conn.Exec(ctx, "CREATE INDEX ON "+child+u); err != nil {
			return fmt.Errorf("index %s: %w", c.name, err)
		}
	}
	return nil
}

// handOff gives the worker every child that ends at or before last (the
// newest row written so far), and reports a failure of the worker.
func (ix *childIndexer) handOff(last time.Time) error {
	if ix.failed.Load() {
		return ix.err // written before failed was set, never again
	}
	for ix.next < len(ix.children) && !ix.children[ix.next].hi.After(last) {
		ix.todo <- ix.children[ix.next]
		ix.next++
	}
	return nil
}

// finish waits for the worker to index what it was given.
func (ix *childIndexer) finish() error {
	ix.close.Do(func() { close(ix.todo) })
	<-ix.done
	return ix.err
}

// stop ends the worker (cancelling what it runs) and waits for it.
func (ix *childIndexer) stop() {
	ix.cancel()
	ix.close.Do(func() { close(ix.todo) })
	<-ix.done
}

// vacuumRest vacuums the children that were not handed to the worker (the
// newest ones, and those ahead of the clock), before the parent's index
// definition builds their indexes.
func (ix *childIndexer) vacuumRest(ctx context.Context, conn *pgx.Conn) error {
	for _, c := range ix.children[ix.next:] {
		if _, err := conn.Exec(ctx, "VACUUM (ANALYZE) "+quoteIdent(ix.schema)+"."+quoteIdent(c.name)); err != nil {
			return fmt.Errorf("vacuum %s: %w", c.name, err)
		}
	}
	return nil
}
