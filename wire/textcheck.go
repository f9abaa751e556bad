package wire

import (
	"bytes"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/reginatype"
)

// Text reaching PostgreSQL must be UTF-8 without NUL: a text column refuses
// both, and the refusal used to surface as a 500 carrying the database's
// words. Every request is checked here, once, at the edge: its path
// parameters and query parameters (checkParams, from Handle) and every
// string of its JSON body (checkBody, shared by every decoder), each
// refusal a 400 naming the field. Payloads ("payload") and trace data
// ("data") are stored as the bytes received and may hold any JSON, so
// their strings are not checked.

// textProblem says what is wrong with s as text for the database ("" when
// nothing): a NUL byte or invalid UTF-8. (Lengths are each field's own
// rule; a value too long for an index is refused by the database as a
// program limit, which refusedInput makes a 400.)
func textProblem(s string) string {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return "must not contain NUL characters (\\u0000)"
	case !utf8.ValidString(s):
		return "must be valid UTF-8"
	}
	return ""
}

// textProblemBytes is textProblem of b without converting it.
func textProblemBytes(b []byte) string {
	switch {
	case bytes.IndexByte(b, 0) >= 0:
		return "must not contain NUL characters (\\u0000)"
	case !utf8.Valid(b):
		return "must be valid UTF-8"
	}
	return ""
}

// checkParams answers 400 naming the parameter when a path parameter of r
// or a query parameter of the request is not usable text (textProblem),
// and returns false; true lets the route run.
func checkParams(ctx *fasthttp.RequestCtx, r *Route, params []string) bool {
	if len(params) > 0 {
		i := 0
		for _, seg := range r.segs {
			name, ok := strings.CutPrefix(seg, ":")
			if !ok {
				continue
			}
			if p := textProblem(params[i]); p != "" {
				writeError(ctx, fasthttp.StatusBadRequest, "Path parameter "+name+" "+p)
				return false
			}
			i++
		}
	}
	for k, v := range ctx.QueryArgs().All() {
		bad := ""
		if p := textProblemBytes(k); p != "" {
			bad = "Query parameter name " + strconv.QuoteToASCII(string(k)) + " " + p
		} else if p := textProblemBytes(v); p != "" {
			bad = "Query parameter " + string(k) + " " + p
		}
		if bad != "" {
			writeError(ctx, fasthttp.StatusBadRequest, bad)
			return false
		}
	}
	return true
}

// bodyTextExempt are the keys whose values are stored as the bytes received
// (a message's payload, a trace event's data): any JSON goes.
func bodyTextExempt(key string) bool { return key == "payload" || key == "data" }

// nulError is a JSON string of the body holding a NUL character, by its
// path ("items[2].transactionId").
type nulError struct{ path string }

func (e *nulError) Error() string {
	return e.path + " must not contain NUL characters (\\u0000)"
}

// mayHoldNUL is the quick test before nulStrings: a body without a NUL
// byte and without the text \u0000 has no string holding NUL.
func mayHoldNUL(b []byte) bool {
	return bytes.IndexByte(b, 0) >= 0 || bytes.Contains(b, []byte(`\u0000`))
}

// jsonFrame is one open array or object of the body nulStrings walks.
type jsonFrame struct {
	object    bool
	index     int    // in an array: the current element
	key       string // in an object: the current member's key ("" between members)
	expectKey bool
}

// nulStrings returns the paths of the body's strings (keys included) that
// hold NUL, raw or escaped, outside the exempt values (bodyTextExempt). b
// is valid UTF-8; it need not be valid JSON (the decoder judges that).
func nulStrings(b []byte) []string {
	var stack []jsonFrame
	var out []string
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '{':
			stack = append(stack, jsonFrame{object: true, expectKey: true})
		case '[':
			stack = append(stack, jsonFrame{})
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		case ',':
			if n := len(stack); n > 0 {
				if stack[n-1].object {
					stack[n-1].key, stack[n-1].expectKey = "", true
				} else {
					stack[n-1].index++
				}
			}
		case '"':
			start := i + 1
			hasNUL := false
			for i++; i < len(b) && b[i] != '"'; i++ {
				switch {
				case b[i] == 0:
					hasNUL = true
				case b[i] == '\\' && i+1 < len(b):
					if b[i+1] == 'u' && i+5 < len(b) && string(b[i+2:i+6]) == "0000" {
						hasNUL = true
					}
					i++
				}
			}
			raw := b[start:min(i, len(b))]
			n := len(stack)
			isKey := n > 0 && stack[n-1].object && stack[n-1].expectKey
			if isKey {
				stack[n-1].key, stack[n-1].expectKey = string(raw), false
			}
			if hasNUL && !exemptPath(stack) {
				if isKey {
					// The key as written (escapes kept), quoted.
					stack[n-1].key = `"` + strings.ReplaceAll(string(raw), "\x00", `\u0000`) + `"`
				}
				out = append(out, jsonPath(stack))
			}
		}
	}
	return out
}

// exemptPath reports whether the walk is inside an exempt value.
func exemptPath(stack []jsonFrame) bool {
	for _, f := range stack {
		if f.object && !f.expectKey && bodyTextExempt(f.key) {
			return true
		}
	}
	return false
}

// jsonPath renders the walk's position: items[2].transactionId; "body"
// for the top-level value.
func jsonPath(stack []jsonFrame) string {
	var sb strings.Builder
	for _, f := range stack {
		switch {
		case f.object && f.key != "":
			if sb.Len() > 0 {
				sb.WriteByte('.')
			}
			sb.WriteString(f.key)
		case !f.object:
			sb.WriteString("[" + strconv.Itoa(f.index) + "]")
		}
	}
	if sb.Len() == 0 {
		return "body"
	}
	return sb.String()
}

// refusedItems maps the elements of the body's array field (by index) that
// hold a string with NUL to the reason (an empty map: none); a NUL outside
// that array is an error of the whole body.
func refusedItems(body []byte, field string) (map[int]string, error) {
	refused := map[int]string{}
	if !mayHoldNUL(body) {
		return refused, nil
	}
	for _, p := range nulStrings(body) {
		rest, ok := strings.CutPrefix(p, field+"[")
		end := strings.IndexByte(rest, ']')
		if !ok || end < 0 {
			return nil, &nulError{path: p}
		}
		i, err := strconv.Atoi(rest[:end])
		if err != nil {
			return nil, &nulError{path: p}
		}
		if _, seen := refused[i]; !seen {
			refused[i] = (&nulError{path: p}).Error()
		}
	}
	return refused, nil
}

// withoutRefused is items without the refused ones.
func withoutRefused[T any](items []T, refused map[int]string) []T {
	if len(refused) == 0 {
		return items
	}
	out := make([]T, 0, len(items))
	for i := range items {
		if _, bad := refused[i]; !bad {
			out = append(out, items[i])
		}
	}
	return out
}

// withRefused puts the results of the items sent (res, in order) back among
// failed results of the refused ones: n results in all.
func withRefused(res []reginatype.AckResult, refused map[int]string, n int) []reginatype.AckResult {
	if len(refused) == 0 {
		return res
	}
	out := make([]reginatype.AckResult, n)
	j := 0
	for i := range out {
		if msg, bad := refused[i]; bad {
			out[i] = reginatype.AckResult{Error: msg}
			continue
		}
		out[i] = res[j]
		j++
	}
	return out
}
