package fulfill

import (
	"encoding/json"
	"time"

	"github.com/mewkit/fulfiller/decision"
)

// storeWorkers is how many decide workers run with a store: enough
// proposals in flight to share each sync of a durable store.
const storeWorkers = 64

// decide runs on a worker: ask the policy and act on its answer.
func (f *Fulfiller) decide(p *proposal) {
	if p.State().Terminal() {
		return // withdrawn or expired while queued for a worker
	}
	in := f.input(p, p.params, nil)
	f.evalSlots <- struct{}{}
	start := time.Now()
	d := f.decider.Decide(f.decideCtx, in)
	<-f.evalSlots
	p.decided(d.Revision, false)
	// The decision record is buffered, not awaited: the record of the
	// answer that follows (fulfilling, escalated, rejected) is, and the
	// log keeps its order, so that wait covers this line too.
	ev := p.event(StageDecided)
	ev.Decision, ev.Latency, ev.Input = &d, time.Since(start), in
	ev.GrantID = f.grantThatDecided(in, d)
	if d.Err != nil {
		f.log.Error("policy failed closed", "proposal", p.env.ID, "err", d.Err)
	}
	f.emit(ev)
	f.shadow(p, in, d)
	d.Grantable = f.grantOffer(d.Grantable)
	f.mu.Lock()
	p.decision = d
	f.mu.Unlock()
	f.act(p, d, p.params)
}

// act carries out a decision for p with the given params.
func (f *Fulfiller) act(p *proposal, d decision.Decision, params json.RawMessage) {
	switch d.Action {
	case decision.Fulfill:
		target, why := f.route(p, d)
		if target == "" {
			f.reject(p, "incapable", why)
			return
		}
		f.fulfil(p, target, params)
	case decision.Escalate:
		target, why := f.route(p, d)
		if target == "" {
			f.reject(p, "incapable", why) // rule 1: nobody asked about a call nobody can carry out
			return
		}
		f.escalate(p, d, target)
	default:
		reason := d.Reason
		if reason == "" {
			reason = "policy"
		}
		f.reject(p, reason, d.Message)
	}
}
