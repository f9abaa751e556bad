package sqlstore

import (
	"context"
	"testing"
	"time"
)

// runEvery keeps calling its pass until the context ends, then returns.
func TestRunEveryRunsUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	passes := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		runEvery(ctx, time.Millisecond, func() {
			passes++
			if passes == 3 {
				cancel()
			}
		})
	}()
	<-done
	if passes != 3 {
		t.Fatalf("runEvery ran %d passes after the context ended at the third, want 3", passes)
	}
}
