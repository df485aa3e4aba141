package grants

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/state"
)

func readFile(path string) Call {
	return call("coder", "read_file", "fs", `{"path":"`+path+`"}`)
}

func newGrant(t *testing.T, id string, now time.Time) Grant {
	t.Helper()
	g, err := New(id, offer(t, "8h", "proposer", "tool", "arguments.path:prefix"), readFile("/srv/app/config.yaml"), time.Hour, "alice", now)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// Without a store: created grants match at once, a revoked one at once
// no longer does, and List keeps it for the record.
func TestRegistryInMemory(t *testing.T) {
	r := NewRegistry(nil, nil)
	select {
	case <-r.Ready():
	default:
		t.Fatal("a registry without a store is not ready")
	}
	now := time.Now()
	if err := r.Create(t.Context(), newGrant(t, "g-1", now)); err != nil {
		t.Fatal(err)
	}
	if m := r.Matching(readFile("/srv/app/x"), now); len(m) != 1 || m[0].ID != "g-1" {
		t.Fatalf("Matching = %+v", m)
	}
	if m := r.Matching(readFile("/srv/other/x"), now); len(m) != 0 {
		t.Fatalf("Matching outside the prefix = %+v", m)
	}
	if _, err := r.Revoke(t.Context(), "nope"); !errors.Is(err, ErrUnknown) {
		t.Errorf("Revoke(unknown) = %v", err)
	}
	if g, err := r.Revoke(t.Context(), "g-1"); err != nil || !g.Revoked {
		t.Fatalf("Revoke = %+v, %v", g, err)
	}
	if m := r.Matching(readFile("/srv/app/x"), now); len(m) != 0 {
		t.Fatalf("a revoked grant matches: %+v", m)
	}
	if l := r.List(); len(l) != 1 || !l[0].Revoked {
		t.Fatalf("List = %+v", l)
	}
}

// Over a store: two registries (two members of a group) share grants; a
// grant created or revoked by one reaches the other; a registry started
// later loads them; an unreadable record allows nothing.
func TestRegistryOverAStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	st, err := state.Open(ctx, state.Config{Mode: state.Mode{Kind: state.Memory}, Space: "grants-test", Member: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	run := func() *Registry {
		r := NewRegistry(st, nil)
		done := make(chan struct{})
		rctx, stop := context.WithCancel(ctx)
		go func() { defer close(done); _ = r.Run(rctx) }()
		t.Cleanup(func() { stop(); <-done })
		select {
		case <-r.Ready():
		case <-ctx.Done():
			t.Fatal("registry never ready")
		}
		return r
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("%s: not within the test's time", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	a, b := run(), run()
	now := time.Now()
	if err := a.Create(ctx, newGrant(t, "g-1", now)); err != nil {
		t.Fatal(err)
	}
	if err := a.Create(ctx, newGrant(t, "g-1", now)); !errors.Is(err, state.ErrExists) {
		t.Errorf("a second grant under one id = %v, want ErrExists", err)
	}
	waitFor("b sees a's grant", func() bool { return len(b.Matching(readFile("/srv/app/x"), now)) == 1 })

	// Forged or corrupt: a record whose document does not read as a grant
	// (or names another id) allows nothing.
	for id, doc := range map[string]string{"bad-1": `"not a grant"`, "bad-2": `{"id":"other","proposer":"coder","tool":"read_file","expires":"2999-01-01T00:00:00Z"}`} {
		if err := st.PutGrant(ctx, &state.Grant{ID: id, Expires: now.Add(time.Hour), Doc: []byte(doc)}); err != nil {
			t.Fatal(err)
		}
	}
	c := run() // a member started later loads what is stored
	if m := c.Matching(readFile("/srv/app/x"), now); len(m) != 1 || m[0].ID != "g-1" {
		t.Fatalf("a new registry matches %+v, want g-1 alone", m)
	}

	if _, err := b.Revoke(ctx, "g-1"); err != nil {
		t.Fatal(err)
	}
	if m := b.Matching(readFile("/srv/app/x"), now); len(m) != 0 {
		t.Fatalf("the revoking member still matches %+v", m)
	}
	waitFor("a and c see the revocation", func() bool {
		return len(a.Matching(readFile("/srv/app/x"), now)) == 0 && len(c.Matching(readFile("/srv/app/x"), now)) == 0
	})
}
