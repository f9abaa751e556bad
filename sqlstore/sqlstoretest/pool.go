package sqlstoretest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/regina-mq/regina/sqlstore"
)

// A fresh schema costs PostgreSQL about 0.15 CPU-seconds (every migration
// run, then DROP SCHEMA ... CASCADE): most of what a package's tests ask of
// the server. A package whose TestMain runs its tests through WithPool
// recycles them instead. Schema hands a test a migrated schema no running
// test uses; when the test ends the schema is emptied (every partition of a
// partitioned table, the hash sidecar's children, dropped, so that the next
// Open makes them as it does on a fresh schema; every other table's rows
// deleted; the rows the migrations seed put back from a pristine template
// schema; sequences set to the template's) and handed to the next test, or
// dropped when it is not exactly as migrated: its catalog (relations,
// columns, defaults, constraints, indexes, functions, triggers, types,
// privileges, schema_migrations' rows) differs from the template's, it grew
// past recycleMaxGrowth (DELETE leaves dead rows and autovacuum may be off),
// or the reset failed. Recycling costs about 0.06 CPU-seconds (the reset and
// the next Open's functions and sidecar children). When the package's tests
// end, every pooled schema and the template are dropped. A test that needs
// what no recycled schema gives (a migration path from nothing, pg_stat
// counters or buffer counts of never-written tables) takes NewSchema.

// recycleMaxGrowth (DELETE leaves dead rows; autovacuum may be off), or the
// reset failed. Hash sidecar children (partitions of log_txns, made by time
// by every Open) are the one exception the catalog comparison allows: a
// recycled schema keeps those earlier tests' Opens made. Tests that depend
// on exactly which children exist, on pg_stat counters or on buffer counts
// of a never-written table take NewSchema. When the package's tests end,
// every pooled schema and the template are dropped.

// recycleMaxGrowth is how much larger than the template (table and index
// files, children included) a schema may be and still be recycled.
const recycleMaxGrowth = 4 << 20

// TestingM is what WithPool wraps: *testing.M, or a wrapper of it.
type TestingM interface{ Run() int }

type pooledM struct{ m TestingM }

// WithPool returns m whose Run runs the tests with Schema (and Open,
// OpenConfig without a schema) recycling schemas, then drops every schema
// the pool made. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(sqlstoretest.WithPool(m).Run()) }
//
// Without it, or with SQLSTORETEST_POOL=off in the environment (to rule
// the pool out when a test fails), Schema is NewSchema. With
// SQLSTORETEST_POOL_STATS set, Run prints how many schemas were taken,
// recycled and dropped.
func WithPool(m TestingM) TestingM { return pooledM{m} }

// Run runs the tests, then waits for the databases (Database) being dropped
// and drops the pool's schemas. A failure to drop one fails the run.
func (p pooledM) Run() int {
	schemas.on.Store(os.Getenv("SQLSTORETEST_POOL") != "off")
	code := p.m.Run()
	errs := append(waitDatabaseDrops(), schemas.close())
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(os.Stderr, "sqlstoretest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Schema returns a migrated schema that no other running test uses, as empty
// as a fresh one: from the pool when the package runs its tests through
// WithPool, else a NewSchema (which the first Open migrates). When the test
// ends it goes back to the pool (or is dropped: see above).
func Schema(t testing.TB) string {
	t.Helper()
	if !schemas.on.Load() {
		return NewSchema(t)
	}
	u := URL(t)
	if err := schemas.init(u); err != nil {
		t.Fatalf("sqlstoretest: schema pool: %v", err)
	}
	name := schemas.take()
	t.Cleanup(func() {
		if err := schemas.give(name); err != nil {
			t.Errorf("sqlstoretest: %v", err)
		}
	})
	return name
}

type schemaPool struct {
	on       atomic.Bool
	initOnce sync.Once
	initErr  error
	db       *pgxpool.Pool
	prefix   string
	tpl      *template

	mu    sync.Mutex
	idle  []string
	made  map[string]bool // every schema the pool made and has not dropped
	n     int
	stats struct{ taken, recycled, dropped int }
}

var schemas = &schemaPool{made: map[string]bool{}}

// template is what a schema as migrated and opened looks like.
type template struct {
	name        string
	fingerprint string
	size        int64
	tables      []string // every table but schema_migrations and the partitioned ones (quoted)
	partitioned []string // the partitioned tables (names)
	seeds       []string // INSERT ... SELECT statements restoring the rows the migrations seed (with %s for the schema)
	sequences   []string // setval statements (with %s for the schema)
}

func (p *schemaPool) init(u string) error {
	p.initOnce.Do(func() { p.initErr = p.doInit(u) })
	return p.initErr
}

func (p *schemaPool) doInit(u string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		return fmt.Errorf("parse %q: %w", u, err)
	}
	cfg.MaxConns = 4
	if p.db, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	p.prefix = fmt.Sprintf("queen_p%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	name := p.prefix + "_tpl"
	p.mu.Lock()
	p.made[name] = true
	p.mu.Unlock()
	st, err := sqlstore.Open(ctx, sqlstore.Config{URL: u, Schema: name, Logger: zerolog.Nop(), MaxConns: 2})
	if err != nil {
		return fmt.Errorf("migrate the template schema: %w", err)
	}
	st.Close()
	tpl := &template{name: name}
	id := pgx.Identifier{name}.Sanitize()
	if tpl.fingerprint, tpl.size, err = p.inspect(ctx, name); err != nil {
		return err
	}
	rows, err := p.db.Query(ctx, `SELECT c.relname, c.relkind = 'p',
		       (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) FROM pg_attribute a
		         WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '')
		  FROM pg_class c
		 WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
		   AND c.relname <> 'schema_migrations'
		 ORDER BY c.relname`, name)
	if err != nil {
		return fmt.Errorf("list the template's tables: %w", err)
	}
	type table struct {
		name, cols  string
		partitioned bool
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (table, error) {
		var tb table
		return tb, r.Scan(&tb.name, &tb.partitioned, &tb.cols)
	})
	if err != nil {
		return fmt.Errorf("list the template's tables: %w", err)
	}
	for _, tb := range tables {
		tid := pgx.Identifier{tb.name}.Sanitize()
		if tb.partitioned {
			tpl.partitioned = append(tpl.partitioned, tb.name)
		} else {
			tpl.tables = append(tpl.tables, tid)
		}
		var has bool
		if err := p.db.QueryRow(ctx, "SELECT EXISTS (SELECT FROM "+id+"."+tid+")").Scan(&has); err != nil {
			return fmt.Errorf("read the template's %s: %w", tb.name, err)
		}
		if has {
			tpl.seeds = append(tpl.seeds, fmt.Sprintf("INSERT INTO %%s.%s (%s) SELECT %s FROM %s.%s",
				tid, tb.cols, tb.cols, id, tid))
		}
	}
	rows, err = p.db.Query(ctx, `SELECT sequencename, coalesce(last_value, start_value), last_value IS NOT NULL
		FROM pg_sequences WHERE schemaname = $1`, name)
	if err != nil {
		return fmt.Errorf("list the template's sequences: %w", err)
	}
	tpl.sequences, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var (
			seq    string
			val    int64
			called bool
		)
		err := r.Scan(&seq, &val, &called)
		return fmt.Sprintf("SELECT setval('%%s.%s', %d, %t)", pgx.Identifier{seq}.Sanitize(), val, called), err
	})
	if err != nil {
		return fmt.Errorf("list the template's sequences: %w", err)
	}
	p.tpl = tpl
	return nil
}

// inspectSQL fingerprints a schema's catalog (everything but the partitions
// of partitioned tables and their indexes; the schema's name, which index
// definitions and function bodies hold, replaced by @) and sums the size of
// its relations.
const inspectSQL = `
WITH rel AS (
  SELECT c.oid, c.relname, c.relkind FROM pg_class c
   WHERE c.relnamespace = $1::regnamespace AND NOT c.relispartition)
SELECT md5(replace(concat_ws('|',
  (SELECT string_agg(concat_ws(':', c.relname, c.relkind, c.relpersistence, c.reloptions::text, c.relacl::text,
                               c.relrowsecurity, CASE WHEN c.relkind = 'i' THEN pg_get_indexdef(c.oid) END), ',' ORDER BY c.relname)
     FROM pg_class c JOIN rel USING (oid)),
  (SELECT string_agg(concat_ws(':', rel.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attgenerated,
                               pg_get_expr(d.adbin, d.adrelid)), ',' ORDER BY rel.relname, a.attnum)
     FROM rel JOIN pg_attribute a ON a.attrelid = rel.oid AND a.attnum > 0 AND NOT a.attisdropped
     LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum),
  (SELECT string_agg(concat_ws(':', rel.relname, co.conname, pg_get_constraintdef(co.oid)), ',' ORDER BY rel.relname, co.conname)
     FROM rel JOIN pg_constraint co ON co.conrelid = rel.oid),
  (SELECT string_agg(concat_ws(':', rel.relname, tg.tgname, tg.tgenabled, pg_get_triggerdef(tg.oid)), ',' ORDER BY rel.relname, tg.tgname)
     FROM rel JOIN pg_trigger tg ON tg.tgrelid = rel.oid AND NOT tg.tgisinternal),
  (SELECT string_agg(concat_ws(':', pr.proname, pg_get_function_identity_arguments(pr.oid), md5(replace(pr.prosrc, $1::text, '@')), pr.proconfig::text),
                     ',' ORDER BY pr.proname, pg_get_function_identity_arguments(pr.oid))
     FROM pg_proc pr WHERE pr.pronamespace = $1::regnamespace),
  (SELECT string_agg(ty.typname, ',' ORDER BY ty.typname) FROM pg_type ty
    WHERE ty.typnamespace = $1::regnamespace AND ty.typrelid = 0),
  (SELECT nspacl::text FROM pg_namespace WHERE oid = $1::regnamespace),
  (SELECT string_agg(relname, ',') FROM rel WHERE relkind = 'p')
), $1::text, '@')),
coalesce((SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c
           WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'm')), 0)::bigint`

// inspect returns the schema's catalog fingerprint (schema_migrations' rows
// included) and the size of its tables.
func (p *schemaPool) inspect(ctx context.Context, name string) (string, int64, error) {
	var (
		fp, migs string
		size     int64
	)
	if err := p.db.QueryRow(ctx, inspectSQL, name).Scan(&fp, &size); err != nil {
		return "", 0, fmt.Errorf("inspect schema %s: %w", name, err)
	}
	if err := p.db.QueryRow(ctx, "SELECT coalesce(string_agg(version || ':' || coalesce(checksum, ''), ',' ORDER BY version), '') FROM "+
		pgx.Identifier{name, "schema_migrations"}.Sanitize()).Scan(&migs); err != nil {
		return "", 0, fmt.Errorf("inspect schema %s: %w", name, err)
	}
	return fp + "/" + migs, size, nil
}

// take returns an idle schema, or the name of a new one (the test's Open
// migrates it).
func (p *schemaPool) take() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.taken++
	if n := len(p.idle); n > 0 {
		name := p.idle[n-1]
		p.idle = p.idle[:n-1]
		return name
	}
	p.n++
	name := fmt.Sprintf("%s_%d", p.prefix, p.n)
	p.made[name] = true
	return name
}

// give empties the schema and returns it to the pool, or drops it when it
// cannot be recycled.
func (p *schemaPool) give(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.reset(ctx, name); err == nil {
		p.mu.Lock()
		p.idle = append(p.idle, name)
		p.stats.recycled++
		p.mu.Unlock()
		return nil
	}
	return p.drop(ctx, name)
}

var errNotAsMigrated = errors.New("not as migrated")

func (p *schemaPool) reset(ctx context.Context, name string) error {
	var exists bool
	if err := p.db.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", name).Scan(&exists); err != nil || !exists {
		return errNotAsMigrated
	}
	fp, size, err := p.inspect(ctx, name)
	if err != nil || fp != p.tpl.fingerprint || size > p.tpl.size+recycleMaxGrowth {
		return errNotAsMigrated
	}
	rows, err := p.db.Query(ctx, `SELECT i.inhrelid::regclass::text FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhparent
		WHERE c.relnamespace = $1::regnamespace AND c.relname = ANY($2)`, name, p.tpl.partitioned)
	if err != nil {
		return fmt.Errorf("list the partitions of %s: %w", name, err)
	}
	parts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("list the partitions of %s: %w", name, err)
	}
	id := pgx.Identifier{name}.Sanitize()
	b := &pgx.Batch{}
	b.Queue("SET LOCAL lock_timeout = '5s'")
	if len(parts) > 0 {
		b.Queue("DROP TABLE " + strings.Join(parts, ", "))
	}
	for _, tb := range p.tpl.tables {
		b.Queue("DELETE FROM " + id + "." + tb)
	}
	for _, s := range p.tpl.seeds {
		b.Queue(fmt.Sprintf(s, id))
	}
	for _, s := range p.tpl.sequences {
		b.Queue(fmt.Sprintf(s, strings.ReplaceAll(id, "'", "''")))
	}
	return pgx.BeginFunc(ctx, p.db, func(tx pgx.Tx) error {
		return tx.SendBatch(ctx, b).Close()
	})
}

func (p *schemaPool) drop(ctx context.Context, name string) error {
	if _, err := p.db.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", name, err)
	}
	p.mu.Lock()
	delete(p.made, name)
	p.stats.dropped++
	p.mu.Unlock()
	return nil
}

// close drops every schema the pool made (the template too).
func (p *schemaPool) close() error {
	if p.db == nil {
		return nil
	}
	defer p.db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p.mu.Lock()
	names := make([]string, 0, len(p.made))
	for n := range p.made {
		names = append(names, n)
	}
	taken, recycled, dropped := p.stats.taken, p.stats.recycled, p.stats.dropped
	p.mu.Unlock()
	var errs []error
	for _, n := range names {
		if err := p.drop(ctx, n); err != nil {
			errs = append(errs, err)
		}
	}
	if os.Getenv("SQLSTORETEST_POOL_STATS") != "" {
		fmt.Fprintf(os.Stderr, "sqlstoretest: %d schemas taken, %d recycled, %d dropped early, %d at the end\n",
			taken, recycled, dropped, len(names))
	}
	return errors.Join(errs...)
}
