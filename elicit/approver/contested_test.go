package approver_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/spacetest"
)

// The red team's attack (security round 3, row 2): the real prompt asks
// alice about coder writing /etc/sudoers; an intruder sends an
// elicitation/create marked from "fulfiller" under the same envelope id
// and JSON-RPC id, showing a write of /tmp/notes.txt with that call's own
// (matching) digest. These are the envelopes, as the fulfiller writes the
// real one (docs/protocol.md "Escalation by MCP elicitation").
const (
	attackRequestID = "fulfiller-elicit-5f3a9c"
	attackRPCID     = "7"
)

// attackPrompt is the elicitation under attackRequestID and attackRPCID
// about coder's write_file of path; with key, signed by signer as
// --prompt-key signs it.
func attackPrompt(t *testing.T, path string, key ed25519.PrivateKey, signer string) agent.Envelope {
	t.Helper()
	call := `{"name":"write_file","arguments":{"path":"` + path + `","content":"x"}}`
	digest, err := approval.CallDigest("tools/call", json.RawMessage(call))
	if err != nil {
		t.Fatal(err)
	}
	params := `{"message":"coder wants to call write_file on fs with {\"path\":\"` + path + `\",\"content\":\"x\"}: writes outside /srv need a human. Call digest ` + digest[:12] + `.",` +
		`"requestedSchema":{"type":"object","properties":{"approve":{"type":"boolean","title":"Approve?"},"reason":{"type":"string","title":"Reason"}},"required":["approve"]},` +
		`"_meta":{"proposal":{"id":"p-notes","from":"coder","method":"tools/call","params":` + call + `,"digest":"` + digest + `","deadline":"2999-01-01T00:00:00Z"},` +
		`"tool":{"name":"write_file","server":"fs"},"target":"fs","policy":{"message":"writes outside /srv need a human","approvers":["alice"],"quorum":1}}}`
	if key != nil {
		sig, err := approval.SignPrompt(key, attackRequestID, json.RawMessage(attackRPCID), "alice", digest, json.RawMessage(params))
		if err != nil {
			t.Fatal(err)
		}
		params = strings.Replace(params, `"_meta":{`, `"_meta":{"fulfiller/signature":{"signer":"`+signer+`","signature":"`+sig+`"},`, 1)
	}
	return agent.Envelope{Protocol: "mew/v0.4", ID: attackRequestID, From: "fulfiller", To: []string{"alice"}, Kind: agent.KindRequest,
		Payload: json.RawMessage(`{"jsonrpc":"2.0","id":` + attackRPCID + `,"method":"elicitation/create","params":` + params + `}`)}
}

// runHeld runs a Client for alice with a UI that holds each card until the
// test answers it, and opts; it returns what the Client sent, the UI and
// the channel to hand it envelopes.
func runHeld(t *testing.T, opts approver.Options) (*recordingConn, *holdUI, chan<- agent.Envelope) {
	t.Helper()
	conn := &recordingConn{}
	ui := newHoldUI()
	c := approver.New(conn, ui, opts)
	in := make(chan agent.Envelope)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx, in) }()
	t.Cleanup(func() { cancel(); <-done })
	return conn, ui, in
}

// argumentsPath is the path a card shows as the call's argument.
func argumentsPath(c *approver.Card) string {
	var a struct {
		Path string `json:"path"`
	}
	_ = json.Unmarshal(c.Arguments(), &a)
	return a.Path
}

// contested waits for the card with attackRequestID to end contested.
func contested(t *testing.T, ui *holdUI) approver.Event {
	t.Helper()
	ev := ui.event(t, approver.EventEnded)
	if ev.Card.RequestID != attackRequestID || ev.End.Cause != approver.CauseContested {
		t.Fatalf("ended %s (%s), want %s contested", ev.Card.RequestID, ev.End.Cause, attackRequestID)
	}
	if got := ev.End.String(); got != approver.ContestedText || !strings.Contains(got, "someone else sent a different prompt under this id") || !strings.Contains(got, "Ask the operator") {
		t.Errorf("contested card says %q", got)
	}
	return ev
}

// noAnswer checks that alice's client never answers and shows nothing
// more: it waits until a last envelope was handled (a prompt about
// another call, shown as a card of its own) and looks then.
func noAnswer(t *testing.T, conn *recordingConn, ui *holdUI, in chan<- agent.Envelope) {
	t.Helper()
	in <- promptEnv("el-later", "/srv/later")
	if c := ui.card(t); c.RequestID != "el-later" {
		t.Fatalf("shown %s, want el-later", c.RequestID)
	}
	if n := conn.sentCount(); n != 0 {
		t.Fatalf("alice's client sent %d envelopes, want none: %s", n, conn.last().Payload)
	}
}

// Keys off, the forgery arrives after the real prompt, while its card is
// open: the card is contested and takes no answer; nothing is sent, and
// neither prompt comes back as an approvable card.
func TestContestedForgeryAfterRealPrompt(t *testing.T) {
	t.Parallel()
	conn, ui, in := runHeld(t, approver.Options{})
	in <- attackPrompt(t, "/etc/sudoers", nil, "")
	if c := ui.card(t); argumentsPath(c) != "/etc/sudoers" || !c.DigestOK {
		t.Fatalf("shown %s (digest ok %v), want the real /etc/sudoers card", argumentsPath(c), c.DigestOK)
	}
	in <- attackPrompt(t, "/tmp/notes.txt", nil, "")
	contested(t, ui)
	// Approve on the contested card: there is no card to take it any more.
	select {
	case ui.release <- approve:
		t.Fatal("the contested card took an answer")
	case <-time.After(50 * time.Millisecond):
	}
	in <- attackPrompt(t, "/etc/sudoers", nil, "")   // the real one, asked again
	in <- attackPrompt(t, "/tmp/notes.txt", nil, "") // the forgery again
	noAnswer(t, conn, ui, in)
	if got := ui.askedIDs(); len(got) != 2 || got[0] != attackRequestID || got[1] != "el-later" {
		t.Errorf("cards shown %v, want the contested one once, then el-later", got)
	}
}

// Keys off, the forgery arrives first (the client was reconnecting and
// missed the real prompt): it is shown, as nothing tells it apart yet;
// when the fulfiller asks the real question again under the same ids, the
// card is contested, so the person is never made to approve one call by
// a card that shows another.
func TestContestedForgeryBeforeRealPrompt(t *testing.T) {
	t.Parallel()
	conn, ui, in := runHeld(t, approver.Options{})
	in <- attackPrompt(t, "/tmp/notes.txt", nil, "")
	if c := ui.card(t); argumentsPath(c) != "/tmp/notes.txt" || !c.DigestOK {
		t.Fatalf("shown %s (digest ok %v), want the forged card", argumentsPath(c), c.DigestOK)
	}
	in <- attackPrompt(t, "/etc/sudoers", nil, "")
	ev := contested(t, ui)
	if argumentsPath(ev.Card) != "/tmp/notes.txt" {
		t.Errorf("the contested card is %s, want the one shown", argumentsPath(ev.Card))
	}
	noAnswer(t, conn, ui, in)
}

// A prompt under the open card's JSON-RPC id but another envelope id is
// a collision too: an answer repeats the JSON-RPC id, so the card is
// contested and the newcomer is not shown.
func TestContestedByJSONRPCID(t *testing.T) {
	t.Parallel()
	conn, ui, in := runHeld(t, approver.Options{})
	in <- attackPrompt(t, "/etc/sudoers", nil, "")
	ui.card(t)
	forged := attackPrompt(t, "/tmp/notes.txt", nil, "")
	forged.ID = "fulfiller-elicit-000001"
	in <- forged
	contested(t, ui)
	in <- forged
	noAnswer(t, conn, ui, in)
	if got := ui.askedIDs(); len(got) != 2 || got[1] != "el-later" {
		t.Errorf("cards shown %v, want the contested one, then el-later", got)
	}
}

// A card waiting its turn behind another is contested the same way: it
// is never shown as approvable, and the person is told.
func TestContestedWhileQueued(t *testing.T) {
	t.Parallel()
	conn, ui, in := runHeld(t, approver.Options{})
	in <- promptEnv("el-first", "/srv/first")
	ui.card(t)
	in <- attackPrompt(t, "/etc/sudoers", nil, "")
	in <- attackPrompt(t, "/tmp/notes.txt", nil, "")
	contested(t, ui)
	ui.release <- approve // el-first
	poll.Until(t, "the answer to el-first", func() bool { return conn.sentCount() == 1 })
	if got := conn.last().CorrelationID.First(); got != "el-first" {
		t.Fatalf("answered %s, want el-first", got)
	}
	in <- promptEnv("el-later", "/srv/later")
	if c := ui.card(t); c.RequestID != "el-later" {
		t.Fatalf("shown %s after el-first, want el-later (the contested card never)", c.RequestID)
	}
}

// The fulfiller asks the same question again, byte for byte, after a
// reconnect or a restart: not a collision. The card stays open, is shown
// once, and its one answer goes out under the prompt's ids.
func TestIdenticalResendNotContested(t *testing.T) {
	t.Parallel()
	conn, ui, in := runHeld(t, approver.Options{})
	real := attackPrompt(t, "/etc/sudoers", nil, "")
	in <- real
	ui.card(t)
	in <- real
	in <- real
	ui.release <- approve
	poll.Until(t, "the answer", func() bool { return conn.sentCount() == 1 })
	if got := conn.last(); got.CorrelationID.First() != attackRequestID || !bytes.Contains(got.Payload, []byte(`{"jsonrpc":"2.0","id":7,"result":{"action":"accept","content":{"approve":true}}}`)) {
		t.Fatalf("answer %v %s", got.CorrelationID, got.Payload)
	}
	for _, ev := range ui.snapshot() {
		if ev.Kind == approver.EventEnded {
			t.Errorf("card ended (%s) after an identical re-send", ev.End.Cause)
		}
	}
	if got := ui.askedIDs(); len(got) != 1 {
		t.Errorf("shown %v, want the card once", got)
	}
}

// With --fulfiller-keys, a prompt is shown only when the fulfiller's
// signature verifies: the forgery (unsigned, or signed with another key)
// is dropped and reported, whichever comes first, and leaves no trace: the
// real prompt under the same ids is shown and answered, signed.
func TestSignedPromptsForgeryNeverShown(t *testing.T) {
	t.Parallel()
	fulPub, fulKey, _ := ed25519.GenerateKey(nil)
	_, malloryKey, _ := ed25519.GenerateKey(nil)
	alicePub, aliceKey, _ := ed25519.GenerateKey(nil)
	for name, forged := range map[string]agent.Envelope{
		"unsigned":                 attackPrompt(t, "/tmp/notes.txt", nil, ""),
		"signed with another key":  attackPrompt(t, "/tmp/notes.txt", malloryKey, "fulfiller"),
		"signed by an unknown key": attackPrompt(t, "/tmp/notes.txt", malloryKey, "mallory"),
	} {
		for _, forgedFirst := range []bool{true, false} {
			order := "after"
			if forgedFirst {
				order = "before"
			}
			t.Run(name+"/"+order, func(t *testing.T) {
				conn, ui, in := runHeld(t, approver.Options{Key: aliceKey, FulfillerKeys: approval.Keys{"fulfiller": fulPub}})
				real := attackPrompt(t, "/etc/sudoers", fulKey, "fulfiller")
				if forgedFirst {
					in <- forged
				}
				in <- real
				c := ui.card(t)
				if argumentsPath(c) != "/etc/sudoers" {
					t.Fatalf("shown %s, want the real /etc/sudoers card", argumentsPath(c))
				}
				if !forgedFirst {
					in <- forged
				}
				ev := ui.event(t, approver.EventRefused)
				if ev.Request != attackRequestID || ev.Fulfiller != "fulfiller" || ev.Err == nil {
					t.Errorf("refused event %+v", ev)
				}
				ui.release <- approve
				poll.Until(t, "the answer", func() bool { return conn.sentCount() == 1 })
				ans := conn.last()
				action, content := spacetest.ElicitResult(t, ans)
				if err := approval.Verify(alicePub, attackRequestID, c.Proposal.Digest, action, content); err != nil || action != approval.ActionAccept || ans.CorrelationID.First() != attackRequestID {
					t.Fatalf("answer %v %s: %v", ans.CorrelationID, ans.Payload, err)
				}
				for _, ev := range ui.snapshot() {
					if ev.Kind == approver.EventEnded {
						t.Errorf("card ended (%s)", ev.End.Cause)
					}
				}
				if got := ui.askedIDs(); len(got) != 1 {
					t.Errorf("shown %v, want only the real card", got)
				}
			})
		}
	}
}

// runTerminal runs a Client for alice whose face is the terminal card,
// read from a pipe, with opts.
func runTerminal(t *testing.T, opts approver.Options) (*recordingConn, *screen, chan<- agent.Envelope) {
	t.Helper()
	r, w := io.Pipe()
	t.Cleanup(func() { w.Close() })
	var out screen
	conn := &recordingConn{}
	c := approver.New(conn, &approver.Terminal{In: r, Out: &out}, opts)
	in := make(chan agent.Envelope)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx, in) }()
	t.Cleanup(func() { cancel(); <-done })
	return conn, &out, in
}

// The terminal card says in words that the card is contested, and stops
// asking: the prompt line is closed, and nothing is sent.
func TestTerminalContestedCard(t *testing.T) {
	t.Parallel()
	conn, out, in := runTerminal(t, approver.Options{})
	in <- attackPrompt(t, "/etc/sudoers", nil, "")
	waitFor(t, "the card", out.String, "a approve · d decline · c dismiss · q quit › ")
	in <- attackPrompt(t, "/tmp/notes.txt", nil, "")
	waitFor(t, "the contested line", out.String, "q quit › \n⚠ contested p-notes: coder → write_file on fs — contested: someone else sent a different prompt under this id, so this card may not show what the fulfiller asks; it cannot be answered here (nothing was sent). Ask the operator\n")
	in <- promptEnv("el-later", "/srv/later")
	waitFor(t, "the next card", out.String, "▌ approval requested — p\n")
	if n := conn.sentCount(); n != 0 {
		t.Fatalf("sent %d envelopes, want none", n)
	}
}

// With --fulfiller-keys, a prompt whose signature does not verify is a
// visible line on the terminal, never a card.
func TestTerminalSignedPromptRefusedNotice(t *testing.T) {
	t.Parallel()
	fulPub, _, _ := ed25519.GenerateKey(nil)
	conn, out, in := runTerminal(t, approver.Options{FulfillerKeys: approval.Keys{"fulfiller": fulPub}})
	in <- attackPrompt(t, "/tmp/notes.txt", nil, "")
	waitFor(t, "the notice", out.String, "⚠ dropped a prompt claiming to come from fulfiller (fulfiller-elicit-5f3a9c): the prompt is not signed; not shown. Someone may be forging prompts: tell the operator\n")
	if strings.Contains(out.String(), "approval requested") || conn.sentCount() != 0 {
		t.Errorf("a card was shown or an answer sent:\n%s", out.String())
	}
}
