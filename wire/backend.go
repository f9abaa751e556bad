package wire

import (
	"context"
	"time"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// The broker behind the HTTP API, as wire needs it: one small interface per
// concern, each implemented elsewhere (cmd/regina wires the real ones: the
// actor registry pushes, actor.Linked adds the push pipeline's signals and
// cache bookkeeping to a few store calls, and the store answers the rest).

// Pusher runs pushes: it fills each group's verdicts or error (see
// actor.Registry.Push).
type Pusher interface {
	Push(ctx context.Context, groups []*reginatype.PushGroup)
}

// Popper delivers messages; with wait > 0 an empty pop waits up to wait for
// a push.
type Popper interface {
	Pop(ctx context.Context, req reginatype.PopRequest, wait time.Duration) (reginatype.PopResult, error)
}

// Acker applies acknowledgements and extends leases.
type Acker interface {
	Ack(ctx context.Context, group string, items []reginatype.AckItem) ([]reginatype.AckResult, error)
	// ExtendLease returns the new expiry, whether the lease was extended,
	// and (when not) whether it had expired rather than being unknown.
	ExtendLease(ctx context.Context, leaseID partition.UUID, seconds int) (expires time.Time, ok, expired bool, err error)
	// SettleDelivery ends the lease a pop took on partitions once its
	// answer's fate is known: consumed moves the cursors past the leased
	// messages (an autoAck answer that was written), otherwise the lease is
	// released at once (see sqlstore.Store.SettleDelivery).
	SettleDelivery(ctx context.Context, group string, partitions []partition.UUID, lease partition.UUID, consumed bool) error
}

// Transactor runs pushes and acks atomically.
type Transactor interface {
	Transaction(ctx context.Context, pushes []reginatype.TxnPush, acks []reginatype.TxnAck,
		requiredLeases []partition.UUID) (reginatype.TxnResult, error)
}

// Replayer puts a dead letter back into its partition as a new message.
type Replayer interface {
	ReplayDLQ(ctx context.Context, partitionID partition.UUID, txID, group string) ([]reginatype.Replayed, error)
}

// QueueDeleter deletes a queue and everything in it.
type QueueDeleter interface {
	DeleteQueue(ctx context.Context, queue string) (existed bool, err error)
}

// Admin configures queues and answers the read-only views.
type Admin interface {
	Configure(ctx context.Context, queue, namespace, task string, o partition.QueueOptions) (reginatype.ConfiguredQueue, error)
	ListQueues(ctx context.Context) ([]reginatype.QueueSummary, error)
	QueueDetails(ctx context.Context, f reginatype.QueueFilter) ([]reginatype.QueueDetail, time.Time, error)
	ListMessages(ctx context.Context, f reginatype.MessageFilter) ([]reginatype.StoredMessage, int64, error)
	GetMessage(ctx context.Context, partitionID partition.UUID, txID string) (reginatype.StoredMessage, bool, error)
	// DeleteMessage deletes the stored copies of a message and returns how
	// many there were (0: not found); its hash stays (see
	// sqlstore.Store.DeleteMessage).
	DeleteMessage(ctx context.Context, partitionID partition.UUID, txID string) (int, error)
	ListDLQ(ctx context.Context, f reginatype.DLQFilter) ([]reginatype.DeadLetter, int64, error)
	// DeadLetterOf returns the error and retry count of a dead letter of
	// the message at offset (the first group's); found is false when none.
	DeadLetterOf(ctx context.Context, partitionID partition.UUID, offset int64) (errMsg string, retries int,
		found bool, err error)
	Explain(ctx context.Context, keys []reginatype.ExplainKey) ([]reginatype.ExplainResult, error)
}

// Groups moves and deletes consumer groups' cursors.
type Groups interface {
	DeleteConsumerGroup(ctx context.Context, group, queue string, deleteMetadata bool) (int64, error)
	// Seek moves the group's existing cursors on the queue (one partition
	// when partition is not empty): to the end when at is zero, else past
	// the messages stored up to at.
	Seek(ctx context.Context, group, queue, partition string, at time.Time) (reginatype.SeekResult, error)
	// GroupCursors lists every group's cursors (one group's when group is
	// not empty) and the time they were read at.
	GroupCursors(ctx context.Context, group string) ([]reginatype.GroupCursor, time.Time, error)
	SetSubscription(ctx context.Context, group string, at time.Time) (int64, error)
}

// Tracer records and reads trace events (see sqlstore.Store.AddTrace).
type Tracer interface {
	// AddTrace fills ev's Offset and CreatedAt; found is false when the
	// message is not stored.
	AddTrace(ctx context.Context, ev *reginatype.TraceEvent) (found bool, err error)
	Traces(ctx context.Context, partitionID partition.UUID, txID string) ([]reginatype.TraceEvent, error)
	TracesByName(ctx context.Context, name string, limit, offset int) ([]reginatype.TraceEvent, int64, error)
	TraceNames(ctx context.Context, limit, offset int) ([]reginatype.TraceName, int64, error)
}

// Streams registers stream queries and reads their state (the streams v1
// API; see sqlstore.Store.RegisterStream).
type Streams interface {
	RegisterStream(ctx context.Context, q reginatype.StreamQuery) (reginatype.StreamRegistration, error)
	StreamState(ctx context.Context, f reginatype.StateFilter) ([]reginatype.StateRow, error)
}

// Cycler commits stream cycles: state ops, sink pushes and an ack in one
// transaction (see actor.Linked.StreamCycle).
type Cycler interface {
	StreamCycle(ctx context.Context, c reginatype.StreamCycle) (reginatype.CycleResult, error)
}

// StatsStore keeps the per-minute counters and process samples and answers
// the summaries of the status and analytics views (see sqlstore.Store's
// methods of the same names).
type StatsStore interface {
	RecordStats(ctx context.Context, instance string, rows []reginatype.MinuteStats,
		sys []reginatype.SystemMinute) error
	PurgeStats(ctx context.Context, before time.Time) error
	StatsSeries(ctx context.Context, q reginatype.StatsQuery) ([]reginatype.StatsPoint, error)
	SystemSamples(ctx context.Context, from, to time.Time) ([]reginatype.SystemMinute, error)
	PartitionsCreated(ctx context.Context, from, to time.Time, bucket time.Duration,
		queue string) ([]reginatype.BucketCount, error)
	PartitionsBefore(ctx context.Context, at time.Time, queues []string) (map[string]int64, error)
	SampledBuckets(ctx context.Context, from, to time.Time, bucket time.Duration) ([]time.Time, error)
	Leases(ctx context.Context) (reginatype.LeaseSummary, error)
	TopDLQErrors(ctx context.Context, from, to time.Time, limit int) ([]reginatype.ErrorCount, error)
	// PostgresStats is a snapshot of the database's own statistics for the
	// broker's schema (GET /api/v1/analytics/postgres-stats).
	PostgresStats(ctx context.Context) (map[string]any, error)
}

// Pipeline reports the push pipeline's backlog for the status views'
// job-queue figures (see actor.Registry.MailboxPeak).
type Pipeline interface {
	// MailboxPeak returns the most push items waiting in the mailboxes at
	// any instant since the previous call.
	MailboxPeak() int
}

// Pinger checks the database.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Readiness reports what GET /ready checks: the database (a short ping on
// a read-write session), the schema's migrations and mailbox pressure.
type Readiness interface {
	Readiness(ctx context.Context) reginatype.Readiness
}

// Backend is everything the server calls. Every field is required.
type Backend struct {
	Pusher       Pusher
	Popper       Popper
	Acker        Acker
	Transactor   Transactor
	Replayer     Replayer
	QueueDeleter QueueDeleter
	Admin        Admin
	Groups       Groups
	Traces       Tracer
	Streams      Streams
	Cycler       Cycler
	Stats        StatsStore
	Pinger       Pinger
	Readiness    Readiness
	Maintenance  Maintenance
	Pipeline     Pipeline
}

// mustBeComplete panics naming the first nil field.
func (b *Backend) mustBeComplete() {
	for _, f := range []struct {
		name string
		nil  bool
	}{
		{"Pusher", b.Pusher == nil}, {"Popper", b.Popper == nil}, {"Acker", b.Acker == nil},
		{"Transactor", b.Transactor == nil}, {"Replayer", b.Replayer == nil},
		{"QueueDeleter", b.QueueDeleter == nil}, {"Admin", b.Admin == nil}, {"Groups", b.Groups == nil},
		{"Traces", b.Traces == nil}, {"Streams", b.Streams == nil}, {"Cycler", b.Cycler == nil},
		{"Stats", b.Stats == nil}, {"Pinger", b.Pinger == nil}, {"Readiness", b.Readiness == nil},
		{"Maintenance", b.Maintenance == nil}, {"Pipeline", b.Pipeline == nil},
	} {
		if f.nil {
			panic("wire.New: Backend." + f.name + " is nil")
		}
	}
}
