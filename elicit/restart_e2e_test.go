package elicit_test

import (
	"testing"
)

// kill -9 of the fulfiller while a prompt is open, then a restart on the
// same DIR state store: each approver is asked again with the same
// elicitation (envelope id and bytes: their client knows the question),
// the first accept fulfils the call once, and the other prompt is
// cancelled.
func TestE2ERestartAsksAgainAndFulfilsOnce(t *testing.T) {
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
