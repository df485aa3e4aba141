package agent_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/spacetest"
)

// The reference gateway gives a participant id to the last socket that
// joined with it and leaves the first open and deaf: pings are still
// answered, broadcasts never come (the recordings' duplicate-session
// scene). Seen with the real gateway: another program joined as
// fulfiller, and the idle fulfiller heard nothing for 14 minutes. An idle
// client probes itself; with no echo it joins again and takes its id
// back, and hears the space again.
func TestProbeNoticesASessionTakenOver(t *testing.T) {
	srv := probeSpace(t)
	ctx := context.Background()
	cfg := agent.Config{ID: "fulfiller", Token: "fulfiller-token", ProbeAfter: 50 * time.Millisecond, PongTimeout: 200 * time.Millisecond}
	spacetest.Resilient(&cfg)
	fc := spacetest.JoinWith(t, ctx, srv, cfg)
	chats := fc.Subscribe(agent.SubscribeOptions{Kinds: []string{agent.KindChat}, All: true})
	observer := spacetest.Join(t, ctx, srv, "observer", "chat-token")

	// An intruder joins with our id (it neither probes nor reconnects).
	intruder := spacetest.JoinWith(t, ctx, srv, agent.Config{ID: "fulfiller", Token: "fulfiller-token", ProbeAfter: -1})
	_ = intruder
	poll.Until(t, "the fulfiller to join again", func() bool { return fc.Stats().Reconnects >= 1 && fc.Connected() })

	// It hears the space again.
	for {
		if _, err := observer.Send(ctx, agent.Envelope{Kind: agent.KindChat, Payload: json.RawMessage(`{"text":"anyone?"}`)}); err != nil {
			t.Fatal(err)
		}
		select {
		case env := <-chats.C():
			if env.From == "observer" {
				return
			}
		case <-time.After(500 * time.Millisecond):
			// The probe may still be out; the next chat will be heard.
		}
		if t.Failed() {
			return
		}
	}
}

// A session that hears the space is never probed: nothing extra goes on
// the wire while envelopes arrive.
func TestNoProbeWhileTheSpaceTalks(t *testing.T) {
	srv := probeSpace(t)
	ctx := context.Background()
	wire := spacetest.RecordWire(t, srv)
	cfg := agent.Config{ID: "fulfiller", Token: "fulfiller-token", ProbeAfter: 300 * time.Millisecond, PingInterval: 20 * time.Millisecond}
	fc := spacetest.JoinWith(t, ctx, srv, cfg)
	observer := spacetest.Join(t, ctx, srv, "observer", "chat-token")
	for range 20 {
		if _, err := observer.Send(ctx, agent.Envelope{Kind: agent.KindChat, Payload: json.RawMessage(`{"text":"busy"}`)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // a space that talks more often than ProbeAfter
	}
	for _, env := range wire.Envelopes() {
		if env.From == "fulfiller" {
			t.Errorf("sent while the space talked: %s", env.Raw)
		}
	}
	if st := fc.Stats(); st.Reconnects != 0 {
		t.Errorf("stats %+v", st)
	}
}

// probeSpace is a space where fulfiller-token may send mcp/* (so the
// client may probe) and chat-token only chat.
func probeSpace(t *testing.T) *space.Server {
	t.Helper()
	srv, err := space.New(space.Config{Tokens: map[string][]agent.Capability{
		"fulfiller-token": {{Kind: "mcp/*"}, {Kind: "chat"}},
		"chat-token":      {{Kind: "chat"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}
