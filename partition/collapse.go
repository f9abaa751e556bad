package partition

// Status is the verdict of one pushed item.
type Status uint8

// Verdicts of a push item.
const (
	// StatusQueued means the item was stored at a new offset.
	StatusQueued Status = iota + 1
	// StatusDuplicate means nothing was written: an earlier message with the
	// same transaction id is inside the partition's window.
	StatusDuplicate
	// StatusConflict means nothing was written: an earlier message with the
	// same transaction id is inside the window and its payload differs
	// (only on a queue with dedupPayloadCheck reject).
	StatusConflict
)

// String returns the wire name of the status.
func (s Status) String() string {
	switch s {
	case StatusQueued:
		return "queued"
	case StatusDuplicate:
		return "duplicate"
	case StatusConflict:
		return "conflict"
	default:
		return "unknown"
	}
}

// Collapse finds the leader of every transaction id in txIDs: leader[i] is the
// index of the first item with the same transaction id as item i (leader[i] ==
// i for leaders). It appends the leaders' indexes, in order, to leaders and
// returns both slices. Followers will echo their leader's verdict and message id.
func Collapse(txIDs []string, leader []int, leaders []int) ([]int, []int) {
	leader = leader[:0]
	leaders = leaders[:0]
	if len(txIDs) <= 8 {
		// Small batches: a quadratic scan beats building a map.
		for i, id := range txIDs {
			l := i
			for _, j := range leaders {
				if txIDs[j] == id {
					l = j
					break
				}
			}
			leader = append(leader, l)
			if l == i {
				leaders = append(leaders, i)
			}
		}
		return leader, leaders
	}
	first := make(map[string]int, len(txIDs))
	for i, id := range txIDs {
		if j, ok := first[id]; ok {
			leader = append(leader, j)
			continue
		}
		first[id] = i
		leader = append(leader, i)
		leaders = append(leaders, i)
	}
	return leader, leaders
}
