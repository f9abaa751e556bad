package main

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/regina-mq/regina/partition"
)

// writeState dumps the queue's rows (decoded) for a post-mortem.
func writeState(path string, st *DBState) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	fmt.Fprintf(w, "queue %q found=%v dedup_window_seconds=%d retention_enabled=%v orphan_segments=%d orphan_log_txns=%d\n",
		st.Queue, st.QueueFound, st.WindowSeconds, st.RetentionEnabled, st.OrphanSegments, st.OrphanTxns)
	names := make([]string, 0, len(st.Partitions))
	for n := range st.Partitions {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := st.Partitions[n]
		fmt.Fprintf(w, "\npartition %s id=%s next_offset=%d segments=%d log_txns=%d\n", p.Name, p.ID, p.NextOffset, len(p.Segments), len(p.Txns))
		for _, t := range p.Txns {
			fmt.Fprintf(w, "  log_txns first_offset=%d created_at=%s cardinality=%d\n", t.FirstOffset, t.CreatedAt.UTC().Format(time.RFC3339Nano), len(t.Hashes))
		}
		for _, s := range p.Segments {
			fmt.Fprintf(w, "  segment first_offset=%d frame_count=%d created_at=%s bytes=%d\n", s.FirstOffset, s.FrameCount,
				s.CreatedAt.UTC().Format(time.RFC3339Nano), len(s.Frames))
			frames, err := partition.DecodeSegment(s.Frames, s.FrameCount)
			if err != nil {
				fmt.Fprintf(w, "    DECODE ERROR: %v\n", err)
				continue
			}
			for k, fr := range frames {
				fmt.Fprintf(w, "    offset=%d message_id=%s tx=%s created=%s\n", s.FirstOffset+int64(k), fr.MessageID, fr.TransactionID,
					fr.Created().Format(time.RFC3339Nano))
			}
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
