package state

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// groupSync makes acknowledged writes of the embedded DIR store durable,
// one sync shared by every writer waiting when it starts (group commit).
//
// The embedded server runs its single-replica file store without
// SyncAlways: with it, JetStream fsyncs every write under the stream's
// lock, one after the other, so concurrent proposals cannot share a sync
// and a durable store did about a tenth of the memory store's work
// (docs/performance.md). Without it a write is in the kernel (written with
// write(2), JetStream's flush in place for R1 streams) when it is
// acknowledged, and survives the process being killed; a sync of the
// file system then makes it survive the machine too. So a write that must
// survive before something goes out (a prompt, a fulfilment request, an
// answer queued for a later session) waits for the next sync that starts
// after its acknowledgement, and every writer that arrived meanwhile
// shares it.
//
// A sync waits up to syncLinger before it starts while other writers are
// on their way (their write published, its acknowledgement not yet back:
// expect), so that they share it; PostgreSQL's commit_delay does the same
// only while commit_siblings transactions are active. Without a linger,
// proposals arriving a few milliseconds apart each had a sync of their
// own, and on a virtual disk the syncs' writeback then slowed every store
// write (docs/performance.md). With a linger whenever the last sync was
// recent (the rule before), a steady 200 proposals a second waited 2 ms
// for writers that were not coming: 2.6 ms per synced write where the
// sync took 0.4 ms. A write with nobody on the way is synced at once.
type groupSync struct {
	flush   func() error // syncs the store's file system
	release func() error // releases what flush holds open
	mu      sync.Mutex
	waiters []chan error // waiting for the next sync to start
	running bool         // a goroutine is syncing; it takes the waiters
	lazy    *time.Timer  // a sync nobody waits for, armed by soon
	closed  bool
	idle    sync.WaitGroup
	// coming counts writers on their way to wait (expect); arrived wakes
	// a lingering sync when one gets there (or gives up).
	coming  int
	arrived chan struct{}

	after func(time.Duration) <-chan time.Time // time.After; tests replace it
}

// syncLinger bounds how long a sync waits for the writers on their way.
// It bounds what group commit adds to a prompt's or request's latency.
const syncLinger = 2 * time.Millisecond

// lazySync bounds how long a write made durable by soon stays in the
// kernel only: JetStream's own sync runs every two minutes.
const lazySync = 50 * time.Millisecond

func newGroupSync(flush, release func() error) *groupSync {
	return &groupSync{flush: flush, release: release, after: time.After, arrived: make(chan struct{}, 1)}
}

// expect says a writer is on its way: its write is being published, and
// it will wait for the sync after it (wait with expected true) or give up
// (unexpect). A sync starting meanwhile lingers for it.
func (g *groupSync) expect() {
	g.mu.Lock()
	g.coming++
	g.mu.Unlock()
}

// unexpect: the writer expect announced will not wait (its write failed).
func (g *groupSync) unexpect() {
	g.mu.Lock()
	g.coming--
	g.mu.Unlock()
	g.signalArrived()
}

func (g *groupSync) signalArrived() {
	select {
	case g.arrived <- struct{}{}:
	default:
	}
}

// wait returns once a sync that started after the call has finished (its
// error, if it failed), or when ctx ends. expected: the caller announced
// itself with expect, and is no longer on its way once it waits.
func (g *groupSync) wait(ctx context.Context, expected bool) error {
	ch := make(chan error, 1)
	g.mu.Lock()
	if expected {
		g.coming--
	}
	if g.closed {
		g.mu.Unlock()
		return ErrClosed
	}
	g.enqueueLocked(ch)
	g.mu.Unlock()
	g.signalArrived()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return fmt.Errorf("state: sync: %w", ctx.Err())
	}
}

// enqueueLocked adds a waiter for the next sync and starts the loop if
// none runs. Called with g.mu held.
func (g *groupSync) enqueueLocked(ch chan error) {
	g.waiters = append(g.waiters, ch)
	if !g.running {
		g.running = true
		g.idle.Add(1)
		go g.loop()
	}
}

// soon makes a sync start within lazySync that nobody waits for: for
// writes whose loss with the machine is tolerated but should not last
// (see Store.Delete).
func (g *groupSync) soon() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.lazy != nil {
		return
	}
	g.lazy = time.AfterFunc(lazySync, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.lazy = nil
		if !g.closed {
			g.enqueueLocked(make(chan error, 1))
		}
	})
}

// loop syncs while writers wait, each sync for all the writers waiting
// when it starts, and ends when none is left: its owner is the last
// waiter's call, and close waits for it.
func (g *groupSync) loop() {
	defer g.idle.Done()
	for {
		g.mu.Lock()
		if len(g.waiters) == 0 {
			g.running = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		g.linger()
		g.mu.Lock()
		batch := g.waiters
		g.waiters = nil
		g.mu.Unlock()
		err := g.flush()
		if err != nil {
			err = fmt.Errorf("state: sync store to disk: %w", err)
		}
		for _, ch := range batch {
			ch <- err
		}
	}
}

// linger waits, at most syncLinger, until no writer is on its way.
func (g *groupSync) linger() {
	var deadline <-chan time.Time
	for {
		g.mu.Lock()
		coming := g.coming
		g.mu.Unlock()
		if coming <= 0 {
			return
		}
		if deadline == nil {
			deadline = g.after(syncLinger)
		}
		select {
		case <-g.arrived:
		case <-deadline:
			return
		}
	}
}

// close waits for a sync under way to finish, makes the one soon promised
// now, and releases the file system handle; later waits fail with
// ErrClosed.
func (g *groupSync) close() {
	g.mu.Lock()
	g.closed = true
	promised := g.lazy != nil && g.lazy.Stop()
	g.lazy = nil
	g.mu.Unlock()
	g.idle.Wait()
	if promised {
		_ = g.flush() // nobody to tell: as the timer's sync would have
	}
	g.release()
}

// synced returns once every write this store acknowledged before the call
// is on disk (DIR mode; at once in the others).
func (s *Store) synced(ctx context.Context) (err error) {
	if s.durable == nil {
		return nil
	}
	defer s.timed("sync", time.Now(), &err)
	return s.durable.wait(ctx, false)
}

// expectSync announces a write whose caller will wait for its sync
// (syncedExpected), so that a sync starting meanwhile lingers for it; it
// returns what to call if the write fails instead.
func (s *Store) expectSync() (failed func()) {
	if s.durable == nil {
		return func() {}
	}
	s.durable.expect()
	return s.durable.unexpect
}

// syncedExpected is synced for a write announced by expectSync.
func (s *Store) syncedExpected(ctx context.Context) (err error) {
	if s.durable == nil {
		return nil
	}
	defer s.timed("sync", time.Now(), &err)
	return s.durable.wait(ctx, true)
}

// syncSoon has every write this store acknowledged before the call reach
// the disk within lazySync (DIR mode), without waiting for it.
func (s *Store) syncSoon() {
	if s.durable != nil {
		s.durable.soon()
	}
}
