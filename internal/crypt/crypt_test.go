package crypt

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const testKey = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

func TestSealOpen(t *testing.T) {
	k, err := ParseKey(testKey)
	require.NoError(t, err)
	plain := []byte(`{"card":"4111 1111 1111 1111"}`)
	a := k.Seal(nil, plain)
	b := k.Seal(nil, plain)
	require.Len(t, a, len(plain)+Overhead)
	require.NotEqual(t, a, b, "a fresh nonce per message")
	require.False(t, bytes.Contains(a, []byte("4111")))
	got, err := k.Open(nil, a)
	require.NoError(t, err)
	require.Equal(t, plain, got)

	// Altered bytes, another key, no key, too short: errors.
	a[NonceSize] ^= 1
	_, err = k.Open(nil, a)
	require.Error(t, err)
	other, err := ParseKey(strings.Repeat("ab", 32))
	require.NoError(t, err)
	_, err = other.Open(nil, b)
	require.Error(t, err)
	var none *Key
	_, err = none.Open(nil, b)
	require.ErrorIs(t, err, ErrNoKey)
	_, err = k.Open(nil, b[:Overhead-1])
	require.Error(t, err)
}

func TestParseKey(t *testing.T) {
	_, err := ParseKey(" " + strings.ToUpper(testKey) + "\n")
	require.NoError(t, err)
	for _, bad := range []string{"", "abc", testKey[:62], testKey + "00", strings.Repeat("zz", 32), "0z" + testKey[2:]} {
		_, err := ParseKey(bad)
		require.Error(t, err, "%q", bad)
		require.Contains(t, err.Error(), "the key must be 64 hexadecimal characters")
		if len(bad) > 4 {
			require.NotContains(t, err.Error(), bad, "the key is never echoed")
		}
	}
}

// TestEnvelope: Queen's shape, and the pieces put back together are what
// Open takes (so a reader with the key could decrypt it as upstream does).
func TestEnvelope(t *testing.T) {
	k, err := ParseKey(testKey)
	require.NoError(t, err)
	sealed := k.Seal(nil, []byte(`{"n":1}`))
	var env struct{ Encrypted, IV, AuthTag string }
	require.NoError(t, json.Unmarshal(Envelope(nil, sealed), &env))
	dec := func(s string) []byte {
		b, err := base64.StdEncoding.DecodeString(s)
		require.NoError(t, err)
		return b
	}
	iv, ct, tag := dec(env.IV), dec(env.Encrypted), dec(env.AuthTag)
	require.Len(t, iv, NonceSize)
	require.Len(t, tag, TagSize)
	got, err := k.Open(nil, append(append(iv, ct...), tag...))
	require.NoError(t, err)
	require.JSONEq(t, `{"n":1}`, string(got))
	require.JSONEq(t, `{"encrypted":"AQI=","iv":"","authTag":""}`, string(Envelope(nil, []byte{1, 2})))
}

// TestCheckValueAndFingerprint: the check value and the fingerprints are
// stable for a key, differ between keys, and a fingerprint is not the
// payload's plain hash.
func TestCheckValueAndFingerprint(t *testing.T) {
	k, err := ParseKey(testKey)
	require.NoError(t, err)
	k2, err := ParseKey(testKey)
	require.NoError(t, err)
	other, err := ParseKey(strings.Repeat("ab", 32))
	require.NoError(t, err)
	require.Len(t, k.CheckValue(), 32)
	require.True(t, k2.Matches(k.CheckValue()))
	require.False(t, other.Matches(k.CheckValue()))
	require.False(t, k.Matches(nil))
	p := []byte(`{"n":1}`)
	require.Equal(t, k.Fingerprint(p), k2.Fingerprint(p))
	require.NotEqual(t, k.Fingerprint(p), other.Fingerprint(p))
	require.NotEqual(t, k.Fingerprint(p), k.Fingerprint([]byte(`{"n":2}`)))
}
