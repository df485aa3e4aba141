package state

import "time"

// Observer receives the store's measurements; ops.Metrics can implement it
// to export them (store latency, claims won and lost, adoptions, lease
// renewals). Calls are synchronous and must not block.
type Observer interface {
	// StoreOp reports one store operation ("claim", "put", "get",
	// "update", "update_soon", "answered", "delete", "list", "outbox", "rpcid", "lease",
	// "reclaim", "ping", "take"; alone on the store "seen", one write of
	// the seen log, shared by the ids claimed while the one before it was
	// out, and "records", one write of the record log, shared likewise by
	// the records' writes (a snapshot's messages too); in DIR mode "sync", a writer's wait for its write to
	// reach the disk, and "syncfs", one sync of the file system shared by
	// the writers waiting for it),
	// its duration and its error (nil on success, ErrConflict and
	// ErrExists included).
	StoreOp(op string, d time.Duration, err error)
	// Claimed reports one settled Claim: won or lost.
	Claimed(won bool)
	// Adopted reports that n records of member from were adopted here.
	Adopted(from string, n int)
	// LeaseRenewed reports one lease renewal; err is non-nil when it failed
	// or the lease had lapsed and was taken again.
	LeaseRenewed(err error)
}

type nopObserver struct{}

func (nopObserver) StoreOp(string, time.Duration, error) {}
func (nopObserver) Claimed(bool)                         {}
func (nopObserver) Adopted(string, int)                  {}
func (nopObserver) LeaseRenewed(error)                   {}

// timed reports op's duration and outcome to the observer; use as
// defer s.timed("op", time.Now(), &err).
func (s *Store) timed(op string, start time.Time, err *error) {
	s.obs.StoreOp(op, time.Since(start), *err)
}
