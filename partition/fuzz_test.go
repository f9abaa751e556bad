package partition

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzSegment decodes arbitrary bytes as a segment of an arbitrary count. It
// must never panic, failures must wrap ErrCorruptSegment, and whatever decodes
// must re-encode to exactly the input: the format has one encoding per value.
func FuzzSegment(f *testing.F) {
	id := UUID{0: 0x01, 6: 0x70, 8: 0x80, 15: 0xff}
	f.Add(EncodeSegment(nil), 0)
	f.Add(EncodeSegment([]Frame{{MessageID: id, Body: Body{CreatedAt: 1_700_000_000_000_000, TransactionID: "tx-1", Payload: []byte(`{"a":1}`)}}}), 1)
	f.Add(EncodeSegment([]Frame{
		{MessageID: id, Body: Body{TransactionID: "t", HasTrace: true, TraceID: id, Payload: []byte("null")}},
		{MessageID: id, Body: Body{TransactionID: "u", ProducerSub: "svc", Payload: []byte(`"x"`)}},
		{MessageID: id, Body: Body{TransactionID: "v", HasTrace: true, ProducerSub: "p"}},
	}), 3)
	r := rand.New(rand.NewPCG(3, 4))
	frames := make([]Frame, 4)
	for i := range frames {
		frames[i] = frameTestRandom(r)
	}
	f.Add(EncodeSegment(frames), len(frames))
	f.Add([]byte{}, 1)
	f.Add(make([]byte, 31), 1)

	f.Fuzz(func(t *testing.T, seg []byte, count int) {
		frames, err := DecodeSegment(seg, count)
		if err != nil {
			require.ErrorIs(t, err, ErrCorruptSegment)
			require.Nil(t, frames)
			return
		}
		require.Len(t, frames, count)
		for k := range frames {
			require.NoError(t, frames[k].Validate())
			id, err := SegmentMessageID(seg, count, k)
			require.NoError(t, err)
			require.Equal(t, frames[k].MessageID, id)
		}
		require.Equal(t, seg, EncodeSegment(frames), "decoded frames re-encode to the same bytes")
	})
}
