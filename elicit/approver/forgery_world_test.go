package approver_test

import (
	"bytes"
	"crypto/ed25519"
	"strings"
	"testing"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/spacetest"
)

// approverReordered runs alice's approver.Client as approver does, but
// when forgedFirst is set her client sees the forgery before the real
// prompt, as a client coming back from a lost link may: the first prompt
// from the gateway is held until another (not the same prompt sent
// again) arrives under its envelope id, and then handed over after it.
// Both are frames the gateway delivered.
func (w *world) approverReordered(ui approver.UI, opts approver.Options, forgedFirst bool) {
	c := w.join("alice", "human-token")
	sub := c.Subscribe(approver.SubscribeOptions())
	in := make(chan agent.Envelope)
	client := approver.New(c, ui, opts)
	w.wg.Add(2)
	go func() {
		defer w.wg.Done()
		defer sub.Close()
		_ = client.Run(w.ctx, in)
	}()
	go func() {
		defer w.wg.Done()
		var held *agent.Envelope
		pass := func(e agent.Envelope) bool {
			select {
			case in <- e:
				return true
			case <-w.ctx.Done():
				return false
			}
		}
		for {
			var env agent.Envelope
			select {
			case env = <-sub.C():
			case <-w.ctx.Done():
				return
			}
			prompt := env.Kind == agent.KindRequest && strings.Contains(string(env.Payload), `"elicitation/create"`)
			switch {
			case forgedFirst && prompt && held == nil:
				held = &env
				forgedFirst = false
				continue
			case held != nil && prompt && env.ID == held.ID && bytes.Equal(env.Payload, held.Payload):
				// The real prompt again (the fulfiller heard alice join
				// only after it asked her): still held for the forgery.
				continue
			case held != nil && prompt && env.ID == held.ID:
				if !pass(env) || !pass(*held) {
					return
				}
				held = nil
				continue
			}
			if !pass(env) {
				return
			}
		}
	}()
}

// The attack of security round 3, row 2, with no keys: whichever of the
// real prompt and the forgery alice's client sees first, the card is
// contested and takes no answer, nothing is sent, and the proposal still
// waits for a human (the operator settles it).
func TestWorldForgedPromptContested(t *testing.T) {
	t.Parallel()
	for _, forgedFirst := range []bool{false, true} {
		name := "forgery after the real prompt"
		if forgedFirst {
			name = "forgery before the real prompt"
		}
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, `{"approvers":["alice"],"message":"production writes need a human"}`, nil)
			ui := newHoldUI()
			w.approverReordered(ui, approver.Options{}, forgedFirst)
			id := w.propose("p-write")
			real := w.find("the real prompt", func(e agent.Envelope) bool {
				return e.From == "fulfiller" && strings.Contains(string(e.Payload), `"elicitation/create"`)
			})
			if !forgedFirst {
				ui.card(t)
			}
			spacetest.Forge(t, w.srv, spacetest.ForgedPrompt(t, real, "p-write"))
			if forgedFirst {
				ui.card(t)
			}
			ev := ui.event(t, approver.EventEnded)
			if ev.Card.RequestID != real.ID || ev.End.Cause != approver.CauseContested {
				t.Fatalf("ended %s (%s), want %s contested", ev.Card.RequestID, ev.End.Cause, real.ID)
			}
			want := "/srv/prod/motd"
			if forgedFirst {
				want = "/tmp/notes.txt"
			}
			if got := argumentsPath(ev.Card); got != want {
				t.Errorf("contested card shows %s, want %s (what alice saw)", got, want)
			}
			// The fulfiller asks again when alice's link comes back: still
			// contested, never a card.
			// (Count from the drop: the prompt may have gone out twice
			// already, when the fulfiller heard alice join only after it
			// asked her.)
			asked := func() int {
				n := 0
				for _, e := range w.wire.Envelopes() {
					if e.From == "fulfiller" && e.ID == real.ID && bytes.Equal(e.Payload, real.Payload) {
						n++
					}
				}
				return n
			}
			before := asked()
			w.srv.Drop("alice")
			poll.Until(t, "the prompt asked again", func() bool { return asked() > before })
			w.propose("p-later-marker") // a later prompt: alice's client has handled the re-ask before it
			later := ui.card(t)
			if later.Proposal == nil || later.Proposal.ID != "p-later-marker" {
				t.Fatalf("shown %s, want the p-later-marker card", later.RequestID)
			}
			for _, e := range w.wire.Envelopes() {
				if e.From == "alice" && e.Kind == agent.KindResponse && e.CorrelationID.First() == real.ID {
					t.Errorf("alice answered the contested prompt: %s", e.Raw)
				}
			}
			if s, ok := w.ful.Get(id); !ok || s.State != "awaiting_approval" {
				t.Errorf("proposal %+v %v, want still awaiting approval", s, ok)
			}
		})
	}
}

// The same attack with approver keys and signed prompts (--approver-keys,
// --prompt-key, and --fulfiller-keys on alice's client): the forgery is
// never shown, whichever comes first; the real card is, alice's signed
// approval counts, and the real call runs once (the red team's 2/2:
// the forged card had taken the real one's place, and alice's signed
// answer was logged as a forgery).
func TestWorldForgedPromptWithSignedPrompts(t *testing.T) {
	t.Parallel()
	for _, forgedFirst := range []bool{false, true} {
		name := "forgery after the real prompt"
		if forgedFirst {
			name = "forgery before the real prompt"
		}
		t.Run(name, func(t *testing.T) {
			alicePub, aliceKey, _ := ed25519.GenerateKey(nil)
			promptPub, promptKey, _ := ed25519.GenerateKey(nil)
			w := newWorldConfig(t, `{"approvers":["alice"],"message":"production writes need a human"}`,
				elicit.Config{Keys: approval.Keys{"alice": alicePub}, PromptKey: promptKey})
			ui := newHoldUI()
			w.approverReordered(ui, approver.Options{Key: aliceKey, FulfillerKeys: approval.Keys{"fulfiller": promptPub}}, forgedFirst)
			id := w.propose("p-write")
			real := w.find("the real prompt", func(e agent.Envelope) bool {
				return e.From == "fulfiller" && strings.Contains(string(e.Payload), `"elicitation/create"`)
			})
			var c *approver.Card
			if !forgedFirst {
				c = ui.card(t)
			}
			spacetest.Forge(t, w.srv, spacetest.ForgedPrompt(t, real, "p-write"))
			refused := ui.event(t, approver.EventRefused)
			if refused.Request != real.ID {
				t.Errorf("refused %s, want the forgery under %s", refused.Request, real.ID)
			}
			if forgedFirst {
				c = ui.card(t)
			}
			if got := argumentsPath(c); got != "/srv/prod/motd" || c.RequestID != real.ID {
				t.Fatalf("shown %s %s, want the real card", c.RequestID, got)
			}
			ui.release <- approve
			if out := w.outcome(id); !out.Fulfilled {
				t.Fatalf("outcome %+v, want fulfilled", out)
			}
			ans := w.find("alice's answer", func(e agent.Envelope) bool {
				return e.From == "alice" && e.Kind == agent.KindResponse && e.CorrelationID.First() == real.ID
			})
			action, content := spacetest.ElicitResult(t, ans)
			if err := approval.Verify(alicePub, real.ID, c.Proposal.Digest, action, content); err != nil {
				t.Errorf("alice's answer does not verify: %v", err)
			}
			w.fulfilledOnWire(id)
			if got := ui.askedIDs(); len(got) != 1 {
				t.Errorf("alice was shown %v, want the real card only", got)
			}
			for _, ev := range ui.snapshot() {
				if ev.Kind == approver.EventEnded {
					t.Errorf("card ended (%s)", ev.End.Cause)
				}
			}
		})
	}
}

// A proposal may carry keys that differ from the real ones only in case.
// No key repeats, so the proposal is valid; the policy and the tool owner
// read "name" and "arguments", and the card must show what they read, not
// the "Arguments" decoy beside them: encoding/json took the last key that
// matched whatever its case, so the card showed notes.txt while motd was
// written.
func TestWorldCardShowsTheArgumentsThatRun(t *testing.T) {
	t.Parallel()
	w := newWorld(t, `{"approvers":["alice"],"message":"production writes need a human"}`, nil)
	ui := newHoldUI()
	w.approver("alice", ui, approver.Options{})
	id := w.proposeCall("p-decoy", `{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/prod/motd","content":"pwned"},`+
		`"Arguments":{"path":"/srv/prod/notes.txt","content":"hi"},"Name":"read_file"}}`)
	c := ui.card(t)
	if got := argumentsPath(c); got != "/srv/prod/motd" {
		t.Fatalf("the card shows %s, want /srv/prod/motd (what runs)", got)
	}
	if c.Tool == nil || c.Tool.Name != "write_file" {
		t.Errorf("the card shows tool %+v, want write_file", c.Tool)
	}
	ui.release <- approve
	if out := w.outcome(id); !out.Fulfilled {
		t.Fatalf("outcome %+v", out)
	}
	if got, _ := w.files.Read("/srv/prod/motd"); got != "pwned" {
		t.Errorf("motd holds %q: the tool ran another call than the card showed", got)
	}
	if _, ok := w.files.Read("/srv/prod/notes.txt"); ok {
		t.Error("notes.txt was written")
	}
}
