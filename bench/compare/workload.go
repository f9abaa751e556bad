package main

import (
	"math/rand/v2"
	"strconv"
)

// workload is the load shape every system gets: pushes of `items` messages
// to one of `partitions` partitions, each message an immutable JSON object
// of exactly `payload` bytes. Everything about push k of worker w (its
// partition, transaction ids and payloads) is a pure function of (tag, w,
// k), so a retry storm regenerates the very same pushes without keeping
// them, and Regina, the pgx ceiling and JetStream all carry the same bytes.
type workload struct {
	partitions int
	items      int
	payload    int
	payloads   [][]byte
}

// nPayloads distinct payloads are drawn from (random letters and digits, so
// nothing compresses them away).
const nPayloads = 1024

const payloadFrame = `{"data":""}`

func newWorkload(partitions, items, payload int, seed uint64) *workload {
	rnd := rand.New(rand.NewPCG(seed, 0x5eed))
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	dataLen := max(payload-len(payloadFrame), 0)
	w := &workload{partitions: max(partitions, 1), items: max(items, 1), payload: dataLen + len(payloadFrame)}
	for range nPayloads {
		p := make([]byte, 0, w.payload)
		p = append(p, `{"data":"`...)
		for range dataLen {
			p = append(p, alphabet[rnd.IntN(len(alphabet))])
		}
		p = append(p, `"}`...)
		w.payloads = append(w.payloads, p)
	}
	return w
}

// mix is splitmix64's finaliser.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// part is the partition of worker w's push seq, uniform over the partitions.
func (wl *workload) part(w, seq int) int {
	return int(mix(uint64(w)<<40^uint64(seq)) % uint64(wl.partitions))
}

// payloadOf is item i's payload of worker w's push seq. Callers must not
// modify it.
func (wl *workload) payloadOf(w, seq, i int) []byte {
	return wl.payloads[mix(uint64(w)<<40^uint64(seq)<<10^uint64(i)^0xabcdef)%nPayloads]
}

// appendTx appends item i's transaction id (and NATS Msg-Id) of worker w's
// push seq: "<tag>-<w>-<seq>-<i>".
func appendTx(dst []byte, tag string, w, seq, i int) []byte {
	dst = append(dst, tag...)
	dst = append(dst, '-')
	dst = strconv.AppendInt(dst, int64(w), 10)
	dst = append(dst, '-')
	dst = strconv.AppendInt(dst, int64(seq), 10)
	dst = append(dst, '-')
	return strconv.AppendInt(dst, int64(i), 10)
}

// appendBody appends the Queen push body of worker w's push seq to queue.
// Names and ids are plain ASCII without quotes or backslashes, so nothing
// needs escaping.
func (wl *workload) appendBody(dst []byte, queue, tag string, w, seq int) []byte {
	p := wl.part(w, seq)
	dst = append(dst, `{"items":[`...)
	for i := range wl.items {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"queue":"`...)
		dst = append(dst, queue...)
		dst = append(dst, `","partition":"p`...)
		dst = strconv.AppendInt(dst, int64(p), 10)
		dst = append(dst, `","transactionId":"`...)
		dst = appendTx(dst, tag, w, seq, i)
		dst = append(dst, `","payload":`...)
		dst = append(dst, wl.payloadOf(w, seq, i)...)
		dst = append(dst, '}')
	}
	return append(dst, `]}`...)
}
