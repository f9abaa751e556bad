package procstat

import (
	"net"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestListenInodes(t *testing.T) {
	t.Parallel()
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1A22 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 555 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1A22 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 556 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:1538 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 557 1 0000000000000000 100 0 0 10 0
`
	// 0x1A22 = 6690; only the listening socket counts.
	require.Equal(t, map[string]bool{"555": true}, listenInodes(table, 6690))
	require.Empty(t, listenInodes(table, 6632))
}

func TestListenerPIDFindsThisProcess(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	require.Equal(t, os.Getpid(), ListenerPID("/proc", ln.Addr().(*net.TCPAddr).Port))
}

func TestLocalPort(t *testing.T) {
	t.Parallel()
	require.Equal(t, 6690, LocalPort("http://127.0.0.1:6690"))
	require.Equal(t, 80, LocalPort("http://localhost"))
	require.Equal(t, 6632, LocalPort("http://[::1]:6632"))
	require.Zero(t, LocalPort("http://broker.example:6632"), "a remote broker is not looked up locally")
}
