package wire

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNulStrings: the paths of the strings holding NUL, raw or escaped,
// keys included, payloads and trace data excepted; an escaped backslash
// before u0000 is not a NUL.
func TestNulStrings(t *testing.T) {
	for _, c := range []struct {
		body string
		want []string
	}{
		{`{"items":[{"queue":"q"},{"transactionId":"a\u0000"}]}`, []string{"items[1].transactionId"}},
		{`{"items":[{"payload":{"x":"\u0000"},"queue":"q\u0000"}]}`, []string{"items[0].queue"}},
		{`{"data":["\u0000"],"traceNames":["a","\u0000"]}`, []string{"traceNames[1]"}},
		{"{\"a\":\"x\x00\"}", []string{"a"}},
		{`{"a":"\\u0000"}`, nil},
		{`"\u0000"`, []string{"body"}},
		{`{"k\u0000":1}`, []string{`"k\u0000"`}},
		{`{"a":{"b":[1,{"c":"\u0000"}]},"d":"\u0000"}`, []string{"a.b[1].c", "d"}},
	} {
		require.Equal(t, c.want, nulStrings([]byte(c.body)), "%s", c.body)
		require.Equal(t, c.want != nil, checkBody([]byte(c.body)) != nil, "%s", c.body)
	}
}

// TestRefusedItems: NUL inside one element of the batch refuses that
// element; elsewhere the whole body.
func TestRefusedItems(t *testing.T) {
	r, err := refusedItems([]byte(`{"acknowledgments":[{"transactionId":"a"},{"transactionId":"\u0000","error":"\u0000"}]}`),
		"acknowledgments")
	require.NoError(t, err)
	require.Equal(t, map[int]string{1: `acknowledgments[1].transactionId must not contain NUL characters (\u0000)`}, r)
	_, err = refusedItems([]byte(`{"consumerGroup":"\u0000","acknowledgments":[]}`), "acknowledgments")
	require.EqualError(t, err, `consumerGroup must not contain NUL characters (\u0000)`)
}
