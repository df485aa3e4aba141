package state

import (
	"context"
	"errors"
	"fmt"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/natstest"
	"github.com/mewkit/fulfiller/internal/poll"
)

// waitFor reads ch until it yields want, or fails the test after a generous
// timeout (the lease is 2s; a busy machine may take several).
func waitFor(t *testing.T, ch <-chan string, want string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case got, ok := <-ch:
			if !ok {
				t.Fatalf("lapse channel closed before %q", want)
			}
			if got == want {
				return
			}
		case <-timeout:
			t.Fatalf("%q not reported lapsed within 30s", want)
		}
	}
}

// TestLapsedMemberIsAdoptedExactlyOnce: A holds an open prompt, a
// fulfilment in flight, a queued proposal and an undelivered answer, then
// stops renewing without a goodbye (a crash). B and C both see A lapse and
// race to adopt: every record ends with exactly one of them.
func TestLapsedMemberIsAdoptedExactlyOnce(t *testing.T) {
	t.Parallel() // a space of its own on the shared cluster
	space := uniqueSpace(t)
	lease := func(c *Config) { c.Lease = 2 * time.Second; c.MaxPending = 10 }
	a := clusterStore(t, space, "A", lease)
	b := clusterStore(t, space, "B", lease)
	c := clusterStore(t, space, "C", lease)
	ctx := ctxT(t)

	aCtx, crashA := context.WithCancel(ctx)
	for _, s := range []*Store{a, b, c} {
		lctx := ctx
		if s == a {
			lctx = aCtx
		}
		if err := s.StartLease(lctx); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := b.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.ID)
		if m.MaxPending != 10 || time.Duration(m.Lease) != 2*time.Second {
			t.Errorf("member %+v: want max_pending 10, lease 2s", m)
		}
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"A", "B", "C"}) {
		t.Fatalf("Members = %v, want A B C", ids)
	}

	prompt := samplePending("open-prompt", "A")
	inflight := samplePending("in-flight", "A")
	inflight.Phase = Fulfilling
	inflight.Request = &Request{EnvelopeID: "req-1", RPCID: 5, Target: "tools", SentAt: time.Now().UTC()}
	queued := samplePending("queued", "A")
	queued.Phase = Queued
	bs := samplePending("b-own", "B")
	for _, p := range []*lifecycle.Proposal{prompt, inflight, queued, bs} {
		if err := a.Put(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Enqueue(ctx, "answered", []byte(`{"kind":"mcp/reject"}`)); err != nil {
		t.Fatal(err)
	}

	if _, err := b.Adopt(ctx, "A"); !errors.Is(err, ErrMemberAlive) {
		t.Fatalf("Adopt from a live member = %v, want ErrMemberAlive", err)
	}

	// Only the lease's expiry event can report A in time: no sweep runs.
	b.sweepEvery, c.sweepEvery = time.Hour, time.Hour
	bLapsed, err := b.WatchLapsed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cLapsed, err := c.WatchLapsed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	crashA()
	waitFor(t, bLapsed, "A")
	waitFor(t, cLapsed, "A")

	var mu sync.Mutex
	owner := map[string][]string{}
	var wg sync.WaitGroup
	for _, s := range []*Store{b, c} {
		wg.Go(func() {
			won, err := s.Adopt(ctx, "A")
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, p := range won {
				owner[p.ID] = append(owner[p.ID], s.Member())
				if p.Owner != s.Member() {
					t.Errorf("adopted %s has owner %s", p.ID, p.Owner)
				}
			}
		})
	}
	wg.Wait()
	for _, id := range []string{"open-prompt", "in-flight", "queued"} {
		if len(owner[id]) != 1 {
			t.Errorf("%s adopted by %v, want exactly one member", id, owner[id])
		}
		p, err := b.Get(ctx, id)
		if err != nil || len(owner[id]) == 1 && p.Owner != owner[id][0] {
			t.Errorf("stored %s: %+v, %v", id, p, err)
		}
	}
	if _, ok := owner["b-own"]; ok {
		t.Error("B's own record was adopted")
	}
	got, _ := b.Get(ctx, "in-flight")
	if got.Request == nil || got.Request.EnvelopeID != "req-1" {
		t.Errorf("adopted in-flight record lost its request: %+v", got.Request)
	}
	bo, _ := b.Outbox(ctx)
	co, _ := c.Outbox(ctx)
	if len(bo)+len(co) != 1 {
		t.Errorf("outbox after adoption: B %d, C %d; want exactly one answer", len(bo), len(co))
	}

	// A zombie A (its process resumed after the lapse) is fenced: its
	// writes to adopted records conflict.
	inflight.Phase = Queued
	if err := a.Update(ctx, inflight); !errors.Is(err, ErrConflict) {
		t.Errorf("zombie Update = %v, want ErrConflict", err)
	}

	// Graceful leave is reported too.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, bLapsed, "C")
}

// TestWatchLapsedReportsOrphansAtStart: work of a member that vanished
// while nobody watched (its lease long gone) is reported when a watcher
// starts.
func TestWatchLapsedReportsOrphansAtStart(t *testing.T) {
	t.Parallel() // a space of its own on the shared cluster
	space := uniqueSpace(t)
	b := clusterStore(t, space, "B")
	ctx := ctxT(t)
	if err := b.Put(ctx, samplePending("orphan", "gone")); err != nil {
		t.Fatal(err)
	}
	ch, err := b.WatchLapsed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ch, "gone")
	won, err := b.Adopt(ctx, "gone")
	if err != nil || len(won) != 1 || won[0].ID != "orphan" {
		t.Fatalf("Adopt = %+v, %v", won, err)
	}
}

func TestNextRPCIDUniqueAcrossMembers(t *testing.T) {
	t.Parallel() // a space of its own on the shared cluster
	space := uniqueSpace(t)
	const bits = 8
	const perMember = 1<<bits + 100 // crosses a block boundary
	var mu sync.Mutex
	seen := map[int64]string{}
	var wg sync.WaitGroup
	for i := range 3 {
		s := clusterStore(t, space, fmt.Sprintf("m%d", i), func(c *Config) { c.rpcBlockBits = bits })
		wg.Go(func() {
			ctx := ctxT(t)
			for range perMember {
				id, err := s.NextRPCID(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if prev, dup := seen[id]; dup {
					t.Errorf("id %d given to %s and %s", id, prev, s.Member())
				}
				seen[id] = s.Member()
				mu.Unlock()
				if id <= 0 || id >= 1<<53 {
					t.Errorf("id %d out of range", id)
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != 3*perMember {
		t.Fatalf("%d distinct ids, want %d", len(seen), 3*perMember)
	}
}

// TestClusterNodeLoss: with one of three servers down the store keeps
// working; with two down it fails clearly (Ping errors, writes fail); when
// they return it works again without reopening, and nothing acknowledged
// was lost.
func TestClusterNodeLoss(t *testing.T) {
	// A cluster of its own: it is taken down and brought back, and a
	// cluster that recovers badly must not take the other tests with it.
	// Mostly waiting for elections, so it runs beside the other tests.
	t.Parallel()
	cl, err := natstest.StartCluster(3, "node-loss", natstest.Options{Log: os.Getenv("STATE_TEST_NATS_LOG") != ""})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Shutdown)
	m, err := ParseMode(cl.URLs())
	if err != nil {
		t.Fatal(err)
	}
	// Six replicated buckets on a synced cluster: while -race tests of
	// other packages hold both cores, their raft groups have taken more
	// than openStore's two minutes to form (a CI run saw it), though the
	// test takes 14 s on an idle machine.
	openCtx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, err := Open(openCtx, Config{Mode: m, Space: uniqueSpace(t), Member: "m", Replicas: 3})
	if err != nil {
		t.Fatalf("Open(%s): %v", m, err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := ctxT(t)
	if err := s.Put(ctx, samplePending("before", "m")); err != nil {
		t.Fatal(err)
	}
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 3*time.Second) }
	// op claims and records a proposal; stored names the last one that
	// made it. Each attempt uses a new id: an attempt whose claim was
	// written but whose reply was lost leaves that id claimed, and a retry
	// of the same id would rightly lose it.
	stored := map[string]string{}
	attempt := 0
	op := func(name string) error {
		c, cancel := short()
		defer cancel()
		if err := s.Ping(c); err != nil {
			return err
		}
		attempt++
		id := fmt.Sprintf("%s-%d", name, attempt)
		if won, err := s.Claim(c, id); err != nil || !won {
			return fmt.Errorf("claim %s: %v %v", id, won, err)
		}
		if err := s.Put(c, samplePending(id, "m")); err != nil {
			return err
		}
		stored[name] = id
		return nil
	}

	cl.Stop(0)
	if err := eventually(45*time.Second, func() error { return op("one-down") }); err != nil {
		t.Fatalf("store with one of three servers down: %v", err)
	}

	cl.Stop(1)
	if err := eventually(45*time.Second, func() error {
		c, cancel := short()
		defer cancel()
		if s.Ping(c) == nil {
			return errors.New("Ping still succeeds")
		}
		return nil
	}); err != nil {
		t.Fatalf("two of three down: %v", err)
	}
	c, cancel := short()
	err = s.Put(c, samplePending("two-down", "m"))
	cancel()
	if err == nil {
		t.Fatal("Put with two of three servers down succeeded")
	}
	if !strings.Contains(err.Error(), "state: put") {
		t.Errorf("Put error does not say what failed: %v", err)
	}

	// Back in the reverse order, as an operator bringing a cluster back
	// would: the server that left last has the newest metadata.
	for _, i := range []int{1, 0} {
		if err := cl.Start(i); err != nil {
			t.Fatal(err)
		}
		if err := cl.WaitCurrent(i, 45*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := eventually(20*time.Second, func() error { return op("recovered") }); err != nil {
		// nats-server#8519: a replicated stream whose leader survived a
		// majority loss can stay wedged after the others return, until the
		// server holding the leadership restarts. The runbook in
		// docs/operations.md says so; here the test follows it, and the
		// store must then recover on its own connection.
		t.Logf("store still refusing writes after the servers returned (%v); restarting the survivor as the runbook says", err)
		cl.Stop(2)
		if err := cl.Start(2); err != nil {
			t.Fatal(err)
		}
		if err := cl.WaitCurrent(2, 45*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := eventually(30*time.Second, func() error { return op("recovered") }); err != nil {
			// The runbook's last step: restart every server in turn.
			t.Logf("store still refusing writes (%v); restarting every server in turn", err)
			for i := range 3 {
				cl.Stop(i)
				if err := cl.Start(i); err != nil {
					t.Fatal(err)
				}
				if err := cl.WaitCurrent(i, 45*time.Second); err != nil {
					t.Fatal(err)
				}
			}
			if err := eventually(60*time.Second, func() error { return op("recovered") }); err != nil {
				t.Fatalf("store after every server restarted: %v", err)
			}
		}
	}
	stored["before"] = "before"
	// A write has just succeeded, but a cluster coming back may still move
	// a stream's leadership, and a read meanwhile is refused with 503 (seen
	// in CI). What the operator relies on is that every record written
	// before, during and after the loss is there once the cluster settles.
	for _, name := range []string{"before", "one-down", "recovered"} {
		id := stored[name]
		if err := eventually(30*time.Second, func() error {
			c, cancel := short()
			defer cancel()
			_, err := s.Get(c, id)
			return err
		}); err != nil {
			t.Errorf("Get(%s) after recovery: %v", id, err)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := ctxT(t)
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"short lease", Config{Mode: Mode{Kind: Memory}, Member: "m", Lease: 100 * time.Millisecond}, "lease"},
		{"no member", Config{Mode: Mode{Kind: Memory}}, "member id"},
		{"no mode", Config{Member: "m"}, "no mode"},
		{"unreachable", Config{Mode: Mode{Kind: External, URLs: []string{"nats://127.0.0.1:1"}}, Member: "m"}, "connect to nats://127.0.0.1:1"},
		{"missing creds", Config{Mode: Mode{Kind: External, URLs: []string{testCluster.URLs()}}, Member: "m", Creds: "/nonexistent/x.creds"}, "creds file"},
		{"dir is a file", Config{Mode: Mode{Kind: Dir, Dir: "/dev/null"}, Member: "m"}, "not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(ctx, tc.cfg)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestClosedStoreFailsClosed(t *testing.T) {
	s := openStore(t, Config{Mode: Mode{Kind: Memory}, Member: "m"})
	s.Close()
	ctx := ctxT(t)
	if err := s.Ping(ctx); err == nil {
		t.Error("Ping on a closed store succeeded")
	}
	if won, err := s.Claim(ctx, "p"); err == nil || won {
		t.Errorf("Claim on a closed store = %v, %v", won, err)
	}
}

// A member's pending work travels with its lease: a peer reads it from
// Members (one record per member), as the group's "busy" check does.
func TestLeaseCarriesPendingCount(t *testing.T) {
	t.Parallel() // a space of its own on the shared cluster
	space := uniqueSpace(t)
	lease := func(c *Config) { c.Lease = time.Second; c.MaxPending = 10 }
	a := clusterStore(t, space, "A", lease)
	b := clusterStore(t, space, "B", lease)
	ctx := ctxT(t)
	a.SetPending(7)
	if err := a.StartLease(ctx); err != nil {
		t.Fatal(err)
	}
	pendingOfA := func() int {
		ms, err := b.Members(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.ID == "A" {
				return m.Pending
			}
		}
		return -1
	}
	if got := pendingOfA(); got != 7 {
		t.Fatalf("A's lease says %d pending, want 7 (set before the lease was taken)", got)
	}
	a.SetPending(3) // published at the next renewal, a third of the lease later
	poll.Until(t, "A's renewed lease to say 3 pending", func() bool { return pendingOfA() == 3 })
}
