package partition

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/zeebo/xxh3"
)

func TestFingerprintIsOfTheBytes(t *testing.T) {
	a := []byte(`{"total":42,"currency":"EUR"}`)
	require.Equal(t, Fingerprint(a), Fingerprint(append([]byte(nil), a...)), "same bytes, same fingerprint")
	require.NotEqual(t, Fingerprint(a), Fingerprint([]byte(`{"total":43,"currency":"EUR"}`)))
	// No canonical form: the same value written differently is another payload.
	require.NotEqual(t, Fingerprint(a), Fingerprint([]byte(`{"currency":"EUR","total":42}`)))
	require.NotEqual(t, Fingerprint(a), Fingerprint([]byte(`{"total": 42, "currency": "EUR"}`)))
}

func TestComparePayload(t *testing.T) {
	fp := Fingerprint([]byte(`1`))
	other := Fingerprint([]byte(`2`))
	require.Equal(t, PayloadUnchecked, ComparePayload(fp, nil))
	require.Equal(t, PayloadSame, ComparePayload(fp, &fp))
	require.Equal(t, PayloadDifferent, ComparePayload(fp, &other))
	for _, s := range []string{"off", "report", "reject"} {
		require.True(t, ValidPayloadCheck(s))
	}
	for _, s := range []string{"", "Off", "on", "true"} {
		require.False(t, ValidPayloadCheck(s))
	}
}

// benchPayload is a JSON object of about n bytes, the shape of a typical
// event: a few fields, a nested object, an array.
func benchPayload(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"orderId":"order:8812","version":3,"customer":{"id":"cust-42","tier":"gold"},"lines":[`)
	for i := 0; b.Len() < n-20; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"sku":"SKU-` + strconv.Itoa(1000+i) + `","qty":` + strconv.Itoa(i%7+1) + `,"price":12.5}`)
	}
	b.WriteString(`],"total":42}`)
	return []byte(b.String())
}

// canonical is the cheapest canonical form encoding/json offers: decode
// (numbers kept as written) and encode again (object keys sorted, no
// insignificant whitespace).
func canonical(p []byte) []byte {
	d := json.NewDecoder(bytes.NewReader(p))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return p
	}
	out, err := json.Marshal(v)
	if err != nil {
		return p
	}
	return out
}

// BenchmarkFingerprint measures the choice between fingerprinting the
// payload bytes as received (raw), after removing insignificant whitespace
// (compact: json.Compact) and after a full canonical form (canonical: keys
// sorted). Run it with:
//
//	go test -run '^$' -bench Fingerprint -benchmem ./partition
func BenchmarkFingerprint(b *testing.B) {
	for _, n := range []int{100, 1024, 16 << 10} {
		p := benchPayload(n)
		b.Run("raw/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				_ = Fingerprint(p)
			}
		})
		b.Run("compact/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				_ = json.Compact(&buf, p)
				_ = xxh3.Hash(buf.Bytes())
			}
		})
		b.Run("canonical/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				_ = xxh3.Hash(canonical(p))
			}
		})
	}
}
