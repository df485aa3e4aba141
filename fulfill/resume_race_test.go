package fulfill

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/state"
)

// TestResumeNeverRacesAnEnd: a startup scan of this member's records may
// read the record of a proposal this process is answering right now, and
// hand it to resumeOne at the very moment the proposal ends. resumeOne
// must then find the proposal either still pending here or ended here:
// never neither, which made it decide the proposal a second time (the
// shadow test's "two disagreements for one proposal": the second decide
// shadowed the decision again; its reject was fenced off by the record's
// compare-and-set, so only the metric and the log showed it). end once
// left the proposal in neither for a moment (out of the pending cache, not
// yet marked ended) outside the lock resumeOne checks under; many rounds,
// because the moment is short.
func TestResumeNeverRacesAnEnd(t *testing.T) {
	f := New(newFakeSpace(), &fakeDecider{}, Config{MaxPending: 4, Observer: ObserverFunc(func(Event) {})})
	for i := range 30000 {
		id := fmt.Sprintf("p-%d", i)
		env := agent.Envelope{Protocol: "mew/v0.4", ID: id, From: "coder", Kind: agent.KindProposal,
			Payload: json.RawMessage(`{"method":"tools/call","params":{"name":"add","arguments":{}}}`)}
		raw, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		env.Raw = raw
		p := &proposal{env: env, method: "tools/call", received: time.Now()}
		f.mu.Lock()
		f.live++
		f.byProposer[env.From]++
		p.state.Store(int32(StateDeciding))
		f.store.add(p)
		f.mu.Unlock()
		rec := &state.Pending{ProposalID: id, Envelope: raw, Proposer: "coder", Received: p.received, Phase: state.Deciding, Owner: "fulfiller"}

		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			f.end(p, StateRejected, notAnswered)
		})
		wg.Go(func() {
			<-start
			f.resumeOne(rec, "restart")
		})
		close(start)
		wg.Wait()
		select {
		case q := <-f.jobs:
			t.Fatalf("round %d: the record of %s, read while it ended here, was resumed and queued to be decided again", i, q.env.ID)
		default:
		}
		if _, here := f.store.get(id); here {
			t.Fatalf("round %d: %s is pending again after it ended", i, id)
		}
	}
}
