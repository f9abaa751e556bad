// Package sqlstoretest gives tests a real PostgreSQL: one database for the
// test binary (TEST_DATABASE_URL, default
// postgres://postgres@127.0.0.1:5432/regina_test) and a schema per test that
// no other test sees: a fresh one (NewSchema), dropped when the test ends, or
// a migrated one from the package's pool (Schema, and Open or OpenConfig
// without a schema, when TestMain runs the tests through WithPool; see
// pool.go), emptied for the next test when the test ends. Import it only from
// _test.go files.
package sqlstoretest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/sqlstore"
)

// DefaultURL is used when TEST_DATABASE_URL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/regina_test?sslmode=disable"

var (
	urlOnce sync.Once
	urlVal  string
	urlErr  error
	seq     atomic.Int64
)

// URL returns the test database's connection string, creating the database
// when it does not exist. It fails the test with instructions when no server
// answers.
func URL(t testing.TB) string {
	t.Helper()
	urlOnce.Do(func() { urlVal, urlErr = prepare() })
	if urlErr != nil {
		t.Fatalf("sqlstoretest: %v\n\nThe tests need a real PostgreSQL. Run them with `make test`, which finds "+
			"or starts one, or set TEST_DATABASE_URL to a reachable server.", urlErr)
	}
	return urlVal
}

func prepare() (string, error) {
	raw := os.Getenv("TEST_DATABASE_URL")
	if raw == "" {
		raw = DefaultURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, raw)
	if err == nil {
		_ = conn.Close(ctx) // only a probe
		return raw, nil
	}
	// The server may be up without the database: create it.
	u, perr := url.Parse(raw)
	if perr != nil || !strings.Contains(err.Error(), "does not exist") {
		return "", fmt.Errorf("connect to TEST_DATABASE_URL %q: %w", raw, err)
	}
	db := strings.TrimPrefix(u.Path, "/")
	admin := *u
	admin.Path = "/postgres"
	conn, err = pgx.Connect(ctx, admin.String())
	if err != nil {
		return "", fmt.Errorf("connect to %q to create database %q: %w", admin.String(), db, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil &&
		!strings.Contains(err.Error(), "already exists") {
		return "", fmt.Errorf("create database %q: %w", db, err)
	}
	return raw, nil
}

// NewSchema returns the name of a schema no other test uses. It is dropped
// (with everything in it) when the test ends. The schema itself is created by
// the first sqlstore.Open or Migrate on it.
func NewSchema(t testing.TB) string {
	t.Helper()
	u := URL(t)
	name := fmt.Sprintf("queen_t%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9, seq.Add(1))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Errorf("drop schema %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	return name
}

// Open returns a Store on a schema of the test's own (Schema), migrated,
// closed when the test ends.
func Open(t testing.TB) *sqlstore.Store {
	t.Helper()
	return OpenSchema(t, Schema(t))
}

// OpenSchema returns a Store on the given schema, closed when the test ends.
func OpenSchema(t testing.TB, schema string) *sqlstore.Store {
	t.Helper()
	return OpenConfig(t, sqlstore.Config{Schema: schema, Logger: zerolog.Nop()})
}

// OpenConfig returns a Store opened with cfg, closed when the test ends. An
// empty URL is the test database's, an empty Schema one of the test's own
// (Schema), MaxConns 0 is 8; a zero Logger logs nothing.
func OpenConfig(t testing.TB, cfg sqlstore.Config) *sqlstore.Store {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = URL(t)
	}
	if cfg.Schema == "" {
		cfg.Schema = Schema(t)
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 8
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := sqlstore.Open(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	return st
}

// Pool returns a plain pool on the test database for assertions, closed when
// the test ends. Queries must qualify table names with the test's schema.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := pgxpool.New(ctx, URL(t))
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}
