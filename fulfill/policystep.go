package fulfill

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/grants"
	"github.com/mewkit/fulfiller/fulfill/grants/grantstore"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/policies"
)

// policyStep is the lifecycle's Policy (lifecycle.Policy): what fulfill
// does between a proposal's claim and the action on its decision (decide,
// act's routing, escalate's checks, and onVerdict's re-check of an edited
// call), on the Proposal the core hands it rather than on a *proposal.
// It builds the policy input (what the front end knows of the proposal
// and its tool, with grants and load), asks the Decider, emits
// the decided event (the decision log's line: the core's own is dropped
// by the shell's journal), hands the decision to the shadow policy, and
// answers the core with the decision routed (FrontEnd.Route): the peer
// that carries the call out, or why there is none; whether the call goes out as a
// task; the approval deadline the proposer's own hint shortens. It never
// fails: the Decider's errors are fail-closed rejects, as today.
type policyStep struct {
	// fe is the front end the proposals came in by: what the policy
	// input needs of it (proposer, space, the tool's description) and
	// the route of a decision.
	fe      FrontEnd
	decider Decider
	cfg     policyConfig
	obs     Observer
	shadows *shadowing           // nil: no shadow policy
	grants  *grantstore.Registry // nil: grants are off
	log     *slog.Logger
	clock   lifecycle.Clock

	// evalSlots bounds concurrent evaluations to DecideWorkers: the
	// Loop runs each proposal's Decide on a goroutine of its own, so
	// without it a burst would evaluate as many policies at once as
	// proposals are pending.
	evalSlots chan struct{}
	// grantsLate logs once that decisions went ahead before the store's
	// grants were loaded (awaitStoredGrants).
	grantsLate sync.Once
}

var _ lifecycle.Policy = (*policyStep)(nil)

// policyConfig is what the policy step reads of a Config (with its
// defaults set): see policyConfigOf.
type policyConfig struct {
	MaxPending      int           // input.agent.max_pending
	DecideWorkers   int           // concurrent evaluations
	ApprovalTimeout time.Duration // a human's deadline when the decision sets none
	TaskTimeout     time.Duration // a task's, when the decision sets none
	// Escalation: Config.Approvals is set; without it a decision to
	// escalate is rejected "policy".
	Escalation   bool
	ToolMetadata ToolMetadata // nil: nothing declared
}

// minHintedDeadline: a proposer's deadline sooner than this from now is
// treated as passed — no human can read a card that fast.
const minHintedDeadline = 2 * time.Second

// policyConfigOf is the policy step's part of cfg, whose defaults are set.
func policyConfigOf(cfg Config) policyConfig {
	return policyConfig{MaxPending: cfg.MaxPending, DecideWorkers: cfg.DecideWorkers,
		ApprovalTimeout: cfg.ApprovalTimeout, TaskTimeout: cfg.TaskTimeout,
		Escalation: cfg.Approvals != nil, ToolMetadata: cfg.ToolMetadata}
}

// newPolicyStep makes the policy step. shadows is the shadowing the
// caller runs with runShadow (nil: no shadow policy); grants is
// Config.Grants (nil: off). cfg.DecideWorkers below 1 counts as 1.
func newPolicyStep(fe FrontEnd, decider Decider, cfg policyConfig, obs Observer, shadows *shadowing,
	grants *grantstore.Registry, log *slog.Logger, clock lifecycle.Clock) *policyStep {
	if obs == nil {
		obs = Observers(nil)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if clock == nil {
		clock = lifecycle.SystemClock{}
	}
	return &policyStep{fe: fe, decider: decider, cfg: cfg, obs: obs, shadows: shadows, grants: grants,
		log: log, clock: clock, evalSlots: make(chan struct{}, max(cfg.DecideWorkers, 1))}
}

// Decide answers the core's Decide: the proposal's first decision, or
// the re-check of a call an approver edited (Again).
func (s *policyStep) Decide(ctx context.Context, d lifecycle.Decide) lifecycle.Decided {
	if d.Again {
		return s.recheck(ctx, d)
	}
	p := &d.Proposal
	// The first decision's target is the one the proposal's `to` named:
	// routing has not run yet.
	in := s.policyInput(ctx, p, p.Addressee, p.Params, nil, d.Pending, d.Inflight)
	start := time.Now()
	dec, ok := s.evaluate(ctx, in)
	if !ok {
		return shutDecided(d)
	}
	latency := time.Since(start)
	// The decision log keeps the policy's own decision (and offer): the
	// copy is the event's, d is what is acted on.
	logged := dec
	ev := s.event(StageDecided, p, p.DecisionID, dec.Revision, p.Addressee)
	ev.Decision, ev.Latency, ev.Input = &logged, latency, in
	ev.GrantID = s.grantThatDecided(ctx, in, dec)
	if dec.Err != nil {
		s.log.Error("policy failed closed", "proposal", p.ID, "err", dec.Err)
	}
	note := &decidedNote{step: s, ev: ev, in: in, dec: dec}
	dec.Grantable = s.grantOffer(dec.Grantable)
	out := s.act(ctx, d, dec, in.Tool)
	out.Note = note
	return out
}

// decidedNote is a decision's record (its decided event, with the
// policy's input, and its shadow evaluation), told to the observers only
// when the core logs the decided line (journal.Log): once the decision
// governs the proposal. A decision the core does not take (the proposal
// ended meanwhile, or, decided beside its claim, the claim was lost to a
// replay's original) leaves no decision record (rule 10).
type decidedNote struct {
	step *policyStep
	ev   Event
	in   *policies.Input
	dec  decision.Decision
}

func (n *decidedNote) log() {
	n.step.emit(n.ev)
	n.step.shadow(n.ev, n.in, n.dec)
}

// act is what the first decision becomes before anything is recorded: the route (or why there is none, for a
// fulfil and an escalation alike: rule 1, nobody is asked about a call
// nobody can carry out), the task choice, and for an escalation the
// checks that reject it here (no Config.Approvals; the proposer's deadline
// hint leaves no time) and the deadline the hint shortens.
//
// described is the tool of the proposal's call to its addressee, with
// its params (the policy input's), nil when not known: what the task
// choice reads when the route is the addressee, not asked of the front
// end again.
func (s *policyStep) act(ctx context.Context, d lifecycle.Decide, dec decision.Decision, described *policies.Tool) lifecycle.Decided {
	p := &d.Proposal
	out := lifecycle.Decided{ID: d.ID}
	if dec.Action != decision.Fulfill && dec.Action != decision.Escalate {
		out.Decision = coreDecision(dec, "", false)
		return out
	}
	target, why := s.fe.Route(ctx, p, p.Addressee, dec)
	if target == "" {
		out.Decision, out.Incapable = coreDecision(dec, "", false), why
		return out
	}
	hinted := false
	if dec.Action == decision.Escalate {
		if !s.cfg.Escalation {
			out.Decision = shellReject(dec, decision.ReasonPolicy, noEscalationMessage)
			return out
		}
		timeout := dec.Timeout
		if timeout <= 0 {
			timeout = s.cfg.ApprovalTimeout
		}
		now := s.clock.Now()
		hint, ok := proposalDeadlineHint(p.Params, p.Received)
		if ok && hint.Before(now.Add(timeout)) {
			// No human is asked after the proposer has stopped listening.
			if hint.Sub(now) < minHintedDeadline {
				out.Decision = shellReject(dec, decision.ReasonTimeout,
					fmt.Sprintf("the proposal's own deadline (%s) leaves no time to ask a human", hint.UTC().Format(time.RFC3339)))
				return out
			}
			// The core counts the approval deadline from when it takes
			// the decision: the time left until the hint.
			dec.Timeout, hinted = hint.Sub(now), true
		}
	}
	if target != p.Addressee {
		described = nil // a tool at another peer
	}
	out.Decision = s.routed(p, dec, target, hinted, described)
	return out
}

// recheck is onVerdict's re-check of an edited call (rule 7): the edited
// params must pass the policy on their own, with the approval in the
// input. Whether the approvals given satisfy an escalate decision is the
// core's (approvalsSatisfy); the route is the one the escalation had,
// unless the new decision names a target.
func (s *policyStep) recheck(ctx context.Context, d lifecycle.Decide) (out lifecycle.Decided) {
	var note *decidedNote
	defer func() {
		if note != nil {
			out.Note = note
		}
	}()
	p := &d.Proposal
	route := ""
	if p.Decision != nil {
		route = p.Decision.Target
	}
	target := route
	if target == "" {
		target = p.Addressee
	}
	in := s.policyInput(ctx, p, target, d.Params, approvalInput(d.Approvals), d.Pending, d.Inflight)
	dec, ok := s.evaluate(ctx, in)
	if !ok {
		return shutDecided(d)
	}
	logged := dec
	ev := s.event(StageDecided, p, recheckDecisionID(d), dec.Revision, target)
	ev.Decision, ev.Input = &logged, in
	if dec.Err != nil {
		s.log.Error("policy failed closed", "proposal", p.ID, "err", dec.Err)
	}
	note = &decidedNote{step: s, ev: ev, in: in, dec: dec}
	dec.Grantable = s.grantOffer(dec.Grantable)
	out = lifecycle.Decided{ID: d.ID, Again: true}
	if dec.Action != decision.Fulfill && dec.Action != decision.Escalate {
		out.Decision = coreDecision(dec, "", false)
		return out
	}
	if dec.Target != "" {
		route = dec.Target
	}
	if route == "" {
		// A record from before routing was kept with the decision (it
		// cannot be asked about otherwise): route it now.
		var why string
		if route, why = s.fe.Route(ctx, p, p.Addressee, dec); route == "" {
			out.Decision, out.Incapable = coreDecision(dec, "", false), why
			return out
		}
	}
	out.Decision = s.routed(p, dec, route, false, nil)
	return out
}

// recheckDecisionID is the id of the re-check's decision, which governs
// what follows it (rule 10): the core mints it with the Decide and adopts
// it with the answer.
func recheckDecisionID(d lifecycle.Decide) string { return d.DecisionID }

// routed is the core's decision for dec routed to target: with the task
// choice (callsAsTask: described, when not nil, is the tool of p's call
// at target) and the task's timeout (taskTimeout).
func (s *policyStep) routed(p *lifecycle.Proposal, dec decision.Decision, target string, hinted bool, described *policies.Tool) lifecycle.Decision {
	cd := coreDecision(dec, target, hinted)
	cd.Task = s.callsAsTask(p, target, dec.Task, described)
	if cd.Task {
		cd.TaskTimeout = dec.TaskTimeout
		if cd.TaskTimeout <= 0 {
			cd.TaskTimeout = s.cfg.TaskTimeout
		}
	}
	return cd
}

// shellReject is the reject the step makes of the policy's decision dec
// (escalation not configured; no time to ask a human): the revision that
// decided stays the decision's.
func shellReject(dec decision.Decision, reason, message string) lifecycle.Decision {
	return coreDecision(decision.Decision{Action: decision.Reject, Reason: reason, Message: message, Revision: dec.Revision}, "", false)
}

// shutDecided answers a Decide whose context ended before a policy could
// be asked (the Loop is stopping and drops the answer): fail closed.
func shutDecided(d lifecycle.Decide) lifecycle.Decided {
	return lifecycle.Decided{ID: d.ID, Again: d.Again,
		Decision: lifecycle.Decision{Action: lifecycle.Reject, Reason: "other", Message: "the fulfiller is shutting down"}}
}

// Evaluators is how many decisions the step evaluates at once
// (DecideWorkers): the Loop asks it on that many goroutines
// (lifecycle.Evaluators).
func (s *policyStep) Evaluators() int { return cap(s.evalSlots) }

// evaluate asks the policy, once an evaluation slot is free; ok is false
// when ctx ended first.
func (s *policyStep) evaluate(ctx context.Context, in *policies.Input) (decision.Decision, bool) {
	select {
	case s.evalSlots <- struct{}{}:
	case <-ctx.Done():
		return decision.Decision{}, false
	}
	defer func() { <-s.evalSlots }()
	return s.decider.Decide(ctx, in), true
}

// event is the event of stage for p as the decision decisionID of
// revision governs it, with target as known at that step.
func (s *policyStep) event(stage Stage, p *lifecycle.Proposal, decisionID, revision, target string) Event {
	return Event{Stage: stage, FrontEnd: s.frontEndOf(p), ProposalID: p.ID, DecisionID: decisionID, Revision: revision, Proposer: p.From,
		Method: p.Method, Tool: p.Tool, Target: target, LogFields: p.Log}
}

func (s *policyStep) emit(e Event) {
	if e.Time.IsZero() {
		e.Time = s.clock.Now()
	}
	stamp(&e)
	s.obs.Observe(e)
}

// approvalInput is input.approval for the re-check: who approved, and
// the form content of the last approval (the one whose edit is checked).
func approvalInput(approvals []lifecycle.Approval) *policies.Approval {
	a := &policies.Approval{}
	for _, ap := range approvals {
		a.By = append(a.By, ap.Approver)
	}
	if n := len(approvals); n > 0 {
		a.Content = approvals[n-1].Content
	}
	return a
}

// frontEndOf is input.front_end of p: the front end it came in by (a
// record of a build before there were two names none: it came in by
// this one, the only front end there was).
func (s *policyStep) frontEndOf(p *lifecycle.Proposal) string {
	if p.FrontEnd != "" {
		return p.FrontEnd
	}
	return s.fe.Name()
}

// policyInput builds the policy input document for p (docs/design.md,
// Policy contract): params are the proposal's,
// or an approver's edit of them; approval is set only for the re-check;
// target is the participant the call goes to as known at this step (the
// addressee, then the route). Fields that are not known are left out,
// never invented. The front end fills in what only it knows (the
// proposer, the space, this agent's id); the load is the core's.
func (s *policyStep) policyInput(ctx context.Context, p *lifecycle.Proposal, target string, params json.RawMessage, approval *policies.Approval, pending, inflight int) *policies.Input {
	in := &policies.Input{
		FrontEnd: s.frontEndOf(p),
		Proposal: p.Envelope, // the proposal as received, byte for byte
		Method:   p.Method,
		Params:   params,
		Approval: approval,
		Now:      s.clock.Now().UTC(),
	}
	if p.Tool != "" {
		in.Tool, _ = s.toolDescription(p, target, params)
		in.Grants = s.grantsFor(ctx, p.From, in.Tool, in.Now)
	}
	s.fe.Input(ctx, p, in)
	if in.Proposer == nil {
		in.Proposer = &policies.Participant{ID: p.From}
	}
	in.Agent.Pending, in.Agent.Inflight, in.Agent.MaxPending = pending, inflight, s.cfg.MaxPending
	return in
}

// toolDescription is input.tool of p's call to target with params, and
// the tool's input schema: what the front end knows of it (name and
// arguments from params, the tool as its owner lists it), with the
// operator's declared annotations (Config.ToolMetadata) in place of the
// owner's. While the owner is unknown nothing is declared either: an
// entry for the owner might have applied, so no "*" entry is guessed in
// its place.
func (s *policyStep) toolDescription(p *lifecycle.Proposal, target string, params json.RawMessage) (*policies.Tool, json.RawMessage) {
	t, schema := s.fe.Tool(p, target, params)
	if t == nil {
		return nil, nil
	}
	if t.Server == "" {
		return t, schema
	}
	t.Annotations = t.OwnerAnnotations
	if s.cfg.ToolMetadata != nil {
		t.Annotations, _ = s.cfg.ToolMetadata.Annotate(t.Server, t.Name, t.OwnerAnnotations)
	}
	return t, schema
}

// grantsFor are the live grants covering a call, as input.grants (nil
// without grants: the field is then absent; an empty list when grants
// are on and none covers it).
func (s *policyStep) grantsFor(ctx context.Context, proposer string, t *policies.Tool, now time.Time) []json.RawMessage {
	if s.grants == nil || t == nil || t.Name == "" {
		return nil
	}
	s.awaitStoredGrants(ctx)
	if !s.grants.Names(t.Name) {
		// No grant is for this tool: skip decoding its arguments.
		return []json.RawMessage{}
	}
	var out []json.RawMessage
	for _, g := range s.grants.Matching(grantCall(proposer, t), now) {
		b, err := json.Marshal(g)
		if err != nil {
			continue
		}
		out = append(out, b)
	}
	if out == nil {
		out = []json.RawMessage{}
	}
	return out
}

// awaitStoredGrants is awaitGrants: it waits until the grants in the
// store are mirrored (the registry's Ready, which /readyz reads too), at
// most grantsLoadWait, or until ctx ends (shutdown). A proposal read in the first moments after a
// restart would otherwise be decided as if no grant existed, and a human
// asked again about a call a grant covers. Past the wait it decides
// without them (a missing grant asks a human: the safe side). It waits
// on the wall clock, not the step's: the store's load is real time.
func (s *policyStep) awaitStoredGrants(ctx context.Context) {
	ready := s.grants.Ready()
	select {
	case <-ready:
		return
	default:
	}
	t := time.NewTimer(grantsLoadWait)
	defer t.Stop()
	select {
	case <-ready:
	case <-ctx.Done():
	case <-t.C:
		s.grantsLate.Do(func() {
			s.log.Warn("grants in the state store not loaded yet; deciding without them (humans are asked where a grant would have allowed)", "waited", grantsLoadWait)
		})
	}
}

// grantOffer is the policy's offer without its
// "proposer" pin unless the gateway authenticates senders.
func (s *policyStep) grantOffer(g *decision.Grantable) *decision.Grantable {
	if g == nil || (s.grants != nil && s.grants.AuthenticatesFrom()) {
		return g
	}
	return g.WithoutProposer()
}

// grantThatDecided names the grant that let a fulfil decision through:
// the policy fulfils with input.grants and would not without them. The
// second evaluation is paid only for fulfils that had grants.
func (s *policyStep) grantThatDecided(ctx context.Context, in *policies.Input, d decision.Decision) string {
	if d.Action != decision.Fulfill || len(in.Grants) == 0 {
		return ""
	}
	without := *in
	without.Grants = []json.RawMessage{}
	if s.decider.Decide(ctx, &without).Action == decision.Fulfill {
		return "" // fulfilled on its own merits
	}
	var g struct {
		ID string `json:"id"`
	}
	_ = agent.Unmarshal(in.Grants[0], &g) // the oldest covering grant
	return g.ID
}

// callsAsTask reports whether a call to the tool at target goes
// out task-augmented: when the tool, as its owner lists it, requires it,
// or allows it and the decision asks for it (want). described, when not
// nil, is that tool as the front end described it already (the policy
// input's): it is not asked again.
func (s *policyStep) callsAsTask(p *lifecycle.Proposal, target string, want bool, described *policies.Tool) bool {
	if p.Method != agent.MethodToolsCall || p.Tool == "" {
		return false
	}
	t := described
	if t == nil {
		t, _ = s.fe.Tool(p, target, p.Params)
	}
	if t == nil || t.Server == "" {
		return false
	}
	switch (ToolInfo{Execution: t.Execution}).TaskSupport() {
	case TaskRequired:
		return true
	case TaskOptional:
		return want
	}
	return false
}

// proposalDeadlineHint is deadlineHint: the proposer's own deadline from
// params._meta, "deadline" (RFC 3339) or "timeout_ms" (counted from
// received, when the proposal arrived); the sooner when both are given.
// It only ever shortens what the policy allows: a proposer can make
// itself be answered sooner, never make a human wait longer.
func proposalDeadlineHint(params json.RawMessage, received time.Time) (time.Time, bool) {
	var doc struct {
		Meta struct {
			Deadline  string   `json:"deadline"`
			TimeoutMS *float64 `json:"timeout_ms"`
		} `json:"_meta"`
	}
	if len(params) == 0 || agent.Unmarshal(params, &doc) != nil {
		return time.Time{}, false
	}
	var hint time.Time
	if doc.Meta.Deadline != "" {
		if t, err := time.Parse(time.RFC3339Nano, doc.Meta.Deadline); err == nil {
			hint = t
		}
	}
	if ms := doc.Meta.TimeoutMS; ms != nil && *ms >= 0 && *ms < float64(365*24*time.Hour/time.Millisecond) {
		t := received.Add(time.Duration(*ms) * time.Millisecond)
		if hint.IsZero() || t.Before(hint) {
			hint = t
		}
	}
	return hint, !hint.IsZero()
}

// shadow hands the live decision d, made on input in and logged as the
// decided event ev, to the shadow policy (runShadow). It never blocks: a
// full queue drops the job, counted by an event with Dropped set.
func (s *policyStep) shadow(ev Event, in *policies.Input, d decision.Decision) {
	if s.shadows == nil {
		return
	}
	j := shadowJob{ev: s.shadowEvent(ev), in: in, live: d}
	select {
	case s.shadows.queue <- j:
	default:
		j.ev.Shadow = &ShadowResult{Live: d.Action, Dropped: true}
		s.emit(j.ev)
	}
}

// shadowEvent is the StageShadow event of the decision ev logs: governed
// by it, stamped when the shadow has answered.
func (s *policyStep) shadowEvent(ev Event) Event {
	return Event{Stage: StageShadow, FrontEnd: ev.FrontEnd, ProposalID: ev.ProposalID, DecisionID: ev.DecisionID, Revision: ev.Revision,
		Proposer: ev.Proposer, Method: ev.Method, Tool: ev.Tool, Target: ev.Target, LogFields: ev.LogFields}
}

// runShadow evaluates the shadow policy on the queued
// decisions until ctx ends; what is still queued then is dropped
// (counted). The shell runs it on a goroutine it owns, beside the Loop,
// and ends its ctx once the Loop's Run has returned (the Loop's Decides
// are the last to hand it decisions). Without a shadow policy it returns
// at once.
func (s *policyStep) runShadow(ctx context.Context) {
	sh := s.shadows
	if sh == nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			for {
				select {
				case j := <-sh.queue:
					j.ev.Shadow = &ShadowResult{Live: j.live.Action, Dropped: true}
					s.emit(j.ev)
				default:
					return
				}
			}
		case j := <-sh.queue:
			// The evaluation in progress when ctx ends is finished (it is
			// bounded by the timeout) rather than cut into an error.
			r := sh.evaluate(context.WithoutCancel(ctx), j.in, j.live)
			j.ev.Shadow = &r
			s.emit(j.ev)
		}
	}
}

// grantCall is what grants are matched against for a tools/call.
func grantCall(proposer string, t *policies.Tool) grants.Call {
	c := grants.Call{Proposer: proposer, Tool: t.Name, Server: t.Server}
	_ = agent.Unmarshal(t.Arguments, &c.Arguments) // arguments that are not an object match no pin
	return c
}

// grantsLoadWait bounds how long a decision waits for the store's grants
// the first time, after a start.
const grantsLoadWait = 10 * time.Second
