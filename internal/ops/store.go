package ops

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mewkit/fulfiller/fulfill/state"
)

// Pinger is what the store probe needs of the state store; *state.Store
// provides it. Ping must succeed only when the store accepts a write now.
type Pinger interface {
	Ping(ctx context.Context) error
}

// StoreHealth is what /readyz and the metrics read of the state store.
type StoreHealth interface {
	// Healthy is nil while the store accepted the last probe's write.
	Healthy() error
}

// DefaultProbeInterval is how often a StoreProbe pings the store. A ping
// is a synced write, so the probe runs in the background at this pace
// rather than once per /readyz request, which anyone who reaches the port
// could send at any rate.
const DefaultProbeInterval = 2 * time.Second

// probeTimeout is how long one ping may take before it counts as failed:
// longer than the interval, so that one slow fsync on a busy disk does not
// make the fulfiller unready, and as long as the store's own default
// operation timeout.
const probeTimeout = 5 * time.Second

// StoreProbe pings the state store in the background and keeps the last
// result for /readyz. Until the first probe has answered it reports the
// store as not yet checked: readiness fails closed.
type StoreProbe struct {
	name     string
	p        Pinger
	interval time.Duration

	mu   sync.Mutex
	last error
}

// errNotProbed is the health of a store not yet probed.
var errNotProbed = errors.New("not checked yet")

// NewStoreProbe probes p, which /readyz names as name (e.g. the --state
// value: a directory or nats:// URLs, which never carry credentials), every
// interval (0: DefaultProbeInterval). Run starts it.
func NewStoreProbe(name string, p Pinger, interval time.Duration) *StoreProbe {
	if interval <= 0 {
		interval = DefaultProbeInterval
	}
	return &StoreProbe{name: name, p: p, interval: interval, last: errNotProbed}
}

// Run probes at once and then every interval until ctx is cancelled. A
// ping that takes longer than 5s counts as failed; a slow ping delays the
// next one.
func (sp *StoreProbe) Run(ctx context.Context) {
	t := time.NewTicker(sp.interval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		err := sp.p.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		sp.mu.Lock()
		sp.last = err
		sp.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Healthy is nil while the last probe succeeded; otherwise an error that
// names the store and says why.
func (sp *StoreProbe) Healthy() error {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	switch {
	case sp.last == nil:
		return nil
	case errors.Is(sp.last, errNotProbed):
		return fmt.Errorf("the state store (%s) is not checked yet", sp.name)
	}
	return fmt.Errorf("the state store (%s) does not accept writes: %w", sp.name, sp.last)
}

var _ state.Observer = (*Metrics)(nil)

// registerStore makes the state store's metrics (docs/operations.md
// "Metrics").
func (m *Metrics) registerStore(reg *prometheus.Registry) {
	m.claims = registered(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fulfiller_state_claims_total",
		Help: "Claims of proposal ids in the state store, by result: won (this member decides it) or lost (another member or an earlier process did; nothing is sent)."}, []string{"result"}))
	m.adopted = registered(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "fulfiller_state_adopted_records_total",
		Help: "Pending records this member adopted from group members whose lease lapsed."}))
	m.leaseRenewals = registered(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fulfiller_state_lease_renewals_total",
		Help: "Renewals of this member's lease, by result: ok or failed (the store did not take it, or the lease had lapsed and was taken again)."}, []string{"result"}))
	m.storeOpDur = registered(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fulfiller_state_op_duration_seconds",
		Help: "Duration of state store operations, by op (claim, put, get, update, answered, delete, list, outbox, rpcid, lease, ping, take; seen: one seen-log write shared by the ids claimed meanwhile, and records: one record-log write shared by the record writes made meanwhile, alone on the store; sync: a write waiting to reach the disk, syncfs: one sync shared by those waiting).", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 9)}, []string{"op"}))
	m.storeErrors = registered(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fulfiller_state_op_errors_total",
		Help: "State store operations that failed, by op; lost compare-and-sets and missing or existing records are outcomes, not errors, and are not counted."}, []string{"op"}))
}

// StoreOp implements state.Observer.
func (m *Metrics) StoreOp(op string, d time.Duration, err error) {
	m.storeOpDur.WithLabelValues(op).Observe(d.Seconds())
	if err != nil && !errors.Is(err, state.ErrConflict) && !errors.Is(err, state.ErrExists) && !errors.Is(err, state.ErrNotFound) {
		m.storeErrors.WithLabelValues(op).Inc()
	}
}

// Claimed implements state.Observer.
func (m *Metrics) Claimed(won bool) {
	if won {
		m.claims.WithLabelValues("won").Inc()
	} else {
		m.claims.WithLabelValues("lost").Inc()
	}
}

// Adopted implements state.Observer. The member adopted from is not a
// label: member ids come from the store, and one series per id would grow
// without bound.
func (m *Metrics) Adopted(_ string, n int) { m.adopted.Add(float64(n)) }

// LeaseRenewed implements state.Observer.
func (m *Metrics) LeaseRenewed(err error) {
	if err != nil {
		m.leaseRenewals.WithLabelValues("failed").Inc()
	} else {
		m.leaseRenewals.WithLabelValues("ok").Inc()
	}
}
