package wire

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// settleCall is one SettleDelivery call.
type settleCall struct {
	lease    partition.UUID
	consumed bool
}

// deliveryBackend pops one message per call (after popGate returns) and
// records how each lease was settled.
type deliveryBackend struct {
	nilBackend
	popGate func(ctx context.Context)

	mu      sync.Mutex
	leases  []partition.UUID
	settled []settleCall
	// seen is, per pop, how many settle calls had happened when it ran.
	seen []int
}

// Current: maintenance is off.
func (b *deliveryBackend) Current() reginatype.MaintenanceState { return reginatype.MaintenanceState{} }

func (b *deliveryBackend) Pop(ctx context.Context, req reginatype.PopRequest, _ time.Duration) (reginatype.PopResult, error) {
	if req.AutoAck {
		return reginatype.PopResult{}, errors.New("the store was asked for an autoAck pop")
	}
	b.popGate(ctx)
	lease := partition.NewV7()
	b.mu.Lock()
	b.leases = append(b.leases, lease)
	b.seen = append(b.seen, len(b.settled))
	b.mu.Unlock()
	pid := partition.NewV7()
	return reginatype.PopResult{LeaseID: lease,
		Claimed: []reginatype.ClaimedPartition{{ID: pid, Name: "p"}},
		Messages: []reginatype.PoppedMessage{{Frame: partition.Frame{MessageID: partition.NewV7(),
			Body: partition.Body{TransactionID: "t", Payload: []byte(`{"n":1}`)}}, PartitionID: pid, PartitionName: "p"}}}, nil
}

func (b *deliveryBackend) SettleDelivery(_ context.Context, _ string, _ []partition.UUID, lease partition.UUID, consumed bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.settled = append(b.settled, settleCall{lease, consumed})
	return nil
}

func (b *deliveryBackend) calls() ([]partition.UUID, []settleCall) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]partition.UUID(nil), b.leases...), append([]settleCall(nil), b.settled...)
}

// serveDelivery serves b on a loopback port and returns its address.
func serveDelivery(t *testing.T, b *deliveryBackend) string {
	t.Helper()
	nb := newNilBackend()
	nb.Popper, nb.Acker, nb.Maintenance = b, b, b
	s := New(nb, Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, s.Shutdown(ctx))
		require.NoError(t, <-done)
	})
	return ln.Addr().String()
}

// A long poll that takes a message just as its client leaves (the store
// answered after the client's connection closed) writes nothing and
// releases the lease at once; with autoAck nothing is consumed.
func TestPopForGoneClientReleasesItsLease(t *testing.T) {
	t.Parallel()
	for _, autoAck := range []bool{false, true} {
		t.Run(fmt.Sprintf("autoAck=%t", autoAck), func(t *testing.T) {
			t.Parallel()
			popping := make(chan struct{})
			b := &deliveryBackend{popGate: func(ctx context.Context) {
				close(popping)
				<-ctx.Done() // the client's watch saw it leave
			}}
			addr := serveDelivery(t, b)
			c, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			_, err = fmt.Fprintf(c, "GET /api/v1/pop/queue/q?wait=true&timeout=60000&autoAck=%t HTTP/1.1\r\nHost: r\r\n\r\n", autoAck)
			require.NoError(t, err)
			<-popping
			require.NoError(t, c.Close())
			require.Eventually(t, func() bool {
				_, settled := b.calls()
				return len(settled) > 0
			}, 10*time.Second, 5*time.Millisecond)
			leases, settled := b.calls()
			require.Equal(t, []settleCall{{leases[0], false}}, settled)
		})
	}
}

// A live client's answer keeps its lease (a plain pop: nothing to settle)
// or, with autoAck, is consumed once written and before the connection's
// next request is read.
func TestPopAnsweredSettlesBeforeTheNextRequest(t *testing.T) {
	t.Parallel()
	for _, autoAck := range []bool{false, true} {
		t.Run(fmt.Sprintf("autoAck=%t", autoAck), func(t *testing.T) {
			t.Parallel()
			b := &deliveryBackend{popGate: func(context.Context) {}}
			addr := serveDelivery(t, b)
			c, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer c.Close()
			br := bufio.NewReader(c)
			for i := range 2 {
				_, err = fmt.Fprintf(c, "GET /api/v1/pop/queue/q?autoAck=%t HTTP/1.1\r\nHost: r\r\n\r\n", autoAck)
				require.NoError(t, err)
				resp, err := http.ReadResponse(br, nil)
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, resp.StatusCode)
				require.NoError(t, resp.Body.Close())
				leases, settled := b.calls()
				require.Len(t, leases, i+1)
				if !autoAck {
					require.Empty(t, settled)
					continue
				}
				// The first answer was settled before the second pop ran.
				if i == 1 {
					require.Equal(t, settleCall{leases[0], true}, settled[0])
					b.mu.Lock()
					require.Equal(t, []int{0, 1}, b.seen)
					b.mu.Unlock()
				}
			}
			if autoAck {
				require.Eventually(t, func() bool {
					leases, settled := b.calls()
					return len(settled) == 2 && settled[1] == settleCall{leases[1], true}
				}, 10*time.Second, 5*time.Millisecond)
			}
		})
	}
}
