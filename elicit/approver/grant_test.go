package approver_test

import (
	"crypto/ed25519"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/internal/spacetest"
)

const grantableEscalation = `{"approvers":["alice"],"message":"production writes need a human","grantable":{"max_ttl":"1h","scope":["proposer","tool","arguments.path:prefix"]}}`

// elicitations counts the distinct elicitation/create requests on the
// wire: a prompt asked again (to an approver who joined after it went out)
// keeps its envelope id and counts once.
func (w *world) elicitations() int {
	ids := map[string]bool{}
	for _, e := range w.wire.Envelopes() {
		if e.Kind == agent.KindRequest && strings.Contains(string(e.Payload), `"method":"elicitation/create"`) {
			ids[e.ID] = true
		}
	}
	return len(ids)
}

// The card says what a grant would allow, who can use it and for how
// long: the gateway is not said to authenticate senders, so the policy's
// proposer pin is not offered and the card says "anyone who may propose
// in this space" (docs/design.md "Proposer identity and grants"). "l" and a
// choice approve with the grant, signed with the rest of the answer, and
// the next write under the same directory needs nobody.
func TestTerminalApproveWithGrant(t *testing.T) {
	t.Parallel()
	pub, priv, _ := ed25519.GenerateKey(nil)
	w := newWorldGrants(t, grantableEscalation, approval.Keys{"alice": pub}, true)
	in, keys := io.Pipe()
	t.Cleanup(func() { keys.Close() })
	var out screen
	w.approver("alice", &approver.Terminal{In: in, Out: &out}, approver.Options{Key: priv})
	id := w.propose("p-write")
	waitFor(t, "the card", out.String, "a approve · l allow · d decline · c dismiss · q quit › ")
	if want := "grantable  allow anyone who may propose in this space → write_file, path under /srv/prod/ for 15m, 1h (policy's limit 1h)"; !strings.Contains(out.String(), want) {
		t.Errorf("card lacks %q:\n%s", want, out.String())
	}
	io.WriteString(keys, "l\n")
	waitFor(t, "the durations", out.String, "  approve, and allow anyone who may propose in this space → write_file, path under /srv/prod/ for:\n  1) 15m\n  2) 1h\n")
	io.WriteString(keys, "2\n")
	if o := w.outcome(id); !o.Fulfilled {
		t.Fatalf("outcome %+v", o)
	}
	waitFor(t, "the confirmation", out.String, "✓ sent approved, and calls like it for 1h — p-write: coder → write_file on fs")

	ans := w.find("alice's answer", func(e agent.Envelope) bool {
		return e.From == "alice" && e.Kind == agent.KindResponse && strings.Contains(string(e.Payload), `"action"`)
	})
	action, content := spacetest.ElicitResult(t, ans)
	if !strings.HasPrefix(string(content), `{"approve":true,"grant":"1h","signature":"`) {
		t.Errorf("answer content %s", content)
	}
	digest, _ := approval.CallDigest("tools/call", json.RawMessage(`{"name":"write_file","arguments":{"path":"/srv/prod/motd","content":"hi"}}`))
	if err := approval.Verify(pub, ans.CorrelationID.First(), digest, action, content); err != nil {
		t.Errorf("the grant is not covered by alice's signature: %v", err)
	}

	next := w.proposeCall("p-write-2", `{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/prod/banner","content":"x"}}}`)
	if o := w.outcome(next); !o.Fulfilled {
		t.Fatalf("granted call: outcome %+v", o)
	}
	if n := w.elicitations(); n != 1 {
		t.Errorf("%d elicitations, want 1: the granted call was asked about", n)
	}
}

// Without a grant offer there is no "l"; an answer naming a grant the card
// did not offer is refused before it is sent.
func TestResponseRefusesGrantNotOffered(t *testing.T) {
	t.Parallel()
	w := newWorldGrants(t, grantableEscalation, nil, true)
	ui := newRecUI(nil)
	w.approver("alice", ui, approver.Options{})
	w.propose("p-write")
	c := <-ui.shown
	if c.Grant == nil {
		t.Fatal("no grant offered on a grantable card")
	}
	for _, a := range []approver.Answer{
		{Action: approval.ActionAccept, Approve: true, Grant: "8h"},     // not offered
		{Action: approval.ActionAccept, Approve: false, Grant: "1h"},    // not an approval
		{Action: approval.ActionAccept, DelegateTo: "bob", Grant: "1h"}, // handed on
		{Action: approval.ActionDecline, Grant: "1h"},
	} {
		if _, err := approver.Response(c, a, nil); err == nil || !strings.Contains(err.Error(), "not offered") {
			t.Errorf("%+v: err %v, want the grant refused", a, err)
		}
	}
	c.Grant = nil
	if _, err := approver.Response(c, approver.Answer{Action: approval.ActionAccept, Approve: true, Grant: "1h"}, nil); err == nil {
		t.Error("a grant on a card without an offer was accepted")
	}
}
