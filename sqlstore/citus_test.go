package sqlstore_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// TestDistributionRule checks the schema against the distribution rule
// (sqlstore/citus.go), on plain PostgreSQL and on Citus alike: every table
// is distributed, reference or coordinator-only, and every primary key and
// unique index of a distributed table includes its distribution column. On
// Citus it also checks that the catalog says so.
func TestDistributionRule(t *testing.T) {
	st := sqlstoretest.Open(t)
	pool := sqlstoretest.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	schema := st.Schema()

	rows, err := pool.Query(ctx, `SELECT relname::text FROM pg_class
		WHERE relnamespace = $1::regnamespace AND relkind IN ('r', 'p') AND NOT relispartition ORDER BY 1`, schema)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NotEmpty(t, tables)
	for _, tb := range tables {
		_, dist := sqlstore.DistributedTables[tb]
		n := 0
		for _, in := range []bool{dist, slices.Contains(sqlstore.ReferenceTables, tb), slices.Contains(sqlstore.CoordinatorTables, tb)} {
			if in {
				n++
			}
		}
		require.Equalf(t, 1, n, "table %s must be in exactly one of sqlstore.DistributedTables, ReferenceTables, CoordinatorTables", tb)
	}
	for tb, col := range sqlstore.DistributedTables {
		require.Containsf(t, tables, tb, "distributed table %s is not in the schema", tb)
		// Every unique index, also of the partitions of a partitioned table.
		rows, err := pool.Query(ctx, `SELECT i.indexrelid::regclass::text,
			       EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = i.indrelid AND a.attname = $3
			                  AND a.attnum = ANY (i.indkey::int2[]))
			  FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
			 WHERE c.relnamespace = $1::regnamespace AND i.indisunique
			   AND (c.relname = $2 OR c.oid IN (SELECT inhrelid FROM pg_inherits
			                                    WHERE inhparent = ($1 || '.' || $2)::regclass))`, schema, tb, col)
		require.NoError(t, err)
		for rows.Next() {
			var idx string
			var has bool
			require.NoError(t, rows.Scan(&idx, &has))
			require.Truef(t, has, "unique index %s of distributed table %s lacks its distribution column %s", idx, tb, col)
		}
		require.NoError(t, rows.Err())
	}
	if !st.Citus() {
		return
	}
	for tb, col := range sqlstore.DistributedTables {
		var method, column string
		var coloc, partColoc int
		require.NoError(t, pool.QueryRow(ctx, `SELECT d.partmethod::text, column_to_column_name(d.logicalrelid, d.partkey),
			       d.colocationid, (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = ($1 || '.partitions')::regclass)
			  FROM pg_dist_partition d WHERE d.logicalrelid = ($1 || '.' || $2)::regclass`, schema, tb).
			Scan(&method, &column, &coloc, &partColoc), tb)
		require.Equal(t, "h", method, tb)
		require.Equal(t, col, column, tb)
		require.Equal(t, partColoc, coloc, "%s is colocated with partitions", tb)
	}
	for _, tb := range sqlstore.ReferenceTables {
		var method string
		require.NoError(t, pool.QueryRow(ctx, `SELECT partmethod::text || repmodel::text FROM pg_dist_partition
			WHERE logicalrelid = ($1 || '.' || $2)::regclass`, schema, tb).Scan(&method), tb)
		require.Equal(t, "nt", method, "%s is a reference table", tb)
	}
}

// TestCitusModes: DB_CITUS=on refuses a database without the extension,
// off never distributes, auto follows the extension.
func TestCitusModes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool := sqlstoretest.Pool(t)
	var has bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')").Scan(&has))

	auto := sqlstoretest.Open(t)
	require.Equal(t, has, auto.Citus())

	off := sqlstoretest.OpenConfig(t, sqlstore.Config{Citus: sqlstore.CitusOff})
	require.False(t, off.Citus())
	var distributed bool
	if has {
		require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_dist_partition
			WHERE logicalrelid = ($1 || '.partitions')::regclass)`, off.Schema()).Scan(&distributed))
	}
	require.False(t, distributed, "DB_CITUS=off distributes nothing")

	if !has {
		_, err := sqlstore.Open(ctx, sqlstore.Config{URL: sqlstoretest.URL(t), Schema: sqlstoretest.NewSchema(t),
			Citus: sqlstore.CitusOn})
		require.ErrorIs(t, err, sqlstore.ErrNoCitus)
	}
}
