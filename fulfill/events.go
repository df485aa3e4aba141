package fulfill

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/policies"
)

// Stage names a step in a proposal's journey, as events report it.
type Stage string

// Stages reported to an Observer, in the order a proposal can pass them.
const (
	StageReceived   Stage = "received"
	StageIgnored    Stage = "ignored"    // duplicate id, addressed to another fulfiller, or malformed frame
	StageDecided    Stage = "decided"    // the policy answered and its answer governs the proposal (Decision set)
	StageEscalated  Stage = "escalated"  // humans are being asked
	StageApproved   Stage = "approved"   // humans approved (By set)
	StageQueued     Stage = "queued"     // waiting for a free fulfilment slot
	StageFulfilling Stage = "fulfilling" // our mcp/request to the tool owner was written
	// StageTask: the tool owner runs the call as an MCP task (Task set);
	// reported again when the task's status changes.
	StageTask       Stage = "task"
	StageFulfilled  Stage = "fulfilled" // the tool owner answered (Result or RPCError set); for a task, its result was relayed
	StageRejected   Stage = "rejected"  // our mcp/reject was written (Reason, Message set)
	StageWithdrawn  Stage = "withdrawn"
	StageSuperseded Stage = "superseded"
	// StageUndelivered: an answer (mcp/reject, or the fulfilment
	// mcp/request) was not written (Reason "not_written") or was refused
	// by the gateway (Reason "refused"); Message is the error, Envelope
	// the kind of the lost envelope. A rejected or fulfilling event is
	// emitted only for answers that were written, so an answer that never
	// left is never reported as sent; one the gateway refused afterwards
	// is followed by this event.
	StageUndelivered Stage = "undelivered"

	// StageDiscoveryConflict is about a tool owner, not a proposal: two
	// different answers to one of our tools/list requests came in its name
	// (Target), so one was forged and neither is trusted.
	StageDiscoveryConflict Stage = "discovery_conflict"
	// StageVetoHolder is about a participant (Target), not a proposal:
	// it can end any pending proposal and is not a known fulfiller
	// (Reason: RoleApprover or RoleOutsider; Message: what it holds).
	StageVetoHolder Stage = "veto_holder"
	// StageResumed: a proposal taken from the pending-work store, after a
	// restart on the same store or adopted from a group member whose
	// lease lapsed (Message: which, and its phase). No second decision
	// is logged for it (docs/design.md rule 10).
	StageResumed Stage = "resumed"
	// StageImpersonated: an envelope in this fulfiller's name that it did
	// not send (docs/design.md rule 14). Envelope is its kind, Message its id;
	// ProposalID and Proposer name the pending proposal it correlates
	// to, when there is one (that proposer is told in a status chat).
	StageImpersonated Stage = "impersonated"
	// StageGranted: an approver's approval created a grant (GrantID; By:
	// who granted; Message: how long, or why it could not be made).
	StageGranted Stage = "granted"
)

// Reasons of StageUndelivered.
const (
	UndeliveredNotWritten = "not_written"
	UndeliveredRefused    = "refused"
)

// Event is one step of one proposal. Observers get every event of every
// proposal they can see, in order per proposal.
type Event struct {
	Time  time.Time
	Stage Stage
	// FrontEnd is the front end the proposal came in by ("mew", "mcp"):
	// input.front_end; for an event about no proposal, the engine's.
	FrontEnd   string
	ProposalID string
	Proposer   string
	Method     string
	Tool       string
	Target     string
	// LogFields are what the proposal's front end names of the call on
	// each of its events (lifecycle.LogFields: an MCP call's client,
	// server and rpc_id); nil for MEW, and for an event about no
	// proposal.
	LogFields *lifecycle.LogFields

	// DecisionID names the decision that governs the proposal at this
	// step (docs/design.md rule 10): minted once per proposal, adopted by the
	// policy's first decision, replaced when the policy decides again
	// after an approver's edit. Every event of a proposal carries it.
	DecisionID string
	// Revision is the policy revision of that decision; "" while no
	// policy has decided the proposal (invalid, busy, ignored, …).
	Revision string

	Decision *decision.Decision // StageDecided
	Reason   string             // StageRejected: the wire reason; StageIgnored: why
	Message  string             // human-readable detail
	By       []string           // StageApproved: who approved; StageSuperseded: who answered instead
	Result   json.RawMessage    // StageFulfilled: JSON-RPC result
	RPCError json.RawMessage    // StageFulfilled: JSON-RPC error, if the tool failed
	Latency  time.Duration      // StageDecided: policy evaluation; StageFulfilled: tool round trip
	Input    *policies.Input    // StageDecided: what the policy saw
	Envelope string             // StageUndelivered: kind of the envelope that was lost
	Shadow   *ShadowResult      // StageShadow: what the shadow policy decided
	// GrantID: StageDecided, the grant that let the proposal through (the
	// policy fulfils it, and would not have without its grants);
	// StageGranted, the grant made.
	GrantID string
	// Task: StageTask, and the events that end a task (fulfilled,
	// rejected, withdrawn): the MCP task the fulfilment became.
	Task *TaskInfo
	// Deadline: StageEscalated, when the humans stop being asked (the
	// policy's timeout, or sooner the proposer's own deadline hint).
	Deadline time.Time

	// KnownFulfiller is set on StageSuperseded when By names a fellow
	// fulfiller (--peer-fulfillers): then supersession is the expected
	// division of work, otherwise a participant ended our proposal.
	KnownFulfiller bool
}

// SpoofKind says whether e reports a spoof attempt caught, and of what:
// "withdraw" (a withdrawal not from the proposer), "response" (a
// fulfilment response from a participant the request was not sent to, a
// second, different one in its owner's name, or one carrying another
// JSON-RPC id), "discovery" (two different tools/list answers); "" when
// it reports none. Answers without a JSON-RPC id, as reference-SDK peers
// send them, are honest answers and never counted.
func (e Event) SpoofKind() string {
	switch {
	case e.Stage == StageDiscoveryConflict:
		return "discovery"
	case e.Stage != StageIgnored:
		return ""
	case e.Reason == ReasonSpoofedWithdraw:
		return "withdraw"
	case e.Reason == ReasonConflictingResponse, e.Reason == ReasonWrongRPCID, e.Reason == ReasonResponseFromOther:
		return "response"
	}
	return ""
}

// Observer receives lifecycle events: the decision log, metrics and the demo
// narration are observers. Observe is called synchronously on the hot path,
// so it must be quick and must not call back into the Fulfiller.
type Observer interface {
	Observe(Event)
}

// Recorder is an Observer whose records must be written before the answer
// they describe goes out: the decision log (docs/design.md rule 10, fail closed).
// The Fulfiller calls Record instead of Observe for the records of its
// answers — escalated, fulfilling, rejected — and blocks on it before the
// envelope goes out; the records before them (the decision) go to Observe,
// and a Recorder keeps its records in order, so they are written by then
// too. An error means the record could not be written: the Fulfiller then
// neither fulfils nor escalates (it rejects "other"), while a reject still
// goes out. Other events go to Observe, which must not block.
type Recorder interface {
	Observer
	Record(Event) error
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

// Record implements Recorder: it writes e ahead with each observer that is
// a Recorder and returns every error. The others are told once the answer
// is written, by observeWatchers.
func (os Observers) Record(e Event) error {
	var errs []error
	for _, o := range os {
		if r, ok := o.(Recorder); ok {
			if err := r.Record(e); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// observeWatchers calls Observe on each observer that is not a Recorder
// (looking inside nested Observers): they hear of an answer once it was
// written, the Recorders had it before.
func (os Observers) observeWatchers(e Event) {
	for _, o := range os {
		switch o := o.(type) {
		case Observers:
			o.observeWatchers(e)
		case Recorder:
		default:
			o.Observe(e)
		}
	}
}

// NewDecisionID returns a fresh decision id, a random UUID (version 4) as
// OPA's decision logs use.
func NewDecisionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// Reasons of StageIgnored events about answers that claim to come from a
// tool owner: spoof attempts, counted and recorded in the decision log.
const (
	ReasonConflictingResponse = "conflicting_response" // a second, different response to a fulfilment request already answered
	ReasonWrongRPCID          = "wrong_rpc_id"         // a response to our request with a JSON-RPC id that is not the request's
	ReasonMalformedResponse   = "malformed_response"   // a response to our request that is not a JSON-RPC response object
	ReasonResponseFromOther   = "response_from_other"  // a response to our request from a participant it was not sent to
	ReasonSpoofedWithdraw     = "spoofed_withdraw"     // a withdrawal from someone other than the proposer
)

// FulfilledStatus is how a fulfilment ended, as the decision log and the
// metrics name it: "error" for a JSON-RPC error, "tool_error" for a
// result the tool marked isError (the call ran and failed: ENOENT, say;
// MCP's way for a tool to report its own failure), else "ok". isError
// is read with keys matched exactly, as the tool's client reads it.
func FulfilledStatus(result, rpcError json.RawMessage) string {
	if len(rpcError) > 0 {
		return "error"
	}
	var r struct {
		IsError bool `json:"isError"`
	}
	if len(result) > 0 && agent.Unmarshal(result, &r) == nil && r.IsError {
		return "tool_error"
	}
	return "ok"
}
