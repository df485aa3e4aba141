package fulfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/decision"
	"github.com/mewkit/fulfiller/state"
)

// Store is the persistence of pending work (docs/design.md "Durable and shared
// pending work"); *state.Store implements it. With a Store the Fulfiller
// claims every proposal before it decides it, records each step before the
// envelope that carries it out is written, resumes its own unanswered work
// on start and adopts the work of group members whose lease lapsed. Without
// one (Config.Store nil) the Fulfiller keeps its records in a state.Local:
// one code path whatever the store, the records dying with the process.
type Store interface {
	// Member is this fulfiller's member id in the group.
	Member() string
	// Persistent reports whether records outlive the process: only then
	// is an answer left in the store at shutdown kept for the next run.
	Persistent() bool
	// ClaimRecord wins a proposal id for this member once for the whole
	// group and SeenTTL (rule 5) by writing its record (create-if-absent,
	// p.Claim the id of the decision that will govern it): the claim is
	// the record, so a claimed proposal always has one to resume. A lost
	// claim means send nothing, and returns the winner's decision id (""
	// when unknown) for the ignored line.
	ClaimRecord(ctx context.Context, p *state.Pending) (won bool, winner string, err error)
	// ClaimDecision is the claim without a record, for a proposal
	// rejected "busy" at once (see claimAndAdmit): it costs one write
	// where the record costs three (claim, seen key, delete).
	ClaimDecision(ctx context.Context, proposalID, decisionID string) (won bool, winner string, err error)
	// Reclaim settles the seen key of a record before it is resumed (a
	// crash may have come between ClaimRecord's writes); false: the
	// record is a replay's, delete it and send nothing.
	Reclaim(ctx context.Context, p *state.Pending) (ours bool, err error)
	// Update and Delete compare and set on p.StoreRevision
	// (state.ErrConflict: someone else owns it now). UpdateSoon is Update
	// that does not wait for the disk: for a write nothing sent depends
	// on (an escalation's phase, an approval).
	Update(ctx context.Context, p *state.Pending) error
	UpdateSoon(ctx context.Context, p *state.Pending) error
	Delete(ctx context.Context, p *state.Pending) error
	// MarkAnswered records, just before a reject is written, which reject
	// ends p (phase state.Answered): whoever resumes the record sends the
	// same reject again instead of leaving the proposer without one.
	MarkAnswered(ctx context.Context, p *state.Pending) error
	// List is the group's pending work; Owned is this member's.
	List(ctx context.Context) ([]*state.Pending, error)
	Owned(ctx context.Context) ([]*state.Pending, error)
	// Members are the group's live leases; SetPending is this member's
	// pending work for its next lease renewal (MemberInfo.Pending).
	Members(ctx context.Context) ([]state.MemberInfo, error)
	SetPending(n int)
	// WatchLapsed reports members whose lease lapsed with work left;
	// Adopt moves that work to this member, each record to one adopter.
	WatchLapsed(ctx context.Context) (<-chan string, error)
	Adopt(ctx context.Context, from string) ([]*state.Pending, error)
	// Get reads one record (state.ErrNotFound); Take moves it to this
	// member by compare-and-set for an operator's cancel (refused with
	// state.ErrFulfilling once its request is written); WatchRecords
	// reports every write to the group's records, so that a member whose
	// record was taken or adopted stops at once (see operator.go).
	Get(ctx context.Context, proposalID string) (*state.Pending, error)
	Take(ctx context.Context, proposalID string) (*state.Pending, error)
	WatchRecords(ctx context.Context) (<-chan state.RecordChange, error)
}

var (
	_ Store = (*state.Store)(nil)
	_ Store = (*state.Local)(nil)
)

// storeTimeout bounds one store operation, so that an unreachable store
// fails a step (closed) instead of holding it.
const storeTimeout = 10 * time.Second

// DropReason, given to Escalator.Cancel, stops an escalation without a
// word to its approvers: the proposal belongs to another member of the
// group now, which has asked the same prompts again (same envelope ids),
// and a notifications/cancelled from us would cancel its prompts too.
const DropReason = "adopted_elsewhere"

// storeUnavailable is the message of the reject a proposer gets when the
// store cannot take a proposal this member is answering alone.
const storeUnavailable = "pending-work store unavailable; propose again later"

// storedDecision is what a record keeps of the decision that governs its
// proposal, and of what the humans said, so that whoever resumes it acts on
// it without deciding again (docs/design.md rule 10: no second decision record).
type storedDecision struct {
	Action      decision.Action     `json:"action"`
	Reason      string              `json:"reason,omitempty"`
	Message     string              `json:"message,omitempty"`
	Target      string              `json:"target,omitempty"`
	Approvers   []string            `json:"approvers,omitempty"`
	Quorum      int                 `json:"quorum,omitempty"`
	Timeout     time.Duration       `json:"timeout,omitempty"`
	Editable    []string            `json:"editable,omitempty"`
	Grantable   *decision.Grantable `json:"grantable,omitempty"`
	Task        bool                `json:"task,omitempty"`
	TaskTimeout time.Duration       `json:"task_timeout,omitempty"`
	// NotifyArguments survives a restart: the notifications of a resumed
	// escalation show the arguments only when the decision allowed it.
	NotifyArguments bool `json:"notify_arguments,omitempty"`
	// Reminders and EscalateTo survive a restart: the resumed escalation
	// keeps its schedule (docs/design.md "Reaching approvers").
	Reminders  []time.Duration `json:"reminders,omitempty"`
	EscalateTo []decision.Tier `json:"escalate_to,omitempty"`
	Revision   string          `json:"revision,omitempty"`
	// Route is the participant routing chose to carry the call out.
	Route string `json:"route,omitempty"`
	// Params are the params to fulfil once approved (edited or as
	// proposed); ApprovedBy who approved them.
	Params     json.RawMessage `json:"params,omitempty"`
	ApprovedBy []string        `json:"approved_by,omitempty"`
	// DeadlineByProposer: the proposal's own deadline hint set the
	// approval deadline (Escalation.DeadlineByProposer), which a resumed
	// escalation tells its approvers again.
	DeadlineByProposer bool `json:"deadline_by_proposer,omitempty"`
}

func storeDecision(d decision.Decision, route string, params json.RawMessage, by []string) json.RawMessage {
	b, _ := json.Marshal(storedDecisionOf(d, route, params, by))
	return b
}

func (s storedDecision) decision() decision.Decision {
	return decision.Decision{Action: s.Action, Reason: s.Reason, Message: s.Message, Target: s.Target,
		Approvers: s.Approvers, Quorum: s.Quorum, Timeout: s.Timeout, Editable: s.Editable, Grantable: s.Grantable, Revision: s.Revision,
		Task: s.Task, TaskTimeout: s.TaskTimeout, NotifyArguments: s.NotifyArguments, Reminders: s.Reminders, EscalateTo: s.EscalateTo}
}

func (f *Fulfiller) storeContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(f.base, storeTimeout)
}

// claim wins p's id for this member without a record (Store.ClaimDecision),
// for a proposal rejected "busy" as soon as it is claimed: see
// claimAndAdmit. It reports whether p is ours to answer.
func (f *Fulfiller) claim(p *proposal) bool {
	ctx, cancel := f.storeContext()
	won, winner, err := f.cfg.Store.ClaimDecision(ctx, p.env.ID, p.governor().id)
	cancel()
	return f.claimed(p, won, winner, err)
}

// claimRecord wins p's id for this member by writing its record
// (Store.ClaimRecord: the claim is the record), in phase deciding, or, for
// a proposal that cannot be parsed (parseErr), in phase answered with its
// reject "invalid", so that a crash before the reject is written leaves a
// record whose resumer sends it (same envelope id). It reports whether p
// is ours to answer; p.rec is its record then.
func (f *Fulfiller) claimRecord(p *proposal, parseErr error) bool {
	raw := p.env.Raw
	if raw == nil {
		var err error
		if raw, err = json.Marshal(p.env); err != nil {
			// Cannot happen for a decoded envelope; fail closed as for a
			// store that cannot take it.
			return f.claimed(p, false, "", fmt.Errorf("encode proposal %s: %w", p.env.ID, err))
		}
	}
	id := p.governor().id
	r := &state.Pending{ProposalID: p.env.ID, Envelope: raw, Proposer: p.env.From, Received: p.received.UTC(),
		Size: int(p.size()), Phase: state.Deciding, Claim: id, DecisionID: id}
	if parseErr != nil {
		r.Phase = state.Answered
		r.Reject = &state.Reject{EnvelopeID: agent.NewID(f.space.ID()), Reason: "invalid", Message: parseErr.Error()}
	}
	ctx, cancel := f.storeContext()
	won, winner, err := f.cfg.Store.ClaimRecord(ctx, r)
	cancel()
	if !f.claimed(p, won, winner, err) {
		return false
	}
	p.recMu.Lock()
	p.rec = r
	p.recMu.Unlock()
	return true
}

// claimed acts on the outcome of p's claim (Store.ClaimRecord or
// ClaimDecision replace the in-process seen set for rule 5 and decide who
// in a group answers p). It reports whether p is ours to handle. A lost
// claim sends nothing.
//
// When the store cannot say (unreachable), p is never decided nor
// fulfilled. What its proposer gets depends on the group this member last
// saw: alone (no live peer in the last successful Members, or none read
// yet) this member is the only one that can answer, so it rejects "busy"
// (propose again later); with live peers it sends nothing, because a peer
// may hold the claim and be answering, and a reject from us would fail the
// proposal at the reference SDK proposer (it fails on the first reject it
// sees from anyone). The proposer then waits for its own timeout unless a
// peer answers.
func (f *Fulfiller) claimed(p *proposal, won bool, winner string, err error) bool {
	switch {
	case errors.Is(err, state.ErrRecordLeft):
		// Its record is in the store: whoever resumes it (the next
		// start, or a peer adopting this member's work) answers it, and
		// a "busy" from us now would be a second answer.
		f.log.Error("pending-work store unavailable: proposal claim undecided, its record left for whoever resumes it; nothing sent", "proposal", p.env.ID, "err", err)
		ev := p.event(StageIgnored)
		ev.Reason, ev.Message = ReasonStoreUnavailable, "claim undecided, its record left: "+err.Error()
		f.emit(ev)
		return false
	case err != nil:
		if f.group.peers.Load() {
			f.log.Error("pending-work store unavailable: proposal not claimed; left to the group, nothing sent", "proposal", p.env.ID, "err", err)
			ev := p.event(StageIgnored)
			ev.Reason, ev.Message = ReasonStoreUnavailable, "claim failed: "+err.Error()
			f.emit(ev)
			return false
		}
		f.log.Error("pending-work store unavailable: proposal not claimed; rejected busy", "proposal", p.env.ID, "err", err)
		f.emit(p.event(StageReceived))
		f.answerReject(p, "busy", storeUnavailable)
		return false
	case !won:
		// The line joins the winner's decision (rule 10); its revision
		// is the winner's to log. A claim that recorded no decision
		// (expired, or written by an older fulfiller) leaves the line
		// its own id.
		if winner != "" {
			p.gov.Store(&governing{id: winner})
		}
		f.store.markSeen(p)
		f.log.Info("proposal claimed before (a replay, or another member of the group); ignored", "proposal", p.env.ID, "from", p.env.From)
		f.emit(Event{Stage: StageIgnored, ProposalID: p.env.ID, DecisionID: p.governor().id, Proposer: p.env.From, Method: p.method, Tool: p.tool, Reason: "duplicate", Message: "proposal id claimed before"})
		return false
	}
	return true
}

// ReasonStoreUnavailable is the reason of a StageIgnored event for a
// proposal left unanswered because the store could not claim it while
// group peers were live (see claim).
const ReasonStoreUnavailable = "store_unavailable"

// ReasonAdopted is the reason of a StageIgnored event for a proposal this
// member dropped without a word because its record belongs to another
// member now (adopted after this member's lease lapsed).
const ReasonAdopted = "adopted_elsewhere"

// saveRecord applies change to a copy of p's record and writes it (compare
// and set), and waits for the write to reach the disk: for what is sent
// next (a prompt, a fulfilment request). state.ErrConflict means the
// record is another member's now: p is fenced and nothing more may be sent
// about it.
func (f *Fulfiller) saveRecord(p *proposal, change func(r *state.Pending)) error {
	return f.writeRecord(p, f.cfg.Store.Update, change)
}

// noteRecord is saveRecord without the wait for the disk (Store.UpdateSoon),
// for a write nothing sent depends on: an escalation's phase (its first
// prompt's record is synced before the prompt goes out), an approval (a
// re-asked prompt gets its answer again), a queued fulfilment, a task's
// status. One sync on the way to any answer is the store's budget
// (docs/performance.md).
func (f *Fulfiller) noteRecord(p *proposal, change func(r *state.Pending)) error {
	return f.writeRecord(p, f.cfg.Store.UpdateSoon, change)
}

func (f *Fulfiller) writeRecord(p *proposal, update func(context.Context, *state.Pending) error, change func(r *state.Pending)) error {
	p.recMu.Lock()
	defer p.recMu.Unlock()
	if p.rec == nil {
		if p.fenced.Load() {
			return fmt.Errorf("record proposal %s: %w", p.env.ID, state.ErrConflict)
		}
		return fmt.Errorf("record proposal %s: it has no record", p.env.ID)
	}
	next := *p.rec
	next.Prompts = slices.Clone(p.rec.Prompts)
	next.Approvals = slices.Clone(p.rec.Approvals)
	change(&next)
	ctx, cancel := f.storeContext()
	defer cancel()
	if err := update(ctx, &next); err != nil {
		if errors.Is(err, state.ErrConflict) {
			p.fenced.Store(true)
			p.rec = nil
		}
		return fmt.Errorf("record proposal %s: %w", p.env.ID, err)
	}
	p.rec = &next
	return nil
}

// dropRecord deletes p's record as p ends: at once when nothing is sent
// about its end (fulfilled, withdrawn, superseded), after the reject when
// there is one (see markAnswered). The delete is also the fence: if the
// record was adopted (state.ErrConflict) p is fenced and nothing more is
// sent about it. If the store cannot be reached, the record is left for
// when it is back, where it is resumed (the residual risk of a second
// answer is logged).
func (f *Fulfiller) dropRecord(p *proposal) {
	p.recMu.Lock()
	defer p.recMu.Unlock()
	p.recEnded = true
	if p.rec == nil {
		return
	}
	ctx, cancel := f.storeContext()
	defer cancel()
	err := f.cfg.Store.Delete(ctx, p.rec)
	p.rec = nil
	switch {
	case errors.Is(err, state.ErrConflict):
		p.fenced.Store(true)
		f.log.Warn("proposal adopted by another member of the group; this member sends nothing more about it", "proposal", p.env.ID)
	case err != nil:
		// Resumed when the store is back: an answered record sends its
		// reject again (the same envelope), a fulfilled one waits for a
		// response that already came and times out.
		f.log.Error("end of proposal not recorded in the pending-work store; the record is left for when the store is back, which may answer it a second time", "proposal", p.env.ID, "err", err)
	}
}

// markAnswered records, before p's reject is written, that this reject
// ends p (state.Answered), and reports whether to send it. The record
// stays until the reject is out (writeReject deletes it then): a crash in
// between leaves a record whose resumer sends the same envelope again, so
// the proposer is answered at least once, and never contradicted (a
// resumed answered record is never decided, asked or fulfilled again).
// Before, the record was deleted first and a crash in that window left
// the proposer to its own timeout.
//
// The write is the fence, as the delete was: if the record is another
// member's (state.ErrConflict) p is fenced and nothing is sent. If the
// store cannot be reached, the reject is held back while group peers are
// live (one of them may adopt the record and answer); a member alone
// answers anyway, as with a failed claim.
func (f *Fulfiller) markAnswered(p *proposal, rej state.Reject) bool {
	p.recMu.Lock()
	defer p.recMu.Unlock()
	if p.rec == nil {
		return !p.fenced.Load()
	}
	next := *p.rec
	next.Phase, next.Reject = state.Answered, &rej
	ctx, cancel := f.storeContext()
	defer cancel()
	err := f.cfg.Store.MarkAnswered(ctx, &next)
	switch {
	case err == nil:
		p.rec = &next
		return true
	case errors.Is(err, state.ErrConflict):
		p.fenced.Store(true)
		p.rec = nil
		f.log.Warn("proposal adopted by another member of the group; this member sends nothing more about it", "proposal", p.env.ID)
		return false
	case f.group.peers.Load():
		p.fenced.Store(true)
		f.log.Error("end of proposal not recorded in the pending-work store; its reject is not sent, so that the member that adopts the record answers once", "proposal", p.env.ID, "err", err)
		return false
	default:
		f.log.Error("end of proposal not recorded in the pending-work store; rejected anyway (no group peer could), the record is left for when the store is back", "proposal", p.env.ID, "err", err)
		return true
	}
}

// dropAdopted ends p here without a word: its record is another member's.
func (f *Fulfiller) dropAdopted(p *proposal) {
	// A task stops being followed here (without tasks/cancel: the
	// adopter follows it now).
	prev, ok := f.transition(p, StateSuperseded, notAnsweredOrTask)
	if !ok {
		return
	}
	if prev == StateAwaitingApproval {
		f.cfg.Escalator.Cancel(p.env.ID, DropReason)
	}
	// Under f.mu: a proposal resumed a moment ago may still be getting
	// its target and deadline (resumeOne), and the event reads them.
	f.mu.Lock()
	ev := p.event(StageIgnored)
	f.mu.Unlock()
	ev.Reason, ev.Message = ReasonAdopted, "the proposal's record belongs to another member now"
	f.emit(ev)
}

// storeFailed ends p after a record it needed could not be written: fail
// closed, nothing it was about to send goes out. Adopted → nothing at all;
// otherwise a reject "other".
func (f *Fulfiller) storeFailed(p *proposal, what string, err error) {
	if p.fenced.Load() {
		f.dropAdopted(p)
		return
	}
	f.log.Error("pending-work store cannot record the proposal; "+what+" not sent, proposal rejected", "proposal", p.env.ID, "err", err)
	f.reject(p, "other", storeUnavailable)
}

// escalationCancel is the reason to give Escalator.Cancel for p.
func escalationCancel(p *proposal, reason string) string {
	if p.fenced.Load() {
		return DropReason
	}
	return reason
}

// groupView is what this member last read of its group, refreshed by
// watchGroup: capacity for "busy" (the whole group full) and whether peers
// are live (see claim).
type groupView struct {
	pending  atomic.Int64 // pending records of the group
	capacity atomic.Int64 // sum of MaxPending over live members; 0: not read yet
	peers    atomic.Bool  // a live member other than this one
}

// groupRefresh is how often watchGroup reads the group.
const groupRefresh = time.Second

// watchGroup refreshes f.group until ctx ends.
func (f *Fulfiller) watchGroup(ctx context.Context) {
	t := time.NewTicker(groupRefresh)
	defer t.Stop()
	for {
		f.refreshGroup(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (f *Fulfiller) refreshGroup(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	f.mu.Lock()
	live := f.live
	f.mu.Unlock()
	f.cfg.Store.SetPending(live)
	ms, err := f.cfg.Store.Members(ctx)
	if err != nil {
		f.log.Warn("group members not read", "err", err)
		return
	}
	// The group's load is this member's own count and what each peer
	// published with its lease: one record per member, where reading
	// every pending record (List) cost a store read per proposal ended
	// within the markers' minute, every second.
	var capacity int64
	pending := int64(live)
	peers := false
	var ids []string
	for _, m := range ms {
		capacity += int64(m.MaxPending)
		if m.ID != f.cfg.Store.Member() {
			peers = true
			ids = append(ids, m.ID)
			pending += int64(m.Pending)
		}
	}
	f.peerResps.sawMembers(ids)
	f.group.peers.Store(peers)
	f.group.pending.Store(pending)
	f.group.capacity.Store(capacity)
}

// groupFull reports whether the whole group's pending work is at its
// capacity, as last read.
func (f *Fulfiller) groupFull() bool {
	c := f.group.capacity.Load()
	return c > 0 && f.group.pending.Load() >= c
}
