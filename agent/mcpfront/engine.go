package mcpfront

import (
	"context"
	"encoding/json"
	"time"
)

// FrontEnd is what input.front_end says of every proposal this package
// makes, so that one policy file can tell an MCP client's call from a
// space's.
const FrontEnd = "mcp"

// Engine is what the front end needs of fulfiller's engine: four events
// in. The engine answers through the Effects it was given (the *Front):
// each Proposal it accepted gets exactly one Effects.Answer, unless it
// was Withdrawn first, in which case it may answer nothing (an answer
// after a withdrawal is dropped). Every method returns once the engine
// has taken the event; none waits for the decision. An error means the
// event was not taken (the engine is shutting down): the front end
// answers the call itself ("other") for a Proposal, and forgets the
// others.
type Engine interface {
	// Propose hands over a tools/call.
	Propose(ctx context.Context, p Proposal) error
	// Responded is the upstream's outcome of a request the engine sent
	// (Effects.SendRequest), exactly one per request.
	Responded(ctx context.Context, r Response) error
	// Answered is the caller's answer to a prompt (Effects.SendPrompt),
	// exactly one per prompt sent, unless the prompt was cancelled first.
	Answered(ctx context.Context, a PromptAnswer) error
	// Withdrawn: the client cancelled the call or went away. Nothing more
	// reaches the client; the engine ends the proposal (its prompts
	// cancelled, its request cancelled if one is out) and logs it.
	Withdrawn(ctx context.Context, w Withdrawal) error
}

// Effects is the front end as the engine sees it: the engine's effects
// that reach MCP peers. Each is shaped after one of fulfill/lifecycle's
// (named beside it) so that the engine's Wire and ApproverChannel for
// MCP are thin adapters over it. None blocks on a peer: what a peer
// answers comes back as an Engine event. The *Front implements it.
type Effects interface {
	// SendRequest sends the call to the upstream (lifecycle.SendRequest).
	// Its outcome comes back as exactly one Engine.Responded, the
	// upstream's failure included (a Response whose Result names it). An
	// error: nothing was sent and no Responded follows (the proposal is
	// unknown here, or was withdrawn).
	SendRequest(ctx context.Context, r Request) error
	// SendCancel cancels a request that is out (lifecycle.SendCancel):
	// notifications/cancelled to the upstream. Its Responded still comes.
	SendCancel(ctx context.Context, c Cancel)
	// Answer is the client's one answer (lifecycle.SendReject or the
	// relay of the upstream's result). An error: the client is gone (or
	// was answered), so nothing was written.
	Answer(ctx context.Context, a Answer) error
	// Status tells the client that its call waits (lifecycle.Status): a
	// progress notification when the client sent a progressToken, and
	// nothing otherwise. Best effort.
	Status(ctx context.Context, s Status)
	// SendPrompt asks the caller through the client's elicitation
	// (lifecycle.SendPrompt to the approver "@caller"). Its answer comes
	// back as one Engine.Answered. An error (ErrNoElicitation, the client
	// gone): nothing was sent and no Answered follows.
	SendPrompt(ctx context.Context, p Prompt) error
	// CancelPrompt ends a prompt that is out (lifecycle.CancelAsk):
	// notifications/cancelled to the client; no Answered follows.
	CancelPrompt(ctx context.Context, c CancelPrompt)
}

// Caller is the approver id a decision names for the person at the
// client that made the call.
const Caller = "@caller"

// Proposal is one tools/call as the engine's policy input needs it: the
// same input document as a space's, with FrontEnd "mcp".
type Proposal struct {
	// ID is minted here (a UUIDv7: unique across sessions, instances and
	// restarts); RPCID is the client's JSON-RPC id, kept beside it for
	// the decision log (null when the transport did not say).
	ID    string
	RPCID json.RawMessage
	// FrontEnd is always "mcp".
	FrontEnd string
	// Server is the upstream's NAME (tool.server), what pins and grants
	// are keyed by.
	Server string
	// Proposer is the client's id: the one its bearer token maps to
	// (serve) or Config.ClientID (stdio, "local" by default).
	Proposer string
	// Client is what the client said of itself at initialize: a claim,
	// never an identity.
	Client ClientInfo
	// Method is "tools/call"; Params its params as the client sent them,
	// name and arguments (the client's _meta stays with the client).
	Method string
	Params json.RawMessage
	// Tool is the tool called, as the upstream lists it now (Name and
	// Arguments always; the rest when the upstream lists it).
	Tool Tool
	// Elicitation: the client declared elicitation (form mode), so
	// "@caller" can be asked. Without it the engine must not prompt the
	// caller (the front end refuses: ErrNoElicitation).
	Elicitation bool
	// Progress: the client sent a progressToken, so Status reaches it.
	Progress bool
	// Received is when the call was read.
	Received time.Time
}

// ClientInfo is the client's clientInfo.
type ClientInfo struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	Title   string `json:"title,omitempty"`
}

// Tool is the tool of a call: input.tool.
type Tool struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Server    string          `json:"server"`
	// Listed: the upstream lists the tool; the rest is its definition.
	Listed      bool            `json:"-"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	Annotations json.RawMessage `json:"annotations,omitempty"`
	// Digest is the definition's (see Digest); Changed is set when it
	// differs from the one pinned (a rug pull).
	Digest  string      `json:"digest,omitempty"`
	Changed *ToolChange `json:"changed,omitempty"`
}

// ToolChange is input.tool.changed: the pinned definition's digest and
// the one the upstream lists now.
type ToolChange struct {
	Old string `json:"old"`
	New string `json:"new"`
}

// Request is the call the engine sends to the upstream: the proposal's
// params, or the approvers' edit of them.
type Request struct {
	ProposalID string
	// Params are tools/call params (name, arguments). The client's
	// progressToken is carried over by the front end, not by Params.
	Params json.RawMessage
}

// Response is the upstream's outcome of a Request: Result (a
// CallToolResult as it came, or one the front end made naming the
// upstream that failed, with Failed set) or Error (the upstream's
// JSON-RPC error).
type Response struct {
	ProposalID string
	Result     json.RawMessage
	Error      *RPCError
	// Failed: the upstream did not answer (it died, was unreachable, sent
	// garbage, or the request was cancelled); Result says so to the
	// model.
	Failed bool
	// Latency is the round trip to the upstream.
	Latency time.Duration
}

// RPCError is a JSON-RPC error as it came.
type RPCError struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// Answer is the client's one answer: the relay of a Response (Result or
// Error), or Reject.
type Answer struct {
	ProposalID string
	Result     json.RawMessage
	Error      *RPCError
	Reject     *Reject
}

// Reject is a refusal: the client gets isError with one text content,
// "fulfiller refused this call (CODE): MESSAGE", and CODE in
// _meta["fulfiller/reason"].
type Reject struct {
	// Code is the bare reason code (disagree, timeout, incapable, …).
	Code string
	// Message is the policy's message, verbatim (empty: a short default).
	Message string
}

// Cancel cancels the Request of a proposal.
type Cancel struct {
	ProposalID, Reason string
}

// Status stages (lifecycle's).
const (
	StageEscalated = "escalated"
	StageQueued    = "queued"
)

// Status: the call waits, at Stage, for Approvers until Deadline.
type Status struct {
	ProposalID string
	Stage      string
	Message    string
	Approvers  []string
	Deadline   time.Time
}

// Prompt asks the caller about a proposal: Params are the
// elicitation/create params (message, requestedSchema, _meta) as
// elicit's codec makes them, form mode.
type Prompt struct {
	ProposalID, PromptID string
	Params               json.RawMessage
}

// PromptAnswer is the caller's answer: Result is the ElicitResult as the
// client sent it ({"action": accept|decline|cancel, "content": …}); Err
// says why there is none (the client disconnected, the request failed,
// the content did not match the schema), and the engine ends the
// caller's part (lifecycle's AnswerFailed, or incapable).
type PromptAnswer struct {
	ProposalID, PromptID string
	Result               json.RawMessage
	Err                  error
}

// CancelPrompt ends a prompt that is out.
type CancelPrompt struct {
	ProposalID, PromptID, Reason string
}

// Withdrawal reasons.
const (
	WithdrawCancelled    = "cancelled"    // notifications/cancelled from the client
	WithdrawDisconnected = "disconnected" // the client's session ended
)

// Withdrawal: the client no longer waits for the proposal.
type Withdrawal struct {
	ProposalID, Reason string
}
