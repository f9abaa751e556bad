package reginatype_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/reginatype"
)

// stateError stands for a driver error carrying a SQLSTATE (as pgx's
// *pgconn.PgError does).
type stateError struct{ code string }

func (e *stateError) Error() string    { return "database error " + e.code }
func (e *stateError) SQLState() string { return e.code }

func TestIsRetryable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"outcome unknown", fmt.Errorf("push q/p: %w", reginatype.ErrOutcomeUnknown), true},
		{"unavailable", fmt.Errorf("%w: dial", reginatype.ErrUnavailable), true},
		{"mailbox full", reginatype.ErrMailboxFull, true},
		{"shutting down", reginatype.ErrShuttingDown, true},
		{"serialization failure", &stateError{"40001"}, true},
		{"deadlock, wrapped", fmt.Errorf("txn: %w", &stateError{"40P01"}), true},
		{"too many connections", &stateError{"53300"}, true},
		{"admin shutdown", &stateError{"57P01"}, true},
		{"connection failure", &stateError{"08006"}, true},
		{"lock not available", &stateError{"55P03"}, true},
		{"unique violation", &stateError{"23505"}, false},
		{"syntax error", &stateError{"42601"}, false},
		{"short code", &stateError{"4"}, false},
		{"partition missing", reginatype.ErrPartitionMissing, false},
		{"not in DLQ", reginatype.ErrNotInDLQ, false},
		{"lease not live", reginatype.ErrLeaseNotLive, false},
		{"duplicate in a transaction", &reginatype.DuplicateError{Queue: "q"}, false},
		{"plain context cancel", context.Canceled, false},
		{"other", errors.New("boom"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, reginatype.IsRetryable(tc.err))
		})
	}
}
