package crypt

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
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

// Key encrypts and decrypts payloads. A nil *Key is "no key": Seal must not
// be called on it, Open answers ErrNoKey. It is safe for concurrent use.
type Key struct {
	aead cipher.AEAD
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
	return &Key{aead: aead}, nil
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
// when k is nil (ErrNoKey), when sealed is too short, or when the tag does
// not authenticate (another key, or altered bytes).
func (k *Key) Open(dst, sealed []byte) ([]byte, error) {
	if k == nil {
		return nil, ErrNoKey
	}
	if len(sealed) < Overhead {
		return nil, fmt.Errorf("sealed payload of %d bytes is shorter than nonce and tag", len(sealed))
	}
	out, err := k.aead.Open(dst, sealed[:NonceSize], sealed[NonceSize:], nil)
	if err != nil {
		return nil, fmt.Errorf("decrypt payload: %w", err)
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
