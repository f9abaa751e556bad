package sqlstore

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
)

// sqlFiles holds the schema's SQL:
//
//   - migrations/NNNN_name.up.sql: tables and indexes, applied once each, in
//     version order, their checksum recorded. An applied migration never
//     changes; a schema change is a new file.
//   - functions/*.sql: the SQL functions, each a CREATE OR REPLACE, applied at
//     every start (in file name order, after the migrations), so a fix to a
//     function reaches every database. A change CREATE OR REPLACE cannot make
//     (the arguments or OUT columns) needs a migration that drops the old
//     function first.
//   - migrations/adopt.sql: run once on a schema migrated before checksums
//     were recorded (see adoptUnchecksummed).
//
//go:embed migrations/*.up.sql migrations/adopt.sql functions/*.sql
var sqlFiles embed.FS

// Migration errors. Open returns them wrapped, with the file and what to do.
var (
	// ErrMigrationChanged means a migration file differs from the one applied
	// to the database (its checksum changed).
	ErrMigrationChanged = errors.New("an applied migration was changed")
	// ErrSchemaNewer means the database has a migration this broker does not
	// know: a newer Regina migrated it.
	ErrSchemaNewer = errors.New("the schema was migrated by a newer Regina")
)

// lastUnchecksummed is the last migration version that Regina applied
// without recording a checksum.
const lastUnchecksummed = 2

// sqlFile is one embedded SQL file.
type sqlFile struct {
	name     string // file name, e.g. 0001_init.up.sql
	version  int    // migrations only
	checksum string // hex sha256 of the file, line endings normalised
	sql      string // as written (schema "queen.")
}

type sqlSet struct {
	migrations []sqlFile // by version
	functions  []sqlFile // by name
	adopt      sqlFile
}

func readSQL(fsys fs.FS, name string) (sqlFile, error) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return sqlFile{}, fmt.Errorf("read %s: %w", name, err)
	}
	// A checkout may turn LF into CRLF; the SQL is the same.
	text := strings.ReplaceAll(string(b), "\r\n", "\n")
	sum := sha256.Sum256([]byte(text))
	return sqlFile{name: path.Base(name), checksum: hex.EncodeToString(sum[:]), sql: text}, nil
}

func loadSQL(fsys fs.FS) (sqlSet, error) {
	var set sqlSet
	names, err := fs.Glob(fsys, "migrations/*.up.sql")
	if err != nil {
		return set, fmt.Errorf("list migrations: %w", err)
	}
	seen := map[int]string{}
	for _, n := range names {
		f, err := readSQL(fsys, n)
		if err != nil {
			return set, err
		}
		num, _, ok := strings.Cut(f.name, "_")
		if f.version, err = strconv.Atoi(num); !ok || err != nil || f.version <= 0 {
			return set, fmt.Errorf("migration %s: name must be NNNN_name.up.sql with NNNN > 0", f.name)
		}
		if other, dup := seen[f.version]; dup {
			return set, fmt.Errorf("migrations %s and %s have the same version", other, f.name)
		}
		seen[f.version] = f.name
		set.migrations = append(set.migrations, f)
	}
	sort.Slice(set.migrations, func(i, j int) bool { return set.migrations[i].version < set.migrations[j].version })
	names, err = fs.Glob(fsys, "functions/*.sql")
	if err != nil {
		return set, fmt.Errorf("list functions: %w", err)
	}
	sort.Strings(names)
	for _, n := range names {
		f, err := readSQL(fsys, n)
		if err != nil {
			return set, err
		}
		set.functions = append(set.functions, f)
	}
	set.adopt, err = readSQL(fsys, "migrations/adopt.sql")
	return set, err
}

// qualify replaces the "queen." schema prefix of SQL text with the configured
// schema.
func qualify(sql, schema string) string {
	if schema == "queen" {
		return sql
	}
	return strings.ReplaceAll(sql, "queen.", pgx.Identifier{schema}.Sanitize()+".")
}

// Migrate brings the schema up to date, in one transaction: it applies every
// migration not yet recorded in <schema>.schema_migrations, in order,
// recording its checksum, then (re)creates every SQL function. It refuses
// (ErrMigrationChanged) when an applied migration's file has changed, and
// (ErrSchemaNewer) when the database has a migration this broker does not
// know. A schema migrated before checksums were recorded is adopted first.
// Brokers starting at the same time serialise on a transaction-scoped
// advisory lock, so the second one finds the migrations done.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string, log zerolog.Logger) error {
	return migrate(ctx, pool, schema, sqlFiles, log)
}

type appliedMigration struct {
	version  int
	name     string
	checksum *string
}

func migrate(ctx context.Context, pool *pgxpool.Pool, schema string, fsys fs.FS, log zerolog.Logger) error {
	set, err := loadSQL(fsys)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", schema, err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate %s: begin: %w", schema, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	exec := func(what, sql string, args ...any) error {
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			return fmt.Errorf("migrate %s: %s: %w", schema, what, err)
		}
		return nil
	}
	if err := exec("lock", "SELECT pg_advisory_xact_lock(hashtext('regina.migrate.' || $1))", schema); err != nil {
		return err
	}
	id := pgx.Identifier{schema}.Sanitize()
	if err := exec("create schema", "CREATE SCHEMA IF NOT EXISTS "+id); err != nil {
		return err
	}
	if err := exec("create schema_migrations", "CREATE TABLE IF NOT EXISTS "+id+`.schema_migrations (
		version integer PRIMARY KEY, name text NOT NULL, checksum text,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return err
	}
	// Before checksums, the table had no checksum column.
	if err := exec("add schema_migrations.checksum", "ALTER TABLE "+id+".schema_migrations ADD COLUMN IF NOT EXISTS checksum text"); err != nil {
		return err
	}
	rows, err := tx.Query(ctx, "SELECT version, name, checksum FROM "+id+".schema_migrations ORDER BY version")
	if err != nil {
		return fmt.Errorf("migrate %s: read applied migrations: %w", schema, err)
	}
	applied, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (appliedMigration, error) {
		var a appliedMigration
		err := r.Scan(&a.version, &a.name, &a.checksum)
		return a, err
	})
	if err != nil {
		return fmt.Errorf("migrate %s: read applied migrations: %w", schema, err)
	}
	known := make(map[int]sqlFile, len(set.migrations))
	for _, m := range set.migrations {
		known[m.version] = m
	}
	done := make(map[int]bool, len(applied))
	var unchecked []sqlFile
	for _, a := range applied {
		m, ok := known[a.version]
		switch {
		case !ok:
			return fmt.Errorf("migrate %s: %w: it has migration %s (version %d), which this broker does not know; "+
				"run a Regina at least as new as the one that applied it", schema, ErrSchemaNewer, a.name, a.version)
		case a.checksum == nil && a.version <= lastUnchecksummed:
			unchecked = append(unchecked, m)
		case a.checksum == nil:
			return fmt.Errorf("migrate %s: migration %s has no recorded checksum, but every migration after %d "+
				"is recorded with one: schema_migrations was edited by hand", schema, a.name, lastUnchecksummed)
		case *a.checksum != m.checksum:
			return fmt.Errorf("migrate %s: %w: sqlstore/migrations/%s differs from the version applied to this "+
				"database (checksum %.12s, now %.12s). An applied migration must never change: restore the file "+
				"(git log -p sqlstore/migrations/%s) and put the change in a new numbered migration; "+
				"a fix to a SQL function belongs in sqlstore/functions/, which is applied at every start",
				schema, ErrMigrationChanged, m.name, *a.checksum, m.checksum, m.name)
		}
		done[a.version] = true
	}
	if len(unchecked) > 0 {
		if err := exec("adopt "+set.adopt.name, qualify(set.adopt.sql, schema)); err != nil {
			return err
		}
		for _, m := range unchecked {
			if err := exec("record checksum of "+m.name, "UPDATE "+id+".schema_migrations SET checksum = $2 WHERE version = $1",
				m.version, m.checksum); err != nil {
				return err
			}
		}
		log.Info().Str("schema", schema).Int("migrations", len(unchecked)).
			Msg("adopted a schema migrated before checksums were recorded")
	}
	for _, m := range set.migrations {
		if done[m.version] {
			continue
		}
		if err := exec("apply "+m.name, qualify(m.sql, schema)); err != nil {
			return err
		}
		if err := exec("record "+m.name, "INSERT INTO "+id+".schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
			m.version, m.name, m.checksum); err != nil {
			return err
		}
		log.Info().Str("schema", schema).Str("migration", m.name).Msg("migration applied")
	}
	for _, f := range set.functions {
		if err := exec("create functions of "+f.name, qualify(f.sql, schema)); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate %s: commit: %w", schema, err)
	}
	return nil
}

// embeddedSQL is loadSQL(sqlFiles), read once.
var embeddedSQL = sync.OnceValues(func() (sqlSet, error) { return loadSQL(sqlFiles) })

// SchemaState is what Store.CheckReady found of the schema's migrations.
type SchemaState struct {
	// Version is the highest migration version applied to the schema,
	// Expected the highest this broker knows.
	Version, Expected int
	// Problem says what is wrong (empty when the schema holds exactly this
	// broker's migrations, with their checksums).
	Problem string
}

// schemaState compares the applied migrations (version -> checksum) with
// the embedded ones.
func schemaState(applied map[int]string) SchemaState {
	set, err := embeddedSQL()
	if err != nil {
		return SchemaState{Problem: err.Error()}
	}
	var st SchemaState
	for v := range applied {
		st.Version = max(st.Version, v)
	}
	known := make(map[int]bool, len(set.migrations))
	for _, m := range set.migrations {
		st.Expected = max(st.Expected, m.version)
		known[m.version] = true
		sum, ok := applied[m.version]
		switch {
		case !ok:
			st.Problem = fmt.Sprintf("migration %s is not applied", m.name)
		case sum != m.checksum && (sum != "" || m.version > lastUnchecksummed):
			st.Problem = fmt.Sprintf("migration %s differs from the one applied (checksum)", m.name)
		}
		if st.Problem != "" {
			return st
		}
	}
	for v := range applied {
		if !known[v] {
			st.Problem = fmt.Sprintf("the schema has migration version %d, which this broker does not know (a newer Regina migrated it)", v)
			return st
		}
	}
	return st
}
