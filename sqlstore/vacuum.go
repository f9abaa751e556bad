package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// VacuumCursors vacuums the cursor table (queen.consumers) at once. Every
// pop, ack and catch-up writes a new version of a cursor row, and the old
// ones stay in the ready index (consumers_ready) until something removes
// them. PostgreSQL's own removal during index scans stops while any
// transaction holds an id older than them — a stranger idle in transaction,
// even in another database (PostgreSQL 15 refreshes the horizon those
// removals use only when snapshots' xmin moves, and the stranger pins it) —
// and autovacuum may be off or minutes away: a pop then walks every dead
// entry of its group in the ready index (a 5,000-partition drain beside an
// idle transaction in another database read 10.7M index entries instead of
// 8.5k). VACUUM computes the horizon afresh. SKIP_LOCKED: when another
// broker's vacuum of the table runs, this one does nothing. Not on Citus
// (the workers' own autovacuum; answers nil).
func (s *Store) VacuumCursors(ctx context.Context) error {
	if s.citus != nil {
		return nil
	}
	sql := "VACUUM (SKIP_LOCKED) " + pgx.Identifier{s.schema, "consumers"}.Sanitize()
	if _, err := s.pool.Exec(ctx, sql); err != nil {
		return fmt.Errorf("vacuum cursor table: %w", classify(err))
	}
	return nil
}

// RunCursorVacuum runs VacuumCursors every interval until ctx ends
// (interval <= 0: never).
func (s *Store) RunCursorVacuum(ctx context.Context, interval time.Duration) {
	if interval <= 0 || s.citus != nil {
		return
	}
	runEvery(ctx, interval, func() {
		if err := s.VacuumCursors(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn().Err(err).Msg("cursor table vacuum failed")
		}
	})
}
