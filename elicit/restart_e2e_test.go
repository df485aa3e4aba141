package elicit_test

import (
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/elicit/approval"
)

// kill -9 of the fulfiller while a prompt is open, then a restart on the
// same DIR state store: each approver is asked again with the same
// elicitation (envelope id and bytes: their client knows the question),
// the first accept fulfils the call once, and the other prompt is
// cancelled.
func TestE2ERestartAsksAgainAndFulfilsOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{stateDir: t.TempDir()})
	id := w.propose("p-restart", writeCall)
	first := map[string]string{}
	for _, who := range []string{"alice", "bob"} {
		e := w.ask(who)
		first[who] = e.ID + " " + string(e.Payload)
	}

	w.crashFulfiller()
	w.startFulfiller()

	again := w.ask("alice")
	if got := again.ID + " " + string(again.Payload); got != first["alice"] {
		t.Fatalf("asked again as\n%s\nnot as first asked\n%s", got, first["alice"])
	}
	if got := w.ask("bob"); got.ID+" "+string(got.Payload) != first["bob"] {
		t.Errorf("bob asked again as %s %s", got.ID, got.Payload)
	}
	w.answer("alice", again, `{"action":"accept","content":{"approve":true}}`)
	if out := w.outcome(id); !out.Fulfilled {
		t.Fatalf("outcome %+v", out)
	}
	w.marker()
	if n := len(w.answers(id)); n != 1 {
		t.Errorf("%d answers to %s on the wire, want the one fulfilment request", n, id)
	}
}

// A grant lives in the state store: after kill -9 and a restart on the
// same DIR, the next call it covers is fulfilled without a prompt, in the
// grant's name, and the grant still carries alice's signed answer as
// evidence; revoking it brings the prompt back.
func TestE2EGrantSurvivesRestart(t *testing.T) {
	t.Parallel()
	pub, priv, _ := ed25519.GenerateKey(nil)
	w := newWorld(t, worldOptions{stateDir: t.TempDir(), offerGrants: true, keys: approval.Keys{"alice": pub},
		escalation: `{"approvers":["alice"],` + grantable + `}`})
	id := w.propose("p-write", writeCall)
	ea := w.ask("alice")
	sig, _ := approval.Sign(priv, ea.ID, writeDigest, "accept", json.RawMessage(`{"approve":true,"grant":"1h"}`))
	w.answer("alice", ea, `{"action":"accept","content":{"approve":true,"grant":"1h","signature":"`+sig+`"}}`)
	if out := w.outcome(id); !out.Fulfilled {
		t.Fatalf("outcome %+v", out)
	}
	granted, ok := w.event(id, "granted")
	if !ok {
		t.Fatal("no grant made")
	}

	w.crashFulfiller()
	w.startFulfiller()

	got := w.grants.List()
	if len(got) != 1 || got[0].ID != granted.GrantID || !got[0].Live(time.Now()) {
		t.Fatalf("grants after the restart: %+v, want %s live", got, granted.GrantID)
	}
	if ev := got[0].Evidence; ev == nil || ev.Request != ea.ID || ev.Digest != writeDigest || ev.Signature != sig ||
		approval.Verify(pub, ev.Request, ev.Digest, ev.Action, json.RawMessage(`{"approve":true,"grant":"1h","signature":"`+ev.Signature+`"}`)) != nil ||
		string(ev.Content) != `{"approve":true,"grant":"1h"}` {
		t.Errorf("grant evidence after the restart: %+v", got[0].Evidence)
	}
	next := w.propose("p-write-2", `{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/prod/banner","content":"x"}}}`)
	if out := w.outcome(next); !out.Fulfilled {
		t.Fatalf("granted call after the restart: outcome %+v", out)
	}
	if d, _ := w.event(next, "decided"); d.GrantID != granted.GrantID {
		t.Errorf("decided with grant %q, want %q", d.GrantID, granted.GrantID)
	}
	if _, asked := w.event(next, "escalated"); asked {
		t.Error("the granted call was escalated after the restart")
	}
	if _, err := w.grants.Revoke(t.Context(), granted.GrantID); err != nil {
		t.Fatal(err)
	}
	w.propose("p-write-3", `{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/prod/banner","content":"y"}}}`)
	if e := w.ask("alice"); !strings.Contains(string(e.Payload), `"id":"p-write-3"`) {
		t.Errorf("alice was asked %s, want p-write-3", e.Payload)
	}
}
