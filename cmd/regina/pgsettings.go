package main

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/regina-mq/regina/sqlstore"
)

// logServerSettings reads, once at start, the PostgreSQL settings Regina
// relies on and logs their values at info and one warning per setting that
// works against the broker (sqlstore.ServerSettings.Warnings). It changes no
// setting; failing to read them is a warning, not a reason to stop.
func logServerSettings(ctx context.Context, log zerolog.Logger, store *sqlstore.Store, poolSize int) {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := store.ServerSettings(qctx)
	if err != nil {
		log.Warn().Err(err).Msg("could not read the PostgreSQL settings Regina relies on; not checked")
		return
	}
	log.Info().Bool("autovacuum", s.Autovacuum).Str("synchronous_commit", s.SynchronousCommit).
		Bool("fsync", s.Fsync).Bool("full_page_writes", s.FullPageWrites).Bool("jit", s.JIT).
		Str("wal_compression", s.WALCompression).Str("max_wal_size", s.MaxWALSize).
		Str("shared_buffers", s.SharedBuffers).Int("max_connections", s.MaxConnections).
		Int("pool_size", poolSize).Msg("PostgreSQL settings")
	for _, w := range s.Warnings(poolSize) {
		log.Warn().Str("setting", w.Setting).Str("value", w.Value).Msg(w.Message)
	}
}
