package approver_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approver"
)

// TestLocalCarriesPromptsAndAnswers: the in-process channel hands the
// fulfiller's envelope to the approver it is addressed to, from the
// fulfiller whatever it claimed; an approver's answer reaches the
// fulfiller from that approver (a claim to be another is refused); an
// approver without a Link is not reached (ErrNotJoined), nor one that
// closed it, and one id has one Link at a time.
func TestLocalCarriesPromptsAndAnswers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var got []agent.Envelope
	l := approver.NewLocal("fulfiller", func(_ context.Context, env agent.Envelope) error {
		got = append(got, env)
		return nil
	})
	prompt := agent.Envelope{ID: "p-1", From: "mallory", To: []string{"alice"}, Kind: agent.KindRequest, Payload: json.RawMessage(`{"jsonrpc":"2.0","id":7,"method":"elicitation/create"}`)}
	if err := l.Send(ctx, prompt); !errors.Is(err, approver.ErrNotJoined) {
		t.Fatalf("send to nobody: %v, want ErrNotJoined", err)
	}
	alice, err := l.Join("alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Join("alice"); err == nil {
		t.Error("a second Link for alice was made")
	}
	if err := l.Send(ctx, prompt); err != nil {
		t.Fatal(err)
	}
	in := <-alice.In
	if in.ID != "p-1" || in.From != "fulfiller" || string(in.Payload) != string(prompt.Payload) {
		t.Errorf("alice got %+v", in)
	}
	if alice.Conn.ID() != "alice" {
		t.Errorf("alice's Conn is %q", alice.Conn.ID())
	}
	answer := agent.Envelope{To: []string{"fulfiller"}, Kind: agent.KindResponse, CorrelationID: agent.CorrelationIDs{"p-1"}, Payload: json.RawMessage(`{"jsonrpc":"2.0","id":7,"result":{"action":"decline"}}`)}
	if _, err := alice.Conn.Send(ctx, answer); err != nil {
		t.Fatal(err)
	}
	forged := answer
	forged.From = "bob"
	if _, err := alice.Conn.Send(ctx, forged); err == nil {
		t.Error("alice's Link sent an envelope from bob")
	}
	if len(got) != 1 || got[0].From != "alice" || got[0].CorrelationID.First() != "p-1" || got[0].ID == "" {
		t.Errorf("the fulfiller got %+v", got)
	}
	alice.Close()
	if err := l.Send(ctx, prompt); !errors.Is(err, approver.ErrNotJoined) {
		t.Errorf("send after alice closed her Link: %v, want ErrNotJoined", err)
	}
	if _, err := l.Join("alice"); err != nil {
		t.Errorf("alice's Link again: %v", err)
	}
}

// TestLocalOfferNeverWaits: Offer hands an envelope to every approver
// with room in its buffer, from the fulfiller, and skips one whose
// buffer is full instead of waiting (the engine's observers call it).
func TestLocalOfferNeverWaits(t *testing.T) {
	t.Parallel()
	l := approver.NewLocal("fulfiller", nil)
	alice, err := l.Join("alice")
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	bob, err := l.Join("bob")
	if err != nil {
		t.Fatal(err)
	}
	defer bob.Close()
	// Fill bob's buffer.
	for i := 0; cap(bob.In) == 0 || len(bob.In) < cap(bob.In); i++ {
		l.Offer(agent.Envelope{Kind: agent.KindChat, To: []string{"bob"}})
		<-alice.In
		if i > 1000 {
			t.Fatal("bob's buffer never filled")
		}
	}
	l.Offer(agent.Envelope{Kind: agent.KindReject, CorrelationID: agent.CorrelationIDs{"p-1"}})
	got := <-alice.In
	if got.Kind != agent.KindReject || got.From != "fulfiller" || got.CorrelationID.First() != "p-1" {
		t.Errorf("alice got %+v", got)
	}
	if n := len(bob.In); n != cap(bob.In) {
		t.Errorf("bob's full buffer holds %d of %d", n, cap(bob.In))
	}
}
