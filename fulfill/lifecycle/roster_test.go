package lifecycle

import (
	"testing"
	"time"

	"github.com/mewkit/fulfiller/fulfill/decision"
)

// A new roster (this member's session came back) asks again the prompts
// its records hold, and not one still waiting for the write that
// records it: that one is asked once the write is durable, as a first
// ask. (The simulator over the Loop found the prompt sent before its
// record: a crash then leaves a prompt nobody holds.)
func TestRosterAsksNoPromptBeforeItsRecord(t *testing.T) {
	w := newEscWorld(t, []string{"alice", "bob"})
	effs := w.escalate(Decision{Approvers: []string{"alice"}, Timeout: time.Minute,
		EscalateTo: []decision.Tier{{After: 20 * time.Second, Approvers: []string{"bob"}}}})
	alice := prompts(effs)["alice"]
	if alice.EnvelopeID == "" {
		t.Fatalf("asked %v, want alice", kinds(effs))
	}
	// alice's client fails: the record's update is under way (not
	// acknowledged) when bob's tier comes.
	effs = w.c.Step(w.now, Answer{PromptID: alice.EnvelopeID, From: "alice", HasRPCID: true, RPCID: alice.RPCID, Payload: answerOf(fakeAnswer{Error: "no forms here"})})
	first := only[Write](t, effs)
	w.now = t0.Add(20 * time.Second)
	effs = w.c.Step(w.now, Fired{ID: "p1", At: w.now, Kind: TimerStep})
	if len(effectsOf[SendPrompt](effs)) != 0 || len(effectsOf[Write](effs)) != 0 {
		t.Fatalf("the tier sent %v before its prompt is recorded", kinds(effs))
	}
	if len(effectsOf[SendPrompt](w.c.Step(w.now, Roster{Present: []string{"alice", "bob"}}))) != 0 {
		t.Fatal("the roster asked bob before his prompt is recorded")
	}
	w.rev++
	effs = w.c.Step(w.now, Stored{ID: "p1", Seq: first.Seq, Rev: w.rev})
	second := only[Write](t, effs)
	var recorded string
	for _, p := range second.Record.Prompts {
		if p.Approver == "bob" {
			recorded = p.EnvelopeID
		}
	}
	if recorded == "" || len(effectsOf[SendPrompt](effs)) != 0 {
		t.Fatalf("then %v, recording bob's prompt %q", kinds(effs), recorded)
	}
	w.rev++
	effs = w.c.Step(w.now, Stored{ID: "p1", Seq: second.Seq, Rev: w.rev})
	if bob := prompts(effs)["bob"]; bob.EnvelopeID != recorded || bob.Again {
		t.Fatalf("once recorded, sent %+v, want bob's prompt %s as a first ask", bob, recorded)
	}
}
