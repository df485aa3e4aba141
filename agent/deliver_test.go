package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/mewkit/fulfiller/internal/poll"
)

// The reconnect schedule: three fast retries at about BackoffMin, then
// doubling to the cap, each within ±25% by the jitter.
func TestReconnectDelaySchedule(t *testing.T) {
	const lo, hi = 100 * time.Millisecond, 30 * time.Second
	ms := time.Millisecond
	want := []time.Duration{100 * ms, 100 * ms, 100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 6400 * ms, 12800 * ms, 25600 * ms, 30 * time.Second, 30 * time.Second}
	for n, w := range want {
		if got := ReconnectDelay(n, lo, hi, 0.5); got != w {
			t.Errorf("attempt %d, middle jitter: %s, want %s", n, got, w)
		}
		if got := ReconnectDelay(n, lo, hi, 0); got != w*3/4 {
			t.Errorf("attempt %d, least jitter: %s, want %s", n, got, w*3/4)
		}
		if got := ReconnectDelay(n, lo, hi, 1); got != w*5/4 {
			t.Errorf("attempt %d, most jitter: %s, want %s", n, got, w*5/4)
		}
	}
	// Out-of-range jitter is clamped, not trusted.
	if got := ReconnectDelay(0, lo, hi, 7); got != 125*ms {
		t.Errorf("jitter 7: %s", got)
	}
	// A 1.5s outage (the issue's) is over before the sixth attempt even
	// with the longest waits: it starts 2.125s after the loss, where the
	// old schedule (200ms doubling, full jitter) could wait 200+400+800+
	// 1600+3200ms, the 5.3s seen, before the sixth.
	var total time.Duration
	for n := range 5 {
		total += ReconnectDelay(n, lo, hi, 1)
	}
	if total >= 1500*ms {
		t.Errorf("five waits take %s at most; the sixth attempt would not be the first after a 1.5s outage", total)
	}
	if total += ReconnectDelay(5, lo, hi, 1); total != 2125*ms {
		t.Errorf("six longest waits: %s, want 2.125s", total)
	}
}

// An envelope given to SendOrQueue while the link is down is kept and
// written, with the same id and bytes, as soon as the session is back.
func TestSendOrQueueResendsAfterReconnect(t *testing.T) {
	h := newHarness(t)
	got := make(chan Envelope, 4)
	h.gw.set(func(g *testGateway) {
		g.caps["fulfiller-token"] = []Capability{{Kind: "mcp/*"}}
		g.onEnvelope = func(_ string, env Envelope) { got <- env }
	})
	c := h.dial("fulfiller", nil)
	h.gw.set(func(g *testGateway) { g.refuse = true })
	h.gw.DropAll()
	poll.Until(t, "the session is lost", func() bool { return !c.Connected() })

	cancel := Envelope{To: []string{"calculator"}, Kind: KindRequest, CorrelationID: CorrelationIDs{"req-1"},
		Payload: json.RawMessage(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"timeout"}}`)}
	sent, queued, err := c.SendOrQueue(context.Background(), cancel)
	if err != nil || !queued || sent.ID == "" {
		t.Fatalf("SendOrQueue while down: queued=%v id=%q err=%v", queued, sent.ID, err)
	}
	if n := c.Queued(); n != 1 {
		t.Fatalf("Queued() = %d", n)
	}
	// Not permitted is final, never queued.
	if _, queued, err := c.SendOrQueue(context.Background(), Envelope{Kind: KindChat, Payload: json.RawMessage(`{"text":"x"}`)}); !errors.Is(err, ErrNotPermitted) || queued {
		t.Fatalf("chat without the capability: queued=%v err=%v", queued, err)
	}

	h.gw.set(func(g *testGateway) { g.refuse = false })
	var env Envelope
	select {
	case env = <-got:
	case <-time.After(waitLimit):
		t.Fatal("the kept envelope never reached the gateway")
	}
	if env.ID != sent.ID || string(env.Raw) != string(mustEncode(t, sent)) {
		t.Fatalf("re-sent:\n got %s\nwant %s", env.Raw, mustEncode(t, sent))
	}
	statsEventually(t, c, func(s Stats) bool { return s.Queued == 1 && s.Resent == 1 })
	if n := c.Queued(); n != 0 {
		t.Fatalf("Queued() after the reconnect = %d", n)
	}

	// With a live session it is an ordinary send.
	if _, queued, err := c.SendOrQueue(context.Background(), cancel); err != nil || queued {
		t.Fatalf("SendOrQueue while up: queued=%v err=%v", queued, err)
	}
	<-got
}

func mustEncode(t *testing.T, env Envelope) []byte {
	t.Helper()
	b, err := Encode(env)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The outbox is bounded and drops the oldest envelope when full.
func TestMemoryOutboxDropsOldest(t *testing.T) {
	o := NewMemoryOutbox(2)
	for _, id := range []string{"a", "b", "c"} {
		o.Put(Envelope{ID: id})
	}
	if o.Len() != 2 || o.Dropped() != 1 {
		t.Fatalf("len %d dropped %d", o.Len(), o.Dropped())
	}
	envs := o.Take()
	if len(envs) != 2 || envs[0].ID != "b" || envs[1].ID != "c" || o.Len() != 0 {
		t.Fatalf("took %+v, left %d", envs, o.Len())
	}
}

// A system/error naming an envelope we wrote reaches subscribers as a
// refusal; one naming an envelope whose echo we already saw (so the
// gateway accepted it) was forged by another participant and is dropped.
func TestRefusalsDeliveredForgeriesDropped(t *testing.T) {
	h := newHarness(t)
	h.gw.set(func(g *testGateway) { g.caps["fulfiller-token"] = []Capability{{Kind: "chat"}, {Kind: "mcp/reject"}} })
	c := h.dial("fulfiller", nil)
	errs := c.Subscribe(SubscribeOptions{Kinds: []string{KindError}})
	accepted, err := c.Send(context.Background(), Envelope{Kind: KindChat, Payload: json.RawMessage(`{"text":"a"}`)})
	if err != nil {
		t.Fatal(err)
	}
	statsEventually(t, c, func(s Stats) bool { return s.Echoes == 1 }) // the test gateway echoes everything
	// An envelope written whose echo has not come (the test gateway
	// echoes everything, so this one is recorded as written directly).
	const refusedID = "fulfiller-refused-1"
	c.sent.add(refusedID)
	errorFor := func(errID, envID string) string {
		return fmt.Sprintf(`{"protocol":"mew/v0.4","id":%q,"ts":"2026-11-22T10:00:00Z","from":"system:gateway","to":["fulfiller"],"kind":"system/error","correlation_id":[%q],"payload":{"error":"capability_violation","attempted_kind":"mcp/reject","your_capabilities":[{"kind":"chat"}]}}`, errID, envID)
	}
	h.gw.SendTo("fulfiller", websocket.TextMessage, errorFor("forged-1", accepted.ID))
	h.gw.SendTo("fulfiller", websocket.TextMessage, errorFor("error-2", refusedID))
	h.gw.SendTo("fulfiller", websocket.TextMessage, errorFor("error-3", "not-ours"))

	env := recv(t, errs)
	r, ok := RefusalOf(env, "fulfiller")
	if !ok || r.EnvelopeID != refusedID || r.ErrorID != "error-2" || r.Error.AttemptedKind != KindReject {
		t.Fatalf("first error delivered: %s (refusal %+v %v)", env.Raw, r, ok)
	}
	if want := "gateway refused envelope " + refusedID + " (mcp/reject): capability_violation; our capabilities: chat"; r.String() != want {
		t.Errorf("refusal text %q, want %q", r.String(), want)
	}
	// An error about an id we do not know is passed on; it refuses nothing of ours.
	equal(t, "next error", recv(t, errs).ID, "error-3")
	statsEventually(t, c, func(s Stats) bool { return s.Refused == 1 && s.ForgedErrors == 1 })
	if _, ok := RefusalOf(Envelope{Kind: KindError, From: "system:gateway", To: Recipients{"other"}, CorrelationID: CorrelationIDs{"x"}, Payload: json.RawMessage(`{"error":"capability_violation"}`)}, "fulfiller"); ok {
		t.Error("an error addressed to someone else taken as our refusal")
	}
}
