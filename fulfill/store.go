package fulfill

import (
	"context"
	"encoding/json"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"sync/atomic"
	"time"

	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/state"
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
	// Shared reports whether other members can use the store (a group).
	// Alone on it, a claim the store could not take is tried on past the
	// proposal's deadline, since no other member can answer it; the
	// policy is asked before the claim, which carries what the decision
	// commits (lifecycle.Config.Alone); and the records are not watched
	// for other members' writes (WatchRecords), since there are none.
	Shared() bool
	// ClaimRecord wins a proposal id for this member once for the whole
	// group and SeenTTL (rule 5) by writing its record (create-if-absent,
	// p.Claim the id of the decision that will govern it): the claim is
	// the record, so a claimed proposal always has one to resume. A lost
	// claim means send nothing, and returns the winner's decision id (""
	// when unknown) for the ignored line.
	ClaimRecord(ctx context.Context, p *lifecycle.Proposal) (won bool, winner string, err error)
	// ClaimDecision is the claim without a record, for a proposal
	// rejected "busy" at once (see claimAndAdmit): it costs one write
	// where the record costs three (claim, seen key, delete).
	ClaimDecision(ctx context.Context, proposalID, decisionID string) (won bool, winner string, err error)
	// Reclaim settles the seen key of a record before it is resumed (a
	// crash may have come between ClaimRecord's writes); false: the
	// record is a replay's, delete it and send nothing.
	Reclaim(ctx context.Context, p *lifecycle.Proposal) (ours bool, err error)
	// Update and Delete compare and set on p.StoreRevision
	// (state.ErrConflict: someone else owns it now). UpdateSoon is Update
	// that does not wait for the disk: for a write nothing sent depends
	// on (an escalation's phase, an approval).
	Update(ctx context.Context, p *lifecycle.Proposal) error
	UpdateSoon(ctx context.Context, p *lifecycle.Proposal) error
	Delete(ctx context.Context, p *lifecycle.Proposal) error
	// MarkAnswered records, just before a reject is written, which reject
	// ends p (phase state.Answered): whoever resumes the record sends the
	// same reject again instead of leaving the proposer without one.
	MarkAnswered(ctx context.Context, p *lifecycle.Proposal) error
	// List is the group's pending work; Owned is this member's.
	List(ctx context.Context) ([]*lifecycle.Proposal, error)
	Owned(ctx context.Context) ([]*lifecycle.Proposal, error)
	// Members are the group's live leases; SetPending is this member's
	// pending work for its next lease renewal (MemberInfo.Pending).
	Members(ctx context.Context) ([]state.MemberInfo, error)
	SetPending(n int)
	// WatchLapsed reports members whose lease lapsed with work left;
	// Adopt moves that work to this member, each record to one adopter.
	WatchLapsed(ctx context.Context) (<-chan string, error)
	Adopt(ctx context.Context, from string) ([]*lifecycle.Proposal, error)
	// Get reads one record (state.ErrNotFound); Take moves it to this
	// member by compare-and-set for an operator's cancel (refused with
	// state.ErrFulfilling once its request is written); WatchRecords
	// reports every write to the group's records, so that a member whose
	// record was taken or adopted stops at once (see operator.go).
	Get(ctx context.Context, proposalID string) (*lifecycle.Proposal, error)
	Take(ctx context.Context, proposalID string) (*lifecycle.Proposal, error)
	WatchRecords(ctx context.Context) (<-chan state.RecordChange, error)
}

var (
	_ Store = (*state.Store)(nil)
	_ Store = (*state.Local)(nil)
)

// storeTimeout bounds one store operation, so that an unreachable store
// fails a step (closed) instead of holding it.
const storeTimeout = 10 * time.Second

// DropReason, a CancelAsk's reason, stops an escalation without a word
// to its approvers: the proposal belongs to another member of the
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

// ReasonStoreUnavailable is the reason of a StageIgnored event for a
// proposal left unanswered because the store could not claim it while
// group peers were live (see claim).
const ReasonStoreUnavailable = "store_unavailable"

// ReasonAdopted is the reason of a StageIgnored event for a proposal this
// member dropped without a word because its record belongs to another
// member now (adopted after this member's lease lapsed).
const ReasonAdopted = "adopted_elsewhere"

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
