package sqlstore

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.up.sql
var migrationFS embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

func loadMigrations(schema string) ([]migration, error) {
	names, err := fs.Glob(migrationFS, "migrations/*.up.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	out := make([]migration, 0, len(names))
	for _, n := range names {
		base := strings.TrimPrefix(n, "migrations/")
		num, _, ok := strings.Cut(base, "_")
		if !ok {
			return nil, fmt.Errorf("migration %s: name must be NNNN_name.up.sql", base)
		}
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", base, err)
		}
		b, err := migrationFS.ReadFile(n)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", base, err)
		}
		out = append(out, migration{version: v, name: base, sql: qualify(string(b), schema)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// qualify replaces the "queen." schema prefix of SQL text with the configured
// schema.
func qualify(sql, schema string) string {
	if schema == "queen" {
		return sql
	}
	return strings.ReplaceAll(sql, "queen.", pgx.Identifier{schema}.Sanitize()+".")
}

// Migrate applies every embedded migration not yet recorded in
// <schema>.schema_migrations, each in order, all in one transaction. Brokers
// starting at the same time serialise on a transaction-scoped advisory lock,
// so the second one finds the work done.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	ms, err := loadMigrations(schema)
	if err != nil {
		return err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate %s: begin: %w", schema, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('regina.migrate.' || $1))", schema); err != nil {
		return fmt.Errorf("migrate %s: lock: %w", schema, err)
	}
	id := pgx.Identifier{schema}.Sanitize()
	if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+id); err != nil {
		return fmt.Errorf("migrate %s: create schema: %w", schema, err)
	}
	if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+id+`.schema_migrations (
		version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("migrate %s: create schema_migrations: %w", schema, err)
	}
	rows, err := tx.Query(ctx, "SELECT version FROM "+id+".schema_migrations")
	if err != nil {
		return fmt.Errorf("migrate %s: read versions: %w", schema, err)
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return fmt.Errorf("migrate %s: read versions: %w", schema, err)
	}
	done := make(map[int]bool, len(applied))
	for _, v := range applied {
		done[int(v)] = true
	}
	for _, m := range ms {
		if done[m.version] {
			continue
		}
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return fmt.Errorf("migrate %s: apply %s: %w", schema, m.name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+id+".schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
			return fmt.Errorf("migrate %s: record %s: %w", schema, m.name, err)
		}
	}
	if err := jitOff(ctx, tx, schema); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate %s: commit: %w", schema, err)
	}
	return nil
}

// jitOff sets jit = off on every function of the schema that lacks it, so
// that the statements inside them are never JIT-compiled, whoever calls them
// and whatever the server's and the session's settings (see Open).
func jitOff(ctx context.Context, tx pgx.Tx, schema string) error {
	rows, err := tx.Query(ctx, `SELECT p.oid::regprocedure::text FROM pg_proc p
		WHERE p.pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1)
		  AND NOT coalesce(p.proconfig, '{}') @> '{jit=off}'`, schema)
	if err != nil {
		return fmt.Errorf("migrate %s: list functions: %w", schema, err)
	}
	fns, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("migrate %s: list functions: %w", schema, err)
	}
	for _, f := range fns {
		if _, err := tx.Exec(ctx, "ALTER FUNCTION "+f+" SET jit = off"); err != nil {
			return fmt.Errorf("migrate %s: jit off for %s: %w", schema, f, err)
		}
	}
	return nil
}
