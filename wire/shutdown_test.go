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
	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// heldBackend answers an ack or a transaction only once released; if the
// context it was given ends first, it answers that context's error, as a
// store call cut short does.
type heldBackend struct {
	nilBackend
	entered, release chan struct{}
}

func (h heldBackend) wait(ctx context.Context) error {
	close(h.entered)
	select {
	case <-h.release:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("held: %w", ctx.Err())
	}
}

func (h heldBackend) Ack(ctx context.Context, _ string, items []reginatype.AckItem) ([]reginatype.AckResult, error) {
	if err := h.wait(ctx); err != nil {
		return nil, err
	}
	res := make([]reginatype.AckResult, len(items))
	for i := range res {
		res[i].Success = true
	}
	return res, nil
}

func (h heldBackend) Transaction(ctx context.Context, _ []reginatype.TxnPush, acks []reginatype.TxnAck,
	_ []partition.UUID) (reginatype.TxnResult, error) {
	if err := h.wait(ctx); err != nil {
		return reginatype.TxnResult{}, err
	}
	res := reginatype.TxnResult{Acks: make([]reginatype.AckResult, len(acks))}
	for i := range res.Acks {
		res.Acks[i].Success = true
	}
	return res, nil
}

// A write already being applied when the broker starts its graceful
// shutdown gets its real answer: the shutdown waits for it instead of
// cutting it short (the fault soak's "ack batch answered 500: context
// canceled"). An ack and a transaction (finishing).
func TestWriteInFlightAtShutdownIsAnswered(t *testing.T) {
	t.Parallel()
	const lease = `"partitionId":"00000000-0000-0000-0000-000000000001","leaseId":"00000000-0000-0000-0000-000000000002"`
	for _, tc := range []struct{ name, path, body string }{
		{"ack", "/api/v1/ack/batch", `{"consumerGroup":"g","acknowledgments":[{"transactionId":"t1",` + lease + `,"status":"completed"}]}`},
		{"transaction", "/api/v1/transaction", `{"operations":[{"type":"ack","transactionId":"t1",` + lease + `,"status":"completed"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := heldBackend{entered: make(chan struct{}), release: make(chan struct{})}
			b := newNilBackend()
			b.Acker, b.Transactor = h, h
			status, body := answerAcrossShutdown(t, b, h, tc.path, tc.body)
			require.Equal(t, http.StatusOK, status, body)
			require.Contains(t, body, `"success":true`)
		})
	}
}

// answerAcrossShutdown serves b, posts body to path, starts the server's
// shutdown once h holds the request, releases h once new connections are
// refused, and returns the answer.
func answerAcrossShutdown(t *testing.T, b Backend, h heldBackend, path, body string) (int, string) {
	t.Helper()
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
		resp, err := http.Post("http://"+ln.Addr().String()+path, "application/json", strings.NewReader(body))
		if err != nil {
			answered <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answered <- answer{status: resp.StatusCode, body: string(b)}
	}()
	select {
	case <-h.entered:
	case got := <-answered:
		t.Fatalf("the request never reached the backend: %+v", got)
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
	close(h.release)

	got := <-answered
	require.NoError(t, got.err)
	require.NoError(t, <-shut)
	require.NoError(t, <-served)
	return got.status, got.body
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
