package wire

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// FuzzDecodePush feeds arbitrary bodies to DecodePush. It must never panic,
// and every item it accepts must satisfy the invariants the push path relies
// on.
func FuzzDecodePush(f *testing.F) {
	for _, seed := range []string{
		`{"items":[{"queue":"orders","payload":{"id":1}}]}`,
		`{"items":[{"queue":"orders","partition":"eu-1","transactionId":"order-42","payload":{"b":2, "a":[1,2.50]}}]}`,
		`{"items":[{"queue":"q","traceId":"0190a5b2-3c4d-7e8f-9a0b-1c2d3e4f5a6b","payload":"x"},{"queue":"q","transactionId":"","payload":null}]}`,
		`{"items":[{"queue":"q\u00e9","partition":"p\"1","transactionId":"t\\u2603","payload":[[[{"k":"]"}]]]}]}`,
		`{"items":[{"queue":"q","partition":null,"transactionId":null,"traceId":null}]}`,
		`{"items":[]}`,
		`{"items":[{"queue":1}]}`,
		`{"items":{}}`,
		`[{"queue":"q"}]`,
		`{"items":[{"queue":"q","payload":1e400}]}`,
		`{"items":[{"queue":"q","transactionId":"\ud800"}]}`,
		`{"items":[{"queue":"` + strings.Repeat("q", 255) + `","transactionId":"` + strings.Repeat("t", 255) + `"}]}`,
		"",
		"{\"items\":[{\"queue\":\"\xff\"}]}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		items, err := DecodePush(body)
		if err != nil {
			require.Nil(t, items)
			require.NotEmpty(t, err.Error())
			return
		}
		for i, it := range items {
			require.NotEmpty(t, it.Queue, "item %d", i)
			require.LessOrEqual(t, len(it.Queue), MaxNameLen, "item %d", i)
			require.True(t, utf8.ValidString(it.Queue), "item %d queue %q", i, it.Queue)
			require.NotContains(t, it.Queue, "\x00", "item %d", i)
			require.NotEmpty(t, it.Partition, "item %d", i)
			require.LessOrEqual(t, len(it.Partition), MaxNameLen, "item %d", i)
			require.True(t, utf8.ValidString(it.Partition), "item %d partition %q", i, it.Partition)
			require.NotContains(t, it.Partition, "\x00", "item %d", i)
			require.NotEmpty(t, it.TransactionID, "item %d", i)
			require.LessOrEqual(t, len(it.TransactionID), partition.MaxTxIDLen, "item %d", i)
			require.True(t, utf8.ValidString(it.TransactionID), "item %d tx %q", i, it.TransactionID)
			if it.Minted {
				_, err := partition.ParseUUID(it.TransactionID)
				require.NoError(t, err, "item %d minted tx %q", i, it.TransactionID)
			}
			if !it.HasTrace {
				require.True(t, it.TraceID.IsZero(), "item %d", i)
			}
			require.True(t, json.Valid(it.Payload), "item %d payload %q", i, it.Payload)
			b := partition.Body{TransactionID: it.TransactionID, Payload: it.Payload}
			require.NoError(t, b.Validate(), "item %d", i)
		}
	})
}

// FuzzDecodeConfigure feeds arbitrary bodies to DecodeConfigure. It must never
// panic, and accepted requests must carry a usable queue name and in-range
// options.
func FuzzDecodeConfigure(f *testing.F) {
	for _, seed := range []string{
		`{"queue":"q"}`,
		`{"queue":"orders","namespace":"shop","task":"billing","options":{"leaseTime":60,"retryLimit":5,"dedupWindowSeconds":0,"deadLetterQueue":true}}`,
		`{"queue":"q","options":{"ttl":2147483647,"retryDelay":1e3,"priority":5.0}}`,
		`{"queue":"q","options":{"ttl":-1}}`,
		`{"queue":"q","options":{"maxSize":"10","retentionEnabled":1}}`,
		`{"queue":"q","options":{"encryptionEnabled":true}}`,
		`{"queue":"q","namespace":5,"task":null,"options":{"unknown":[1,{"a":null}]}}`,
		`{"queue":null}`,
		`{"queue":"q\u0000"}`,
		`[]`,
		"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeConfigure(body)
		if err != nil {
			require.NotEmpty(t, err.Error())
			return
		}
		require.NotEmpty(t, req.Queue)
		require.LessOrEqual(t, len(req.Queue), MaxNameLen)
		require.True(t, utf8.ValidString(req.Queue), "queue %q", req.Queue)
		require.NotContains(t, req.Queue, "\x00")
		o := req.Options
		for _, n := range []int{o.LeaseTime, o.RetryLimit, o.RetryDelay, o.MaxSize, o.TTL, o.Priority,
			o.DelayedProcessing, o.WindowBuffer, o.RetentionSeconds, o.CompletedRetentionSeconds,
			o.MaxWaitTimeSeconds, o.DedupWindowSeconds} {
			require.GreaterOrEqual(t, n, 0)
			require.LessOrEqual(t, n, 1<<31-1)
		}
	})
}

// FuzzDecodeTransaction feeds arbitrary bodies to DecodeTransaction (which
// also decodes push items and acks). It must never panic, and what it accepts
// must be usable: indexes cover the flattened operations exactly once, push
// items have a queue and partition, acks have a transaction id and status.
func FuzzDecodeTransaction(f *testing.F) {
	for _, seed := range []string{
		`{"operations":[{"type":"ack","transactionId":"t1","partitionId":"0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","status":"completed"},{"type":"push","items":[{"queue":"out","payload":{"ok":true}}]}],"requiredLeases":["0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"]}`,
		`{"operations":[]}`,
		`{"operations":[{"type":"x"}]}`,
		`{"operations":[{"type":"push","items":[{"queue":"q"},{"queue":"q","transactionId":"a"}]}]}`,
		`{"operations":[{"type":"ack","transactionId":"t","partitionId":"bad"}]}`,
		`{"operations":[{"type":"ack","transactionId":"t","partitionId":"0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","status":"failed"}],"requiredLeases":null}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeTransaction(body)
		if err != nil {
			return
		}
		require.Equal(t, req.Ops, len(req.Pushes)+len(req.Acks))
		seen := make([]bool, req.Ops)
		for _, p := range req.Pushes {
			require.False(t, seen[p.Index])
			seen[p.Index] = true
			require.NotEmpty(t, p.Queue)
			require.NotEmpty(t, p.Partition)
			require.LessOrEqual(t, len(p.TransactionID), partition.MaxTxIDLen)
			require.True(t, json.Valid(p.Payload))
		}
		for _, a := range req.Acks {
			require.False(t, seen[a.Index])
			seen[a.Index] = true
			require.NotEmpty(t, a.TransactionID)
			require.Contains(t, []string{"completed", "dlq"}, a.Status)
			require.True(t, utf8.ValidString(a.TransactionID))
		}
	})
}

// FuzzDecodeAcks feeds arbitrary bodies to the single and batch ack
// decoders and the dedup lookup decoder: never a panic, and what is accepted
// is usable.
func FuzzDecodeAcks(f *testing.F) {
	for _, seed := range []string{
		`{"transactionId":"t1","partitionId":"0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","leaseId":"0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","status":"completed","error":null,"consumerGroup":"g"}`,
		`{"acknowledgments":[{"transactionId":"t1","partitionId":"0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","status":"failed","error":"boom"}],"consumerGroup":null}`,
		`{"items":[{"queue":"q","partition":"p","transactionId":"t"},{"queue":"q","transactionId":"u"}]}`,
		`{"transactionId":5}`, `{"acknowledgments":{}}`, `{"items":[1]}`,
	} {
		f.Add([]byte(seed))
	}
	valid := map[string]bool{"completed": true, "success": true, "failed": true, "dlq": true, "retry": true}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, dec := range []func([]byte) (string, []reginatype.AckItem, error){DecodeAck, DecodeAckBatch} {
			group, items, err := dec(body)
			if err != nil {
				continue
			}
			require.NotEmpty(t, group)
			for _, it := range items {
				require.NotEmpty(t, it.TransactionID)
				require.True(t, valid[it.Status], it.Status)
			}
		}
		if keys, err := DecodeLookup(body); err == nil {
			require.LessOrEqual(t, len(keys), reginatype.MaxExplainKeys)
			for _, k := range keys {
				require.NotEmpty(t, k.Queue)
				require.NotEmpty(t, k.Partition)
				require.NotEmpty(t, k.TransactionID)
			}
		}
	})
}

// FuzzDecodeStreams feeds arbitrary bodies to the three streams decoders.
// They must never panic, and what they accept must be usable: a cycle's
// pushes have a queue, a partition and a JSON payload, its upserts a key and
// a JSON value, its ack a transaction id and a known status; decoding the
// same body twice mints the same sink transaction ids.
func FuzzDecodeStreams(f *testing.F) {
	for _, seed := range []string{
		`{"query_id":"0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","partition_id":"0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c","consumer_group":"streams.q","state_ops":[{"type":"upsert","key":"k","value":{"a":1}},{"type":"delete","key":"k"}],"push_items":[{"queue":"out","partition":"p","payload":{"n":1}}],"ack":{"transactionId":"t","leaseId":"l","status":"completed","count":3},"release_lease":false}`,
		`{"query_id":"x","partition_id":"y","state_ops":null,"push_items":null,"ack":null}`,
		`{"name":"n","source_queue":"s","config_hash":"h","sink_queue":"o","reset":true}`,
		`{"query_id":"0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","partition_id":"0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c","keys":["a"],"key_prefix":"t","ripe_at_or_before":1e400}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if q, err := DecodeStreamQuery(body); err == nil {
			require.NotEmpty(t, q.Name)
			require.NotEmpty(t, q.SourceQueue)
			require.NotEmpty(t, q.ConfigHash)
		}
		_, _ = DecodeStateGet(body)
		req, err := DecodeCycle(body)
		if err != nil || req.Fail != "" {
			return
		}
		again, err := DecodeCycle(body)
		require.NoError(t, err)
		c := req.Cycle
		require.NotEmpty(t, c.Group)
		for i, p := range c.Pushes {
			require.Equal(t, i, p.Index)
			require.NotEmpty(t, p.Queue)
			require.NotEmpty(t, p.Partition)
			require.LessOrEqual(t, len(p.TransactionID), partition.MaxTxIDLen)
			require.Equal(t, p.TransactionID, again.Cycle.Pushes[i].TransactionID)
			require.True(t, json.Valid(p.Payload))
		}
		for _, op := range c.Ops {
			if !op.Delete {
				require.True(t, op.HasKey)
				require.True(t, json.Valid(op.Value))
			}
		}
		if c.Ack != nil {
			require.NotEmpty(t, c.Ack.TransactionID)
			require.Contains(t, []string{"completed", "dlq"}, c.Ack.Status)
		}
	})
}
