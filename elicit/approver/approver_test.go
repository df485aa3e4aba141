package approver_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/internal/spacetest"
)

const oneApprover = `{"approvers":["alice"],"message":"production writes need a human","editable":["path","content"]}`

func TestAutoApproveSigned(t *testing.T) {
	t.Parallel()
	pub, priv, _ := ed25519.GenerateKey(nil)
	w := newWorld(t, oneApprover, approval.Keys{"alice": pub})
	var out screen
	w.approver("alice", &approver.Auto{Approve: true, Out: &out}, approver.Options{Key: priv})
	id := w.propose("p-write")
	if o := w.outcome(id); !o.Fulfilled {
		t.Fatalf("outcome %+v", o)
	}
	ans := w.find("alice's answer", func(e agent.Envelope) bool {
		return e.From == "alice" && e.Kind == agent.KindResponse && strings.Contains(string(e.Payload), `"action"`)
	})
	el := w.find("the elicitation", func(e agent.Envelope) bool { return e.ID == ans.CorrelationID.First() })
	action, content := spacetest.ElicitResult(t, ans)
	digest, _ := approval.CallDigest("tools/call", json.RawMessage(`{"name":"write_file","arguments":{"path":"/srv/prod/motd","content":"hi"}}`))
	if err := approval.Verify(pub, el.ID, digest, action, content); err != nil {
		t.Errorf("alice's answer %s does not verify: %v", ans.Payload, err)
	}
	waitFor(t, "auto", out.String, "approved   p-write: coder → write_file on fs")
}

func TestAutoDeclineWithReasonSigned(t *testing.T) {
	t.Parallel()
	pub, priv, _ := ed25519.GenerateKey(nil)
	w := newWorld(t, oneApprover, approval.Keys{"alice": pub})
	w.approver("alice", &approver.Auto{Reason: "frozen for the release"}, approver.Options{Key: priv})
	id := w.propose("p-write")
	if o := w.outcome(id); o.Reason != "disagree" {
		t.Fatalf("outcome %+v", o)
	}
	if chat := w.chat(id); chat != "alice declined: frozen for the release" {
		t.Errorf("chat %q", chat)
	}
}

func TestAutoDeclineSigned(t *testing.T) {
	t.Parallel()
	pub, priv, _ := ed25519.GenerateKey(nil)
	w := newWorld(t, oneApprover, approval.Keys{"alice": pub})
	w.approver("alice", &approver.Auto{}, approver.Options{Key: priv, Limit: 1})
	id := w.propose("p-write")
	if o := w.outcome(id); o.Reason != "disagree" {
		t.Fatalf("outcome %+v", o)
	}
	ans := w.find("alice's answer", func(e agent.Envelope) bool {
		return e.From == "alice" && e.Kind == agent.KindResponse && strings.Contains(string(e.Payload), `"action"`)
	})
	if !strings.Contains(string(ans.Payload), `"result":{"action":"decline","content":{"signature":"`) {
		t.Errorf("decline %s", ans.Payload)
	}
}

// TestTerminalApproveWithEdits drives the card UI through a pipe, as a
// script or a person typing lines would.
func TestTerminalApproveWithEdits(t *testing.T) {
	t.Parallel()
	w := newWorld(t, oneApprover, nil)
	in, keys := io.Pipe()
	t.Cleanup(func() { keys.Close() })
	var out screen
	w.approver("alice", &approver.Terminal{In: in, Out: &out}, approver.Options{})
	id := w.propose("p-write")
	waitFor(t, "the card", out.String, "a approve · e edit · d decline · c dismiss · q quit › ")
	for _, want := range []string{
		"▌ approval requested — p-write",
		"proposer   coder",
		"server     fs",
		"tool       write_file — Write a file, replacing it if it exists",
		"    {\n      \"path\": \"/srv/prod/motd\",\n      \"content\": \"hi\"\n    }",
		"policy     production writes need a human",
		"digest     56dcae76b714",
		"editable   path (string), content (string)",
		" left)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("card lacks %q:\n%s", want, out.String())
		}
	}
	io.WriteString(keys, "e\n")
	waitFor(t, "the path prompt", out.String, "path (string) [/srv/prod/motd]: ")
	io.WriteString(keys, "/srv/prod/motd.bak\n")
	waitFor(t, "the content prompt", out.String, "content (string) [hi]: ")
	io.WriteString(keys, "\n")
	waitFor(t, "the reason prompt", out.String, "reason (optional): ")
	io.WriteString(keys, "keep the old one\n")
	if o := w.outcome(id); !o.Fulfilled || string(o.Result) != `{"content":[{"type":"text","text":"wrote 2 bytes to /srv/prod/motd.bak"}]}` {
		t.Fatalf("outcome %+v %s", o, o.Result)
	}
	waitFor(t, "the confirmation", out.String, `✓ sent approved with path="/srv/prod/motd.bak" — p-write: coder → write_file on fs`)
}

func TestTerminalCardWithdrawn(t *testing.T) {
	t.Parallel()
	w := newWorld(t, oneApprover, nil)
	in, keys := io.Pipe()
	t.Cleanup(func() { keys.Close() })
	var out screen
	w.approver("alice", &approver.Terminal{In: in, Out: &out}, approver.Options{})
	id := w.propose("p-write")
	waitFor(t, "the card", out.String, "› ")
	if err := w.prop.Withdraw(w.ctx, id, "no_longer_needed"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the withdrawal", out.String, "q quit › \n✗ ended p-write: coder → write_file on fs — withdrawn by the proposer\n")
}

func TestTerminalDeclineWithReason(t *testing.T) {
	t.Parallel()
	w := newWorld(t, oneApprover, nil)
	in, keys := io.Pipe()
	t.Cleanup(func() { keys.Close() })
	var out screen
	w.approver("alice", &approver.Terminal{In: in, Out: &out}, approver.Options{})
	id := w.propose("p-write")
	waitFor(t, "the card", out.String, "› ")
	io.WriteString(keys, "g\n") // not offered (nobody to delegate to): help, then the prompt again
	waitFor(t, "the help", out.String, "  a approve as shown · e change the editable arguments, then approve · d decline, with a reason for the proposer · c dismiss without deciding · q quit\n")
	io.WriteString(keys, "d\n")
	waitFor(t, "the reason prompt", out.String, "reason, sent to the proposer (optional): ")
	// Piped, the line arrives as typed: escape sequences and control
	// bytes are taken out, never sent.
	io.WriteString(keys, "use the \x1b[Dstaging\x07 copy\u202e\n")
	if o := w.outcome(id); o.Reason != "disagree" {
		t.Fatalf("outcome %+v", o)
	}
	if chat := w.chat(id); chat != "alice declined: use the staging copy" {
		t.Errorf("chat %q", chat)
	}
}

// A card offers only what can be done with it, and the help after a wrong
// key lists just that: no edit without editable arguments, no delegate
// without someone to hand to.
func TestTerminalOffersOnlyItsActions(t *testing.T) {
	t.Parallel()
	w := newWorld(t, `{"approvers":["alice"]}`, nil)
	in, keys := io.Pipe()
	t.Cleanup(func() { keys.Close() })
	var out screen
	w.approver("alice", &approver.Terminal{In: in, Out: &out}, approver.Options{})
	id := w.propose("p-write")
	waitFor(t, "the prompt", out.String, "left] a approve · d decline · c dismiss · q quit › ")
	io.WriteString(keys, "e\n")
	waitFor(t, "the help", out.String, "  a approve as shown · d decline, with a reason for the proposer · c dismiss without deciding · q quit\n")
	io.WriteString(keys, "a\n")
	if o := w.outcome(id); !o.Fulfilled {
		t.Fatalf("outcome %+v", o)
	}
	waitFor(t, "the outcome", out.String, "✓ sent approved — p-write: coder → write_file on fs\n✓ outcome p-write: coder → write_file on fs — fulfilled: the call was sent to fs\n")
}

// After an approval with an edit the policy refuses, the approver sees
// the policy's reject and its message.
func TestTerminalOutcomeRejectedAfterEdit(t *testing.T) {
	t.Parallel()
	w := newWorld(t, oneApprover, nil)
	in, keys := io.Pipe()
	t.Cleanup(func() { keys.Close() })
	var out screen
	w.approver("alice", &approver.Terminal{In: in, Out: &out}, approver.Options{})
	id := w.propose("p-write")
	waitFor(t, "the prompt", out.String, "q quit › ")
	io.WriteString(keys, "e\n/tmp/motd\n\n\n") // path, content kept, no reason
	if o := w.outcome(id); o.Reason != "policy" {
		t.Fatalf("outcome %+v", o)
	}
	waitFor(t, "the outcome", out.String, "✗ outcome p-write: coder → write_file on fs — rejected by the policy: writes stay under /srv/prod\n")
}

func TestKeyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := dir + "/alice.key"
	line, err := approver.WriteKeyFile(path, "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode())
	}
	key, err := approver.LoadKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := approver.PublicLine("alice", key); got != line || !strings.HasPrefix(line, "alice ") {
		t.Errorf("public line %q, want %q", got, line)
	}
	keys, err := approval.ParseKeys(strings.NewReader(line + "\n"))
	if err != nil || !keys["alice"].Equal(key.Public()) {
		t.Errorf("the printed line is not a keys file line: %v", err)
	}
	if _, err := approver.WriteKeyFile(path, "alice", nil); !os.IsExist(err) {
		t.Errorf("overwrote a key: %v", err)
	}
	_ = os.Chmod(path, 0o644)
	if _, err := approver.LoadKey(path); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Errorf("loaded a world-readable key: %v", err)
	}
	if _, _, err := approver.GenerateKey("al ice", nil); err == nil {
		t.Error("an id with a space")
	}
}

func TestParseValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		f    approver.Field
		in   string
		want string
	}{
		{approver.Field{Name: "n", Type: "integer"}, " 42 ", "42"},
		{approver.Field{Name: "n", Type: "integer"}, "4.5", "error: n must be a whole number"},
		{approver.Field{Name: "x", Type: "number"}, "4.5", "4.5"},
		{approver.Field{Name: "x", Type: "number"}, "lots", "error: x must be a number"},
		{approver.Field{Name: "b", Type: "boolean"}, "Yes", "true"},
		{approver.Field{Name: "b", Type: "boolean"}, "maybe", "error: b must be yes or no"},
		{approver.Field{Name: "s", Type: "string"}, "<a&b>", `"<a&b>"`},
		{approver.Field{Name: "e", Type: "string", Enum: []string{"x", "y"}}, "z", "error: e must be one of x, y"},
	} {
		v, err := approver.ParseValue(tc.f, tc.in)
		got := string(v)
		if err != nil {
			got = "error: " + err.Error()
		}
		if got != tc.want {
			t.Errorf("ParseValue(%s %q) = %s, want %s", tc.f.Type, tc.in, got, tc.want)
		}
	}
}

func TestResponseRefusesDigestMismatch(t *testing.T) {
	t.Parallel()
	env := agent.Envelope{ID: "fulfiller-elicit-1", From: "fulfiller", Kind: agent.KindRequest, Payload: json.RawMessage(`{"jsonrpc":"2.0","id":3,"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object","properties":{"approve":{"type":"boolean"}},"required":["approve"]},"_meta":{"proposal":{"id":"p","from":"coder","method":"tools/call","params":{"name":"read_file"},"digest":"` + strings.Repeat("0", 64) + `","deadline":"2030-01-01T00:00:00Z"}}}}`)}
	c, err := approver.ParseCard(env)
	if err != nil {
		t.Fatal(err)
	}
	if c.DigestOK {
		t.Fatal("a wrong digest was taken as right")
	}
	if _, err := approver.Response(c, approver.Answer{Action: approval.ActionAccept, Approve: true}, nil); err != approver.ErrDigestMismatch {
		t.Errorf("approve: %v", err)
	}
	r, err := approver.Response(c, approver.Answer{Action: approval.ActionDecline}, nil)
	if err != nil || string(r.Payload) != `{"jsonrpc":"2.0","id":3,"result":{"action":"decline"}}` || r.CorrelationID.First() != "fulfiller-elicit-1" || r.To[0] != "fulfiller" {
		t.Errorf("decline %s %v", r.Payload, err)
	}
}

// Text on a card comes from others — the proposer, the tool's owner — and
// must not steer the terminal: a carriage return and an erase could hide
// the digest or rewrite the arguments shown. Control characters and
// bidirectional overrides are shown escaped.
func TestRenderEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	params := `{"name":"write_file","arguments":{"path":"/srv/prod/motd"}}`
	digest, _ := approval.CallDigest("tools/call", json.RawMessage(params))
	env := agent.Envelope{ID: "fulfiller-elicit-1", From: "fulfiller", Kind: agent.KindRequest, Payload: json.RawMessage(`{"jsonrpc":"2.0","id":3,"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object","properties":{"approve":{"type":"boolean"}}},"_meta":{"proposal":{"id":"p\r\u001b[2Kq","from":"cod\u202eer","method":"tools/call","params":` + params + `,"digest":"` + digest + `","deadline":"2030-01-01T00:00:00Z"},"tool":{"name":"write_file","server":"fs","description":"writes\r\u001b[Kread-only"},"policy":{"message":"ok\u0007"}}}}`)}
	c, err := approver.ParseCard(env)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	c.Render(&b, time.Date(2029, 12, 31, 23, 59, 0, 0, time.UTC), false)
	got := b.String() + c.Summary()
	if strings.ContainsAny(got, "\r\x1b\x07\u202e") {
		t.Errorf("the card holds control characters:\n%q", got)
	}
	for _, want := range []string{
		`▌ approval requested — p\r\x1b[2Kq`,
		`proposer   cod\u202eer`,
		`tool       write_file — writes\r\x1b[Kread-only`,
		`policy     ok\a`,
		`p\r\x1b[2Kq: cod\u202eer → write_file on fs`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("card lacks %q:\n%s", want, got)
		}
	}
}

// TestRenderEscapesInvisibleCharacters (issue 41, row 1): isolates and
// zero-width characters in the arguments and the message would make the
// card read "ls … # list the && rm -rf …" while the call that runs puts
// rm -rf first; each is shown escaped.
func TestRenderEscapesInvisibleCharacters(t *testing.T) {
	t.Parallel()
	// Raw in the JSON text, as a proposer may send them.
	params := "{\"name\":\"run\",\"arguments\":{\"command\":\"ls \u2067# list the\u2069 && r\u200bm -rf /\"}}"
	digest, _ := approval.CallDigest("tools/call", json.RawMessage(params))
	env := agent.Envelope{ID: "fulfiller-elicit-1", From: "fulfiller", Kind: agent.KindRequest, Payload: json.RawMessage(`{"jsonrpc":"2.0","id":3,"method":"elicitation/create","params":{"message":"list \u2066files\u2069\ufeff","requestedSchema":{"type":"object","properties":{"approve":{"type":"boolean"}}},"_meta":{"proposal":{"id":"p\u200b1","from":"coder","method":"tools/call","params":` + params + `,"digest":"` + digest + `","deadline":"2030-01-01T00:00:00Z"},"tool":{"name":"run","server":"sh"},"policy":{"message":"ok\u2060"}}}}`)}
	c, err := approver.ParseCard(env)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	c.Render(&b, time.Date(2029, 12, 31, 23, 59, 0, 0, time.UTC), false)
	got := b.String() + c.Summary()
	if strings.ContainsAny(got, "\u2066\u2067\u2069\u200b\ufeff\u2060") {
		t.Errorf("the card holds invisible characters:\n%q", got)
	}
	for _, want := range []string{
		`▌ approval requested — p\u200b1`,
		`"command": "ls \u2067# list the\u2069 && r\u200bm -rf /"`,
		`policy     ok\u2060`,
		`p\u200b1: coder → run on sh`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("card lacks %q:\n%s", want, got)
		}
	}
}

// absentConn is a Conn whose space holds nobody else.
type absentConn struct{}

func (absentConn) ID() string { return "alice" }
func (absentConn) Send(context.Context, agent.Envelope) (agent.Envelope, error) {
	return agent.Envelope{}, nil
}
func (absentConn) Participant(string) (agent.Participant, bool) { return agent.Participant{}, false }

// An approver who starts before the fulfiller is told why no card comes.
func TestFulfillerAbsentAtStart(t *testing.T) {
	t.Parallel()
	ui := newRecUI(nil)
	in := make(chan agent.Envelope)
	close(in)
	if err := approver.New(absentConn{}, ui, approver.Options{}).Run(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	if evs := ui.snapshot(); len(evs) != 1 || evs[0].Kind != approver.EventFulfillerAbsent || evs[0].Fulfiller != "fulfiller" {
		t.Errorf("events %+v", evs)
	}
	var out screen
	(&approver.Terminal{Out: &out}).Notify(approver.Event{Kind: approver.EventFulfillerAbsent, Fulfiller: "fulfiller"})
	if got := out.String(); got != "⚠ fulfiller is not in the space: cards appear when it joins\n" {
		t.Errorf("terminal says %q", got)
	}
}

// The terminal says when the fulfiller leaves (its card closes, saying
// why) and when it is back (the card is shown again).
func TestTerminalFulfillerLeavesAndComesBack(t *testing.T) {
	t.Parallel()
	w := newWorld(t, oneApprover, nil)
	in, keys := io.Pipe()
	t.Cleanup(func() { keys.Close() })
	var out screen
	w.approver("alice", &approver.Terminal{In: in, Out: &out}, approver.Options{})
	id := w.propose("p-write")
	waitFor(t, "the card", out.String, "q quit › ")
	if n := w.srv.Drop("fulfiller"); n != 1 {
		t.Fatalf("dropped %d sockets of the fulfiller", n)
	}
	waitFor(t, "the notices", out.String, "q quit › \n"+
		"⚠ fulfiller left the space: its cards are closed until it is back\n"+
		"✗ ended p-write: coder → write_file on fs — the fulfiller left the space; the card comes back if it asks again\n"+
		"✓ fulfiller is in the space\n\n"+
		"▌ approval requested — p-write\n")
	io.WriteString(keys, "a\n")
	if o := w.outcome(id); !o.Fulfilled {
		t.Fatalf("outcome %+v", o)
	}
}

// A deadline the proposer set (its own hint, sooner than the policy's)
// is shown as such: the approver knows the proposer stops waiting then.
func TestCardShowsAProposersDeadline(t *testing.T) {
	t.Parallel()
	params := `{"name":"write_file","arguments":{"path":"/srv/prod/motd"}}`
	digest, _ := approval.CallDigest("tools/call", json.RawMessage(params))
	card := func(by string) string {
		env := agent.Envelope{ID: "fulfiller-elicit-1", From: "fulfiller", Kind: agent.KindRequest, Payload: json.RawMessage(`{"jsonrpc":"2.0","id":3,"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object","properties":{"approve":{"type":"boolean"}}},"_meta":{"proposal":{"id":"p","from":"coder","method":"tools/call","params":` + params + `,"digest":"` + digest + `","deadline":"2030-01-01T00:01:00Z"` + by + `}}}}`)}
		c, err := approver.ParseCard(env)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		c.Render(&b, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), false)
		return b.String()
	}
	if got := card(`,"deadline_by":"proposer"`); !strings.Contains(got, "(1m00s left) — set by the proposer, who stops waiting then") {
		t.Errorf("card:\n%s", got)
	}
	if got := card(""); strings.Contains(got, "proposer, who stops") || !strings.Contains(got, "(1m00s left)") {
		t.Errorf("card without the hint:\n%s", got)
	}
}

// A card says who else has been asked: with one approval needed, any of
// the approvers the prompt lists (an escalate_to tier's prompt lists
// the earlier approvers too); with more, how many of whom.
func TestCardShowsWhoElseIsAsked(t *testing.T) {
	t.Parallel()
	params := `{"name":"write_file","arguments":{"path":"/srv/prod/motd"}}`
	digest, _ := approval.CallDigest("tools/call", json.RawMessage(params))
	card := func(policy string) string {
		env := agent.Envelope{ID: "fulfiller-elicit-1", From: "fulfiller", Kind: agent.KindRequest, Payload: json.RawMessage(`{"jsonrpc":"2.0","id":3,"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object","properties":{"approve":{"type":"boolean"}}},"_meta":{"proposal":{"id":"p","from":"coder","method":"tools/call","params":` + params + `,"digest":"` + digest + `","deadline":"2030-01-01T00:01:00Z"},"policy":` + policy + `}}}`)}
		c, err := approver.ParseCard(env)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		c.Render(&b, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), false)
		return b.String()
	}
	if got := card(`{"approvers":["alice","oncall-lead"],"quorum":1}`); !strings.Contains(got, "\n  asked      any 1 of alice, oncall-lead\n") || strings.Contains(got, "needs") {
		t.Errorf("card:\n%s", got)
	}
	if got := card(`{"approvers":["alice","bob","oncall-lead"],"quorum":2}`); !strings.Contains(got, "\n  needs      2 approvals of alice, bob, oncall-lead\n") || strings.Contains(got, "asked") {
		t.Errorf("card:\n%s", got)
	}
	if got := card(`{"approvers":["alice"],"quorum":1}`); strings.Contains(got, "asked") || strings.Contains(got, "needs") {
		t.Errorf("a card for its only approver names nobody else:\n%s", got)
	}
}
