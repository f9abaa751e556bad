package main

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/regina-mq/regina/actor"
	"github.com/regina-mq/regina/internal/crypt"
	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
)

// configuringAdmin is the store's admin calls, with a configure that also
// tells the partition actors, so that a push answered after the configure's
// answer follows the new options (encryptionEnabled above all).
type configuringAdmin struct {
	*sqlstore.Store
	reg *actor.Registry
}

// Configure stores the queue's options and makes the actors read them again.
func (a configuringAdmin) Configure(ctx context.Context, queue, namespace, task string,
	o partition.QueueOptions) (reginatype.ConfiguredQueue, error) {
	res, err := a.Store.Configure(ctx, queue, namespace, task, o)
	if err == nil {
		a.reg.OptionsChanged()
	}
	return res, err
}

// logEncryption says at start whether payload encryption is available, and
// warns loudly when queues ask for it and the broker has no key (their
// payloads are then stored in plaintext, as upstream Queen does).
func logEncryption(ctx context.Context, log zerolog.Logger, store *sqlstore.Store, haveKey bool) {
	if haveKey {
		log.Info().Msg("payload encryption available: queues with encryptionEnabled store AES-256-GCM payloads (" +
			crypt.KeyEnv + ")")
		return
	}
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	names, err := store.EncryptedQueues(qctx, 20)
	switch {
	case err != nil:
		log.Warn().Err(err).Msg(crypt.KeyEnv + " is not set: queues with encryptionEnabled store payloads in plaintext " +
			"(could not list them)")
	case len(names) > 0:
		log.Warn().Strs("queues", names).Msg(crypt.KeyEnv + " is not set: these queues have encryptionEnabled but " +
			"their new payloads are stored in plaintext, and their encrypted ones are served as encrypted envelopes")
	default:
		log.Info().Msg(crypt.KeyEnv + " is not set: payload encryption is off (a queue configured with " +
			"encryptionEnabled stores plaintext)")
	}
}
