package fulfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/state"
)

// retryStore is how long recover waits before trying the store again.
const retryStore = time.Second

// recoverWork resumes this member's own unanswered proposals (a restart on the
// same store), then adopts the work of group members whose lease lapsed,
// until ctx ends. Adopted work is resumed exactly like a restart's, open
// prompts asked again from this member.
func (f *Fulfiller) recoverWork(ctx context.Context) {
	for {
		recs, err := f.cfg.Store.Owned(ctx)
		if err == nil {
			f.resume(recs, "restart")
			break
		}
		f.log.Error("own pending work not read from the store; trying again", "err", err)
		if !sleepCtx(ctx, retryStore) {
			return
		}
	}
	for {
		lapsed, err := f.cfg.Store.WatchLapsed(ctx)
		if err != nil {
			f.log.Error("group leases not watched; trying again", "err", err)
			if !sleepCtx(ctx, retryStore) {
				return
			}
			continue
		}
		for from := range lapsed {
			recs, err := f.cfg.Store.Adopt(ctx, from)
			switch {
			case errors.Is(err, state.ErrMemberAlive):
				f.log.Debug("member reported lapsed is alive; nothing adopted", "member", from)
			case err != nil:
				f.log.Error("work of a lapsed member not adopted", "member", from, "err", err)
			}
			if len(recs) > 0 {
				f.log.Warn("adopted the pending work of a member whose lease lapsed", "member", from, "proposals", len(recs))
			}
			f.resume(recs, "adopted from "+from)
		}
		if ctx.Err() != nil {
			return
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// resume takes over records read from the store (docs/design.md "Durable and
// shared pending work", Restart): a fulfilment request already written is
// never written again, its response awaited until its deadline; a prompt
// whose deadline passed is rejected "timeout" at once; open prompts are
// asked again with their ids; queued work is fulfilled; a proposal not yet
// decided is decided (a stored decision is acted on, not taken again).
func (f *Fulfiller) resume(recs []*state.Pending, how string) {
	for _, r := range recs {
		f.resumeOne(r, how)
	}
}

func (f *Fulfiller) resumeOne(r *state.Pending, how string) {
	var env agent.Envelope
	if err := json.Unmarshal(r.Envelope, &env); err != nil || env.ID != r.ProposalID || env.From == "" {
		// Nobody can answer a proposal whose frame is lost; the record
		// stays for an operator to look at.
		f.log.Error("pending record with an unreadable proposal; not resumed", "proposal", r.ProposalID, "err", err)
		return
	}
	env.Raw = r.Envelope
	if !f.reclaim(r) {
		return
	}
	c, perr := parsePayload(env.Payload)
	p := &proposal{env: env, method: c.method, params: c.params, tool: c.tool, received: r.Received, rec: r, resumed: true}
	if r.DecisionID != "" {
		p.gov.Store(&governing{id: r.DecisionID, revision: r.Revision})
	}
	var sd storedDecision
	decided := len(r.Decision) > 0 && json.Unmarshal(r.Decision, &sd) == nil

	f.mu.Lock()
	if _, here := f.store.get(env.ID); here || f.closing {
		f.mu.Unlock()
		return // adopted twice (a repeated report), or shutting down (the record stays)
	}
	if _, claiming := f.claiming[env.ID]; claiming {
		// Our own record of a proposal still being claimed or admitted
		// here (the claim is the record): a start-up scan racing the
		// first proposals. admit makes it pending, or ends it, under
		// f.mu.
		f.mu.Unlock()
		f.log.Debug("record of a proposal being admitted here read early; not resumed", "proposal", env.ID, "phase", r.Phase)
		return
	}
	if f.store.endedHere(env.ID) {
		// Our own record of a proposal this process already ended: a
		// listing read before the end was written (a startup scan racing
		// the first proposals). Resuming it would decide it a second time.
		f.mu.Unlock()
		f.log.Debug("record of a proposal ended here read late; not resumed", "proposal", env.ID, "phase", r.Phase)
		return
	}
	f.countLocked(p)
	p.state.Store(int32(StateDeciding))
	f.store.add(p)
	f.armTTLLocked(p)
	f.mu.Unlock()
	f.log.Info("pending proposal resumed", "proposal", env.ID, "phase", r.Phase, "how", how)
	ev := p.event(StageResumed)
	ev.Message = fmt.Sprintf("%s (%s)", how, r.Phase)
	f.emit(ev)

	switch {
	case r.Phase == state.Answered && r.Reject != nil:
		f.resendReject(p, *r.Reject)
	case perr != nil:
		f.reject(p, "invalid", perr.Error()) // cannot happen: it was admitted
	case r.Request != nil:
		if decided { // its task_timeout, and who approved, for what follows
			f.mu.Lock()
			p.decision, p.approvedBy = sd.decision(), sd.ApprovedBy
			f.mu.Unlock()
		}
		if r.Phase == state.Running && r.Task != nil {
			f.resumeTask(p, r)
		} else {
			f.awaitResumed(p, r)
		}
	case r.Phase == state.Queued && decided:
		f.mu.Lock()
		p.decision, p.approvedBy = sd.decision(), sd.ApprovedBy
		f.mu.Unlock()
		params := sd.Params
		if params == nil {
			params = p.params
		}
		f.fulfil(p, sd.Route, params)
	case r.Phase == state.AwaitingApproval && decided:
		f.mu.Lock()
		p.decision, p.target, p.deadline = sd.decision(), sd.Route, r.ApprovalDeadline
		p.state.Store(int32(StateAwaitingApproval))
		f.mu.Unlock()
		if !f.clock.Now().Before(r.ApprovalDeadline) {
			f.reject(p, "timeout", fmt.Sprintf("no approval by %s (the deadline passed while no fulfiller held the proposal)", r.ApprovalDeadline.Format(time.RFC3339)))
			return
		}
		if f.cfg.Escalator == nil {
			f.reject(p, "policy", "the policy asks for human approval, but escalation is not configured on this fulfiller")
			return
		}
		f.askHumans(p, p.decision, sd.Route, r.Prompts, r.Approvals)
	case decided:
		f.mu.Lock()
		p.decision = sd.decision()
		f.mu.Unlock()
		f.act(p, p.decision, p.params)
	default:
		select {
		case f.jobs <- p:
		case <-f.runCtx.Done():
		}
	}
}

// reclaim settles the seen key of r before it is resumed (Store.Reclaim):
// a crash between the two writes of its claim may have left it missing,
// and a replay after the record ends would then be decided again. A record
// whose id another claim holds is a replay's, written just before a crash:
// it is deleted and nothing is sent. If the store cannot say, the record
// is resumed anyway: it is this member's record, and leaving it would
// leave its proposer unanswered.
func (f *Fulfiller) reclaim(r *state.Pending) bool {
	if r.Claim == "" {
		return true // claimed apart, before the record (an older fulfiller)
	}
	ctx, cancel := f.storeContext()
	defer cancel()
	ours, err := f.cfg.Store.Reclaim(ctx, r)
	switch {
	case err != nil:
		f.log.Warn("seen key of a resumed record not settled; resumed anyway", "proposal", r.ProposalID, "err", err)
		return true
	case ours:
		return true
	}
	f.log.Info("record of a replayed proposal id (claimed before) found; deleted, nothing sent", "proposal", r.ProposalID)
	if err := f.cfg.Store.Delete(ctx, r); err != nil && !errors.Is(err, state.ErrConflict) {
		f.log.Warn("record of a replayed proposal id not deleted", "proposal", r.ProposalID, "err", err)
	}
	return false
}

// resendReject sends again the reject recorded just before a crash (or
// before the lapsed member's end): the same envelope, so that a proposer
// that already has it sees a repeat, and one that does not is answered.
// Nothing else is done for the proposal: it was decided.
func (f *Fulfiller) resendReject(p *proposal, rej state.Reject) {
	if _, ok := f.transition(p, StateRejected, notAnswered); !ok {
		return
	}
	f.log.Info("reject recorded before the restart sent again", "proposal", p.env.ID, "reason", rej.Reason, "envelope", rej.EnvelopeID)
	ev := p.event(StageRejected)
	ev.Reason, ev.Message = rej.Reason, rej.Message
	// The line again: the crash may have come between the record and the
	// line (answerReject writes the line after the record). A second line
	// for the same reject, same decision, is the lesser harm than none.
	f.recordReject(p, ev)
	f.writeReject(p, ev, rej)
}

// awaitResumed waits for the response to a fulfilment request written
// before the restart (or by the lapsed member): it is never written again.
// Its deadline is counted from when it was sent.
func (f *Fulfiller) awaitResumed(p *proposal, r *state.Pending) {
	deadline := r.FulfilDeadline
	if deadline.IsZero() {
		deadline = r.Request.SentAt.Add(f.cfg.FulfillTimeout)
	}
	f.mu.Lock()
	p.target, p.requestID, p.rpcID, p.requestSent = r.Request.Target, r.Request.EnvelopeID, r.Request.RPCID, r.Request.SentAt
	p.taskAug = r.Request.Task
	p.written = make(chan struct{})
	close(p.written)
	p.state.Store(int32(StateFulfilling))
	f.slots.take(p.env.From)
	f.byRequest[p.requestID] = p
	p.stopFulfil = f.clock.AfterFunc(deadline.Sub(f.clock.Now()), func() { f.fulfilTimedOut(p) })
	// Its response may have come while no member held the proposal (the
	// former owner had stopped reading, this one had not adopted yet).
	late, came := f.peerResps.take(p.requestID)
	f.mu.Unlock()
	if came {
		f.log.Info("response to an adopted fulfilment request came before the adoption; taken now", "proposal", p.env.ID, "request", p.requestID)
		f.onResponse(late)
	}
}
