package wire

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/partition"
)

type rawConfigure struct {
	Queue     json.RawMessage            `json:"queue"`
	Namespace json.RawMessage            `json:"namespace"`
	Task      json.RawMessage            `json:"task"`
	Options   map[string]json.RawMessage `json:"options"`
}

// ConfigureRequest is a decoded POST /api/v1/configure body.
type ConfigureRequest struct {
	Queue, Namespace, Task string
	Options                partition.QueueOptions
	// IgnoredOptions are the keys of "options" the broker does not know,
	// sorted; IgnoredFields the unknown keys at the top level. Both are
	// accepted (as upstream does) and reported in the answer, because a
	// typo there otherwise resets the option it meant to its default.
	IgnoredOptions, IgnoredFields []string
}

// configureOptions are the keys of "options" the broker reads.
var configureOptions = map[string]bool{
	"leaseTime": true, "retryLimit": true, "retryDelay": true, "maxSize": true, "ttl": true, "priority": true,
	"delayedProcessing": true, "windowBuffer": true, "retentionSeconds": true, "completedRetentionSeconds": true,
	"maxWaitTimeSeconds": true, "dedupWindowSeconds": true, "deadLetterQueue": true, "dlqAfterMaxRetries": true,
	"retentionEnabled": true, "encryptionEnabled": true, "dedupPayloadCheck": true,
}

// configureFields are the top-level keys of a configure body.
var configureFields = map[string]bool{"queue": true, "namespace": true, "task": true, "options": true}

// unknownKeys returns the keys of m that known lacks, sorted.
func unknownKeys(m map[string]json.RawMessage, known map[string]bool) []string {
	var out []string
	for k := range m {
		if !known[k] {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// DecodeConfigure decodes and validates a configure body. Options left out
// take their defaults (configure is a full replace); unknown keys are
// ignored, as upstream does, and listed in IgnoredOptions and
// IgnoredFields.
func DecodeConfigure(body []byte) (ConfigureRequest, error) {
	var req ConfigureRequest
	if err := checkBody(body); err != nil {
		return req, err
	}
	if kindOf(body) != kindObject {
		return req, errors.New("Request body must be a JSON object")
	}
	var raw rawConfigure
	if err := unmarshal(body, &raw); err != nil {
		return req, invalidJSON(err)
	}
	var top map[string]json.RawMessage
	if err := unmarshal(body, &top); err != nil {
		return req, invalidJSON(err)
	}
	if kindOf(raw.Queue) != kindString {
		return req, errors.New("queue is required")
	}
	q, err := rawString(raw.Queue)
	if err != nil {
		return req, errors.New("queue is required")
	}
	if err := checkName("queue", q); err != nil {
		return req, err
	}
	req.Queue = q
	// Non-string namespace/task are ignored, as upstream does.
	if kindOf(raw.Namespace) == kindString {
		req.Namespace, _ = rawString(raw.Namespace)
	}
	if kindOf(raw.Task) == kindString {
		req.Task, _ = rawString(raw.Task)
	}
	req.IgnoredFields = unknownKeys(top, configureFields)
	req.IgnoredOptions = unknownKeys(raw.Options, configureOptions)
	req.Options = partition.DefaultQueueOptions()
	o := &req.Options
	ints := []struct {
		name string
		dst  *int
	}{
		{"leaseTime", &o.LeaseTime}, {"retryLimit", &o.RetryLimit}, {"retryDelay", &o.RetryDelay},
		{"maxSize", &o.MaxSize}, {"ttl", &o.TTL}, {"priority", &o.Priority},
		{"delayedProcessing", &o.DelayedProcessing}, {"windowBuffer", &o.WindowBuffer},
		{"retentionSeconds", &o.RetentionSeconds}, {"completedRetentionSeconds", &o.CompletedRetentionSeconds},
		{"maxWaitTimeSeconds", &o.MaxWaitTimeSeconds}, {"dedupWindowSeconds", &o.DedupWindowSeconds},
	}
	for _, f := range ints {
		v, ok := raw.Options[f.name]
		if !ok || kindOf(v) == kindNull {
			continue
		}
		n, err := nonNegInt(v)
		if err != nil {
			return req, fmt.Errorf("options.%s %w", f.name, err)
		}
		*f.dst = n
	}
	bools := []struct {
		name string
		dst  *bool
	}{
		{"deadLetterQueue", &o.DeadLetterQueue}, {"dlqAfterMaxRetries", &o.DLQAfterMaxRetries},
		{"retentionEnabled", &o.RetentionEnabled}, {"encryptionEnabled", &o.EncryptionEnabled},
	}
	for _, f := range bools {
		v, ok := raw.Options[f.name]
		if !ok || kindOf(v) == kindNull {
			continue
		}
		if kindOf(v) != kindBool {
			return req, fmt.Errorf("options.%s must be a boolean", f.name)
		}
		if err := unmarshal(v, f.dst); err != nil {
			return req, fmt.Errorf("options.%s must be a boolean", f.name)
		}
	}
	if v, ok := raw.Options["dedupPayloadCheck"]; ok && kindOf(v) != kindNull {
		s, err := rawString(v)
		if kindOf(v) != kindString || err != nil || !partition.ValidPayloadCheck(s) {
			return req, errors.New(`options.dedupPayloadCheck must be "off", "report" or "reject"`)
		}
		o.DedupPayloadCheck = s
	}
	return req, nil
}

// nonNegInt decodes a JSON number that is a whole number in [0, 2^31-1].
func nonNegInt(v json.RawMessage) (int, error) {
	if kindOf(v) != kindNumber {
		return 0, errors.New("must be a number")
	}
	var f float64
	if err := unmarshal(v, &f); err != nil {
		return 0, errors.New("must be a number")
	}
	if f < 0 || f != math.Trunc(f) || f > math.MaxInt32 {
		return 0, errors.New("must be a whole number between 0 and 2147483647")
	}
	return int(f), nil
}

func (s *Server) handleConfigure(ctx *fasthttp.RequestCtx) {
	req, err := DecodeConfigure(ctx.PostBody())
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	if req.Options.EncryptionEnabled && !s.cfg.EncryptionKey {
		// Fails closed: the queue's payloads would be stored in plaintext.
		writeError(ctx, fasthttp.StatusBadRequest, "encryptionEnabled needs QUEEN_ENCRYPTION_KEY on the broker, "+
			"and this one has none; nothing was changed")
		return
	}
	res, err := s.b.Admin.Configure(ctx, req.Queue, req.Namespace, req.Task, req.Options)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	if len(req.IgnoredOptions) > 0 || len(req.IgnoredFields) > 0 {
		// One line per call: configure is rare, and a typo here silently
		// reset an option to its default (configure is a full replace).
		s.log.Warn().Str("queue", req.Queue).Strs("ignored_options", req.IgnoredOptions).
			Strs("ignored_fields", req.IgnoredFields).
			Msg("configure: unknown keys ignored; the options they may have meant took their defaults")
	}
	writeJSON(ctx, fasthttp.StatusOK, configureResponse{
		Configured: true, QueueID: res.QueueID.String(), PartitionID: res.DefaultPartitionID.String(),
		Queue: req.Queue, Namespace: res.Namespace, Task: res.Task, Options: res.Options,
		EncryptionActive: res.Options.EncryptionEnabled && s.cfg.EncryptionKey,
		IgnoredOptions:   req.IgnoredOptions, IgnoredFields: req.IgnoredFields,
	})
}

type configureResponse struct {
	Configured  bool                   `json:"configured"`
	QueueID     string                 `json:"queueId"`
	PartitionID string                 `json:"partitionId"`
	Queue       string                 `json:"queue"`
	Namespace   string                 `json:"namespace"`
	Task        string                 `json:"task"`
	Options     partition.QueueOptions `json:"options"`
	// EncryptionActive tells whether the queue's payloads are stored
	// encrypted: encryptionEnabled and a key (Regina's addition; clients
	// ignore it).
	EncryptionActive bool `json:"encryptionActive"`
	// IgnoredOptions and IgnoredFields are left out when empty.
	IgnoredOptions []string `json:"ignoredOptions,omitempty"`
	IgnoredFields  []string `json:"ignoredFields,omitempty"`
}

// timeMillis formats t the way Queen's admin views do (milliseconds, UTC).
func timeMillis(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }
