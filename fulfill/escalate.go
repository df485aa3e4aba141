package fulfill

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/decision"
	"github.com/mewkit/fulfiller/grants"
	"github.com/mewkit/fulfiller/policies"
	"github.com/mewkit/fulfiller/state"
)

// Escalation is what the Fulfiller hands to an Escalator when a policy says
// "escalate": everything a human needs to judge the call, and nothing they
// could use to change which call is judged.
type Escalation struct {
	Proposal agent.Envelope
	Method   string
	Params   json.RawMessage
	Tool     *policies.Tool // nil when the method is not tools/call
	// InputSchema is the tool's JSON Schema from its owner's tools/list,
	// when known: it types the fields an approver may edit.
	InputSchema json.RawMessage
	Target      string // who will carry the call out
	Decision    decision.Decision
	Deadline    time.Time
	// DeadlineByProposer: the proposal's own deadline hint, sooner than
	// the policy's timeout, set Deadline (the approver is told: the
	// proposer stops waiting then).
	DeadlineByProposer bool

	// DecisionID is the decision log's id of the decision that escalated
	// (Decision.Revision is its revision): approval records carry it.
	DecisionID string

	// With a pending-work store (Config.Store), RecordPrompt must be
	// called before each elicitation is sent and RecordApproval for each
	// approval before it counts, so that a restart or an adopting group
	// member asks the same prompts again and counts each approval once.
	// An error means: do not send that prompt (count that approval) and
	// end the escalation with reason "other"; an error wrapping
	// state.ErrConflict means the proposal is another member's now, so
	// its prompts are dropped without notifications/cancelled. Nil: not
	// recorded (an Escalator's own tests).
	RecordPrompt   func(state.Prompt) error
	RecordApproval func(state.Approval) error
	// Prompts and Approvals are what was recorded before a restart or an
	// adoption: the Escalator asks the open prompts again with the same
	// envelope and JSON-RPC ids (so an answer to the earlier copy counts,
	// once) and counts the approvals as already given. Empty for a new
	// escalation.
	Prompts   []state.Prompt
	Approvals []state.Approval
}

// Verdict is how an escalation ended.
type Verdict struct {
	Approved bool
	By       []string        // approvers whose answers count
	Params   json.RawMessage // edited params; nil when approved as proposed
	Content  json.RawMessage // the approvers' form content, for input.approval
	// Grant is how long the grant the approver chose with the approval
	// lasts (the form offered it: the decision's grantable, quorum 1);
	// 0: none.
	Grant time.Duration
	// Evidence is the signed answer that chose the grant; nil when
	// approvals are not signed.
	Evidence *grants.Evidence
	Reason   string // when not approved: the wire reason (disagree, other, timeout, incapable, policy)
	Message  string // when not approved: the human's reason or why it failed
	// Superseded is set when an approver answered the proposer directly
	// (their own mcp/request or mcp/reject): we must not answer again.
	Superseded bool
}

// Escalator asks humans about a proposal. Escalate must not block; it
// reports the outcome by calling done exactly once, unless Cancel for that
// proposal came first (then done must not be called).
type Escalator interface {
	Escalate(ctx context.Context, e Escalation, done func(Verdict))
	Cancel(proposalID, reason string)
}

func (f *Fulfiller) escalate(p *proposal, d decision.Decision, target string) {
	if f.cfg.Escalator == nil {
		f.reject(p, "policy", "the policy asks for human approval, but escalation is not configured on this fulfiller")
		return
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = f.cfg.ApprovalTimeout
	}
	now := f.clock.Now()
	deadline := now.Add(timeout)
	hint, hinted := deadlineHint(p)
	hinted = hinted && hint.Before(deadline)
	if hinted {
		// No human is asked after the proposer has stopped listening.
		if hint.Sub(now) < minHintedDeadline {
			f.reject(p, decision.ReasonTimeout, fmt.Sprintf("the proposal's own deadline (%s) leaves no time to ask a human", hint.UTC().Format(time.RFC3339)))
			return
		}
		deadline = hint
	}
	f.mu.Lock()
	if p.State() != StateDeciding {
		f.mu.Unlock()
		return
	}
	p.state.Store(int32(StateAwaitingApproval))
	p.target = target
	p.deadline = deadline
	p.deadlineHint = hinted
	f.mu.Unlock()
	// Recorded before any human is asked: a restart or an adopter asks
	// them again, with the same deadline. Not waited for on the disk:
	// the first prompt's record is, before that prompt is sent.
	if err := f.noteRecord(p, func(r *state.Pending) {
		g := p.governor()
		r.Phase, r.Decision, r.DecisionID, r.Revision = state.AwaitingApproval, storeDecision(d, target, nil, nil), g.id, g.revision
		r.ApprovalDeadline = p.deadline.UTC()
	}); err != nil {
		f.storeFailed(p, "escalation", err)
		return
	}
	// Then its line, and only then is anyone asked (fail closed: no human
	// is asked before the decision log says so). In this order a crash
	// cannot leave an escalated line for a proposal the restart decides
	// again (a second escalated line, or another answer): the resumed
	// record asks the same prompts, with a resumed line. What a crash
	// between the two writes loses is this line, never a second one.
	ev := p.event(StageEscalated)
	ev.Target, ev.By, ev.Message, ev.Deadline = target, d.Approvers, d.Message, deadline
	if err := f.record(ev); err != nil {
		f.unrecorded(p, "escalation", err)
		return
	}
	f.announce(ev)
	f.askHumans(p, d, target, nil, nil)
	f.sendStatus(p, ev)
}

// minHintedDeadline: a proposer's deadline sooner than this from now is
// treated as passed — no human can read a card that fast.
const minHintedDeadline = 2 * time.Second

// askHumans hands p to the Escalator; prompts and approvals are those
// recorded before a restart or adoption (nil for a new escalation).
func (f *Fulfiller) askHumans(p *proposal, d decision.Decision, target string, prompts []state.Prompt, approvals []state.Approval) {
	esc := Escalation{Proposal: p.env, DecisionID: p.governor().id, Method: p.method, Params: p.params, Target: target, Decision: d, Deadline: p.deadline, DeadlineByProposer: p.deadlineHint}
	if p.tool != "" {
		esc.Tool = f.toolInput(p, target, p.params)
		if info, ok := f.catalog.tool(target, p.tool); ok {
			esc.InputSchema = info.InputSchema
		}
	}
	esc.Prompts, esc.Approvals = prompts, approvals
	esc.RecordPrompt = func(pr state.Prompt) error {
		return f.saveRecord(p, func(r *state.Pending) { r.Prompts = append(r.Prompts, pr) })
	}
	esc.RecordApproval = func(a state.Approval) error {
		return f.noteRecord(p, func(r *state.Pending) { r.Approvals = append(r.Approvals, a) })
	}
	f.cfg.Escalator.Escalate(f.base, esc, func(v Verdict) { f.onVerdict(p, v) })
}

// onVerdict applies a human verdict (rule 7 of docs/design.md).
func (f *Fulfiller) onVerdict(p *proposal, v Verdict) {
	if p.State() != StateAwaitingApproval {
		return
	}
	switch {
	case v.Superseded:
		if _, ok := f.transition(p, StateSuperseded, notAnswered); ok {
			ev := p.event(StageSuperseded)
			ev.By, ev.Message = v.By, v.Message
			f.emit(ev)
		}
		return
	case !v.Approved:
		reason := v.Reason
		if reason == "" {
			reason = "disagree"
		}
		f.reject(p, reason, v.Message)
		return
	}
	ev := p.event(StageApproved)
	ev.By = v.By
	f.emit(ev)
	f.mu.Lock()
	p.approvedBy = v.By
	f.mu.Unlock()
	if v.Params == nil {
		f.makeGrant(p, v, p.target, p.params)
		f.fulfil(p, p.target, p.params)
		return
	}
	// Edited arguments: the edited call must pass the policy on its own.
	in := f.input(p, v.Params, &policies.Approval{By: v.By, Content: v.Content})
	d := f.decider.Decide(f.decideCtx, in)
	p.decided(d.Revision, true) // a new decision: it governs what follows
	dev := p.event(StageDecided)
	dev.Decision, dev.Input = &d, in
	f.emit(dev)
	f.shadow(p, in, d)
	switch d.Action {
	case decision.Fulfill:
	case decision.Escalate:
		if !approvalsSatisfy(v.By, d) {
			f.reject(p, "policy", "the edited call needs other approval: "+d.Message)
			return
		}
	default:
		reason := d.Reason
		if reason == "" {
			reason = "policy"
		}
		f.reject(p, reason, d.Message)
		return
	}
	target := p.target
	if d.Target != "" {
		target = d.Target
	}
	f.makeGrant(p, v, target, v.Params)
	f.fulfil(p, target, v.Params)
}

// approvalsSatisfy reports whether the approvers who already approved meet
// an escalate decision's approvers and quorum.
func approvalsSatisfy(by []string, d decision.Decision) bool {
	quorum := max(d.Quorum, 1)
	n := 0
	for _, who := range by {
		if len(d.Approvers) == 0 || slices.Contains(d.Approvers, who) {
			n++
		}
	}
	return n >= quorum
}
