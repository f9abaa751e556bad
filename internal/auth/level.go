package auth

import "fmt"

// Level is a permission level. A token grants the highest level among its
// roles; a route needs one level, and every higher level includes it.
type Level uint8

const (
	// None is the level of a token without a recognised role: it passes
	// no route.
	None Level = iota
	// ReadOnly reads: status, analytics, resources, messages, consumer
	// groups, DLQ and traces (role "read-only").
	ReadOnly
	// ReadWrite produces and consumes: push, pop, ack, transaction, lease,
	// configure, seek (role "read-write").
	ReadWrite
	// Admin deletes queues and consumer groups and runs system operations
	// (role "admin").
	Admin
)

// String returns the role name of the level ("read-only", "read-write",
// "admin"), or "none".
func (l Level) String() string {
	switch l {
	case ReadOnly:
		return "read-only"
	case ReadWrite:
		return "read-write"
	case Admin:
		return "admin"
	case None:
		return "none"
	}
	return fmt.Sprintf("Level(%d)", uint8(l))
}

// ParseLevel maps a role name to its level; an unknown name is (None,
// false). Role names are matched exactly, as upstream does.
func ParseLevel(role string) (Level, bool) {
	switch role {
	case "read-only":
		return ReadOnly, true
	case "read-write":
		return ReadWrite, true
	case "admin":
		return Admin, true
	}
	return None, false
}
