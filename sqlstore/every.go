package sqlstore

import (
	"context"
	"time"
)

// runEvery calls pass every interval until ctx is done: the first call one
// interval after the start, and a pass that runs longer than the interval
// makes the ticks it overran collapse into one (a time.Ticker). No pass
// starts once ctx is done. The
// background loops (eviction, retention, the maintenance switches) share
// it; each pass handles its own errors.
func runEvery(ctx context.Context, interval time.Duration, pass func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if ctx.Err() != nil { // a tick and the end ready together: select may pick the tick
			return
		}
		pass()
	}
}
