package wire

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/segmentio/encoding/json"
)

// MaxJSONDepth is the deepest nesting of arrays and objects a request body
// may have. The decoder recurses per level, so unbounded depth could exhaust
// the stack; no real client nests anywhere near this.
const MaxJSONDepth = 512

var (
	errEmptyBody = errors.New("Empty request body")
	errTooDeep   = errors.New("Invalid JSON: nesting deeper than 512 levels")
	errBadUTF8   = errors.New("Invalid JSON: body is not valid UTF-8")
)

// checkBody rejects bodies that are empty, not UTF-8 or nested too deep,
// or that hold a string with NUL (outside payloads: see nulStrings), before
// any decoder sees them. The NUL error (*nulError) names the field.
func checkBody(b []byte) error {
	if err := checkBodySyntax(b); err != nil {
		return err
	}
	if mayHoldNUL(b) {
		if paths := nulStrings(b); len(paths) > 0 {
			return &nulError{path: paths[0]}
		}
	}
	return nil
}

// checkBodySyntax is checkBody without the NUL check, for a decoder that
// refuses NUL item by item (the batch ack).
func checkBodySyntax(b []byte) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return errEmptyBody
	}
	if !utf8.Valid(b) {
		return errBadUTF8
	}
	depth := 0
	inStr := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inStr {
			switch c {
			case '\\':
				i++
			case '"':
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
		case '[', '{':
			depth++
			if depth > MaxJSONDepth {
				return errTooDeep
			}
		case ']', '}':
			depth--
		}
	}
	return nil
}

// invalidJSON formats a decoder error the way Queen does ("Invalid JSON: "
// and the reason). The decoder's own "json: " prefix is dropped, and so is the
// ": " it ends a syntax error with when no input is left to quote.
func invalidJSON(err error) error {
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if rest, ok := strings.CutSuffix(msg, ": "); ok {
		msg = rest + " (at the end of the body)"
	}
	return errors.New("Invalid JSON: " + msg)
}

// rawKind classifies a raw JSON value by its first byte.
type rawKind uint8

const (
	kindMissing rawKind = iota
	kindNull
	kindString
	kindNumber
	kindBool
	kindArray
	kindObject
)

func kindOf(raw json.RawMessage) rawKind {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return kindMissing
	}
	switch raw[0] {
	case 'n':
		return kindNull
	case '"':
		return kindString
	case 't', 'f':
		return kindBool
	case '[':
		return kindArray
	case '{':
		return kindObject
	default:
		return kindNumber
	}
}

// rawString decodes a raw JSON string. The body was checked to be UTF-8.
func rawString(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' && bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), nil
	}
	var s string
	err := unmarshal(raw, &s)
	return s, err
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := range len(s) {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c != 0x7f {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigit[c>>4], hexDigit[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

const hexDigit = "0123456789abcdef"

func appendInt(b []byte, n int64) []byte { return strconv.AppendInt(b, n, 10) }

// unmarshal decodes JSON like json.Unmarshal but matches object keys
// exactly, as Queen (JavaScript) does: "Queue" is not "queue".
func unmarshal(b []byte, x any) error {
	r, err := json.Parse(b, x, json.DontMatchCaseInsensitiveStructFields)
	if err == nil && len(bytes.TrimSpace(r)) != 0 {
		return errors.New("invalid character after top-level value")
	}
	return err
}
