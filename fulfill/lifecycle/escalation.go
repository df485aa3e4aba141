package lifecycle

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/fulfill/decision"
)

// MaxDelegationHops bounds a delegation chain: a prompt handed on this
// many times offers no delegate_to.
const MaxDelegationHops = 3

// KeySet is the approver key set in force: whether an approver's answers
// must be signed. The Codec verifies under it (its own type behind it).
type KeySet interface{ Has(approver string) bool }

// Codec builds the core's prompts and reads the answers to them: pure
// functions of their inputs (elicit's is the shell's; the tests use a
// fake one).
type Codec interface {
	// Prompt is the elicitation/create payload asking spec.Approver
	// about p: message, requestedSchema (the editable arguments, the
	// delegates and grants offered), _meta, and the prompt's signature
	// when prompts are signed. An error: the prompt cannot be made (not
	// signed), and is not sent.
	Prompt(p *Proposal, spec PromptSpec) (json.RawMessage, error)
	// Read verifies the answer payload to prompt pr of p under keys and
	// reads its form.
	Read(p *Proposal, pr Prompt, payload json.RawMessage, keys KeySet) Verified
	// Recount reads again the call a recorded approval approved (its
	// content, under p's editable fields): its params (nil as proposed)
	// and key, or why it cannot be used.
	Recount(p *Proposal, a Approval) (params json.RawMessage, key string, err error)
	// Offers reads what a recorded prompt's payload offered (delegates,
	// grant durations), for a prompt recorded without them.
	Offers(payload json.RawMessage) (delegates, grants []string)
}

// PromptSpec is what one prompt asks: of whom, with which ids, handed on
// along Chain, under the escalation's approvers so far and quorum,
// offering Delegates and Grants.
type PromptSpec struct {
	Approver   string
	EnvelopeID string
	RPCID      int64
	Chain      []string
	Approvers  []string
	Quorum     int
	Delegates  []string
	Grants     []string
}

// AnswerKind is what a verified answer amounts to.
type AnswerKind int

// Kinds of verified answers.
const (
	AnswerIgnored   AnswerKind = iota // not a usable answer (Why)
	AnswerForgery                     // unsigned or badly signed for a keyed approver (Why)
	AnswerFailed                      // the approver's client answered with an error (Why: its message)
	AnswerCancelled                   // cancel
	AnswerDeclined                    // decline, or accept without approve: true
	AnswerDelegated                   // handed on to DelegateTo
	AnswerApproved                    // accept with approve: true
)

// Verified is an answer as the Codec read it.
type Verified struct {
	Kind       AnswerKind
	Why        string // ignored, forgery: why; failed: the client's error
	Action     string // accept, decline, cancel
	Reason     string // the approver's own reason
	DelegateTo string
	// An approval: the edited params (nil as proposed) and the key of
	// the call approved, or why the edit cannot be used (Unusable); the
	// form content without its signature, and the signature's evidence
	// (Signed).
	Params    json.RawMessage
	Key       string
	Unusable  string
	Content   json.RawMessage
	Signed    bool
	Request   string
	Signature string
	// Grant is the grant duration chosen ("" none); GrantBad: the field
	// was there but not a string; GrantRaw: the field as sent.
	Grant    string
	GrantBad bool
	GrantRaw string
}

// planStep is one reminder (tier nil) or one escalate_to tier.
type planStep struct {
	at   time.Duration
	tier *decision.Tier
}

// escalation is the state of e's escalation (made when missing: a
// record of an earlier build).
func escOf(p *Proposal) *Escalation {
	if p.Escalation == nil {
		p.Escalation = &Escalation{}
	}
	return p.Escalation
}

func quorumOf(p *Proposal) int { return max(p.Decision.Quorum, 1) }

// plan lays out p's reminders and tiers in time order from its Since:
// steps not before the deadline are left out (dropped lists them).
// Stable: at the same time, reminders (listed first) go before a tier,
// so that a reminder does not go to those just asked.
func plan(p *Proposal) (steps, dropped []planStep) {
	d := p.Decision
	var all []planStep
	for _, r := range d.Reminders {
		all = append(all, planStep{at: r})
	}
	for i := range d.EscalateTo {
		all = append(all, planStep{at: d.EscalateTo[i].After, tier: &d.EscalateTo[i]})
	}
	slices.SortStableFunc(all, func(a, b planStep) int { return cmp.Compare(a.at, b.at) })
	since := escOf(p).Since
	for _, st := range all {
		if !since.Add(st.at).Before(p.Deadline) {
			dropped = append(dropped, st)
			continue
		}
		steps = append(steps, st)
	}
	return steps, dropped
}

// online reports whether approver a is in the space, as this member
// heard: the roster of its welcome and the joins and leaves since
// (before any roster: present unless it left).
func (c *Core) online(a string) bool {
	if a == "" {
		return false
	}
	if c.rosterKnown {
		return c.present[a]
	}
	return !c.away[a]
}

// promptID mints a prompt's envelope id (its JSON-RPC id comes from
// step.rpcID, as every JSON-RPC id the core puts on the wire).
func (c *Core) promptID() string { return c.ids.PromptID() }

// human emits a step of e's escalation with its humans.
func (s *step) human(e *entry, h Human) {
	h.ID, h.At, h.DecisionID, h.Revision = e.p.ID, s.now, e.p.DecisionID, revisionOf(e.p)
	h.FrontEnd, h.Log = e.p.FrontEnd, e.p.Log
	s.emit(h)
}

// notice describes p's escalation asking asked.
func notice(p *Proposal, asked []string, resumed bool) *Notice {
	n := &Notice{Proposer: p.From, Method: p.Method, Tool: p.Tool, Target: p.Decision.Target, Params: p.Params,
		Asked: asked, Quorum: quorumOf(p), Deadline: p.Deadline, Resumed: resumed}
	if p.Decision.NotifyArguments {
		n.Arguments = p.Params
	}
	return n
}

// answered reports whether approver a answered (or handed on, or had an
// approval counted) in p's escalation.
func answered(p *Proposal, a string) bool {
	for i := range p.Prompts {
		pr := &p.Prompts[i]
		if pr.Approver == a && (pr.State == PromptAnswered || pr.State == PromptHandedOn || pr.Answered) {
			return true
		}
	}
	return slices.ContainsFunc(p.Approvals, func(x Approval) bool { return x.Approver == a })
}

// holdsOpen reports whether approver a has an open prompt.
func holdsOpen(p *Proposal, a string) bool {
	return slices.ContainsFunc(p.Prompts, func(pr Prompt) bool { return pr.Approver == a && pr.open() })
}

// openApprovers are the approvers with an open prompt, once each, in
// the order asked.
func openApprovers(p *Proposal) []string {
	var out []string
	for i := range p.Prompts {
		if pr := &p.Prompts[i]; pr.open() && !slices.Contains(out, pr.Approver) {
			out = append(out, pr.Approver)
		}
	}
	return out
}

// delegatesFor lists whom a prompt at approver may be handed on to:
// other approvers of the escalation who are in the space and have not
// answered, never back along the chain, at most MaxDelegationHops times;
// with a quorum above one not those asked already (a second prompt would
// cost a distinct approval).
func (c *Core) delegatesFor(p *Proposal, approver string, chain []string) []string {
	if len(chain) >= MaxDelegationHops {
		return nil
	}
	var out []string
	for _, a := range escOf(p).Approvers {
		switch {
		case a == approver, slices.Contains(chain, a), a == p.From, answered(p, a), !c.online(a):
		case quorumOf(p) > 1 && holdsOpen(p, a):
		default:
			out = append(out, a)
		}
	}
	return out
}

// grantOffers are the grant durations p's form offers: none unless grants
// are on, the decision is grantable and one approval decides.
func (c *Core) grantOffers(p *Proposal) []string {
	g := p.Decision.Grantable
	if !c.cfg.OfferGrants || g == nil || quorumOf(p) != 1 {
		return nil
	}
	var out []string
	for _, d := range g.Offers() {
		out = append(out, decision.FormatGrantDuration(d))
	}
	return out
}

// newPrompts mints a prompt for each of approvers (handed on along
// chain) and adds them to e's proposal, unsent: they go out once the
// record holding them is durable (sendPrompts). All are registered
// before any is made, as elicit registered its seats before it asked:
// a form offers as delegates only those who hold no prompt (quorum
// above one). One that cannot be made is recorded as unsent.
func (s *step) newPrompts(e *entry, approvers []string, chain []string) []string {
	c, p := s.c, e.p
	first := len(p.Prompts)
	var ids []string
	for _, a := range approvers {
		pr := Prompt{Approver: a, EnvelopeID: c.promptID(), RPCID: s.rpcID(), Chain: chain, Sent: s.now.UTC(),
			Signed: c.keys != nil && c.keys.Has(a)}
		p.Prompts = append(p.Prompts, pr)
		c.byPrompt[pr.EnvelopeID] = p.ID
		ids = append(ids, pr.EnvelopeID)
	}
	for i := first; i < len(p.Prompts); i++ {
		pr := &p.Prompts[i]
		pr.Delegates = c.delegatesFor(p, pr.Approver, chain)
		pr.Grants = c.grantOffers(p)
		spec := PromptSpec{Approver: pr.Approver, EnvelopeID: pr.EnvelopeID, RPCID: pr.RPCID, Chain: chain,
			Approvers: slices.Clone(escOf(p).Approvers), Quorum: quorumOf(p), Delegates: pr.Delegates, Grants: pr.Grants}
		payload, err := c.cfg.Codec.Prompt(p, spec)
		if err != nil {
			pr.State = PromptUnsent
			escOf(p).LastErr = fmt.Sprintf("the request to %s could not be signed", pr.Approver)
		}
		pr.Payload = payload
	}
	return ids
}

// newPrompt is newPrompts for one approver.
func (s *step) newPrompt(e *entry, approver string, chain []string) string {
	return s.newPrompts(e, []string{approver}, chain)[0]
}

// sendPrompts sends e's prompts named by ids, recorded now, if still open
// while e's escalation runs.
func (s *step) sendPrompts(e *entry, ids []string) {
	if e.outcome != Open || e.p.Phase != AwaitingApproval || e.decide.state != decideNone || !e.asked {
		return
	}
	for _, id := range ids {
		i := slices.IndexFunc(e.p.Prompts, func(pr Prompt) bool { return pr.EnvelopeID == id })
		if i < 0 || !e.p.Prompts[i].open() {
			continue
		}
		pr := e.p.Prompts[i]
		s.emit(SendPrompt{ID: e.p.ID, To: pr.Approver, EnvelopeID: pr.EnvelopeID, RPCID: pr.RPCID, Payload: pr.Payload})
		s.human(e, Human{Kind: HumanAsked, Approver: pr.Approver, RequestID: pr.EnvelopeID})
	}
}

// recordPrompts writes e's record with the prompts ids minted, sent once
// it is durable; with none, the record is written Soon (nothing sent
// waits for it).
func (s *step) recordPrompts(e *entry, ids []string) {
	if len(ids) == 0 {
		s.queueWrite(e, pendingWrite{rec: e.p.clone(), soon: true})
		return
	}
	s.queueWrite(e, pendingWrite{rec: e.p.clone(), then: thenPrompts, prompts: ids})
}

// startEscalation opens e's escalation (its decision escalates): whom
// to ask, its plan, its first prompts. It reports false when it ended at
// once (rejected).
func (s *step) startEscalation(e *entry) bool {
	c, p := s.c, e.p
	approvers := c.approvers(p)
	x := &Escalation{Approvers: slices.Clone(approvers), Since: s.now.UTC(), Started: s.now.UTC()}
	p.Escalation = x
	if len(approvers) == 0 {
		s.commitReject(e, "incapable", "the policy asks for human approval, but names no approvers and none are configured (--approvers)")
		return false
	}
	if _, err := approval.CallDigest(p.Method, p.Params); err != nil {
		// An approval names its call by this digest: a call without one
		// (an integer past 2^53 reads as its neighbour) is never put to a
		// human, whose approval could pass for another call.
		s.commitReject(e, "incapable", fmt.Sprintf("the policy asks for human approval, but the call cannot be shown to an approver: %v", err))
		return false
	}
	_, dropped := plan(p)
	for _, st := range dropped {
		what := "reminder"
		if st.tier != nil {
			what = "escalate_to tier"
		}
		s.human(e, Human{Kind: HumanStepDropped, Reason: what + " not before the deadline; it will not happen", After: st.at})
	}
	var online []string
	for _, a := range approvers {
		switch {
		case a == p.From:
			s.human(e, Human{Kind: HumanSkipped, Approver: a, Reason: "the proposer cannot approve its own proposal"})
		case !c.online(a):
			s.human(e, Human{Kind: HumanSkipped, Approver: a, Reason: "not in the space"})
		default:
			online = append(online, a)
		}
	}
	if q := quorumOf(p); len(online) < q {
		s.commitReject(e, "incapable", tooFew(approvers, online, q))
		return false
	}
	s.newPrompts(e, online, nil)
	return true
}

func tooFew(approvers, online []string, quorum int) string {
	listed := strings.Join(approvers, ", ")
	if len(online) == 0 {
		return fmt.Sprintf("none of the approvers (%s) is in the space to approve this", listed)
	}
	verb := "are"
	if len(online) == 1 {
		verb = "is"
	}
	return fmt.Sprintf("%s needed, but only %d of the approvers (%s) %s in the space: %s",
		approvalsText(quorum), len(online), listed, verb, strings.Join(online, ", "))
}

// approvalsText says "1 approval", "2 approvals".
func approvalsText(n int) string {
	if n == 1 {
		return "1 approval"
	}
	return fmt.Sprintf("%d approvals", n)
}

// opened asks e's open prompts (its record holds them now) and announces
// the escalation: at its start, and when a record is resumed.
func (s *step) opened(e *entry, resumed bool) {
	p := e.p
	e.asked = true
	var ids []string
	for i := range p.Prompts {
		if p.Prompts[i].open() {
			ids = append(ids, p.Prompts[i].EnvelopeID)
		}
	}
	if resumed {
		s.askAgain(e, "", true)
	} else {
		s.sendPrompts(e, ids)
	}
	escOf(p).Opened = true
	s.human(e, Human{Kind: HumanOpened, Notice: notice(p, openApprovers(p), resumed)})
	s.scheduleStep(e)
}

// scheduleStep asks for the next step of e's plan.
func (s *step) scheduleStep(e *entry) {
	steps, _ := plan(e.p)
	if n := escOf(e.p).PlanDone; n < len(steps) {
		s.emit(Schedule{ID: e.p.ID, At: escOf(e.p).Since.Add(steps[n].at), Kind: TimerStep})
	}
}

// escRunning reports whether e's escalation runs here: open, its
// prompts out, not being decided again.
func (s *step) escRunning(e *entry) bool {
	return e.outcome == Open && e.p.Phase == AwaitingApproval && e.asked && e.decide.state == decideNone
}

// due does every step of e's plan whose time has come (at: the timer's).
func (s *step) due(e *entry, at time.Time) {
	p := e.p
	x := escOf(p)
	steps, _ := plan(p)
	if x.PlanDone >= len(steps) || !at.Equal(x.Since.Add(steps[x.PlanDone].at)) {
		return // stale
	}
	var ids []string
	for x.PlanDone < len(steps) && !x.Since.Add(steps[x.PlanDone].at).After(s.now) {
		st := steps[x.PlanDone]
		x.PlanDone++
		if st.tier == nil {
			if waiting := waitingFor(p); len(waiting) > 0 {
				s.human(e, Human{Kind: HumanReminded, Notice: notice(p, waiting, false)})
			}
			continue
		}
		ids = append(ids, s.escalateTo(e, *st.tier, true)...)
	}
	s.recordPrompts(e, ids)
	if s.settle(e) {
		return
	}
	s.scheduleStep(e)
}

// waitingFor are the approvers whose answer could still come: those with
// an open prompt, then listed approvers not asked yet who have not
// answered; never the proposer.
func waitingFor(p *Proposal) []string {
	out := openApprovers(p)
	for _, a := range escOf(p).Approvers {
		if a != p.From && !answered(p, a) && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// escalateTo makes a tier's approvers approvers of e's escalation too
// (the same quorum, the same deadline): those in the space are asked
// (the ids of their prompts, recorded by the caller), the others when
// they come in. announce: prompt.escalated (not for a tier whose time
// passed while nobody held the proposal).
func (s *step) escalateTo(e *entry, t decision.Tier, announce bool) []string {
	p := e.p
	x := escOf(p)
	var added []string
	for _, a := range t.Approvers {
		if !slices.Contains(x.Approvers, a) {
			added = append(added, a)
		}
	}
	if len(added) == 0 {
		return nil
	}
	x.Approvers = append(x.Approvers, added...)
	var ask []string
	for _, a := range added {
		switch {
		case a == p.From:
			s.human(e, Human{Kind: HumanSkipped, Approver: a, Reason: "the proposer cannot approve its own proposal"})
		case answered(p, a) || holdsOpen(p, a):
		case !s.c.online(a):
			s.human(e, Human{Kind: HumanSkipped, Approver: a, Reason: "not in the space"})
		default:
			ask = append(ask, a)
		}
	}
	if announce {
		s.human(e, Human{Kind: HumanEscalated, Notice: notice(p, added, false)})
	}
	if len(ask) == 0 {
		return nil
	}
	return s.newPrompts(e, ask, nil)
}

// askAgain: who came into the space (everyone, when empty: this member's
// own new session). Every open prompt at an approver here now is sent
// again byte for byte; a listed approver here who holds no open prompt
// and has not answered is asked (recorded first). resumed: the prompts
// are taken up from a record (a restart, an adoption).
func (s *step) askAgain(e *entry, who string, resumed bool) {
	c, p := s.c, e.p
	for i := range p.Prompts {
		pr := p.Prompts[i]
		if !pr.open() || (who != "" && pr.Approver != who) || !c.online(pr.Approver) || len(pr.Payload) == 0 || unrecorded(e, pr.EnvelopeID) {
			continue
		}
		s.emit(SendPrompt{ID: p.ID, To: pr.Approver, EnvelopeID: pr.EnvelopeID, RPCID: pr.RPCID, Payload: pr.Payload, Again: true})
		kind := HumanAskedAgain
		if resumed {
			kind = HumanAsked
		}
		s.human(e, Human{Kind: kind, Approver: pr.Approver, RequestID: pr.EnvelopeID})
	}
	var late []string
	for _, a := range escOf(p).Approvers {
		if (who != "" && a != who) || a == p.From || answered(p, a) || holdsOpen(p, a) || !c.online(a) {
			continue
		}
		late = append(late, a)
	}
	if len(late) > 0 {
		s.recordPrompts(e, s.newPrompts(e, late, nil))
	}
}

// unrecorded reports whether prompt id waits for the write that records
// it: that write asks it once durable (thenPrompts), never before.
func unrecorded(e *entry, id string) bool {
	for _, w := range e.store.queue {
		if slices.Contains(w.prompts, id) {
			return true
		}
	}
	return false
}

// present: the roster of this member's new session, or a join.
func (s *step) roster(ev Roster) {
	c := s.c
	c.rosterKnown = true
	c.present = map[string]bool{}
	for _, id := range ev.Present {
		c.present[id] = true
	}
	for _, id := range c.sorted() {
		if e := c.props[id]; s.escRunning(e) {
			s.askAgain(e, "", false)
			s.settle(e)
		}
	}
}

// approverJoined asks again what approver a missed while away.
func (s *step) approverJoined(a string) {
	c := s.c
	if c.rosterKnown {
		c.present[a] = true
	}
	for _, id := range c.sorted() {
		if e := c.props[id]; s.escRunning(e) {
			s.askAgain(e, a, false)
			s.settle(e)
		}
	}
}

// promptOf finds the prompt of e with envelope id.
func promptOf(p *Proposal, id string) *Prompt {
	i := slices.IndexFunc(p.Prompts, func(pr Prompt) bool { return pr.EnvelopeID == id })
	if i < 0 {
		return nil
	}
	return &p.Prompts[i]
}

// answer applies an approver's answer to one of the core's prompts.
func (s *step) answer(ev Answer) {
	c := s.c
	id, ok := c.byPrompt[ev.PromptID]
	if !ok {
		return // not one of ours
	}
	e, ok := c.props[id]
	if !ok || !s.escRunning(e) {
		return
	}
	p := e.p
	pr := promptOf(p, ev.PromptID)
	if pr == nil {
		return
	}
	ignore := func(approver, why string) {
		s.human(e, Human{Kind: HumanIgnored, Approver: approver, From: ev.From, RequestID: ev.PromptID, Reason: why})
	}
	if ev.From != pr.Approver {
		// Rule 12: only the approver asked answers its prompt. One line
		// per proposal in the decision log (a flood makes one).
		ignore(pr.Approver, "not addressed to "+ev.From)
		if !e.spoofed {
			e.spoofed = true
			s.log(e, "ignored", func(l Line) Line {
				l.Reason, l.Message, l.By = "forged_answer", "answer from "+ev.From, []string{ev.From}
				return l
			})
		}
		return
	}
	if !pr.open() {
		ignore(ev.From, "already answered")
		return
	}
	if ev.HasRPCID && ev.RPCID != pr.RPCID {
		ignore(pr.Approver, "answer carries another JSON-RPC id")
		return
	}
	v := c.cfg.Codec.Read(p, *pr, ev.Payload, c.keys)
	switch v.Kind {
	case AnswerIgnored:
		ignore(pr.Approver, v.Why)
		return
	case AnswerForgery:
		s.human(e, Human{Kind: HumanForgery, Approver: pr.Approver, From: ev.From, RequestID: ev.PromptID, Action: v.Action, Reason: v.Why})
		return
	}
	who := pr.Approver
	pr.State = PromptAnswered
	answeredEv := Human{Kind: HumanAnswered, Approver: who, RequestID: pr.EnvelopeID, Action: v.Action, Reason: v.Reason}
	switch v.Kind {
	case AnswerFailed:
		escOf(p).LastErr = fmt.Sprintf("%s's client could not show the request (%s)", who, v.Why)
		answeredEv.Action, answeredEv.Reason = "", v.Why
		s.human(e, answeredEv)
		if !s.settle(e) {
			s.recordPrompts(e, nil)
		}
		return
	case AnswerCancelled:
		s.human(e, answeredEv)
		s.escEnd(e, "other", who+" dismissed the approval request without deciding")
		return
	case AnswerDeclined:
		s.human(e, answeredEv)
		msg := who + " declined"
		if v.Reason != "" {
			msg += ": " + v.Reason
		}
		s.escEnd(e, "disagree", msg)
		return
	case AnswerDelegated:
		s.delegate(e, pr, v.DelegateTo)
		return
	}
	answeredEv.Approve = true
	if v.GrantBad || (v.Grant != "" && !slices.Contains(pr.Grants, v.Grant)) {
		// Fail closed: the approver chose what the form did not offer:
		// neither the grant nor the approval it came with is taken.
		s.human(e, answeredEv)
		s.escEnd(e, "other", fmt.Sprintf("%s's approval cannot be used: the grant %s was not offered", who, clip(v.GrantRaw, 40)))
		return
	}
	if v.Unusable != "" {
		s.human(e, answeredEv)
		s.escEnd(e, "other", fmt.Sprintf("%s's approval cannot be used: %s", who, v.Unusable))
		return
	}
	a := Approval{Approver: who, Params: v.Params, Key: v.Key, Content: v.Content, SignatureVerified: v.Signed, At: s.now.UTC(), Grant: v.Grant}
	if v.Signed {
		a.Request, a.Signature = v.Request, v.Signature
	}
	p.Approvals = append(p.Approvals, a)
	s.human(e, answeredEv)
	if !s.settle(e) {
		// Counted once, across restarts: recorded (nothing sent waits
		// for it; one lost in a crash is asked for again with its
		// prompt, whose answer counts then).
		s.recordPrompts(e, nil)
	}
}

// clip shortens s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// delegate hands pr on to approver to (same deadline), if its form
// offered to and to may still take it; otherwise the answer counts as no
// answer.
func (s *step) delegate(e *entry, pr *Prompt, to string) {
	p := e.p
	who, chain := pr.Approver, slices.Clone(pr.Chain)
	if !slices.Contains(pr.Delegates, to) || !slices.Contains(s.c.delegatesFor(p, who, chain), to) {
		escOf(p).LastErr = fmt.Sprintf("%s handed the request to %s, who cannot take it", who, to)
		s.human(e, Human{Kind: HumanIgnored, Approver: who, From: who, RequestID: pr.EnvelopeID, Reason: "delegate_to " + to + " was not offered"})
		if !s.settle(e) {
			s.recordPrompts(e, nil)
		}
		return
	}
	pr.State = PromptHandedOn
	s.human(e, Human{Kind: HumanDelegated, Approver: who, RequestID: pr.EnvelopeID, To: to})
	id := s.newPrompt(e, to, append(chain, who))
	if !s.settle(e) {
		s.recordPrompts(e, []string{id})
	}
}

// settle ends e's escalation when it is over: a quorum of distinct
// approvers approved the same call, or no such quorum can come any more
// (counting the tiers still to come). It reports whether it ended.
func (s *step) settle(e *entry) bool {
	p := e.p
	q := quorumOf(p)
	var keys []string
	groups := map[string][]Approval{}
	approved := map[string]bool{}
	for _, a := range p.Approvals {
		if approved[a.Approver] {
			continue // one approver counts once
		}
		approved[a.Approver] = true
		if _, ok := groups[a.Key]; !ok {
			keys = append(keys, a.Key)
		}
		groups[a.Key] = append(groups[a.Key], a)
	}
	best := 0
	for _, k := range keys {
		g := groups[k]
		if len(g) >= q {
			s.approvedBy(e, g)
			return true
		}
		best = max(best, len(g))
	}
	pending := map[string]bool{}
	for i := range p.Prompts {
		if pr := &p.Prompts[i]; pr.open() && !approved[pr.Approver] {
			pending[pr.Approver] = true
		}
	}
	steps, _ := plan(p)
	for _, st := range steps[min(escOf(p).PlanDone, len(steps)):] {
		if st.tier == nil {
			continue
		}
		for _, a := range st.tier.Approvers {
			if a != p.From && !approved[a] && !answered(p, a) {
				pending[a] = true
			}
		}
	}
	if best+len(pending) >= q {
		return false
	}
	if len(keys) > 1 {
		s.escEnd(e, "disagree", "the approvers approved different edits of the call")
		return true
	}
	msg := fmt.Sprintf("%s needed, but only %d can still come", approvalsText(q), best+len(pending))
	if x := escOf(p).LastErr; x != "" {
		msg += ": " + x
	}
	s.escEnd(e, "incapable", msg)
	return true
}

// approvedBy ends e's escalation approved by the group g (the same call):
// an edit is decided again (rule 7), else the call is committed.
func (s *step) approvedBy(e *entry, g []Approval) {
	p := e.p
	s.closeEscalation(e, OutcomeApproved, OutcomeApproved, "")
	p.ApprovedBy = nil
	for _, a := range g {
		p.ApprovedBy = append(p.ApprovedBy, a.Approver)
	}
	last := g[len(g)-1]
	e.grant = nil
	if last.Grant != "" && quorumOf(p) == 1 {
		if d, err := time.ParseDuration(last.Grant); err == nil && d > 0 {
			e.grant = &CreateGrant{ID: p.ID, Approver: last.Approver, Duration: d, Params: last.Params, Content: last.Content,
				Request: last.Request, Signature: last.Signature}
		}
	}
	s.log(e, "approved", func(l Line) Line { l.By = p.ApprovedBy; return l })
	if last.Params != nil {
		s.decide(e, true, last.Params)
		return
	}
	s.commitFulfil(e, p.Decision.Target, p.Params)
}

// escEnd ends e's escalation not approved: its open prompts cancelled
// with reason, then the proposal rejected.
func (s *step) escEnd(e *entry, reason, message string) {
	s.closeEscalation(e, reason, reason, message)
	s.commitReject(e, reason, message)
}

// timedOut is the reject message of an escalation whose deadline came.
func timedOut(p *Proposal) string {
	waiting := openApprovers(p)
	d := p.Decision.Timeout
	if d <= 0 {
		if d = p.Deadline.Sub(escOf(p).Started); d >= time.Second {
			d = d.Round(time.Second)
		} else {
			d = d.Round(10 * time.Millisecond)
		}
	}
	msg := fmt.Sprintf("no approval within %s", d)
	if len(waiting) > 0 {
		msg += " (no answer from " + strings.Join(waiting, ", ") + ")"
	}
	return msg
}

// closeEscalation cancels e's open prompts (CancelAsk: notifications/
// cancelled with reason; none for DropReason) and announces how the escalation ended
// (not for a drop: for the people waiting on it, it goes on elsewhere).
func (s *step) closeEscalation(e *entry, reason, outcome, why string) {
	if !e.asked {
		return
	}
	e.asked = false
	p := e.p
	var asked []string
	for i := range p.Prompts {
		pr := &p.Prompts[i]
		if !slices.Contains(asked, pr.Approver) {
			asked = append(asked, pr.Approver)
		}
		if pr.open() && reason != DropReason {
			s.human(e, Human{Kind: HumanCancelled, Approver: pr.Approver, RequestID: pr.EnvelopeID, Reason: reason})
		}
	}
	// The shell cancels the open prompts (none for a drop), and sends
	// none not sent yet.
	s.emit(cancelAsk(p, reason))
	if reason == DropReason || p.Escalation == nil || !p.Escalation.Opened {
		return
	}
	if outcome == OutcomeApproved {
		why = ""
	}
	s.human(e, Human{Kind: HumanEnded, Notice: notice(p, asked, false), Outcome: outcome, Reason: why})
}

// resumeEscalation takes up a record's escalation (a restart, an
// adoption, a record read again): prompts recorded by an earlier build
// get their states and offers, recorded approvals are read again (each
// counts once), the tiers whose time passed meanwhile add their
// approvers (their reminders are not sent late), and every open prompt
// is asked again with its ids.
func (s *step) resumeEscalation(e *entry) {
	c, p := s.c, e.p
	x := escOf(p)
	if len(x.Approvers) == 0 {
		x.Approvers = slices.Clone(c.approvers(p))
	}
	if x.Started.IsZero() {
		x.Started = s.now.UTC()
	}
	if x.Since.IsZero() {
		x.Since = s.now.UTC()
		for _, pr := range p.Prompts {
			if !pr.Sent.IsZero() && pr.Sent.Before(x.Since) {
				x.Since = pr.Sent
			}
		}
	}
	// Approvals read again: one that cannot be used is not counted.
	kept := p.Approvals[:0]
	seen := map[string]bool{}
	for _, a := range p.Approvals {
		if seen[a.Approver] {
			continue
		}
		if a.Params == nil && a.Key == "" && len(a.Content) > 0 {
			params, key, err := c.cfg.Codec.Recount(p, a)
			if err != nil {
				continue
			}
			a.Params, a.Key = params, key
		}
		seen[a.Approver] = true
		kept = append(kept, a)
	}
	p.Approvals = kept
	handedOn := map[string]bool{}
	for _, pr := range p.Prompts {
		for _, by := range pr.Chain {
			handedOn[by] = true
		}
	}
	for i := range p.Prompts {
		pr := &p.Prompts[i]
		if pr.State == PromptOpen && !pr.Answered {
			switch {
			case seen[pr.Approver]:
				pr.State = PromptAnswered
			case handedOn[pr.Approver]:
				pr.State = PromptHandedOn
			}
		}
		if c.keys != nil && c.keys.Has(pr.Approver) {
			pr.Signed = true // keyed now: a restart must not open it to anyone
		}
		if pr.Delegates == nil && pr.Grants == nil && len(pr.Payload) > 0 {
			pr.Delegates, pr.Grants = c.cfg.Codec.Offers(pr.Payload)
		}
	}
	steps, _ := plan(p)
	for x.PlanDone < len(steps) && !x.Since.Add(steps[x.PlanDone].at).After(s.now) {
		if st := steps[x.PlanDone]; st.tier != nil {
			for _, a := range st.tier.Approvers {
				if !slices.Contains(x.Approvers, a) {
					x.Approvers = append(x.Approvers, a)
				}
			}
		}
		x.PlanDone++
	}
	if s.settle0(e) {
		return
	}
	s.opened(e, true)
	s.settle(e)
}

// settle0 settles a resumed escalation before it is asked again (it
// may be over already: its quorum recorded before a crash).
func (s *step) settle0(e *entry) bool {
	e.asked = true
	return s.settle(e)
}

// keysChanged replaces the key set in force.
func (s *step) keysChanged(ev KeysChanged) { s.c.keys = ev.Keys }

// promptSent closes a prompt that could not be sent.
func (s *step) promptSent(ev PromptSent) {
	e, ok := s.c.props[ev.ID]
	if !ok || ev.Err == nil || !s.escRunning(e) {
		return
	}
	pr := promptOf(e.p, ev.EnvelopeID)
	if pr == nil || !pr.open() {
		return
	}
	pr.State = PromptUnsent
	escOf(e.p).LastErr = fmt.Sprintf("the request to %s could not be sent", pr.Approver)
	if !s.settle(e) {
		s.recordPrompts(e, nil)
	}
}
