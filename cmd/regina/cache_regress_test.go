package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func cacheHits(t *testing.T, b *testBroker) float64 {
	t.Helper()
	status, body := do(t, "GET", b.URL+"/metrics", nil)
	require.Equal(t, http.StatusOK, status)
	var m struct {
		DedupCache struct {
			Hits float64 `json:"hits"`
		} `json:"dedupCache"`
	}
	require.NoError(t, json.Unmarshal(body, &m))
	return m.DedupCache.Hits
}

// TestCacheLearnsOnlyWhatWasStored is the regression test for a bug the
// fault harness found: after a push that mixed new items with in-window
// duplicates, the cache was taught the duplicates' hashes too, so its
// "known up to" offset ran past the segment actually written; the next
// segment's hashes were then never learnt, and a repeat of them was given a
// watermark above them and stored a second time.
func TestCacheLearnsOnlyWhatWasStored(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	// Warm the partition's cache until watermarks are being answered.
	n := 0
	checkFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		b.push(t, item{"queue": "c", "partition": "p", "transactionId": fmt.Sprintf("warm-%d", n)})
		n++
		if cacheHits(t, b) == 0 {
			return errNotYet
		}
		return nil
	})
	for round := range 5 {
		a := fmt.Sprintf("r%d-a", round)
		c1, c2 := fmt.Sprintf("r%d-c1", round), fmt.Sprintf("r%d-c2", round)
		require.Equal(t, "queued", b.push(t, item{"queue": "c", "partition": "p", "transactionId": a})[0].Status)
		// A segment holding one new item; the batch also carried a duplicate.
		mixed := b.push(t, item{"queue": "c", "partition": "p", "transactionId": a},
			item{"queue": "c", "partition": "p", "transactionId": fmt.Sprintf("r%d-b", round)})
		require.Equal(t, []string{"duplicate", "queued"}, statuses(mixed))
		first := b.push(t, item{"queue": "c", "partition": "p", "transactionId": c1},
			item{"queue": "c", "partition": "p", "transactionId": c2})
		require.Equal(t, []string{"queued", "queued"}, statuses(first))
		again := b.push(t, item{"queue": "c", "partition": "p", "transactionId": c1},
			item{"queue": "c", "partition": "p", "transactionId": c2})
		require.Equal(t, []string{"duplicate", "duplicate"}, statuses(again), "round %d", round)
		require.Equal(t, first[0].MessageID, again[0].MessageID)
	}
	require.Greater(t, cacheHits(t, b), float64(5), "the watermark path was exercised")
	_, frames, _, _, next := d.partitionStats(t, "c", "p")
	require.Equal(t, int64(n+5*4), frames)
	require.Equal(t, frames, next)
}
