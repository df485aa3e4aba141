package fulfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/fulfill/state"
)

// recordStore is the lifecycle core's Store over fulfill's Store
// (state.Store, or state.Local in this process). The record is the core's
// Proposal as it is (lifecycle.Proposal's own encoding, with its version):
// nothing is mapped and nothing kept beside it. A record written by an
// older build (Proposal.V 0) is completed once as it is read (migrate),
// and written in the current layout by the core's next write.
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
// It is safe for concurrent use: it holds no state of its own.
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
	// records carried their deadline (see migrate).
	pendingTTL, fulfillTimeout time.Duration
	// inProcess: st writes without I/O (InProcess), found once here
	// rather than at each of the Loop's Immediate questions.
	inProcess bool
}

var _ lifecycle.Store = (*recordStore)(nil)

// Immediate implements lifecycle.Immediate: a store in this process
// (state.Local, InProcess) writes without I/O, so the core's loop writes
// its records itself rather than handing each write to a worker and its
// result back.
func (s *recordStore) Immediate(e lifecycle.Effect) bool {
	_, write := e.(lifecycle.Write)
	return write && s.inProcess
}

// newRecordStore makes the lifecycle's Store over st. pendingTTL and
// fulfillTimeout are fulfill's Config.PendingTTL and FulfillTimeout: a
// record written before records carried their deadline is given
// Received+pendingTTL while deciding or queued, and
// Request.SentAt+fulfillTimeout while fulfilling (see migrate). log (nil:
// discard) hears of records Owned leaves alone or could not delete.
func newRecordStore(st Store, pendingTTL, fulfillTimeout time.Duration, log *slog.Logger) *recordStore {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ip, ok := st.(interface{ InProcess() bool })
	return &recordStore{st: st, log: log, pendingTTL: pendingTTL, fulfillTimeout: fulfillTimeout, inProcess: ok && ip.InProcess()}
}

// Write carries out the core's write w (see recordStore).
func (s *recordStore) Write(ctx context.Context, w lifecycle.Write) (uint64, error) {
	switch {
	case w.Record == nil && w.Create:
		return 0, fmt.Errorf("fulfill: claim %q: no record", truncID(w.ID))
	case w.Record == nil:
		return 0, storeErr(s.st.Delete(ctx, &lifecycle.Proposal{ID: w.ID, Rev: w.Rev}))
	case w.Record.ID != w.ID:
		return 0, fmt.Errorf("fulfill: write %q: the record is proposal %q's", truncID(w.ID), truncID(w.Record.ID))
	case w.Create && w.ClaimOnly:
		return s.claimOnly(ctx, w.Record)
	case w.Create:
		return s.claim(ctx, w.Record)
	}
	r := *w.Record // the store sets its revision (and owner) on it
	r.Rev = w.Rev
	var err error
	switch {
	case r.Phase == lifecycle.Answered && r.Reject != nil:
		err = s.st.MarkAnswered(ctx, &r)
	case w.Soon:
		err = s.st.UpdateSoon(ctx, &r)
	default:
		err = s.st.Update(ctx, &r)
	}
	if err != nil {
		return 0, storeErr(err)
	}
	return r.Rev, nil
}

// claim writes p's record as its claim (ClaimRecord). The claim records
// p.Claim, or p.DecisionID for a proposal that has none yet (the core
// mints DecisionID at the claim).
func (s *recordStore) claim(ctx context.Context, p *lifecycle.Proposal) (uint64, error) {
	r := *p // the store sets its owner and revision on it
	if r.Claim == "" {
		r.Claim = p.DecisionID
	}
	won, winner, err := s.st.ClaimRecord(ctx, &r)
	switch {
	case err != nil:
		return 0, storeErr(err)
	case won:
		return r.Rev, nil
	case winner == "":
		return 0, lifecycle.ErrExists
	case winner != r.Claim:
		return 0, &lifecycle.ClaimedError{Winner: winner}
	}
	// Lost to its own decision id: an earlier try of this claim was
	// applied (the store reported it failed, or timed out). Its record
	// says whether it is still this member's, and at which revision.
	got, err := s.st.Get(ctx, r.ID)
	switch {
	case errors.Is(err, state.ErrNotFound):
		// Claimed by us and ended since: nothing of it is left to answer.
		return 0, lifecycle.ErrExists
	case err != nil:
		return 0, storeErr(err)
	case got.Owner != s.st.Member() || got.Claim != r.Claim:
		return 0, lifecycle.ErrConflict // adopted or taken since
	}
	return got.Rev, nil
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
	if err := s.migrate(r); err != nil {
		return nil, err
	}
	return r, nil
}

// Owned returns this member's records, each settled by Reclaim first (a
// crash may have come between the two writes of its claim): a record
// whose id another claim holds is a replay's, written just before a
// crash, and is deleted and left out. A Reclaim that fails fails Owned
// (the Loop tries again): resuming a record whose claim is not settled
// could answer a replay. A record whose proposal cannot be read is left
// in the store for an operator: nobody can answer it.
func (s *recordStore) Owned(ctx context.Context) ([]lifecycle.Proposal, error) {
	recs, err := s.st.Owned(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]lifecycle.Proposal, 0, len(recs))
	for _, r := range recs {
		if err := s.migrate(r); err != nil {
			s.log.Error("pending record with an unreadable proposal; not resumed", "proposal", truncID(r.ID), "err", err)
			continue
		}
		ours, err := s.st.Reclaim(ctx, r)
		if err != nil {
			return nil, fmt.Errorf("fulfill: settle the claim of record %q: %w", truncID(r.ID), err)
		}
		if !ours {
			s.log.Info("record of a replayed proposal id (claimed before) found; deleted, nothing sent", "proposal", truncID(r.ID))
			if err := s.st.Delete(ctx, r); err != nil && !errors.Is(err, state.ErrConflict) {
				s.log.Warn("record of a replayed proposal id not deleted", "proposal", truncID(r.ID), "err", err)
			}
			continue
		}
		out = append(out, *r)
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

// checkEnvelope fails for a record whose envelope is not its proposal's
// (another id or sender, or no envelope to read): nobody can answer it
// on the strength of such a record, and it is left for an operator.
func checkEnvelope(r *lifecycle.Proposal) error {
	env, err := envelopeOf(r)
	if err == nil && env.From != r.From {
		err = fmt.Errorf("fulfill: record %q: its envelope is proposal %q from %q", truncID(r.ID), truncID(env.ID), env.From)
	}
	return err
}

// envelopeOf reads r's envelope, which must be its proposal's (its id,
// with a sender).
func envelopeOf(r *lifecycle.Proposal) (agent.Envelope, error) {
	var env agent.Envelope
	if err := agent.Unmarshal(r.Envelope, &env); err != nil {
		return env, fmt.Errorf("fulfill: record %q: proposal envelope: %w", truncID(r.ID), err)
	}
	if env.ID != r.ID || env.From == "" {
		return env, fmt.Errorf("fulfill: record %q: its envelope is proposal %q from %q", truncID(r.ID), truncID(env.ID), env.From)
	}
	return env, nil
}

// migrate completes a record written before lifecycle.RecordVersion
// (r.V 0), which state read as far as its layout and the core's agree
// (ids, owner, claim, phase, deadline, what is committed): its decision
// (the policy's whole decision, the route, the params to fulfil and who
// approved them), what its payload says (method, tool, validation), and
// the deadline of a record written before records carried one. A record
// of this build is left as it is. It fails for a record whose proposal
// cannot be read (its envelope, or its decision): nobody can answer it.
func (s *recordStore) migrate(r *lifecycle.Proposal) error {
	if r.V != 0 || len(r.Legacy) == 0 {
		return checkEnvelope(r)
	}
	var old struct {
		Decision json.RawMessage `json:"decision"`
		Revision string          `json:"revision"`
	}
	if err := agent.Unmarshal(r.Legacy, &old); err != nil {
		return fmt.Errorf("fulfill: record %q: %w", truncID(r.ID), err)
	}
	env, err := envelopeOf(r)
	if err != nil {
		return err
	}
	c, perr := parsePayload(env.Payload)
	r.Method, r.Tool, r.Params = c.method, c.tool, c.params
	if perr != nil {
		r.Invalid = perr.Error()
	}
	if len(old.Decision) > 0 {
		var sd storedDecision
		if err := agent.Unmarshal(old.Decision, &sd); err != nil {
			return fmt.Errorf("fulfill: record %q: decision: %w", truncID(r.ID), err)
		}
		rev := sd.Revision
		if rev == "" {
			rev = old.Revision
		}
		r.Decision = &lifecycle.Decision{Action: lifecycle.Action(sd.Action), Reason: sd.Reason, Message: sd.Message, Target: sd.Route,
			Approvers: sd.Approvers, Quorum: sd.Quorum, Timeout: sd.Timeout, Revision: rev,
			Task: sd.Task, TaskTimeout: sd.TaskTimeout, Editable: sd.Editable, Grantable: sd.Grantable,
			NotifyArguments: sd.NotifyArguments, Reminders: sd.Reminders, EscalateTo: sd.EscalateTo, Extra: old.Decision}
		r.FinalArgs, r.ApprovedBy = sd.Params, sd.ApprovedBy
	}
	if r.Deadline.IsZero() {
		// Older still: the deadline of its phase, from what the record
		// has.
		// The pending TTL is counted from Received, as the core's
		// deadlines are absolute: an old record resumed after its TTL is
		// rejected "timeout" rather than decided a TTL after the restart.
		switch r.Phase {
		case lifecycle.Fulfilling:
			if r.Request != nil {
				r.Deadline = r.Request.SentAt.Add(s.fulfillTimeout)
			}
		case lifecycle.Deciding, lifecycle.Queued:
			r.Deadline = r.Received.Add(s.pendingTTL)
		}
	}
	if r.Claim == "" {
		// Claimed before claims were recorded with the record: its
		// seen key holds its decision id, as the store reads it.
		r.Claim = r.DecisionID
	}
	r.V, r.Legacy = lifecycle.RecordVersion, nil // the core's next write writes it anew
	return nil
}
