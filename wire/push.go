package wire

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/segmentio/encoding/json"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// MaxNameLen bounds queue and partition names, in bytes.
const MaxNameLen = 255

// PushItem is one decoded, validated push item.
type PushItem struct {
	Queue, Partition string
	// TransactionID is the producer's key, or one minted by the broker when
	// the item had none (Minted is then true).
	TransactionID string
	Minted        bool
	TraceID       partition.UUID
	HasTrace      bool
	// Payload is the raw JSON value as received ("null" when absent).
	Payload []byte
}

type rawPushBody struct {
	Items json.RawMessage `json:"items"`
}

type rawPushItem struct {
	Queue         json.RawMessage `json:"queue"`
	Partition     json.RawMessage `json:"partition"`
	Payload       json.RawMessage `json:"payload"`
	TransactionID json.RawMessage `json:"transactionId"`
	TraceID       json.RawMessage `json:"traceId"`
}

var nullPayload = []byte("null")

// DecodePush decodes and validates a push body. Every error is a client
// error whose text is meant for the 400 response. Payload slices alias body.
func DecodePush(body []byte) ([]PushItem, error) {
	if err := checkBody(body); err != nil {
		return nil, err
	}
	var top rawPushBody
	if err := unmarshal(body, &top); err != nil {
		if kindOf(body) != kindObject {
			return nil, errors.New("Request body must be a JSON object")
		}
		return nil, invalidJSON(err)
	}
	if kindOf(top.Items) != kindArray {
		return nil, errors.New("items array is required")
	}
	var raws []rawPushItem
	if err := unmarshal(top.Items, &raws); err != nil {
		return nil, errors.New("Each item must be an object")
	}
	items := make([]PushItem, len(raws))
	for i := range raws {
		if err := decodeItem(&raws[i], &items[i]); err != nil {
			return nil, fmt.Errorf("items[%d]: %w", i, err)
		}
	}
	return items, nil
}

func decodeItem(r *rawPushItem, it *PushItem) error {
	var err error
	if kindOf(r.Queue) != kindString {
		return errors.New("queue must be a string")
	}
	if it.Queue, err = rawString(r.Queue); err != nil {
		return errors.New("queue must be a string")
	}
	if err := checkName("queue", it.Queue); err != nil {
		return err
	}
	switch kindOf(r.Partition) {
	case kindMissing, kindNull:
		it.Partition = reginatype.DefaultPartition
	case kindString:
		if it.Partition, err = rawString(r.Partition); err != nil {
			return errors.New("partition must be a string")
		}
		if it.Partition == "" {
			it.Partition = reginatype.DefaultPartition
		}
		if err := checkName("partition", it.Partition); err != nil {
			return err
		}
	default:
		return errors.New("partition must be a string")
	}
	switch kindOf(r.TransactionID) {
	case kindMissing, kindNull:
		it.TransactionID = partition.NewV7().String()
		it.Minted = true
	case kindString:
		if it.TransactionID, err = rawString(r.TransactionID); err != nil {
			return errors.New("transactionId must be a string")
		}
		if it.TransactionID == "" {
			it.TransactionID = partition.NewV7().String()
			it.Minted = true
		}
		if err := checkTransactionID(it.TransactionID); err != nil {
			return err
		}
	default:
		return errors.New("transactionId must be a string")
	}
	switch kindOf(r.TraceID) {
	case kindMissing, kindNull:
	case kindString:
		s, err := rawString(r.TraceID)
		if err != nil {
			return errors.New("traceId must be a string")
		}
		if s != "" {
			if it.TraceID, err = partition.ParseUUID(s); err != nil {
				return fmt.Errorf("traceId must be a UUID (got %q)", truncate(s, 64))
			}
			it.HasTrace = true
		}
	default:
		return errors.New("traceId must be a string")
	}
	if kindOf(r.Payload) == kindMissing {
		it.Payload = nullPayload
	} else {
		it.Payload = r.Payload
	}
	return nil
}

// checkTransactionID is the rule a producer's transactionId must meet: at
// most partition.MaxTxIDLen bytes of UTF-8. Push, explain and lookup share it.
func checkTransactionID(id string) error {
	if len(id) > partition.MaxTxIDLen {
		return fmt.Errorf("transactionId must be at most %d bytes (got %d)", partition.MaxTxIDLen, len(id))
	}
	if !utf8.ValidString(id) {
		return errors.New("transactionId must be valid UTF-8")
	}
	return nil
}

// checkName is the rule for a queue or partition name (what names the field
// as clients send it).
func checkName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s must be a non-empty string", what)
	case len(s) > MaxNameLen:
		return fmt.Errorf("%s must be at most %d bytes (got %d)", what, MaxNameLen, len(s))
	case !utf8.ValidString(s):
		return fmt.Errorf("%s must be valid UTF-8", what)
	}
	for i := range len(s) {
		if s[i] == 0 {
			return fmt.Errorf("%s must not contain NUL characters", what)
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// groupPush splits items by (queue, partition), keeping each group's items in
// request order, and returns the groups and, per item, its group and position.
// Every item carries sub, the authenticated producer's subject.
func groupPush(items []PushItem, sub string) ([]*reginatype.PushGroup, []itemRef) {
	refs := make([]itemRef, len(items))
	var groups []*reginatype.PushGroup
	index := make(map[[2]string]int, 1)
	for i := range items {
		it := &items[i]
		k := [2]string{it.Queue, it.Partition}
		gi, ok := index[k]
		if !ok {
			gi = len(groups)
			index[k] = gi
			groups = append(groups, &reginatype.PushGroup{Queue: it.Queue, Partition: it.Partition})
		}
		g := groups[gi]
		refs[i] = itemRef{group: gi, pos: len(g.Items)}
		g.Items = append(g.Items, reginatype.PushItem{TransactionID: it.TransactionID, TraceID: it.TraceID,
			HasTrace: it.HasTrace, Payload: it.Payload, ProducerSub: sub})
	}
	return groups, refs
}

type itemRef struct{ group, pos int }
