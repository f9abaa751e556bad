package procstat

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseStat(t *testing.T) {
	t.Parallel()
	// A command name with spaces and a ')' must not shift the fields.
	st, err := ParseStat("4242 (re gina) x) S 17 4242 4242 0 -1 4194560 100 0 0 0 1234 567 0 0 20 0 9 0 5")
	require.NoError(t, err)
	require.Equal(t, Stat{PPID: 17, UTime: 1234, STime: 567}, st)
	_, err = ParseStat("1 (x) S 1")
	require.Error(t, err)
	kb, err := ParseStatusRSS("Name:\tregina\nVmRSS:\t  2048 kB\n")
	require.NoError(t, err)
	require.Equal(t, int64(2048), kb)
	require.Positive(t, ClockTicks())
}
