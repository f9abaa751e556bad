package sqlstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/regina-mq/regina/reginatype"
)

// Maintenance holds the maintenance switches (queen.maintenance) as this
// broker last read them: Current answers from memory, so a push or a pop
// costs no query; Run re-reads the row every interval so that a switch
// flipped through another broker reaches this one within it. Set writes the
// row and updates the copy at once.
type Maintenance struct {
	s                    *Store
	get, setPush, setPop string // SQL, qualified

	mu      sync.Mutex
	state   reginatype.MaintenanceState
	changed chan struct{} // closed (and replaced) when state changes
	failing bool          // the last refresh failed (logged once)
}

// NewMaintenance reads the switches and returns their holder. It fails
// when the row cannot be read: a broker must not serve pushes that
// maintenance should refuse.
func (s *Store) NewMaintenance(ctx context.Context) (*Maintenance, error) {
	m := &Maintenance{s: s, changed: make(chan struct{}),
		get: qualify(`SELECT push, pop FROM queen.maintenance`, s.schema),
		setPush: qualify(`UPDATE queen.maintenance SET push = $1,
			push_changed_at = CASE WHEN push = $1 THEN push_changed_at ELSE now() END RETURNING push, pop`, s.schema),
		setPop: qualify(`UPDATE queen.maintenance SET pop = $1,
			pop_changed_at = CASE WHEN pop = $1 THEN pop_changed_at ELSE now() END RETURNING push, pop`, s.schema)}
	if s.citus != nil { // no now() inside CASE on Citus (citusQueries)
		m.setPush = citusNowOutOfCase(m.setPush)
		m.setPop = citusNowOutOfCase(m.setPop)
	}
	if _, err := m.Refresh(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

// Current returns the switches as last read or written (no I/O).
func (m *Maintenance) Current() reginatype.MaintenanceState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state
}

// Changed returns a channel closed at the next change of the switches.
func (m *Maintenance) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

func (m *Maintenance) store(st reginatype.MaintenanceState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if st != m.state {
		m.state = st
		close(m.changed)
		m.changed = make(chan struct{})
	}
}

// Refresh reads the switches from the database and keeps them.
func (m *Maintenance) Refresh(ctx context.Context) (reginatype.MaintenanceState, error) {
	var st reginatype.MaintenanceState
	if err := m.s.pool.QueryRow(ctx, m.get).Scan(&st.Push, &st.Pop); err != nil {
		return m.Current(), fmt.Errorf("read maintenance switches: %w", classify(err))
	}
	m.store(st)
	return st, nil
}

// Set turns one switch on or off in the database (for every broker on the
// schema) and here at once, and returns both switches as stored.
func (m *Maintenance) Set(ctx context.Context, scope reginatype.MaintenanceScope, on bool) (reginatype.MaintenanceState, error) {
	var st reginatype.MaintenanceState
	q := m.setPush
	if scope == reginatype.MaintenancePop {
		q = m.setPop
	}
	if err := m.s.pool.QueryRow(ctx, q, on).Scan(&st.Push, &st.Pop); err != nil {
		return m.Current(), fmt.Errorf("set %s maintenance: %w", scope, classify(err))
	}
	m.store(st)
	m.s.log.Warn().Str("scope", string(scope)).Bool("on", on).Msg("maintenance switch set")
	return st, nil
}

// Run refreshes the switches every interval until ctx ends. A failed read
// keeps the last known switches; it is logged once per outage.
func (m *Maintenance) Run(ctx context.Context, every time.Duration) {
	runEvery(ctx, every, func() {
		before := m.Current()
		rctx, cancel := context.WithTimeout(ctx, every+5*time.Second)
		st, err := m.Refresh(rctx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && !m.failing:
			m.failing = true
			m.s.log.Warn().Err(err).Msg("cannot read the maintenance switches; keeping the last known ones")
		case err == nil:
			if m.failing {
				m.failing = false
				m.s.log.Info().Msg("maintenance switches readable again")
			}
			if st != before {
				m.s.log.Warn().Bool("push", st.Push).Bool("pop", st.Pop).Msg("maintenance switches changed")
			}
		}
	})
}
