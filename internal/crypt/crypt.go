package crypt

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// KeyEnv is the variable holding the key, as upstream Queen names it.
const KeyEnv = "QUEEN_ENCRYPTION_KEY"

// Sizes of the sealed form.
const (
	// NonceSize is the random IV per message (Queen uses 16, not GCM's usual 12).
	NonceSize = 16
	// TagSize is the GCM authentication tag.
	TagSize = 16
	// Overhead is what Seal adds to a payload.
	Overhead = NonceSize + TagSize
)

// ErrNoKey is Open's error when the broker has no key.
var ErrNoKey = errors.New("no encryption key (" + KeyEnv + " is not set)")

// ErrOpen wraps every failure of Open: the payload is sealed and this key
// cannot open it (no key, another key, altered bytes).
var ErrOpen = errors.New("cannot decrypt the payload")

// The labels of the values derived from the key (HMAC-SHA256 under the
// key): the key check value stored in the database, and the key of the
// payload fingerprints of encrypted queues.
const (
	checkLabel       = "regina key check value v1"
	fingerprintLabel = "regina payload fingerprint key v1"
)

// Key encrypts and decrypts payloads. A nil *Key is "no key": Seal must not
// be called on it, Open answers ErrNoKey. It is safe for concurrent use.
type Key struct {
	aead cipher.AEAD
	// check is the key check value (CheckValue).
	check []byte
	// fpKey keys the payload fingerprints (Fingerprint).
	fpKey []byte
}

// ParseKey reads a key given as exactly 64 hexadecimal characters (32
// bytes). Surrounding spaces are ignored; anything else is an error that
// says what is wrong without echoing the value.
func ParseKey(s string) (*Key, error) {
	s = strings.TrimSpace(s)
	if len(s) != 64 {
		return nil, fmt.Errorf("the key must be 64 hexadecimal characters (32 bytes for AES-256), got %d characters", len(s))
	}
	raw, err := hex.DecodeString(s)
	if err != nil {
		return nil, errors.New("the key must be 64 hexadecimal characters (32 bytes for AES-256): it holds a non-hex character")
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	aead, err := cipher.NewGCMWithNonceSize(block, NonceSize)
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	return &Key{aead: aead, check: derive(raw, checkLabel), fpKey: derive(raw, fingerprintLabel)}, nil
}

// derive is HMAC-SHA256(key, label).
func derive(key []byte, label string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(label))
	return m.Sum(nil)
}

// CheckValue is the key check value: HMAC-SHA256 of a fixed label under
// the key. Stored with the first encrypted payload, it tells a broker
// started with another key (or none) before it writes or serves anything;
// it reveals nothing of the key.
func (k *Key) CheckValue() []byte { return append([]byte(nil), k.check...) }

// Matches reports whether check is this key's check value (constant time).
func (k *Key) Matches(check []byte) bool { return hmac.Equal(k.check, check) }

// Fingerprint is the payload fingerprint of an encrypted queue: the first
// 8 bytes of HMAC-SHA256 of the payload under a key derived from the
// encryption key, so that reading the database does not let anyone confirm
// a guessed payload (a plain hash would).
func (k *Key) Fingerprint(payload []byte) int64 {
	m := hmac.New(sha256.New, k.fpKey)
	m.Write(payload)
	var sum [sha256.Size]byte
	return int64(binary.BigEndian.Uint64(m.Sum(sum[:0])))
}

// Seal appends nonce || ciphertext || tag of plain to dst, with a fresh
// random nonce.
func (k *Key) Seal(dst, plain []byte) []byte {
	n := len(dst)
	dst = append(dst, make([]byte, NonceSize)...)
	nonce := dst[n : n+NonceSize]
	// crypto/rand.Read never fails (it panics rather than return an error).
	_, _ = rand.Read(nonce)
	return k.aead.Seal(dst, nonce, plain, nil)
}

// Open appends the plaintext of sealed (as Seal made it) to dst. It fails
// (ErrOpen) when k is nil (ErrNoKey too), when sealed is too short, or when
// the tag does not authenticate (another key, or altered bytes).
func (k *Key) Open(dst, sealed []byte) ([]byte, error) {
	if k == nil {
		return nil, fmt.Errorf("%w: %w", ErrOpen, ErrNoKey)
	}
	if len(sealed) < Overhead {
		return nil, fmt.Errorf("%w: sealed payload of %d bytes is shorter than nonce and tag", ErrOpen, len(sealed))
	}
	out, err := k.aead.Open(dst, sealed[:NonceSize], sealed[NonceSize:], nil)
	if err != nil {
		return nil, fmt.Errorf("%w (another key, or altered bytes): %w", ErrOpen, err)
	}
	return out, nil
}

// Envelope appends Queen's stored form of a sealed payload to dst:
// {"encrypted":"<ciphertext>","iv":"<nonce>","authTag":"<tag>"}, each in
// standard padded base64. A sealed payload too short to hold nonce and tag
// gives {"encrypted":"<all of it>","iv":"","authTag":""}.
func Envelope(dst, sealed []byte) []byte {
	var nonce, ct, tag []byte
	if len(sealed) >= Overhead {
		nonce, ct, tag = sealed[:NonceSize], sealed[NonceSize:len(sealed)-TagSize], sealed[len(sealed)-TagSize:]
	} else {
		ct = sealed
	}
	enc := base64.StdEncoding
	dst = append(dst, `{"encrypted":"`...)
	dst = enc.AppendEncode(dst, ct)
	dst = append(dst, `","iv":"`...)
	dst = enc.AppendEncode(dst, nonce)
	dst = append(dst, `","authTag":"`...)
	dst = enc.AppendEncode(dst, tag)
	return append(dst, `"}`...)
}

// PayloadFingerprint is the payload fingerprint of a queue under key
// (encrypted: the queue's encryptionEnabled): k.Fingerprint when the queue
// is encrypted and there is a key, plain(payload) otherwise (the callers
// pass partition.Fingerprint). The push paths (actor, store) and dedup
// explain share it.
func PayloadFingerprint(k *Key, encrypted bool, payload []byte, plain func([]byte) int64) int64 {
	if encrypted && k != nil {
		return k.Fingerprint(payload)
	}
	return plain(payload)
}
