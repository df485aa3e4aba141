package mcpserve_test

import (
	"testing"

	"github.com/mewkit/fulfiller/internal/passkeytest"
	"github.com/mewkit/fulfiller/internal/poll"
)

// TestInboxCardLearnsTheOutcome: once alice's approval has sent the
// call upstream, her card in the team inbox says so (fulfilled, naming
// the upstream), as a card does in a space; a card she declined shows
// her answer and no outcome.
func TestInboxCardLearnsTheOutcome(t *testing.T) {
	t.Parallel()
	r := start(t, []string{"alice"}, nil)
	poll.Until(t, "alice connected", func() bool { return r.srv.Approvers().Connected("alice") })
	s := passkeytest.SignIn(t, r.inbox, "alice", r.keys["alice"])

	held := r.call("users")
	req := s.OpenCard()
	if code, msg := s.Answer(req, map[string]any{"action": "accept", "approve": true}); code != 200 {
		t.Fatalf("alice's approval: %d %s", code, msg)
	}
	if res := <-held; res.IsError || text(res) != "dropped users" {
		t.Fatalf("after alice's approval: isError %v %q", res.IsError, text(res))
	}
	card := func(req string) passkeytest.Card {
		for _, c := range s.Cards() {
			if c.Request == req {
				return c
			}
		}
		return passkeytest.Card{}
	}
	poll.Until(t, "the approved card's outcome", func() bool { return card(req).Outcome != "" })
	if c := card(req); c.State != "sent" || c.Outcome != "fulfilled: the call was sent to tables" {
		t.Errorf("the approved card: %+v", c)
	}

	held = r.call("orders")
	declined := s.OpenCard()
	if code, msg := s.Answer(declined, map[string]any{"action": "decline"}); code != 200 {
		t.Fatalf("alice's decline: %d %s", code, msg)
	}
	if res := <-held; !res.IsError {
		t.Fatalf("after alice's decline: %q", text(res))
	}
	// The reject's outcome reaches the inbox as the approval's did; a
	// declined card has none to show.
	held = r.call("again")
	after := s.OpenCard()
	if code, msg := s.Answer(after, map[string]any{"action": "accept", "approve": true}); code != 200 {
		t.Fatalf("alice's approval: %d %s", code, msg)
	}
	<-held
	poll.Until(t, "the third card's outcome", func() bool { return card(after).Outcome != "" })
	if c := card(declined); c.State != "sent" || c.Status != "you declined" || c.Outcome != "" {
		t.Errorf("the declined card: %+v, want sent (you declined) with no outcome", c)
	}
}
