package wire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/metrics"
	"github.com/regina-mq/regina/reginatype"
)

// heldAcker answers an ack only once released; if the context it was given
// ends first, it answers that context's error, as a store call cut short does.
type heldAcker struct {
	nilBackend
	entered, release chan struct{}
}

func (a heldAcker) Ack(ctx context.Context, _ string, items []reginatype.AckItem) ([]reginatype.AckResult, error) {
	close(a.entered)
	select {
	case <-a.release:
		res := make([]reginatype.AckResult, len(items))
		for i := range res {
			res[i].Success = true
		}
		return res, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("ack: %w", ctx.Err())
	}
}

// An ack already being applied when the broker starts its graceful shutdown
// gets its real answer: the shutdown waits for it instead of cutting it
// short into a 500 (the fault soak's "ack batch answered 500: context
// canceled").
func TestAckInFlightAtShutdownIsAnswered(t *testing.T) {
	t.Parallel()
	a := heldAcker{entered: make(chan struct{}), release: make(chan struct{})}
	b := newNilBackend()
	b.Acker = a
	s := New(b, Config{Metrics: metrics.New(metrics.Config{})})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()

	type answer struct {
		status int
		body   string
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := http.Post("http://"+ln.Addr().String()+"/api/v1/ack/batch", "application/json",
			strings.NewReader(`{"consumerGroup":"g","acknowledgments":[{"transactionId":"t1","partitionId":"`+
				"00000000-0000-0000-0000-000000000001"+`","leaseId":"00000000-0000-0000-0000-000000000002","status":"completed"}]}`))
		if err != nil {
			answered <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		answered <- answer{status: resp.StatusCode, body: string(body)}
	}()
	select {
	case <-a.entered:
	case got := <-answered:
		t.Fatalf("the ack never reached the acker: %+v", got)
	}

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	// Shutdown has begun once the listener refuses new connections.
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return true
		}
		_ = c.Close()
		return false
	}, 5*time.Second, 5*time.Millisecond)
	close(a.release)

	got := <-answered
	require.NoError(t, got.err)
	require.Equal(t, http.StatusOK, got.status, got.body)
	require.Contains(t, got.body, `"success":true`)
	require.NoError(t, <-shut)
	require.NoError(t, <-served)
}

// No error of the broker core becomes a 500 when it only says the request's
// context ended: the outcome is unknown, and a retry is safe.
func TestContextErrorsAreOutcomeUnknown(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		fmt.Errorf("pop q: %w", context.Canceled),
		fmt.Errorf("ack: %w", context.DeadlineExceeded),
		fmt.Errorf("wrapped: %w", reginatype.ErrOutcomeUnknown),
	} {
		status, msg := errorStatus(err)
		require.Equal(t, fasthttp.StatusServiceUnavailable, status, "%v", err)
		require.Contains(t, msg, "Outcome unknown")
	}
	status, _ := errorStatus(errors.New("some database failure"))
	require.Equal(t, fasthttp.StatusInternalServerError, status)
}
