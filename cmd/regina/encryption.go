package main

import (
	"context"

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

// logEncryption says at start whether payload encryption is available.
// Without a key, the store has refused to start if sealed payloads are
// stored, and has warned about the encrypted queues whose pushes it will
// refuse (sqlstore checkKey).
func logEncryption(log zerolog.Logger, haveKey bool) {
	if haveKey {
		log.Info().Msg("payload encryption available: queues with encryptionEnabled store AES-256-GCM payloads (" +
			crypt.KeyEnv + "; key check value verified)")
		return
	}
	log.Info().Msg(crypt.KeyEnv + " is not set: payload encryption is off (configuring a queue with " +
		"encryptionEnabled is refused, and so are pushes to encrypted queues)")
}
