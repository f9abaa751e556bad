package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/regina-mq/regina/internal/crypt"
	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// cryptWarnings hold the Unix seconds of the last warning of each kind.
type cryptWarnings struct{ seal, open atomic.Int64 }

// warnEvery bounds the rate of the encryption warnings (one per kind per
// interval), which would otherwise come once per message.
const warnEvery = time.Minute

// seal encrypts b's payload in place when the queue (ref) has
// encryptionEnabled. Without a key it refuses (ErrNoEncryptionKey): a
// payload is never stored in plaintext into an encrypted queue.
func (s *Store) seal(b *partition.Body, ref reginatype.PartitionRef, queue string) error {
	if !ref.Encrypt {
		return nil
	}
	if s.key == nil {
		if warnNow(&s.warned.seal) {
			s.log.Warn().Str("queue", queue).Msg("queue has encryptionEnabled but " + crypt.KeyEnv +
				" is not set: its pushes are refused")
		}
		return fmt.Errorf("queue %q: %w", queue, reginatype.ErrNoEncryptionKey)
	}
	b.Payload = s.key.Seal(nil, b.Payload)
	b.Encrypted = true
	return nil
}

// fingerprint is the payload fingerprint a queue's payload check stores
// and compares: keyed (crypt.Key.Fingerprint) on an encrypted queue, so
// that the database does not confirm a guessed payload; the plain hash
// elsewhere.
func (s *Store) fingerprint(encrypted bool, payload []byte) int64 {
	return crypt.PayloadFingerprint(s.key, encrypted, payload, partition.Fingerprint)
}

// reveal replaces a sealed payload by its plaintext. When it cannot (no
// key, another key, altered bytes) it fails with ErrNoEncryptionKey: a
// pop never hands ciphertext out as a message's data. b.Encrypted stays as
// stored.
func (s *Store) reveal(b *partition.Body) error {
	if !b.Encrypted {
		return nil
	}
	plain, err := s.key.Open(nil, b.Payload)
	if err != nil {
		if warnNow(&s.warned.open) {
			s.log.Warn().Err(err).Msg("a stored payload could not be decrypted; the pop is refused")
		}
		return fmt.Errorf("%w: %w", reginatype.ErrNoEncryptionKey, err)
	}
	b.Payload = plain
	return nil
}

// revealForView is reveal for the admin views (message lists, dead
// letters, traces), which show what is stored: a payload that cannot be
// decrypted is shown as Queen's envelope ({"encrypted","iv","authTag"}),
// never as plaintext and never to a consumer.
func (s *Store) revealForView(b *partition.Body) {
	if err := s.reveal(b); err != nil {
		b.Payload = crypt.Envelope(nil, b.Payload)
	}
}

// warnNow reports whether a warning whose last time is in last may be
// logged now, and records it.
func warnNow(last *atomic.Int64) bool {
	now := time.Now().Unix()
	prev := last.Load()
	return now-prev >= int64(warnEvery/time.Second) && last.CompareAndSwap(prev, now)
}

// ErrWrongKey means the broker's QUEEN_ENCRYPTION_KEY is not the key this
// database's payloads were sealed with (its key check value differs, or a
// sealed payload does not open): the broker refuses to start.
var ErrWrongKey = errors.New(crypt.KeyEnv + " is not the key this database's encrypted payloads were sealed with")

// ErrKeyMissing means the broker has no QUEEN_ENCRYPTION_KEY while the
// database holds sealed payloads of queues that still have
// encryptionEnabled: the broker refuses to start.
var ErrKeyMissing = errors.New(crypt.KeyEnv + " is not set, but this database holds encrypted payloads")

// checkKey verifies the broker's key against the database's key check
// value (table encryption_key_check) before anything is served, and
// records it when there is none yet, so that encryption fails closed:
//
//   - a key with a check value that differs: ErrWrongKey;
//   - a key and no check value yet: a sealed payload written before the
//     check value existed (a dead letter, or a frame of an encrypted
//     queue's newest segments) must open under it (else ErrWrongKey); then
//     its check value is stored;
//   - no key, while queues with encryptionEnabled hold sealed payloads (a
//     check value was stored, or a sealed dead letter exists):
//     ErrKeyMissing. Without sealed payloads the broker starts, and refuses
//     the pushes of encrypted queues (seal, actor).
func (s *Store) checkKey(ctx context.Context) error {
	var stored []byte
	err := s.pool.QueryRow(ctx, qualify(`SELECT check_value FROM queen.encryption_key_check`, s.schema)).Scan(&stored)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("read the encryption key check value: %w", classify(err))
	}
	if s.key == nil {
		return s.checkNoKey(ctx, stored != nil)
	}
	if stored != nil {
		if !s.key.Matches(stored) {
			return fmt.Errorf("%w (its key check value differs); start with that key", ErrWrongKey)
		}
		return nil
	}
	if err := s.openOneSealed(ctx); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, qualify(`INSERT INTO queen.encryption_key_check (check_value) VALUES ($1)
		ON CONFLICT DO NOTHING`, s.schema), s.key.CheckValue()); err != nil {
		return fmt.Errorf("store the encryption key check value: %w", classify(err))
	}
	// Another broker may have stored its own first.
	if err := s.pool.QueryRow(ctx, qualify(`SELECT check_value FROM queen.encryption_key_check`, s.schema)).
		Scan(&stored); err != nil {
		return fmt.Errorf("read the encryption key check value: %w", classify(err))
	}
	if !s.key.Matches(stored) {
		return fmt.Errorf("%w (another broker stored a different key check value); start with that key", ErrWrongKey)
	}
	return nil
}

// checkNoKey is checkKey without a key: hasCheck tells whether a key check
// value is stored.
func (s *Store) checkNoKey(ctx context.Context, hasCheck bool) error {
	var encrypted []string
	var sealedDLQ bool
	err := s.pool.QueryRow(ctx, qualify(`SELECT
		coalesce((SELECT array_agg(name ORDER BY name) FROM (SELECT name FROM queen.queues WHERE encryption_enabled
		          ORDER BY name LIMIT 20) q), '{}'),
		EXISTS (SELECT 1 FROM queen.dlq WHERE encrypted)`, s.schema)).Scan(&encrypted, &sealedDLQ)
	if err != nil {
		return fmt.Errorf("list encrypted queues: %w", classify(err))
	}
	switch {
	case sealedDLQ:
		return fmt.Errorf("%w (sealed dead letters); set it", ErrKeyMissing)
	case hasCheck && len(encrypted) > 0:
		return fmt.Errorf("%w (queues with encryptionEnabled: %v); set it, or turn their encryption off with a "+
			"broker that has it", ErrKeyMissing, encrypted)
	case len(encrypted) > 0:
		s.log.Warn().Strs("queues", encrypted).Msg("these queues have encryptionEnabled but " + crypt.KeyEnv +
			" is not set: their pushes are refused (503) until a broker with the key serves them")
	}
	return nil
}

// openOneSealed opens a payload sealed before the key check value
// existed, if there is one: a sealed dead letter, else a sealed frame in
// the newest segments of encrypted queues. It fails with ErrWrongKey when
// the payload does not open under the broker's key.
func (s *Store) openOneSealed(ctx context.Context) error {
	var sealed []byte
	err := s.pool.QueryRow(ctx, qualify(`SELECT payload FROM queen.dlq WHERE encrypted LIMIT 1`, s.schema)).Scan(&sealed)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("read a sealed dead letter: %w", classify(err))
	}
	if sealed == nil {
		rows, err := s.pool.Query(ctx, qualify(`SELECT s.frames, s.frame_count FROM queen.queues q
			JOIN queen.partitions p ON p.queue_id = q.id
			CROSS JOIN LATERAL (SELECT frames, frame_count FROM queen.segments s
			                    WHERE s.partition_id = p.id ORDER BY first_offset DESC LIMIT 1) s
			WHERE q.encryption_enabled LIMIT 50`, s.schema))
		if err != nil {
			return fmt.Errorf("read encrypted segments: %w", classify(err))
		}
		defer rows.Close()
		for rows.Next() && sealed == nil {
			var frames []byte
			var count int
			if err := rows.Scan(&frames, &count); err != nil {
				return fmt.Errorf("read encrypted segments: %w", classify(err))
			}
			fs, err := partition.DecodeSegment(frames, count)
			if err != nil {
				continue
			}
			for k := range fs {
				if fs[k].Encrypted && !fs[k].Deleted() {
					sealed = fs[k].Payload
					break
				}
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read encrypted segments: %w", classify(err))
		}
	}
	if sealed == nil {
		return nil
	}
	if _, err := s.key.Open(nil, sealed); err != nil {
		return fmt.Errorf("%w (a stored sealed payload does not open: %w); start with that key", ErrWrongKey, err)
	}
	return nil
}
