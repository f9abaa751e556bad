package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMemoryLimit(t *testing.T) {
	t.Parallel()
	def, err := configTestLoad(t, nil, nil)
	require.NoError(t, err)
	limit, why := memoryLimit(def, false)
	require.Equal(t, int64(512+memoryOverheadMB)<<20, limit, "default: the 512 MiB cache budget + the overhead")
	require.Contains(t, why, "512 MiB")

	small, err := configTestLoad(t, nil, map[string]string{"QUEEN_DEDUP_CACHE_MB": "64"})
	require.NoError(t, err)
	limit, _ = memoryLimit(small, false)
	require.Equal(t, int64(64+memoryOverheadMB)<<20, limit)

	off, err := configTestLoad(t, nil, map[string]string{"QUEEN_DEDUP_CACHE": "false"})
	require.NoError(t, err)
	limit, _ = memoryLimit(off, false)
	require.Equal(t, int64(memoryOverheadMB)<<20, limit, "no cache: its budget is not counted")

	set, err := configTestLoad(t, nil, map[string]string{"MEMORY_LIMIT_MB": "300"})
	require.NoError(t, err)
	limit, why = memoryLimit(set, false)
	require.Equal(t, int64(300)<<20, limit)
	require.Equal(t, "MEMORY_LIMIT_MB", why)

	limit, why = memoryLimit(set, true)
	require.Zero(t, limit, "GOMEMLIMIT set by the user: the runtime applies it, the broker changes nothing")
	require.Equal(t, "GOMEMLIMIT", why)
}
