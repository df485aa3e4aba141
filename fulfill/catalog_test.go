package fulfill

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
)

func hasTool(f *Fulfiller, server, name string) bool {
	for _, t := range f.Tools() {
		if t.Server == server && t.Name == name {
			return true
		}
	}
	return false
}

func TestDiscoveryFollowsPresenceAndListChanged(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, &fakeDecider{})

	// A tool owner says its list changed: it is asked again.
	h.space.mu.Lock()
	h.space.tools["calculator"] = append(h.space.tools["calculator"], ToolInfo{Name: "multiply"})
	h.space.mu.Unlock()
	h.deliver(agent.Envelope{ID: "n1", From: "calculator", Kind: agent.KindRequest,
		Payload: json.RawMessage(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)})
	waitFor(t, func() bool { return hasTool(h.f, "calculator", "multiply") })

	// A participant that joins is asked for its tools.
	h.space.mu.Lock()
	h.space.roster["fs"] = agent.Participant{ID: "fs", Capabilities: []agent.Capability{{Kind: "mcp/response"}}}
	h.space.tools["fs"] = []ToolInfo{{Name: "read_file"}}
	h.space.mu.Unlock()
	h.deliver(agent.Envelope{ID: "pj", From: agent.GatewayID, Kind: agent.KindPresence,
		Payload: json.RawMessage(`{"event":"join","participant":{"id":"fs","capabilities":[{"kind":"mcp/response"}]}}`)})
	waitFor(t, func() bool { return hasTool(h.f, "fs", "read_file") })

	// One that leaves is forgotten at once.
	h.deliver(agent.Envelope{ID: "pl", From: agent.GatewayID, Kind: agent.KindPresence,
		Payload: json.RawMessage(`{"event":"leave","participant":{"id":"fs"}}`)})
	waitFor(t, func() bool { return !hasTool(h.f, "fs", "read_file") })
	if !hasTool(h.f, "calculator", "add") {
		t.Error("a leave dropped another participant's tools")
	}
}

// After a reconnect, tools/list requests of the lost session will never be
// answered: they must not hold the discovery slots the new session needs.
func TestCatalogResetStopsDiscoveriesOfTheLostSession(t *testing.T) {
	t.Parallel()
	space := newFakeSpace()
	space.silent = map[string]bool{"coder": true}
	c := newCatalog(space, slog.New(slog.DiscardHandler), time.Hour, time.Millisecond, 1)
	defer c.wait()
	c.refresh(context.Background(), "coder") // holds the only slot until reset
	c.reset()
	c.refresh(context.Background(), "calculator")
	waitFor(t, func() bool { return len(c.owners("add")) == 1 })
}

// A participant built on the reference SDK stays silent on a request it
// does not handle: its discovery ends at the request's timeout and leaves
// nothing behind — the slot is free for the next discovery, and nothing
// is left in flight or believed about the silent participant.
func TestCatalogSilentPeerCostsNothingLasting(t *testing.T) {
	t.Parallel()
	space := newFakeSpace()
	space.silent = map[string]bool{"coder": true}
	c := newCatalog(space, slog.New(slog.DiscardHandler), 20*time.Millisecond, time.Millisecond, 1)
	defer c.wait()
	c.refresh(context.Background(), "coder") // holds the only slot until it times out
	c.refresh(context.Background(), "calculator")
	waitFor(t, func() bool { return len(c.owners("add")) == 1 })
	waitFor(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.inflight == 0
	})
	c.mu.Lock()
	_, known := c.byServer["coder"]
	c.mu.Unlock()
	if known {
		t.Error("tools believed for a participant that never answered")
	}
}

// A lookup for a tool stops waiting once a discovery shows its owner,
// not when every discovery has settled: after a reconnect each participant
// is asked again, and one that never answers tools/list (an SDK client)
// held lookups for the whole --discovery-wait, which a loaded machine
// could spend before the tool server's answer was believed (an elicit
// fault test saw "no participant in the space offers tool" so).
func TestCatalogLookupDoesNotWaitForSilentPeers(t *testing.T) {
	t.Parallel()
	c := silentCoderCatalog(t, 2)
	c.refresh(context.Background(), "coder") // in flight for an hour
	c.refresh(context.Background(), "calculator")
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	got := make(chan []ToolInfo, 1)
	go func() { got <- c.lookup(ctx, "add") }()
	select {
	case owners := <-got:
		if len(owners) != 1 || owners[0].Server != "calculator" {
			t.Fatalf("lookup(add) = %+v, want calculator's", owners)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("lookup still waiting for the silent participant's discovery")
	}
	c.mu.Lock()
	inflight := c.inflight
	c.mu.Unlock()
	if inflight != 1 {
		t.Errorf("%d discoveries in flight, want the silent one", inflight)
	}
}

// A participant asked for its tools again (a join after the welcome
// that listed it, a list change) has one discovery under way, not two:
// the older one's answer would be dropped anyway. Humans never answer
// tools/list, and after a reconnect each was asked at the welcome and
// again at its join: their discoveries held every slot for the request's
// timeout while the tool server's waited its turn, and a proposal made
// meanwhile was rejected "incapable" (an elicit fault test under load).
// One that leaves has none.
func TestCatalogAskedAgainReplacesTheDiscoveryUnderWay(t *testing.T) {
	t.Parallel()
	c := silentCoderCatalog(t, 2)
	c.refresh(context.Background(), "coder")
	c.refresh(context.Background(), "coder") // the first gives its slot up
	c.refresh(context.Background(), "calculator")
	waitFor(t, func() bool { return len(c.owners("add")) == 1 })
	inflight := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.inflight
	}
	waitFor(t, func() bool { return inflight() == 1 }) // coder's newest, for an hour
	c.drop("coder")
	waitFor(t, func() bool { return inflight() == 0 })
}

// silentCoderCatalog is a catalog of concurrency slots whose tools/list
// requests time out after an hour, in a space where coder never answers
// one. When the test ends it is reset (which ends the silent
// discoveries) and waited for.
func silentCoderCatalog(t *testing.T, slots int) *catalog {
	space := newFakeSpace()
	space.silent = map[string]bool{"coder": true}
	c := newCatalog(space, slog.New(slog.DiscardHandler), time.Hour, time.Millisecond, slots)
	t.Cleanup(func() {
		c.reset()
		c.wait()
	})
	return c
}

// A tool that says nothing of tasks must not be called as one, and
// reading that costs nothing: the policy step asks it of every call.
func TestTaskSupportAbsentIsForbiddenWithoutDecoding(t *testing.T) {
	for _, tc := range []struct {
		exec string
		want string
	}{{"", TaskForbidden}, {`{"taskSupport":"required"}`, TaskRequired}, {`{"taskSupport":"optional"}`, TaskOptional},
		{`{"taskSupport":"sometimes"}`, TaskForbidden}, {`{`, TaskForbidden}} {
		if got := (ToolInfo{Execution: json.RawMessage(tc.exec)}).TaskSupport(); got != tc.want {
			t.Errorf("execution %q: task support %q, want %q", tc.exec, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = ToolInfo{}.TaskSupport() }); n != 0 {
		t.Errorf("a tool without execution: %v allocations to read its task support, want 0", n)
	}
}
