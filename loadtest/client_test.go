package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNewClientURL(t *testing.T) {
	t.Parallel()
	c, err := NewClient("http://127.0.0.1", "", 0)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:80", c.hc.Addr)
	_, err = NewClient("ftp://x", "", 0)
	require.Error(t, err)
	_, err = NewClient("http://", "", 0)
	require.Error(t, err)
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	o, err := parseFlags(nil, nil)
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:6632", o.url)
	require.Equal(t, "loadtest", o.queue)
	require.Equal(t, 16, o.connections)
	require.Equal(t, 16, o.partitions)
	require.Equal(t, 10, o.items)
	require.Equal(t, 200, o.payload)
	require.Equal(t, -1, o.dedupWindow)
	require.Equal(t, "c16-p16-i10", o.label)

	o, err = parseFlags([]string{"-rate", "500", "-dup-ratio", "0.5"}, nil)
	require.NoError(t, err)
	require.Equal(t, "c16-p16-i10-r500-dup0.5", o.label)

	for _, bad := range [][]string{{"-dup-ratio", "1.5"}, {"-connections", "0"}, {"-duration", "0s"}, {"-dedup-window", "-2"}, {"extra"}} {
		_, err := parseFlags(bad, nil)
		require.Error(t, err, "%v", bad)
	}
}
