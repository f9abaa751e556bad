package sqlstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
)

// CitusMode is Config.Citus: whether the store runs on Citus (distributed
// PostgreSQL, docs/scaling.md).
type CitusMode string

// The Citus modes.
const (
	// CitusAuto (the default, also for "") runs on Citus when the database
	// has the citus extension, else on plain PostgreSQL.
	CitusAuto CitusMode = "auto"
	// CitusOn requires Citus: Open fails when the extension is missing.
	CitusOn CitusMode = "on"
	// CitusOff never distributes anything, even with the extension there.
	CitusOff CitusMode = "off"
)

// ErrNoCitus means Config.Citus is CitusOn and the database has no citus
// extension.
var ErrNoCitus = errors.New("DB_CITUS=on, but the database has no citus extension (CREATE EXTENSION citus)")

// The distribution rule. On Citus every table of the schema is one of:
//
//   - distributed by the partition's id (DistributedTables: the table and its
//     distribution column), all colocated with queen.partitions, so one
//     partition's rows of every table live on one worker and a statement about
//     one partition runs there. Every primary key and unique index of such a
//     table includes the distribution column (Citus enforces uniqueness only
//     inside a shard); TestDistributionRule checks it on the catalog, on plain
//     PostgreSQL too, so the schema never drifts away from being
//     distributable;
//   - a reference table (ReferenceTables: small, read by most statements,
//     written rarely; a copy on every node, written with two-phase commit);
//   - a table of the coordinator only (CoordinatorTables: written often by the
//     brokers and never joined with a distributed table's rows).
//
// A new table must be added to one of the three lists (the test fails on a
// table in none).
var (
	// DistributedTables maps each distributed table to its distribution column.
	DistributedTables = map[string]string{
		"partitions":    "id",
		"segments":      "partition_id",
		"log_txns":      "partition_id",
		"consumers":     "partition_id",
		"dlq":           "partition_id",
		"traces":        "partition_id",
		"streams_state": "partition_id",
	}
	// ReferenceTables are copied to every node.
	ReferenceTables = []string{"queues", "consumer_groups", "maintenance", "streams_queries"}
	// CoordinatorTables stay on the coordinator (Citus local tables).
	CoordinatorTables = []string{"schema_migrations", "group_scan", "group_scan_nodes", "stats_minutes", "system_minutes", "encryption_key_check"}
)

// citusFiles are the SQL functions only a Citus schema has (applied after the
// distribution step, at every start).
//
//go:embed citus/*.sql
var citusFiles embed.FS

// citusFunctions are the functions registered with create_distributed_function:
// a call names its partition, so Citus runs it whole on the worker holding
// that partition (the signature, the distribution argument).
var citusFunctions = [][2]string{
	{"push_segment(uuid,integer,bigint,bytea[],bytea,bytea,integer[],bigint[])", "p_partition"},
	{"push_dups(uuid,integer,bigint,bytea[],bigint[])", "p_partition"},
	{"citus_catch_up_worker(uuid,uuid,text,timestamptz,xid8,text)", "p_key"},
	{"citus_ready_worker(uuid,uuid,text,timestamptz,xid8,text,integer)", "p_key"},
}

// detectCitus resolves mode against the database: whether the store runs on
// Citus.
func detectCitus(ctx context.Context, pool *pgxpool.Pool, mode CitusMode) (bool, error) {
	if mode == CitusOff {
		return false, nil
	}
	var has bool
	if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')").Scan(&has); err != nil {
		return false, fmt.Errorf("detect citus: %w", err)
	}
	switch mode {
	case CitusAuto, "":
		return has, nil
	case CitusOn:
		if !has {
			return false, ErrNoCitus
		}
		return true, nil
	default:
		return false, fmt.Errorf("citus mode %q: want auto, on or off", mode)
	}
}

// distribute is the Citus step of the migration, run after Migrate on a
// Citus database, idempotent: it makes every table of the schema not yet
// known to Citus distributed, reference or coordinator-local (the lists
// above), creates the Citus-only functions and registers the distributed
// functions. On an existing database create_distributed_table moves the
// table's rows to the workers (docs/scaling.md: it blocks writes to that
// table while it copies).
func distribute(ctx context.Context, pool *pgxpool.Pool, schema string, log zerolog.Logger) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("citus %s: begin: %w", schema, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	exec := func(what, sql string, args ...any) error {
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			return fmt.Errorf("citus %s: %s: %w", schema, what, err)
		}
		return nil
	}
	// One schema at a time in the database: Citus's metadata changes of
	// concurrent distributions deadlocked (tests migrate schemas in parallel).
	if err := exec("lock", "SELECT pg_advisory_xact_lock(hashtext('regina.citus'))"); err != nil {
		return err
	}
	// DDL on distributed tables in one transaction must run over one
	// connection per worker.
	if err := exec("sequential", "SET LOCAL citus.multi_shard_modify_mode TO 'sequential'"); err != nil {
		return err
	}
	rows, err := tx.Query(ctx, `SELECT c.relname::text FROM pg_dist_partition d JOIN pg_class c ON c.oid = d.logicalrelid
		WHERE c.relnamespace = $1::regnamespace`, schema)
	if err != nil {
		return fmt.Errorf("citus %s: read pg_dist_partition: %w", schema, err)
	}
	known, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("citus %s: read pg_dist_partition: %w", schema, err)
	}
	done := map[string]bool{}
	for _, k := range known {
		done[k] = true
	}
	id := pgx.Identifier{schema}.Sanitize()
	rel := func(t string) string { return id + "." + pgx.Identifier{t}.Sanitize() }
	n := 0
	for _, t := range ReferenceTables {
		if !done[t] {
			if err := exec("reference table "+t, "SELECT create_reference_table($1)", rel(t)); err != nil {
				return err
			}
			n++
		}
	}
	// partitions first: the others are colocated with it.
	dist := make([]string, 0, len(DistributedTables))
	for t := range DistributedTables {
		if t != "partitions" {
			dist = append(dist, t)
		}
	}
	sort.Strings(dist)
	dist = append([]string{"partitions"}, dist...)
	for _, t := range dist {
		if done[t] {
			continue
		}
		colocate := rel("partitions")
		if t == "partitions" {
			colocate = "none"
		}
		if err := exec("distribute "+t, "SELECT create_distributed_table($1, $2, colocate_with := $3)",
			rel(t), DistributedTables[t], colocate); err != nil {
			return err
		}
		n++
	}
	names, err := fs.Glob(citusFiles, "citus/*.sql")
	if err != nil {
		return fmt.Errorf("citus %s: list functions: %w", schema, err)
	}
	sort.Strings(names)
	for _, name := range names {
		f, err := readSQL(citusFiles, name)
		if err != nil {
			return err
		}
		if err := exec("create functions of "+f.name, qualify(f.sql, schema)); err != nil {
			return err
		}
	}
	// The probes bound the partition with "(partition_id = p) IS TRUE",
	// which keeps PostgreSQL's planner on the GIN index but which Citus
	// cannot prune shards with (the probe read every shard). On Citus the
	// plain equality comes first: one shard, on the worker the call runs on.
	for _, name := range []string{"functions/push_probe.sql"} {
		f, err := readSQL(sqlFiles, name)
		if err != nil {
			return err
		}
		sql := mustReplace(f.sql, "(l.partition_id = p_partition) IS TRUE",
			"l.partition_id = p_partition AND (l.partition_id = p_partition) IS TRUE")
		if err := exec("prunable "+f.name, qualify(sql, schema)); err != nil {
			return err
		}
	}
	var hasTrigger bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = $1::regclass
		AND tgname = 'partitions_local_push_xid')`, rel("partitions")).Scan(&hasTrigger); err != nil {
		return fmt.Errorf("citus %s: read pg_trigger: %w", schema, err)
	}
	if !hasTrigger {
		if err := exec("unsafe triggers", "SET LOCAL citus.enable_unsafe_triggers = on"); err != nil {
			return err
		}
		if err := exec("push_xid trigger", "CREATE TRIGGER partitions_local_push_xid BEFORE UPDATE ON "+rel("partitions")+
			" FOR EACH ROW EXECUTE FUNCTION "+id+".citus_local_push_xid()"); err != nil {
			return err
		}
	}
	for _, t := range CoordinatorTables {
		if !done[t] {
			if err := exec("coordinator table "+t, "SELECT citus_add_local_table_to_metadata($1)", rel(t)); err != nil {
				return err
			}
			n++
		}
	}
	for _, f := range citusFunctions {
		var distributed bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_dist_object
			WHERE classid = 'pg_proc'::regclass AND objid = $1::regprocedure AND distribution_argument_index IS NOT NULL)`,
			id+"."+f[0]).Scan(&distributed); err != nil {
			return fmt.Errorf("citus %s: read pg_dist_object: %w", schema, err)
		}
		if distributed {
			continue
		}
		if err := exec("distribute function "+f[0], "SELECT create_distributed_function($1::regprocedure, $2::text, colocate_with := $3::text)",
			id+"."+f[0], f[1], rel("partitions")); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("citus %s: commit: %w", schema, err)
	}
	if n > 0 {
		log.Info().Str("schema", schema).Int("tables", n).Msg("citus: tables distributed")
	}
	return nil
}

// citusState is what a store on Citus keeps: the keys that reach each
// worker (one delegated call per worker for the catch-up), read again after
// a while so that a worker added or a shard moved is seen, and each group's
// cache of ready candidates (citus_ready.go).
type citusState struct {
	mu      sync.Mutex
	keys    []citusNodeKey
	keysAt  time.Time
	relName string // the schema's partitions table, quoted
	// changes counts the pushes, acks and transactions this store sent,
	// ready the cache of candidates of each (queue, group), reused for
	// readyTTL: see citusRefresh.
	changes  atomic.Uint64
	ready    sync.Map // citusGroupKey -> *citusReady
	readyTTL time.Duration
}

// citusGroupKey names a consumer group of a queue.
type citusGroupKey struct {
	queue [16]byte
	group string
}

// citusNodeKey is a partition id whose shard lives on worker node
// (pg_dist_placement.groupid): a delegated call on it runs on that worker.
type citusNodeKey struct {
	node int32
	key  [16]byte
}

// citusKeysTTL is how long the worker keys are reused.
const citusKeysTTL = 10 * time.Second

func newCitusState(schema string) *citusState {
	return &citusState{relName: pgx.Identifier{schema}.Sanitize() + ".partitions", readyTTL: citusCatchUpEvery}
}

// citusQueries switches the statements whose Citus form differs: the push
// functions are called as SELECT f(...) (the one form Citus delegates whole
// to the worker of the partition argument; pushRow reads its composite
// result). A pop's candidate scan has no Citus form: its candidates come
// from each worker's queen.citus_ready_worker (citus_ready.go), and each is
// locked on its own worker by lockConsumer, SKIP LOCKED.
func (q *queries) citusQueries(schema string) {
	q.pushSegment = qualify(`SELECT queen.push_segment($1, $2, $3, $4, $5, $6, $7, $8)`, schema)
	q.pushDups = qualify(`SELECT queen.push_dups($1, $2, $3, $4, $5)`, schema)
	// Citus refuses now() in ON CONFLICT ... DO UPDATE SET on a distributed
	// or reference table (only IMMUTABLE functions there); EXCLUDED's column
	// has the same value (its DEFAULT now(), evaluated on the coordinator).
	q.configure = mustReplace(q.configure, "updated_at = now()", "updated_at = EXCLUDED.updated_at")
	q.insertDLQ = mustReplace(q.insertDLQ, "failed_at = now()", "failed_at = EXCLUDED.failed_at")
	q.streams.upsertState = mustReplace(q.streams.upsertState, "updated_at = now()", "updated_at = EXCLUDED.updated_at")
	// Citus cannot plan a SQL function's statement with parameters: ack's
	// resolution of ids to offsets is queen.resolve_offsets written out,
	// bounded to the partition's shard by a plain equality.
	q.resolveOffsets = qualify(`WITH c AS MATERIALIZED (
		        SELECT l.first_offset AS fo, m.h, m.o
		          FROM queen.log_txns l
		         CROSS JOIN LATERAL unnest(l.hashes) WITH ORDINALITY AS m(h, o)
		         WHERE l.partition_id = $1 AND l.hashes && $2::bytea[])
		    SELECT h.i::integer, c.fo + c.o - 1
		      FROM c JOIN unnest($2::bytea[]) WITH ORDINALITY AS h(h, i) ON h.h = c.h`, schema)
	// Nor a non-IMMUTABLE function inside CASE in an UPDATE.
	// now() is taken from a FROM subquery instead.
	q.updateConsumerAfterAck = mustReplace(mustReplace(q.updateConsumerAfterAck,
		"avail_at = CASE WHEN $4 THEN now() ELSE avail_at END", "avail_at = CASE WHEN $4 THEN x.n ELSE avail_at END"),
		"WHERE partition_id = $1", "FROM (SELECT now() AS n) x WHERE partition_id = $1")
	// Explain's probe reads each copy's original id and fingerprint with
	// correlated subqueries on the rows found, which Citus cannot join with
	// them: on Citus they come from the rows themselves (the fingerprint)
	// and a join of each found row with its segment by primary key (same
	// partition, same shard), for every hash of a row found.
	q.admin.explainProbe = qualify(`WITH c AS MATERIALIZED (
		    SELECT l.partition_id AS pid, l.first_offset AS fo, l.created_at AS created, m.h, m.o::integer AS o,
		           substring(s.frames FROM (m.o::integer - 1) * 16 + 1 FOR 16) AS mid, l.fingerprints[m.o] AS fp
		      FROM queen.log_txns l
		     CROSS JOIN LATERAL unnest(l.hashes) WITH ORDINALITY AS m(h, o)
		      LEFT JOIN queen.segments s ON s.partition_id = l.partition_id AND s.first_offset = l.first_offset
		     WHERE l.hashes && $2::bytea[] AND l.partition_id = ANY($1::uuid[]))
		SELECT k.i, c.fo + c.o - 1, c.created, c.created > now() - make_interval(secs => k.w), c.mid, c.fp
		  FROM c JOIN unnest($1::uuid[], $2::bytea[], $3::integer[], $4::integer[]) AS k(pid, h, w, i)
		    ON k.h = c.h AND k.pid = c.pid
		 ORDER BY k.i, c.fo, c.o`, schema)
	// A named pop finds its partition by its derived id (one shard).
	q.popPartitionByName = qualify(`SELECT id, name FROM queen.citus_partition_by_name($1, $2)`, schema)
	// Nor a correlated subquery beside a reference table.
	q.stats.partitionsBefore = qualify(`SELECT q.name, coalesce(c.n, 0) FROM queen.queues q
		  LEFT JOIN (SELECT p.queue_id, count(*) AS n FROM queen.partitions p WHERE p.created_at < $1
		              GROUP BY p.queue_id) c ON c.queue_id = q.id
		 WHERE q.name = ANY($2::text[])`, schema)
	q.citusPopPrepare = qualify(`SELECT queue_id, coalesce(lease_time, 0), coalesce(delayed, 0),
		coalesce(window_buffer, 0), coalesce(retry_limit, 0), sub_from FROM queen.citus_pop_prepare($1, $2, $3, $4)`, schema)
	q.citusReady = qualify(`SELECT queen.citus_ready_worker($1, $2, $3, $4, $5::text::xid8, $6::text, $7)`, schema)
	q.citusHorizons = qualify(`SELECT node, horizon::text, running::text FROM queen.group_scan_nodes
		WHERE queue_id = $1 AND consumer_group = $2`, schema)
	// A later snapshot (a larger xmax) replaces an earlier one whole.
	q.citusSetHorizon = qualify(`INSERT INTO queen.group_scan_nodes (queue_id, consumer_group, node, horizon, running)
		VALUES ($1, $2, $3, $4::text::xid8, $5::text::xid8[])
		ON CONFLICT (queue_id, consumer_group, node) DO UPDATE SET horizon = EXCLUDED.horizon, running = EXCLUDED.running
		WHERE group_scan_nodes.horizon <= EXCLUDED.horizon`, schema)
}

// pushRow reads a push function's row: on Citus the call answers one
// composite value (citusQueries), elsewhere its columns.
func (s *Store) pushRow(r pgx.Row) pgx.Row {
	if s.citus == nil {
		return r
	}
	s.citusChanged()
	return compositeRow{r}
}

// compositeRow scans a row of one composite column into its fields.
type compositeRow struct{ r pgx.Row }

// Scan implements pgx.Row.
func (c compositeRow) Scan(dest ...any) error { return c.r.Scan(pgtype.CompositeFields(dest)) }

// Citus reports whether the store runs on Citus.
func (s *Store) Citus() bool { return s.citus != nil }

// pgtypeComposite scans one composite value into fields.
func pgtypeComposite(fields ...any) pgtype.CompositeFields { return fields }

// mustReplace replaces from with to in sql, which must contain it once.
func mustReplace(sql, from, to string) string {
	if strings.Count(sql, from) != 1 {
		panic(fmt.Sprintf("citus: %q not found once in %.60s", from, sql))
	}
	return strings.Replace(sql, from, to, 1)
}

// citusNowOutOfCase rewrites a maintenance switch's UPDATE so that now() is
// read from a FROM subquery, not inside its CASE.
func citusNowOutOfCase(sql string) string {
	return mustReplace(sql, "ELSE now() END RETURNING", "ELSE x.n END FROM (SELECT now() AS n) x RETURNING")
}
