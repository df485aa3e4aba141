package grantstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/grants"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/poll"
)

func offer(t *testing.T, maxTTL string, scope ...string) *decision.Grantable {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"max_ttl": maxTTL, "scope": scope})
	var g decision.Grantable
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return &g
}

func call(proposer, tool, server string, args string) grants.Call {
	var a map[string]json.RawMessage
	if err := json.Unmarshal([]byte(args), &a); err != nil {
		panic(err)
	}
	return grants.Call{Proposer: proposer, Tool: tool, Server: server, Arguments: a}
}

func readFile(path string) grants.Call {
	return call("coder", "read_file", "fs", `{"path":"`+path+`"}`)
}

// newGrant is a grant for anyone's read_file under /srv/app/, as made
// where the gateway does not authenticate senders.
func newGrant(t *testing.T, id string, now time.Time) grants.Grant {
	t.Helper()
	g, err := grants.New(id, offer(t, "8h", "tool", "arguments.path:prefix"), readFile("/srv/app/config.yaml"), time.Hour, "alice", now)
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
	if r.Names("read_file") {
		t.Error("an empty registry names read_file")
	}
	if err := r.Create(t.Context(), newGrant(t, "g-1", now)); err != nil {
		t.Fatal(err)
	}
	if !r.Names("read_file") || r.Names("write_file") {
		t.Errorf("Names: read_file %v, write_file %v; want true, false (the grant is for read_file)", r.Names("read_file"), r.Names("write_file"))
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
	a, b := run(), run()
	now := time.Now()
	if err := a.Create(ctx, newGrant(t, "g-1", now)); err != nil {
		t.Fatal(err)
	}
	if err := a.Create(ctx, newGrant(t, "g-1", now)); !errors.Is(err, state.ErrExists) {
		t.Errorf("a second grant under one id = %v, want ErrExists", err)
	}
	poll.Until(t, "b sees a's grant", func() bool { return len(b.Matching(readFile("/srv/app/x"), now)) == 1 })

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
	poll.Until(t, "a and c see the revocation", func() bool {
		return len(a.Matching(readFile("/srv/app/x"), now)) == 0 && len(c.Matching(readFile("/srv/app/x"), now)) == 0
	})
}

// A grant pinned to a proposer matches only that proposer, and only where
// the operator says the gateway authenticates senders: elsewhere anyone
// can post in coder's name, so the pin would let anyone through while
// saying "coder". Such a grant stays listed, matches nothing, and is
// warned about when the store's grants are loaded (security round 3,
// item 3). A grant without the pin covers anyone's call.
func TestRegistryProposerPins(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st, err := state.Open(ctx, state.Config{Mode: state.Mode{Kind: state.Memory}, Space: "grants-pins", Member: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	pinned, err := grants.New("g-pinned", offer(t, "8h", "proposer", "tool", "arguments.path:prefix"), readFile("/srv/app/config.yaml"), time.Hour, "alice", now)
	if err != nil || pinned.Proposer != "coder" || !pinned.ProposerPinned() {
		t.Fatalf("pinned grant %+v, %v", pinned, err)
	}
	anyone := newGrant(t, "g-anyone", now.Add(time.Second))
	if anyone.Proposer != "" || anyone.ProposerPinned() {
		t.Fatalf("grant without the pin %+v", anyone)
	}
	if want := "anyone who may propose in this space → read_file, path under /srv/app/"; anyone.Terms() != want {
		t.Errorf("Terms = %q, want %q", anyone.Terms(), want)
	}
	if want := "coder → read_file, path under /srv/app/"; pinned.Terms() != want {
		t.Errorf("Terms = %q, want %q", pinned.Terms(), want)
	}
	if b, _ := json.Marshal(anyone); bytes.Contains(b, []byte(`"proposer"`)) {
		t.Errorf("a grant without the pin names a proposer: %s", b)
	}
	seed := NewRegistry(st, nil)
	for _, g := range []grants.Grant{pinned, anyone} {
		if err := seed.Create(ctx, g); err != nil {
			t.Fatal(err)
		}
	}

	start := func(authenticated bool) (*Registry, *bytes.Buffer) {
		var logs bytes.Buffer
		r := NewRegistry(st, slog.New(slog.NewTextHandler(&logs, nil)))
		r.GatewayAuthenticatesFrom(authenticated)
		done := make(chan struct{})
		rctx, stop := context.WithCancel(ctx)
		go func() { defer close(done); _ = r.Run(rctx) }()
		t.Cleanup(func() { stop(); <-done })
		select {
		case <-r.Ready():
		case <-ctx.Done():
			t.Fatal("registry never ready")
		}
		return r, &logs
	}
	ids := func(gs []grants.Grant) []string {
		var out []string
		for _, g := range gs {
			out = append(out, g.ID)
		}
		return out
	}
	claimed := call("other", "read_file", "fs", `{"path":"/srv/app/secret.key"}`)
	coder := readFile("/srv/app/secret.key")

	r, logs := start(false)
	for _, c := range []grants.Call{coder, claimed} {
		if got := ids(r.Matching(c, now)); len(got) != 1 || got[0] != "g-anyone" {
			t.Errorf("unauthenticated: Matching(%s) = %v, want [g-anyone]", c.Proposer, got)
		}
	}
	if r.Usable(pinned, now) || !r.Usable(anyone, now) || len(r.List()) != 2 {
		t.Errorf("unauthenticated: usable pinned %v, anyone %v; listed %d", r.Usable(pinned, now), r.Usable(anyone, now), len(r.List()))
	}
	if got := logs.String(); strings.Count(got, "grant pinned to a proposer matches nothing") != 1 || !strings.Contains(got, "grant=g-pinned proposer=coder") {
		t.Errorf("start-up warnings:\n%s", got)
	}

	r, logs = start(true)
	if got := ids(r.Matching(coder, now)); len(got) != 2 || got[0] != "g-pinned" || got[1] != "g-anyone" {
		t.Errorf("authenticated: Matching(coder) = %v, want [g-pinned g-anyone]", got)
	}
	if got := ids(r.Matching(claimed, now)); len(got) != 1 || got[0] != "g-anyone" {
		t.Errorf("authenticated: Matching(other) = %v, want [g-anyone]", got)
	}
	if strings.Contains(logs.String(), "matches nothing") {
		t.Errorf("warned although proposers are authenticated:\n%s", logs)
	}
}
