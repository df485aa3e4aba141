package state

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeFS is a file system whose syncs the test holds and counts.
type fakeFS struct {
	started  chan int      // the number of each sync as it starts
	proceed  chan struct{} // a sync ends when it receives (nil: at once)
	err      error
	syncs    atomic.Int32
	released atomic.Int32
}

func (f *fakeFS) flush() error {
	n := int(f.syncs.Add(1))
	if f.started != nil {
		f.started <- n
	}
	if f.proceed != nil {
		<-f.proceed
	}
	return f.err
}

func (f *fakeFS) release() error { f.released.Add(1); return nil }

// A write acknowledged while a sync runs is not covered by it: its wait
// returns after the next sync, which every writer waiting by then shares.
func TestGroupSyncWaitsForASyncThatStartsAfterTheCall(t *testing.T) {
	fs := &fakeFS{started: make(chan int, 8), proceed: make(chan struct{})}
	g := newGroupSync(fs.flush, fs.release)
	ctx := t.Context()

	first := make(chan error, 1)
	go func() { first <- g.wait(ctx, false) }()
	if n := <-fs.started; n != 1 {
		t.Fatalf("sync %d started, want 1", n)
	}
	// Five writers arrive while sync 1 runs.
	var wg sync.WaitGroup
	later := make(chan error, 5)
	for range 5 {
		wg.Add(1)
		go func() { defer wg.Done(); later <- g.wait(ctx, false) }()
	}
	waitUntil(t, "five writers waiting", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.waiters) == 5 })
	fs.proceed <- struct{}{} // sync 1 ends
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-later:
		t.Fatalf("a writer that arrived during sync 1 returned after it (%v)", err)
	case n := <-fs.started:
		if n != 2 {
			t.Fatalf("sync %d started, want 2", n)
		}
	}
	fs.proceed <- struct{}{} // sync 2, shared by all five
	wg.Wait()
	close(later)
	for err := range later {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := fs.syncs.Load(); n != 2 {
		t.Errorf("%d syncs for six writers, want 2", n)
	}
	g.close()
	if fs.released.Load() != 1 {
		t.Error("close did not release the file system")
	}
	if err := g.wait(ctx, false); !errors.Is(err, ErrClosed) {
		t.Errorf("wait after close = %v, want ErrClosed", err)
	}
}

// A sync lingers, at most syncLinger, only while writers announced by
// expect are on their way, and starts as soon as the last of them waits;
// a write with nobody on the way is synced at once (at a steady 200 a
// second the old rule, linger whenever the last sync was recent, made
// every synced write wait 2 ms for writers that were not coming).
func TestGroupSyncLingersOnlyForWritersOnTheirWay(t *testing.T) {
	fs := &fakeFS{started: make(chan int, 8), proceed: make(chan struct{})}
	g := newGroupSync(fs.flush, fs.release)
	defer g.close()
	lingers, timeout := make(chan time.Duration, 1), make(chan time.Time)
	g.after = func(d time.Duration) <-chan time.Time { lingers <- d; return timeout }
	ctx := t.Context()
	syncStarts := func(want int) {
		t.Helper()
		if n := <-fs.started; n != want {
			t.Fatalf("sync %d started, want %d", n, want)
		}
		select {
		case d := <-lingers:
			t.Fatalf("sync %d lingered %v", want, d)
		default:
		}
	}

	// Nobody on the way: synced at once, however recent the last sync.
	for i := 1; i <= 2; i++ {
		a := make(chan error, 1)
		go func() { a <- g.wait(ctx, false) }()
		syncStarts(i)
		fs.proceed <- struct{}{}
		if err := <-a; err != nil {
			t.Fatal(err)
		}
	}

	// Two writers on their way when the third waits: the sync lingers
	// for them, and starts once both wait, before its deadline.
	g.expect()
	g.expect()
	c := make(chan error, 3)
	go func() { c <- g.wait(ctx, false) }()
	if d := <-lingers; d != syncLinger {
		t.Fatalf("lingered up to %v, want %v", d, syncLinger)
	}
	go func() { c <- g.wait(ctx, true) }()
	select {
	case n := <-fs.started:
		t.Fatalf("sync %d started with a writer still on its way", n)
	case <-time.After(20 * time.Millisecond):
	}
	go func() { c <- g.wait(ctx, true) }()
	syncStarts(3)
	fs.proceed <- struct{}{}
	for range 3 {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}
	if n := fs.syncs.Load(); n != 3 {
		t.Fatalf("%d syncs, want 3: the three writers shared one", n)
	}

	// A writer on its way that gives up (its write failed) releases the
	// linger too; one that never arrives is waited for syncLinger only.
	g.expect()
	d := make(chan error, 1)
	go func() { d <- g.wait(ctx, false) }()
	<-lingers
	g.unexpect()
	syncStarts(4)
	fs.proceed <- struct{}{}
	if err := <-d; err != nil {
		t.Fatal(err)
	}
	g.expect()
	e := make(chan error, 1)
	go func() { e <- g.wait(ctx, false) }()
	<-lingers
	timeout <- time.Now() // syncLinger passed
	syncStarts(5)
	fs.proceed <- struct{}{}
	if err := <-e; err != nil {
		t.Fatal(err)
	}
	g.unexpect()
}

// A failed sync fails every writer that shared it; a writer whose context
// ends stops waiting.
func TestGroupSyncErrors(t *testing.T) {
	fs := &fakeFS{err: errors.New("EIO")}
	g := newGroupSync(fs.flush, fs.release)
	defer g.close()
	if err := g.wait(t.Context(), false); err == nil || !errors.Is(err, fs.err) {
		t.Errorf("wait = %v, want the sync's error", err)
	}

	held := &fakeFS{started: make(chan int, 1), proceed: make(chan struct{})}
	h := newGroupSync(held.flush, held.release)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.wait(ctx, false) }()
	<-held.started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("wait with its context cancelled = %v", err)
	}
	close(held.proceed)
	h.close()
}

// soon starts one sync within lazySync that nobody waits for, however
// often it is called meanwhile; close makes a promised one at once, and
// none starts after close.
func TestGroupSyncSoon(t *testing.T) {
	fs := &fakeFS{}
	g := newGroupSync(fs.flush, fs.release)
	// What is armed says what will run: a timer is the one sync
	// promised, and nothing else starts a sync unasked.
	armed := func() *time.Timer {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.lazy
	}
	g.soon()
	first := armed()
	for range 99 {
		g.soon()
		if armed() != first {
			t.Fatal("soon armed a second sync while one was promised")
		}
	}
	waitUntil(t, "the sync soon promised", func() bool { return fs.syncs.Load() == 1 })
	waitUntil(t, "the sync soon promised to end", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.lazy == nil && !g.running && len(g.waiters) == 0
	})
	if n := fs.syncs.Load(); n != 1 {
		t.Errorf("%d syncs after 100 calls of soon, want 1", n)
	}
	g.soon() // armed again, then closed before it fires: close syncs
	g.close()
	if n := fs.syncs.Load(); n != 2 {
		t.Errorf("%d syncs after close with a sync promised, want 2", n)
	}
	g.soon()
	if armed() != nil {
		t.Error("soon after close promised a sync")
	}
}

// waitUntil fails t unless cond holds within 10s (eventually's polling).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := eventually(10*time.Second, func() error {
		if cond() {
			return nil
		}
		return errors.New("not yet")
	}); err != nil {
		t.Fatalf("%s: not within 10s", what)
	}
}
