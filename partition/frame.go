package partition

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Limits of the frame format, enforced by [Body.Validate].
const (
	// MaxTxIDLen is the longest transaction id, in bytes (Queen's VARCHAR(255)).
	MaxTxIDLen = 255
	// MaxPayloadLen is the largest payload one frame can carry.
	MaxPayloadLen = 1<<31 - 1
)

const (
	flagTrace    byte = 1 << 0
	flagProducer byte = 1 << 1
	// flagEncrypted marks a payload sealed at rest (internal/crypt).
	flagEncrypted byte = 1 << 2
	flagsKnown         = flagTrace | flagProducer | flagEncrypted
	// bodyFixed is flags(1) + created(8) + txLen(2) + payloadLen(4).
	bodyFixed = 1 + 8 + 2 + 4
)

// ErrCorruptSegment is returned when segment bytes do not decode.
var ErrCorruptSegment = errors.New("corrupt segment")

// Frame is one stored message: everything a pop needs to answer for it.
type Frame struct {
	// MessageID is the broker-minted UUIDv7.
	MessageID UUID
	Body
}

// Deleted reports whether the frame is a tombstone: a message deleted
// through the API (see Tombstone). Its message id is the zero UUID, which
// the broker never mints.
func (f *Frame) Deleted() bool { return f.MessageID.IsZero() }

// Tombstone turns the frame into the tombstone of a deleted message: the
// zero message id, a null payload, no trace id and no producer. The offset
// (its place in the segment), the transaction id and the creation time stay.
func (f *Frame) Tombstone() {
	f.MessageID = ZeroUUID
	f.Payload = []byte("null")
	f.TraceID, f.HasTrace, f.ProducerSub = UUID{}, false, ""
}

// Body is the part of a frame after its message id.
type Body struct {
	// CreatedAt is when the broker accepted the message, in Unix microseconds.
	CreatedAt int64
	// TransactionID is the producer's idempotency key (or a broker-minted one).
	TransactionID string
	// TraceID is the optional trace id; HasTrace tells whether it is set.
	TraceID  UUID
	HasTrace bool
	// ProducerSub is the authenticated producer's subject, empty when none.
	ProducerSub string
	// Payload is the raw JSON payload exactly as received, or, when
	// Encrypted, that payload sealed (nonce || ciphertext || tag, see
	// internal/crypt).
	Payload []byte
	// Encrypted tells that Payload is sealed (flags&4).
	Encrypted bool
}

// Created returns CreatedAt as a time.Time in UTC.
func (b *Body) Created() time.Time { return time.UnixMicro(b.CreatedAt).UTC() }

// Validate reports whether the body fits the frame format.
func (b *Body) Validate() error {
	if len(b.TransactionID) > MaxTxIDLen {
		return fmt.Errorf("transaction id is %d bytes, over %d", len(b.TransactionID), MaxTxIDLen)
	}
	if len(b.ProducerSub) > 0xffff {
		return fmt.Errorf("producer subject is %d bytes, over 65535", len(b.ProducerSub))
	}
	if len(b.Payload) > MaxPayloadLen {
		return fmt.Errorf("payload is %d bytes, over %d", len(b.Payload), MaxPayloadLen)
	}
	return nil
}

// EncodedLen returns the number of bytes AppendBody writes for b.
func (b *Body) EncodedLen() int {
	n := bodyFixed + len(b.TransactionID) + len(b.Payload)
	if b.HasTrace {
		n += 16
	}
	if b.ProducerSub != "" {
		n += 2 + len(b.ProducerSub)
	}
	return n
}

// AppendBody appends the encoding of b to dst:
//
//	flags(1) created_unix_micros(8, BE) tx_len(2, BE) tx
//	[trace_id(16) if flags&1] [sub_len(2, BE) sub if flags&2]
//	payload_len(4, BE) payload   -- sealed when flags&4
//
// The body must have passed [Body.Validate].
func AppendBody(dst []byte, b *Body) []byte {
	var flags byte
	if b.HasTrace {
		flags |= flagTrace
	}
	if b.ProducerSub != "" {
		flags |= flagProducer
	}
	if b.Encrypted {
		flags |= flagEncrypted
	}
	dst = append(dst, flags)
	dst = binary.BigEndian.AppendUint64(dst, uint64(b.CreatedAt))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(b.TransactionID)))
	dst = append(dst, b.TransactionID...)
	if b.HasTrace {
		dst = append(dst, b.TraceID[:]...)
	}
	if b.ProducerSub != "" {
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(b.ProducerSub)))
		dst = append(dst, b.ProducerSub...)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(b.Payload)))
	return append(dst, b.Payload...)
}

// DecodeBody decodes one body from the front of src and returns the rest.
// The returned body's strings and payload are copies, independent of src.
func DecodeBody(src []byte) (Body, []byte, error) {
	var b Body
	if len(src) < bodyFixed {
		return b, nil, fmt.Errorf("%w: body header truncated", ErrCorruptSegment)
	}
	flags := src[0]
	if flags&^flagsKnown != 0 {
		return b, nil, fmt.Errorf("%w: unknown frame flags %#x", ErrCorruptSegment, flags)
	}
	b.Encrypted = flags&flagEncrypted != 0
	b.CreatedAt = int64(binary.BigEndian.Uint64(src[1:9]))
	txLen := int(binary.BigEndian.Uint16(src[9:11]))
	src = src[11:]
	if len(src) < txLen+4 {
		return b, nil, fmt.Errorf("%w: transaction id truncated", ErrCorruptSegment)
	}
	b.TransactionID = string(src[:txLen])
	src = src[txLen:]
	if flags&flagTrace != 0 {
		if len(src) < 16+4 {
			return b, nil, fmt.Errorf("%w: trace id truncated", ErrCorruptSegment)
		}
		copy(b.TraceID[:], src[:16])
		b.HasTrace = true
		src = src[16:]
	}
	if flags&flagProducer != 0 {
		if len(src) < 2 {
			return b, nil, fmt.Errorf("%w: producer subject truncated", ErrCorruptSegment)
		}
		n := int(binary.BigEndian.Uint16(src[:2]))
		if len(src) < 2+n+4 {
			return b, nil, fmt.Errorf("%w: producer subject truncated", ErrCorruptSegment)
		}
		if n == 0 {
			// The encoder never sets the flag for an empty subject; accepting
			// it would give one body two encodings.
			return b, nil, fmt.Errorf("%w: empty producer subject", ErrCorruptSegment)
		}
		b.ProducerSub = string(src[2 : 2+n])
		src = src[2+n:]
	}
	pl := uint64(binary.BigEndian.Uint32(src[:4]))
	src = src[4:]
	if uint64(len(src)) < pl {
		return b, nil, fmt.Errorf("%w: payload truncated", ErrCorruptSegment)
	}
	b.Payload = append([]byte(nil), src[:pl]...)
	return b, src[pl:], nil
}

// EncodeSegment returns the bytes of a segment holding frames, in order:
//
//	message_id(16) × len(frames)   -- the id block
//	body × len(frames)             -- see AppendBody
//
// The id block lets SQL read the message id of frame k (0-based) as
// substring(frames from 16*k+1 for 16) without decoding anything.
func EncodeSegment(frames []Frame) []byte {
	n := 16 * len(frames)
	for i := range frames {
		n += frames[i].EncodedLen()
	}
	out := make([]byte, 0, n)
	for i := range frames {
		out = append(out, frames[i].MessageID[:]...)
	}
	for i := range frames {
		out = AppendBody(out, &frames[i].Body)
	}
	return out
}

// DecodeSegment decodes a segment of count frames.
func DecodeSegment(seg []byte, count int) ([]Frame, error) {
	if count < 0 || len(seg) < 16*count || count > len(seg)/(16+bodyFixed) {
		return nil, fmt.Errorf("%w: %d bytes cannot hold %d frames", ErrCorruptSegment, len(seg), count)
	}
	frames := make([]Frame, count)
	rest := seg[16*count:]
	for i := range frames {
		copy(frames[i].MessageID[:], seg[16*i:16*i+16])
		var err error
		frames[i].Body, rest, err = DecodeBody(rest)
		if err != nil {
			return nil, fmt.Errorf("frame %d: %w", i, err)
		}
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrCorruptSegment, len(rest))
	}
	return frames, nil
}

// SegmentMessageID returns the message id of frame k of a segment of count
// frames without decoding the bodies.
func SegmentMessageID(seg []byte, count, k int) (UUID, error) {
	var u UUID
	if k < 0 || k >= count || count > len(seg)/16 {
		return u, fmt.Errorf("%w: no frame %d in %d", ErrCorruptSegment, k, count)
	}
	copy(u[:], seg[16*k:])
	return u, nil
}
