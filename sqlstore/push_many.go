package sqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/regina-mq/regina/reginatype"
)

// PushMany runs the push transactions of several batches (of distinct
// partitions) in one round trip, with the given shape (ShapeSingle is taken
// as ShapeOneTransaction), and sets res[i] and errs[i] for batch i as Push
// would. res and errs must be as long as bs.
//
// The batches the dedup cache expects to be all duplicates, naming their
// originals' segments (see reginatype.PushBatch.Originals), first go
// together through one read-only statement (queen.push_dups_segments); those
// it proves are answered from its snapshot (res[i].Unlocked), without a row
// lock, a transaction id or WAL. The other batches, and those it did not
// prove, take the locked path (a batch expecting duplicates without
// Originals too: PushMany never runs push_dups).
//
// One batch's trouble never fails another's: a partition that is missing or
// whose window changed gets its own ErrPartitionMissing or ErrWindowChanged
// and nothing of it is written, while the others commit. When the one
// transaction fails with a PostgreSQL error (so nothing committed), each
// batch is run again alone, so an error that belongs to one batch stays
// with it. Only an outcome the connection leaves unknown (or an unreachable
// server) is every batch's error.
func (s *Store) PushMany(ctx context.Context, shape reginatype.PushShape, bs []*reginatype.PushBatch, res []reginatype.PushResult, errs []error) {
	for i := range bs {
		res[i], errs[i] = reginatype.PushResult{}, nil
	}
	if len(bs) == 0 {
		return
	}
	// Acquire first: see Push (the epoch moves on before anything runs).
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		fill(errs, classify(err))
		return
	}
	epoch := s.Epoch()
	proven := make([]bool, len(bs))
	if err := s.proveDuplicates(ctx, conn, epoch, bs, res, proven); err != nil {
		if !statementError(err) {
			conn.Release()
			fill(errs, classify(err))
			return
		}
		clear(proven) // it wrote nothing: every batch takes the locked path
	}
	locked, at := bs, []int(nil)
	if n := countTrue(proven); n > 0 {
		locked = make([]*reginatype.PushBatch, 0, len(bs)-n)
		for i, b := range bs {
			if !proven[i] {
				locked = append(locked, b)
				at = append(at, i)
			}
		}
	}
	if len(locked) == 0 {
		conn.Release()
		return
	}
	lres, lerrs := res, errs
	if at != nil {
		lres, lerrs = make([]reginatype.PushResult, len(locked)), make([]error, len(locked))
	}
	s.pushLocked(ctx, conn, epoch, shape, locked, lres, lerrs)
	for j, i := range at {
		res[i], errs[i] = lres[j], lerrs[j]
	}
}

// statementError reports whether err is a statement's PostgreSQL error that
// leaves the connection usable (nothing of the statement committed).
func statementError(err error) bool {
	pe, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pe.Severity != "FATAL" && pe.Severity != "PANIC"
}

// pushLocked is PushMany's locked path for bs on conn, which it releases.
func (s *Store) pushLocked(ctx context.Context, conn *pgxpool.Conn, epoch uint64, shape reginatype.PushShape,
	bs []*reginatype.PushBatch, res []reginatype.PushResult, errs []error) {
	if shape == reginatype.ShapePipelined || s.citus != nil { // Citus: each batch on its worker, no 2PC
		err := s.pushPipelined(ctx, conn, epoch, bs, res, errs)
		conn.Release()
		if err != nil {
			fill(errs, classify(err))
		}
		return
	}
	err := s.pushOneTransaction(ctx, conn, epoch, bs, res, errs)
	conn.Release()
	if err == nil {
		return
	}
	if !statementError(err) {
		fill(errs, classify(err))
		return
	}
	// The statement failed, so the transaction rolled back: nothing of any
	// batch is written. Each runs alone, and keeps its own outcome.
	for i, b := range bs {
		x := *b
		x.ExpectDuplicates = false
		res[i], errs[i] = s.Push(ctx, &x)
	}
}

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func fill(errs []error, err error) {
	for i := range errs {
		errs[i] = err
	}
}

// watermarkFor is b's watermark, or NoWatermark when it was computed under
// another epoch than the connection's.
func watermarkFor(b *reginatype.PushBatch, epoch uint64) int64 {
	if b.Epoch != epoch {
		return reginatype.NoWatermark
	}
	return b.Watermark
}

// pushStatus turns push_segment's status into Push's error.
func pushStatus(status string) error {
	switch status {
	case "ok":
		return nil
	case "missing":
		return reginatype.ErrPartitionMissing
	case "window_changed":
		return reginatype.ErrWindowChanged
	default:
		return fmt.Errorf("push_segment: unexpected status %q", status)
	}
}

// pushOneTransaction runs queen.push_segments for bs. A non-nil error is the
// statement's (nothing committed, or the outcome unknown).
func (s *Store) pushOneTransaction(ctx context.Context, conn *pgxpool.Conn, epoch uint64, bs []*reginatype.PushBatch,
	res []reginatype.PushResult, errs []error) error {
	var (
		parts  = make([][16]byte, len(bs))
		hints  = make([]int32, len(bs))
		marks  = make([]int64, len(bs))
		counts = make([]int32, len(bs))
		hasFps = make([]bool, len(bs))
		hashes [][]byte
		fps    = []int64{}
		nIDs   int
		nBody  int
	)
	for _, b := range bs {
		nIDs += len(b.IDs)
		nBody += len(b.Bodies)
	}
	ids := make([]byte, 0, nIDs)
	bodies := make([]byte, 0, nBody)
	var ends []int32
	for i, b := range bs {
		parts[i] = b.Partition
		hints[i] = int32(b.WindowHint)
		marks[i] = watermarkFor(b, epoch)
		counts[i] = int32(b.Len())
		hasFps[i] = b.Fingerprints != nil
		hashes = append(hashes, b.Hashes...)
		ids = append(ids, b.IDs...)
		bodies = append(bodies, b.Bodies...)
		ends = append(ends, b.Ends...)
		fps = append(fps, b.Fingerprints...)
	}
	// One statement: when no sidecar child covered its time it wrote
	// nothing, and runs again once the children are made.
	return s.retryMissingSidecarChild(ctx, func() error {
		return s.pushSegmentsOnce(ctx, conn, bs, res, errs, epoch,
			parts, hints, marks, counts, hashes, ids, bodies, ends, fps, hasFps)
	})
}

// pushSegmentsOnce runs queen.push_segments once and reads its rows into res
// and errs.
func (s *Store) pushSegmentsOnce(ctx context.Context, conn *pgxpool.Conn, bs []*reginatype.PushBatch,
	res []reginatype.PushResult, errs []error, epoch uint64, args ...any) error {
	rows, err := conn.Query(ctx, s.sql.pushSegments, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var k int32
		var r reginatype.PushResult
		status, err := scanPush(prefixRow{rows: rows, prefix: &k}, &r)
		if err != nil {
			return err
		}
		if k < 1 || int(k) > len(bs) {
			return fmt.Errorf("push_segments: batch %d of %d", k, len(bs))
		}
		r.Epoch = epoch
		res[k-1], errs[k-1] = r, pushStatus(status)
		seen++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if seen != len(bs) {
		return fmt.Errorf("push_segments: %d results for %d batches", seen, len(bs))
	}
	return nil
}

// prefixRow scans a row whose first column is prefix and the rest what
// scanPush reads.
type prefixRow struct {
	rows   pgx.Rows
	prefix any
}

// Scan implements pgx.Row.
func (p prefixRow) Scan(dest ...any) error {
	return p.rows.Scan(append([]any{p.prefix}, dest...)...)
}

// pushSegmentStmt names the prepared push_segment of the pipelined shape.
const pushSegmentStmt = "regina_push_segment"

// pushPipelined sends one push_segment per batch, each followed by a Sync
// (its own transaction), then reads the answers. A non-nil error is the
// connection's (every outcome unknown); a statement's error is its batch's.
func (s *Store) pushPipelined(ctx context.Context, conn *pgxpool.Conn, epoch uint64, bs []*reginatype.PushBatch,
	res []reginatype.PushResult, errs []error) error {
	c := conn.Conn()
	sd, err := c.Prepare(ctx, pushSegmentStmt, s.sql.pushSegment)
	if err != nil {
		return err
	}
	tm := c.TypeMap()
	paramFormats := make([]int16, len(sd.ParamOIDs))
	for i, oid := range sd.ParamOIDs {
		paramFormats[i] = tm.FormatCodeForOID(oid)
	}
	resultFormats := make([]int16, len(sd.Fields))
	for i, f := range sd.Fields {
		resultFormats[i] = tm.FormatCodeForOID(f.DataTypeOID)
	}
	p := c.PgConn().StartPipeline(ctx)
	for _, b := range bs {
		args := []any{uuidArg(b.Partition), b.WindowHint, watermarkFor(b, epoch), b.Hashes, b.IDs, b.Bodies, b.Ends, b.Fingerprints}
		vals := make([][]byte, len(args))
		for i, a := range args {
			if vals[i], err = tm.Encode(sd.ParamOIDs[i], paramFormats[i], a, nil); err != nil {
				_ = p.Close()
				return fmt.Errorf("push pipeline: encode argument %d: %w", i+1, err)
			}
		}
		p.SendQueryStatement(sd, vals, paramFormats, resultFormats)
		if err := p.Sync(); err != nil {
			_ = p.Close()
			return err
		}
	}
	for i := range bs {
		r, err := p.GetResults()
		if err != nil {
			_ = p.Close()
			return err
		}
		rr, ok := r.(*pgconn.ResultReader)
		if !ok {
			_ = p.Close()
			return fmt.Errorf("push pipeline: result %T, want rows", r)
		}
		var status string
		for rr.NextRow() {
			status, errs[i] = scanPush(s.pushRow(valuesRow{tm: tm, fields: rr.FieldDescriptions(), values: rr.Values()}), &res[i])
		}
		if _, err := rr.Close(); err != nil {
			errs[i] = classify(err) // this batch's statement failed; its transaction rolled back
		} else if errs[i] == nil {
			errs[i] = pushStatus(status)
		}
		res[i].Epoch = epoch
		if r, err = p.GetResults(); err != nil {
			_ = p.Close()
			return err
		}
		if _, ok := r.(*pgconn.PipelineSync); !ok {
			_ = p.Close()
			return fmt.Errorf("push pipeline: result %T, want the sync", r)
		}
	}
	return p.Close()
}

// valuesRow scans one row read from a pipeline.
type valuesRow struct {
	tm     *pgtype.Map
	fields []pgconn.FieldDescription
	values [][]byte
}

// Scan implements pgx.Row.
func (v valuesRow) Scan(dest ...any) error { return pgx.ScanRow(v.tm, v.fields, v.values, dest...) }
