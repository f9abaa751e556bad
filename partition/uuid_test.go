package partition

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var uuidTestCanonical = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func uuidTestMillis(u UUID) int64 {
	var b [8]byte
	copy(b[2:], u[:6])
	return int64(binary.BigEndian.Uint64(b[:]))
}

func TestNewV7Layout(t *testing.T) {
	t.Parallel()
	before := time.Now().UnixMilli()
	ids := make([]UUID, 1000)
	for i := range ids {
		ids[i] = NewV7()
	}
	after := time.Now().UnixMilli()
	for _, u := range ids {
		require.Equal(t, byte(0x7), u[6]>>4, "version nibble of %s", u)
		require.Equal(t, byte(0x2), u[8]>>6, "RFC 9562 variant of %s", u)
		require.Equal(t, byte('7'), u.String()[14])
		require.False(t, u.IsZero())
		ms := uuidTestMillis(u)
		require.GreaterOrEqual(t, ms, before, "timestamp of %s", u)
		// The counter may push the timestamp a little ahead of the clock
		// when other tests mint ids concurrently, but never by seconds.
		require.Less(t, ms, after+5000, "timestamp of %s", u)
	}
}

func TestNewV7StrictlyIncreasing(t *testing.T) {
	t.Parallel()
	prev := NewV7()
	for i := range 100_000 {
		u := NewV7()
		require.Negative(t, bytes.Compare(prev[:], u[:]), "id %d: %s not after %s", i, u, prev)
		// The canonical text sorts the same way as the bytes.
		require.Less(t, prev.String(), u.String())
		prev = u
	}
}

func TestNewV7UniqueAcrossGoroutines(t *testing.T) {
	t.Parallel()
	const goroutines, each = 8, 20_000
	results := make([][]UUID, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			ids := make([]UUID, each)
			for i := range ids {
				ids[i] = NewV7()
			}
			results[g] = ids
		})
	}
	wg.Wait()

	seen := make(map[UUID]struct{}, goroutines*each)
	for g, ids := range results {
		for i, u := range ids {
			if i > 0 {
				require.Negative(t, bytes.Compare(ids[i-1][:], u[:]), "goroutine %d id %d", g, i)
			}
			_, dup := seen[u]
			require.False(t, dup, "duplicate id %s", u)
			seen[u] = struct{}{}
		}
	}
	require.Len(t, seen, goroutines*each)
}

func TestUUIDStringParseRoundTrip(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 7))
	ids := []UUID{ZeroUUID, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, NewV7()}
	for range 1000 {
		var u UUID
		binary.BigEndian.PutUint64(u[:8], r.Uint64())
		binary.BigEndian.PutUint64(u[8:], r.Uint64())
		ids = append(ids, u)
	}
	for _, u := range ids {
		s := u.String()
		require.Regexp(t, uuidTestCanonical, s)
		require.Equal(t, s, string(u.AppendText(nil)))
		require.Equal(t, "prefix:"+s, string(u.AppendText([]byte("prefix:"))))

		got, err := ParseUUID(s)
		require.NoError(t, err)
		require.Equal(t, u, got)

		got, err = ParseUUID(strings.ToUpper(s))
		require.NoError(t, err, "upper case %s", s)
		require.Equal(t, u, got)

		got, err = ParseUUID(strings.ReplaceAll(s, "-", ""))
		require.NoError(t, err, "32-digit form of %s", s)
		require.Equal(t, u, got)
	}
}

func TestUUIDKnownValue(t *testing.T) {
	t.Parallel()
	u := UUID{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef}
	require.Equal(t, "01234567-89ab-cdef-0123-456789abcdef", u.String())
	for _, s := range []string{
		"01234567-89ab-cdef-0123-456789abcdef",
		"01234567-89AB-CDEF-0123-456789ABCDEF",
		"01234567-89aB-CdEf-0123-456789AbCdEf",
		"0123456789abcdef0123456789abcdef",
	} {
		got, err := ParseUUID(s)
		require.NoError(t, err, s)
		require.Equal(t, u, got, s)
	}
	require.True(t, ZeroUUID.IsZero())
	require.Equal(t, "00000000-0000-0000-0000-000000000000", ZeroUUID.String())
}

func TestParseUUIDRejects(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"35 chars", "01234567-89ab-cdef-0123-456789abcde"},
		{"37 chars", "01234567-89ab-cdef-0123-456789abcdef0"},
		{"31 digits", "0123456789abcdef0123456789abcde"},
		{"33 digits", "0123456789abcdef0123456789abcdef0"},
		{"braces", "{01234567-89ab-cdef-0123-456789abcdef}"},
		{"urn", "urn:uuid:01234567-89ab-cdef-0123-456789abcdef"},
		{"bad hex digit", "0123456g-89ab-cdef-0123-456789abcdef"},
		{"bad hex in last group", "01234567-89ab-cdef-0123-456789abcdeZ"},
		{"bad hex 32-digit form", "0123456789abcdef0123456789abcdeg"},
		{"space", "01234567-89ab-cdef-0123-456789abcde "},
		{"first hyphen misplaced", "0123456-789ab-cdef-0123-456789abcdef"},
		{"second hyphen misplaced", "01234567-89abc-def-0123-456789abcdef"},
		{"third hyphen misplaced", "01234567-89ab-cdef0-123-456789abcdef"},
		{"fourth hyphen misplaced", "01234567-89ab-cdef-01234-56789abcdef"},
		{"hex digit for first hyphen", "01234567089ab-cdef-0123-456789abcdef"},
		{"hex digit for second hyphen", "01234567-89ab0cdef-0123-456789abcdef"},
		{"hex digit for third hyphen", "01234567-89ab-cdef00123-456789abcdef"},
		{"hex digit for fourth hyphen", "01234567-89ab-cdef-01230456789abcdef"},
		{"underscores", "01234567_89ab_cdef_0123_456789abcdef"},
		{"extra hyphen in hex", "01234567-89ab-cdef-0123-4567-9abcdef"},
		{"hyphens in 32-char form", "01234567-89ab-cdef0123456789abcd"},
		{"non-ascii", "01234567-89ab-cdef-0123-456789abcdé"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u, err := ParseUUID(tc.in)
			require.ErrorIs(t, err, ErrInvalidUUID)
			require.True(t, u.IsZero(), "a failed parse returns the zero UUID")
		})
	}
}
