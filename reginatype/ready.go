package reginatype

// Readiness is what a broker reports to its readiness probe (GET /ready):
// whether it can take traffic now, check by check. The broker is ready when
// every check is OK.
type Readiness struct {
	// Database: a short ping answered, on a read-write session (a standby or
	// a read-only database is "no primary").
	Database ReadinessCheck
	// Migrations: the schema holds exactly the migrations this broker
	// applies, with their checksums.
	Migrations ReadinessCheck
	// Mailboxes: no partition mailbox is at its bound (a push to it would be
	// refused).
	Mailboxes ReadinessCheck
}

// Ready reports whether every check passed.
func (r *Readiness) Ready() bool { return r.Database.OK && r.Migrations.OK && r.Mailboxes.OK }

// ReadinessCheck is one check of a Readiness.
type ReadinessCheck struct {
	OK bool
	// Error says why the check failed (empty when OK).
	Error string
	// Database: the ping's round trip in milliseconds.
	LatencyMs float64
	// Migrations: the highest version applied to the schema and the highest
	// this broker knows.
	Version, Expected int
	// Mailboxes: live partition actors, items waiting in all mailboxes,
	// mailboxes at their bound, and the fill of the fullest one (0 to 1, the
	// larger of its item and byte fills).
	Actors, Depth, Full int
	Fullest             float64
}
