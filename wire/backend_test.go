package wire

// nilBackend implements every interface of Backend through nil embedded
// interfaces: any call panics. Tests use it where no call must reach the
// broker, or to make a handler panic.
type nilBackend struct {
	Pusher
	Popper
	Acker
	Transactor
	Replayer
	QueueDeleter
	Admin
	Groups
	Tracer
	Streams
	Cycler
	StatsStore
	Pinger
	readiness
	Maintenance
	Pipeline
}

// readiness names Readiness so that its method is not shadowed by the
// embedded field's name.
type readiness = Readiness

// newNilBackend returns a complete Backend whose every call panics.
func newNilBackend() Backend {
	n := nilBackend{}
	return Backend{Pusher: n, Popper: n, Acker: n, Transactor: n, Replayer: n, QueueDeleter: n, Admin: n,
		Groups: n, Traces: n, Streams: n, Cycler: n, Stats: n, Pinger: n, Readiness: n,
		Maintenance: n, Pipeline: n}
}
