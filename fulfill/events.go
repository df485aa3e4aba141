package fulfill

import (
	"encoding/json"
	"time"

	"github.com/mewkit/fulfiller/policies"
)

// Stage names a step in a proposal's journey, as events report it.
type Stage string

// Stages reported to an Observer, in the order a proposal can pass them.
const (
	StageReceived   Stage = "received"
	StageIgnored    Stage = "ignored"    // duplicate id, addressed to another fulfiller, or malformed frame
	StageDecided    Stage = "decided"    // the policy answered (Decision set)
	StageEscalated  Stage = "escalated"  // humans are being asked
	StageApproved   Stage = "approved"   // humans approved (By set)
	StageQueued     Stage = "queued"     // waiting for a free fulfilment slot
	StageFulfilling Stage = "fulfilling" // our mcp/request went to the tool owner
	StageFulfilled  Stage = "fulfilled"  // the tool owner answered (Result or RPCError set)
	StageRejected   Stage = "rejected"   // we sent mcp/reject (Reason, Message set)
	StageWithdrawn  Stage = "withdrawn"
	StageSuperseded Stage = "superseded"

	// StageDiscoveryConflict is about a tool owner, not a proposal: two
	// different answers to one of our tools/list requests came in its name
	// (Target), so one was forged and neither is trusted.
	StageDiscoveryConflict Stage = "discovery_conflict"
	// StageVetoHolder is about a participant (Target), not a proposal:
	// it can end any pending proposal and is not a known fulfiller
	// (Reason: RoleApprover or RoleOutsider; Message: what it holds).
	StageVetoHolder Stage = "veto_holder"
)

// Event is one step of one proposal. Observers get every event of every
// proposal they can see, in order per proposal.
type Event struct {
	Time       time.Time
	Stage      Stage
	ProposalID string
	Proposer   string
	Method     string
	Tool       string
	Target     string

	Decision *policies.Decision // StageDecided
	Reason   string             // StageRejected: the wire reason; StageIgnored: why
	Message  string             // human-readable detail
	By       []string           // StageApproved: who approved; StageSuperseded: who answered instead
	Result   json.RawMessage    // StageFulfilled: JSON-RPC result
	RPCError json.RawMessage    // StageFulfilled: JSON-RPC error, if the tool failed
	Latency  time.Duration      // StageDecided: policy evaluation; StageFulfilled: tool round trip
	Input    *policies.Input    // StageDecided: what the policy saw

	// KnownFulfiller is set on StageSuperseded when By names a fellow
	// fulfiller (--peer-fulfillers): then supersession is the expected
	// division of work, otherwise a participant ended our proposal.
	KnownFulfiller bool
}

// Observer receives lifecycle events: the decision log, metrics and the demo
// narration are observers. Observe is called synchronously on the hot path,
// so it must be quick and must not call back into the Fulfiller.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls fn(e).
func (fn ObserverFunc) Observe(e Event) { fn(e) }

// Observers fans one event out to several observers, in order.
type Observers []Observer

// Observe calls each observer in turn.
func (os Observers) Observe(e Event) {
	for _, o := range os {
		o.Observe(e)
	}
}
