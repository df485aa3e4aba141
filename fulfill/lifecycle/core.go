package lifecycle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Core owns every pending proposal of one member. It is not safe for
// concurrent use: one goroutine (the shell's event loop) calls Step.
type Core struct {
	cfg Config
	ids IDs

	props     map[string]*entry
	byRequest map[string]string // fulfilment request envelope id → proposal id
	byPrompt  map[string]string // prompt envelope id → proposal id
	slots     *slotQueue        // fulfilment slots held, and the proposals in phase Queued
	closing   bool
	refusing  int // refusals (noRecord) whose claim failed and waits to be tried again
	// The load (see load), kept as entries are admitted and end (track)
	// rather than counted over every entry at each event.
	nLive  int
	nBytes int64
	nBy    map[string]int // by proposer
	// forgotten: the proposals the last Step let go of, whose timers
	// the Loop stops (a deadline minutes away would otherwise hold each
	// ended proposal's timer until then).
	forgotten []string
	seq       uint64 // of the last Write: unique, so a result finds its write
	// rpcIDs are the JSON-RPC ids reserved and not used yet, next first
	// (Config.ReserveIDs); reserving: a ReserveIDs is out.
	rpcIDs    []int64
	reserving bool
	// groupPending and groupCap are the group's load as of the last
	// GroupLoad: this member's open proposals then, plus its peers'.
	groupPending, groupCap int
	// away are the participants that left and did not come back, as
	// far as this member heard: a request to one of them is held.
	away map[string]bool
	// present are the participants in the space as of this member's
	// last welcome (Roster) and the joins and leaves since; rosterKnown
	// once a Roster came. keys is the approver key set in force.
	present     map[string]bool
	rosterKnown bool
	keys        KeySet

	// seen are proposal ids this process read (rule 5 within the
	// process; the store's claim is the group-wide check). ended are
	// those it ended: a record of one of them read later is stale.
	seen  *idSet
	ended *idSet
	// withdrawals read for proposals this member did not hold (or lost
	// to another member): one adopted later is withdrawn at once.
	withdrawals *withdrawalSet
}

// entry is a proposal and what only this process knows of it.
//
// Its fields are laid out small ones last: an entry is allocated for
// every proposal.
type entry struct {
	p *Proposal
	// claim is the claim's state (the write that makes the proposal
	// this member's), and what waits for it to land.
	claim   claim
	outcome Outcome
	// store is the writes of its record.
	store recordWrites
	// req is the fulfilment request (and its task) at the tool owner.
	req    request
	decide deciding // the Decide outstanding, if any
	// resendAt: when the committed answer is written again after a
	// failure (answerResend).
	resendAt time.Time
	// refusal: refused at once (nil: admitted).
	refusal *refusal
	// grant: the grant an approval chose, created once the approved
	// call is committed (its request recorded).
	grant *CreateGrant

	// slot is e's place in the sharing of fulfilment slots.
	slot slotState
	// answer is the sending of the committed answer (a reject or a
	// relay).
	answer answerState
	asked  bool // the escalation opened: prompts are open at approvers
	// chatted: a Status went out to the shell, maybe not carried out
	// yet: the proposal's end drops it (CancelAsk).
	chatted bool
	// spoofed: an answer not taken (forged, from another participant,
	// with another JSON-RPC id) was logged: the next ones are not, so a
	// flood of forgeries makes one line.
	spoofed bool
	counted bool // in the Core's load (track)
}

// claimState is where a proposal's claim stands: the first write of its
// record, which makes the proposal this member's.
type claimState uint8

const (
	// claimTrying: the claim is being written, or tried again: the
	// proposal is not this member's yet. A refusal's claim (noRecord)
	// stays here once won: it is claimed without a record.
	claimTrying claimState = iota
	// claimHeld: Config.Alone: the claim is queued but not issued until
	// the policy answers, so that it is written with what the decision
	// commits (decidedBeforeClaim). A deadline, a withdrawal, a
	// shutdown issue it as it is (unhold).
	claimHeld
	// claimCarrying: the claim is being written with what its decision
	// committed (decidedBeforeClaim): claim.before and claim.after hold
	// what its landing (claimedDecided) or its loss (undoDecided) needs.
	claimCarrying
	// claimLanded: the claim is written: the record exists, and the
	// proposal is this member's.
	claimLanded
)

// claim is a proposal's claim: its state, and what waits for the claim
// to land. All but the state is dropped once it has (claimLanded).
type claim struct {
	// decided: the Decided that came before the claim landed but could
	// not be carried out as part of it; taken once it lands.
	decided *Decided
	// before (claimCarrying): the proposal as it was before its
	// decision was carried out ahead of its claim, restored if the claim
	// is lost (a replay's line says nothing of a decision it never had);
	// after what carrying it out emitted (its lines and timers), emitted
	// once the claim lands.
	before *Proposal
	after  []Effect
	// cancelBy: an operator's cancel read while the claim was held or
	// carried its decision (by whom, cancelled once the claim lands):
	// nothing went out yet, so it is not refused as a late one is.
	cancelBy *string
	// early is an end (withdrawal, supersession) read while the claim
	// was being written: it is taken once the claim says the proposal
	// is this member's, so that its line carries the claim's decision.
	early *earlyEnd
	// winner, when the store named it: the decision of the claim a
	// try found (taken).
	winner string

	state claimState
	// taken: a try of the claim found the id claimed: an earlier try of
	// its own, or a claim before, whose record the reload tells.
	taken bool
	// deadlineHeld: the deadline's timer waits for the held claim to
	// go (unhold), which the hold's own timer makes happen first.
	deadlineHeld bool
}

// landed reports whether the claim is written: the proposal is this
// member's, with a record.
func (c *claim) landed() bool { return c.state == claimLanded }

// land marks the claim written, and returns what waited for it.
func (c *claim) land() claim {
	was := *c
	*c = claim{state: claimLanded}
	return was
}

// refusal is a proposal refused at once: claimed without a record
// (noRecord), so it is never counted as pending, resumed or adopted.
type refusal struct {
	// reject is its reject, its envelope id minted once the claim is
	// won.
	reject RejectRecord
	// waiting: its claim failed, and it is counted in Core.refusing
	// until it is forgotten.
	waiting bool
}

// noRecord reports whether e was refused at once: claimed without a
// record.
func (e *entry) noRecord() bool { return e.refusal != nil }

// recordWrites are a proposal's writes of its record: one out at a time,
// in order, each carrying what is sent once it is durable.
type recordWrites struct {
	queue   []pendingWrite // head is outstanding unless state is writeIdle
	seq     uint64         // of the Write out (writeOut)
	retryAt time.Time      // when a failed write is tried again
	state   writeState
	// retried: a write was tried again after an error (which may have
	// been applied all the same).
	retried bool
}

// writeState is what a proposal's head write (recordWrites.queue) waits
// for.
type writeState uint8

const (
	// writeIdle: nothing is out: the head, if any, is issued next (or
	// at its retry, or once the claim is no longer held).
	writeIdle writeState = iota
	// writeOut: the head's Write is out (recordWrites.seq), awaiting
	// Stored.
	writeOut
	// writeReload: the head's Write failed in a way the record must
	// settle: a Reload is out, awaiting Reloaded.
	writeReload
)

// deciding is the policy's Decide outstanding for a proposal, if any.
type deciding struct {
	// edit is the edited call a re-check (decideAgain) checks (rule 7):
	// what is fulfilled if the policy allows it; id the decision that
	// re-check makes (Decide.DecisionID), adopted with its answer.
	edit  []byte
	id    string
	state decideState
}

// decideState is the policy's Decide outstanding for a proposal.
type decideState uint8

const (
	decideNone decideState = iota
	// decideFirst: the proposal's own decision.
	decideFirst
	// decideAgain: an edit's re-check (rule 7).
	decideAgain
)

// answerState is the writing of a proposal's committed answer (its
// reject or relay) to the proposer.
type answerState uint8

const (
	// answerIdle: none is being written: not sent yet, or written.
	answerIdle answerState = iota
	// answerSending: its Send is out, awaiting Sent.
	answerSending
	// answerResend: its Send failed: written again at entry.resendAt.
	answerResend
)

// request is a proposal's fulfilment request (phase Fulfilling, and its
// task after it) as this member knows it at the tool owner.
type request struct {
	// graceAt is when the tool owner's rejoin grace ends (zero: none
	// running).
	graceAt time.Time
	state   reqState
	// taskDone: the task ended at its owner (its follower said so):
	// nothing is left to cancel there.
	taskDone bool
}

// reqState is where a proposal's fulfilment request stands on the wire
// (phase Fulfilling, and a task's request after it): one state, so that
// a request held for its owner is never also out.
type reqState uint8

const (
	// reqNone: no request, or one being recorded before it is sent.
	reqNone reqState = iota
	// reqHeld: due while its tool owner is away, so neither recorded
	// nor sent (startRequest): recorded and sent once the owner is back
	// (release).
	reqHeld
	// reqHeldLogged: held as reqHeld, but the wire found the owner away
	// (ErrAway) after the request was recorded and its line logged: it
	// goes out as it is.
	reqHeldLogged
	// reqSending: SendRequest went out to the shell: a response to it
	// may come before its Sent does (the owner is quick), and counts: the
	// request reached the owner, or it could not have answered.
	reqSending
	// reqOut: the request was written (or resumed).
	reqOut
	// reqUnsent: nothing went out that a reject should cancel: the
	// request's fulfilling line was not logged (Unlogged), the gateway
	// refused it, or the claim carrying the decision landed when the
	// decision could no longer be carried out (claimedDecided).
	reqUnsent
)

// held reports whether the request waits for its tool owner to come back.
func (r request) held() bool { return r.state == reqHeld || r.state == reqHeldLogged }

// out reports whether the request went out, or is going: an answer to
// it counts.
func (r request) out() bool { return r.state == reqSending || r.state == reqOut }

// cancellable reports whether a reject cancels the request at its owner
// (rule 4): one held or never sent did not reach it.
func (r request) cancellable() bool { return !r.held() && r.state != reqUnsent }

// slotState is a proposal's place in the sharing of fulfilment slots
// (slotQueue).
type slotState uint8

const (
	slotNone slotState = iota
	// slotQueued: waiting for a slot (phase Queued).
	slotQueued
	// slotQueuedForIDs: queued only for want of a JSON-RPC id
	// (Config.ReserveIDs), a slot free: a wait of a round trip to a
	// worker, neither logged nor told to the proposer as a wait for a
	// slot.
	slotQueuedForIDs
	// slotHeld: holding a slot (its request is out, or held).
	slotHeld
)

// queued reports whether the proposal waits in the slot queue.
func (q slotState) queued() bool { return q == slotQueued || q == slotQueuedForIDs }

type earlyEnd struct {
	outcome    Outcome
	stage, why string
	by         []string // who answered instead (superseded)
}

type then int

const (
	thenNothing then = iota
	thenClaimed
	thenSendReject
	thenSendRequest
	thenAsk
	thenRefused
	thenFollow
	thenQueued
	// thenClaimedDecided: the claim, written with what the decision
	// committed (decidedBeforeClaim); pendingWrite.next is that
	// write's, carried out once the claim is this member's.
	thenClaimedDecided
	// thenPrompts: the prompts of pendingWrite.prompts are recorded now
	// and may be sent.
	thenPrompts
)

type pendingWrite struct {
	// line is logged once the write is durable (an end with nothing
	// sent: its line says what the store holds).
	line      *Line
	rec       *Proposal // nil: delete
	create    bool
	claimOnly bool
	then      then
	// soon: nothing sent waits for this write (Write.Soon).
	soon bool
	// next: the write a claim carries (thenClaimedDecided), whose line
	// and then follow the claim's.
	next *pendingWrite
	// prompts: the envelope ids of the prompts this write records, sent
	// once it is durable (thenPrompts).
	prompts []string
}

// New makes a Core.
func New(cfg Config, ids IDs) *Core {
	per := cfg.MaxInflightPerProposer
	if per <= 0 {
		per = cfg.MaxInflight
	}
	if cfg.ClaimHold <= 0 {
		cfg.ClaimHold = DefaultClaimHold
	}
	return &Core{cfg: cfg, ids: ids, props: map[string]*entry{}, byRequest: map[string]string{}, away: map[string]bool{}, present: map[string]bool{}, keys: cfg.Keys,
		slots: newSlotQueue(cfg.MaxInflight, per), byPrompt: map[string]string{}, nBy: map[string]int{}, seen: newIDSet(1 << 16), ended: newIDSet(1 << 16), withdrawals: &withdrawalSet{ids: newIDSet(1 << 14), by: map[string]withdrawal{}}}
}

// Pending reports how many proposals the core still holds, ended ones
// whose record or reject is still being written included.
func (c *Core) Pending() int { return len(c.props) }

// Live reports how many proposals count as pending here (admitted with a
// record, not ended): what the shell publishes with its lease for the
// group's "busy".
func (c *Core) Live() int { n, _, _ := c.load("", ""); return n }

// Open returns a copy of each proposal not yet ended, in id order.
func (c *Core) Open() []Proposal {
	var out []Proposal
	for _, e := range c.props {
		if e.outcome == Open {
			out = append(out, e.p.copy())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Step applies one event at time now and returns what the shell must do,
// in order. It does no I/O and reads no clock.
func (c *Core) Step(now time.Time, ev Event) []Effect {
	return c.StepAppend(now, ev, nil)
}

// StepAppend is Step appending the effects to dst (which may be a
// buffer the caller empties and reuses: the Loop's, so that a step's
// effects cost no slice of their own). What it returns is only valid
// until dst's array is reused: the caller must be done with the effects
// by then.
func (c *Core) StepAppend(now time.Time, ev Event, dst []Effect) []Effect {
	s := &step{c: c, now: now, out: dst}
	c.forgotten = c.forgotten[:0]
	switch ev := ev.(type) {
	case Proposed:
		s.topUp()
		s.proposed(ev)
	case IDsReserved:
		c.reserving = false
		c.rpcIDs = append(c.rpcIDs, ev.IDs...)
		s.topUp()
		s.startQueued()
	case Stored:
		s.stored(ev)
	case Decided:
		s.decided(ev)
	case Sent:
		s.sent(ev)
	case Fired:
		s.fired(ev)
	case WithdrawnBy:
		s.withdrawn(ev)
	case Responded:
		s.responded(ev)
	case Answer:
		s.answer(ev)
	case Roster:
		s.roster(ev)
	case KeysChanged:
		s.keysChanged(ev)
	case PromptSent:
		s.promptSent(ev)
	case SupersededBy:
		s.superseded(ev)
	case Resumed:
		for _, r := range ev.Records {
			s.resume(r, ev.How)
		}
	case Cancelled:
		s.cancelled(ev)
	case GroupLoad:
		c.groupPending, c.groupCap = c.Live()+ev.Peers, ev.Capacity
	case ParticipantLeft:
		s.left(ev)
	case ParticipantJoined:
		s.joined(ev.ID)
		if !ev.Welcome {
			s.approverJoined(ev.ID)
		}
	case TaskStatus:
		s.taskStatus(ev)
	case TaskEnded:
		s.taskEnded(ev)
	case Closing:
		s.closing()
	case Reloaded:
		s.reloaded(ev)
	case Released:
		if e, ok := c.props[ev.ID]; ok {
			reason, message := ev.Reason, ev.Message
			if reason == "" {
				reason, message = DropReason, "the proposal's record belongs to another member now"
			}
			s.fencedWith(e, reason, message)
		}
	case Refused:
		s.refused(ev)
	case Unlogged:
		s.unlogged(ev)
	default:
		panic(fmt.Sprintf("lifecycle: unknown event %T", ev))
	}
	return s.out
}

// step is one Step's scratch: the effects so far.
type step struct {
	c   *Core
	now time.Time
	out []Effect
}

func (s *step) emit(e ...Effect) {
	if s.out == nil {
		// Room for what most steps emit, in one allocation where the
		// slice grown from nothing took three.
		s.out = make([]Effect, 0, 4)
	}
	s.out = append(s.out, e...)
}

// lineOf is the decision-log line of stage about p, with what every
// line says of its proposal (the journal's Event): its decision, proposer,
// method, tool, target (the route once decided, else the addressee) and
// task. Every line the core writes is made here.
//
// fill takes the line and returns it, not a pointer to it: a line
// filled through a pointer escapes to the heap, and every line is boxed
// into its Log effect once already (two copies of a line of 400 bytes
// per line, 3–4 lines per proposal, were the core's largest allocation).
func lineOf(p *Proposal, stage string, fill func(Line) Line) Line {
	l := Line{Stage: stage, ProposalID: p.ID, DecisionID: p.DecisionID, Proposer: p.From, Method: p.Method, Tool: p.Tool, Target: p.Addressee, Log: p.Log}
	if d := p.Decision; d != nil {
		l.Revision = d.Revision
		if d.Target != "" {
			l.Target = d.Target
		}
	}
	if t := p.Task; t != nil {
		l.TaskID, l.TaskStatus = t.ID, t.Status
		l.TaskSpec, l.TaskCreated, l.TaskDeadline = t.Spec, t.Created, t.Deadline
	}
	if fill != nil {
		l = fill(l)
	}
	return l
}

func (s *step) log(e *entry, stage string, fill func(Line) Line) {
	s.emit(Log{Line: lineOf(e.p, stage, fill)})
}

// decide asks the policy about e (again: the edited call edit, rule 7),
// with e as it is now and this member's load.
func (s *step) decide(e *entry, again bool, edit []byte) {
	c := s.c
	e.decide = deciding{state: decideFirst}
	d := Decide{ID: e.p.ID, Again: again, Proposal: e.p.copy(), Pending: c.Live(), Inflight: c.slots.used}
	if again {
		// The re-check's decision governs what follows (rule 10): its id
		// goes with the Decide, for the policy's line, and is adopted
		// with its answer.
		e.decide = deciding{state: decideAgain, edit: edit, id: c.ids.DecisionID()}
		d.Params, d.Approvals, d.DecisionID = edit, slices.Clone(e.p.Approvals), e.decide.id
	}
	s.emit(d)
}

// approvers are those e's escalation asks: the decision's, else the
// configured ones.
func (c *Core) approvers(p *Proposal) []string {
	if p.Decision != nil && len(p.Decision.Approvers) > 0 {
		return p.Decision.Approvers
	}
	return c.cfg.Approvers
}

func (s *step) proposed(ev Proposed) {
	c := s.c
	if ev.ID == "" || ev.From == "" {
		return
	}
	if old, ok := c.props[ev.ID]; ok || c.seen.has(ev.ID) {
		// Rule 5: a replay is ignored, never rejected. One held here
		// joins the decision its claim holds.
		// (The replay's sender says who sent it: a replay of another's
		// id is no less ignored.)
		dup := &Proposal{ID: ev.ID, From: ev.From, Method: ev.Method, Tool: ev.Tool, Addressee: ev.Addressee, Log: ev.Log}
		// It joins the decision that governs the proposal (rule 10):
		// its own while held here, the one it ended under (kept with
		// the seen id), else the claim's winner the store named.
		var revision string
		switch {
		case ok && old.p.DecisionID != "":
			dup.DecisionID, revision = old.p.DecisionID, revisionOf(old.p)
		case ok:
			dup.DecisionID = old.p.Claim
		case c.seen.get(ev.ID) != "":
			dup.DecisionID, revision, _ = strings.Cut(c.seen.get(ev.ID), "\x00")
		default:
			dup.DecisionID = c.ids.DecisionID()
		}
		s.emit(Log{Line: lineOf(dup, "ignored", func(l Line) Line {
			l.Reason, l.Message, l.Revision = "duplicate", "proposal id seen before", revision
			return l
		})})
		return
	}
	c.seen.add(ev.ID)
	id := c.ids.DecisionID()
	p := &Proposal{ID: ev.ID, From: ev.From, Envelope: ev.Envelope, Params: ev.Params, Invalid: ev.Invalid, Size: ev.Size,
		FrontEnd: ev.FrontEnd, Method: ev.Method, Tool: ev.Tool, Addressee: ev.Addressee, Log: ev.Log,
		Received: s.now, Owner: c.cfg.Member, Phase: Deciding, Deadline: s.now.Add(c.cfg.PendingTTL), DecisionID: id, Claim: id,
		V: RecordVersion}
	if p.Invalid != "" {
		// Claimed answered (rule 1): its reject is in the claim, the
		// one write, so a crash after it sends this very envelope.
		p.Phase = Answered
		p.Reject = &RejectRecord{EnvelopeID: c.ids.EnvelopeID(), Reason: "invalid", Message: p.Invalid}
	}
	e := &entry{p: p}
	c.props[p.ID] = e
	// Its received line is written once the claim says it is this
	// member's (then): a replay that loses its claim has only its
	// ignored line, under the winner's decision.
	if p.Invalid == "" {
		if reason, message := c.refusal(p); reason != "" {
			if c.refusing >= max(c.cfg.MaxPending, 1) {
				// As many refusals as proposals may be pending already
				// wait to try their claims again: the store is down, and
				// a flood would pile up here. Nothing is claimed, so
				// nothing is sent: the proposer's own timeout answers it,
				// as it would in a group.
				c.setOutcome(e, Dropped)
				s.log(e, "ignored", func(l Line) Line {
					l.Reason, l.Message = "store_unavailable", "refused ("+reason+"), but the store has not claimed the refusals before it"
					return l
				})
				c.letGo(e)
				return
			}
			// Refused as looked at now, even if room is made before the
			// claim lands: claimed without a record (ClaimOnly), one
			// store write for a reject under overload; never decided.
			e.refusal = &refusal{reject: RejectRecord{Reason: reason, Message: message}}
			s.queueWrite(e, pendingWrite{rec: p.clone(), create: true, claimOnly: true, then: thenRefused})
			return
		}
	}
	// The claim is the first write: the record exists from the moment
	// the proposal is this member's, so a crash after it leaves work to
	// resume, never a claimed id nobody answers.
	c.track(e)
	if p.Invalid == "" && c.cfg.Alone {
		// Alone on its store, the policy decides first and the claim is
		// written with what the decision commits (decidedBeforeClaim):
		// a fulfilment's claim carries its request, a reject's its
		// answer, one store write fewer before the answer. In a group
		// every member would evaluate every proposal.
		e.claim.state = claimHeld
	}
	s.queueWrite(e, pendingWrite{rec: p.clone(), create: true, then: thenClaimed})
	if e.claim.state == claimHeld && c.cfg.ClaimHold < c.cfg.PendingTTL {
		// The hold ends before the deadline, and until then all the
		// deadline would do is end the hold: its timer is set when the
		// claim goes as it is (unhold), and never for a claim that
		// carries its decision, whose phase has a deadline of its own
		// (or none: answered). One timer a proposal fewer.
		e.claim.deadlineHeld = true
	} else {
		s.emit(Schedule{ID: p.ID, At: p.Deadline, Kind: TimerDeadline})
	}
	if e.claim.state == claimHeld {
		s.emit(Schedule{ID: p.ID, At: s.now.Add(c.cfg.ClaimHold), Kind: TimerHold})
		s.decide(e, false, nil)
	}
}

// unhold issues e's held claim as it is (claimHeld): what comes before
// the decision (a deadline, a withdrawal, a shutdown) needs the claim
// more than the write it saves.
func (s *step) unhold(e *entry) {
	if e.claim.state == claimHeld {
		e.claim.state = claimTrying
		s.issue(e)
	}
	s.unholdDeadline(e)
}

// unholdDeadline sets the proposal's deadline timer, not set while its
// claim was held (proposed): now, if it still decides, as it is.
func (s *step) unholdDeadline(e *entry) {
	if e.claim.deadlineHeld {
		e.claim.deadlineHeld = false
		if e.outcome == Open && e.p.Phase == Deciding {
			s.emit(Schedule{ID: e.p.ID, At: e.p.Deadline, Kind: TimerDeadline})
		}
	}
}

// decidedBeforeClaim carries out ev, the decision of e whose claim is
// held (claimHeld), as if the claim had landed, and writes the claim with
// what that committed: the record in its next phase (a fulfilment's
// request, a reject's answer, an escalation's prompts), the one write
// instead of two. What it emitted (its lines, its timers) waits in
// e.claim.after for the claim to land: a replay that loses its claim has
// only its ignored line, and e is restored as it was (duplicate).
func (s *step) decidedBeforeClaim(e *entry, ev Decided) {
	// The held claim's record is a copy of the proposal as it was
	// received, which nothing changed while the claim waited for its
	// decision (an end or a shutdown issues it first: unhold): it is
	// what e was before its decision. When the claim carries the
	// decision's record instead (merged, below), no write holds it any
	// more and it is e's copy as it was; else it is copied.
	before := e.store.queue[0].rec
	e.claim.before = before
	out := s.out
	s.out = nil
	// Carried out as a claimed proposal's decision; the claim, still
	// held, issues no write meanwhile.
	s.carryOut(e, ev)
	e.claim.after, s.out = s.out, out
	claim := e.store.queue[0]
	claim.then = thenClaimedDecided
	if len(e.store.queue) > 1 && mergeable(e.store.queue[1]) {
		next := e.store.queue[1]
		// A claim is never Soon (Write.Soon): the store syncs one whose
		// record carries what goes out once it is durable.
		claim.rec, claim.next = next.rec, &next
		e.store.queue = append([]pendingWrite{claim}, e.store.queue[2:]...)
	} else {
		// Nothing to carry (a request held for its owner's return): the
		// claim goes as it was, and what the decision did follows it.
		e.store.queue[0] = claim
		e.claim.before = before.clone()
	}
	e.claim.state = claimCarrying
	s.issue(e)
	s.unholdDeadline(e)
}

// carrying reports whether e's claim carries its decision
// (decidedBeforeClaim) and has not landed yet.
func (e *entry) carrying() bool { return e.claim.state == claimCarrying }

// queues reports whether carrying out ev would queue e for a fulfilment
// slot: a proposal takes its place in the queue once it is claimed, or
// one whose claim is slow to land would keep the turn of the proposals
// behind it.
func queues(c *Core, e *entry, ev Decided) bool {
	return ev.Decision.Action == Fulfill && ev.Incapable == "" && !c.canStart(e.p.From)
}

// canStart reports whether a fulfilment of proposer's may start now: a
// slot is free and a JSON-RPC id is at hand for its request.
func (c *Core) canStart(proposer string) bool {
	return c.slots.free(proposer) && c.haveRPCID()
}

// haveRPCID reports whether an id is at hand without waiting: one
// reserved, or every id from IDs.RPCID (no ReserveIDs).
func (c *Core) haveRPCID() bool { return c.cfg.ReserveIDs == 0 || len(c.rpcIDs) > 0 }

// rpcID hands out the next JSON-RPC id the core puts on the wire: a
// reserved one (Config.ReserveIDs), the reservation topped up once half
// are used. With none at hand (a reservation not back yet), a prompt or
// a relay takes one from IDs.RPCID; a request never does: it waits
// (canStart).
func (s *step) rpcID() int64 {
	c := s.c
	if c.cfg.ReserveIDs == 0 {
		return c.ids.RPCID()
	}
	defer s.topUp()
	if len(c.rpcIDs) == 0 {
		return c.ids.RPCID()
	}
	id := c.rpcIDs[0]
	c.rpcIDs = c.rpcIDs[1:]
	return id
}

// topUp asks for more JSON-RPC ids when half of a reservation is used,
// unless a reservation is out.
func (s *step) topUp() {
	c := s.c
	if c.cfg.ReserveIDs == 0 || c.reserving || len(c.rpcIDs) > c.cfg.ReserveIDs/2 {
		return
	}
	c.reserving = true
	s.emit(ReserveIDs{N: c.cfg.ReserveIDs})
}

// mergeable reports whether w can be written as part of the claim before
// it: an update of the record that nothing but its then waits on.
func mergeable(w pendingWrite) bool {
	return w.rec != nil && !w.create && !w.claimOnly && w.next == nil
}

// undoDecided restores e as it was before its decision was carried out
// ahead of its claim (decidedBeforeClaim), for a claim that was lost: the
// ids its request or prompts would have been found by are dropped, and
// what it emitted never goes out.
func (s *step) undoDecided(e *entry) {
	if !e.carrying() {
		return
	}
	c := s.c
	if r := e.p.Request; r != nil && c.byRequest[r.EnvelopeID] == e.p.ID {
		delete(c.byRequest, r.EnvelopeID)
	}
	for _, pr := range e.p.Prompts {
		if c.byPrompt[pr.EnvelopeID] == e.p.ID {
			delete(c.byPrompt, pr.EnvelopeID)
		}
	}
	e.p = e.claim.before
	e.claim.state, e.claim.before, e.claim.after = claimTrying, nil, nil
}

// queueWrite appends a write of e's record and issues it when none is
// outstanding. Each write carries what is sent once it is durable.
func (s *step) queueWrite(e *entry, w pendingWrite) {
	if w.rec != nil {
		w.rec.Owner = s.c.cfg.Member
	}
	if n := len(e.store.queue); n > 1 && plainUpdate(e.store.queue[n-1]) && plainUpdate(w) {
		// An update not issued yet is overtaken by this one, which
		// records all it did (prompts and approvals recorded one after
		// the other cost one write, not one each).
		last := &e.store.queue[n-1]
		last.rec, last.soon = w.rec, last.soon && w.soon
		return
	}
	e.store.queue = append(e.store.queue, w)
	s.issue(e)
}

// plainUpdate reports whether w only updates the record: nothing waits
// on it but its acks.
func plainUpdate(w pendingWrite) bool {
	return w.rec != nil && !w.create && w.then == thenNothing && w.line == nil
}

func (s *step) issue(e *entry) {
	if e.store.state != writeIdle || e.claim.state == claimHeld || len(e.store.queue) == 0 {
		return
	}
	w := e.store.queue[0]
	e.store.state = writeOut
	s.c.seq++
	e.store.seq = s.c.seq
	s.emit(Write{ID: e.p.ID, Seq: e.store.seq, Record: w.rec, Create: w.create, ClaimOnly: w.claimOnly, Rev: e.p.Rev, Soon: w.soon})
}

func (s *step) stored(ev Stored) {
	c := s.c
	e, ok := c.props[ev.ID]
	if !ok || e.store.state != writeOut || ev.Seq != e.store.seq {
		return
	}
	e.store.state = writeIdle
	w := e.store.queue[0]
	switch {
	case ev.Err == nil:
		s.written(e, ev.Rev)
	case w.claimOnly && (errors.Is(ev.Err, ErrExists) || errors.Is(ev.Err, ErrConflict)):
		// Its own earlier try would have been reported won: another
		// claim holds the id.
		s.duplicate(e, winner(ev.Err))
	case w.create && errors.Is(ev.Err, ErrExists) && !e.store.retried:
		s.duplicate(e, winner(ev.Err))
	case errors.Is(ev.Err, ErrExists) || errors.Is(ev.Err, ErrConflict):
		// Another member's now, or an earlier try of this very write
		// that failed was applied after all (a store timeout does not
		// say which): the record says.
		if w.create {
			e.claim.taken, e.claim.winner = true, winner(ev.Err)
		}
		s.reload(e)
	case w.create && !w.claimOnly && !s.now.Before(e.p.Deadline) && !c.cfg.Alone:
		// Not claimed by its deadline, as far as this member knows: the
		// record says whether a try was applied after all. (Alone on its
		// store, the claim is tried on, below: once it lands, its record
		// ends with a "timeout" reject, and a replay is told by the
		// claim's answer; no other member can answer it meanwhile.)
		e.store.retried = true
		s.reload(e)
	default:
		if w.claimOnly && !e.refusal.waiting {
			e.refusal.waiting = true
			c.refusing++
		}
		e.store.retried = true // an error may hide an applied write
		// Unavailable: nothing is sent before its record is written, so
		// the write is tried again (a claim too: a proposal is never
		// answered without a record, which could answer it twice).
		e.store.retryAt = s.now.Add(c.cfg.RetryAfter)
		s.emit(Schedule{ID: e.p.ID, At: e.store.retryAt, Kind: TimerRetry})
	}
}

func (s *step) reload(e *entry) {
	e.store.state = writeReload
	s.emit(Reload{ID: e.p.ID})
}

// duplicate drops e: its id was claimed before, by a replay's original
// or by another member. Its line joins the winning claim's decision when
// the store named it (rule 10), as a replay read later does.
func (s *step) duplicate(e *entry, winner string) {
	s.undoDecided(e)
	s.c.setOutcome(e, Dropped) // not ended here: a record of it may come to this member later
	if winner != "" {
		e.p.DecisionID, e.p.Claim = winner, winner
	}
	s.log(e, "ignored", func(l Line) Line { l.Reason = "duplicate"; return l })
	s.c.seen.put(e.p.ID, winner)
	s.forget(e)
}

// winner is the decision id of the claim that won against a write that
// came back with err ("" when the store did not say).
func winner(err error) string {
	var ce *ClaimedError
	if errors.As(err, &ce) {
		return ce.Winner
	}
	return ""
}

// written carries on once e's outstanding write is durable at revision
// rev.
func (s *step) written(e *entry, rev uint64) {
	w := e.store.queue[0]
	e.store.queue = e.store.queue[1:]
	e.p.Rev = rev
	if w.line != nil {
		s.emit(Log{Line: *w.line})
	}
	s.then(e, w)
	s.issue(e)
	s.forgetIfDone(e)
}

// appliedBefore reports whether record r is e's outstanding update as an
// earlier try wrote it (applied, though reported failed): the same
// record, at another revision.
func appliedBefore(e *entry, r *Proposal) bool {
	if len(e.store.queue) == 0 || e.store.queue[0].rec == nil || (e.store.queue[0].create && !e.carrying()) {
		// A plain claim applied is resumed from its record; one that
		// carries its decision is written (claimedDecided), or its
		// request would wait for a response it never asked for.
		return false
	}
	want, err1 := json.Marshal(e.store.queue[0].rec)
	got, err2 := json.Marshal(r)
	return err1 == nil && err2 == nil && bytes.Equal(want, got)
}

// reloaded settles a write that found the record changed: ours (an
// earlier try applied, or taken back), someone else's, or gone.
func (s *step) reloaded(ev Reloaded) {
	c := s.c
	e, ok := c.props[ev.ID]
	if !ok || e.store.state != writeReload {
		return
	}
	e.store.state = writeIdle
	w := e.store.queue[0]
	switch r := ev.Record; {
	case r != nil && r.Owner == c.cfg.Member && r.Rev != e.p.Rev && appliedBefore(e, r):
		// Its own earlier try, applied: written, and what runs (an
		// escalation, whose records may be on their way) runs on.
		s.written(e, r.Rev)
	case r != nil && r.Owner == c.cfg.Member && r.Rev != e.p.Rev:
		s.resume(*r, "reloaded")
	case r != nil && r.Owner == c.cfg.Member:
		s.issue(e)
	case r == nil && w.rec == nil && !w.create:
		// The delete was applied by an earlier try.
		e.store.queue = e.store.queue[1:]
		s.issue(e)
		s.forgetIfDone(e)
	case w.create && !e.claim.landed() && r == nil && e.claim.taken:
		// Claimed before, and its record gone: a replay of a proposal
		// that ended (here, before a restart, or at another member).
		s.duplicate(e, e.claim.winner)
	case w.create && !e.claim.landed() && r == nil && !s.now.Before(e.p.Deadline):
		// No try was applied: nothing to answer exactly once; left to
		// the group or to the proposer's own timeout.
		s.unclaimed(e)
	case w.create && !e.claim.landed():
		s.duplicate(e, claimOf(r))
	default:
		s.fenced(e)
	}
}

// unclaimed drops e, whose claim the store never took, without a word
// (in a group another member may answer it; see stored, reloaded).
func (s *step) unclaimed(e *entry) {
	s.undoDecided(e)
	s.c.setOutcome(e, Dropped)
	s.log(e, "ignored", func(l Line) Line { l.Reason = "store_unavailable"; return l })
	s.forget(e)
}

// claimOf is the decision id record r was claimed with ("": no record).
func claimOf(r *Proposal) string {
	switch {
	case r == nil:
		return ""
	case r.Claim != "":
		return r.Claim
	}
	return r.DecisionID
}

// then carries out what a durable write allowed.
func (s *step) then(e *entry, w pendingWrite) {
	c := s.c
	switch w.then {
	case thenClaimed:
		pre := e.claim.land()
		s.log(e, "received", nil)
		if e.outcome != Open {
			return
		}
		p := e.p
		switch {
		case pre.early != nil:
			s.endQuietly(e, *pre.early)
		case p.Phase == Answered:
			// Invalid, claimed with its reject.
			s.end(e, Rejected, p.Reject.Reason)
			s.sendAnswer(e)
		case !s.now.Before(p.Deadline):
			s.commitReject(e, "timeout", fmt.Sprintf("not decided within %s", c.cfg.PendingTTL))
		default:
			// Admitted as it arrived, it keeps its place: the limits
			// count it from then (load), so they are not looked at
			// again. (Looked at again, a proposal could be admitted and
			// then refused, at the cost of a record written, answered
			// and deleted: most of a flood's "busy" went that way.)
			// Only a shutdown since refuses it; its record ends with
			// its reject.
			if c.closing {
				reason, message := c.refusal(p)
				s.commitReject(e, reason, message)
				return
			}
			if pre.cancelBy != nil {
				s.cancel(e, *pre.cancelBy)
				return
			}
			switch {
			case pre.decided != nil:
				s.decided(*pre.decided)
			case e.decide.state != decideNone:
				// Asked beside the claim (Alone): its answer decides.
			default:
				s.decide(e, false, nil)
			}
		}
	case thenClaimedDecided:
		s.claimedDecided(e, w)
	case thenRefused:
		s.log(e, "received", nil)
		if e.claim.early != nil {
			// Withdrawn (or answered by another) while it was claimed:
			// nothing is sent, and with no record nothing is deleted.
			s.endQuietly(e, *e.claim.early)
			return
		}
		c.setOutcome(e, Rejected)
		r := e.refusal.reject
		r.EnvelopeID = c.ids.EnvelopeID()
		e.p.Phase, e.p.Reject = Answered, &r
		e.answer = answerSending
		s.logReject(e)
		s.emit(SendReject{ID: e.p.ID, To: e.p.From, EnvelopeID: r.EnvelopeID, Reason: r.Reason, Message: r.Message})
	case thenSendReject:
		s.sendAnswer(e)
	case thenFollow:
		if e.outcome != Open || e.p.Phase != Task {
			return // ended before its record was: its end cancelled it
		}
		s.follow(e, "")
	case thenSendRequest:
		if e.outcome != Open || e.p.Phase != Fulfilling {
			return // ended (timed out) before it was written: never sent
		}
		s.log(e, "fulfilling", func(l Line) Line { l.Ahead = true; return l })
		if g := e.grant; g != nil {
			// The approved call is committed: the grant its approver
			// chose is made (for the call as fulfilled).
			e.grant = nil
			p := e.p
			g.Params, g.DecisionID, g.Revision = p.FinalArgs, p.DecisionID, revisionOf(p)
			g.Proposer, g.Method, g.Tool, g.Target, g.Proposed, g.Log = p.From, p.Method, p.Tool, p.Request.Target, p.Params, p.Log
			g.Grantable = p.Decision.Grantable
			s.emit(*g)
		}
		s.sendRequest(e)
	case thenAsk:
		if e.outcome != Open || e.p.Phase != AwaitingApproval {
			return
		}
		approvers := escOf(e.p).Approvers
		// The policy's message is what the humans are asked about: the
		// line says it too (docs/operations.md, the decision log).
		s.log(e, "escalated", func(l Line) Line {
			l.By, l.Message, l.Deadline, l.Ahead = approvers, e.p.Decision.Message, e.p.Deadline, true
			return l
		})
		d := *e.p.Decision
		st := Status{Stage: StatusEscalated, Approvers: approvers, Quorum: max(e.p.Decision.Quorum, 1), Deadline: e.p.Deadline, Decision: &d}
		// The proposer is told before the prompts go out: they are
		// what the approvers answer, and a chat that waits for a
		// session must not hold them up, nor hold up a shutdown's
		// reject behind them.
		s.status(e, st)
		s.opened(e, false)
	case thenQueued:
		if e.outcome == Open && e.p.Phase == Queued && e.slot != slotQueuedForIDs {
			s.status(e, Status{Stage: StatusQueued})
		}
	case thenPrompts:
		s.sendPrompts(e, w.prompts)
	}
}

// claimedDecided carries on once e's claim, written with what its
// decision committed (decidedBeforeClaim), landed: the claim's line, then
// what the decision emitted, then what its write allowed. A withdrawal
// or a shutdown read meanwhile ends it here, as one read before the
// claim of any other proposal; its request (or prompts) never went out.
func (s *step) claimedDecided(e *entry, w pendingWrite) {
	pre := e.claim.land()
	deciding := pre.before.Deadline
	// The line of the proposal as it was received: its decision's
	// revision and route come with the decided line.
	s.emit(Log{Line: lineOf(pre.before, "received", nil)})
	s.emit(pre.after...)
	switch {
	case e.outcome != Open:
		// Its reject, committed with the claim: sent whatever happened
		// meanwhile.
	case pre.early != nil:
		s.endQuietly(e, *pre.early)
		return
	case pre.cancelBy != nil:
		e.req.state = reqUnsent // nothing went out that the reject should cancel
		s.cancel(e, *pre.cancelBy)
		return
	case s.c.closing:
		e.req.state = reqUnsent
		s.closeOne(e)
		return
	case !s.now.Before(deciding):
		// Decided in time, but the store took the claim only past the
		// proposal's deadline (Alone, its tries go on): what the
		// decision committed does not go out that late, as a claim
		// landing late is not decided (then).
		e.req.state = reqUnsent
		s.commitReject(e, "timeout", fmt.Sprintf("not claimed within %s: the pending-work store did not take it", s.c.cfg.PendingTTL))
		return
	}
	if w.next == nil {
		return
	}
	if w.next.line != nil {
		s.emit(Log{Line: *w.next.line})
	}
	s.then(e, *w.next)
}

// status tells e's proposer where e waits, when status chats are on.
func (s *step) status(e *entry, st Status) {
	if !s.c.cfg.StatusChats {
		return
	}
	st.ID, st.To = e.p.ID, e.p.From
	e.chatted = true
	s.emit(st)
}

// load counts the proposals pending here (admitted with a record to
// come, not ended), except the one named except: all of them, those of
// proposer from, and their frame bytes. A proposal counts from its
// admission, not its claim: claims land in any order, and the older work
// keeps its place (DESIGN rule: refuse the new when full).
func (c *Core) load(from, except string) (live, mine int, bytes int64) {
	live, mine, bytes = c.nLive, c.nBy[from], c.nBytes
	if e, ok := c.props[except]; ok && e.counted {
		live, bytes = live-1, bytes-int64(e.p.Size)
		if e.p.From == from {
			mine--
		}
	}
	return live, mine, bytes
}

// setOutcome ends (or drops) e in memory, and so its place in the load.
func (c *Core) setOutcome(e *entry, o Outcome) {
	e.outcome = o
	c.track(e)
}

// track keeps e's place in the load: counted while it is held here,
// admitted with a record to come (not refused at once) and not ended.
// What admits an entry or lets go of it calls it; setOutcome when it
// ends.
func (c *Core) track(e *entry) {
	want := !e.noRecord() && e.outcome == Open && c.props[e.p.ID] == e
	if want == e.counted {
		return
	}
	e.counted = want
	d := 1
	if !want {
		d = -1
	}
	c.nLive += d
	c.nBytes += int64(d * e.p.Size)
	if n := c.nBy[e.p.From] + d; n > 0 {
		c.nBy[e.p.From] = n
	} else {
		delete(c.nBy, e.p.From)
	}
}

// refusal is the reject of a proposal that cannot be admitted now, in
// this order (the first that applies is what the proposer is told):
// shutting down, or busy
// (this member's pending limit, the proposer's, the group full, the
// frame bytes). The proposal itself is not counted.
func (c *Core) refusal(p *Proposal) (reason, message string) {
	live, mine, bytes := c.load(p.From, p.ID)
	switch {
	case c.closing:
		return "other", "fulfiller is shutting down; propose again later"
	case live >= c.cfg.MaxPending:
		return "busy", fmt.Sprintf("%d proposals are pending (the limit); propose again later", c.cfg.MaxPending)
	case c.cfg.MaxPendingPerProposer > 0 && mine >= c.cfg.MaxPendingPerProposer:
		return "busy", fmt.Sprintf("%d of your proposals are pending (the limit per proposer); propose again when one is answered", c.cfg.MaxPendingPerProposer)
	case c.groupCap > 0 && c.groupPending >= c.groupCap:
		return "busy", fmt.Sprintf("the group's pending work is full (%d proposals); propose again later", c.groupCap)
	case c.cfg.MaxPendingBytes > 0 && bytes+int64(p.Size) > c.cfg.MaxPendingBytes:
		return "busy", fmt.Sprintf("pending proposals hold %d of %d bytes (the limit), too few for this %d-byte one; propose again later", bytes, c.cfg.MaxPendingBytes, p.Size)
	}
	return "", ""
}

// fenced drops e without a word: its record is another member's, which
// answers it (and asks its prompts again with the same ids).
func (s *step) fenced(e *entry) { s.fencedWith(e, DropReason, "") }

// fencedWith is fenced, its ignored line saying reason and message.
func (s *step) fencedWith(e *entry, reason, message string) {
	if e.outcome == Open {
		s.end(e, Dropped, DropReason)
	} else if e.asked {
		s.stopAsking(e, DropReason)
	}
	if e.outcome == Withdrawn || (e.claim.early != nil && e.claim.early.outcome == Withdrawn) {
		s.c.withdrawals.put(e.p.ID, e.p.From, "")
	}
	s.c.setOutcome(e, Dropped) // its end is the record holder's, not this member's
	s.log(e, "ignored", func(l Line) Line { l.Reason, l.Message = reason, message; return l })
	s.forget(e)
}

// end ends e in memory: its prompts are cancelled, its slot given to the
// next queued proposal. The record's end is the caller's.
func (s *step) end(e *entry, o Outcome, why string) {
	s.c.setOutcome(e, o)
	e.decide = deciding{}
	if e.p.Phase == Task && !e.req.taskDone && o != Rejected {
		// A task nobody waits for any more is work nobody wants:
		// cancelled at its owner (a reject records its cancel instead,
		// sent with it). Dropped: the record's new holder follows it.
		reason := why
		if o == Dropped {
			reason = DropReason
		}
		s.cancelTask(e, reason)
	}
	if e.asked {
		reason := why
		if o == Dropped {
			reason = DropReason
		}
		s.stopAsking(e, reason)
	} else if e.chatted {
		s.emit(CancelAsk{ID: e.p.ID, Reason: DropReason}) // drops a status chat not written yet
	}
	e.chatted = false
	s.unqueue(e)
	s.giveSlot(e)
}

// unqueue takes e out of the queue for a fulfilment slot.
func (s *step) unqueue(e *entry) {
	if e.slot.queued() {
		e.slot = slotNone
		s.c.slots.remove(e.p.From, e.p.ID)
	}
}

// giveSlot gives e's fulfilment slot to the queued proposals, in turn.
func (s *step) giveSlot(e *entry) {
	if e.slot == slotHeld {
		e.slot = slotNone
		s.c.slots.give(e.p.From)
		s.startQueued()
	}
}

// startQueued starts the queued fulfilments the free slots allow, the
// queued proposers in turn.
func (s *step) startQueued() {
	c := s.c
	for !c.closing && c.haveRPCID() {
		id, ok := c.slots.next(func(id string) bool {
			e, ok := c.props[id]
			return ok && e.outcome == Open && e.slot.queued()
		})
		if !ok {
			return
		}
		e := c.props[id]
		e.slot = slotNone
		s.startRequest(e)
	}
}

// slotQueue shares the fulfilment slots (Config.MaxInflight) among
// proposers: no proposer holds more than
// perProposer at once, and a freed slot goes to the queued proposers in
// turn (round-robin), first come within a proposer. Without it one
// proposer's calls to a tool that hangs fill every slot, and everyone
// else's approved calls wait a FulfillTimeout each.
type slotQueue struct {
	max, perProposer int
	used             int
	held             map[string]int      // proposer → slots held
	queued           map[string][]string // proposer → proposals waiting, first come first
	turn             []string            // proposers with queued proposals, next first
}

func newSlotQueue(max, perProposer int) *slotQueue {
	return &slotQueue{max: max, perProposer: perProposer, held: map[string]int{}, queued: map[string][]string{}}
}

// free reports whether proposer may take a slot now.
func (q *slotQueue) free(proposer string) bool {
	return q.used < q.max && q.held[proposer] < q.perProposer
}

// take gives proposer a slot. A resumed request takes its slot even past
// the limits: it is out already.
func (q *slotQueue) take(proposer string) {
	q.used++
	q.held[proposer]++
}

// give returns a slot proposer held.
func (q *slotQueue) give(proposer string) {
	q.used--
	if q.held[proposer]--; q.held[proposer] <= 0 {
		delete(q.held, proposer)
	}
}

// enqueue makes proposal id wait for a slot, behind its proposer's
// earlier ones.
func (q *slotQueue) enqueue(proposer, id string) {
	if len(q.queued[proposer]) == 0 {
		q.turn = append(q.turn, proposer)
	}
	q.queued[proposer] = append(q.queued[proposer], id)
}

// remove takes proposal id out of its proposer's queue (it ended, or was
// let go of); its proposer keeps its place in the turn while it has more.
func (q *slotQueue) remove(proposer, id string) {
	ids := slices.DeleteFunc(q.queued[proposer], func(x string) bool { return x == id })
	if len(ids) > 0 {
		q.queued[proposer] = ids
		return
	}
	delete(q.queued, proposer)
	q.turn = slices.DeleteFunc(q.turn, func(x string) bool { return x == proposer })
}

// next takes the next queued proposal that may start now, skipping those
// for which waiting reports false; its proposer goes to the back of the
// turn. A proposer at its share is passed over and keeps its place.
func (q *slotQueue) next(waiting func(id string) bool) (string, bool) {
	for i := 0; i < len(q.turn) && q.used < q.max; {
		from := q.turn[i]
		ids := q.queued[from]
		for len(ids) > 0 && !waiting(ids[0]) {
			ids = ids[1:]
		}
		if len(ids) == 0 {
			delete(q.queued, from)
			q.turn = slices.Delete(q.turn, i, i+1)
			continue
		}
		q.queued[from] = ids
		if q.held[from] >= q.perProposer {
			i++
			continue
		}
		id := ids[0]
		q.turn = slices.Delete(q.turn, i, i+1)
		if ids = ids[1:]; len(ids) > 0 {
			q.queued[from] = ids
			q.turn = append(q.turn, from)
		} else {
			delete(q.queued, from)
		}
		return id, true
	}
	return "", false
}

// commitReject ends e with a reject: recorded (phase Answered, with its
// envelope id) before it is sent, so a crash before the write leaves a
// record whose resumer sends the same envelope.
func (s *step) commitReject(e *entry, reason, message string) {
	s.commitRejectFor(e, reason, message, reason)
}

// commitRejectFor is commitReject whose cancel of the request (if one
// went out) says cancelWhy.
func (s *step) commitRejectFor(e *entry, reason, message, cancelWhy string) {
	// A request committed before is cancelled at its owner with the
	// reject, and again with it after a restart (rule 4); a held one
	// never went out, nor did one whose line was not logged.
	cancel := ""
	if e.p.Phase == Fulfilling && e.p.Request != nil && e.req.cancellable() {
		cancel = cancelWhy
	}
	s.commitRejectCancel(e, reason, message, cancel)
}

// cancelTask cancels (or, with DropReason, only stops following) e's task.
func (s *step) cancelTask(e *entry, reason string) {
	p := e.p
	s.emit(CancelTask{ID: p.ID, To: p.Request.Target, TaskID: p.Task.ID, RequestEnvelopeID: p.Request.EnvelopeID, Reason: reason})
}

// taskTimeout is how long p's task may run once created.
func (c *Core) taskTimeout(p *Proposal) time.Duration {
	if p.Decision != nil && p.Decision.TaskTimeout > 0 {
		return p.Decision.TaskTimeout
	}
	return c.cfg.TaskTimeout
}

// taskStarted: the owner answered e's task-augmented request with a
// task. The fulfil timeout ends there and the task's deadline starts;
// its slot is given up (a task runs without one: MaxInflight bounds
// calls in flight, MaxPending the tasks), and the owner's rejoin grace
// ends with the request. Recorded before it is followed.
func (s *step) taskStarted(e *entry, ev Responded) {
	c := s.c
	p := e.p
	p.Phase = Task
	p.Task = &TaskRecord{ID: ev.TaskID, Status: ev.TaskStatus, Created: s.now, Deadline: s.now.Add(c.taskTimeout(p)),
		Spec: ev.TaskSpec, PollMS: ev.TaskPoll.Milliseconds()}
	p.Deadline = p.Task.Deadline
	e.req.graceAt = time.Time{}
	s.queueWrite(e, pendingWrite{rec: p.clone(), then: thenFollow})
	s.emit(Schedule{ID: p.ID, At: p.Deadline, Kind: TimerDeadline})
	s.giveSlot(e)
}

// follow has e's task followed, with its line (message says why: empty
// for a new task).
func (s *step) follow(e *entry, message string) {
	p := e.p
	s.log(e, "task", func(l Line) Line { l.Reason, l.Message = p.Task.Status, message; return l })
	s.emit(FollowTask{ID: p.ID, To: p.Request.Target, TaskID: p.Task.ID, RequestEnvelopeID: p.Request.EnvelopeID, Deadline: p.Deadline})
	s.taskStatusChat(e)
}

func (s *step) taskStatusChat(e *entry) {
	p := e.p
	s.status(e, Status{Stage: StatusTask, Deadline: p.Deadline, Target: p.Request.Target, TaskID: p.Task.ID, TaskStatus: p.Task.Status})
}

func (s *step) taskStatus(ev TaskStatus) {
	e, ok := s.c.props[ev.ID]
	if !ok || e.outcome != Open || e.p.Phase != Task || e.p.Task.ID != ev.TaskID || e.p.Task.Status == ev.Status {
		return
	}
	e.p.Task.Status = ev.Status
	// Best effort, as fulfill's: a status lost in a crash is read again
	// by whoever follows the task next.
	s.queueWrite(e, pendingWrite{rec: e.p.clone(), soon: true})
	s.log(e, "task", func(l Line) Line { l.Reason, l.Message = ev.Status, ev.Message; return l })
	s.taskStatusChat(e)
}

// taskEnded relays the outcome of e's task, or
// rejects e "other" when the owner no longer knows the task (nothing to
// cancel there).
func (s *step) taskEnded(ev TaskEnded) {
	e, ok := s.c.props[ev.ID]
	if !ok || e.outcome != Open || e.p.Phase != Task || e.p.Task.ID != ev.TaskID {
		return
	}
	e.req.taskDone = true
	if ev.Gone != "" {
		s.commitRejectCancel(e, "other", fmt.Sprintf("%s no longer knows task %s: %s", e.p.Request.Target, ev.TaskID, ev.Gone), "")
		return
	}
	e.p.Task.Status = ev.Status
	s.commitRelay(e, ev.TaskID, ev.Result, ev.Error)
}

// commitRelay ends e with the relayed outcome of its task-augmented
// request: recorded (phase Answered) before it is written, as a reject
// is, so that it is written once and again after a crash with the same
// ids, never lost and never followed by a second.
func (s *step) commitRelay(e *entry, taskID string, result, rpcErr []byte) {
	s.end(e, Fulfilled, "fulfilled")
	p := e.p
	p.Phase = Answered
	p.Relay = &RelayRecord{EnvelopeID: s.c.ids.EnvelopeID(), RPCID: s.rpcID(), TaskID: taskID, Result: result, Error: rpcErr}
	s.queueWrite(e, pendingWrite{rec: p.clone(), then: thenSendReject})
}

// sendAnswer writes e's committed answer (its reject, or its relay),
// with its line, and the cancels that go before a reject.
func (s *step) sendAnswer(e *entry) {
	e.answer = answerSending
	p := e.p
	if r := p.Relay; r != nil {
		s.log(e, "fulfilled", func(l Line) Line {
			l.Message = "relayed the outcome of task " + r.TaskID
			l.Result, l.RPCError, l.By = r.Result, r.Error, p.ApprovedBy
			if p.Request != nil {
				l.Latency = s.now.Sub(p.Request.SentAt)
			}
			return l
		})
		s.emit(SendRelay{ID: p.ID, To: p.From, EnvelopeID: r.EnvelopeID, RPCID: r.RPCID, TaskID: r.TaskID, Result: r.Result, Error: r.Error})
		return
	}
	r := p.Reject
	s.logReject(e)
	s.cancelRequest(e)
	s.emit(SendReject{ID: p.ID, To: p.From, EnvelopeID: r.EnvelopeID, Reason: r.Reason, Message: r.Message})
}

// answerEnvelope is the envelope id of e's committed answer ("": none).
func answerEnvelope(p *Proposal) string {
	switch {
	case p.Relay != nil:
		return p.Relay.EnvelopeID
	case p.Reject != nil:
		return p.Reject.EnvelopeID
	}
	return ""
}

// commitRejectCancel is commitReject, cancel the reason of the request's
// cancel at its owner ("": not cancelled).
func (s *step) commitRejectCancel(e *entry, reason, message string, cancel string) {
	s.end(e, Rejected, reason)
	p := e.p
	task := p.Phase == Task && !e.req.taskDone
	p.Phase = Answered
	p.Reject = &RejectRecord{EnvelopeID: s.c.ids.EnvelopeID(), Reason: reason, Message: message, CancelRequest: cancel != "", CancelTask: task}
	if cancel != "" && cancel != reason {
		p.Reject.CancelReason = cancel
	}
	s.queueWrite(e, pendingWrite{rec: p.clone(), then: thenSendReject})
}

// commitFulfil fulfils e with params at target, or queues it for a slot.
func (s *step) commitFulfil(e *entry, target string, params []byte) {
	c := s.c
	s.stopAsking(e, "approved")
	e.p.FinalArgs = params
	if e.p.Decision != nil {
		e.p.Decision.Target = target
	}
	if !c.canStart(e.p.From) || c.closing {
		s.topUp()
		e.p.Phase = Queued
		e.p.Deadline = s.now.Add(c.cfg.PendingTTL)
		e.slot = slotQueued
		if c.slots.free(e.p.From) && !c.closing {
			e.slot = slotQueuedForIDs
		}
		c.slots.enqueue(e.p.From, e.p.ID)
		if e.slot == slotQueued {
			s.log(e, "queued", nil)
		}
		// Nothing sent waits for it: a crash before it is durable
		// resumes the proposal decided, or not yet (decided again).
		s.queueWrite(e, pendingWrite{rec: e.p.clone(), then: thenQueued, soon: true})
		s.emit(Schedule{ID: e.p.ID, At: e.p.Deadline, Kind: TimerDeadline})
		return
	}
	s.startRequest(e)
}

// startRequest commits the fulfilment request: it is recorded before it
// is sent and never sent twice; from here on a withdrawal is late.
func (s *step) startRequest(e *entry) {
	c := s.c
	p := e.p
	e.slot = slotHeld
	c.slots.take(p.From)
	target := p.Decision.Target
	p.Phase = Fulfilling
	p.Request = &Request{EnvelopeID: c.ids.EnvelopeID(), RPCID: s.rpcID(), Target: target, SentAt: s.now, Task: p.Decision.Task}
	p.Deadline = s.now.Add(c.cfg.FulfillTimeout)
	c.byRequest[p.Request.EnvelopeID] = p.ID
	if c.away[target] {
		// The gateway replays nothing: a request sent while its owner is
		// away would be lost, and the proposer would wait for the fulfil
		// timeout. Held for the owner's rejoin grace instead, and not
		// recorded either (released by joined), so a crash meanwhile
		// resumes the proposal from its record before (a withdrawal is
		// late all the same: the slot and the request are taken).
		e.req.state = reqHeld
		s.emit(Schedule{ID: p.ID, At: p.Deadline, Kind: TimerDeadline})
		s.startGrace(e)
		return
	}
	s.queueWrite(e, pendingWrite{rec: p.clone(), then: thenSendRequest})
	s.emit(Schedule{ID: p.ID, At: p.Deadline, Kind: TimerDeadline})
}

// startGrace starts the rejoin grace of e's tool owner, unless one runs
// or this member is shutting down (which answers every proposal).
func (s *step) startGrace(e *entry) {
	if s.c.closing || !e.req.graceAt.IsZero() {
		return
	}
	e.req.graceAt = s.now.Add(s.c.cfg.OwnerRejoinGrace)
	s.emit(Schedule{ID: e.p.ID, At: e.req.graceAt, Kind: TimerGrace})
}

// release sends e's held request: recorded first, as every request
// (one the wire found its owner away for is recorded and logged
// already, and goes out as it is, with the same ids).
func (s *step) release(e *entry) {
	logged := e.req.state == reqHeldLogged
	e.req.state = reqNone
	e.req.graceAt = time.Time{}
	if logged {
		s.sendRequest(e)
		return
	}
	s.queueWrite(e, pendingWrite{rec: e.p.clone(), then: thenSendRequest})
}

// sendRequest writes e's recorded fulfilment request (its line logged).
func (s *step) sendRequest(e *entry) {
	e.req.state = reqSending
	r := e.p.Request
	s.emit(SendRequest{ID: e.p.ID, To: r.Target, EnvelopeID: r.EnvelopeID, RPCID: r.RPCID, Params: e.p.FinalArgs, Task: r.Task, TaskTTL: s.c.taskTimeout(e.p)})
}

// refused: the gateway refused e's fulfilment request; it never reached
// the owner, so there is nothing to cancel.
func (s *step) refused(ev Refused) {
	e, ok := s.c.props[ev.ID]
	if !ok || e.outcome != Open || e.p.Phase != Fulfilling || e.p.Request == nil || e.p.Request.EnvelopeID != ev.EnvelopeID {
		return
	}
	e.req.state = reqUnsent
	s.commitRejectCancel(e, "other", "the gateway refused the fulfilment request", "")
}

// unlogged fails closed: a line written ahead of a send was not written,
// so the send was not made (the Loop dropped it) and e is rejected
// "other"; a request recorded but never written is never sent after, nor
// cancelled.
func (s *step) unlogged(ev Unlogged) {
	e, ok := s.c.props[ev.ID]
	if !ok || e.outcome != Open {
		return
	}
	msg := s.c.cfg.UnloggedMessage
	if msg == "" {
		msg = "the decision log cannot be written; propose again later"
	}
	switch {
	case ev.Stage == "fulfilling" && e.p.Phase == Fulfilling && e.p.Request != nil:
		e.req.state = reqUnsent
		s.commitRejectCancel(e, "other", msg, "")
	case ev.Stage == "escalated" && e.p.Phase == AwaitingApproval:
		// Nothing was asked (the prompts and the status were dropped).
		e.asked, e.chatted = false, false
		s.commitReject(e, "other", msg)
	}
}

// sorted returns the ids of the proposals held, in order: what an event
// about many does is the same in every run.
func (c *Core) sorted() []string {
	ids := make([]string, 0, len(c.props))
	for id := range c.props {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// fulfilling returns the open proposals in phase Fulfilling whose request goes
// to owner, in id order.
func (c *Core) fulfilling(owner string) []*entry {
	var out []*entry
	for _, id := range c.sorted() {
		e := c.props[id]
		if e.outcome == Open && e.p.Phase == Fulfilling && e.p.Request != nil && e.p.Request.Target == owner {
			out = append(out, e)
		}
	}
	return out
}

// left starts the rejoin grace of every fulfilment whose owner left
// (a dropped link is a leave too); a grace that runs already is not
// restarted.
func (s *step) left(ev ParticipantLeft) {
	s.c.away[ev.ID] = true
	delete(s.c.present, ev.ID)
	if s.c.closing {
		return
	}
	for _, e := range s.c.fulfilling(ev.ID) {
		s.startGrace(e)
	}
}

// joined sends the requests held for the owner that is back. The grace of a request that went out runs on: at its end
// the owner is here, and its response is still awaited.
func (s *step) joined(id string) {
	delete(s.c.away, id)
	if s.c.rosterKnown {
		s.c.present[id] = true
	}
	for _, e := range s.c.fulfilling(id) {
		if e.req.held() {
			s.release(e)
		}
	}
}

// graceEnded ends the rejoin grace of e's owner:
// an owner that is back keeps e (a held request goes out now); one still
// away, as this member has heard, will not answer, and e is rejected
// "incapable". A request that went out (or is going out) is cancelled
// first, as any request a reject follows (rule 4): what this member has
// heard may lag the space (the owner's leave read after the request was
// written, its return not read yet), and an owner that is back after all
// runs a call the proposer was told it would not. A cancel that reaches
// nobody costs nothing.
func (s *step) graceEnded(e *entry) {
	c := s.c
	e.req.graceAt = time.Time{}
	if c.closing {
		return
	}
	req := e.p.Request
	if !c.away[req.Target] {
		if e.req.held() {
			s.release(e)
		}
		return
	}
	msg := fmt.Sprintf("%s left the space before answering", req.Target)
	if e.req.held() {
		msg = fmt.Sprintf("%s was not in the space to carry the call out, and did not come back within %s", req.Target, c.cfg.OwnerRejoinGrace)
	}
	cancel := ""
	if e.req.cancellable() {
		cancel = "the tool owner left"
	}
	s.commitRejectCancel(e, "incapable", msg, cancel)
}

func (s *step) decided(ev Decided) {
	c := s.c
	e, ok := c.props[ev.ID]
	if !ok || e.outcome != Open || e.decide.state == decideNone || (e.decide.state == decideAgain) != ev.Again {
		return
	}
	if !e.claim.landed() {
		if e.claim.state == claimHeld && e.claim.early == nil && !c.closing && !queues(c, e, ev) {
			s.decidedBeforeClaim(e, ev)
			return
		}
		s.unhold(e)
		// A copy: &ev itself would move every Decided to the heap.
		early := ev
		e.claim.decided = &early // taken once the claim lands (then)
		return
	}
	s.carryOut(e, ev)
}

// carryOut carries out ev, the decision of e, claimed (or whose claim
// carries it: decidedBeforeClaim).
func (s *step) carryOut(e *entry, ev Decided) {
	c := s.c
	again := e.decide
	e.decide = deciding{}
	d := ev.Decision
	p := e.p
	if ev.Again {
		p.DecisionID = again.id // a new decision governs what follows
		if p.DecisionID == "" {
			p.DecisionID = c.ids.DecisionID()
		}
	}
	p.Decision = &d
	s.log(e, "decided", func(l Line) Line { l.Action, l.Reason, l.Note = d.Action, d.Reason, ev.Note; return l })
	if ev.Again {
		params := again.edit
		switch d.Action {
		case Fulfill:
		case Escalate:
			if !approvalsSatisfy(p, d) {
				s.commitReject(e, "policy", "the edited call needs other approval: "+d.Message)
				return
			}
		default:
			s.commitReject(e, orPolicy(d.Reason), d.Message)
			return
		}
		if ev.Incapable != "" {
			s.commitReject(e, "incapable", ev.Incapable)
			return
		}
		s.commitFulfil(e, d.Target, params)
		return
	}
	switch d.Action {
	case Fulfill:
		if ev.Incapable != "" {
			s.commitReject(e, "incapable", ev.Incapable)
			return
		}
		s.commitFulfil(e, d.Target, p.Params)
	case Escalate:
		if ev.Incapable != "" {
			s.commitReject(e, "incapable", ev.Incapable) // rule 1: nobody asked about a call nobody can carry out
			return
		}
		timeout := d.Timeout
		if timeout <= 0 {
			timeout = c.cfg.ApprovalTimeout
		}
		p.Phase = AwaitingApproval
		p.Deadline = s.now.Add(timeout)
		p.Prompts, p.Approvals, p.ApprovedBy = nil, nil, nil
		if c.cfg.Codec == nil {
			s.commitReject(e, "policy", NoApprovalsMessage)
			return
		}
		if !s.startEscalation(e) {
			return
		}
		// Recorded before any human is asked: a restart or an adopter
		// asks the same prompts again, with the same deadline.
		s.queueWrite(e, pendingWrite{rec: p.clone(), then: thenAsk})
		s.emit(Schedule{ID: p.ID, At: p.Deadline, Kind: TimerDeadline})
	default:
		s.commitReject(e, orPolicy(d.Reason), d.Message)
	}
}

func orPolicy(reason string) string {
	if reason == "" {
		return "policy"
	}
	return reason
}

// lastEdit is the params the approvals settled on: the last edit, else
// the proposal's own.
func lastEdit(p *Proposal) []byte {
	for i := len(p.Approvals) - 1; i >= 0; i-- {
		if p.Approvals[i].Params != nil {
			return p.Approvals[i].Params
		}
	}
	return p.Params
}

// edited reports whether an approver changed the params.
func edited(p *Proposal) bool {
	return slices.ContainsFunc(p.Approvals, func(a Approval) bool { return a.Params != nil })
}

// approvalsSatisfy reports whether the approvers who approved meet an
// escalate decision's approvers and quorum (rule 7).
func approvalsSatisfy(p *Proposal, d Decision) bool {
	n := 0
	for _, by := range p.ApprovedBy {
		if len(d.Approvers) == 0 || slices.Contains(d.Approvers, by) {
			n++
		}
	}
	return n >= max(d.Quorum, 1)
}

func (s *step) sent(ev Sent) {
	e, ok := s.c.props[ev.ID]
	if !ok {
		return
	}
	p := e.p
	switch {
	case answerEnvelope(p) != "" && ev.EnvelopeID == answerEnvelope(p) && e.answer == answerSending:
		if ev.Err != nil {
			// Not written: the record stays, and the same envelope is
			// written again; the proposer is owed it (a relay too: the
			// proposer's answer).
			e.answer, e.resendAt = answerResend, s.now.Add(s.c.cfg.RetryAfter)
			s.emit(Schedule{ID: p.ID, At: e.resendAt, Kind: TimerResend})
			return
		}
		e.answer, e.resendAt = answerIdle, time.Time{}
		if !e.noRecord() {
			s.queueWrite(e, pendingWrite{}) // delete
		}
		s.forgetIfDone(e)
	case p.Request != nil && ev.EnvelopeID == p.Request.EnvelopeID:
		if ev.Err == nil {
			if e.req.state != reqUnsent {
				e.req.state = reqOut
			}
			return
		}
		if errors.Is(ev.Err, ErrAway) {
			// Its owner is not in the space (this member had not heard
			// it left): nothing was written, and the owner is away for
			// every request, whatever became of this one meanwhile.
			s.c.away[p.Request.Target] = true
			switch {
			case e.req.state == reqUnsent:
			case e.outcome == Open && p.Phase == Fulfilling:
				// Held for the owner's rejoin grace, as a request due
				// while its owner is away; its record and line have it
				// already, so it goes out as it is.
				e.req.state = reqHeldLogged
				s.startGrace(e)
			default:
				e.req.state = reqNone
			}
			return
		}
		if e.outcome == Open && p.Phase == Fulfilling {
			// Not written (a lost session counts as written in the
			// shell): the proposer is answered, the request never
			// written again.
			s.commitReject(e, "other", "the fulfilment request could not be sent")
		}
	}
}

func (s *step) fired(ev Fired) {
	c := s.c
	e, ok := c.props[ev.ID]
	if !ok {
		return
	}
	p := e.p
	switch ev.Kind {
	case TimerRetry:
		if e.store.state == writeIdle && len(e.store.queue) > 0 && ev.At.Equal(e.store.retryAt) {
			s.issue(e)
		}
	case TimerResend:
		if e.answer == answerResend && ev.At.Equal(e.resendAt) && answerEnvelope(p) != "" {
			e.answer = answerSending
			if r := p.Relay; r != nil {
				s.emit(SendRelay{ID: p.ID, To: p.From, EnvelopeID: r.EnvelopeID, RPCID: r.RPCID, TaskID: r.TaskID, Result: r.Result, Error: r.Error})
				return
			}
			r := p.Reject
			s.emit(SendReject{ID: p.ID, To: p.From, EnvelopeID: r.EnvelopeID, Reason: r.Reason, Message: r.Message})
		}
	case TimerHold:
		s.unhold(e) // the decision follows the claim (claim.decided)
	case TimerStep:
		if s.escRunning(e) {
			s.due(e, ev.At)
		}
	case TimerGrace:
		if e.outcome == Open && p.Phase == Fulfilling && ev.At.Equal(e.req.graceAt) {
			s.graceEnded(e)
		}
	case TimerDeadline:
		if e.outcome != Open || !ev.At.Equal(p.Deadline) {
			return
		}
		if e.noRecord() {
			return // its claim is tried until it lands: then its reject goes
		}
		if e.claim.state == claimHeld {
			// Not decided in time: claimed as it is, and then rejected
			// "timeout" (then).
			s.unhold(e)
			return
		}
		if !e.claim.landed() {
			// Never claimed (the store was unreachable): no record, so
			// nothing can be answered exactly once; left to the group
			// or to the proposer's own timeout. Alone on its store,
			// the claim's tries go on: it is rejected once claimed.
			if e.store.state != writeIdle || c.cfg.Alone {
				return // the claim's result decides (then sees the deadline)
			}
			s.reload(e) // a failed try may have been applied all the same
			return
		}
		switch p.Phase {
		case Deciding, Queued:
			s.commitReject(e, "timeout", fmt.Sprintf("not decided within %s", c.cfg.PendingTTL))
		case AwaitingApproval:
			if e.asked {
				s.escEnd(e, "timeout", timedOut(p))
				return
			}
			s.commitReject(e, "timeout", "no approval by "+p.Deadline.UTC().Format(time.RFC3339))
		case Fulfilling:
			// Rule 4: cancelled at the owner, then rejected "timeout".
			s.commitReject(e, "timeout", fmt.Sprintf("%s did not answer within %s", p.Request.Target, c.cfg.FulfillTimeout))
		case Task:
			// Cancelled at its owner (tasks/cancel), then rejected
			// "timeout".
			s.commitReject(e, "timeout", fmt.Sprintf("task %s at %s did not end within %s", p.Task.ID, p.Request.Target, c.taskTimeout(p)))
		}
	}
}

func (s *step) withdrawn(ev WithdrawnBy) {
	e, ok := s.c.props[ev.ID]
	if !ok {
		// Another member's, maybe: remembered, so that it still counts
		// if this member adopts the proposal's record later.
		s.c.withdrawals.put(ev.ID, ev.From, ev.Reason)
		return
	}
	if ev.From != e.p.From {
		s.log(e, "ignored", func(l Line) Line {
			l.Reason, l.Message, l.By = "spoofed_withdraw", "withdrawal from "+ev.From, []string{ev.From}
			return l
		})
		return
	}
	end := earlyEnd{outcome: Withdrawn, stage: "withdrawn", why: ev.Reason}
	if e.carrying() {
		// Its decision waits for its claim, and so does what it sent:
		// nothing went out yet, so it ends as one not decided would.
		s.earlyBeforeClaim(e, end, "late_withdraw")
		return
	}
	if e.outcome != Open || e.p.Phase == Fulfilling || e.p.Phase == Answered {
		s.log(e, "ignored", func(l Line) Line { l.Reason = "late_withdraw"; return l })
		return
	}
	if !e.claim.landed() {
		e.claim.early = &end
		s.unhold(e)
		return
	}
	s.endQuietly(e, end)
}

// earlyBeforeClaim takes end, read while e's claim carries its decision
// (decidedBeforeClaim), for when the claim lands: e ends with it then if
// the decision left it open (as a proposal read before its claim ends),
// and otherwise its answer stands and the line ignoredAs says so, after
// the claim's ("": none).
func (s *step) earlyBeforeClaim(e *entry, end earlyEnd, ignoredAs string) {
	if e.outcome == Open {
		e.claim.early = &end
		return
	}
	if ignoredAs != "" {
		e.claim.after = append(e.claim.after, Log{Line: lineOf(e.p, "ignored", func(l Line) Line { l.Reason = ignoredAs; return l })})
	}
}

func (s *step) superseded(ev SupersededBy) {
	e, ok := s.c.props[ev.ID]
	// A proposal in phase Task is not superseded either: its proposer
	// waits for the relayed result, and only it, an operator or the
	// task's deadline may end it.
	if !ok {
		return
	}
	// By names the participant that answered; the message says so too.
	why := ev.Why
	if why == "" {
		why = ev.By
	}
	end := earlyEnd{outcome: Superseded, stage: "superseded", why: why, by: []string{ev.By}}
	if e.carrying() {
		s.earlyBeforeClaim(e, end, "") // nothing went out yet
		return
	}
	if e.outcome != Open || e.p.Phase == Fulfilling || e.p.Phase == Task || e.p.Phase == Answered {
		return
	}
	if !e.claim.landed() {
		e.claim.early = &end
		s.unhold(e)
		return
	}
	s.endQuietly(e, end)
}

// endQuietly ends e with nothing sent to the proposer, and deletes its
// record (queued after a claim still being written).
func (s *step) endQuietly(e *entry, how earlyEnd) {
	s.end(e, how.outcome, how.stage)
	line := lineOf(e.p, how.stage, func(l Line) Line {
		l.Message, l.By = how.why, how.by
		if how.outcome == Withdrawn {
			// The proposer's reason for withdrawing is the line's
			// reason: it is the proposer's word, not ours.
			l.Reason, l.Message = how.why, ""
		}
		return l
	})
	// Writes not yet issued carried what no longer happens; the one
	// outstanding (a claim, say) is followed by the delete.
	if e.store.state == writeOut {
		e.store.queue = e.store.queue[:1]
	} else {
		e.store.queue = nil
	}
	if e.claim.landed() || e.store.state == writeOut {
		s.queueWrite(e, pendingWrite{line: &line})
	} else {
		s.emit(Log{Line: line})
	}
	s.forgetIfDone(e)
}

func (s *step) responded(ev Responded) {
	c := s.c
	id, ok := c.byRequest[ev.RequestID]
	if !ok {
		return
	}
	e, ok := c.props[id]
	if !ok || e.outcome != Open || e.p.Phase != Fulfilling || !e.req.out() {
		return
	}
	req := e.p.Request
	switch {
	case ev.From != req.Target:
		s.spoofed(e, ev, "response_from_other")
		return
	case ev.HasRPCID && ev.RPCID != req.RPCID:
		s.spoofed(e, ev, "wrong_rpc_id")
		return
	case req.Task && ev.TaskID != "":
		s.taskStarted(e, ev)
		return
	case req.Task:
		// No task was made: the call's outcome, which the proposer saw
		// no request for, is relayed at once.
		s.commitRelay(e, "", ev.Result, ev.Error)
		return
	}
	s.end(e, Fulfilled, "fulfilled")
	s.log(e, "fulfilled", func(l Line) Line {
		l.Result, l.RPCError, l.By, l.Latency = ev.Result, ev.Error, e.p.ApprovedBy, s.now.Sub(req.SentAt)
		return l
	})
	s.queueWrite(e, pendingWrite{})
}

// spoofed logs an answer to e's request that is not taken, once per
// proposal: a flood of forgeries must not
// flood the decision log. Its line carries the raw payload when the
// shell gave it.
func (s *step) spoofed(e *entry, ev Responded, reason string) {
	if e.spoofed {
		return
	}
	e.spoofed = true
	s.log(e, "ignored", func(l Line) Line {
		l.Reason, l.By, l.Message, l.Result, l.RPCError = reason, []string{ev.From}, ev.Message, ev.Result, ev.Error
		if ev.Payload != nil {
			l.Result, l.RPCError = ev.Payload, nil
		}
		return l
	})
}

func (s *step) cancelled(ev Cancelled) {
	e, ok := s.c.props[ev.ID]
	if ok && e.outcome == Open && (e.claim.state == claimHeld || e.carrying()) {
		by := ev.By
		e.claim.cancelBy = &by
		s.unhold(e)
		return
	}
	if !ok || e.outcome != Open || !e.claim.landed() || e.p.Phase == Fulfilling || e.p.Phase == Answered {
		p := &Proposal{ID: ev.ID}
		if ok {
			p = e.p
		} else {
			p.DecisionID = s.c.ids.DecisionID()
		}
		l := lineOf(p, "ignored", func(l Line) Line { l.Reason, l.Message = "cancel_refused", "cancel by "+ev.By; return l })
		if ok {
			if e.outcome == Open && !e.claim.landed() {
				l.Message += ": not claimed yet"
			} else {
				l.Message += ": already answered"
			}
		} else {
			l.Message += ": not held here"
		}
		s.emit(Log{Line: l})
		return
	}
	s.cancel(e, ev.By)
}

// cancel rejects e on an operator's behalf (by: who).
func (s *step) cancel(e *entry, by string) {
	msg := "cancelled by the operator"
	if by != "" {
		msg += " (" + by + ")"
	}
	if e.asked {
		// The escalation ends "cancelled" (what the approvers are told of
		// an operator's cancel), not with the reject's reason.
		s.stopAsking(e, "cancelled")
		e.chatted = false
	}
	s.commitReject(e, "other", msg)
}

func (s *step) closing() {
	c := s.c
	c.closing = true
	ids := make([]string, 0, len(c.props))
	for id := range c.props {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		s.closeOne(c.props[id])
	}
}

// closeOne answers e "other" at shutdown, cancelling its request at the
// owner if one went out.
func (s *step) closeOne(e *entry) {
	s.unhold(e) // claimed, it is answered like the rest (then)
	if e.outcome != Open || !e.claim.landed() {
		return
	}
	if e.p.Phase == Fulfilling && e.req.cancellable() {
		s.commitRejectFor(e, "other", "fulfiller is shutting down; the call was cancelled at "+e.p.Request.Target, "shutdown")
		return
	}
	if e.p.Phase == Task {
		s.commitReject(e, "other", "fulfiller is shutting down; task "+e.p.Task.ID+" was cancelled at "+e.p.Request.Target)
		return
	}
	s.commitReject(e, "other", "fulfiller is shutting down; propose again later")
}

// resume takes over a record read from the store (docs/design.md
// "Durable and shared pending work", Restart).
func (s *step) resume(r Proposal, how string) {
	c := s.c
	var early *earlyEnd
	if old, ok := c.props[r.ID]; ok {
		if old.claim.landed() && r.Rev <= old.p.Rev {
			// The same record again, or one read before this member's
			// own later writes (a start-up scan that listed a record
			// taken for an operator's cancel): revisions only grow.
			return
		}
		// Held here already: read while its claim was still being
		// tried, or taken back from a member that adopted it. The
		// record is the truth now; the outstanding write of the entry
		// it replaces is ignored (it can only conflict).
		if !old.claim.landed() {
			early = old.claim.early
		}
		if old.outcome == Withdrawn {
			c.withdrawals.put(old.p.ID, old.p.From, "")
		}
		s.discard(old)
		// A slot it let go of and the record does not take goes to the
		// queued proposals.
		defer s.startQueued()
	} else if c.ended.has(r.ID) {
		return // a record of a proposal ended here, read late
	}
	c.seen.add(r.ID)
	e := &entry{p: r.clone(), claim: claim{state: claimLanded}}
	c.props[r.ID] = e
	c.track(e)
	p := e.p
	s.log(e, "resumed", func(l Line) Line { l.Message = how + " (" + string(p.Phase) + ")"; return l })
	if w, ok := c.withdrawals.get(p.ID, p.From); ok && early == nil {
		early = &earlyEnd{outcome: Withdrawn, stage: "withdrawn", why: w.reason}
	}
	if early != nil && (p.Phase == Deciding || p.Phase == AwaitingApproval || p.Phase == Queued || p.Phase == Task) {
		e.asked = p.Phase == AwaitingApproval
		s.endQuietly(e, *early)
		return
	}
	for _, pr := range p.Prompts {
		c.byPrompt[pr.EnvelopeID] = p.ID
	}
	if c.closing {
		// Adopted while shutting down: answered like the rest.
		defer s.closeOne(e)
	}
	switch p.Phase {
	case Answered:
		// The same envelope again: a proposer that has it sees a repeat,
		// one that does not is answered.
		o := Rejected
		if p.Relay != nil {
			o = Fulfilled
		}
		c.setOutcome(e, o)
		s.sendAnswer(e)
	case Task:
		// Followed again; it keeps its deadline, and runs without a slot.
		c.byRequest[p.Request.EnvelopeID] = p.ID
		e.req.state = reqOut
		s.follow(e, "followed again after a restart or adoption")
		s.emit(Schedule{ID: p.ID, At: p.Deadline, Kind: TimerDeadline})
	case Fulfilling:
		// Never written again; its response is awaited until the
		// deadline counted from when it was committed.
		e.req.state, e.slot = reqOut, slotHeld
		c.slots.take(p.From)
		c.byRequest[p.Request.EnvelopeID] = p.ID
		s.emit(Schedule{ID: p.ID, At: p.Deadline, Kind: TimerDeadline})
	case AwaitingApproval:
		// Its prompts were asked by whoever held it before: an end now
		// cancels them.
		e.asked = true
		if !s.now.Before(p.Deadline) {
			s.commitReject(e, "timeout", "no approval by "+p.Deadline.UTC().Format(time.RFC3339)+" (the deadline passed while no fulfiller held the proposal)")
			return
		}
		if c.cfg.Codec == nil {
			// Nobody can ask the humans here (a record of a member
			// that could): rejected at once, as a new escalation is,
			// rather than at its deadline; its prompts are withdrawn.
			s.commitReject(e, "policy", NoApprovalsMessage)
			return
		}
		// The same prompts again, with their ids, and the approvals
		// recorded counted once.
		s.emit(Schedule{ID: p.ID, At: p.Deadline, Kind: TimerDeadline})
		s.resumeEscalation(e)
	case Queued:
		s.commitFulfil(e, p.Decision.Target, p.FinalArgs)
	default:
		if p.Invalid != "" {
			s.commitReject(e, "invalid", p.Invalid)
			return
		}
		if !s.now.Before(p.Deadline) {
			s.commitReject(e, "timeout", fmt.Sprintf("not decided within %s", c.cfg.PendingTTL))
			return
		}
		s.decide(e, false, nil)
		s.emit(Schedule{ID: p.ID, At: p.Deadline, Kind: TimerDeadline})
	}
}

// logReject writes the line of e's committed reject: once it is
// durable, and again when a resumed record sends it again.
func (s *step) logReject(e *entry) {
	r := e.p.Reject
	s.log(e, "rejected", func(l Line) Line { l.Reason, l.Message = r.Reason, r.Message; return l })
}

// cancelRequest cancels e's fulfilment request at its owner when its
// reject says so.
func (s *step) cancelRequest(e *entry) {
	if r := e.p.Reject; r != nil && r.CancelRequest && e.p.Request != nil {
		req := e.p.Request
		why := r.CancelReason
		if why == "" {
			why = r.Reason
		}
		s.emit(SendCancel{ID: e.p.ID, To: req.Target, RequestEnvelopeID: req.EnvelopeID, RPCID: req.RPCID, Reason: why})
	}
	if r := e.p.Reject; r != nil && r.CancelTask && e.p.Task != nil && e.p.Request != nil {
		s.cancelTask(e, r.Reason)
	}
}

func openPrompts(p *Proposal) []Prompt {
	var out []Prompt
	for _, pr := range p.Prompts {
		if pr.open() {
			out = append(out, pr)
		}
	}
	return out
}

// discard lets go of e in memory without a word or a write, as its
// record (read again) replaces it. An escalation it ran stops without a
// word: the record's prompts are asked again, the record saying what
// holds.
func (s *step) discard(e *entry) {
	c := s.c
	if e.outcome == Open && e.asked {
		s.stopAsking(e, DropReason)
	}
	c.letGo(e) // a slot it frees goes to the queue once the record is resumed
}

// letGo takes e out of the core: its entry, its place in the load, the
// ids that find it, its place in the slot queue and its slot. It
// reports whether it gave a slot back, which the queued proposals may
// take now.
func (c *Core) letGo(e *entry) (freed bool) {
	delete(c.props, e.p.ID)
	c.track(e)
	c.forgotten = append(c.forgotten, e.p.ID)
	if e.refusal != nil && e.refusal.waiting {
		c.refusing--
	}
	if e.p.Request != nil {
		delete(c.byRequest, e.p.Request.EnvelopeID)
	}
	for _, pr := range e.p.Prompts {
		delete(c.byPrompt, pr.EnvelopeID)
	}
	switch e.slot {
	case slotQueued, slotQueuedForIDs:
		c.slots.remove(e.p.From, e.p.ID)
	case slotHeld:
		c.slots.give(e.p.From)
		freed = true
	}
	e.slot = slotNone
	return freed
}

func (s *step) forgetIfDone(e *entry) {
	if e.outcome != Open && e.store.state == writeIdle && len(e.store.queue) == 0 && e.answer == answerIdle {
		s.forget(e)
	}
}

func (s *step) forget(e *entry) {
	c := s.c
	id := e.p.ID
	if c.props[id] != e {
		return
	}
	freed := c.letGo(e)
	// A replay read later joins its decision (rule 10): the claim's,
	// when this member held the record.
	if e.claim.landed() {
		governing := e.p.DecisionID
		if governing == "" {
			governing = claimOf(e.p)
		}
		c.seen.put(id, governing+"\x00"+revisionOf(e.p))
	}
	if e.outcome != Dropped {
		c.ended.add(id)
	}
	if freed {
		s.startQueued()
	}
}

// idSet is a bounded set of ids, each with a value (the seen set's: the
// decision id its claim holds): the oldest go first.
type idSet struct {
	max int
	ids map[string]string
	// order is the ids in the order they came, a ring once it holds
	// max: next is where the next id goes, over the oldest. (A slice
	// cut from the front and appended to at the back was copied anew
	// each time it outgrew its array, once every few thousand ids.)
	order []string
	next  int
}

func newIDSet(max int) *idSet { return &idSet{max: max, ids: map[string]string{}} }

func (s *idSet) has(id string) bool { _, ok := s.ids[id]; return ok }

// get is id's value ("": none, or not in the set).
func (s *idSet) get(id string) string { return s.ids[id] }

// put sets the value of an id in the set (one let go of stays out).
func (s *idSet) put(id, v string) {
	if s.has(id) && v != "" {
		s.ids[id] = v
	}
}

// add puts id in the set and returns the id it let go of, if any.
func (s *idSet) add(id string) (evicted string) {
	if s.has(id) {
		return ""
	}
	s.ids[id] = ""
	if len(s.order) < s.max {
		s.order = append(s.order, id)
		return ""
	}
	evicted = s.order[s.next]
	delete(s.ids, evicted)
	s.order[s.next] = id
	s.next = (s.next + 1) % s.max
	return evicted
}

type withdrawal struct{ from, reason string }

// withdrawalSet remembers withdrawals, boundedly (the oldest go first).
type withdrawalSet struct {
	ids *idSet
	by  map[string]withdrawal
}

// put remembers a withdrawal of proposal id by from; only one by the
// proposal's own sender counts later, so a forged one cannot hide it.
func (w *withdrawalSet) put(id, from, reason string) {
	k := id + "\n" + from
	if _, ok := w.by[k]; ok {
		return
	}
	if old := w.ids.add(k); old != "" {
		delete(w.by, old)
	}
	w.by[k] = withdrawal{from, reason}
}

func (w *withdrawalSet) get(id, from string) (withdrawal, bool) {
	x, ok := w.by[id+"\n"+from]
	return x, ok
}

// stopAsking ends e's escalation, its prompts out, for reason: its open
// prompts cancelled, its end announced.
func (s *step) stopAsking(e *entry, reason string) {
	if !e.asked {
		return
	}
	s.closeEscalation(e, reason, OutcomeCancelled, reason)
}

// cancelAsk cancels p's open prompts for reason.
func cancelAsk(p *Proposal, reason string) CancelAsk {
	return CancelAsk{ID: p.ID, Prompts: openPrompts(p), Reason: reason}
}

// revisionOf is the policy revision of p's decision ("" before one).
func revisionOf(p *Proposal) string {
	if p.Decision == nil {
		return ""
	}
	return p.Decision.Revision
}
