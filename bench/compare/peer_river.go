package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// The River peer: River (github.com/riverqueue/river, the PostgreSQL-native
// job queue for Go) on the same PostgreSQL server and database as Regina,
// in a schema of its own, migrated by River's own migrator. Its code lives
// in this bench program only: the broker never links River
// (internal/depcheck's TestBrokerLinksNoPeer). The functions are small so
// that other blocks (the consume block's River workers) build on them:
// openRiver, riverPeer.client, riverPeer.close, riverJob.

// riverPeer is River's schema and the pool its clients use.
type riverPeer struct {
	schema string
	pool   *pgxpool.Pool
	// Version is River's module version as linked into this program.
	Version string
}

// riverVersion is the linked module version of River ("unknown" when the
// build carries no module information).
func riverVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/riverqueue/river" {
				return d.Version
			}
		}
	}
	return "unknown"
}

// openRiver creates schema (dropped first if it exists) on the database at
// dbURL, opens a pool of conns connections on it and runs River's
// migrations there.
func openRiver(ctx context.Context, dbURL, schema string, conns int32) (*riverPeer, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("river: database url: %w", err)
	}
	cfg.MaxConns = conns
	cfg.ConnConfig.RuntimeParams["application_name"] = "regina-compare-river"
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("river: connect: %w", err)
	}
	p := &riverPeer{schema: schema, pool: pool, Version: riverVersion()}
	id := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+id+" CASCADE; CREATE SCHEMA "+id); err != nil {
		pool.Close()
		return nil, fmt.Errorf("river: create schema %s: %w", schema, err)
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: quietLogger()})
	if err == nil {
		_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	}
	if err != nil {
		p.close(context.Background())
		return nil, fmt.Errorf("river: migrate %s: %w", schema, err)
	}
	return p, nil
}

// quietLogger drops River's logs (its warnings would interleave with ours).
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// client returns a River client on the peer's pool and schema. cfg may be
// nil (an insert-only client); a consumer passes its Queues and Workers.
func (p *riverPeer) client(cfg *river.Config) (*river.Client[pgx.Tx], error) {
	c := river.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Schema = p.schema
	if c.Logger == nil {
		c.Logger = quietLogger()
	}
	return river.NewClient(riverpgxv5.New(p.pool), &c)
}

// close drops the peer's schema and closes its pool.
func (p *riverPeer) close(ctx context.Context) {
	if p == nil || p.pool == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	_, _ = p.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{p.schema}.Sanitize()+" CASCADE")
	p.pool.Close()
	p.pool = nil
}

// riverJob is the job every River phase inserts: one message, its
// transaction id the job's unique key (`river:"unique"`, UniqueOpts.ByArgs:
// the kind and this field only), its payload the same 200-byte JSON object
// Regina stores. River's uniqueness has no window: a job is a duplicate
// while one with its key is in any of the default unique states (available,
// completed, pending, retryable, running, scheduled), as Queen's unique key.
type riverJob struct {
	Tx      string          `json:"tx"      river:"unique"`
	Payload json.RawMessage `json:"payload"`
}

// Kind is River's name of the job type.
func (riverJob) Kind() string { return "regina_cmp_msg" }

// InsertOpts makes every riverJob unique by its transaction id.
func (riverJob) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
}
