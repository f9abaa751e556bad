// Package metrics defines the broker's Prometheus metrics and owns the
// *prometheus.Registry they live in, built on
// github.com/prometheus/client_golang. GET /metrics/prometheus writes it in the
// text exposition format (WriteText).
//
// It is a leaf: it imports nothing of this repository. Package actor records
// the push path (verdicts, batch size, push transaction latency, retry age)
// and installs the scrape-time Source (actors, mailboxes, the connection pool,
// the dedup cache); package wire records HTTP requests and unresolvable acks;
// cmd/regina creates one Metrics per broker and hands it to both, and to the
// retention loop (ObserveRetention).
//
// Label cardinality is bounded by construction: routes are templates
// (never raw paths), and queue labels are given to the first
// Config.MaxQueueLabels distinct queues seen (default 1000); every later queue
// is reported as OtherQueue. Nothing is labelled per partition or per
// transaction id.
//
// Families (all prefixed regina_, plus the standard go_* and process_*):
//
//	http_requests_total{route,method,code}            counter
//	http_request_duration_seconds{route,method}       histogram
//	push_batch_items                                  histogram: items per push transaction
//	push_transaction_duration_seconds                 histogram: queen.push_segment round trip
//	push_failures_total, mailbox_full_total           counters
//	actors, mailbox_depth_items                       gauges
//	dedup_verdicts_total{queue,verdict}               counter: queued | duplicate | duplicate_unknown_original | conflict
//	dedup_payload_mismatch_total{queue}               counter: repeats with another payload (dedupPayloadCheck)
//	dedup_retry_age_seconds{queue}                    histogram: original's stored time -> its duplicate
//	dedup_probes_total{path,cause}                    counter: watermark/cache_hit | full_window/<cache reason>
//	dedup_cache_found_total                           counter: batch hashes the cache held (likely duplicates)
//	dedup_cache_bytes, dedup_cache_budget_bytes       gauges
//	dedup_cache_hashes                                gauge
//	dedup_cache_partitions{state}                     gauge: known | hydrating | tombstone | too_big
//	dedup_cache_evictions_total                       counter
//	dedup_cache_hydrations_total{result}              counter
//	dedup_cache_hydrations_running                    gauge
//	retention_deleted_rows_total{table}               counter: log_txns | segments
//	retention_passes_total{result}                    counter: ok | error
//	ack_unresolvable_total{queue}                     counter
//	db_pool_connections{state}                        gauge: idle | acquired | constructing
//	db_pool_max_connections                           gauge
//	db_pool_empty_acquires_total                      counter: acquires that had to wait
package metrics
