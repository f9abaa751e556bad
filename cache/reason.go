package cache

// Reason says why Watermark answered NoWatermark. ReasonNone means the cache
// knew the partition and computed the watermark itself (which can still be
// NoWatermark, when the cache knows nothing below offset 0 or a batch hash
// sits in the partition's first segment).
type Reason uint8

const (
	// ReasonNone: the watermark was computed from a known partition.
	ReasonNone Reason = iota
	// ReasonDisabled: the kill switch is off (or the budget is zero).
	ReasonDisabled
	// ReasonUnknown: the partition is not held (never loaded, or evicted).
	ReasonUnknown
	// ReasonHydrating: the partition is being loaded.
	ReasonHydrating
	// ReasonGap: someone else (another broker, the transaction endpoint, a
	// push whose outcome was lost) wrote offsets the cache never saw, or a
	// hydration could not be merged; the partition was dropped.
	ReasonGap
	// ReasonPressure: the partition alone does not fit the memory budget; it
	// is not re-loaded before a backoff expires.
	ReasonPressure
	// ReasonWindow: the queue's window grew beyond what the cache covers (or
	// became 0); the partition was dropped and must be re-loaded.
	ReasonWindow
	// ReasonClock: the database clock went back by more than TrimMargin; the
	// partition was dropped because its trimming can no longer be trusted.
	ReasonClock
	// ReasonSpan: a hash of the batch repeats one so old that the watermark
	// would cover more than Config.MaxSpan offsets; the full-window probe
	// (index-driven) is cheaper than scanning every segment since. Nothing
	// is dropped.
	ReasonSpan
	// ReasonCold: a hash of the batch may be among the partition's older
	// hashes, which the cache holds as Bloom filters (Config.HotHashes), and
	// the watermark below that filter's segments would cover more than
	// Config.MaxSpan offsets: a repeat of an old id, or (about once in
	// 10,000 hashes a filter is tested with) a false positive. Nothing is
	// dropped.
	ReasonCold

	numReasons
)

var reasonNames = [numReasons]string{
	ReasonNone:      "none",
	ReasonDisabled:  "disabled",
	ReasonUnknown:   "unknown",
	ReasonHydrating: "hydrating",
	ReasonGap:       "gap",
	ReasonPressure:  "pressure",
	ReasonWindow:    "window",
	ReasonClock:     "clock",
	ReasonSpan:      "span",
	ReasonCold:      "cold",
}

// String returns a short snake_case name, suitable as a metric label.
func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "invalid"
}
