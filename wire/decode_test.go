package wire

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
)

// decodeTestItems wraps item objects (JSON text) in a push body.
func decodeTestItems(items ...string) []byte {
	return []byte(`{"items":[` + strings.Join(items, ",") + `]}`)
}

func decodeTestNest(depth int, inner string) string {
	return strings.Repeat("[", depth) + inner + strings.Repeat("]", depth)
}

func TestDecodePushRejects(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("q", MaxNameLen+1)
	tests := []struct {
		name string
		body string
		msg  string // the error text must contain this
	}{
		{"empty body", "", "Empty request body"},
		{"blank body", " \r\n\t ", "Empty request body"},
		{"invalid JSON", `{"items": [`, "Invalid JSON: "},
		{"garbage", `{items}`, "Invalid JSON: "},
		{"trailing garbage", `{"items":[]} x`, "Invalid JSON: "},
		{"cut inside an item", `{"items":[{"queue":"q"`, "Invalid JSON: cannot decode object from empty input (at the end of the body)"},
		{"cut after items", `{"items":[{"queue":"q"}]`, "Invalid JSON: unexpected end of JSON input after object field value (at the end of the body)"},
		{"top-level array", `[{"queue":"q"}]`, "Request body must be a JSON object"},
		{"top-level string", `"items"`, "Request body must be a JSON object"},
		{"top-level number", `42`, "Request body must be a JSON object"},
		{"missing items", `{}`, "items array is required"},
		{"null body", `null`, "items array is required"},
		{"items null", `{"items":null}`, "items array is required"},
		{"items object", `{"items":{"queue":"q"}}`, "items array is required"},
		{"items string", `{"items":"[]"}`, "items array is required"},
		{"items number", `{"items":1}`, "items array is required"},
		{"item not an object", `{"items":[1]}`, "Each item must be an object"},
		{"item string", `{"items":["q"]}`, "Each item must be an object"},
		{"missing queue", string(decodeTestItems(`{"payload":1}`)), "queue must be a string"},
		{"null item", string(decodeTestItems(`null`)), "queue must be a string"},
		{"null queue", string(decodeTestItems(`{"queue":null}`)), "queue must be a string"},
		{"number queue", string(decodeTestItems(`{"queue":1}`)), "queue must be a string"},
		{"array queue", string(decodeTestItems(`{"queue":["q"]}`)), "queue must be a string"},
		{"bool queue", string(decodeTestItems(`{"queue":true}`)), "queue must be a string"},
		{"empty queue", string(decodeTestItems(`{"queue":""}`)), "queue must be a non-empty string"},
		{"256-byte queue", string(decodeTestItems(`{"queue":"` + long + `"}`)), "queue must be at most 255 bytes (got 256)"},
		{"queue with NUL", string(decodeTestItems(`{"queue":"q\u0000x"}`)), "queue must not contain NUL characters"},
		{"number partition", string(decodeTestItems(`{"queue":"q","partition":7}`)), "partition must be a string"},
		{"object partition", string(decodeTestItems(`{"queue":"q","partition":{}}`)), "partition must be a string"},
		{"bool partition", string(decodeTestItems(`{"queue":"q","partition":false}`)), "partition must be a string"},
		{"256-byte partition", string(decodeTestItems(`{"queue":"q","partition":"` + long + `"}`)), "partition must be at most 255 bytes (got 256)"},
		{"partition with NUL", string(decodeTestItems(`{"queue":"q","partition":"\u0000"}`)), "partition must not contain NUL characters"},
		{"number transactionId", string(decodeTestItems(`{"queue":"q","transactionId":12}`)), "transactionId must be a string"},
		{"bool transactionId", string(decodeTestItems(`{"queue":"q","transactionId":true}`)), "transactionId must be a string"},
		{"array transactionId", string(decodeTestItems(`{"queue":"q","transactionId":["a"]}`)), "transactionId must be a string"},
		{"256-byte transactionId", string(decodeTestItems(`{"queue":"q","transactionId":"` + strings.Repeat("t", 256) + `"}`)), "transactionId must be at most 255 bytes (got 256)"},
		{"256 bytes after unescaping", string(decodeTestItems(`{"queue":"q","transactionId":"` + strings.Repeat(`\u00e9`, 128) + `"}`)), "transactionId must be at most 255 bytes (got 256)"},
		{"number traceId", string(decodeTestItems(`{"queue":"q","traceId":1}`)), "traceId must be a string"},
		{"object traceId", string(decodeTestItems(`{"queue":"q","traceId":{}}`)), "traceId must be a string"},
		{"non-UUID traceId", string(decodeTestItems(`{"queue":"q","traceId":"not-a-uuid"}`)), `traceId must be a UUID (got "not-a-uuid")`},
		{"traceId with bad hex", string(decodeTestItems(`{"queue":"q","traceId":"0123456z-89ab-cdef-0123-456789abcdef"}`)), "traceId must be a UUID"},
		{"error names the item", string(decodeTestItems(`{"queue":"q"}`, `{"queue":2}`)), "items[1]: queue must be a string"},
		{"invalid UTF-8", "{\"items\":[{\"queue\":\"q\xff\"}]}", "Invalid JSON: body is not valid UTF-8"},
		{"truncated UTF-8", "{\"items\":[{\"queue\":\"\xc3\"}]}", "Invalid JSON: body is not valid UTF-8"},
		{"nesting deeper than MaxJSONDepth", decodeTestNest(MaxJSONDepth+1, ""), "nesting deeper than 512 levels"},
		{"payload deeper than MaxJSONDepth", string(decodeTestItems(`{"queue":"q","payload":` + decodeTestNest(MaxJSONDepth, "1") + `}`)), "nesting deeper than 512 levels"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			items, err := DecodePush([]byte(tc.body))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.msg)
			require.Nil(t, items)
			// Texts for clients: no dangling separator, no decoder or Go
			// type names.
			require.False(t, strings.HasSuffix(err.Error(), ": "), "%q", err)
			require.NotContains(t, err.Error(), "json: ")
			require.NotContains(t, err.Error(), "wire.")
		})
	}
}

func TestDecodePushAccepts(t *testing.T) {
	t.Parallel()
	trace := "0190a5b2-3c4d-7e8f-9a0b-1c2d3e4f5a6b"
	traceID, err := partition.ParseUUID(trace)
	require.NoError(t, err)
	tx255 := strings.Repeat("t", partition.MaxTxIDLen)
	name255 := strings.Repeat("n", MaxNameLen)

	tests := []struct {
		name  string
		body  []byte
		check func(t *testing.T, items []PushItem)
	}{
		{"no items", decodeTestItems(), func(t *testing.T, items []PushItem) {
			require.Empty(t, items)
		}},
		{"defaults", decodeTestItems(`{"queue":"orders"}`), func(t *testing.T, items []PushItem) {
			require.Len(t, items, 1)
			it := items[0]
			require.Equal(t, "orders", it.Queue)
			require.Equal(t, "Default", it.Partition)
			require.Equal(t, "null", string(it.Payload))
			require.False(t, it.HasTrace)
			require.True(t, it.TraceID.IsZero())
			require.True(t, it.Minted)
			u, err := partition.ParseUUID(it.TransactionID)
			require.NoError(t, err, "minted id %q", it.TransactionID)
			require.Equal(t, u.String(), it.TransactionID, "minted id is canonical")
			require.Equal(t, byte(7), u[6]>>4, "minted id is a UUIDv7")
		}},
		{"null and empty fields take defaults", decodeTestItems(`{"queue":"q","partition":null,"transactionId":null,"traceId":null}`, `{"queue":"q","partition":"","transactionId":"","traceId":""}`), func(t *testing.T, items []PushItem) {
			require.Len(t, items, 2)
			for _, it := range items {
				require.Equal(t, "Default", it.Partition)
				require.True(t, it.Minted)
				require.False(t, it.HasTrace)
			}
			require.NotEqual(t, items[0].TransactionID, items[1].TransactionID, "each minted id is fresh")
		}},
		{"explicit fields", decodeTestItems(`{"queue":"q","partition":"p-1","transactionId":"tx-1","traceId":"` + trace + `","payload":{"a":1}}`), func(t *testing.T, items []PushItem) {
			require.Equal(t, []PushItem{{Queue: "q", Partition: "p-1", TransactionID: "tx-1", TraceID: traceID, HasTrace: true, Payload: []byte(`{"a":1}`)}}, items)
		}},
		{"upper-case traceId", decodeTestItems(`{"queue":"q","traceId":"` + strings.ToUpper(trace) + `"}`), func(t *testing.T, items []PushItem) {
			require.True(t, items[0].HasTrace)
			require.Equal(t, traceID, items[0].TraceID)
		}},
		{"255-byte transactionId and names", decodeTestItems(`{"queue":"` + name255 + `","partition":"` + name255 + `","transactionId":"` + tx255 + `"}`), func(t *testing.T, items []PushItem) {
			require.Equal(t, name255, items[0].Queue)
			require.Equal(t, name255, items[0].Partition)
			require.Equal(t, tx255, items[0].TransactionID)
			require.False(t, items[0].Minted)
		}},
		{"payload kept byte for byte", decodeTestItems(`{"queue":"q","payload":{"b":2, "a":[1,2.50]}}`), func(t *testing.T, items []PushItem) {
			require.JSONEq(t, `{"b":2, "a":[1,2.50]}`, string(items[0].Payload))
		}},
		{"payload scalars", decodeTestItems(`{"queue":"q","payload":"s\u00e9"}`, `{"queue":"q","payload":1e3}`, `{"queue":"q","payload":null}`, `{"queue":"q","payload":false}`), func(t *testing.T, items []PushItem) {
			require.Len(t, items, 4)
			require.Equal(t, `"s\u00e9"`, string(items[0].Payload))
			require.Equal(t, `1e3`, string(items[1].Payload))
			require.Equal(t, `null`, string(items[2].Payload))
			require.Equal(t, `false`, string(items[3].Payload))
		}},
		{"payload nested 500 deep", decodeTestItems(`{"queue":"q","payload":` + decodeTestNest(500, `{"x":"]]]"}`) + `}`), func(t *testing.T, items []PushItem) {
			require.Equal(t, decodeTestNest(500, `{"x":"]]]"}`), string(items[0].Payload))
		}},
		{"brackets inside strings do not count as nesting", decodeTestItems(`{"queue":"q","payload":"` + strings.Repeat("[{", MaxJSONDepth) + `\"["}`), func(t *testing.T, items []PushItem) {
			require.Len(t, items, 1)
		}},
		{"brackets after an escaped quote stay inside the string", decodeTestItems(`{"queue":"q","payload":"\"` + strings.Repeat("[", MaxJSONDepth+10) + `"}`), func(t *testing.T, items []PushItem) {
			require.Equal(t, `"\"`+strings.Repeat("[", MaxJSONDepth+10)+`"`, string(items[0].Payload))
		}},
		{"escaped strings", decodeTestItems(`{"queue":"q\u00e9","partition":"p\"1\\","transactionId":"t\n\u2603"}`), func(t *testing.T, items []PushItem) {
			require.Equal(t, "qé", items[0].Queue)
			require.Equal(t, `p"1\`, items[0].Partition)
			require.Equal(t, "t\n☃", items[0].TransactionID)
		}},
		{"multi-byte names", decodeTestItems(`{"queue":"заказы","partition":"東京"}`), func(t *testing.T, items []PushItem) {
			require.Equal(t, "заказы", items[0].Queue)
			require.Equal(t, "東京", items[0].Partition)
		}},
		{"unknown fields ignored, order kept", decodeTestItems(`{"queue":"a","extra":[1]}`, `{"queue":"b","priority":9}`, `{"queue":"c"}`), func(t *testing.T, items []PushItem) {
			require.Len(t, items, 3)
			require.Equal(t, "a", items[0].Queue)
			require.Equal(t, "b", items[1].Queue)
			require.Equal(t, "c", items[2].Queue)
		}},
		{"whitespace around values", []byte(" {\n \"items\" : [ { \"queue\" : \"q\" , \"partition\" : \"p\" , \"payload\" : [ 1 ] } ] }\n"), func(t *testing.T, items []PushItem) {
			require.Equal(t, "q", items[0].Queue)
			require.Equal(t, "p", items[0].Partition)
			require.JSONEq(t, "[1]", string(items[0].Payload))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			items, err := DecodePush(tc.body)
			require.NoError(t, err)
			require.NotNil(t, items)
			tc.check(t, items)
		})
	}
}

func TestDecodeConfigureDefaults(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"queue":"q"}`,
		`{"queue":"q","options":{}}`,
		`{"queue":"q","options":null}`,
		`{"queue":"q","options":{"leaseTime":null,"deadLetterQueue":null}}`,
	} {
		t.Run(body, func(t *testing.T) {
			t.Parallel()
			req, err := DecodeConfigure([]byte(body))
			require.NoError(t, err)
			require.Equal(t, "q", req.Queue)
			require.Equal(t, partition.DefaultQueueOptions(), req.Options)
			require.Equal(t, 3600, req.Options.DedupWindowSeconds)
			require.Equal(t, 300, req.Options.LeaseTime)
			require.Equal(t, 3, req.Options.RetryLimit)
			require.Equal(t, 1000, req.Options.RetryDelay)
			require.Equal(t, 3600, req.Options.TTL)
			require.False(t, req.Options.DeadLetterQueue)
		})
	}
}

func TestDecodeConfigureAccepts(t *testing.T) {
	t.Parallel()
	defaults := partition.DefaultQueueOptions()
	tests := []struct {
		name string
		body string
		want ConfigureRequest
	}{
		{"payload check null is off", `{"queue":"q","options":{"dedupPayloadCheck":null}}`, ConfigureRequest{Queue: "q", Options: defaults}},
		{"dedup window zero kept", `{"queue":"q","options":{"dedupWindowSeconds":0}}`, ConfigureRequest{Queue: "q", Options: func() partition.QueueOptions {
			o := defaults
			o.DedupWindowSeconds = 0
			return o
		}()}},
		{"every option", `{"queue":"q","namespace":"ns","task":"tk","options":{
			"leaseTime":1,"retryLimit":2,"retryDelay":3,"maxSize":4,"ttl":5,"priority":6,
			"delayedProcessing":7,"windowBuffer":8,"retentionSeconds":9,"completedRetentionSeconds":10,
			"maxWaitTimeSeconds":11,"dedupWindowSeconds":12,"dedupPayloadCheck":"reject",
			"deadLetterQueue":true,"dlqAfterMaxRetries":true,"retentionEnabled":true,"encryptionEnabled":false}}`,
			ConfigureRequest{Queue: "q", Namespace: "ns", Task: "tk", Options: partition.QueueOptions{
				LeaseTime: 1, RetryLimit: 2, RetryDelay: 3, MaxSize: 4, TTL: 5, Priority: 6,
				DelayedProcessing: 7, WindowBuffer: 8, RetentionSeconds: 9, CompletedRetentionSeconds: 10,
				MaxWaitTimeSeconds: 11, DedupWindowSeconds: 12, DedupPayloadCheck: "reject",
				DeadLetterQueue: true, DLQAfterMaxRetries: true, RetentionEnabled: true,
			}}},
		{"largest value", `{"queue":"q","options":{"ttl":2147483647}}`, ConfigureRequest{Queue: "q", Options: func() partition.QueueOptions {
			o := defaults
			o.TTL = 2147483647
			return o
		}()}},
		{"whole number in float notation", `{"queue":"q","options":{"retryLimit":5.0,"retryDelay":1e3}}`, ConfigureRequest{Queue: "q", Options: func() partition.QueueOptions {
			o := defaults
			o.RetryLimit, o.RetryDelay = 5, 1000
			return o
		}()}},
		{"unknown options ignored and listed, sorted", `{"queue":"q","options":{"fancy":"yes","leaseTimes":-1,"autoAck":[1]}}`,
			ConfigureRequest{Queue: "q", Options: defaults, IgnoredOptions: []string{"autoAck", "fancy", "leaseTimes"}}},
		{"unknown top-level keys ignored and listed", `{"queue":"q","option":{"leaseTime":5},"ttl":1}`,
			ConfigureRequest{Queue: "q", Options: defaults, IgnoredFields: []string{"option", "ttl"}}},
		{"non-string namespace and task ignored", `{"queue":"q","namespace":5,"task":{"a":1}}`, ConfigureRequest{Queue: "q", Options: defaults}},
		{"null namespace and task ignored", `{"queue":"q","namespace":null,"task":null}`, ConfigureRequest{Queue: "q", Options: defaults}},
		{"escaped names", `{"queue":"q\u00e9","namespace":"n\"s","task":"t\\k"}`, ConfigureRequest{Queue: "qé", Namespace: `n"s`, Task: `t\k`, Options: defaults}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req, err := DecodeConfigure([]byte(tc.body))
			require.NoError(t, err)
			require.Equal(t, tc.want, req)
		})
	}
}

func TestDecodeConfigureRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		msg  []string // the error text must contain each
	}{
		{"empty body", "", []string{"Empty request body"}},
		{"invalid UTF-8", "{\"queue\":\"\xfe\"}", []string{"not valid UTF-8"}},
		{"too deep", `{"queue":"q","options":{"x":` + decodeTestNest(MaxJSONDepth, "") + `}}`, []string{"nesting deeper than 512 levels"}},
		{"not an object", `["q"]`, []string{"Request body must be a JSON object"}},
		{"invalid JSON", `{"queue":"q",}`, []string{"Invalid JSON: "}},
		{"options not an object", `{"queue":"q","options":[1]}`, []string{"Invalid JSON: "}},
		{"missing queue", `{"options":{}}`, []string{"queue is required"}},
		{"null queue", `{"queue":null}`, []string{"queue is required"}},
		{"number queue", `{"queue":1}`, []string{"queue is required"}},
		{"empty queue", `{"queue":""}`, []string{"queue must be a non-empty string"}},
		{"long queue", `{"queue":"` + strings.Repeat("q", MaxNameLen+1) + `"}`, []string{"queue must be at most 255 bytes"}},
		{"queue with NUL", `{"queue":"a\u0000"}`, []string{"queue must not contain NUL characters"}},
		{"negative", `{"queue":"q","options":{"leaseTime":-1}}`, []string{"options.leaseTime", "whole number between 0 and 2147483647"}},
		{"negative dedup window", `{"queue":"q","options":{"dedupWindowSeconds":-5}}`, []string{"options.dedupWindowSeconds", "whole number"}},
		{"fractional", `{"queue":"q","options":{"retryDelay":1.5}}`, []string{"options.retryDelay", "whole number"}},
		{"small fraction", `{"queue":"q","options":{"ttl":0.001}}`, []string{"options.ttl", "whole number"}},
		{"too large", `{"queue":"q","options":{"maxSize":2147483648}}`, []string{"options.maxSize", "whole number"}},
		{"huge exponent", `{"queue":"q","options":{"priority":1e300}}`, []string{"options.priority", "whole number"}},
		{"string number", `{"queue":"q","options":{"retryLimit":"5"}}`, []string{"options.retryLimit must be a number"}},
		{"bool number", `{"queue":"q","options":{"windowBuffer":true}}`, []string{"options.windowBuffer must be a number"}},
		{"array number", `{"queue":"q","options":{"completedRetentionSeconds":[1]}}`, []string{"options.completedRetentionSeconds must be a number"}},
		{"string boolean", `{"queue":"q","options":{"deadLetterQueue":"true"}}`, []string{"options.deadLetterQueue must be a boolean"}},
		{"number boolean", `{"queue":"q","options":{"retentionEnabled":1}}`, []string{"options.retentionEnabled must be a boolean"}},
		{"object boolean", `{"queue":"q","options":{"dlqAfterMaxRetries":{}}}`, []string{"options.dlqAfterMaxRetries must be a boolean"}},
		{"string encryption", `{"queue":"q","options":{"encryptionEnabled":"yes"}}`, []string{"options.encryptionEnabled must be a boolean"}},
		{"unknown payload check", `{"queue":"q","options":{"dedupPayloadCheck":"warn"}}`, []string{`options.dedupPayloadCheck must be "off", "report" or "reject"`}},
		{"payload check not a string", `{"queue":"q","options":{"dedupPayloadCheck":true}}`, []string{"options.dedupPayloadCheck must be"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := DecodeConfigure([]byte(tc.body))
			require.Error(t, err)
			for _, m := range tc.msg {
				require.Contains(t, err.Error(), m)
			}
		})
	}
}

func TestAppendStringKnown(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", `""`},
		{"plain", `"plain"`},
		{`a"b\c`, `"a\"b\\c"`},
		{"\n\r\t", `"\n\r\t"`},
		{"\x00\x01\x1f", `"\u0000\u0001\u001f"`},
		{"\x7f", `"\u007f"`},
		{"é☃𝄞", `"é☃𝄞"`},
		{"</script>", `"</script>"`},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, string(appendString(nil, tc.in)), "%q", tc.in)
		require.Equal(t, "x:"+tc.want, string(appendString([]byte("x:"), tc.in)), "appends to dst")
	}
}

func TestAppendStringRoundTrip(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(11, 12))
	special := []rune{0, 1, 0x1f, '\n', '\r', '\t', '\b', '\f', 0x7f, '"', '\\', '/', '<', '>', '&',
		'é', '€', '☃', 0x2028, 0x2029, 0xfeff, 0xfffd, 0x10ffff, '𝄞'}
	for iter := range 20_000 {
		n := r.IntN(24)
		rs := make([]rune, n)
		for i := range rs {
			switch r.IntN(3) {
			case 0:
				rs[i] = special[r.IntN(len(special))]
			case 1:
				rs[i] = rune(r.IntN(0x80))
			default:
				c := rune(r.IntN(0x10ffff + 1))
				if !utf8.ValidRune(c) {
					c = 0xfffd
				}
				rs[i] = c
			}
		}
		s := string(rs)
		if iter == 0 {
			s = string(special)
		}
		out := appendString(nil, s)
		require.True(t, utf8.Valid(out), "%q", s)
		require.True(t, json.Valid(out), "%q encodes as %s", s, out)
		var back string
		require.NoError(t, json.Unmarshal(out, &back))
		require.Equal(t, s, back)
	}
}

func TestDecodePushKeysAreCaseSensitive(t *testing.T) {
	t.Parallel()
	_, err := DecodePush([]byte(`{"ITEMS":[{"queue":"q"}]}`))
	require.ErrorContains(t, err, "items array is required")
	items, err := DecodePush([]byte(`{"items":[{"queue":"a","Queue":"b","TRANSACTIONID":"x"}]}`))
	require.NoError(t, err)
	require.Equal(t, "a", items[0].Queue)
	require.True(t, items[0].Minted, "TRANSACTIONID is not transactionId")
}
