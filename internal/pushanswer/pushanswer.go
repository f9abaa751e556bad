// Package pushanswer reads the answer to POST /api/v1/push the way an
// outside producer does, for any broker speaking the Queen MQ HTTP API
// (Regina or the upstream Queen server), so that the load generator and the
// comparison harness judge answers alike. It is client-side measurement
// code: it imports nothing of the broker.
//
// Upstream Queen sends every answer produced after its database round trip
// with status 200, whatever the code meant: a push answer (meant 201) and a
// database error (meant 500) alike. Regina sends the documented codes. So
// the status only says "2xx or not"; the body decides: an array holds one
// verdict per item, an object is an error.
package pushanswer

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/segmentio/encoding/json"
)

// Kind classifies an answer.
type Kind int

const (
	// NoAnswer is a request that failed on the connection (refused,
	// reset, closed, timed out): there is no status (0) and no body. It is
	// the zero Kind.
	NoAnswer Kind = iota
	// OK is a 2xx answer carrying one verdict per item.
	OK
	// HTTPError is an answer outside 2xx.
	HTTPError
	// ErrorBody is a 2xx answer whose body is an error object
	// ({"error": ...}): how upstream Queen sends a failed push (its code
	// meant 500), so it is retryable like a 5xx.
	ErrorBody
	// Malformed is a 2xx answer that could not be read, or that holds a
	// number of verdicts other than the number of items pushed.
	Malformed
)

// Answer is one push answer, judged.
type Answer struct {
	// Status is the HTTP status code.
	Status int
	Kind   Kind
	// Err says what went wrong for every kind but OK.
	Err error
	// Item verdicts read from the body (also from a Malformed answer, as
	// far as they could be read). Buffered is upstream Queen's failover:
	// items written to a local file buffer because its database failed,
	// not stored yet. Failed counts "failed" and any unknown status.
	Queued, Duplicate, Buffered, Failed int
}

// Failure is the answer to a request that got none: err is the
// connection's error.
func Failure(err error) Answer { return Answer{Kind: NoAnswer, Err: err} }

// Retryable reports whether the push may be resent as is: no answer, a
// 5xx, or a 2xx carrying an error object (upstream Queen's 500 sent as
// 200).
func (a *Answer) Retryable() bool {
	return a.Kind == NoAnswer || a.Status >= 500 || a.Kind == ErrorBody
}

// Acked is the number of items the broker acknowledged as stored: queued
// or duplicate.
func (a *Answer) Acked() int { return a.Queued + a.Duplicate }

type item struct {
	Status string `json:"status"`
}

type errorObject struct {
	Error  string `json:"error"`
	Status string `json:"status"`
}

// Read judges the answer (status, body) to a push of nItems items.
func Read(status int, body []byte, nItems int) Answer {
	a := Answer{Status: status}
	trimmed := bytes.TrimSpace(body)
	if status < 200 || status > 299 {
		a.Kind, a.Err = HTTPError, errors.New(ErrorMessage(status, body))
		return a
	}
	if len(trimmed) > 0 && trimmed[0] == '{' {
		var eo errorObject
		if err := json.Unmarshal(trimmed, &eo); err == nil && (eo.Error != "" || eo.Status == "failed") {
			msg := eo.Error
			if msg == "" {
				msg = "status failed"
			}
			a.Kind, a.Err = ErrorBody, fmt.Errorf("HTTP %d with an error body: %s", status, msg)
			return a
		}
	}
	a.Kind = OK
	var items []item
	if err := json.Unmarshal(trimmed, &items); err != nil {
		a.Kind, a.Err = Malformed, fmt.Errorf("HTTP %d with an unreadable body: %w: %s", status, err, excerpt(body))
		return a
	}
	for _, it := range items {
		switch it.Status {
		case "queued":
			a.Queued++
		case "duplicate":
			a.Duplicate++
		case "buffered":
			a.Buffered++
		default:
			a.Failed++
		}
	}
	if len(items) != nItems {
		a.Kind, a.Err = Malformed, fmt.Errorf("HTTP %d with %d verdicts for %d items", status, len(items), nItems)
	}
	return a
}

// ErrorMessage renders an answer that is not a push result: "HTTP 503:
// <error>" from a {"error": ...} body, else from the body's text.
func ErrorMessage(status int, body []byte) string {
	var eo errorObject
	if json.Unmarshal(body, &eo) == nil && eo.Error != "" {
		return fmt.Sprintf("HTTP %d: %s", status, eo.Error)
	}
	return fmt.Sprintf("HTTP %d: %s", status, excerpt(body))
}

// ErrorInBody returns the message of a {"error": ...} object body, or ""
// when the body is something else: how a caller of another endpoint tells
// upstream Queen's errors sent as 200 from a success.
func ErrorInBody(body []byte) string {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return ""
	}
	var eo errorObject
	if json.Unmarshal(trimmed, &eo) != nil {
		return ""
	}
	return eo.Error
}

func excerpt(body []byte) string {
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
