package sqlstoretest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DROP DATABASE waits for a checkpoint: seconds on a server other tests
// keep busy, spent by the test that waits for it in its cleanup. Under
// WithPool the drops run in the background instead and Run waits for them
// after the tests (and fails the run if one failed).
var (
	dbSeq   atomic.Int64
	dbDrops sync.WaitGroup
	dbMu    sync.Mutex
	dbErrs  []error
)

// Database creates a new, empty database on the test server for a test that
// needs one of its own (a default schema, database-level settings) and
// returns its name. It is dropped (WITH (FORCE)) when the test ends: in the
// background when the package runs its tests through WithPool, which waits
// for it, else at once.
func Database(t testing.TB) string {
	t.Helper()
	u := URL(t)
	name := fmt.Sprintf("regina_t%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9, dbSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatalf("sqlstoretest: create database %s: %v", name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("sqlstoretest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if !schemas.on.Load() {
			if err := dropDatabase(u, name); err != nil {
				t.Errorf("sqlstoretest: %v", err)
			}
			return
		}
		dbDrops.Go(func() {
			if err := dropDatabase(u, name); err != nil {
				dbMu.Lock()
				dbErrs = append(dbErrs, err)
				dbMu.Unlock()
			}
		})
	})
	return name
}

func dropDatabase(u, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// waitDatabaseDrops waits for the background drops and returns their errors.
func waitDatabaseDrops() []error {
	dbDrops.Wait()
	dbMu.Lock()
	defer dbMu.Unlock()
	return dbErrs
}
