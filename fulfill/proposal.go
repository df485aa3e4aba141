package fulfill

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/policies"
)

// State is where a proposal is in its lifecycle.
type State int32

// Proposal states. The last four are terminal.
const (
	StateReceived State = iota
	StateDeciding
	StateAwaitingApproval
	StateQueued
	StateFulfilling
	StateFulfilled
	StateRejected
	StateWithdrawn
	StateSuperseded
)

var stateNames = [...]string{"received", "deciding", "awaiting_approval", "queued", "fulfilling", "fulfilled", "rejected", "withdrawn", "superseded"}

// String names the state as the operator API and logs show it.
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", int32(s))
}

// Terminal reports whether the proposal has ended.
func (s State) Terminal() bool { return s >= StateFulfilled }

// answered reports whether the proposer has had its answer: a fulfilment
// request went out, or the proposal ended otherwise.
func (s State) answered() bool { return s >= StateFulfilling }

// proposal is the Fulfiller's record of one pending proposal. Fields other
// than state are written before the record is shared or under Fulfiller.mu.
type proposal struct {
	env      agent.Envelope
	method   string
	params   json.RawMessage // nil when the proposal had none
	tool     string          // params.name for tools/call
	received time.Time

	// state is atomic so that the LRU's eviction callback, which runs with
	// the cache lock held, can tell live entries from finished ones without
	// taking Fulfiller.mu.
	state atomic.Int32
	// removing marks a deliberate removal from the pending store, and
	// cachedAt when it was (re)added, both for the eviction callback.
	removing atomic.Bool
	cachedAt atomic.Int64

	// gov is the decision that governs the proposal (DESIGN rule 10),
	// read by every event: atomic because events come from the reader,
	// the workers and the timers alike. See governing.
	gov atomic.Pointer[governing]

	decision policies.Decision
	target   string
	deadline time.Time // approval deadline while awaiting approval

	// Fulfilment request, once sent.
	requestID    string // envelope id of our mcp/request
	rpcID        int64
	requestSent  time.Time
	written      chan struct{} // closed once the request's write was reported (fulfilling or undelivered)
	fulfilTimer  *time.Timer
	goneTimer    *time.Timer // the tool owner left: its rejoin grace (under Fulfiller.mu)
	held         bool        // the request waits for the owner to come back (under Fulfiller.mu)
	approvedBy   []string
	finalParams  json.RawMessage // params as fulfilled (edited by a human, or as proposed)
	finishReason string
}

func (p *proposal) State() State { return State(p.state.Load()) }

// governing is the decision id every record of a proposal carries, and the
// policy revision behind it ("" while no policy has decided).
type governing struct{ id, revision string }

// governor returns p's governing decision, minting its id on first use:
// a proposal that never reaches the policy (invalid, busy, withdrawn
// early) still has one id that all of its records share.
func (p *proposal) governor() *governing {
	if g := p.gov.Load(); g != nil {
		return g
	}
	p.gov.CompareAndSwap(nil, &governing{id: NewDecisionID()})
	return p.gov.Load()
}

// decided records that the policy answered: the first decision adopts the
// id the proposal already has, so lines logged before it (a withdrawal
// racing the evaluation) join it too; a later one (after an approver's
// edit) is a new decision with a new id, and governs what follows.
func (p *proposal) decided(revision string, again bool) *governing {
	g := &governing{id: p.governor().id, revision: revision}
	if again {
		g.id = NewDecisionID()
	}
	p.gov.Store(g)
	return g
}

// Snapshot is a read-only view of a pending proposal, for the operator API
// and tests.
type Snapshot struct {
	ID       string    `json:"id"`
	From     string    `json:"from"`
	Method   string    `json:"method"`
	Tool     string    `json:"tool,omitempty"`
	Target   string    `json:"target,omitempty"`
	State    string    `json:"state"`
	Received time.Time `json:"received"`
	Deadline time.Time `json:"deadline,omitzero"`
	Revision string    `json:"revision,omitempty"`
}

func (p *proposal) snapshot() Snapshot {
	return Snapshot{
		ID:       p.env.ID,
		From:     p.env.From,
		Method:   p.method,
		Tool:     p.tool,
		Target:   p.target,
		State:    p.State().String(),
		Received: p.received,
		Deadline: p.deadline,
		Revision: p.decision.Revision,
	}
}

// parsePayload applies DESIGN.md's envelope validation: the payload must be
// an object with a string method, and params, when present, an object.
func parsePayload(payload json.RawMessage) (method string, params json.RawMessage, err error) {
	var fields map[string]json.RawMessage
	if len(payload) == 0 {
		return "", nil, fmt.Errorf("proposal has no payload")
	}
	if err := json.Unmarshal(payload, &fields); err != nil || fields == nil {
		return "", nil, fmt.Errorf("proposal payload is not a JSON object")
	}
	rawMethod, ok := fields["method"]
	if !ok {
		return "", nil, fmt.Errorf("proposal payload has no method")
	}
	if err := json.Unmarshal(rawMethod, &method); err != nil || !isJSONString(rawMethod) {
		return "", nil, fmt.Errorf("proposal payload's method is not a string")
	}
	if method == "" {
		return "", nil, fmt.Errorf("proposal payload's method is empty")
	}
	if raw, ok := fields["params"]; ok {
		if !isJSONObject(raw) {
			return "", nil, fmt.Errorf("proposal payload's params is not an object")
		}
		params = raw
	}
	return method, params, nil
}

// toolCall extracts the tool name and arguments of a tools/call.
func toolCall(params json.RawMessage) (name string, args json.RawMessage) {
	if params == nil {
		return "", nil
	}
	var p struct {
		Name      json.RawMessage `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if json.Unmarshal(params, &p) != nil {
		return "", nil
	}
	if isJSONString(p.Name) {
		_ = json.Unmarshal(p.Name, &name)
	}
	return name, p.Arguments
}

func firstByte(b []byte) byte {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c
	}
	return 0
}

func isJSONString(b []byte) bool { return firstByte(b) == '"' }
func isJSONObject(b []byte) bool { return firstByte(b) == '{' }
