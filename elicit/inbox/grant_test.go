package inbox_test

import (
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/internal/browsertest"
	"github.com/mewkit/fulfiller/internal/spacetest"
)

const grantable = `{"approvers":["alice"],"message":"production writes need a human","grantable":{"max_ttl":"8h","scope":["proposer","tool","arguments.path:prefix"]}}`

// A grantable prompt says on its card what a grant would allow and who
// can use it — the gateway is not said to authenticate senders, so not
// only coder: "anyone who may propose in this space" (docs/design.md
// "Proposer identity and grants"); "Approve and allow…" shows the terms
// and the durations, and the chosen one
// travels signed with the approval. The next write under the same
// directory is fulfilled without a prompt.
func TestBrowserApproveWithGrant(t *testing.T) {
	t.Parallel() // a space, a fulfiller, an inbox and tabs of its own
	pub, priv, _ := ed25519.GenerateKey(nil)
	w := newWorld(t, worldOptions{escalation: grantable, keys: approval.Keys{"alice": pub}, key: priv, grants: true})
	ctx := tab(t, 1280, 900)
	w.open(t, ctx)
	id := w.propose("p-motd", "/srv/prod/motd")
	prompt := w.elicitation("alice", id, nil)
	browsertest.Do(t, ctx, "the prompt", chromedp.WaitVisible(card(id, "open")))
	text := browsertest.Get(t, ctx, "the card's text", chromedp.Text(card(id, "open")))
	if want := "You may also allow anyone who may propose in this space → write_file, path under /srv/prod/, for up to 8h"; !strings.Contains(text, want) {
		t.Errorf("the card does not show the grant's terms (%q):\n%s", want, text)
	}
	browsertest.Do(t, ctx, "open the grant form", chromedp.Click(button(id, "open", "Approve and allow…")))
	form := browsertest.Get(t, ctx, "the grant form", chromedp.Text(card(id, "open")+`//div[contains(@class,"panel")]`))
	for _, want := range []string{"Approve this call, and allow anyone who may propose in this space → write_file, path under /srv/prod/ without asking, for:",
		"The grant ends then; the operator can revoke it sooner (fulfiller grants revoke)."} {
		if !strings.Contains(form, want) {
			t.Errorf("the grant form does not show %q:\n%s", want, form)
		}
	}
	// In words, never in the policy's syntax (a newcomer read
	// "arguments.path:prefix" here).
	if strings.Contains(form, "arguments.") || strings.Contains(form, ":prefix") {
		t.Errorf("the grant form shows the policy's syntax:\n%s", form)
	}
	options := browsertest.Get(t, ctx, "the durations", chromedp.Text(card(id, "open")+`//select[@name="grant"]`))
	if want := "15m1h8h"; strings.Join(strings.Fields(options), "") != want {
		t.Errorf("durations %q, want %q", options, want)
	}
	browsertest.Do(t, ctx, "choose 1h and approve",
		chromedp.SetValue(card(id, "open")+`//select[@name="grant"]`, "1h"),
		chromedp.Click(button(id, "open", "Approve and allow")))
	if got := status(t, ctx, id, "outcome"); !strings.Contains(got, "You approved, and calls like it for 1h. Outcome: fulfilled") {
		t.Errorf("after the grant the card says %q", got)
	}
	ans := w.find("alice's signed answer", func(e agent.Envelope) bool {
		return e.From == "alice" && e.Kind == agent.KindResponse && strings.Contains(string(e.Payload), "signature")
	})
	action, content := spacetest.ElicitResult(t, ans)
	if !strings.HasPrefix(string(content), `{"approve":true,"grant":"1h","signature":"`) {
		t.Errorf("answer content %s", content)
	}
	digest, _ := approval.CallDigest("tools/call", json.RawMessage(`{"name":"write_file","arguments":{"path":"/srv/prod/motd","content":"hi"}}`))
	if err := approval.Verify(pub, prompt.ID, digest, action, content); err != nil {
		t.Errorf("the grant is not covered by the signature: %v", err)
	}

	next := w.propose("p-banner", "/srv/prod/banner")
	if out := w.outcome(next); !out.Fulfilled {
		t.Fatalf("granted call: %+v, want fulfilled", out)
	}
	for _, e := range w.wire.Envelopes() {
		if strings.Contains(string(e.Payload), `"elicitation/create"`) && strings.Contains(string(e.Payload), `"id":"p-banner"`) {
			t.Errorf("the granted call was asked about: %s", e.Payload)
		}
	}
}
