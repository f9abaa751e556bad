package main

import (
	"bufio"
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/regina-mq/regina/partition"
)

// Item is one push item as sent: its partition and transaction id. The
// payload is derived from the transaction id (payloadFor), so it is not kept.
type Item struct {
	Partition string
	TxID      string
}

// Batch is one push body, sent once or more (first attempt, retries, twin and
// storm resends) always with the same items.
type Batch struct {
	ID       int
	Producer int
	Items    []Item
}

// Kind says why an attempt was sent.
type Kind uint8

// Attempt kinds.
const (
	// KindFirst is the first send of a new batch.
	KindFirst Kind = iota
	// KindRetry resends a batch some items of which had no definite answer.
	KindRetry
	// KindTwin is a concurrent copy of a first send (to another broker when
	// two are up): the same transaction ids racing each other.
	KindTwin
	// KindStorm resends a batch every item of which was already answered.
	KindStorm
)

func (k Kind) String() string {
	switch k {
	case KindFirst:
		return "first"
	case KindRetry:
		return "retry"
	case KindTwin:
		return "twin"
	case KindStorm:
		return "storm"
	}
	return "?"
}

// Status is the answer for one item of an attempt.
type Status uint8

// Per-item statuses.
const (
	// StatusNone: no per-item answer (transport error, non-201, bad body).
	StatusNone Status = iota
	// StatusQueued: "queued" (definite).
	StatusQueued
	// StatusDuplicate: "duplicate" (definite).
	StatusDuplicate
	// StatusFailed: "failed" (not definite: retried).
	StatusFailed
)

func (s Status) String() string {
	switch s {
	case StatusNone:
		return "none"
	case StatusQueued:
		return "queued"
	case StatusDuplicate:
		return "duplicate"
	case StatusFailed:
		return "failed"
	}
	return "?"
}

// Definite reports whether the status settles the item (queued or duplicate).
func (s Status) Definite() bool { return s == StatusQueued || s == StatusDuplicate }

// ItemResult is the answer for one item.
type ItemResult struct {
	Status    Status
	MessageID partition.UUID
	// PartitionID is the partition_id of a queued answer.
	PartitionID partition.UUID
}

// Attempt is one HTTP request and what came back.
type Attempt struct {
	Seq    int
	Batch  *Batch
	Kind   Kind
	Broker string
	// Start and End are offsets from the start of the run.
	Start, End time.Duration
	// HTTPStatus is 0 when no HTTP answer came (network error, timeout).
	HTTPStatus int
	// Err is the transport error or the error body of a non-201 answer.
	Err string
	// Protocol, when not empty, says how a 201 answer broke the API contract.
	Protocol string
	// Results has one entry per batch item when a 201 array was parsed.
	Results []ItemResult
}

// History is the record of every request of a run.
type History struct {
	mu       sync.Mutex
	attempts []*Attempt
	batches  int
}

// NewBatch registers a batch and gives it an id.
func (h *History) NewBatch(producer int, items []Item) *Batch {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.batches++
	return &Batch{ID: h.batches, Producer: producer, Items: items}
}

// Add records a finished attempt and gives it its sequence number.
func (h *History) Add(a *Attempt) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a.Seq = len(h.attempts) + 1
	h.attempts = append(h.attempts, a)
}

// Attempts returns the recorded attempts (the slice is shared; call it once
// the producers are done).
func (h *History) Attempts() []*Attempt {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.attempts
}

// jsonAttempt is the JSONL form of an attempt.
type jsonAttempt struct {
	Seq      int          `json:"seq"`
	Batch    int          `json:"batch"`
	Producer int          `json:"producer"`
	Kind     string       `json:"kind"`
	Broker   string       `json:"broker"`
	StartMS  float64      `json:"start_ms"`
	EndMS    float64      `json:"end_ms"`
	HTTP     int          `json:"http"`
	Err      string       `json:"err,omitempty"`
	Protocol string       `json:"protocol,omitempty"`
	Items    []jsonResult `json:"items"`
}

type jsonResult struct {
	Partition   string `json:"p"`
	TxID        string `json:"tx"`
	Status      string `json:"status,omitempty"`
	MessageID   string `json:"id,omitempty"`
	PartitionID string `json:"pid,omitempty"`
}

// WriteJSONL writes one JSON object per attempt, in sequence order.
func WriteJSONL(w io.Writer, attempts []*Attempt) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	enc := json.NewEncoder(bw)
	for _, a := range attempts {
		if err := enc.Encode(toJSON(a)); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func toJSON(a *Attempt) jsonAttempt {
	j := jsonAttempt{Seq: a.Seq, Batch: a.Batch.ID, Producer: a.Batch.Producer, Kind: a.Kind.String(),
		Broker: a.Broker, StartMS: ms(a.Start), EndMS: ms(a.End), HTTP: a.HTTPStatus, Err: a.Err,
		Protocol: a.Protocol, Items: make([]jsonResult, len(a.Batch.Items))}
	for i, it := range a.Batch.Items {
		j.Items[i] = jsonResult{Partition: it.Partition, TxID: it.TxID}
		if i < len(a.Results) {
			r := a.Results[i]
			j.Items[i].Status = r.Status.String()
			if r.Status == StatusQueued || r.Status == StatusDuplicate {
				j.Items[i].MessageID = r.MessageID.String()
			}
			if r.Status == StatusQueued {
				j.Items[i].PartitionID = r.PartitionID.String()
			}
		}
	}
	return j
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
