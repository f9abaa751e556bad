package sqlstore

import (
	"context"
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
// encryptionEnabled and the store has a key. Without a key the payload is
// stored as sent, as upstream Queen does, with a rate-limited warning.
func (s *Store) seal(b *partition.Body, ref reginatype.PartitionRef, queue string) {
	if !ref.Encrypt {
		return
	}
	if s.key == nil {
		if warnNow(&s.warned.seal) {
			s.log.Warn().Str("queue", queue).Msg("queue has encryptionEnabled but " + crypt.KeyEnv +
				" is not set: its payloads are stored in plaintext")
		}
		return
	}
	b.Payload = s.key.Seal(nil, b.Payload)
	b.Encrypted = true
}

// reveal replaces a sealed payload by its plaintext. When it cannot (no
// key, another key, altered bytes) the payload becomes Queen's envelope
// ({"encrypted","iv","authTag"}), as upstream passes it through, with a
// rate-limited warning. b.Encrypted stays as stored.
func (s *Store) reveal(b *partition.Body) {
	if !b.Encrypted {
		return
	}
	plain, err := s.key.Open(nil, b.Payload)
	if err == nil {
		b.Payload = plain
		return
	}
	if warnNow(&s.warned.open) {
		s.log.Warn().Err(err).Msg("a stored payload could not be decrypted; it is served as its encrypted envelope")
	}
	b.Payload = crypt.Envelope(nil, b.Payload)
}

// warnNow reports whether a warning whose last time is in last may be
// logged now, and records it.
func warnNow(last *atomic.Int64) bool {
	now := time.Now().Unix()
	prev := last.Load()
	return now-prev >= int64(warnEvery/time.Second) && last.CompareAndSwap(prev, now)
}

// EncryptedQueues returns the names of the queues configured with
// encryptionEnabled (at most limit), for the start-up warning of a broker
// without a key.
func (s *Store) EncryptedQueues(ctx context.Context, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, qualify(`SELECT name FROM queen.queues WHERE encryption_enabled ORDER BY name LIMIT $1`, s.schema), limit)
	if err != nil {
		return nil, fmt.Errorf("encrypted queues: %w", classify(err))
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("encrypted queues: %w", classify(err))
	}
	return names, nil
}
