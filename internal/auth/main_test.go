package auth

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves goroutines behind: Close
// must stop the JWKS cache's workers and refreshes.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
