package actor

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// syncBuffer is a bytes.Buffer safe for the actors' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A reused transaction id is warned about with its queue, partition and
// transaction id, a few times per period whatever the rate; every mismatch is
// answered and counted.
func TestPayloadMismatchWarningIsRateLimited(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	st.check = partition.PayloadCheckReport
	var logs syncBuffer
	reg := NewRegistry(st, Config{Logger: zerolog.New(&logs)})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, reg.Close(ctx))
	})
	first := &reginatype.PushGroup{Queue: "q", Partition: "p",
		Items: []reginatype.PushItem{{TransactionID: "key", Payload: []byte(`1`)}}}
	reg.Push(context.Background(), []*reginatype.PushGroup{first})
	require.NoError(t, first.Err)
	const n = 3 * mismatchLogBurst
	for i := range n {
		g := &reginatype.PushGroup{Queue: "q", Partition: "p",
			Items: []reginatype.PushItem{{TransactionID: "key", Payload: []byte(`2`)}, {TransactionID: "key", Payload: []byte(`1`)}}}
		reg.Push(context.Background(), []*reginatype.PushGroup{g})
		require.NoError(t, g.Err, "push %d", i)
		require.Equal(t, []string{"duplicate", "duplicate"}, statuses(g))
		require.Equal(t, partition.PayloadDifferent, g.Results[0].Payload)
		require.Equal(t, partition.PayloadSame, g.Results[1].Payload, "a repeat is compared with the message it names")
		require.Equal(t, first.Results[0].MessageID, g.Results[0].MessageID)
	}
	lines := strings.Count(logs.String(), "transaction id reused with a different payload")
	require.Positive(t, lines)
	require.LessOrEqual(t, lines, 2*mismatchLogBurst, "rate-limited: %d warnings for %d mismatches", lines, n)
	for _, want := range []string{`"queue":"q"`, `"partition":"p"`, `"transactionId":"key"`,
		`"originalMessageId":"` + first.Results[0].MessageID.String() + `"`, `"level":"warn"`} {
		require.Contains(t, logs.String(), want)
	}
}
