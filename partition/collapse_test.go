package partition

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// collapseTestModel is the obvious definition of Collapse, used as the oracle.
func collapseTestModel(txIDs []string) (leader, leaders []int) {
	leader = make([]int, len(txIDs))
	leaders = []int{}
	for i, id := range txIDs {
		leader[i] = i
		for j := range i {
			if txIDs[j] == id {
				leader[i] = j
				break
			}
		}
		if leader[i] == i {
			leaders = append(leaders, i)
		}
	}
	return leader, leaders
}

// collapseTestNorm makes nil and empty results compare equal.
func collapseTestNorm(s []int) []int { return append([]int{}, s...) }

func TestCollapseTable(t *testing.T) {
	t.Parallel()
	many := make([]string, 20)
	manyLeader := make([]int, 20)
	for i := range many {
		many[i] = "x"
	}
	tests := []struct {
		name    string
		ids     []string
		leader  []int
		leaders []int
	}{
		{"empty", nil, []int{}, []int{}},
		{"one", []string{"a"}, []int{0}, []int{0}},
		{"distinct", []string{"a", "b", "c"}, []int{0, 1, 2}, []int{0, 1, 2}},
		{"pair", []string{"a", "a"}, []int{0, 0}, []int{0}},
		{"first occurrence wins", []string{"a", "b", "a", "c", "b", "a"}, []int{0, 1, 0, 3, 1, 0}, []int{0, 1, 3}},
		{"empty id is an id", []string{"", "a", ""}, []int{0, 1, 0}, []int{0, 1}},
		{"eight, small path", []string{"h", "g", "h", "f", "g", "e", "h", "d"}, []int{0, 1, 0, 3, 1, 5, 0, 7}, []int{0, 1, 3, 5, 7}},
		{"nine, map path", []string{"h", "g", "h", "f", "g", "e", "h", "d", "g"}, []int{0, 1, 0, 3, 1, 5, 0, 7, 1}, []int{0, 1, 3, 5, 7}},
		{"twenty the same", many, manyLeader, []int{0}},
		{
			"map path, late repeats",
			[]string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "9", "0", "5", "new"},
			[]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 0, 5, 13},
			[]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 13},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			leader, leaders := Collapse(tc.ids, nil, nil)
			require.Equal(t, tc.leader, collapseTestNorm(leader))
			require.Equal(t, tc.leaders, collapseTestNorm(leaders))
		})
	}
}

func TestCollapseMatchesModel(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	alphabets := [][]string{
		{"a"},
		{"a", "b"},
		{"a", "b", "c", "d"},
		{"", "tx-1", "tx-2", "tx-3", "tx-4", "tx-5", "tx-6", "tx-7", "tx-8", "tx-9", "tx-10", "tx-11"},
	}
	var leaderBuf, leadersBuf []int
	for iter := range 5000 {
		alpha := alphabets[iter%len(alphabets)]
		n := r.IntN(40)
		if iter%3 == 0 {
			n = r.IntN(9) // exercise the small path often
		}
		ids := make([]string, n)
		for i := range ids {
			ids[i] = alpha[r.IntN(len(alpha))]
		}
		wantLeader, wantLeaders := collapseTestModel(ids)

		// Reused buffers, as the partition actor passes them, start dirty.
		leaderBuf = append(leaderBuf[:0], 99, 98, 97)
		leadersBuf = append(leadersBuf[:0], 42)
		leader, leaders := Collapse(ids, leaderBuf, leadersBuf)
		require.Equal(t, wantLeader, collapseTestNorm(leader), "ids %q", ids)
		require.Equal(t, wantLeaders, collapseTestNorm(leaders), "ids %q", ids)
		leaderBuf, leadersBuf = leader, leaders

		// Every prefix that takes the small path agrees with the full answer,
		// so the quadratic and map paths give the same mapping.
		for k := 0; k <= min(n, 8); k++ {
			pl, pls := Collapse(ids[:k], nil, nil)
			require.Equal(t, collapseTestNorm(leader[:k]), collapseTestNorm(pl), "prefix %d of %q", k, ids)
			wantPls := []int{}
			for _, l := range leaders {
				if l < k {
					wantPls = append(wantPls, l)
				}
			}
			require.Equal(t, wantPls, collapseTestNorm(pls), "prefix %d of %q", k, ids)
		}

		// Structural properties.
		for i, l := range leader {
			require.LessOrEqual(t, l, i)
			require.Equal(t, ids[i], ids[l])
			require.Equal(t, l, leader[l], "a leader leads itself")
		}
		for j := 1; j < len(leaders); j++ {
			require.Less(t, leaders[j-1], leaders[j], "leaders in order")
		}
	}
}

func TestCollapseReusesBuffers(t *testing.T) {
	t.Parallel()
	for _, n := range []int{5, 50} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			t.Parallel()
			ids := make([]string, n)
			for i := range ids {
				ids[i] = strconv.Itoa(i % 3)
			}
			leaderBuf := make([]int, 7, 64)
			leadersBuf := make([]int, 2, 64)
			leader, leaders := Collapse(ids, leaderBuf, leadersBuf)
			require.Len(t, leader, n)
			require.Equal(t, []int{0, 1, 2}, leaders)
			require.Same(t, &leaderBuf[:1][0], &leader[0], "leader reuses the buffer")
			require.Same(t, &leadersBuf[:1][0], &leaders[0], "leaders reuses the buffer")
		})
	}
}

func TestStatusString(t *testing.T) {
	t.Parallel()
	require.Equal(t, "queued", StatusQueued.String())
	require.Equal(t, "duplicate", StatusDuplicate.String())
	require.Equal(t, "unknown", Status(0).String())
	require.Equal(t, "unknown", Status(200).String())
}
