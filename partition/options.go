package partition

// QueueOptions are the options of a queue, as POST /api/v1/configure sets them
// (a full replace: every option left out takes its default). Durations are in
// the units Queen uses: seconds, except RetryDelay in milliseconds.
type QueueOptions struct {
	LeaseTime                 int  `json:"leaseTime"`
	RetryLimit                int  `json:"retryLimit"`
	RetryDelay                int  `json:"retryDelay"`
	MaxSize                   int  `json:"maxSize"`
	TTL                       int  `json:"ttl"`
	Priority                  int  `json:"priority"`
	DelayedProcessing         int  `json:"delayedProcessing"`
	WindowBuffer              int  `json:"windowBuffer"`
	DeadLetterQueue           bool `json:"deadLetterQueue"`
	DLQAfterMaxRetries        bool `json:"dlqAfterMaxRetries"`
	RetentionEnabled          bool `json:"retentionEnabled"`
	RetentionSeconds          int  `json:"retentionSeconds"`
	CompletedRetentionSeconds int  `json:"completedRetentionSeconds"`
	MaxWaitTimeSeconds        int  `json:"maxWaitTimeSeconds"`
	EncryptionEnabled         bool `json:"encryptionEnabled"`
	// DedupWindowSeconds is how long a transaction id stays a duplicate after
	// its original was committed; 0 disables the check.
	DedupWindowSeconds int `json:"dedupWindowSeconds"`
	// DedupPayloadCheck is what a duplicate's payload is compared with:
	// PayloadCheckOff (nothing stored, nothing compared), PayloadCheckReport
	// (a duplicate with another payload is answered duplicate with
	// payloadMismatch) or PayloadCheckReject (it is answered conflict).
	DedupPayloadCheck PayloadCheck `json:"dedupPayloadCheck"`
}

// DefaultDedupWindowSeconds is the deduplication window of a queue configured
// without dedupWindowSeconds.
const DefaultDedupWindowSeconds = 3600

// DefaultQueueOptions returns the options of a queue created by a push or
// configured with no options. It is the only place these defaults are written
// down: the queues table has no DEFAULT for them, and the broker passes these
// values whenever it creates a queue.
func DefaultQueueOptions() QueueOptions {
	return QueueOptions{
		LeaseTime:          300,
		RetryLimit:         3,
		RetryDelay:         1000,
		TTL:                3600,
		DedupWindowSeconds: DefaultDedupWindowSeconds,
		DedupPayloadCheck:  PayloadCheckOff,
	}
}

// SidecarRetentionSeconds is how long the hash sidecar keeps a segment's
// hashes: GREATEST(dedup window, completedRetentionSeconds, 900).
func (o QueueOptions) SidecarRetentionSeconds() int {
	return max(o.DedupWindowSeconds, o.CompletedRetentionSeconds, MinSidecarRetentionSeconds)
}

// MinSidecarRetentionSeconds is the floor of the hash sidecar's depth: acks
// resolve transaction ids through it even when deduplication is off.
const MinSidecarRetentionSeconds = 900
