// Package proposer is a scripted MEW proposer that waits for answers the way
// the reference TypeScript SDK does: a proposal resolves when an mcp/request
// whose correlation_id[0] is the proposal id appears and then the
// mcp/response to that request; it fails on an mcp/reject naming it. The
// demo, bench and end-to-end tests use it to see fulfiller from the
// proposer's side. It is a fixture, not a product.
package proposer

import (
	"context"
	"encoding/json"
	"errors"
	"sync"

	"github.com/mewkit/fulfiller/agent"
)

// Outcome is what the proposer learned about one proposal.
type Outcome struct {
	ProposalID  string
	Fulfilled   bool            // a fulfilment request and its response arrived
	FulfilledBy string          // who sent the fulfilment request
	Result      json.RawMessage // the response's result
	Error       *agent.RPCError // the response's JSON-RPC error
	Rejected    bool
	RejectedBy  string
	Reason      string // reject reason
	Chat        string // explanation correlated to the reject, if it came before Wait returned
}

// Conn is what the proposer needs of its MEW session; *agent.Client has it.
type Conn interface {
	ID() string
	Send(ctx context.Context, env agent.Envelope) (agent.Envelope, error)
}

// Proposer sends proposals and tracks their answers from a stream of
// envelopes (subscribe with All: true, since fulfilment requests are
// addressed to the tool owner, not to us).
type Proposer struct {
	conn Conn

	mu        sync.Mutex
	proposals map[string]*tracked // proposal id
	requests  map[string]*tracked // fulfilment request envelope id
	rejects   map[string]*tracked // reject envelope id (for the chat after it)
}

type tracked struct {
	out    Outcome
	done   chan struct{}
	closed bool
	chat   chan struct{}
}

// New makes a Proposer.
func New(conn Conn) *Proposer {
	return &Proposer{conn: conn, proposals: map[string]*tracked{}, requests: map[string]*tracked{}, rejects: map[string]*tracked{}}
}

// Observe feeds one envelope from the space. Call it for every envelope
// the session receives, from one goroutine.
func (p *Proposer) Observe(env agent.Envelope) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch env.Kind {
	case agent.KindRequest:
		if t, ok := p.proposals[env.CorrelationID.First()]; ok && !t.closed && t.out.FulfilledBy == "" {
			var req agent.RPCRequest
			if agent.Unmarshal(env.Payload, &req) == nil && req.Method != agent.MethodElicitationCreate {
				t.out.FulfilledBy = env.From
				p.requests[env.ID] = t
			}
		}
	case agent.KindResponse:
		if t, ok := p.requests[env.CorrelationID.First()]; ok && !t.closed {
			var resp agent.RPCResponse
			_ = agent.Unmarshal(env.Payload, &resp)
			t.out.Fulfilled, t.out.Result, t.out.Error = true, resp.Result, resp.Error
			t.finish()
		}
	case agent.KindReject:
		if t, ok := p.proposals[env.CorrelationID.First()]; ok && !t.closed {
			var r struct {
				Reason string `json:"reason"`
			}
			_ = agent.Unmarshal(env.Payload, &r)
			t.out.Rejected, t.out.RejectedBy, t.out.Reason = true, env.From, r.Reason
			p.rejects[env.ID] = t
			t.finish()
		}
	case agent.KindChat:
		if t, ok := p.rejects[env.CorrelationID.First()]; ok {
			var c struct {
				Text string `json:"text"`
			}
			_ = agent.Unmarshal(env.Payload, &c)
			t.out.Chat = c.Text
			close(t.chat)
			delete(p.rejects, env.CorrelationID.First())
		}
	}
}

func (t *tracked) finish() {
	t.closed = true
	close(t.done)
}

// Propose sends an mcp/proposal with the given payload (method and params,
// optionally jsonrpc and id) and returns its envelope id. id may be "" to
// let the session choose one; to may be empty (broadcast).
func (p *Proposer) Propose(ctx context.Context, id string, to []string, payload json.RawMessage) (string, error) {
	if id == "" {
		id = agent.NewID(p.conn.ID())
	}
	t := &tracked{out: Outcome{ProposalID: id}, done: make(chan struct{}), chat: make(chan struct{})}
	p.mu.Lock()
	if _, dup := p.proposals[id]; !dup {
		p.proposals[id] = t
	}
	p.mu.Unlock()
	_, err := p.conn.Send(ctx, agent.Envelope{ID: id, To: to, Kind: agent.KindProposal, Payload: payload})
	return id, err
}

// Withdraw sends mcp/withdraw for a proposal.
func (p *Proposer) Withdraw(ctx context.Context, id, reason string) error {
	_, err := p.conn.Send(ctx, agent.Envelope{Kind: agent.KindWithdraw, CorrelationID: agent.CorrelationIDs{id},
		Payload: agent.MustPayload(map[string]string{"reason": reason})})
	return err
}

// ErrUnknown is returned by Wait for an id Propose did not send.
var ErrUnknown = errors.New("proposal not sent by this proposer")

// Wait blocks until the proposal is fulfilled or rejected, or ctx ends. A
// reject's explanation chat is waited for too while ctx allows (it follows
// the reject at once when there is one).
func (p *Proposer) Wait(ctx context.Context, id string) (Outcome, error) {
	p.mu.Lock()
	t, ok := p.proposals[id]
	p.mu.Unlock()
	if !ok {
		return Outcome{}, ErrUnknown
	}
	select {
	case <-t.done:
	case <-ctx.Done():
		p.mu.Lock()
		defer p.mu.Unlock()
		return t.out, ctx.Err()
	}
	p.mu.Lock()
	out := t.out
	p.mu.Unlock()
	return out, nil
}

// WaitChat waits for the explanation of a rejected proposal; "" if none
// came before ctx ended.
func (p *Proposer) WaitChat(ctx context.Context, id string) string {
	p.mu.Lock()
	t, ok := p.proposals[id]
	p.mu.Unlock()
	if !ok {
		return ""
	}
	select {
	case <-t.chat:
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return t.out.Chat
}
