package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// preloadSpan is how far back the first generated row of a partition goes
// (when the partition has no row yet): well inside the 1 h window, with
// room for a long preparation and the phases after it.
const preloadSpan = 20 * time.Minute

// preload adds about need hashes to queue's partitions, evenly, straight
// into log_txns and segments, rows as the push transaction would have
// written them: per row h.cfg.items messages at consecutive offsets, a
// log_txns row of 16-byte hashes (md5 of a run-unique string: random, so a
// push never hits one by chance), a segment of UUIDv7 message ids followed
// by encoded frame bodies (transaction id "pre-<offset>", payload {}), and
// the partition's next_offset, push_xid and last_push_at advanced as a push
// advances them. created_at rises from the partition's newest row (or
// preloadSpan ago) to now, so offsets and times grow together as in a real
// log and everything stays inside the 1 h window.
//
// It works on both layouts of log_txns: a plain table, or one
// range-partitioned by created_at, whose children for the generated times
// are created first (ensureLogChildren). With -preload-drop-index the GIN
// index is dropped for the load and rebuilt from its own definition.
func (h *harness) preload(ctx context.Context, sp *pgSpace, queue string, need int) error {
	s := quoteIdent(sp.schema)
	items := h.cfg.items
	ids, err := h.queuePartitions(ctx, sp, queue)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return fmt.Errorf("queue %s has no partitions", queue)
	}
	conn, err := h.admin.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var qid [16]byte
	if err := conn.QueryRow(ctx, "SELECT id FROM "+s+".queues WHERE name = $1", queue).Scan(&qid); err != nil {
		return fmt.Errorf("preload %s: %w", queue, err)
	}
	partitioned, err := logTxnsPartitioned(ctx, conn.Conn(), sp.schema)
	if err != nil {
		return err
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
	chunk := max(1, 100000/len(ids)) // rows per partition per transaction
	tag := sp.schema + "." + queue + "."
	start := time.Now()
	for done := 0; done < perPart; done += chunk {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if partitioned {
			if err := h.ensureLogChildren(ctx, conn.Conn(), sp.schema, start.Add(-preloadSpan-time.Minute), time.Now().Add(10*time.Minute)); err != nil {
				return err
			}
		}
		if err := preloadChunk(ctx, conn.Conn(), s, qid, items, min(chunk, perPart-done), tag); err != nil {
			return fmt.Errorf("preload %s: %w", queue, err)
		}
	}
	layout := "plain"
	if partitioned {
		layout = "range-partitioned"
	}
	h.logf("  inserted %s hashes in %s (%s log_txns)", shortCount(perPart*len(ids)*items), time.Since(start).Round(time.Millisecond), layout)
	// Rebuild the index, then let the planner and the visibility map see
	// the new rows.
	return h.vacuumAfter(ctx, sp, conn.Conn(), &indexDefs)
}

// preloadChunk writes k rows per partition of queue qid in one transaction.
func preloadChunk(ctx context.Context, conn *pgx.Conn, s string, qid [16]byte, items, k int, tag string) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }() // after Commit: a no-op
	stmts := []struct {
		sql  string
		args []any
	}{
		{`CREATE TEMP TABLE preload ON COMMIT DROP AS
		 SELECT p.id AS pid, p.next_offset + g::bigint * $2::int AS off,
		        t.t0 + (now() - t.t0) * ((g + 1)::float8 / $3::int) AS at
		   FROM ` + s + `.partitions p
		  CROSS JOIN LATERAL (SELECT coalesce((SELECT l.created_at FROM ` + s + `.log_txns l
		                                        WHERE l.partition_id = p.id ORDER BY l.first_offset DESC LIMIT 1),
		                                      now() - $4::interval) AS t0) t
		  CROSS JOIN generate_series(0, $3::int - 1) g
		  WHERE p.queue_id = $1`, []any{qid, items, k, fmt.Sprintf("%d seconds", int(preloadSpan.Seconds()))}},
		{`INSERT INTO ` + s + `.log_txns (partition_id, first_offset, created_at, hashes)
		 SELECT pid, off, at, ARRAY(SELECT decode(md5($2::text || pid::text || '.' || off::text || '.' || j::text), 'hex')
		                              FROM generate_series(1, $1::int) j)
		   FROM preload`, []any{items, tag}},
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
		                        (extract(epoch FROM at) * 1000000)::bigint AS us) t`, []any{items}},
		{`UPDATE ` + s + `.partitions SET next_offset = next_offset + $2::bigint * $3::int,
		        push_xid = pg_current_xact_id(), last_push_at = now()
		  WHERE queue_id = $1`, []any{qid, k, items}},
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
// sidecar_ensure (one-hour children, the store's default width; it keeps
// existing children and fills only the gaps). Without that function the
// children the store made at its start are all there is, and a row outside
// them fails the preload with PostgreSQL's "no partition of relation" error.
func (h *harness) ensureLogChildren(ctx context.Context, conn *pgx.Conn, schema string, from, to time.Time) error {
	var have bool
	if err := conn.QueryRow(ctx, "SELECT to_regprocedure($1) IS NOT NULL",
		quoteIdent(schema)+".sidecar_ensure(timestamptz, timestamptz, interval)").Scan(&have); err != nil {
		return fmt.Errorf("look for sidecar_ensure: %w", err)
	}
	if !have {
		return nil
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT "+quoteIdent(schema)+".sidecar_ensure($1, $2, interval '1 hour')", from, to).Scan(&n); err != nil {
		return fmt.Errorf("create log_txns children for %s..%s: %w", from.Format(time.TimeOnly), to.Format(time.TimeOnly), err)
	}
	if n > 0 {
		h.logf("  created %d log_txns children", n)
	}
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

// vacuumAfter rebuilds dropped indexes and runs VACUUM ANALYZE on the tables
// the preload wrote.
func (h *harness) vacuumAfter(ctx context.Context, sp *pgSpace, conn *pgx.Conn, indexDefs *[]string) error {
	s := quoteIdent(sp.schema)
	if len(*indexDefs) > 0 {
		if _, err := conn.Exec(ctx, "SET maintenance_work_mem = '256MB'"); err != nil {
			return err
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
			return err
		}
	}
	t := time.Now()
	for _, tbl := range []string{"log_txns", "segments", "partitions"} {
		if _, err := conn.Exec(ctx, "VACUUM (ANALYZE) "+s+"."+tbl); err != nil {
			return err
		}
	}
	h.logf("  vacuum analyze in %s", time.Since(t).Round(time.Millisecond))
	return nil
}
