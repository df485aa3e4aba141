package teaminbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/inbox/teaminbox"
	"github.com/mewkit/fulfiller/fulfill/grants"
	"github.com/mewkit/fulfiller/fulfill/grants/grantstore"
	"github.com/mewkit/fulfiller/internal/ops"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/spacetest"
)

// grantPolicy escalates production writes to alice with a grant on
// offer (up to 8h, pinned to the tool and the path's directory), and
// lets through, without asking, a write a live grant covers.
const grantPolicy = `package fulfiller

default decision := {"action": "reject", "reason": "policy", "message": "not allowed"}

decision := {"action": "escalate", "approvers": ["alice"], "message": "production writes need a human",
	"grantable": {"max_ttl": "8h", "scope": ["proposer", "tool", "arguments.path:prefix"]}} if {
	prod_write
	count(input.grants) == 0
}

decision := {"action": "fulfill"} if {
	prod_write
	count(input.grants) > 0
}

prod_write if {
	input.tool.name == "write_file"
	startswith(input.tool.arguments.path, "/srv/prod/")
}
`

// grantTerms is what a grant on /srv/prod/motd allows, in words: the
// gateway is not said to authenticate senders, so not only coder.
const grantTerms = "anyone who may propose in this space → write_file, path under /srv/prod/"

// begin asks the inbox, from ctx's signed-in page, to begin answering
// the card of proposal with body (JSON, without "request"): the HTTP
// status and the error the server gave.
func (w *world) begin(t *testing.T, ctx context.Context, proposal, body string) (int, string) {
	t.Helper()
	rid, _ := json.Marshal(w.requestOf(t, proposal))
	got := get(t, ctx, "begin an answer "+body, chromedp.Evaluate[string](`(async () => {
		const body = Object.assign(`+body+`, {request: `+string(rid)+`});
		const r = await fetch("/api/answer/begin", {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
		const j = await r.json();
		return r.status + " " + (j.error || "");
	})()`, chromedp.EvalAsValue, chromedp.EvalAwaitPromise))
	code, msg, _ := strings.Cut(got, " ")
	n, _ := strconv.Atoi(code)
	return n, msg
}

// answersOf are the approver's answers to the prompt of proposal.
func (w *world) answersOf(t *testing.T, approverID, proposal string) []agent.Envelope {
	t.Helper()
	rid := w.requestOf(t, proposal)
	var out []agent.Envelope
	for _, env := range w.wire.Envelopes() {
		if env.From == approverID && env.Kind == agent.KindResponse && env.CorrelationID.First() == rid {
			out = append(out, env)
		}
	}
	return out
}

// asked reports whether the fulfiller asked anyone about proposal.
func (w *world) asked(proposal string) bool {
	for _, env := range w.wire.Envelopes() {
		if env.From == "fulfiller" && strings.Contains(string(env.Payload), `"elicitation/create"`) && strings.Contains(string(env.Payload), `"id":"`+proposal+`"`) {
			return true
		}
	}
	return false
}

// TestTeamInboxApproveAndAllow (issue 42): on a card whose decision is
// grantable, alice's page shows what a grant would allow; asking for a
// duration the card does not offer, or a grant with anything but an
// approval of the call as shown, is refused with a 400 before any passkey
// signs; "Approve and allow…" (here by its key, l) shows the terms and the
// durations, and the one she picks is signed by her passkey with the
// approval. The fulfiller takes it: the call is fulfilled, the grant is
// listed by the operator API (`fulfiller grants list`) with her signed
// answer as its evidence, and the same call again runs without asking.
func TestTeamInboxApproveAndAllow(t *testing.T) {
	t.Parallel() // a space, an inbox and browser contexts of its own
	w := newWorld(t)
	w.grants = grantstore.NewRegistry(nil, nil)
	opsSrv := httptest.NewServer(ops.NewHandler(ops.Options{Token: "ops-secret", Grants: w.grants}))
	t.Cleanup(opsSrv.Close)
	list := &ops.Client{Base: opsSrv.URL, Token: "ops-secret"}
	alice := browserTab(t)
	w.enrol(t, alice, "alice")
	p := w.startFulfillerWith(grantPolicy)

	p.propose("p-motd", "/srv/prod/motd")
	do(t, alice, "the card", chromedp.WaitVisible(card("p-motd", "open")+`//button[normalize-space()="Approve and allow…"]`))
	text := get(t, alice, "the card's text", chromedp.Text(card("p-motd", "open")))
	for _, want := range []string{
		"Grantable\nYou may also allow " + grantTerms + ", for up to 8h",
		"Tool\nwrite_file — Write a file, replacing it if it exists",
		"Annotations\ndestructiveHint: false, readOnlyHint: false",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the card does not show %q:\n%s", want, text)
		}
	}

	// Default deny: what the card did not offer is refused, with a reason.
	for _, c := range []struct{ body, want string }{
		{`{action: "accept", approve: true, grant: "2h"}`, `that grant was not offered on this card: "2h" is not one of its durations (15m, 1h, 8h)`},
		{`{action: "accept", approve: true, grant: "1h", edits: {path: "/srv/prod/other"}}`, "a grant comes with an approval of the call as shown, not with edits"},
		{`{action: "accept", approve: false, reason: "no", grant: "1h"}`, "edits and grants come only with an approval"},
		{`{action: "decline", grant: "1h"}`, "a decline carries no approval, reason, edits, delegate or grant"},
		{`{action: "accept", approve: true, grant_for: "1h"}`, `the answer is not readable: json: unknown field "grant_for"`},
	} {
		if code, msg := w.begin(t, alice, "p-motd", c.body); code != 400 || msg != c.want {
			t.Errorf("begin %s: %d %q, want 400 %q", c.body, code, msg, c.want)
		}
	}
	if sent := w.answersOf(t, "alice", "p-motd"); len(sent) != 0 {
		t.Fatalf("a refused answer was sent: %s", sent[0].Payload)
	}
	if gs, err := list.Grants(w.ctx); err != nil || len(gs) != 0 {
		t.Fatalf("grants before the answer: %+v %v", gs, err)
	}

	// The keyboard: the first open card is selected, l opens its form.
	do(t, alice, "press l", chromedp.KeyEvent("l"),
		chromedp.WaitVisible(card("p-motd", "open")+`//select[@name="grant"]`))
	form := get(t, alice, "the grant form", chromedp.Text(card("p-motd", "open")+`//div[@class="panel"]`))
	for _, want := range []string{"Approve this call, and allow " + grantTerms + " without asking, for:",
		"The grant ends then; the operator can revoke it sooner (fulfiller grants revoke)."} {
		if !strings.Contains(form, want) {
			t.Errorf("the grant form does not show %q:\n%s", want, form)
		}
	}
	options := get(t, alice, "the durations", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('article[data-proposal="p-motd"] select[name="grant"] option')].map((o) => o.value + "=" + o.textContent)`, chromedp.EvalAsValue))
	if want := []string{"15m=15m", "1h=1h", "8h=8h"}; !slices.Equal(options, want) {
		t.Errorf("durations %q, want %q", options, want)
	}
	// The page refreshes every second: the form and the choice stay.
	do(t, alice, "choose 1h", chromedp.SetValue(card("p-motd", "open")+`//select[@name="grant"]`, "1h"), chromedp.Sleep(1500*time.Millisecond))
	if v := get(t, alice, "the chosen duration", chromedp.Evaluate[string](`document.querySelector('article[data-proposal="p-motd"] select[name="grant"]').value`, chromedp.EvalAsValue)); v != "1h" {
		t.Fatalf("after a refresh the form says %q, want 1h", v)
	}
	do(t, alice, "approve and allow", chromedp.Click(card("p-motd", "open")+`//button[normalize-space()="Approve and allow"]`))
	poll.Until(t, "the fulfilment", func() bool { return w.fulfilments("p-motd") == 1 })
	do(t, alice, "the card answered", chromedp.WaitVisible(card("p-motd", "sent")))
	if got := get(t, alice, "the status line", chromedp.Text(`//p[@id="status"]`)); got != "Sent: approved, and calls like it for 1h" {
		t.Errorf("status %q", got)
	}
	if f := w.forgeries(); len(f) != 0 {
		t.Fatalf("forgeries: %+v", f)
	}

	// What went out: the approval, the grant, alice's passkey over both.
	sent := w.answersOf(t, "alice", "p-motd")
	if len(sent) != 1 {
		t.Fatalf("%d answers of alice's", len(sent))
	}
	action, content := spacetest.ElicitResult(t, sent[0])
	if action != "accept" || !strings.HasPrefix(string(content), `{"approve":true,"grant":"1h","signature":"`) {
		t.Fatalf("answer %s %s", action, content)
	}
	keys, err := approval.LoadApproverKeys(filepath.Join(w.dir, teaminbox.PasskeysFile))
	if err != nil {
		t.Fatal(err)
	}
	digest, _ := approval.CallDigest("tools/call", json.RawMessage(`{"name":"write_file","arguments":{"path":"/srv/prod/motd","content":"hi"}}`))
	rid := w.requestOf(t, "p-motd")
	if err := approval.VerifyPasskey(keys.Passkeys["alice"], rid, digest, action, content); err != nil {
		t.Errorf("alice's passkey does not cover the grant: %v", err)
	}

	// The grant, as `fulfiller grants list` gets it.
	var gs []ops.GrantView
	poll.Until(t, "the grant", func() bool { gs, err = list.Grants(w.ctx); return err == nil && len(gs) == 1 })
	g := gs[0]
	wantPins := []grants.Pin{{Field: "arguments.path", Prefix: "/srv/prod/"}}
	if g.Tool != "write_file" || g.GrantedBy != "alice" || g.Proposer != "" || !g.Live || g.Revoked ||
		g.Expires.Sub(g.Created) != time.Hour || !slices.EqualFunc(g.Pins, wantPins, samePin) || g.Terms() != grantTerms {
		t.Errorf("grant %+v, want alice's, write_file under /srv/prod/ for 1h, live", g)
	}
	var signed struct{ Signature string }
	_ = json.Unmarshal(content, &signed)
	var evContent bytes.Buffer
	if g.Evidence != nil {
		_ = json.Compact(&evContent, g.Evidence.Content)
	}
	if ev := g.Evidence; ev == nil || ev.Request != rid || ev.Digest != digest || ev.Action != "accept" || evContent.String() != `{"approve":true,"grant":"1h"}` ||
		ev.Signature == "" || ev.Signature != signed.Signature {
		t.Errorf("the grant's evidence %+v is not alice's signed answer %s", ev, content)
	}

	// The same call again runs without asking anyone.
	p.propose("p-motd-again", "/srv/prod/motd")
	poll.Until(t, "the granted call", func() bool { return w.fulfilments("p-motd-again") == 1 })
	if w.asked("p-motd-again") {
		t.Error("the granted call was asked about")
	}
}

func samePin(a, b grants.Pin) bool {
	return a.Field == b.Field && a.Prefix == b.Prefix && string(a.Value) == string(b.Value)
}

// TestTeamInboxRefusesWhatTheCardDoesNotOffer: on a card with neither
// a grant, editable arguments nor anyone to hand it to, a grant, an edit,
// a delegation or an unknown action is refused with a 400 that says why,
// and nothing is sent. The page offers none of them; Decline with a
// reason goes out signed, and so does Dismiss.
func TestTeamInboxRefusesWhatTheCardDoesNotOffer(t *testing.T) {
	t.Parallel() // a space, an inbox and browser contexts of its own
	w := newWorld(t)
	alice := browserTab(t)
	w.enrol(t, alice, "alice")
	p := w.startFulfiller()
	p.propose("p-plain", "/srv/prod/motd")
	do(t, alice, "the card", chromedp.WaitVisible(card("p-plain", "open")+`//button[normalize-space()="Approve"]`))
	buttons := get(t, alice, "the card's buttons", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('article[data-proposal="p-plain"] .actions button')].map((b) => b.textContent)`, chromedp.EvalAsValue))
	if want := []string{"Approve", "Decline", "Dismiss"}; !slices.Equal(buttons, want) {
		t.Errorf("buttons %q, want %q", buttons, want)
	}
	for _, c := range []struct{ body, want string }{
		{`{action: "accept", approve: true, grant: "1h"}`, "that grant was not offered on this card: this card offers no grant"},
		{`{action: "accept", approve: true, edits: {path: "/srv/prod/authorized_keys"}}`, `"path" is not an editable argument`},
		{`{action: "accept", delegate_to: "bob"}`, `"bob" is not an approver this card may be handed to`},
		{`{action: "approve"}`, `unknown action "approve": want accept, decline or cancel`},
	} {
		if code, msg := w.begin(t, alice, "p-plain", c.body); code != 400 || msg != c.want {
			t.Errorf("begin %s: %d %q, want 400 %q", c.body, code, msg, c.want)
		}
	}
	// A refusal comes before any passkey signs: nothing can have gone.
	if sent := w.answersOf(t, "alice", "p-plain"); len(sent) != 0 {
		t.Fatalf("a refused answer was sent: %s", sent[0].Payload)
	}
	if w.fulfilments("p-plain") != 0 {
		t.Fatal("a refused answer was fulfilled")
	}
	// What the card offers still works: Decline, with a reason for the
	// proposer, signed by her passkey.
	at := card("p-plain", "open")
	do(t, alice, "decline", chromedp.Click(at+`//button[normalize-space()="Decline"]`),
		chromedp.SendKeys(at+`//textarea[@name="reason"]`, "not during the freeze"),
		chromedp.Click(at+`//button[normalize-space()="Send"]`),
		chromedp.WaitVisible(card("p-plain", "sent")))
	sent := w.wire.WaitFor(t, "alice's refusal", func(env agent.Envelope) bool {
		return env.From == "alice" && env.Kind == agent.KindResponse && env.CorrelationID.First() == w.requestOf(t, "p-plain")
	})
	if action, content := spacetest.ElicitResult(t, sent); action != "accept" || !strings.HasPrefix(string(content), `{"approve":false,"reason":"not during the freeze","signature":"`) {
		t.Errorf("alice's answer %s %s", action, content)
	}
	// And Dismiss, by its key (c) on the card the keys select: a cancel,
	// signed over no content.
	p.propose("p-dismiss", "/srv/prod/banner")
	do(t, alice, "the next card", chromedp.WaitVisible(card("p-dismiss", "open")+`//button[normalize-space()="Dismiss"]`),
		chromedp.WaitVisible(card("p-dismiss", "open")+`[contains(@class,"selected")]`),
		chromedp.KeyEvent("c"), chromedp.WaitVisible(card("p-dismiss", "sent")))
	sent = w.wire.WaitFor(t, "alice's dismissal", func(env agent.Envelope) bool {
		return env.From == "alice" && env.Kind == agent.KindResponse && env.CorrelationID.First() == w.requestOf(t, "p-dismiss")
	})
	if action, content := spacetest.ElicitResult(t, sent); action != "cancel" || !strings.HasPrefix(string(content), `{"signature":"`) {
		t.Errorf("alice's dismissal %s %s", action, content)
	}
	if f := w.forgeries(); len(f) != 0 {
		t.Fatalf("forgeries: %+v", f)
	}
}

// TestTeamInboxEditArguments: where the decision allows edits, alice
// changes the content on her phone, reviews the change, and approves the
// edited call with her passkey; the fulfiller verifies it and runs the
// call as edited.
func TestTeamInboxEditArguments(t *testing.T) {
	t.Parallel() // a space, an inbox and browser contexts of its own
	w := newWorld(t)
	alice := browserTab(t)
	w.enrol(t, alice, "alice")
	p := w.startFulfillerWith(strings.Replace(policy, `"message": "production writes need a human"`,
		`"message": "production writes need a human", "editable": ["content"]`, 1))
	p.propose("p-edit", "/srv/prod/motd")
	at := card("p-edit", "open")
	do(t, alice, "edit", chromedp.Click(at+`//button[normalize-space()="Edit"]`),
		chromedp.WaitVisible(at+`//input[@name="content"]`))
	if v := get(t, alice, "the proposed content", chromedp.Value(at+`//input[@name="content"]`)); v != "hi" {
		t.Fatalf("the form proposes %q, want hi", v)
	}
	do(t, alice, "change it", chromedp.SetValue(at+`//input[@name="content"]`, "maintenance at 18:00"),
		chromedp.Click(at+`//button[normalize-space()="Review changes"]`),
		chromedp.WaitVisible(at+`//ul[@aria-label="changes"]`))
	if diff := get(t, alice, "the review", chromedp.Text(at+`//ul[@aria-label="changes"]`)); diff != `content: "hi" → "maintenance at 18:00"` {
		t.Errorf("review %q", diff)
	}
	do(t, alice, "approve the edited call", chromedp.Click(at+`//button[normalize-space()="Approve edited call"]`))
	poll.Until(t, "the fulfilment", func() bool { return w.fulfilments("p-edit") == 1 })
	for _, env := range w.wire.Envelopes() {
		if env.From == "fulfiller" && env.To[0] == "fs" && env.CorrelationID.First() == "p-edit" && strings.Contains(string(env.Payload), `"tools/call"`) &&
			!strings.Contains(string(env.Payload), `"content":"maintenance at 18:00"`) {
			t.Errorf("the call ran as proposed, not as edited: %s", env.Payload)
		}
	}
	action, content := spacetest.ElicitResult(t, w.answersOf(t, "alice", "p-edit")[0])
	if action != "accept" || !strings.HasPrefix(string(content), `{"approve":true,"content":"maintenance at 18:00","signature":"`) {
		t.Errorf("answer %s %s", action, content)
	}
	if f := w.forgeries(); len(f) != 0 {
		t.Fatalf("forgeries: %+v", f)
	}
}

// TestTeamInboxContestedCard: a second prompt under an open card's ids
// with other content marks the card contested, as a warning; it offers
// no answer any more, and an answer begun from a page that has not
// caught up is refused: nothing reaches the fulfiller.
func TestTeamInboxContestedCard(t *testing.T) {
	t.Parallel() // a space, an inbox and browser contexts of its own
	w := newWorld(t)
	alice := browserTab(t)
	w.enrol(t, alice, "alice")
	p := w.startFulfiller()
	p.propose("p-contested", "/srv/prod/motd")
	do(t, alice, "the card", chromedp.WaitVisible(card("p-contested", "open")+`//button[normalize-space()="Approve"]`))
	real := w.wire.WaitFor(t, "the prompt", func(env agent.Envelope) bool {
		return env.ID == w.requestOf(t, "p-contested")
	})
	spacetest.Forge(t, w.srv, spacetest.ForgedPrompt(t, real, "p-contested"))
	do(t, alice, "the contested card", chromedp.WaitVisible(card("p-contested", "ended")))
	got := get(t, alice, "its status", chromedp.Text(card("p-contested", "ended")+`//p[contains(@class,"card-status")]`))
	if want := "⚠ contested: someone else sent a different prompt under this id, so this card may not show what the fulfiller asks; it cannot be answered here (nothing was sent). Ask the operator."; got != want {
		t.Errorf("the contested card says %q, want %q", got, want)
	}
	if n := get(t, alice, "its buttons", chromedp.Evaluate[int](`document.querySelectorAll('article[data-proposal="p-contested"] .actions button').length`, chromedp.EvalAsValue)); n != 0 {
		t.Errorf("the contested card offers %d answers", n)
	}
	if code, _ := w.begin(t, alice, "p-contested", `{action: "accept", approve: true}`); code != 403 {
		t.Errorf("approving the contested card: %d, want 403", code)
	}
	if sent := w.answersOf(t, "alice", "p-contested"); len(sent) != 0 {
		t.Fatalf("alice answered the contested prompt: %s", sent[0].Payload)
	}
}

// TestTeamInboxDelegate: where another approver may decide instead,
// alice hands the prompt to bob from her page, her passkey signing the
// delegation; the fulfiller takes it (no forgery), and bob's approval,
// signed with his passkey, has the call run once.
func TestTeamInboxDelegate(t *testing.T) {
	t.Parallel() // a space, an inbox and browser contexts of its own
	w := newWorld(t)
	alice := browserTab(t)
	w.enrol(t, alice, "alice")
	bob := browserTab(t)
	w.enrol(t, bob, "bob")
	p := w.startFulfillerWith(strings.Replace(policy, `"approvers": ["alice"]`, `"approvers": ["alice", "bob"]`, 1))
	p.propose("p-hand", "/srv/prod/motd")
	at := card("p-hand", "open")
	do(t, alice, "delegate", chromedp.Click(at+`//button[normalize-space()="Delegate"]`),
		chromedp.WaitVisible(at+`//select[@name="delegate_to"]`))
	if to := get(t, alice, "whom to", chromedp.Text(at+`//select[@name="delegate_to"]`)); strings.TrimSpace(to) != "bob" {
		t.Fatalf("delegates %q, want bob", to)
	}
	do(t, alice, "hand over", chromedp.Click(at+`//button[normalize-space()="Hand over"]`),
		chromedp.WaitVisible(card("p-hand", "sent")))
	sent := w.wire.WaitFor(t, "alice's delegation", func(env agent.Envelope) bool {
		return env.From == "alice" && env.Kind == agent.KindResponse && env.CorrelationID.First() == w.requestOf(t, "p-hand")
	})
	if action, content := spacetest.ElicitResult(t, sent); action != "accept" || !strings.HasPrefix(string(content), `{"approve":false,"delegate_to":"bob","signature":"`) {
		t.Errorf("alice's answer %s %s", action, content)
	}
	do(t, bob, "bob approves", chromedp.Click(card("p-hand", "open")+`//button[normalize-space()="Approve"]`))
	poll.Until(t, "the fulfilment", func() bool { return w.fulfilments("p-hand") == 1 })
	if f := w.forgeries(); len(f) != 0 {
		t.Fatalf("forgeries: %+v", f)
	}
}
