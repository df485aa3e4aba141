package fulfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/fulfill/state"
)

// recordStore is the lifecycle core's Store over fulfill's Store
// (state.Store, state.Local): a lifecycle.Proposal is persisted as the
// state.Pending record fulfill writes today (pendingOf, proposalOf), so
// that records written by either read back right, and a member of either
// kind resumes the other's.
//
// Write maps the core's writes onto the store's calls:
//
//   - Create: ClaimRecord (the claim is the record). A claim lost to its
//     own decision id is an earlier try that was applied (a store timeout
//     does not say): won, at that record's revision, if the record is
//     still this member's. Lost otherwise: lifecycle.ErrExists.
//   - Create with ClaimOnly: ClaimDecision with Record.DecisionID; a claim
//     lost to that same id is won too (no record, revision 0).
//   - Record nil: Delete at Rev. A record already gone is a conflict, as
//     the store says (its compare-and-set cannot tell it from one changed
//     by another member): the core reads it back (Reload) and takes a
//     missing record as the delete of an earlier try.
//   - Phase Answered with a Reject: MarkAnswered (no wait for the disk:
//     the reject is re-sent with the same id from the record).
//   - Any other update: Update at Rev, or UpdateSoon when Soon. A Relay
//     is written with Update unless Soon: MarkAnswered is the reject's,
//     and a relay lost by a machine crash would be relayed again, with
//     other ids, after its task is followed again.
//
// It is safe for concurrent use: the Loop writes each proposal's records
// from that proposal's own goroutine.
//
// Errors: state.ErrConflict (a lost compare-and-set, or no record to
// update) is lifecycle.ErrConflict. A claim lost to another decision is
// *lifecycle.ClaimedError naming the winner's decision id (errors.Is
// ErrExists), so the replay's line joins that decision. Anything
// else (timeouts, an unreachable store, state.ErrRecordLeft) is returned
// as it is: the core tries the write again or reads the record back.
// state.ErrRequestRewritten is returned as it is too: the core never
// rewrites a request it committed, so it is a bug that retrying does not
// hide.
type recordStore struct {
	st  Store
	log *slog.Logger
	// pendingTTL and fulfillTimeout date the records written before
	// Pending.Deadline (see deadlineOf).
	pendingTTL, fulfillTimeout time.Duration
	// mu makes each change of a memo one step (memos' own lock is per
	// call).
	mu sync.Mutex
	// memos keep, by proposal id, what a record has and the core's
	// Proposal may not (see recordMemo).
	memos *lru.Cache[string, recordMemo]
}

// recordMemo is what the store keeps of a record that the lifecycle core
// may not carry, so that the core's writes do not lose it:
//
//   - the id the record was claimed with, for a core whose Proposal.Claim
//     is empty: a record rewritten without it would be taken for an older
//     fulfiller's (Reclaim: always ours), and DecisionID is no stand-in
//     once an edit is decided again;
//   - what state.Task has and lifecycle.TaskRecord has not (noteTask):
//     which revision of the tasks messages its owner speaks, and the poll
//     interval it suggested.
type recordMemo struct {
	claim            string
	taskID, taskSpec string
	taskPoll         int64 // milliseconds, as state.Task.Poll
}

// recordMemos bounds recordStore.memos (more than a member holds
// pending): past it the oldest are forgotten, and their records are
// rewritten without what the memo kept.
const recordMemos = 1 << 16

var _ lifecycle.Store = (*recordStore)(nil)

// newRecordStore makes the lifecycle's Store over st. pendingTTL and
// fulfillTimeout are fulfill's Config.PendingTTL and FulfillTimeout: a
// record written before records carried their deadline (Pending.Deadline)
// is given Received+pendingTTL while deciding or queued, and
// Request.SentAt+fulfillTimeout while fulfilling when it has no
// FulfilDeadline either. log (nil: discard) hears of records Owned leaves
// alone or could not delete.
func newRecordStore(st Store, pendingTTL, fulfillTimeout time.Duration, log *slog.Logger) *recordStore {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	memos, _ := lru.New[string, recordMemo](recordMemos)
	return &recordStore{st: st, log: log, pendingTTL: pendingTTL, fulfillTimeout: fulfillTimeout, memos: memos}
}

// noteTask records what the tool owner's answer said of proposalID's task
// that lifecycle.TaskRecord does not carry (its spec revision and
// suggested poll interval), so that the record the core writes of that
// task keeps them (state.Task.Spec, Poll) for the operator's view and for
// whoever resumes it. The shell calls it before it reports the answer
// (Responded); records read back keep theirs the same way.
func (s *recordStore) noteTask(proposalID, taskID, spec string, poll time.Duration) {
	s.memo(proposalID, func(m *recordMemo) { m.taskID, m.taskSpec, m.taskPoll = taskID, spec, poll.Milliseconds() })
}

// memo changes the memo of proposalID.
func (s *recordStore) memo(proposalID string, change func(m *recordMemo)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, _ := s.memos.Peek(proposalID)
	change(&m)
	s.memos.Add(proposalID, m)
}

// Write carries out the core's write w (see recordStore).
func (s *recordStore) Write(ctx context.Context, w lifecycle.Write) (uint64, error) {
	switch {
	case w.Record == nil && w.Create:
		return 0, fmt.Errorf("fulfill: claim %q: no record", truncID(w.ID))
	case w.Record == nil:
		err := s.st.Delete(ctx, &state.Pending{ProposalID: w.ID, StoreRevision: w.Rev})
		if err == nil || errors.Is(err, state.ErrConflict) {
			s.memos.Remove(w.ID)
		}
		return 0, storeErr(err)
	case w.Record.ID != w.ID:
		return 0, fmt.Errorf("fulfill: write %q: the record is proposal %q's", truncID(w.ID), truncID(w.Record.ID))
	case w.Create && w.ClaimOnly:
		return s.claimOnly(ctx, w.Record)
	case w.Create:
		return s.claim(ctx, w.Record)
	}
	r := s.pendingOf(w.Record)
	r.StoreRevision = w.Rev
	var err error
	switch {
	case r.Phase == state.Answered && r.Reject != nil:
		err = s.st.MarkAnswered(ctx, r)
	case w.Soon:
		err = s.st.UpdateSoon(ctx, r)
	default:
		err = s.st.Update(ctx, r)
	}
	if errors.Is(err, state.ErrConflict) {
		s.memos.Remove(w.ID)
	}
	if err != nil {
		return 0, storeErr(err)
	}
	return r.StoreRevision, nil
}

// claim writes p's record as its claim (ClaimRecord). The claim records
// p.Claim, or p.DecisionID for a proposal that has none yet (the core
// mints DecisionID at the claim).
func (s *recordStore) claim(ctx context.Context, p *lifecycle.Proposal) (uint64, error) {
	r := s.pendingOf(p)
	if r.Claim == "" {
		r.Claim = p.DecisionID
	}
	won, winner, err := s.st.ClaimRecord(ctx, r)
	switch {
	case err != nil:
		return 0, storeErr(err)
	case won:
		s.memo(p.ID, func(m *recordMemo) { m.claim = r.Claim })
		return r.StoreRevision, nil
	case winner == "":
		return 0, lifecycle.ErrExists
	case winner != r.Claim:
		return 0, &lifecycle.ClaimedError{Winner: winner}
	}
	// Lost to its own decision id: an earlier try of this claim was
	// applied (the store reported it failed, or timed out). Its record
	// says whether it is still this member's, and at which revision.
	got, err := s.st.Get(ctx, r.ProposalID)
	switch {
	case errors.Is(err, state.ErrNotFound):
		// Claimed by us and ended since: nothing of it is left to answer.
		return 0, lifecycle.ErrExists
	case err != nil:
		return 0, storeErr(err)
	case got.Owner != s.st.Member() || got.Claim != r.Claim:
		return 0, lifecycle.ErrConflict // adopted or taken since
	}
	s.memo(p.ID, func(m *recordMemo) { m.claim = r.Claim })
	return got.StoreRevision, nil
}

// claimOnly claims p's id without a record (ClaimDecision), for a
// proposal refused at once. A claim that holds p's own decision id is an
// earlier try, applied.
func (s *recordStore) claimOnly(ctx context.Context, p *lifecycle.Proposal) (uint64, error) {
	if p.DecisionID == "" {
		return 0, fmt.Errorf("fulfill: claim %q: no decision id", truncID(p.ID))
	}
	won, winner, err := s.st.ClaimDecision(ctx, p.ID, p.DecisionID)
	switch {
	case err != nil:
		return 0, storeErr(err)
	case won || winner == p.DecisionID:
		return 0, nil
	case winner != "":
		return 0, &lifecycle.ClaimedError{Winner: winner}
	}
	return 0, lifecycle.ErrExists
}

// storeErr maps the store's errors onto the lifecycle's (see recordStore).
// The lifecycle's own error values, not wrapped: the core compares
// Stored.Err with them.
func storeErr(err error) error {
	if errors.Is(err, state.ErrConflict) {
		return lifecycle.ErrConflict
	}
	return err
}

// Read returns the record of id (nil, nil when there is none), its Rev
// set.
func (s *recordStore) Read(ctx context.Context, id string) (*lifecycle.Proposal, error) {
	r, err := s.st.Get(ctx, id)
	if errors.Is(err, state.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p, err := s.proposalOf(r)
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// Owned returns this member's records, each settled by Reclaim first (a
// crash may have come between the two writes of its claim): a record
// whose id another claim holds is a replay's, written just before a
// crash, and is deleted and left out. A Reclaim that fails fails Owned
// (the Loop tries again): resuming a record whose claim is not settled
// could answer a replay. A record whose proposal cannot be read is left
// in the store for an operator, as fulfill's resume does: nobody can
// answer it.
func (s *recordStore) Owned(ctx context.Context) ([]lifecycle.Proposal, error) {
	recs, err := s.st.Owned(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]lifecycle.Proposal, 0, len(recs))
	for _, r := range recs {
		p, err := s.proposalOf(r)
		if err != nil {
			s.log.Error("pending record with an unreadable proposal; not resumed", "proposal", truncID(r.ProposalID), "err", err)
			continue
		}
		ours, err := s.st.Reclaim(ctx, r)
		if err != nil {
			return nil, fmt.Errorf("fulfill: settle the claim of record %q: %w", truncID(r.ProposalID), err)
		}
		if !ours {
			s.log.Info("record of a replayed proposal id (claimed before) found; deleted, nothing sent", "proposal", truncID(r.ProposalID))
			if err := s.st.Delete(ctx, r); err != nil && !errors.Is(err, state.ErrConflict) {
				s.log.Warn("record of a replayed proposal id not deleted", "proposal", truncID(r.ProposalID), "err", err)
			}
			s.memos.Remove(r.ProposalID)
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// truncID keeps hostile ids from flooding error messages and logs.
func truncID(id string) string {
	if len(id) > 64 {
		return id[:64] + "…"
	}
	return id
}

// pendingOf is the record of p (see pendingOf), with what this store
// keeps of it (recordMemo): its claim when p has none, its task's spec
// and poll interval.
func (s *recordStore) pendingOf(p *lifecycle.Proposal) *state.Pending {
	r := pendingOf(p)
	m, ok := s.memos.Get(p.ID)
	if !ok {
		return r
	}
	if r.Claim == "" {
		r.Claim = m.claim
	}
	if r.Task != nil && m.taskID == r.Task.ID {
		r.Task.Spec, r.Task.Poll = m.taskSpec, m.taskPoll
	}
	return r
}

// proposalOf is the Proposal of r (see proposalOf); it keeps what the
// core's writes of it may lose (recordMemo).
func (s *recordStore) proposalOf(r *state.Pending) (lifecycle.Proposal, error) {
	p, err := proposalOf(r, s.pendingTTL, s.fulfillTimeout)
	if err != nil {
		return p, err
	}
	s.memo(r.ProposalID, func(m *recordMemo) {
		m.claim = r.Claim
		if t := r.Task; t != nil && (t.Spec != "" || t.Poll != 0 || m.taskID != t.ID) {
			m.taskID, m.taskSpec, m.taskPoll = t.ID, t.Spec, t.Poll
		}
	})
	return p, nil
}

// pendingOf is the record that persists p: every field of p that the
// record does not derive from its envelope (Method, Tool, Params and
// Invalid are what parsePayload reads of it: see proposalOf).
//
// The decision is stored as fulfill's records store it (storedDecision,
// Pending.Decision): the policy's whole decision kept in Decision.Extra
// (coreDecision), under the core's own fields (the core's Target is the
// route), with FinalArgs as the params to fulfil and ApprovedBy. p's
// Deadline is Pending.Deadline, and ApprovalDeadline or FulfilDeadline
// as well in their phases, which fulfill's resume reads. Times are
// stored in UTC, as fulfill stores them. The task's spec and poll
// interval are not the core's (TaskRecord has neither): see noteTask.
// A record without a claim (p.Claim empty) is written without one: the
// recordStore fills in the claim it knows (recordMemo).
func pendingOf(p *lifecycle.Proposal) *state.Pending {
	r := &state.Pending{
		ProposalID: p.ID, Envelope: p.Envelope, Proposer: p.From, Received: p.Received.UTC(), Size: p.Size,
		DecisionID: p.DecisionID, Phase: p.Phase, Owner: p.Owner, Claim: p.Claim,
		Deadline: p.Deadline.UTC(), Addressee: p.Addressee,
		Prompts: p.Prompts, Approvals: p.Approvals, Escalation: p.Escalation,
		StoreRevision: p.Rev,
	}
	switch p.Phase {
	case lifecycle.AwaitingApproval:
		r.ApprovalDeadline = r.Deadline
	case lifecycle.Fulfilling:
		r.FulfilDeadline = r.Deadline
	}
	if d := p.Decision; d != nil {
		r.Decision, _ = json.Marshal(storedDecisionFor(p))
		r.Revision = d.Revision
	}
	if p.Request != nil {
		req := *p.Request
		req.SentAt = req.SentAt.UTC()
		r.Request = &req
	}
	if t := p.Task; t != nil {
		r.Task = &state.Task{ID: t.ID, Status: t.Status, Created: t.Created.UTC(), Deadline: t.Deadline.UTC()}
	}
	if p.Reject != nil {
		rej := *p.Reject
		r.Reject = &rej
	}
	if p.Relay != nil {
		rel := *p.Relay
		r.Relay = &rel
	}
	return r
}

// storedDecisionFor is what p's record keeps of its decision: the
// policy's whole decision as coreDecision kept it in Extra (none: the
// core's fields alone), the core's fields over it (they are what a
// resumed core acts on, so they must read back as they are), the route
// (Target), and the params to fulfil and who approved them.
func storedDecisionFor(p *lifecycle.Proposal) storedDecision {
	d := p.Decision
	sd, _ := policyDecision(d)
	sd.Action, sd.Reason, sd.Message = decision.Action(d.Action), d.Reason, d.Message
	sd.Approvers, sd.Quorum, sd.Timeout, sd.Revision = d.Approvers, d.Quorum, d.Timeout, d.Revision
	sd.Task, sd.TaskTimeout = d.Task, d.TaskTimeout
	sd.Route = d.Target
	sd.Params, sd.ApprovedBy = p.FinalArgs, p.ApprovedBy
	return sd
}

// proposalOf is the Proposal r persists: records written by pendingOf,
// and those fulfill writes (claimRecord, saveRecord, markAnswered), read
// alike. Method, Tool, Params and Invalid are what parsePayload reads of
// the envelope's payload, as fulfill's reader reads them; the decision is
// the storedDecision (Extra the stored JSON, Target its route, FinalArgs
// its params); Deadline is the record's (deadlineOf for a record without
// one). It fails for a record whose proposal cannot be read (its
// envelope, or its decision): nobody can answer it.
func proposalOf(r *state.Pending, pendingTTL, fulfillTimeout time.Duration) (lifecycle.Proposal, error) {
	var env agent.Envelope
	if err := agent.Unmarshal(r.Envelope, &env); err != nil {
		return lifecycle.Proposal{}, fmt.Errorf("fulfill: record %q: proposal envelope: %w", truncID(r.ProposalID), err)
	}
	if env.ID != r.ProposalID || env.From == "" {
		return lifecycle.Proposal{}, fmt.Errorf("fulfill: record %q: its envelope is proposal %q from %q", truncID(r.ProposalID), truncID(env.ID), env.From)
	}
	c, perr := parsePayload(env.Payload)
	p := lifecycle.Proposal{
		ID: r.ProposalID, From: r.Proposer, Envelope: r.Envelope, Params: c.params, Size: r.Size, Received: r.Received,
		Method: c.method, Tool: c.tool, Addressee: r.Addressee, Owner: r.Owner,
		Phase: r.Phase, Deadline: deadlineOf(r, pendingTTL, fulfillTimeout),
		DecisionID: r.DecisionID, Claim: r.Claim,
		Prompts: r.Prompts, Approvals: r.Approvals, Escalation: r.Escalation,
		Rev: r.StoreRevision,
	}
	if perr != nil {
		p.Invalid = perr.Error()
	}
	if len(r.Decision) > 0 {
		var sd storedDecision
		if err := agent.Unmarshal(r.Decision, &sd); err != nil {
			return lifecycle.Proposal{}, fmt.Errorf("fulfill: record %q: decision: %w", truncID(r.ProposalID), err)
		}
		rev := sd.Revision
		if rev == "" {
			rev = r.Revision
		}
		p.Decision = &lifecycle.Decision{Action: lifecycle.Action(sd.Action), Reason: sd.Reason, Message: sd.Message, Target: sd.Route,
			Approvers: sd.Approvers, Quorum: sd.Quorum, Timeout: sd.Timeout, Revision: rev,
			Task: sd.Task, TaskTimeout: sd.TaskTimeout, Editable: sd.Editable, Grantable: sd.Grantable,
			NotifyArguments: sd.NotifyArguments, Reminders: sd.Reminders, EscalateTo: sd.EscalateTo, Extra: r.Decision}
		p.FinalArgs, p.ApprovedBy = sd.Params, sd.ApprovedBy
	}
	if r.Request != nil {
		req := *r.Request
		p.Request = &req
	}
	if t := r.Task; t != nil {
		p.Task = &lifecycle.TaskRecord{ID: t.ID, Status: t.Status, Created: t.Created, Deadline: t.Deadline}
	}
	if r.Reject != nil {
		rej := *r.Reject
		p.Reject = &rej
	}
	if r.Relay != nil {
		rel := *r.Relay
		p.Relay = &rel
	}
	return p, nil
}

// deadlineOf is r's Deadline, or for a record written before records
// carried it, the deadline of its phase as fulfill kept it: the approval
// deadline; the fulfil deadline (its request's SentAt+fulfillTimeout in
// records older still, as fulfill's awaitResumed counts it); the task's;
// Received+pendingTTL while deciding or queued; none once answered (its
// answer is sent again until written, whatever the time). The pending
// TTL is counted from Received because the core's deadlines are absolute
// and kept across restarts, where fulfill started a new TTL at each
// resume: an old record resumed after its TTL is rejected "timeout"
// rather than decided a TTL after the restart.
func deadlineOf(r *state.Pending, pendingTTL, fulfillTimeout time.Duration) time.Time {
	if !r.Deadline.IsZero() {
		return r.Deadline
	}
	switch r.Phase {
	case state.AwaitingApproval:
		return r.ApprovalDeadline
	case state.Fulfilling:
		if r.FulfilDeadline.IsZero() && r.Request != nil {
			return r.Request.SentAt.Add(fulfillTimeout)
		}
		return r.FulfilDeadline
	case state.Running:
		if r.Task != nil {
			return r.Task.Deadline
		}
	case state.Deciding, state.Queued:
		return r.Received.Add(pendingTTL)
	}
	return time.Time{}
}
