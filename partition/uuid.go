package partition

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"sync"
	"time"
)

// UUID is a 16-byte RFC 9562 UUID.
type UUID [16]byte

// ZeroUUID is the all-zero UUID. On a duplicate verdict it is the "original
// unknown" sentinel: the original's segment can no longer be read.
var ZeroUUID UUID

// ErrInvalidUUID is returned by [ParseUUID] for text that is not a UUID.
var ErrInvalidUUID = errors.New("invalid UUID")

var v7 struct {
	mu     sync.Mutex
	lastMs int64
	seq    uint16 // 12-bit counter in rand_a, random start each millisecond
}

// NewV7 returns a time-ordered UUID (version 7). Ids minted by one process
// are strictly increasing: within a millisecond a 12-bit counter in rand_a
// orders them, and when it overflows the timestamp is advanced by one
// millisecond, as RFC 9562 section 6.2 (method 1) allows.
func NewV7() UUID {
	var u UUID
	if _, err := rand.Read(u[6:]); err != nil {
		panic("partition: crypto/rand failed: " + err.Error())
	}
	now := time.Now().UnixMilli()
	v7.mu.Lock()
	switch {
	case now > v7.lastMs:
		v7.lastMs = now
		v7.seq = binary.BigEndian.Uint16(u[6:8]) & 0x07ff // leave headroom for the counter
	default:
		v7.seq++
		if v7.seq > 0x0fff {
			v7.lastMs++
			v7.seq = 0
		}
	}
	ms, seq := v7.lastMs, v7.seq
	v7.mu.Unlock()

	u[0] = byte(ms >> 40)
	u[1] = byte(ms >> 32)
	u[2] = byte(ms >> 24)
	u[3] = byte(ms >> 16)
	u[4] = byte(ms >> 8)
	u[5] = byte(ms)
	u[6] = 0x70 | byte(seq>>8)&0x0f
	u[7] = byte(seq)
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	return u
}

// String returns the canonical 8-4-4-4-12 lowercase form.
func (u UUID) String() string {
	var b [36]byte
	u.appendTo(b[:0])
	return string(b[:])
}

// AppendText appends the canonical form of u to b.
func (u UUID) AppendText(b []byte) []byte { return u.appendTo(b) }

func (u UUID) appendTo(b []byte) []byte {
	var buf [36]byte
	hex.Encode(buf[0:8], u[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], u[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], u[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], u[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:], u[10:])
	return append(b, buf[:]...)
}

// IsZero reports whether u is the all-zero UUID.
func (u UUID) IsZero() bool { return u == ZeroUUID }

// ParseUUID parses the canonical 36-character form (any hex case). It also
// accepts the 32-digit form without hyphens.
func ParseUUID(s string) (UUID, error) {
	var u UUID
	switch len(s) {
	case 36:
		if s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
			return u, ErrInvalidUUID
		}
		s = s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:]
	case 32:
	default:
		return u, ErrInvalidUUID
	}
	if _, err := hex.Decode(u[:], []byte(s)); err != nil {
		return UUID{}, ErrInvalidUUID
	}
	return u, nil
}
