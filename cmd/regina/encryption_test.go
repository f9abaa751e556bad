package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/internal/crypt"
	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
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

// startFails runs a broker on schema with key and returns why it did not
// start (it must not).
func startFails(t *testing.T, schema, key string) error {
	t.Helper()
	cfg := brokerConfig(t, schema)
	cfg.EncryptionKey = key
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := run(ctx, cfg, zerolog.Nop(), nil)
	require.Error(t, err, "the broker started")
	return err
}

// TestEncryptionFailsClosed: once payloads are sealed, a broker with
// another key, or none, refuses to start (the key check value, or a sealed
// payload written before it existed, tells); a broker without the key
// refuses to configure encryption, to push to an encrypted queue and to
// pop a sealed payload (503, nothing written or leased), never storing
// plaintext into an encrypted queue nor serving its envelope as data.
func TestEncryptionFailsClosed(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", withKey(testKeyA))
	schema := b.Schema
	d := newDB(t, schema)
	b.configure(t, "vault", map[string]any{"encryptionEnabled": true})
	b.push(t, item{"queue": "vault", "transactionId": "sealed", "payload": map[string]any{"card": secret}})
	require.EqualValues(t, 1, d.int(t, `SELECT count(*) FROM queen.encryption_key_check`))
	b.Stop(t)
	segBefore, _ := d.storedBytes(t, "vault")

	require.ErrorIs(t, startFails(t, schema, testKeyB), sqlstore.ErrWrongKey)
	require.ErrorIs(t, startFails(t, schema, ""), sqlstore.ErrKeyMissing)
	// A database sealed before the key check value existed: a sealed
	// frame is tried instead.
	d.exec(t, `DELETE FROM queen.encryption_key_check`)
	require.ErrorIs(t, startFails(t, schema, testKeyB), sqlstore.ErrWrongKey)
	segAfter, _ := d.storedBytes(t, "vault")
	require.Equal(t, segBefore, segAfter, "a refused broker wrote nothing")

	// The right key starts (and stores its check value again), and reads.
	b = startBroker(t, schema, withKey(testKeyA))
	require.EqualValues(t, 1, d.int(t, `SELECT count(*) FROM queen.encryption_key_check`))

	r := b.pop(t, "vault", "", nil)
	require.Len(t, r.Messages, 1)
	require.JSONEq(t, `{"card":"`+secret+`"}`, string(r.Messages[0].Data))
	b.Stop(t)

	// A broker without the key (started while nothing was encrypted) next
	// to one with it.
	s2 := sqlstoretest.NewSchema(t)
	d2 := newDB(t, s2)
	keyless := startBroker(t, s2, nil)
	keyed := startBroker(t, s2, withKey(testKeyA))
	status, body := do(t, "POST", keyless.URL+"/api/v1/configure",
		map[string]any{"queue": "vault", "options": map[string]any{"encryptionEnabled": true}})
	require.Equal(t, http.StatusBadRequest, status, "%s", body)
	require.Contains(t, string(body), crypt.KeyEnv)
	keyed.configure(t, "vault", map[string]any{"encryptionEnabled": true})
	keyed.push(t, item{"queue": "vault", "transactionId": "sealed", "payload": map[string]any{"card": secret}})
	// The keyless broker refuses the push (nothing stored in plaintext)...
	status, body = keyless.pushRaw(t, map[string]any{"items": []any{
		map[string]any{"queue": "vault", "transactionId": "plain", "payload": map[string]any{"card": secret}}}})
	require.Equal(t, http.StatusServiceUnavailable, status, "%s", body)
	require.Contains(t, string(body), crypt.KeyEnv)
	seg, _ := d2.storedBytes(t, "vault")
	require.False(t, bytes.Contains(seg, []byte(secret)), "plaintext stored into an encrypted queue")
	// ... and the pop of the sealed message, leasing nothing: the keyed
	// broker pops it at once.
	status, body = do(t, "GET", keyless.URL+"/api/v1/pop/queue/vault", nil)
	require.Equal(t, http.StatusServiceUnavailable, status, "%s", body)
	require.NotContains(t, string(body), "authTag")
	require.Zero(t, d2.int(t, `SELECT count(*) FROM queen.consumers WHERE lease_id IS NOT NULL`))
	r = keyed.pop(t, "vault", "", nil)
	require.Len(t, r.Messages, 1)
	require.JSONEq(t, `{"card":"`+secret+`"}`, string(r.Messages[0].Data))
}

// TestEncryptedFingerprintsAreKeyed: with dedupPayloadCheck on an
// encrypted queue, the stored fingerprint is not the payload's plain hash
// (a reader of the database cannot confirm a guessed payload), and the
// check still tells a retry from a conflict.
func TestEncryptedFingerprintsAreKeyed(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", withKey(testKeyA))
	d := newDB(t, b.Schema)
	payload := []byte(`{"card":"` + secret + `"}`)
	for _, q := range []string{"plain", "vault"} {
		b.configure(t, q, map[string]any{"encryptionEnabled": q == "vault", "dedupPayloadCheck": "reject"})
		b.push(t, item{"queue": q, "transactionId": "t1", "payload": json.RawMessage(payload)})
	}
	fp := func(q string) int64 {
		return d.int(t, `SELECT l.fingerprints[1] FROM queen.log_txns l JOIN queen.partitions p ON p.id = l.partition_id
			JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1`, q)
	}
	require.Equal(t, partition.Fingerprint(payload), fp("plain"))
	require.NotEqual(t, partition.Fingerprint(payload), fp("vault"))
	key, err := crypt.ParseKey(testKeyA)
	require.NoError(t, err)
	require.Equal(t, key.Fingerprint(payload), fp("vault"))
	require.Equal(t, "duplicate", b.push(t, item{"queue": "vault", "transactionId": "t1",
		"payload": json.RawMessage(payload)})[0].Status)
	status, body := b.pushRaw(t, map[string]any{"items": []any{map[string]any{"queue": "vault", "transactionId": "t1",
		"payload": map[string]any{"card": "other"}}}})
	require.NotContains(t, string(body), `"duplicate"`, "status %d", status)
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
