package sqlstore

import (
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// The ready floor: where a group's candidate scan starts in the ready index.
//
// Every pop and every ack writes a new version of a cursor row, and its old
// entry in consumers_ready (keyed by avail_at) stays until PostgreSQL finds
// it dead to every snapshot. A pop's old entry holds the row's old avail_at,
// at or below the oldest ready row's, so the dead entries pile up at the
// head of the group's range, where every scan starts. VACUUM (and the
// entries' kill bits) clear them, except while some transaction holds an id
// older than them: then a scan from the head walks every version written
// since (a 5,000-partition drain beside a stranger's idle transaction in
// the same database: 0.72 of its rate).
//
// A scan therefore starts at the floor: the avail_at of the oldest
// candidate the group's last scan returned. A ready row below it (a
// transaction that made a row ready with a now() older than the floor, a
// lease that expired at a time below it, a row a rolled-back pop had
// locked) is still served: when a scan from the floor finds fewer rows than
// it asked for, the pop scans from the head too, and a floor older than
// readyFloorTTL is not used, so such a row waits at most that long behind
// rows that became ready after it. A scan that finds nothing at all drops
// the floor: an idle group's polls scan once, from the head.

// readyFloorTTL is how long a floor is used before a scan from the head
// sets a new one.
const readyFloorTTL = time.Second

// readyFloorGroups bounds the (queue, group) pairs whose floors are kept;
// the least recently popped go first (a pair without a floor scans from the
// head once).
const readyFloorGroups = 4096

type floorKey struct {
	queue [16]byte
	group string
}

type floor struct {
	at  time.Time // avail_at of the scan's oldest candidate
	set time.Time // when it was read
}

// readyFloors holds the floors of the (queue, group) pairs this store
// popped from.
type readyFloors struct {
	mu  sync.Mutex
	lru *simplelru.LRU[floorKey, floor]
}

func newReadyFloors() *readyFloors {
	l, _ := simplelru.NewLRU[floorKey, floor](readyFloorGroups, nil) // size > 0: no error
	return &readyFloors{lru: l}
}

// get returns the group's floor, or false when it has none younger than
// readyFloorTTL.
func (f *readyFloors) get(queue [16]byte, group string, now time.Time) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl, ok := f.lru.Get(floorKey{queue, group})
	if !ok || now.Sub(fl.set) >= readyFloorTTL {
		return time.Time{}, false
	}
	return fl.at, true
}

// raise records at as the group's floor when it is above the floor in use
// (fromHead: the scan started at the head, at is the head; its time starts
// a new TTL).
func (f *readyFloors) raise(queue [16]byte, group string, at time.Time, fromHead bool, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := floorKey{queue, group}
	fl, ok := f.lru.Get(k)
	switch {
	case fromHead || !ok:
		f.lru.Add(k, floor{at: at, set: now})
	case at.After(fl.at):
		f.lru.Add(k, floor{at: at, set: fl.set})
	}
}

// forget drops the group's floor: its last scan found nothing ready.
func (f *readyFloors) forget(queue [16]byte, group string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lru.Remove(floorKey{queue, group})
}
