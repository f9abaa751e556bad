package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/internal/crypt"
)

const (
	testKeyA = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	testKeyB = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100"
	// secret marks a payload; the tests look for it in the stored bytes.
	secret = "SECRET-4111-1111"
)

func withKey(key string) func(*Config) { return func(c *Config) { c.EncryptionKey = key } }

// storedBytes returns every stored byte of queue's segments and dead letters.
func (d *db) storedBytes(t *testing.T, queue string) (segments, dlq []byte) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []struct {
		sql string
		out *[]byte
	}{
		{`SELECT s.frames FROM queen.segments s JOIN queen.partitions p ON p.id = s.partition_id
		   JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1`, &segments},
		{`SELECT d.payload FROM queen.dlq d JOIN queen.partitions p ON p.id = d.partition_id
		   JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1`, &dlq},
	} {
		rows, err := d.pool.Query(ctx, d.q(q.sql), queue)
		require.NoError(t, err)
		for rows.Next() {
			var b []byte
			require.NoError(t, rows.Scan(&b))
			*q.out = append(*q.out, b...)
		}
		require.NoError(t, rows.Err())
	}
	return segments, dlq
}

// TestEncryptionAtRest: with a key, a queue configured with
// encryptionEnabled stores no plaintext (segments, dead letters, replays,
// transactions), and every read hands the plaintext back; dedup is as
// before.
func TestEncryptionAtRest(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", withKey(testKeyA))
	d := newDB(t, b.Schema)
	payload := map[string]any{"card": secret, "n": 1}

	// A plain queue stores the payload as sent: the probe below can fail.
	b.push(t, item{"queue": "plain", "transactionId": "p1", "payload": payload})
	seg, _ := d.storedBytes(t, "plain")
	require.True(t, bytes.Contains(seg, []byte(secret)))

	// The push's actor is alive when the queue is configured: the next push
	// follows the new option at once.
	b.push(t, item{"queue": "vault", "transactionId": "before", "payload": map[string]any{"n": 0}})
	out := b.configure(t, "vault", map[string]any{"encryptionEnabled": true})
	require.Equal(t, true, out["options"].(map[string]any)["encryptionEnabled"])
	require.Equal(t, true, out["encryptionActive"])
	first := b.push(t, item{"queue": "vault", "transactionId": "v1", "payload": payload})
	require.Equal(t, "queued", first[0].Status)
	st, body := b.txn(t, map[string]any{"operations": []any{map[string]any{"type": "push",
		"items": []any{map[string]any{"queue": "vault", "transactionId": "v2", "payload": map[string]any{"card": secret, "n": 2}}}}}})
	require.Equal(t, http.StatusOK, st, "%+v", body)
	seg, _ = d.storedBytes(t, "vault")
	require.False(t, bytes.Contains(seg, []byte(secret)), "no plaintext in the stored segments")
	require.False(t, bytes.Contains(seg, []byte(`"card"`)))

	// Dedup is unaffected: the retry is a duplicate naming the original.
	again := b.push(t, item{"queue": "vault", "transactionId": "v1", "payload": payload})
	require.Equal(t, "duplicate", again[0].Status)
	require.Equal(t, first[0].MessageID, again[0].MessageID)

	// Pop decrypts.
	r := b.pop(t, "vault", "", url.Values{"batch": {"10"}})
	require.Len(t, r.Messages, 3)
	require.JSONEq(t, `{"n":0}`, string(r.Messages[0].Data))
	require.JSONEq(t, `{"card":"`+secret+`","n":1}`, string(r.Messages[1].Data))
	require.JSONEq(t, `{"card":"`+secret+`","n":2}`, string(r.Messages[2].Data))

	// The message view decrypts and tells the stored flag.
	var msg struct {
		Data        json.RawMessage `json:"data"`
		IsEncrypted bool            `json:"isEncrypted"`
	}
	getJSON(t, b.URL+"/api/v1/messages/"+r.PartitionID+"/v1", &msg)
	require.JSONEq(t, `{"card":"`+secret+`","n":1}`, string(msg.Data))
	require.True(t, msg.IsEncrypted)
	getJSON(t, b.URL+"/api/v1/messages/"+r.PartitionID+"/before", &msg)
	require.False(t, msg.IsEncrypted)
	_, listBody := do(t, "GET", b.URL+"/api/v1/messages?queue=vault", nil)
	require.Contains(t, string(listBody), secret)

	// Traces by name show the decrypted payload.
	status, tr := b.trace(t, map[string]any{"transactionId": "v1", "partitionId": r.PartitionID,
		"data": map[string]any{"text": "seen"}, "traceNames": "vault-trace"})
	require.Equal(t, http.StatusCreated, status, "%v", tr)
	_, trBody := do(t, "GET", b.URL+"/api/v1/traces/by-name/vault-trace", nil)
	require.Contains(t, string(trBody), secret)

	// Dead letters stay sealed at rest and read decrypted; a replay writes
	// the message back sealed and pops it decrypted.
	b.ack(t, r.Messages[0], "completed", "")
	require.True(t, b.ack(t, r.Messages[1], "dlq", "").DLQ)
	_, dlq := d.storedBytes(t, "vault")
	require.NotEmpty(t, dlq)
	require.False(t, bytes.Contains(dlq, []byte(secret)), "no plaintext in the DLQ")
	var dl struct {
		Messages []struct {
			Data json.RawMessage `json:"data"`
		} `json:"messages"`
	}
	getJSON(t, b.URL+"/api/v1/dlq?queue=vault", &dl)
	require.Len(t, dl.Messages, 1)
	require.JSONEq(t, `{"card":"`+secret+`","n":1}`, string(dl.Messages[0].Data))
	code, rb := do(t, "POST", b.URL+"/api/v1/messages/"+r.PartitionID+"/v1/retry", nil)
	require.Equal(t, http.StatusOK, code, "%s", rb)
	seg, _ = d.storedBytes(t, "vault")
	require.False(t, bytes.Contains(seg, []byte(secret)), "no plaintext after the replay")
	b.ack(t, r.Messages[2], "completed", "")
	rep := b.pop(t, "vault", "", nil)
	require.Len(t, rep.Messages, 1)
	require.Equal(t, "v1", rep.Messages[0].TransactionID)
	require.JSONEq(t, `{"card":"`+secret+`","n":1}`, string(rep.Messages[0].Data))

	// Switching encryption off keeps older messages readable; new ones are
	// stored as sent.
	out = b.configure(t, "vault", map[string]any{"encryptionEnabled": false})
	require.Equal(t, false, out["encryptionActive"])
	b.push(t, item{"queue": "vault", "transactionId": "v3", "payload": map[string]any{"card": secret}})
	seg, _ = d.storedBytes(t, "vault")
	require.True(t, bytes.Contains(seg, []byte(secret)))
	getJSON(t, b.URL+"/api/v1/messages/"+r.PartitionID+"/v2", &msg)
	require.JSONEq(t, `{"card":"`+secret+`","n":2}`, string(msg.Data))
}

// TestEncryptionWithoutKey follows Queen: without a key, configure still
// accepts and echoes encryptionEnabled (encryptionActive says it is not in
// effect), pushes store the payload as sent; sealed payloads written with a
// key read back as Queen's envelope when the key is missing or another.
func TestEncryptionWithoutKey(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", withKey(testKeyA))
	schema := b.Schema
	d := newDB(t, schema)
	b.configure(t, "vault", map[string]any{"encryptionEnabled": true})
	b.push(t, item{"queue": "vault", "transactionId": "sealed", "payload": map[string]any{"card": secret}})
	b.Stop(t)

	for _, key := range []string{"", testKeyB} {
		b = startBroker(t, schema, withKey(key))
		// The sealed message: its envelope, not an error.
		r := b.pop(t, "vault", "", url.Values{"consumerGroup": {"g" + key[:min(len(key), 4)]}})
		require.Len(t, r.Messages, 1)
		var env map[string]string
		require.NoError(t, json.Unmarshal(r.Messages[0].Data, &env), "%s", r.Messages[0].Data)
		require.Len(t, env, 3)
		for _, k := range []string{"encrypted", "iv", "authTag"} {
			require.NotEmpty(t, env[k], k)
		}
		require.NotContains(t, string(r.Messages[0].Data), secret)
		b.Stop(t)
	}

	b = startBroker(t, schema, nil)
	out := b.configure(t, "vault", map[string]any{"encryptionEnabled": true})
	require.Equal(t, true, out["options"].(map[string]any)["encryptionEnabled"])
	require.Equal(t, false, out["encryptionActive"])
	b.push(t, item{"queue": "vault", "transactionId": "plain", "payload": map[string]any{"card": secret}})
	seg, _ := d.storedBytes(t, "vault")
	require.Equal(t, 1, bytes.Count(seg, []byte(secret)), "without a key the payload is stored as sent")
	b.Stop(t)

	// With the right key again, both read as pushed.
	b = startBroker(t, schema, withKey(testKeyA))
	r := b.pop(t, "vault", "", url.Values{"consumerGroup": {"late"}, "batch": {"10"}})
	require.Len(t, r.Messages, 2)
	for _, m := range r.Messages {
		require.JSONEq(t, `{"card":"`+secret+`"}`, string(m.Data), m.TransactionID)
	}
}

// TestEncryptionKeyRefusedAtStart: a key that is not 64 hex characters stops
// the broker at start, naming the variable and never echoing the key.
func TestEncryptionKeyRefusedAtStart(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"abc", testKeyA[:62], testKeyA + "00", strings.Repeat("zz", 32)} {
		_, err := configTestLoad(t, nil, map[string]string{crypt.KeyEnv: bad})
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "invalid "+crypt.KeyEnv+": the key must be 64 hexadecimal characters")
		require.NotContains(t, err.Error(), bad)
	}
	c, err := configTestLoad(t, nil, map[string]string{crypt.KeyEnv: testKeyA})
	require.NoError(t, err)
	require.Equal(t, testKeyA, c.EncryptionKey)
	// run refuses it too (a Config built in code).
	cfg := brokerConfig(t, "unused")
	cfg.EncryptionKey = "0011"
	err = run(context.Background(), cfg, zerolog.Nop(), nil)
	require.ErrorContains(t, err, crypt.KeyEnv)
}
