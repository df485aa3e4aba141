package fulfill

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"runtime"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/grants/grantstore"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/policies"
	"github.com/mewkit/fulfiller/policies/toolmeta"
)

// Space is what the Fulfiller needs of the MEW session; *agent.Client
// provides it. Envelopes come in through Run's channel.
type Space interface {
	ID() string
	Send(ctx context.Context, env agent.Envelope) (agent.Envelope, error)
	Can(kind string, payload json.RawMessage) bool
	Roster() []agent.Participant
	Participant(id string) (agent.Participant, bool)
	// RequestEnvelope sends an MCP request and waits for the answer from
	// its addressee (discovery); the Fulfiller sees every answer as well,
	// to notice forged ones.
	RequestEnvelope(ctx context.Context, env agent.Envelope) (agent.RPCResponse, error)
	// NextRPCID hands out the JSON-RPC ids of the fulfilment requests,
	// from the same sequence as the space's own requests (discovery) and
	// the elicitations, so that no peer sees an id twice.
	NextRPCID() int64
}

// Decider answers "what should happen to this proposal"; *policies.Engine
// provides it. Decide never fails: errors come back as fail-closed rejects.
type Decider interface {
	Decide(ctx context.Context, in *policies.Input) decision.Decision
}

// Config tunes a Fulfiller. Zero values take the defaults in brackets.
type Config struct {
	SpaceID     string        // reported to policies as input.space.id
	MaxPending  int           // [1000] proposals waiting at once; more are rejected "busy"
	PendingTTL  time.Duration // [10m] longest a proposal may wait before "timeout"
	MaxInflight int           // [64] fulfilment requests outstanding at once; more wait in a queue
	// MaxInflightPerProposer [MaxInflight/4, at least 1] bounds the
	// fulfilment slots one proposer holds at once, so that one sender's
	// calls to a tool that hangs cannot make everyone else's wait.
	MaxInflightPerProposer int
	FulfillTimeout         time.Duration // [30s] wait for the tool owner's mcp/response
	// TaskTimeout [1h] bounds an MCP task once its owner created it,
	// when the decision sets no task_timeout; see task.go.
	TaskTimeout time.Duration
	// StatusChats: tell the proposer, in a chat correlated to its
	// proposal with a machine-readable _meta, when it waits for humans,
	// for a fulfilment slot, or on a task (see status.go).
	StatusChats bool
	// OwnerRejoinGrace [5s] is how long a tool owner that left during a
	// fulfilment may take to come back before the proposal is rejected
	// "incapable": a dropped link or a gateway restart is a leave too,
	// and the owner's answer, sent after its reconnect, still counts.
	OwnerRejoinGrace time.Duration
	ApprovalTimeout  time.Duration // [5m] a human's deadline when the decision sets none
	DiscoveryWait    time.Duration // [2s] how long routing waits for a running tools/list
	DecideWorkers    int           // [GOMAXPROCS] concurrent policy evaluations
	// Approvals [nil: escalations are rejected "policy", not configured]
	// runs the humans' escalation in the lifecycle core, the shell its
	// channel to the approvers.
	Approvals *Approvals
	Observer  Observer     // nil: no events
	Logger    *slog.Logger // nil: discard
	// Clock [the system's] is the time of the lifecycle's deadlines and
	// timers (pending TTL, fulfil timeout, rejoin grace, task deadline);
	// tests move a clocktest.Manual instead of waiting.
	Clock lifecycle.Clock

	// ShutdownTimeout [10s] bounds how long shutdown waits for a session
	// to write its answers: during a gateway outage the answers are then
	// given up (and counted) instead of holding the process.
	ShutdownTimeout time.Duration
	// DiscoverySettle [500ms] is how long after a tools/list answer a
	// second, different (forged) answer is awaited before the owner's
	// tools and their annotations are believed; see catalog.
	DiscoverySettle time.Duration
	// MaxPendingBytes [16 MiB] bounds the frame bytes of the proposals
	// pending at once; more are rejected "busy".
	MaxPendingBytes int64
	// MaxPendingPerProposer [MaxPending/4, at least 1] bounds the
	// proposals one proposer has pending at once, so that one sender
	// cannot make everyone else's work come back "busy".
	MaxPendingPerProposer int
	// PeerFulfillers are the other fulfillers of this space: their
	// rejects and fulfilments of our proposals are expected.
	PeerFulfillers []string
	// Approvers are the humans asked by default (--approvers); they may
	// hold mcp/reject to turn proposals down directly.
	Approvers []string
	// Store [nil: a state.Local, in this process only] keeps pending work
	// across crashes and shares it with a group; see Store.
	Store Store

	// Grants [nil: none] are the grants approvers made (docs/design.md "Grants"):
	// those covering a call are input.grants, and an approval that
	// chooses a grant makes one here.
	Grants *grantstore.Registry
	// Shadow [nil: none] is a second policy asked about every decision
	// the live one makes (--shadow-policy). It is never acted on: its
	// answers are StageShadow events. See shadowing.
	Shadow Decider
	// ShadowTimeout [policies.DefaultTimeout] bounds one shadow
	// evaluation, like the live policy's timeout.
	ShadowTimeout time.Duration
	// ShadowQueue [64] is how many decisions may wait for the shadow;
	// more are not shadowed (StageShadow with Dropped set).
	ShadowQueue int
	// ToolMetadata [nil: none] is the tool metadata the operator declared
	// (--tool-metadata; DESIGN "Tool metadata the owner does not send"):
	// its annotations replace each declared tool's owner's in input.tool
	// (and in approval prompts), the owner's kept as
	// input.tool.owner_annotations. A *toolmeta.Watcher (hot-reloaded)
	// or a *toolmeta.Metadata provides it.
	ToolMetadata ToolMetadata
}

// ToolMetadata gives the annotations a policy sees for a tool: the
// owner's (nil when it sent none) with the operator's declared keys laid
// over them, and the declaration that applied (nil: none, and owner comes
// back as it is). *toolmeta.Watcher and *toolmeta.Metadata provide it;
// both declare nothing when nil.
type ToolMetadata interface {
	Annotate(server, tool string, owner json.RawMessage) (json.RawMessage, *toolmeta.Entry)
}

func (c *Config) setDefaults() {
	if c.MaxPending <= 0 {
		c.MaxPending = 1000
	}
	if c.PendingTTL <= 0 {
		c.PendingTTL = 10 * time.Minute
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = 64
	}
	if c.FulfillTimeout <= 0 {
		c.FulfillTimeout = 30 * time.Second
	}
	if c.TaskTimeout <= 0 {
		c.TaskTimeout = time.Hour
	}
	if c.OwnerRejoinGrace <= 0 {
		c.OwnerRejoinGrace = 5 * time.Second
	}
	if c.ApprovalTimeout <= 0 {
		c.ApprovalTimeout = 5 * time.Minute
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	if c.DiscoveryWait <= 0 {
		c.DiscoveryWait = 2 * time.Second
	}
	if c.DiscoverySettle <= 0 {
		c.DiscoverySettle = 500 * time.Millisecond
	}
	if c.MaxPendingBytes <= 0 {
		c.MaxPendingBytes = 16 << 20
	}
	if c.MaxPendingPerProposer <= 0 {
		c.MaxPendingPerProposer = max(c.MaxPending/4, 1)
	}
	if c.MaxInflightPerProposer <= 0 {
		c.MaxInflightPerProposer = max(c.MaxInflight/4, 1)
	}
	if c.DecideWorkers <= 0 {
		c.DecideWorkers = runtime.GOMAXPROCS(0)
	}
	if c.Observer == nil {
		c.Observer = Observers(nil)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = lifecycle.SystemClock{}
	}
}

// Errors the operator-facing methods return.
var (
	ErrUnknownProposal = errors.New("no such pending proposal")
	ErrAnswered        = errors.New("proposal already answered")
)

// sendTimeout bounds one envelope write, so a wedged link cannot hold a
// lifecycle step forever; the agent reconnects underneath.
const sendTimeout = 10 * time.Second
