package sqlstore_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// sqlFilesCopy returns the embedded SQL as a map the test may edit.
func sqlFilesCopy(t *testing.T) fstest.MapFS {
	t.Helper()
	out := fstest.MapFS{}
	require.NoError(t, fs.WalkDir(sqlstore.SQLFiles, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sqlstore.SQLFiles, p)
		out[p] = &fstest.MapFile{Data: b}
		return err
	}))
	return out
}

func appliedMigrations(t *testing.T, schema string) map[int]string {
	t.Helper()
	rows, err := sqlstoretest.Pool(t).Query(context.Background(),
		"SELECT version, name || ' ' || coalesce(checksum, '-') FROM "+pgx.Identifier{schema}.Sanitize()+".schema_migrations")
	require.NoError(t, err)
	out := map[int]string{}
	for rows.Next() {
		var v int
		var s string
		require.NoError(t, rows.Scan(&v, &s))
		out[v] = s
	}
	require.NoError(t, rows.Err())
	return out
}

// An applied migration that changed (here 0001 gained a column) makes the
// migration refuse, naming the file and what to do, and change nothing; the
// unchanged files still migrate the same schema.
func TestChangedMigrationIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	pool := sqlstoretest.Pool(t)
	before := appliedMigrations(t, st.Schema())

	files := sqlFilesCopy(t)
	f := files["migrations/0001_init.up.sql"]
	f.Data = []byte(strings.Replace(string(f.Data), "    name                        text        NOT NULL UNIQUE,",
		"    name                        text        NOT NULL UNIQUE,\n    colour text,", 1))
	err := sqlstore.MigrateFS(ctx, pool, st.Schema(), files)
	require.ErrorIs(t, err, sqlstore.ErrMigrationChanged)
	require.ErrorContains(t, err, "sqlstore/migrations/0001_init.up.sql")
	require.ErrorContains(t, err, "new numbered migration")
	require.Equal(t, before, appliedMigrations(t, st.Schema()))

	require.NoError(t, sqlstore.MigrateFS(ctx, pool, st.Schema(), sqlFilesCopy(t)))
	require.Equal(t, before, appliedMigrations(t, st.Schema()))
}

// A new migration is applied once and recorded with its checksum; a broker
// that does not know it then refuses to start on that schema.
func TestNewerSchemaIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	pool := sqlstoretest.Pool(t)
	files := sqlFilesCopy(t)
	files["migrations/0900_colour.up.sql"] = &fstest.MapFile{Data: []byte("ALTER TABLE queen.queues ADD COLUMN colour text;\n")}
	require.NoError(t, sqlstore.MigrateFS(ctx, pool, st.Schema(), files))
	require.NoError(t, sqlstore.MigrateFS(ctx, pool, st.Schema(), files), "applied once: a second run adds nothing")
	applied := appliedMigrations(t, st.Schema())
	require.Contains(t, applied, 900)
	require.Regexp(t, `^0900_colour\.up\.sql [0-9a-f]{64}$`, applied[900])

	_, err := sqlstore.Open(ctx, sqlstore.Config{URL: sqlstoretest.URL(t), Schema: st.Schema()})
	require.ErrorIs(t, err, sqlstore.ErrSchemaNewer)
	require.ErrorContains(t, err, "0900_colour.up.sql")
}

// The functions are re-created at every start: a schema whose function is
// out of date (here: a stub, and without jit = off) gets the current one.
func TestFunctionsAreReappliedAtStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	pool := sqlstoretest.Pool(t)
	ref, err := st.EnsurePartition(ctx, "fn", "p")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, schemaSQL(st, `CREATE OR REPLACE FUNCTION queen.push_segment(p_partition uuid, p_window_hint integer,
		p_watermark bigint, p_hashes bytea[], p_ids bytea, p_bodies bytea, p_ends integer[], p_fps bigint[],
		OUT status text, OUT window_seconds integer, OUT first_offset bigint, OUT created_at timestamptz,
		OUT dup_idx integer[], OUT dup_ids bytea[], OUT dup_created timestamptz[], OUT payload_check text,
		OUT dup_fps bigint[])
		LANGUAGE sql AS $$ SELECT 'stale', 0, -1::bigint, now(), '{}'::integer[], '{}'::bytea[], '{}'::timestamptz[],
		'off', '{}'::bigint[] $$`))
	require.NoError(t, err)
	_, err = st.Push(ctx, mustBatch(t, ref, "a"))
	require.ErrorContains(t, err, `unexpected status "stale"`)

	st2 := sqlstoretest.OpenSchema(t, st.Schema())
	res, err := st2.Push(ctx, mustBatch(t, ref, "a"))
	require.NoError(t, err)
	require.Equal(t, int64(0), res.FirstOffset)
	requireFunctionsJITOff(t, st.Schema())
}

func mustBatch(t *testing.T, ref reginatype.PartitionRef, txids ...string) *reginatype.PushBatch {
	t.Helper()
	b, _ := batchOf(t, ref, txids...)
	return b
}

// requireFunctionsJITOff checks that every function of the schema runs with
// jit = off, whatever the caller's session says.
func requireFunctionsJITOff(t *testing.T, schema string) {
	t.Helper()
	rows, err := sqlstoretest.Pool(t).Query(context.Background(), `SELECT p.proname FROM pg_proc p
		WHERE p.pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1)
		  AND NOT coalesce(p.proconfig, '{}') @> '{jit=off}'`, schema)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, names, "functions without SET jit = off")
}

// schemaShape describes a schema's tables (not the children of the hash
// sidecar, which follow the clock), columns (type, nullability,
// default, storage), indexes, constraints and functions (signature, settings,
// body), with the schema's name replaced by S, one line each, sorted.
func schemaShape(t *testing.T, schema string) []string {
	t.Helper()
	rows, err := sqlstoretest.Pool(t).Query(context.Background(), `
		WITH ns AS (SELECT oid FROM pg_namespace WHERE nspname = $1)
		SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) ||
		       CASE WHEN a.attnotnull THEN ' not null' ELSE '' END ||
		       coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '') || ' storage ' || a.attstorage::text
		  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		 WHERE c.relnamespace = (SELECT oid FROM ns) AND c.relkind IN ('r', 'p') AND NOT c.relispartition
		   AND a.attnum > 0 AND NOT a.attisdropped
		UNION ALL
		SELECT 'index ' || pg_get_indexdef(i.indexrelid)
		  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		 WHERE c.relnamespace = (SELECT oid FROM ns) AND NOT c.relispartition
		UNION ALL
		SELECT 'constraint ' || c.relname || ' ' || k.conname || ' ' || pg_get_constraintdef(k.oid)
		  FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
		 WHERE c.relnamespace = (SELECT oid FROM ns) AND NOT c.relispartition
		UNION ALL
		SELECT 'function ' || p.proname || '(' || pg_get_function_arguments(p.oid) || ') ' ||
		       pg_get_function_result(p.oid) || ' ' || coalesce(array_to_string(p.proconfig, ','), '') ||
		       ' body ' || md5(replace(p.prosrc, $1, 'S'))
		  FROM pg_proc p WHERE p.pronamespace = (SELECT oid FROM ns)`, schema)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for i := range lines {
		lines[i] = strings.ReplaceAll(lines[i], schema, "S")
	}
	slices.Sort(lines)
	return lines
}

// applyLegacy creates schema as a Regina from before checksums did: its
// migrator's schema_migrations (no checksum column), then the given
// migration files as that version shipped them, each recorded by version
// and name.
func applyLegacy(t *testing.T, schema, dir string) {
	t.Helper()
	ctx := context.Background()
	pool := sqlstoretest.Pool(t)
	id := pgx.Identifier{schema}.Sanitize()
	_, err := pool.Exec(ctx, "CREATE SCHEMA "+id+"; CREATE TABLE "+id+`.schema_migrations (
		version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`)
	require.NoError(t, err)
	names, err := filepath.Glob(filepath.Join(dir, "*.up.sql"))
	require.NoError(t, err)
	require.NotEmpty(t, names)
	for v, n := range names {
		b, err := os.ReadFile(n)
		require.NoError(t, err)
		sql := strings.ReplaceAll(string(b), "queen.", id+".")
		_, err = pool.Exec(ctx, sql)
		require.NoError(t, err, n)
		_, err = pool.Exec(ctx, "INSERT INTO "+id+".schema_migrations (version, name) VALUES ($1, $2)", v+1, filepath.Base(n))
		require.NoError(t, err)
	}
}

// A schema created by an earlier Regina (before migration checksums, with
// the functions inside 0001, option defaults in SQL, and in the oldest
// version two created_at indexes) is upgraded in place by the first start:
// afterwards it has exactly the shape of a new schema, its data is intact
// (an old transaction id is still a duplicate naming its original), and
// later starts accept it.
func TestUpgradeFromUnchecksummedSchema(t *testing.T) {
	t.Parallel()
	dirs, err := filepath.Glob("testdata/legacy/*/0001_init.up.sql")
	require.NoError(t, err)
	require.NotEmpty(t, dirs)
	for i := range dirs {
		dirs[i] = filepath.Dir(dirs[i])
	}
	fresh := schemaShape(t, sqlstoretest.Open(t).Schema())
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			schema := sqlstoretest.NewSchema(t)
			applyLegacy(t, schema, dir)
			pool := sqlstoretest.Pool(t)
			id := pgx.Identifier{schema}.Sanitize()
			// Data written by the old functions.
			var pid [16]byte
			require.NoError(t, pool.QueryRow(ctx, "SELECT partition_id FROM "+id+".ensure_partition('old', 'p', 'old', '')").Scan(&pid))
			old := partition.NewV7()
			h := partition.HashTxID("tx-old")
			var status string
			require.NoError(t, pool.QueryRow(ctx, "SELECT status FROM "+id+".push_segment($1, 3600, -1, $2, $3, $4, $5)",
				pid, [][]byte{h[:]}, old[:], []byte(`{}`), []int32{2}).Scan(&status))
			require.Equal(t, "ok", status)

			st := sqlstoretest.OpenSchema(t, schema)
			got := schemaShape(t, schema)
			missing := slices.DeleteFunc(slices.Clone(fresh), func(l string) bool { return slices.Contains(got, l) })
			extra := slices.DeleteFunc(slices.Clone(got), func(l string) bool { return slices.Contains(fresh, l) })
			require.Empty(t, missing, "an upgraded schema lacks what a new one has")
			require.Empty(t, extra, "an upgraded schema has what a new one has not")
			require.Len(t, got, len(fresh))
			ref, err := st.EnsurePartition(ctx, "old", "p")
			require.NoError(t, err)
			require.Equal(t, partition.UUID(pid), ref.ID)
			res, err := st.Push(ctx, mustBatch(t, ref, "tx-old", "tx-new"))
			require.NoError(t, err)
			require.Equal(t, []int{0}, res.DupIndex)
			require.Equal(t, []partition.UUID{old}, res.DupOriginal)
			require.Equal(t, int64(1), res.FirstOffset)

			applied := appliedMigrations(t, schema)
			sqlstoretest.OpenSchema(t, schema) // a later start
			require.Equal(t, applied, appliedMigrations(t, schema))
			for v, s := range applied {
				require.Regexp(t, `^\d{4}_\w+\.up\.sql [0-9a-f]{64}$`, s, "version %d", v)
			}
		})
	}
}
