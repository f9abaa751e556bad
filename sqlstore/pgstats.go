package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
)

// postgresStatsSQL builds GET /api/v1/analytics/postgres-stats in one
// statement from PostgreSQL's statistics views, restricted to the broker's
// schema ($1). Every list is bounded (top 10 to 20). Ratios are percentages
// with two decimals; sizes are pg_size_pretty strings with their bytes.
const postgresStatsSQL = `
WITH t AS (SELECT schemaname, relname, heap_blks_read, heap_blks_hit
             FROM pg_statio_user_tables WHERE schemaname = $1),
     i AS (SELECT schemaname, relname, indexrelname, idx_blks_read, idx_blks_hit
             FROM pg_statio_user_indexes WHERE schemaname = $1),
     u AS (SELECT schemaname, relname, n_dead_tup, n_live_tup, last_vacuum, last_autovacuum, n_tup_upd,
                  n_tup_hot_upd, autovacuum_count, autoanalyze_count
             FROM pg_stat_user_tables WHERE schemaname = $1),
     d AS (SELECT blks_read, blks_hit FROM pg_stat_database WHERE datname = current_database())
SELECT jsonb_build_object(
  'timestamp', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
  'database', current_database(),
  'schema', $1::text,
  'databaseCache', (SELECT jsonb_build_object('database', current_database(), 'diskReads', d.blks_read,
      'cacheHits', d.blks_hit,
      'cacheHitRatio', round(100.0 * d.blks_hit / nullif(d.blks_hit + d.blks_read, 0), 2)) FROM d),
  'tableCache', coalesce((SELECT jsonb_agg(x ORDER BY x."diskReads" DESC) FROM (
      SELECT schemaname AS schema, relname AS table, coalesce(heap_blks_read, 0) AS "diskReads",
             coalesce(heap_blks_hit, 0) AS "cacheHits",
             round(100.0 * heap_blks_hit / nullif(heap_blks_hit + heap_blks_read, 0), 2) AS "cacheHitRatio"
        FROM t ORDER BY heap_blks_read DESC NULLS LAST LIMIT 20) x), '[]'::jsonb),
  'indexCache', coalesce((SELECT jsonb_agg(x ORDER BY x."diskReads" DESC) FROM (
      SELECT schemaname AS schema, relname AS table, indexrelname AS index, idx_blks_read AS "diskReads",
             idx_blks_hit AS "cacheHits",
             round(100.0 * idx_blks_hit / nullif(idx_blks_hit + idx_blks_read, 0), 2) AS "cacheHitRatio"
        FROM i ORDER BY idx_blks_read DESC NULLS LAST LIMIT 20) x), '[]'::jsonb),
  'cacheSummary', jsonb_build_object(
      'tables', (SELECT jsonb_build_object('diskReads', coalesce(sum(heap_blks_read), 0),
          'cacheHits', coalesce(sum(heap_blks_hit), 0),
          'hitRatio', round(100.0 * sum(heap_blks_hit) / nullif(sum(heap_blks_hit) + sum(heap_blks_read), 0), 2))
          FROM t),
      'indexes', (SELECT jsonb_build_object('diskReads', coalesce(sum(idx_blks_read), 0),
          'cacheHits', coalesce(sum(idx_blks_hit), 0),
          'hitRatio', round(100.0 * sum(idx_blks_hit) / nullif(sum(idx_blks_hit) + sum(idx_blks_read), 0), 2))
          FROM i)),
  'deadTuples', coalesce((SELECT jsonb_agg(x ORDER BY x."deadTuples" DESC) FROM (
      SELECT schemaname AS schema, relname AS table, n_dead_tup AS "deadTuples", n_live_tup AS "liveTuples",
             round(100.0 * n_dead_tup / nullif(n_dead_tup + n_live_tup, 0), 2) AS "deadPercentage",
             last_vacuum AS "lastVacuum", last_autovacuum AS "lastAutovacuum"
        FROM u ORDER BY n_dead_tup DESC LIMIT 15) x), '[]'::jsonb),
  'hotUpdates', coalesce((SELECT jsonb_agg(x ORDER BY x."totalUpdates" DESC) FROM (
      SELECT schemaname AS schema, relname AS table, n_tup_upd AS "totalUpdates", n_tup_hot_upd AS "hotUpdates",
             round(100.0 * n_tup_hot_upd / nullif(n_tup_upd, 0), 2) AS "hotUpdatePercentage"
        FROM u WHERE n_tup_upd > 0 ORDER BY n_tup_upd DESC LIMIT 15) x), '[]'::jsonb),
  'activeQueries', coalesce((SELECT jsonb_agg(x) FROM (
      SELECT pid, (now() - query_start)::text AS duration, state, left(query, 200) AS query,
             wait_event_type AS "waitEventType", wait_event AS "waitEvent"
        FROM pg_stat_activity
       WHERE datname = current_database() AND state <> 'idle' AND pid <> pg_backend_pid()
         AND query_start < now() - interval '1 second'
       ORDER BY query_start LIMIT 10) x), '[]'::jsonb),
  'autovacuumStatus', coalesce((SELECT jsonb_agg(x) FROM (
      SELECT relname AS table, last_autovacuum AS "lastAutovacuum", n_dead_tup AS "deadTuples",
             autovacuum_count AS "autovacuumCount", autoanalyze_count AS "autoanalyzeCount"
        FROM u WHERE n_dead_tup > 1000 ORDER BY n_dead_tup DESC LIMIT 20) x), '[]'::jsonb),
  'bufferConfig', jsonb_build_object('sharedBuffers', current_setting('shared_buffers'),
      'sharedBuffersSize', current_setting('shared_buffers')),
  'bufferUsage', '[]'::jsonb,
  'tableSizes', coalesce((SELECT jsonb_agg(x ORDER BY x."totalSizeBytes" DESC) FROM (
      SELECT c.relname AS table, pg_size_pretty(pg_total_relation_size(c.oid)) AS "totalSize",
             pg_total_relation_size(c.oid) AS "totalSizeBytes",
             pg_size_pretty(pg_relation_size(c.oid)) AS "tableSize", pg_relation_size(c.oid) AS "tableSizeBytes",
             pg_size_pretty(pg_indexes_size(c.oid)) AS "indexSize", pg_indexes_size(c.oid) AS "indexSizeBytes"
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname = $1 AND c.relkind = 'r'
       ORDER BY pg_total_relation_size(c.oid) DESC LIMIT 20) x), '[]'::jsonb))`

// PostgresStats is a snapshot of PostgreSQL's statistics for the broker's
// schema: cache hit ratios, dead tuples, HOT updates, queries running for
// over a second, autovacuum, shared buffers and table sizes. bufferUsage is
// always empty (it needs the pg_buffercache extension, which Regina does
// not install).
func (s *Store) PostgresStats(ctx context.Context) (map[string]any, error) {
	var b []byte
	if err := s.pool.QueryRow(ctx, postgresStatsSQL, s.schema).Scan(&b); err != nil {
		return nil, fmt.Errorf("postgres stats: %w", classify(err))
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("postgres stats: %w", err)
	}
	return out, nil
}
