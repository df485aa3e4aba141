package fulfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/state"
	"github.com/mewkit/fulfiller/toolmeta"
)

// ErrStoreUnavailable is wrapped by the operator methods' errors when the
// pending-work store could not be read or written: the answer is unknown
// (is the proposal pending elsewhere in the group?) rather than no.
var ErrStoreUnavailable = errors.New("pending-work store unavailable")

// member is this fulfiller's id as the owner of its work.
func (f *Fulfiller) member() string { return f.cfg.Store.Member() }

// Pending lists the proposals this member holds that still wait for
// something, oldest first. It reads no store: GroupPending lists the
// group's.
func (f *Fulfiller) Pending() []Snapshot {
	owner := f.member()
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Snapshot
	for _, p := range f.store.all() {
		// A fenced proposal's record is another member's now: it is
		// that member's to show.
		if !p.State().Terminal() && !p.fenced.Load() {
			s := p.snapshot()
			s.Owner = owner
			out = append(out, s)
		}
	}
	sortSnapshots(out)
	return out
}

// Get returns one pending proposal this member holds.
func (f *Fulfiller) Get(id string) (Snapshot, bool) {
	p, ok := f.store.get(id)
	if !ok || p.State().Terminal() || p.fenced.Load() {
		return Snapshot{}, false
	}
	owner := f.member()
	f.mu.Lock()
	defer f.mu.Unlock()
	s := p.snapshot()
	s.Owner = owner
	return s, true
}

// GroupPending lists the group's pending work, oldest first (docs/design.md
// "Durable and shared pending work": the operator API of any member lists
// it): the proposals this member holds, as Pending shows them, and with a
// Store every other record in it, whichever member owns it (also a
// member whose lease lapsed, until its work is adopted); with a
// state.Local that is this member's own work again. When the store
// cannot be read it returns this member's proposals with an error
// wrapping ErrStoreUnavailable: the list is then incomplete.
func (f *Fulfiller) GroupPending(ctx context.Context) ([]Snapshot, error) {
	own := f.Pending()
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	recs, err := f.cfg.Store.List(ctx)
	if err != nil {
		return own, fmt.Errorf("list the group's pending work: %w: %w", ErrStoreUnavailable, err)
	}
	here := make(map[string]bool, len(own))
	for _, s := range own {
		here[s.ID] = true
	}
	out := own
	for _, r := range recs {
		// An answered record is not pending work: its reject is being
		// written, and the record ends right after.
		if !here[r.ProposalID] && r.Phase != state.Answered {
			out = append(out, recordSnapshot(r))
		}
	}
	sortSnapshots(out)
	return out, nil
}

// GroupGet returns one pending proposal of the group: the one this member
// holds, else its record in the Store. An error (wrapping
// ErrStoreUnavailable) means the store could not say.
func (f *Fulfiller) GroupGet(ctx context.Context, id string) (Snapshot, bool, error) {
	if s, ok := f.Get(id); ok {
		return s, true, nil
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	r, err := f.cfg.Store.Get(ctx, id)
	switch {
	case errors.Is(err, state.ErrNotFound):
		return Snapshot{}, false, nil
	case err != nil:
		return Snapshot{}, false, fmt.Errorf("read proposal %s: %w: %w", id, ErrStoreUnavailable, err)
	}
	return recordSnapshot(r), true, nil
}

func sortSnapshots(s []Snapshot) {
	sort.SliceStable(s, func(i, j int) bool { return s[i].Received.Before(s[j].Received) })
}

// recordSnapshot shows a record of the store as the operator API shows a
// proposal held here. Phases are named as the states are.
func recordSnapshot(r *state.Pending) Snapshot {
	s := Snapshot{ID: r.ProposalID, From: r.Proposer, State: string(r.Phase), Received: r.Received,
		Deadline: r.ApprovalDeadline, Revision: r.Revision, Owner: r.Owner}
	var env agent.Envelope
	if json.Unmarshal(r.Envelope, &env) == nil {
		if c, err := parsePayload(env.Payload); err == nil {
			s.Method, s.Tool = c.method, c.tool
		}
	}
	var sd storedDecision
	if len(r.Decision) > 0 && json.Unmarshal(r.Decision, &sd) == nil {
		s.Target = sd.Route
	}
	if r.Request != nil {
		s.Target = r.Request.Target
	}
	if t := r.Task; t != nil {
		s.Task = &TaskInfo{ID: t.ID, Spec: t.Spec, Status: t.Status, Created: t.Created, Deadline: t.Deadline}
	}
	return s
}

// Cancel rejects a pending proposal of the group on an operator's behalf,
// with reason "other" and a message naming the operator action; its open
// approval prompts are cancelled. A proposal whose fulfilment request is
// out cannot be cancelled (ErrAnswered): the call may be running. With a
// Store, a proposal another member holds is taken from it and ended here
// (see cancelInGroup). ErrUnknownProposal: nobody in the group holds it.
func (f *Fulfiller) Cancel(id, by string) error {
	if p, ok := f.store.get(id); ok && !p.State().Terminal() && !p.fenced.Load() {
		err := f.cancelHere(p, by)
		if err != nil || !p.fenced.Load() {
			return err
		}
		// Its record turned out to be another member's (taken or
		// adopted meanwhile): nothing was sent here (answerReject is
		// fenced). Cancel it where it is now.
	}
	return f.cancelInGroup(id, by)
}

// cancelHere cancels a proposal this member holds.
func (f *Fulfiller) cancelHere(p *proposal, by string) error {
	prev, ok := f.transition(p, StateRejected, notAnsweredOrTask)
	if !ok {
		return fmt.Errorf("cancel %s: %w", p.env.ID, ErrAnswered)
	}
	if prev == StateAwaitingApproval {
		f.cfg.Escalator.Cancel(p.env.ID, escalationCancel(p, "cancelled"))
	}
	if prev == StateTask {
		f.cancelTask(p, p.task)
	}
	f.answerReject(p, "other", operatorMessage(by))
	return nil
}

func operatorMessage(by string) string {
	msg := "cancelled by the operator"
	if by != "" {
		msg += " (" + by + ")"
	}
	return msg
}

// maxTakes bounds the retries of a take that keeps losing to the owner's
// own writes (each prompt and approval it records is one).
const maxTakes = 10

// cancelInGroup cancels a proposal whose record this member does not hold
// in memory: another live member's, a lapsed member's not yet adopted, or
// one of its own that was never resumed. It takes the record by
// compare-and-set (Store.Take). From then on the former owner can record
// nothing more (no prompt, no approval, no fulfilment request: each
// would be a write at the revision it knew) and so sends nothing more
// about the proposal; WatchRecords tells it to drop the proposal at once.
// Then it ends the proposal here as a local cancel does: the reject is
// recorded in the record before it is written and the record deleted
// after (a crash in between leaves the reject for the restart or an
// adopter to send, as markAnswered does for every other end), the prompts the owner recorded and that are still open get notifications/cancelled
// from this member without being asked again (PromptCanceller), and the
// proposer gets reject "other". A record whose fulfilment request is
// written, or whose reject is being written, is refused with ErrAnswered,
// as locally.
func (f *Fulfiller) cancelInGroup(id, by string) error {
	ctx, cancel := f.storeContext()
	defer cancel()
	// Marked ended here before the take: once taken the record is this
	// member's, and a scan of its own records (the start-up resume)
	// that read it would resume the proposal it is cancelling: seen as
	// a cancelled proposal's prompt asked again. Unmarked if the
	// cancel does not happen after all.
	f.store.markEnded(id)
	var r *state.Pending
	var err error
	for range maxTakes {
		if r, err = f.cfg.Store.Take(ctx, id); !errors.Is(err, state.ErrConflict) {
			break
		}
	}
	if err != nil {
		f.cancelUndone(ctx, id)
	}
	switch {
	case errors.Is(err, state.ErrNotFound):
		return fmt.Errorf("cancel %s: %w", id, ErrUnknownProposal)
	case errors.Is(err, state.ErrFulfilling), errors.Is(err, state.ErrAnswered):
		return fmt.Errorf("cancel %s: %w", id, ErrAnswered)
	case errors.Is(err, state.ErrConflict):
		return fmt.Errorf("cancel %s: the proposal kept changing while it was taken from its owner; try again: %w", id, err)
	case err != nil:
		return fmt.Errorf("cancel %s: %w: %w", id, ErrStoreUnavailable, err)
	}
	// Settled as every resumed record is: one a replay wrote just before
	// its member crashed holds another claim's id, and the proposal it
	// names had its answer; reclaim deletes it, and a reject from here
	// would be a second answer.
	if !f.reclaim(r) {
		return fmt.Errorf("cancel %s: %w (the record was a replay's, now deleted)", id, ErrUnknownProposal)
	}
	p := takenProposal(r)
	if p.env.From == "" {
		// Nobody to answer: the record just goes.
		f.log.Error("cancelled proposal's record names no proposer; no reject sent", "proposal", id)
		if err := f.cfg.Store.Delete(ctx, r); err != nil && !errors.Is(err, state.ErrConflict) {
			f.log.Warn("record of a cancelled proposal without a proposer not deleted", "proposal", id, "err", err)
		}
		return nil
	}
	// The reject is recorded in the taken record before anything is
	// sent, as every other end of a proposal is (markAnswered): a crash
	// from here on leaves a record whose reject the restart (or an
	// adopter) sends again, never a proposer without an answer.
	rej := state.Reject{EnvelopeID: agent.NewID(f.space.ID()), Reason: "other", Message: operatorMessage(by)}
	answered := *r
	answered.Phase, answered.Reject = state.Answered, &rej
	if err := f.cfg.Store.MarkAnswered(ctx, &answered); err != nil {
		if errors.Is(err, state.ErrConflict) {
			// Taken again in between (a cancel on a third member): that
			// member answers; not ended here.
			f.store.unmarkEnded(id)
			return fmt.Errorf("cancel %s: taken by another member of the group meanwhile: %w", id, err)
		}
		// The record is this member's now and nobody else acts on it:
		// hold it here, as an adopter would, so that it is still
		// answered once. The operator may cancel it again.
		f.log.Error("proposal taken for an operator's cancel, but its end could not be recorded; resumed here instead, nothing sent", "proposal", id, "err", err)
		f.store.unmarkEnded(id)
		f.resumeOne(r, "taken for an operator's cancel that could not be recorded")
		return fmt.Errorf("cancel %s: %w: %w", id, ErrStoreUnavailable, err)
	}
	p.rec = &answered
	f.log.Info("proposal taken from the group's store to be cancelled by the operator", "proposal", id, "phase", r.Phase, "by", by)
	if r.Phase == state.AwaitingApproval && len(r.Prompts) > 0 {
		esc := Escalation{Proposal: p.env, DecisionID: r.DecisionID, Method: p.method, Params: p.params, Target: p.target,
			Prompts: r.Prompts, Approvals: r.Approvals}
		esc.Decision.Revision = r.Revision
		if pc, ok := f.cfg.Escalator.(PromptCanceller); ok {
			pc.CancelRecorded(esc, "cancelled")
		} else {
			// Their answers go to the former owner, which is fenced:
			// they count for nothing, but the approvers still see them.
			f.log.Warn("open prompts of a cancelled proposal not withdrawn: this fulfiller's escalator cannot cancel another member's prompts", "proposal", id, "prompts", len(r.Prompts))
		}
	}
	ev := p.event(StageRejected)
	ev.Reason, ev.Message = rej.Reason, rej.Message
	f.recordReject(p, ev)
	f.writeReject(p, ev, rej) // then the record goes (dropRecord)
	return nil
}

// cancelUndone unmarks a proposal cancelInGroup marked ended but did not
// take; if its record is this member's own (a previous run's, never
// resumed) and the start-up resume skipped it meanwhile, it is resumed
// now (resumeOne does nothing for one held here already).
func (f *Fulfiller) cancelUndone(ctx context.Context, id string) {
	f.store.unmarkEnded(id)
	if r, err := f.cfg.Store.Get(ctx, id); err == nil && r.Owner == f.cfg.Store.Member() {
		f.resumeOne(r, "restart")
	}
}

// takenProposal rebuilds, from its record, what writeReject needs of a
// proposal taken from another member (and ended at once: it never enters
// this member's pending store).
func takenProposal(r *state.Pending) *proposal {
	var env agent.Envelope
	if err := json.Unmarshal(r.Envelope, &env); err != nil || env.ID != r.ProposalID || env.From == "" {
		env = agent.Envelope{ID: r.ProposalID, From: r.Proposer}
	}
	c, _ := parsePayload(env.Payload)
	p := &proposal{env: env, method: c.method, params: c.params, tool: c.tool, received: r.Received, resumed: true}
	p.state.Store(int32(StateRejected))
	if r.DecisionID != "" {
		p.gov.Store(&governing{id: r.DecisionID, revision: r.Revision})
	}
	var sd storedDecision
	if len(r.Decision) > 0 && json.Unmarshal(r.Decision, &sd) == nil {
		p.target = sd.Route
	}
	return p
}

// PromptCanceller is implemented by an Escalator that can withdraw the
// prompts another member of the group asked, as recorded in the store
// (esc.Prompts, with esc.Approvals saying who already answered), without
// asking them first: each prompt still open gets notifications/cancelled
// with reason, from this member. Escalator.Cancel serves the prompts an
// Escalator asked itself; this serves an operator's cancel of a proposal
// taken from another member. *elicit.Elicitor implements it.
type PromptCanceller interface {
	CancelRecorded(esc Escalation, reason string)
}

// watchRecords stops this member's work, at once and without a word, on
// any proposal whose record someone else wrote: another member's operator
// took it (Cancel there), or a peer adopted it while this member's lease
// had lapsed. The fence alone (ErrConflict) would act only at this
// member's next write of the record; until then the proposal would hold
// its slot here, show in this member's list, and its prompts' deadline
// would still cancel them at the approvers. Runs until ctx ends.
func (f *Fulfiller) watchRecords(ctx context.Context) {
	for {
		changes, err := f.cfg.Store.WatchRecords(ctx)
		if err != nil {
			f.log.Warn("the group's pending records are not watched; trying again", "err", err)
		} else {
			for c := range changes {
				f.recordChanged(c)
			}
		}
		if !sleepCtx(ctx, retryStore) {
			return
		}
	}
}

// recordChanged drops p when a change to its record is not this member's.
// Every write of this member sets p.rec to the revision it wrote before it
// releases p.recMu, so a newer revision seen under p.recMu is someone
// else's. (Proposals with ids too long for a readable key are not named by
// the watch: they learn at their next write.)
func (f *Fulfiller) recordChanged(c state.RecordChange) {
	if c.ProposalID == "" {
		return
	}
	p, ok := f.store.get(c.ProposalID)
	if !ok || p.State().Terminal() {
		return
	}
	p.recMu.Lock()
	theirs := p.rec != nil && c.Revision > p.rec.StoreRevision
	if theirs {
		p.fenced.Store(true)
		p.rec = nil
	}
	p.recMu.Unlock()
	if !theirs {
		return
	}
	f.log.Warn("proposal's record written by another member of the group (taken for an operator's cancel there, or adopted); this member sends nothing more about it", "proposal", p.env.ID)
	f.dropAdopted(p)
}

// Tools lists every tool discovered in the space, as its owner described
// it.
func (f *Fulfiller) Tools() []ToolInfo { return f.catalog.all() }

// ToolView is a discovered tool as the operator API shows it (GET
// /v1/tools): what policies see of it.
type ToolView struct {
	Name        string `json:"name"`
	Server      string `json:"server"`
	Description string `json:"description,omitempty"`
	// Annotations are what policies see as input.tool.annotations: the
	// owner's with the operator's declared keys laid over them.
	Annotations json.RawMessage `json:"annotations,omitempty"`
	// OwnerAnnotations are what the owner sent in tools/list, verbatim.
	OwnerAnnotations json.RawMessage `json:"owner_annotations,omitempty"`
	// Metadata is the --tool-metadata entry that applied, if any.
	Metadata    *toolmeta.Ref   `json:"metadata,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	Execution   json.RawMessage `json:"execution,omitempty"`
}

// ToolViews lists every tool discovered in the space with the annotations
// policies see for it, sorted by owner and name.
func (f *Fulfiller) ToolViews() []ToolView {
	tools := f.catalog.all()
	out := make([]ToolView, len(tools))
	for i, t := range tools {
		v := ToolView{Name: t.Name, Server: t.Server, Description: t.Description, OwnerAnnotations: t.Annotations, InputSchema: t.InputSchema, Execution: t.Execution}
		var e *toolmeta.Entry
		v.Annotations, e = f.annotate(t.Server, t.Name, t.Annotations)
		if e != nil {
			ref := e.Ref
			v.Metadata = &ref
		}
		out[i] = v
	}
	return out
}

// Counts reports pending and in-flight work, for metrics and /readyz.
func (f *Fulfiller) Counts() (pending, inflight int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.live, f.slots.used
}
