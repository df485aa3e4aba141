package fulfill

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/policies"
	"github.com/mewkit/fulfiller/state"
)

// Exactly once across crashes (issue 27): a crash at any point leaves no
// claimed proposal unanswered, and a restart on the same store answers it
// once, with the envelope ids recorded before the crash.

// lockedRecorder is a decision log whose lines a test reads while the
// fulfiller writes them.
type lockedRecorder struct {
	mu    sync.Mutex
	lines []Event
}

func (r *lockedRecorder) Observe(Event) {}

func (r *lockedRecorder) Record(e Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, e)
	return nil
}

func (r *lockedRecorder) stages(id string) []Stage {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Stage
	for _, e := range r.lines {
		if e.ProposalID == id {
			out = append(out, e.Stage)
		}
	}
	return out
}

// A crash as a policy reject is being recorded (MarkAnswered not done):
// the record still says "deciding", and the restart decides the proposal
// again, which may fulfil it. The decision log must not hold a "rejected"
// line by then: the line is written once the record says answered.
func TestStoreRejectedLineFollowsItsRecord(t *testing.T) {
	mode := state.Mode{Kind: state.Dir, Dir: t.TempDir()}
	deny := map[string]policies.Decision{"add": {Action: policies.Reject, Reason: "policy", Message: "no adding today"}}
	st := openStore(t, mode, "fulfiller")
	log1 := &lockedRecorder{}
	var atCrash []Stage
	st.beforeAnswered = func(p *state.Pending) {
		atCrash = log1.stages(p.ProposalID)
		st.dead.Store(true) // kill -9: the write never happens
	}
	h := newStoreHarness(t, "fulfiller", st, Config{Observer: log1}, &fakeDecider{decisions: deny})
	st.crashSpace = h.space
	h.space.dead.Store(true)
	h.deliver(proposalEnv("p1", "coder", callOf("add")))
	waitFor(t, func() bool { return st.dead.Load() })
	if slices.Contains(atCrash, StageRejected) {
		t.Errorf("decision log at the crash = %v: a rejected line before the record says answered", atCrash)
	}
	h.shutdown()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st2 := openStore(t, mode, "fulfiller")
	h2 := newStoreHarness(t, "fulfiller", st2, Config{}, &fakeDecider{decisions: storeDecisions})
	req := h2.space.next(t)
	if !isToolsCall(req) {
		t.Fatalf("after the restart sent %s %s, want p1's tools/call (decided again)", req.Kind, req.Payload)
	}
	h2.deliver(answerFor(t, req))
	h2.waitStage(t, "p1", StageFulfilled)
	h2.space.quiet(t, 100*time.Millisecond)
}
