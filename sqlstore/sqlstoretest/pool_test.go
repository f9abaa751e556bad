package sqlstoretest

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { os.Exit(WithPool(m).Run()) }

// rowsIn counts the rows of every table of schema (partitions included, on
// their own), and its partitions.
func rowsIn(t *testing.T, schema string) (map[string]int, int) {
	t.Helper()
	ctx := context.Background()
	db := Pool(t)
	rows, err := db.Query(ctx, `SELECT relname FROM pg_class WHERE relnamespace = $1::regnamespace AND relkind = 'r'`, schema)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	counts := map[string]int{}
	for _, n := range names {
		var c int
		require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, n}.Sanitize()).Scan(&c))
		if c > 0 {
			counts[n] = c
		}
	}
	var parts int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relnamespace = $1::regnamespace
		AND relispartition AND relkind = 'r'`, schema).Scan(&parts))
	return counts, parts
}

// The schema a test wrote to comes to the next test as a fresh one would:
// no rows but the seeded ones, no sidecar children until its Open.
func TestSchemaPoolHandsOnAnEmptiedSchema(t *testing.T) {
	var first string
	t.Run("writes", func(t *testing.T) {
		st := Open(t)
		first = st.Schema()
		_, err := st.EnsurePartition(context.Background(), "q", "seed")
		require.NoError(t, err)
		FillPartitions(t, first, "q", "p", 20)
		counts, parts := rowsIn(t, first)
		require.Equal(t, 21, counts["partitions"])
		require.NotZero(t, parts)
		_, err = Pool(t).Exec(context.Background(), `UPDATE `+pgx.Identifier{first}.Sanitize()+`.maintenance SET push = true`)
		require.NoError(t, err)
	})
	t.Run("reads", func(t *testing.T) {
		s := Schema(t)
		require.Equal(t, first, s, "the idle schema is handed on")
		counts, parts := rowsIn(t, s)
		require.Equal(t, map[string]int{"maintenance": 1, "schema_migrations": counts["schema_migrations"]}, counts)
		require.Zero(t, parts)
		var push bool
		require.NoError(t, Pool(t).QueryRow(context.Background(),
			`SELECT push FROM `+pgx.Identifier{s}.Sanitize()+`.maintenance`).Scan(&push))
		require.False(t, push, "the seeded row is the migration's")
		st := OpenSchema(t, s)
		require.Equal(t, s, st.Schema())
	})
}

// A schema whose catalog a test changed is dropped, not handed on.
func TestSchemaPoolDropsAChangedSchema(t *testing.T) {
	var changed string
	t.Run("alters", func(t *testing.T) {
		changed = Open(t).Schema()
		_, err := Pool(t).Exec(context.Background(), `ALTER TABLE `+pgx.Identifier{changed}.Sanitize()+`.queues ADD COLUMN extra int`)
		require.NoError(t, err)
	})
	schemas.mu.Lock()
	idle := slices.Contains(schemas.idle, changed)
	schemas.mu.Unlock()
	require.False(t, idle)
	var exists bool
	require.NoError(t, Pool(t).QueryRow(context.Background(),
		`SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)`, changed).Scan(&exists))
	require.False(t, exists)
}

// A test's own database is there for the test and gone once the background
// drop WithPool waits for has run.
func TestDatabaseIsDroppedAfterTheTest(t *testing.T) {
	ctx := context.Background()
	exists := func(name string) bool {
		var ok bool
		require.NoError(t, Pool(t).QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)`, name).Scan(&ok))
		return ok
	}
	var name string
	t.Run("uses", func(t *testing.T) {
		name = Database(t)
		require.True(t, exists(name))
	})
	require.Empty(t, waitDatabaseDrops())
	require.False(t, exists(name))
}
