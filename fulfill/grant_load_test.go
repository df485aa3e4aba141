package fulfill

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/grants"
	"github.com/mewkit/fulfiller/fulfill/grants/grantstore"
	"github.com/mewkit/fulfiller/fulfill/state"
)

// slowGrants is a grant store whose stored grants arrive when the test
// says: a store read slowly after a restart.
type slowGrants struct{ changes chan state.GrantChange }

// runSlowGrants runs a grant registry over a slowGrants, whose grants
// are loaded when the test says (load).
func runSlowGrants(t *testing.T) (*slowGrants, *grantstore.Registry) {
	store := &slowGrants{changes: make(chan state.GrantChange, 2)}
	reg := grantstore.NewRegistry(store, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- reg.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return store, reg
}

// load hands the registry alice's grant of "add" on calculator, made
// at, and says the grants are loaded.
func (s *slowGrants) load(t *testing.T, at time.Time) {
	t.Helper()
	g, err := grants.New("g-1", &decision.Grantable{MaxTTL: time.Hour, Scope: []decision.GrantField{{Path: "tool"}}},
		grants.Call{Tool: "add", Server: "calculator"}, time.Hour, "alice", at)
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := json.Marshal(g)
	s.changes <- state.GrantChange{Grant: &state.Grant{ID: g.ID, Expires: g.Expires, Doc: doc}}
	s.changes <- state.GrantChange{Current: true}
}

func (s *slowGrants) PutGrant(context.Context, *state.Grant) error { return nil }
func (s *slowGrants) RevokeGrant(context.Context, string) (*state.Grant, error) {
	return nil, grantstore.ErrUnknown
}

// WatchGrants forwards what the test sends until ctx ends, then closes
// the watch, as the store's does.
func (s *slowGrants) WatchGrants(ctx context.Context) (<-chan state.GrantChange, error) {
	out := make(chan state.GrantChange)
	go func() {
		defer close(out)
		for {
			select {
			case c := <-s.changes:
				select {
				case out <- c:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// A proposal read before the stored grants are loaded waits for them:
// the policy sees the grant that covers it, instead of deciding as if
// there were none (and a human being asked again).
func TestDecisionWaitsForTheStoredGrants(t *testing.T) {
	t.Parallel()
	store, reg := runSlowGrants(t)

	dec := &fakeDecider{decisions: fulfilAdd}
	h := newHarness(t, Config{Grants: reg}, dec)
	h.deliver(proposalEnv("p1", "coder", addCall))
	h.space.quiet(t, 50*time.Millisecond) // not decided before the grants are in
	if n := dec.count(); n != 0 {
		t.Fatalf("decided %d times before the grants were loaded", n)
	}

	store.load(t, time.Now())
	h.space.next(t) // the tools/call
	// The first evaluation is the decision (a second one, without the
	// grants, tells which grant let it through).
	dec.mu.Lock()
	in := dec.inputs[0]
	dec.mu.Unlock()
	if len(in.Grants) != 1 || !strings.Contains(string(in.Grants[0]), `"id":"g-1"`) {
		t.Fatalf("input.grants = %s, want the stored grant g-1", in.Grants)
	}
}
