package main

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/segmentio/encoding/json"
	"github.com/stretchr/testify/require"
)

type sentItem struct {
	Queue         string `json:"queue"`
	Partition     string `json:"partition"`
	TransactionID string `json:"transactionId"`
	Payload       struct {
		Seq  int64  `json:"seq"`
		W    int    `json:"w"`
		Data string `json:"data"`
	} `json:"payload"`
}

func decodeBody(t *testing.T, b *Body) []sentItem {
	t.Helper()
	var top struct {
		Items []sentItem `json:"items"`
	}
	require.NoError(t, json.Unmarshal(b.Data, &top), "%s", b.Data)
	return top.Items
}

func TestBodyBuilderShape(t *testing.T) {
	t.Parallel()
	b := NewBodyBuilder("run1", `q"uote`, 3, 4, 5, 200, 42)
	seen := map[string]bool{}
	parts := map[string]int{}
	for seq := range 200 {
		body := b.Next()
		items := decodeBody(t, body)
		require.Len(t, items, 5)
		require.Equal(t, 5, body.Items)
		require.Equal(t, 3, body.Worker)
		require.Equal(t, int64(seq), body.Seq)
		for i, it := range items {
			require.Equal(t, `q"uote`, it.Queue)
			require.Equal(t, PartitionName(body.Partition), it.Partition, "one partition per push")
			require.Equal(t, "run1-3-"+strconv.Itoa(seq)+"-"+strconv.Itoa(i), it.TransactionID)
			require.False(t, seen[it.TransactionID])
			seen[it.TransactionID] = true
			payload, err := json.Marshal(it.Payload)
			require.NoError(t, err)
			require.InDelta(t, 200, len(payload), 10, "payload about -payload bytes: %s", payload)
		}
		parts[items[0].Partition]++
	}
	// Uniform over 4 partitions: each gets a fair share of 200 pushes.
	require.Len(t, parts, 4)
	for p, n := range parts {
		require.Greater(t, n, 25, "partition %s", p)
	}
}

func TestBodyBuilderTinyPayload(t *testing.T) {
	t.Parallel()
	b := NewBodyBuilder("r", "q", 0, 1, 1, 0, 1)
	items := decodeBody(t, b.Next())
	require.Len(t, items, 1)
	require.Empty(t, items[0].Payload.Data)
	require.Equal(t, "p0", items[0].Partition)
}

func TestChooseBodyResendsAnEarlierBodyExactly(t *testing.T) {
	t.Parallel()
	b := NewBodyBuilder("run", "q", 0, 16, 10, 100, 7)
	ring := NewDupRing(8)
	rnd := rand.New(rand.NewPCG(1, 1))

	// Empty ring: even at ratio 1 the push is fresh.
	first, resent := ChooseBody(rnd, 1, ring, b)
	require.False(t, resent)
	earlier := map[*Body][]byte{first: bytes.Clone(first.Data)}
	ring.Add(first)

	resends := 0
	for range 2000 {
		body, resent := ChooseBody(rnd, 0.5, ring, b)
		if !resent {
			_, known := earlier[body]
			require.False(t, known, "a fresh push is new")
			earlier[body] = bytes.Clone(body.Data)
			ring.Add(body)
			continue
		}
		resends++
		orig, ok := earlier[body]
		require.True(t, ok, "a resend is an earlier push")
		require.Equal(t, orig, body.Data, "byte for byte: same transaction ids, same partition")
		require.Equal(t, decodeBody(t, body)[0].Partition, PartitionName(body.Partition))
	}
	require.InDelta(t, 1000, resends, 150)
}

func TestChooseBodyRatioZeroNeverResends(t *testing.T) {
	t.Parallel()
	b := NewBodyBuilder("run", "q", 0, 2, 1, 10, 7)
	ring := NewDupRing(4)
	rnd := rand.New(rand.NewPCG(2, 2))
	for range 100 {
		body, resent := ChooseBody(rnd, 0, ring, b)
		require.False(t, resent)
		ring.Add(body)
	}
}

func TestDupRingIsBounded(t *testing.T) {
	t.Parallel()
	ring := NewDupRing(3)
	rnd := rand.New(rand.NewPCG(3, 3))
	_, ok := ring.Pick(rnd)
	require.False(t, ok)
	bodies := make([]*Body, 10)
	for i := range bodies {
		bodies[i] = &Body{Seq: int64(i)}
		ring.Add(bodies[i])
	}
	require.Equal(t, 3, ring.Len())
	picked := map[int64]bool{}
	for range 300 {
		b, ok := ring.Pick(rnd)
		require.True(t, ok)
		picked[b.Seq] = true
	}
	// Only the three most recent pushes are drawn, all of them.
	require.Equal(t, map[int64]bool{7: true, 8: true, 9: true}, picked)
}

// TestBodyBuilderRotate: builders sharing a cursor write the partitions in
// turn, each item of a push naming the push's partition.
func TestBodyBuilderRotate(t *testing.T) {
	t.Parallel()
	var cursor atomic.Uint64
	a := NewBodyBuilder("run1", "q", 0, 5, 2, 10, 1)
	b := NewBodyBuilder("run1", "q", 1, 5, 2, 10, 1)
	a.Rotate(&cursor)
	b.Rotate(&cursor)
	for k := range 12 {
		w := a
		if k%3 == 2 {
			w = b
		}
		body := w.Next()
		require.Equal(t, k%5, body.Partition, "push %d", k)
		for _, it := range decodeBody(t, body) {
			require.Equal(t, PartitionName(k%5), it.Partition)
		}
	}
}
