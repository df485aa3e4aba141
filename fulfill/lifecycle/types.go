package lifecycle

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/mewkit/fulfiller/fulfill/decision"
)

// Phase is where a pending proposal is. It is the one phase enum: the
// record in the store carries it as it is in memory.
type Phase string

// Phases of a pending proposal, in the order a proposal normally passes
// them. Answered is the last phase a record can have: its reject is
// committed and is (re-)sent with its recorded envelope id until it is
// written; then the record is deleted.
const (
	Deciding         Phase = "deciding"          // claimed; the policy is asked
	AwaitingApproval Phase = "awaiting_approval" // prompts are open until Deadline
	Queued           Phase = "queued"            // decided fulfil; waits for a fulfilment slot
	Fulfilling       Phase = "fulfilling"        // Request committed (sent at most once); its response awaited until Deadline
	// Task: the tool owner answered the task-augmented Request with an
	// MCP task, followed until its end or Deadline (the task's own). The
	// proposer has had no answer yet (the task's relayed result is it):
	// a withdrawal, an operator's cancel and the deadline still end it,
	// others' answers do not (state.Running).
	Task     Phase = "task"
	Answered Phase = "answered" // Reject committed; sent (again) until written
)

// DefaultClaimHold is Config.ClaimHold's default: far longer than a
// policy takes (tens of microseconds) or waits in the Loop under load,
// far shorter than a proposer waits for an answer.
const DefaultClaimHold = 50 * time.Millisecond

// NoApprovalsMessage is the reject message (reason "policy") of an
// escalation where nobody can ask the humans (Config.Codec nil).
const NoApprovalsMessage = "the policy asks for human approval, but escalation is not configured on this fulfiller"

// Outcome is how a proposal ended in this process.
type Outcome string

// Outcomes.
const (
	Open       Outcome = ""
	Fulfilled  Outcome = "fulfilled"  // the tool owner answered the request
	Rejected   Outcome = "rejected"   // a reject was committed
	Withdrawn  Outcome = "withdrawn"  // the proposer withdrew before an answer was committed
	Superseded Outcome = "superseded" // another participant answered it
	Dropped    Outcome = "dropped"    // its record is another member's now (fenced), or it was never claimed
)

// Action is what a decision says to do.
type Action string

// Actions of a decision.
const (
	Fulfill  Action = "fulfill"
	Reject   Action = "reject"
	Escalate Action = "escalate"
)

// Decision is what the core needs of a policy decision. Extra is the
// shell's (grants, reminders, task settings…): persisted with the record,
// never read by the core.
type Decision struct {
	Action    Action        `json:"action"`
	Reason    string        `json:"reason,omitempty"`
	Message   string        `json:"message,omitempty"`
	Target    string        `json:"target,omitempty"` // the route chosen (tool owner)
	Approvers []string      `json:"approvers,omitempty"`
	Quorum    int           `json:"quorum,omitempty"`
	Timeout   time.Duration `json:"timeout,omitempty"`
	Revision  string        `json:"revision,omitempty"`
	// Task: the call goes out task-augmented (routing found that the
	// tool requires it, or allows it and the policy asks, as fulfill's
	// callsAsTask); TaskTimeout bounds the task once created (0: the
	// Config's).
	Task        bool          `json:"task,omitempty"`
	TaskTimeout time.Duration `json:"task_timeout,omitempty"`
	// The escalation's terms (the policy's, in package decision's
	// types): the arguments an approver may edit, the grant an approval
	// may create, whether notifications may show the arguments, when a
	// prompt still open is announced again, and the tiers asked too
	// while it is open.
	Editable        []string            `json:"editable,omitempty"`
	Grantable       *decision.Grantable `json:"grantable,omitempty"`
	NotifyArguments bool                `json:"notify_arguments,omitempty"`
	Reminders       []time.Duration     `json:"reminders,omitempty"`
	EscalateTo      []decision.Tier     `json:"escalate_to,omitempty"`
	Extra           json.RawMessage     `json:"extra,omitempty"`
}

// RecordVersion is the version of the record layout Proposal is stored
// in (Proposal.V). Records without one were written by builds that kept a
// record of their own beside the Proposal; state reads them into a
// Proposal with V 0 and the record's bytes in Legacy, and the shell
// completes them from those bytes (fulfill's recordStore.migrate) before the core
// sees them.
const RecordVersion = 2

// Proposal is one pending proposal: the whole of its state, and the
// record the store keeps of it, persisted as it is (JSON) before anything
// it commits to is sent.
type Proposal struct {
	// V is the record layout's version: RecordVersion when written by
	// this build (state sets it), 0 for a record read from an older one.
	V    int    `json:"v"`
	ID   string `json:"id"`
	From string `json:"from"`
	// FrontEnd is the front end the proposal came in by ("mew", "mcp";
	// "" in records of builds before there were two, all "mew"): the
	// policy's input.front_end, and whose answer it is.
	FrontEnd string          `json:"front_end,omitempty"`
	Envelope json.RawMessage `json:"envelope,omitempty"` // the proposal as received
	// Params is what the proposal's payload says, a slice of Envelope:
	// not stored twice, the shell reads it from the envelope again when it
	// loads a record.
	Params   json.RawMessage `json:"-"`                 // as proposed; nil when it had none
	Invalid  string          `json:"invalid,omitempty"` // why validation refused it (rule 1)
	Size     int             `json:"size,omitempty"`
	Received time.Time       `json:"received"`
	// Method and Tool are what the shell's parser read of the payload
	// (params.name of a tools/call), for the decision log and the
	// fulfilment request; Addressee is the participant the proposal's
	// `to` named as the call's target ("" when none).
	Method    string `json:"method,omitempty"`
	Tool      string `json:"tool,omitempty"`
	Addressee string `json:"addressee,omitempty"`
	Owner     string `json:"owner"` // the group member that answers it
	// Log is what the proposal's front end names of it on every line
	// (Proposed.Log): kept with the record, so a resumed proposal's
	// lines say it too. Nil for a front end that names nothing (MEW),
	// and in records written before there was one.
	Log *LogFields `json:"log_fields,omitempty"`

	Phase Phase `json:"phase"`
	// Deadline is the one deadline of the current phase: the pending TTL
	// while deciding or queued, the approval deadline while humans are
	// asked, the fulfil timeout once the request is committed.
	Deadline time.Time `json:"deadline"`

	DecisionID string `json:"decision_id"` // minted at the claim; a new one after an edit is decided again
	// Claim is the decision id the proposal was claimed with: it never
	// changes, so a replay's ignored line joins the decision the store's
	// seen key holds (rule 10), whatever decided after an edit.
	Claim    string    `json:"claim,omitempty"`
	Decision *Decision `json:"decision,omitempty"`

	Prompts   []Prompt   `json:"prompts,omitempty"`
	Approvals []Approval `json:"approvals,omitempty"`
	// Escalation is the state of the humans' escalation beyond its
	// prompts and approvals.
	Escalation *Escalation     `json:"escalation,omitempty"`
	FinalArgs  json.RawMessage `json:"final_params,omitempty"` // params to fulfil (edited, or as proposed)
	ApprovedBy []string        `json:"approved_by,omitempty"`
	// Request is the fulfilment request, committed before it is sent;
	// once set it is never sent again (a tool call must not run twice).
	Request *Request `json:"request,omitempty"`
	// Task is the MCP task the request became (phase Task).
	Task *TaskRecord `json:"task,omitempty"`
	// Reject is the committed answer of phase Answered; Relay is the
	// other one a proposal can have there: a task-augmented request's
	// outcome, relayed to the proposer.
	Reject *RejectRecord `json:"reject,omitempty"`
	Relay  *RelayRecord  `json:"relay,omitempty"`

	// Rev is the record's revision in the store (compare-and-set).
	Rev uint64 `json:"-"`
	// Legacy is a record written before RecordVersion, as read (V 0):
	// what the shell's migration reads the rest of the Proposal from.
	Legacy json.RawMessage `json:"-"`
}

// LogFields are what a front end names of a call on every decision-log
// line of its proposal, beside the proposer, method, tool and target the
// core fills in from the record: for the MCP front end the client (its
// clientInfo name, a claim), the server (the upstream called) and the
// client's JSON-RPC id. The front end gives them at intake; the record
// is their one owner, and every Line, Human and CreateGrant of the
// proposal points at them. Never changed once given, so the pointer is
// shared, not copied.
type LogFields struct {
	Client string          `json:"client,omitempty"`
	Server string          `json:"server,omitempty"`
	RPCID  json.RawMessage `json:"rpc_id,omitempty"`
}

// Escalation is what a proposal's escalation keeps besides its prompts
// and approvals (Proposal.Deadline is its one deadline; its quorum and
// plan are the decision's): whom it asks so far, when its reminders
// and tiers count from, how many of those steps are done, and why the
// last prompt could not be asked or counted (for an "incapable"
// message). Persisted with the proposal, so that a restart or an
// adopter carries on where it was.
type Escalation struct {
	// Approvers are those the escalation asks so far: the decision's
	// (or the configured ones), then each tier's as it comes.
	Approvers []string  `json:"approvers,omitempty"`
	Since     time.Time `json:"since,omitzero"`
	// Started is when this escalation began here (the wait a timeout
	// message names when the decision set no timeout).
	Started  time.Time `json:"started,omitzero"`
	PlanDone int       `json:"plan_done,omitempty"`
	LastErr  string    `json:"last_error,omitempty"`
	// Opened: the escalation was announced (prompt.opened), so its end
	// is announced too.
	Opened bool `json:"opened,omitempty"`
}

// PromptState is where a prompt is.
type PromptState string

// Prompt states. A prompt recorded without a state (by an earlier build,
// which kept none) is open unless its approver's approval is recorded
// or a later prompt's chain names the approver (resume derives it).
const (
	PromptOpen     PromptState = ""          // asked, no answer yet
	PromptAnswered PromptState = "answered"  // its approver answered (or failed to show it)
	PromptHandedOn PromptState = "handed_on" // its approver delegated it
	PromptUnsent   PromptState = "unsent"    // it could not be made (signed) or sent
)

// Prompt is one elicitation to one approver; re-asked with the same ids
// after a restart or an adoption, so an answer to either copy counts once.
// It is the record's prompt as stored (state.Prompt is this type).
type Prompt struct {
	Approver   string `json:"approver"`
	EnvelopeID string `json:"envelope_id"` // elicitation envelope id
	RPCID      int64  `json:"rpc_id"`      // JSON-RPC id of elicitation/create
	// Chain is the delegation chain that led to this approver, oldest
	// first.
	Chain []string  `json:"chain,omitempty"`
	Sent  time.Time `json:"sent,omitzero"`
	// Signed: the approver was keyed when asked, so only a signed answer
	// counts, after a restart too, even if the key is removed meanwhile.
	Signed bool `json:"signed,omitempty"`
	// Payload is the elicitation/create payload as sent: whoever resumes
	// the prompt sends it again byte for byte, which is how an approver's
	// client knows it is the same question (and re-sends its answer).
	Payload json.RawMessage `json:"payload,omitempty"`
	// Answered: an earlier build's core counted its answer (read as
	// PromptAnswered).
	Answered bool        `json:"answered,omitempty"`
	State    PromptState `json:"state,omitempty"`
	// Delegates and Grants are what the prompt's form offered
	// (delegate_to, grant durations): an answer choosing anything else
	// is refused. Read back from Payload (Codec.Offers) for a prompt
	// recorded without them.
	Delegates []string `json:"delegates,omitempty"`
	Grants    []string `json:"grants,omitempty"`
}

// open reports whether pr waits for its approver's answer.
func (pr *Prompt) open() bool { return pr.State == PromptOpen && !pr.Answered }

// Approval is an approver's accept, counted once. It is the record's
// approval as stored (state.Approval is this type).
type Approval struct {
	Approver string          `json:"approver"`
	Params   json.RawMessage `json:"params,omitempty"` // edited params; nil: as proposed
	// Content is the approver's form content (input.approval).
	Content           json.RawMessage `json:"content,omitempty"`
	SignatureVerified bool            `json:"signature_verified,omitempty"`
	// Request and Signature, for a signed answer, keep the evidence a
	// grant made from it carries after a restart.
	Request   string    `json:"request,omitempty"`
	Signature string    `json:"signature,omitempty"`
	At        time.Time `json:"at,omitzero"`
	// Key names the call approved ("": as proposed; else its canonical
	// params): approvals of the same call count toward one quorum.
	Key string `json:"key,omitempty"`
	// Grant is the grant duration the approver chose ("": none), one
	// the prompt offered.
	Grant string `json:"grant,omitempty"`
}

// Request is the fulfilment request.
type Request struct {
	EnvelopeID string    `json:"envelope_id"`
	RPCID      int64     `json:"rpc_id"`
	Target     string    `json:"target"`
	SentAt     time.Time `json:"sent_at"`
	// Task: sent task-augmented; its answer is a task handle (or the
	// call's outcome, relayed), not the proposer's answer.
	Task bool `json:"task,omitempty"`
}

// TaskRecord is a running MCP task: the owner's id for it, the last
// status its follower read, and its deadline.
type TaskRecord struct {
	ID       string    `json:"id"`
	Status   string    `json:"status"`
	Created  time.Time `json:"created"`
	Deadline time.Time `json:"deadline"`
	// Spec is which revision of the tasks messages the owner speaks
	// ("2025-11-25", or the extension's "2026-07-28"), and PollMS the
	// poll interval it suggested: what the follower needs after a restart.
	Spec   string `json:"spec,omitempty"`
	PollMS int64  `json:"poll_ms,omitzero"`
}

// RelayRecord is a committed relay: the outcome of a task-augmented
// request (the task's result, or the owner's answer when it made no
// task), written to the proposer as a reference-SDK proposer takes a
// fulfilment (an mcp/request tasks/result correlated to the proposal,
// then the mcp/response to it).
// Like a reject it is recorded before it is written, and written again
// with the same ids after a restart.
type RelayRecord struct {
	EnvelopeID string          `json:"envelope_id"` // of the tasks/result request
	RPCID      int64           `json:"rpc_id"`
	TaskID     string          `json:"task_id,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	Error      json.RawMessage `json:"error,omitempty"` // a JSON-RPC error object
}

// RejectRecord is a committed reject.
type RejectRecord struct {
	EnvelopeID string `json:"envelope_id"`
	Reason     string `json:"reason"`
	Message    string `json:"message,omitempty"`
	// CancelRequest: the proposal's fulfilment request is cancelled at
	// its owner (notifications/cancelled) before the reject is sent.
	CancelRequest bool `json:"cancel_request,omitempty"`
	// CancelTask: the proposal's running task is cancelled at its owner
	// (tasks/cancel) before the reject is sent, and again after a restart.
	CancelTask bool `json:"cancel_task,omitempty"`
	// CancelReason is the notifications/cancelled reason of a
	// CancelRequest ("timeout", "shutdown", "the tool owner left"); the
	// reject's Reason when empty.
	CancelReason string `json:"cancel_reason,omitempty"`
}

// clone is a deep copy of p on the heap (see copy).
func (p *Proposal) clone() *Proposal {
	q := p.copy()
	return &q
}

// copy is a deep copy of p as a value: its slices and the structs it
// points to are its own (raw JSON is never changed in place, so it is
// shared). A value, not a pointer, for what is copied into an effect or
// an answer (a Decide, Get): the copy stays off the heap until the effect
// is boxed, which is one allocation where a clone and then a copy of it
// were two.
func (p *Proposal) copy() Proposal {
	q := *p
	q.Prompts = append([]Prompt(nil), p.Prompts...)
	q.Approvals = append([]Approval(nil), p.Approvals...)
	q.ApprovedBy = append([]string(nil), p.ApprovedBy...)
	if p.Escalation != nil {
		x := *p.Escalation
		x.Approvers = append([]string(nil), x.Approvers...)
		q.Escalation = &x
	}
	if p.Decision != nil {
		d := *p.Decision
		q.Decision = &d
	}
	if p.Request != nil {
		r := *p.Request
		q.Request = &r
	}
	if p.Reject != nil {
		r := *p.Reject
		q.Reject = &r
	}
	if p.Task != nil {
		t := *p.Task
		q.Task = &t
	}
	if p.Relay != nil {
		r := *p.Relay
		q.Relay = &r
	}
	return q
}

// Errors a store write comes back with (Stored.Err). Anything else is
// "unavailable": the write did not happen and is tried again.
var (
	// ErrExists: the claim (create) found the proposal id claimed
	// before, by this or another member (rule 5, group-wide).
	ErrExists = errors.New("lifecycle: proposal claimed before")
	// ErrConflict: the record is not this member's any more (adopted,
	// taken) or is gone: nothing more may be sent about it.
	ErrConflict = errors.New("lifecycle: record changed by another member")
	// ErrAway (the Wire's SendRequest): the request's tool owner is not
	// in the space, so nothing was written (the gateway replays nothing:
	// it would be lost). The core holds the request for the owner's
	// rejoin grace and sends it, with the same ids, when the owner is
	// back.
	ErrAway = errors.New("lifecycle: the tool owner is not in the space")
)

// ClaimedError is ErrExists (errors.Is) naming the decision id the
// winning claim recorded, when the store says: the replay's ignored line
// joins that decision (rule 10).
type ClaimedError struct{ Winner string }

// Error says who won the claim.
func (e *ClaimedError) Error() string {
	if e.Winner == "" {
		return ErrExists.Error()
	}
	return ErrExists.Error() + " (decision " + e.Winner + ")"
}

// Is makes a ClaimedError match ErrExists.
func (e *ClaimedError) Is(target error) bool { return target == ErrExists }

// IDs mints the ids the core puts on the wire. The shell's comes from
// the agent (envelope ids, the space's JSON-RPC id sequence); the
// simulator's is a counter, so that a seed replays exactly.
//
// PromptID mints a prompt's envelope id, which must be unpredictable
// (crypto randomness, as agent.NewID): an answer names its prompt by
// it, and a forger who could tell the next one could post an answer
// card ahead of the prompt.
type IDs interface {
	EnvelopeID() string
	RPCID() int64
	DecisionID() string
	PromptID() string
}

// Config tunes a Core.
type Config struct {
	Member     string // this member's id (record owner)
	MaxPending int    // claimed proposals open at once; more are rejected "busy"
	// MaxPendingPerProposer bounds the proposals one proposer has open
	// at once (0: no bound), so that one sender cannot make everyone
	// else's work come back "busy".
	MaxPendingPerProposer int
	// MaxPendingBytes bounds the frame bytes (Proposal.Size) of the
	// proposals open at once (0: no bound); more are rejected "busy".
	MaxPendingBytes int64
	MaxInflight     int           // fulfilment requests out at once; more wait in phase Queued
	PendingTTL      time.Duration // deadline while deciding or queued
	FulfillTimeout  time.Duration // deadline for the tool owner's response
	// OwnerRejoinGrace is how long a tool owner that left during a
	// fulfilment may take to come back before the proposal is rejected
	// "incapable": a dropped link or a gateway restart is a leave too,
	// and the owner's answer, sent after its reconnect, still counts.
	OwnerRejoinGrace time.Duration
	// TaskTimeout bounds an MCP task once its owner created it, when the
	// decision sets none.
	TaskTimeout time.Duration
	// StatusChats: tell the proposer (Status) when it waits for humans,
	// for a fulfilment slot, or on a task.
	StatusChats bool
	// MaxInflightPerProposer bounds the fulfilment slots one proposer
	// holds at once (0: MaxInflight), and a freed slot goes to the
	// queued proposers in turn, so that one proposer's
	// calls to a tool that hangs cannot make everyone else's wait.
	MaxInflightPerProposer int
	// Codec builds the core's prompts and reads the answers to them;
	// nil: nobody can ask the humans here, and an escalation (a
	// decision, or a record resumed from a member that could ask) is
	// rejected "policy" with NoApprovalsMessage. Keys is the approver
	// key set in force at start (KeysChanged replaces it); OfferGrants
	// lets a grantable escalation of quorum 1 offer grants (off until
	// the shell creates the grants approvers choose).
	Codec           Codec
	Keys            KeySet
	OfferGrants     bool
	ApprovalTimeout time.Duration // deadline for humans when the decision sets none
	RetryAfter      time.Duration // a store write or a reject that failed is tried again after this
	Approvers       []string      // asked when the decision names none
	// UnloggedMessage is the reject message (reason "other") of a
	// proposal whose fulfilling or escalated line the decision log could
	// not write (Unlogged): fail closed, nothing is sent that the log
	// does not have.
	UnloggedMessage string
	// Alone: no other member can share this member's store (an embedded
	// one). A claim the store could not take is then tried on past the
	// proposal's deadline, and the proposal rejected "timeout" once it
	// lands (its record says so, and a replay is told by the claim's
	// answer): no other member can answer it. In a group such a proposal
	// is given up at its deadline, left to whichever member claimed it
	// or to the proposer's own timeout.
	//
	// Alone, the policy is also asked before the claim is written, and
	// the claim written with what the decision commits: a fulfilment's
	// request, a reject's answer, an escalation's prompts (one store
	// write where a claim and then an update were two). In a group each
	// member would evaluate every proposal. A decision that takes longer
	// than ClaimHold is not waited for: the claim goes as it is, so that
	// a proposal is not held unrecorded (unseen by a restart or an
	// operator) while a slow policy runs, and the decision follows it.
	Alone bool
	// ClaimHold bounds how long a claim waits for its decision (Alone).
	// 0: DefaultClaimHold.
	ClaimHold time.Duration
	// ReserveIDs is how many JSON-RPC ids the core asks the shell for at
	// a time (ReserveIDs, answered by IDsReserved), again once half are
	// used: the shell's ids come from blocks reserved in the store
	// (compare-and-set), and Step must never wait for one. A fulfilment
	// due while none is reserved waits in the queue of the fulfilment
	// slots (phase Queued) until they come. 0: every id from IDs.RPCID,
	// which must then return at once (the simulator's counter).
	ReserveIDs int
}
