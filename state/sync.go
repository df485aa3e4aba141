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
// Under load a sync waits syncLinger before it starts, so that more
// writers share it (PostgreSQL's commit_delay, MySQL's
// binlog_group_commit_sync_delay): without it, proposals arriving a few
// milliseconds apart each had a sync of their own, and on a virtual disk
// the syncs' writeback then slowed every store write (docs/performance.md).
// A write on a quiet store is synced at once.
type groupSync struct {
	flush   func() error // syncs the store's file system
	release func() error // releases what flush holds open
	mu      sync.Mutex
	waiters []chan error // waiting for the next sync to start
	running bool         // a goroutine is syncing; it takes the waiters
	lazy    *time.Timer  // a sync nobody waits for, armed by soon
	closed  bool
	lastEnd time.Time // when the last sync ended
	idle    sync.WaitGroup

	now   func() time.Time    // time.Now; tests replace it
	sleep func(time.Duration) // time.Sleep; tests replace it
}

// syncLinger is how long a sync waits for more writers when the store is
// busy: when the previous sync ended less than syncBusy before the first
// writer of the next one arrived. It bounds what group commit adds to a
// prompt's or request's latency under load.
const (
	syncLinger = 2 * time.Millisecond
	syncBusy   = 4 * syncLinger
)

// lazySync bounds how long a write made durable by soon stays in the
// kernel only: JetStream's own sync runs every two minutes.
const lazySync = 50 * time.Millisecond

func newGroupSync(flush, release func() error) *groupSync {
	return &groupSync{flush: flush, release: release, now: time.Now, sleep: time.Sleep}
}

// wait returns once a sync that started after the call has finished (its
// error, if it failed), or when ctx ends.
func (g *groupSync) wait(ctx context.Context) error {
	ch := make(chan error, 1)
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return ErrClosed
	}
	g.enqueueLocked(ch)
	g.mu.Unlock()
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
		busy := !g.lastEnd.IsZero() && g.now().Sub(g.lastEnd) < syncBusy
		g.mu.Unlock()
		if busy {
			g.sleep(syncLinger) // the writers close behind join this sync
		}
		g.mu.Lock()
		batch := g.waiters
		g.waiters = nil
		g.mu.Unlock()
		err := g.flush()
		g.mu.Lock()
		g.lastEnd = g.now()
		g.mu.Unlock()
		if err != nil {
			err = fmt.Errorf("state: sync store to disk: %w", err)
		}
		for _, ch := range batch {
			ch <- err
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
	return s.durable.wait(ctx)
}

// syncSoon has every write this store acknowledged before the call reach
// the disk within lazySync (DIR mode), without waiting for it.
func (s *Store) syncSoon() {
	if s.durable != nil {
		s.durable.soon()
	}
}
