package lifecycle

import (
	"encoding/json"
	"time"

	"github.com/mewkit/fulfiller/fulfill/decision"
)

// Event is something that happened to the core: a frame read, the result
// of an effect the shell carried out, a timer. Each is handled by Step,
// one at a time.
type Event interface{ event() }

// Proposed: an mcp/proposal was read. Invalid is validation's verdict
// (rule 1), done by the shell's parser before the event.
type Proposed struct {
	ID, From string
	// FrontEnd, Method, Tool and Addressee: see Proposal.
	FrontEnd                string
	Method, Tool, Addressee string
	Envelope                json.RawMessage
	Params                  json.RawMessage
	Invalid                 string
	Size                    int
	// Log: what the front end names of the call on each of its lines
	// (Proposal.Log); nil for none.
	Log *LogFields
}

// Stored is the result of the Write with the same ID and Seq.
type Stored struct {
	ID  string
	Seq uint64
	Rev uint64 // the record's revision after the write
	Err error  // nil, ErrExists, ErrConflict, or any other error: unavailable
}

// Decided is the policy's answer (after routing: Target is the route,
// Incapable why there is none) to the Decide with the same ID.
type Decided struct {
	ID        string
	Decision  Decision
	Incapable string
	Again     bool // the re-check of an edited call (rule 7)
	// Note is the shell's own record of the decision (its decision-log
	// entry, with the policy's input): opaque to the core, which hands it
	// back on the decided Line once the decision governs the proposal,
	// and drops it with a decision it does not take (the proposal ended,
	// or its claim was lost: a replay has no decision record, rule 10).
	Note any
}

// Sent is the outcome of writing a SendReject or SendRequest.
type Sent struct {
	ID         string
	EnvelopeID string
	Err        error
}

// TimerKind says what a timer is for.
type TimerKind int

// Timer kinds.
const (
	TimerDeadline TimerKind = iota // the proposal's Deadline
	TimerRetry                     // try a failed store write again
	TimerResend                    // write a reject that could not be written again
	TimerGrace                     // the tool owner's rejoin grace (OwnerRejoinGrace) ends
	TimerHold                      // a claim held for its decision (Config.ClaimHold) goes as it is
	TimerStep                      // an escalation's next reminder or escalate_to tier is due
)

// Fired: the timer a Schedule asked for went off. Timers are never
// cancelled: one that no longer matches the proposal's state is ignored.
type Fired struct {
	ID   string
	At   time.Time
	Kind TimerKind
}

// WithdrawnBy: an mcp/withdraw naming proposal ID, from From.
type WithdrawnBy struct{ ID, From, Reason string }

// Responded: an mcp/response whose correlation_id[0] is RequestID.
// HasRPCID is false for reference-SDK answers, which carry no id (rule 12).
//
// The answer to a task-augmented request is not the proposer's (the
// request does not name the proposal): TaskID and TaskStatus are set
// when it is a task handle (either revision's CreateTaskResult), and the
// task is followed; otherwise Result or Error (a JSON-RPC error object)
// is the call's outcome, relayed to the proposer at once.
type Responded struct {
	RequestID  string
	From       string
	HasRPCID   bool
	RPCID      int64
	TaskID     string
	TaskStatus string
	// TaskSpec and TaskPoll: which revision of the tasks messages the
	// owner speaks, and the poll interval it suggested (0: none), kept
	// with the task's record for whoever follows it after a restart.
	TaskSpec string
	TaskPoll time.Duration
	Result   json.RawMessage
	Error    json.RawMessage
	// Payload is the response's payload as read: an ignored answer's
	// line carries it (what was sent is the evidence), else Result.
	// Message is the shell's account of an answer not taken (which
	// response, to which request, why): its ignored line's message.
	Payload json.RawMessage
	Message string
}

// TaskStatus: the follower of proposal ID's task read a new status, not
// a terminal one (tasks/get is the authority; a status notification is
// only a hint to ask).
type TaskStatus struct {
	ID, TaskID, Status, Message string
}

// TaskEnded: proposal ID's task ended at its owner (completed, failed,
// cancelled): Result or Error is what the call returned (the follower
// read tasks/result where the revision needs it, and made the error of a
// task that ended without one), relayed to the proposer. Gone instead:
// the owner no longer knows the task (its tasks/get error, worded "task
// not found: …"); nothing will
// come of it, and the proposal is rejected "other".
type TaskEnded struct {
	ID, TaskID, Status string
	Result, Error      json.RawMessage
	Gone               string
}

// AnswerAction is what an approver's elicitation answer says.
type AnswerAction string

// Answer actions (MCP elicitation result.action).
const (
	Accept  AnswerAction = "accept"
	Decline AnswerAction = "decline"
	Cancel  AnswerAction = "cancel"
)

// Answer: an mcp/response read whose correlation_id[0] is PromptID (a
// prompt's envelope id), as read: who sent it, the JSON-RPC id it
// carries (HasRPCID false for reference-SDK clients, which echo none;
// rule 12) and its payload, which the core has Config.Codec verify once
// it matched the answer to its prompt.
type Answer struct {
	PromptID string
	From     string
	HasRPCID bool
	RPCID    int64
	Payload  json.RawMessage
}

// Roster: this member's own welcome (a new session): Present are the
// participants in the space now. The gateway replays nothing, so every
// open prompt is sent again, byte for byte, to its approver if present,
// and a listed approver present who holds no prompt is asked.
type Roster struct{ Present []string }

// KeysChanged: the approver key set in force changed (the keys file was
// reloaded). Answers are verified under the set in force when they are
// read; a prompt asked while its approver was keyed stays signed-only.
type KeysChanged struct{ Keys KeySet }

// PromptSent is the outcome of a SendPrompt that was not Again: a prompt
// that could not be sent is closed ("could not be sent").
type PromptSent struct {
	ID, EnvelopeID string
	Err            error
}

// SupersededBy: another participant answered proposal ID (its own
// mcp/request or mcp/reject naming it). Why is the superseded line's
// message (fulfill's "fulfilled by X", "rejected by X (reason)"); By
// when empty.
type SupersededBy struct{ ID, By, Why string }

// Refused: the gateway refused proposal ID's fulfilment request
// (EnvelopeID), a system/error correlated to it: it never reached the
// tool owner. The proposal is rejected "other", with nothing to cancel.
type Refused struct{ ID, EnvelopeID string }

// Unlogged: the decision log could not write proposal ID's line of Stage
// written ahead of a send (Line.Ahead: fulfilling, escalated). The Loop
// dropped what the line was ahead of (the request, the prompts, the Status);
// the core rejects the proposal "other" (Config.UnloggedMessage): a
// request recorded but never written is never sent, nor cancelled.
type Unlogged struct{ ID, Stage string }

// IDsReserved: JSON-RPC ids the shell reserved for the core (ReserveIDs),
// none handed out before, in the order to use them. The Loop steps one
// with none as it starts, so that the first reservation is asked for
// before the first proposal needs it.
type IDsReserved struct{ IDs []int64 }

// Resumed hands the core records from the store: its own at start, or a
// lapsed member's it adopted.
type Resumed struct {
	Records []Proposal
	How     string
}

// Reloaded is the record Reload read (nil: there is none).
type Reloaded struct {
	ID     string
	Record *Proposal
}

// Released: this member's lease on the proposal's record lapsed (or an
// operator took it) and another member holds it now. The shell stops
// carrying out the proposal's effects not yet carried out before it
// steps the core with this, and before the record is adopted: a lease
// protocol's guarantee (a member that cannot renew stops acting before
// its lease lapses), without which no store write can fence a send.
//
// Reason and Message are its ignored line's (default DropReason and
// "the proposal's record belongs to another member now"; the shell's
// hand-over at shutdown says so).
type Released struct{ ID, Reason, Message string }

// Cancelled: an operator cancels proposal ID (By names them). A proposal
// not yet answered is rejected "other"; one whose request or reject is
// committed is not (a Log line with reason cancel_refused says so, which
// is the operator API's answer). To cancel another member's proposal,
// the shell takes its record (the holder gets Released), resumes it here
// and then posts Cancelled.
type Cancelled struct{ ID, By string }

// Closing: shutdown; every open proposal is answered "other".
type Closing struct{}

// ParticipantLeft: a participant left the space (its presence leave,
// or, after this member's own reconnect, its absence from the new
// roster: leaves sent while the link was down reached nobody here). A
// fulfilment whose tool owner it is gets the owner's rejoin grace; a
// request due while its owner is away is held (not sent, not recorded)
// for that grace. The core assumes every participant present until it
// hears otherwise.
type ParticipantLeft struct{ ID string }

// ParticipantJoined: a participant is (back) in the space (its presence
// join, or its place in a new roster). The requests held for it go out
// now; a response it sends after its reconnect still counts. An
// approver's open prompts are sent again, and one listed who holds none
// is asked, unless Welcome: the roster of this member's welcome, whose
// Roster event came first and asked everyone present already.
type ParticipantJoined struct {
	ID      string
	Welcome bool
}

// GroupLoad is the group's load as the shell last read it from the
// member leases (about once a second, one record per member, never per
// proposal): Peers is the pending work the other live members published
// with their leases, Capacity the sum of MaxPending over the live
// members (0: not read yet, and the group never counts as full). The
// core adds its own open proposals as of this event (its own count is
// fresher than the lease it published), and refuses new proposals "busy" while
// that sum is at Capacity.
type GroupLoad struct{ Peers, Capacity int }

func (Proposed) event()          {}
func (IDsReserved) event()       {}
func (Stored) event()            {}
func (Decided) event()           {}
func (Sent) event()              {}
func (Fired) event()             {}
func (WithdrawnBy) event()       {}
func (Responded) event()         {}
func (Answer) event()            {}
func (Roster) event()            {}
func (KeysChanged) event()       {}
func (PromptSent) event()        {}
func (SupersededBy) event()      {}
func (Refused) event()           {}
func (Unlogged) event()          {}
func (Resumed) event()           {}
func (Closing) event()           {}
func (Reloaded) event()          {}
func (Released) event()          {}
func (Cancelled) event()         {}
func (GroupLoad) event()         {}
func (ParticipantLeft) event()   {}
func (ParticipantJoined) event() {}
func (TaskStatus) event()        {}
func (TaskEnded) event()         {}

// Effect is what the shell must carry out. The shell carries out the
// effects of one proposal one after the other, in the order Step
// returned them (a crash may cut that sequence anywhere, never reorder
// it), and reports Write, Decide, SendReject and SendRequest back as
// events. Effects of different proposals are independent.
type Effect interface{ effect() }

// Write persists Record (nil: delete) with compare-and-set on Rev;
// Create claims the proposal id (create-if-absent, group-wide). Its
// result is a Stored with the same ID and Seq. At most one Write per
// proposal is outstanding.
//
// ClaimOnly (with Create) claims the id without keeping a record
// (state.ClaimDecision, with Record.DecisionID): the one write of a
// proposal refused at once ("busy", or shutting down), where a record
// would cost two more writes (record, delete) to a store the overload
// already loads. A claim that finds the id claimed with its own
// DecisionID is won (an earlier try was applied after all; the store
// reports the claim's decision, as ClaimDecision's winner does). A crash
// between this claim and the reject leaves the proposer without an
// answer (its own timeout), which for "busy" is the same advice:
// propose again later.
type Write struct {
	ID        string
	Seq       uint64
	Record    *Proposal
	Create    bool
	ClaimOnly bool
	Rev       uint64
	// Soon: nothing sent waits for this write to be durable (an
	// approval counted, the phase Queued, a task's status): the store may acknowledge it
	// before its disk sync (state's UpdateSoon). Claims, requests,
	// answers, prompts and deletes are never Soon. A claim (Create) may
	// carry the record in its decided phase (Config.Alone): the store
	// syncs it when that record holds a request or prompts, which go
	// out once it is durable, as it syncs an update (state's
	// ClaimRecord).
	Soon bool
}

// Reload reads the proposal's record (its Rev set); its result is a
// Reloaded.
type Reload struct{ ID string }

// Decide asks the policy (and routing). Params and Approvals are set for
// the re-check of an edited call.
type Decide struct {
	ID        string
	Params    json.RawMessage
	Approvals []Approval
	Again     bool
	// DecisionID (Again) is the id of the decision the re-check makes:
	// minted with the Decide, it governs what follows (rule 10), and the
	// policy's decided line carries it.
	DecisionID string
	// Proposal is the proposal as it is now (a copy): what the policy
	// input is made of. Pending and Inflight are this member's load as
	// the core counts it (input.agent).
	Proposal          Proposal
	Pending, Inflight int
}

// SendReject writes an mcp/reject (then a chat when Message is set); its
// result is a Sent. The envelope id is the recorded one: re-sent, it is
// the same envelope.
type SendReject struct {
	ID, To, EnvelopeID, Reason, Message string
}

// SendRequest writes the fulfilment mcp/request; its result is a Sent.
// Task: task-augmented (params.task with a ttl of TaskTTL, and the
// extension's capability in params._meta), and not correlated to the
// proposal, whose answer its task handle is not (see Responded).
type SendRequest struct {
	ID, To, EnvelopeID string
	RPCID              int64
	Params             json.RawMessage
	Task               bool
	TaskTTL            time.Duration
}

// SendRelay writes a committed relay (RelayRecord) to the proposer To;
// its result is a Sent. Re-sent, it is the same envelopes.
type SendRelay struct {
	ID, To, EnvelopeID string
	RPCID              int64
	TaskID             string
	Result, Error      json.RawMessage
}

// FollowTask: follow proposal ID's task at its owner To (tasks/get,
// status notifications as hints, correlated to the task-augmented
// request) and report TaskStatus and TaskEnded, until the task ends or a
// CancelTask for the proposal comes. Issued once the task's record is
// written (a task nobody would follow after a crash is never followed),
// and again when a record in phase Task is resumed.
type FollowTask struct {
	ID, To, TaskID, RequestEnvelopeID string
	Deadline                          time.Time
}

// CancelTask stops following proposal ID's task and sends tasks/cancel
// to its owner (once; its answer is not awaited: cancellation is
// cooperative). Reason DropReason sends nothing: another member follows
// the task now.
type CancelTask struct {
	ID, To, TaskID, RequestEnvelopeID string
	Reason                            string
}

// SendCancel writes notifications/cancelled for a fulfilment request.
type SendCancel struct {
	ID, To, RequestEnvelopeID string
	RPCID                     int64
	Reason                    string
}

// CancelAsk ends an escalation: it cancels its open prompts
// (notifications/cancelled to each), whichever member sent them (a
// record taken from another member names that member's prompts); Reason
// DropReason cancels nothing on the wire: another member asks the same
// prompts now. The shell drops a SendPrompt or a Status of the proposal
// it has not carried out yet: nothing is asked, and no wait reported,
// after the proposal ended (a CancelAsk without prompts is only that).
type CancelAsk struct {
	ID      string
	Prompts []Prompt // the open ones: approvers who answered are not told again
	Reason  string
}

// DropReason is CancelAsk's reason when the proposal is another member's.
const DropReason = "adopted_elsewhere"

// Status stages: what a status chat says the proposal waits for.
const (
	StatusEscalated = "escalated" // waiting for humans: Approvers, Quorum, Deadline
	StatusQueued    = "queued"    // allowed, waiting for a fulfilment slot
	StatusTask      = "task"      // the owner runs the call as a task: TaskID, TaskStatus, Deadline
)

// Status is a status chat (Config.StatusChats): it tells the proposer To
// that its proposal waits, and for what, because a proposer that cannot
// tell a wait from a dead fulfiller withdraws on its own timeout. It is
// never an answer (rule 2's one answer is unchanged), best effort, and
// goes out once what it reports is recorded: when a proposal reaches
// one of the stages, and again when a task's status changes or a task is
// followed again after a restart. The shell writes it as a chat
// correlated to the proposal, its text for people,
// _meta["fulfiller/status"] for programs (fulfill's wire.Status).
type Status struct {
	ID, To, Stage string
	// Decision is the proposal's (escalated): the shell's own terms in
	// it (Extra) say whether the deadline is the proposer's hint.
	Decision   *Decision
	Approvers  []string
	Quorum     int
	Deadline   time.Time
	Target     string // the tool owner (task)
	TaskID     string
	TaskStatus string
}

// ReserveIDs asks the shell for N JSON-RPC ids (Config.ReserveIDs),
// answered by IDsReserved; a reservation that fails is tried again until
// it is made. It belongs to no proposal: the Loop carries it out beside
// the lanes.
type ReserveIDs struct{ N int }

// Schedule asks for a Fired at At.
type Schedule struct {
	ID   string
	At   time.Time
	Kind TimerKind
}

// Log is a decision-log line, written ahead: the shell writes it before
// the effects after it.
type Log struct{ Line Line }

// Line is a decision-log line.
type Line struct {
	Stage      string `json:"stage"`
	ProposalID string `json:"proposal_id"`
	DecisionID string `json:"decision_id"`
	Revision   string `json:"revision,omitempty"`
	Action     Action `json:"action,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Message    string `json:"message,omitempty"`
	// What the shell's decision log says of the proposal (fulfill's
	// Event): filled by the core from the proposal for every line.
	Proposer string `json:"proposer,omitempty"`
	Method   string `json:"method,omitempty"`
	Tool     string `json:"tool,omitempty"`
	Target   string `json:"target,omitempty"` // the route, once decided (or the addressee)
	// Log: what the front end names of the call (Proposal.Log).
	Log *LogFields `json:"log_fields,omitempty"`
	// By: who answered (approvers for approved and fulfilled, the other
	// participant for superseded and an ignored answer); Deadline: an
	// escalation's; Result and RPCError: a fulfilment's outcome (or an
	// ignored answer's payload); Latency: request to response;
	// TaskID and TaskStatus: a task's.
	By         []string        `json:"by,omitempty"`
	Deadline   time.Time       `json:"deadline,omitzero"`
	Result     json.RawMessage `json:"result,omitempty"`
	RPCError   json.RawMessage `json:"rpc_error,omitempty"`
	Latency    time.Duration   `json:"latency,omitempty"`
	TaskID     string          `json:"task_id,omitempty"`
	TaskStatus string          `json:"task_status,omitempty"`
	// TaskSpec, TaskCreated and TaskDeadline: the rest of a task's record
	// (the revision its owner speaks, when it was made, when fulfiller
	// stops following it), so that observers and the decision log show
	// the task whole and not only its id.
	TaskSpec     string    `json:"task_spec,omitempty"`
	TaskCreated  time.Time `json:"task_created,omitzero"`
	TaskDeadline time.Time `json:"task_deadline,omitzero"`
	// Ahead: the line is written ahead of a send (fulfilling, escalated)
	// and the send must not happen unless it is written: the Journal
	// reports its failure, and the Loop posts Unlogged (fail closed).
	Ahead bool `json:"-"`
	// Note: the decided line's Decided.Note, for the shell's journal.
	Note any `json:"-"`
}

// SendPrompt writes a prompt (its recorded Payload, an elicitation/create
// request) to its approver To, once the record holding it is durable.
// Again: the same prompt once more, byte for byte (after a reconnect, a
// restart, an adoption); only a first send reports PromptSent.
type SendPrompt struct {
	ID, To, EnvelopeID string
	RPCID              int64
	Payload            json.RawMessage
	Again              bool
}

// HumanKind names a step of an escalation with its humans (elicit's
// EventKind values, which the shell's observers read).
type HumanKind string

// What a Human effect reports.
const (
	HumanSkipped    HumanKind = "skipped"     // Approver not asked: Reason says why
	HumanAsked      HumanKind = "asked"       // a prompt went to Approver (RequestID)
	HumanAskedAgain HumanKind = "asked_again" // the same prompt went again
	HumanAnswered   HumanKind = "answered"    // Approver answered: Action, Approve, Reason
	HumanDelegated  HumanKind = "delegated"   // Approver handed the prompt on to To
	HumanCancelled  HumanKind = "cancelled"   // the open prompt at Approver was cancelled: Reason
	HumanIgnored    HumanKind = "ignored"     // an answer did not count: Reason, From
	HumanForgery    HumanKind = "forgery"     // an unsigned or badly signed answer for a keyed approver
	// HumanStepDropped: a reminder or tier not before the deadline, never
	// to happen (Reason says which, After when): the shell logs it.
	HumanStepDropped HumanKind = "step_dropped"
	// The escalation as a whole (Notice set): the notifier's
	// prompt.opened, prompt.reminder, prompt.escalated, prompt.ended.
	HumanOpened    HumanKind = "opened"
	HumanReminded  HumanKind = "reminded"
	HumanEscalated HumanKind = "escalated"
	HumanEnded     HumanKind = "ended"
)

// Outcomes of HumanEnded besides a reject reason.
const (
	OutcomeApproved  = "approved"
	OutcomeCancelled = "cancelled"
)

// Human reports one step of an escalation with its humans, for the
// decision log, metrics and notifications (what elicit's Observer was
// told): each approver's prompt, answer, delegation, cancellation, and
// the escalation's opening, reminders, tiers and end. DecisionID and
// Revision name the decision that escalated.
type Human struct {
	ID                   string
	At                   time.Time // when the core took the step
	Kind                 HumanKind
	Approver, From       string
	RequestID            string
	Action               string
	Approve              bool
	Reason, To           string
	After                time.Duration // HumanStepDropped
	Notice               *Notice
	Outcome              string // HumanEnded
	DecisionID, Revision string
	// FrontEnd and Log: the front end the proposal came in by, and
	// what it names of the call (Proposal.FrontEnd, Proposal.Log).
	FrontEnd string
	Log      *LogFields
}

// Notice describes the escalation as a whole for people not in the
// space: whom it asks (Asked: the approvers with prompts open when it
// opened; those still waited for at a reminder; a tier's; everyone asked
// at its end), its quorum and deadline; Arguments only when the
// decision allows it (NotifyArguments: the call's params, which the
// shell shows as arguments).
type Notice struct {
	// The proposal: who proposed which call (Params as proposed, for
	// its digest), to be carried out by Target.
	Proposer, Method, Tool, Target string
	Params                         json.RawMessage
	Asked                          []string
	Quorum                         int
	Deadline                       time.Time
	Resumed                        bool
	Arguments                      json.RawMessage
}

// CreateGrant: an approval that chose a grant was committed (its request
// recorded): the shell creates the grant, Duration long, for the call as
// approved (Params) under the decision's grantable terms, with the
// approver's signed evidence when there is one.
type CreateGrant struct {
	ID, Approver       string
	Duration           time.Duration
	Params             json.RawMessage
	Content            json.RawMessage
	Request, Signature string
	DecisionID         string
	// The proposal and decision the grant comes of: who proposed which
	// call (Proposed: the params as proposed, which the evidence's digest
	// names), its route, the decision's revision and grantable terms.
	Proposer, Method, Tool, Target, Revision string
	Proposed                                 json.RawMessage
	Grantable                                *decision.Grantable
	// Log: what the front end names of the call (Proposal.Log), for
	// the granted line.
	Log *LogFields
}

func (Write) effect()       {}
func (ReserveIDs) effect()  {}
func (Decide) effect()      {}
func (Reload) effect()      {}
func (SendReject) effect()  {}
func (SendRequest) effect() {}
func (SendCancel) effect()  {}
func (SendRelay) effect()   {}
func (FollowTask) effect()  {}
func (CancelTask) effect()  {}
func (Status) effect()      {}
func (CancelAsk) effect()   {}
func (Schedule) effect()    {}
func (Log) effect()         {}
func (SendPrompt) effect()  {}
func (Human) effect()       {}
func (CreateGrant) effect() {}
