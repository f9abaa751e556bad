package reginatype

import "fmt"

// PushShape is how ready batches of several partitions travel to
// PostgreSQL.
type PushShape int

const (
	// ShapeOneTransaction packs the ready batches of several partitions
	// into one statement (queen.push_segments): one round trip, one
	// transaction, one commit; partition rows locked in partition-id order.
	ShapeOneTransaction PushShape = iota
	// ShapePipelined sends them on one connection in one round trip, each
	// batch its own transaction (queen.push_segment, one commit each).
	ShapePipelined
	// ShapeSingle sends each batch alone: one round trip and one
	// transaction per partition batch.
	ShapeSingle
)

// PushShapeNames are the shapes' names, as the configuration spells them.
var PushShapeNames = map[PushShape]string{
	ShapeOneTransaction: "packed", ShapePipelined: "pipelined", ShapeSingle: "single"}

// String returns the shape's name.
func (s PushShape) String() string {
	if n, ok := PushShapeNames[s]; ok {
		return n
	}
	return fmt.Sprintf("PushShape(%d)", int(s))
}

// ParsePushShape reads a shape's name.
func ParsePushShape(name string) (PushShape, error) {
	for s, n := range PushShapeNames {
		if n == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("unknown push shape %q (packed, pipelined or single)", name)
}
