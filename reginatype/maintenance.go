package reginatype

// MaintenanceState is the pair of maintenance switches, shared by every
// broker on one database.
type MaintenanceState struct {
	// Push: POST /api/v1/push is refused with a retryable 503 and writes
	// nothing (transactions, pops and acks go on).
	Push bool
	// Pop: pops answer 204 with no messages (acks, lease extensions and
	// pushes go on).
	Pop bool
}

// MaintenanceScope names one maintenance switch.
type MaintenanceScope string

// The two switches.
const (
	MaintenancePush MaintenanceScope = "push"
	MaintenancePop  MaintenanceScope = "pop"
)
