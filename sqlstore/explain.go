package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// Explain answers, for each key, what a push of it would get now, with the
// same probe a push runs (the GIN-driven full-window probe of
// queen.push_segment, without the partition lock and without the window
// bound, so that copies outside the window are reported as expired). It runs
// in a read-only REPEATABLE READ transaction: it writes nothing and creates no
// queue or partition. At most MaxExplainKeys keys.
func (s *Store) Explain(ctx context.Context, keys []reginatype.ExplainKey) ([]reginatype.ExplainResult, error) {
	if len(keys) > reginatype.MaxExplainKeys {
		return nil, fmt.Errorf("explain: %d keys, over %d", len(keys), reginatype.MaxExplainKeys)
	}
	out := make([]reginatype.ExplainResult, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	// encrypted[i]: key i's queue has encryptionEnabled (its fingerprints
	// are keyed).
	encrypted := make([]bool, len(keys))
	queues := make([]string, len(keys))
	parts := make([]string, len(keys))
	for i, k := range keys {
		queues[i], parts[i] = k.Queue, k.Partition
	}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			for i := range out {
				out[i] = reginatype.ExplainResult{}
			}
			rows, err := tx.Query(ctx, s.sql.admin.explainResolve, queues, parts)
			if err != nil {
				return err
			}
			var (
				pids    [][16]byte
				hashes  [][]byte
				windows []int32
				idx     []int32
			)
			for rows.Next() {
				var (
					i        int32
					qid, pid pgtype.UUID
					window   *int32
					check    *string
					enc      *bool
					now      time.Time
				)
				if err := rows.Scan(&i, &qid, &window, &check, &enc, &pid, &now); err != nil {
					rows.Close()
					return err
				}
				r := &out[i-1]
				encrypted[i-1] = enc != nil && *enc
				r.Now = now
				r.QueueExists = qid.Valid
				r.WindowSeconds = partition.DefaultDedupWindowSeconds
				if window != nil {
					r.WindowSeconds = int(*window)
				}
				r.PayloadCheck = partition.DefaultQueueOptions().DedupPayloadCheck
				if check != nil {
					r.PayloadCheck = *check
				}
				if pid.Valid {
					r.PartitionExists = true
					r.PartitionID = pid.Bytes
					h := partition.HashTxID(keys[i-1].TransactionID)
					pids = append(pids, pid.Bytes)
					hashes = append(hashes, h[:])
					windows = append(windows, int32(r.WindowSeconds))
					idx = append(idx, i)
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if len(pids) == 0 {
				return nil
			}
			// As in push_probe's full-window probe: the GIN index, never a
			// scan, and a hash join of the keys with the rows' hashes.
			if _, err := tx.Exec(ctx, "SELECT set_config('enable_seqscan', 'off', true), set_config('enable_nestloop', 'off', true)"); err != nil {
				return err
			}
			rows, err = tx.Query(ctx, s.sql.admin.explainProbe, pids, hashes, windows, idx)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var (
					i   int32
					o   reginatype.Occurrence
					mid []byte
				)
				if err := rows.Scan(&i, &o.Offset, &o.CreatedAt, &o.InWindow, &mid, &o.Fingerprint); err != nil {
					return err
				}
				if len(mid) == 16 {
					copy(o.MessageID[:], mid)
				} else {
					o.SegmentGone = true
				}
				out[i-1].Occurrences = append(out[i-1].Occurrences, o)
			}
			return rows.Err()
		})
	if err != nil {
		return nil, fmt.Errorf("explain: %w", classify(err))
	}
	for i := range out {
		decide(&out[i])
		if keys[i].Payload != nil {
			out[i].PayloadFingerprint = s.fingerprint(encrypted[i], keys[i].Payload)
			comparePayload(&out[i])
		}
	}
	return out, nil
}

// comparePayload compares a given payload's fingerprint (in
// r.PayloadFingerprint) with the original's, as a push of it would: under
// dedupPayloadCheck reject, a duplicate with another payload is a conflict.
func comparePayload(r *reginatype.ExplainResult) {
	r.PayloadGiven = true
	if r.Original == nil {
		return
	}
	r.Payload = partition.ComparePayload(r.PayloadFingerprint, r.Original.Fingerprint)
	if r.Verdict == reginatype.ExplainDuplicate && r.Payload == partition.PayloadDifferent &&
		r.PayloadCheck == partition.PayloadCheckReject {
		r.Verdict = reginatype.ExplainConflict
	}
}

// decide sets Verdict and Original from the occurrences (in offset order).
func decide(r *reginatype.ExplainResult) {
	switch {
	case !r.PartitionExists:
		r.Verdict = reginatype.ExplainNew
		return
	case r.WindowSeconds == 0:
		r.Verdict = reginatype.ExplainDisabled
	default:
		for k := range r.Occurrences {
			if r.Occurrences[k].InWindow {
				r.Verdict = reginatype.ExplainDuplicate
				r.Original = &r.Occurrences[k]
				return
			}
		}
		r.Verdict = reginatype.ExplainNew
		if len(r.Occurrences) > 0 {
			r.Verdict = reginatype.ExplainExpired
		}
	}
	if n := len(r.Occurrences); n > 0 {
		r.Original = &r.Occurrences[n-1]
	}
}
