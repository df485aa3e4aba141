package mcpfront

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/policies"
)

// fakeEngine decides from a table (tool name → "fulfil", "reject:CODE:
// MESSAGE" or "escalate", which asks @caller) and keeps the engine's
// contract: it applies every event on one goroutine, as the Loop does,
// carries its effects out through the Front, answers each proposal it
// took exactly once (none after a withdrawal), asks the caller with
// elicit's codec and reads the answer with it.
type fakeEngine struct {
	fx    Effects
	table map[string]string
	in    chan func()

	mu          sync.Mutex
	proposals   []Proposal
	withdrawals []Withdrawal
	answers     map[string]int // answers given, by proposal
	prompts     []json.RawMessage
	calls       map[string]*fakeCall
}

type fakeCall struct {
	p        Proposal
	codec    elicit.Codec
	lp       *lifecycle.Proposal
	prompt   string
	sent     bool
	finished bool
}

func newFakeEngine(table map[string]string) *fakeEngine {
	return &fakeEngine{table: table, in: make(chan func()), answers: map[string]int{}, calls: map[string]*fakeCall{}}
}

// run applies the events until ctx ends.
func (e *fakeEngine) run(ctx context.Context) {
	for {
		select {
		case f := <-e.in:
			f()
		case <-ctx.Done():
			return
		}
	}
}

func (e *fakeEngine) post(ctx context.Context, f func()) error {
	select {
	case e.in <- f:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *fakeEngine) Propose(ctx context.Context, p Proposal) error {
	return e.post(ctx, func() { e.decide(p) })
}

func (e *fakeEngine) Responded(ctx context.Context, r Response) error {
	return e.post(ctx, func() {
		c := e.calls[r.ProposalID]
		if c == nil || c.finished {
			return
		}
		e.answer(c, Answer{ProposalID: r.ProposalID, Result: r.Result, Error: r.Error})
	})
}

func (e *fakeEngine) Answered(ctx context.Context, a PromptAnswer) error {
	return e.post(ctx, func() {
		c := e.calls[a.ProposalID]
		if c == nil || c.finished || c.prompt != a.PromptID {
			return
		}
		c.prompt = ""
		if a.Err != nil {
			e.answer(c, Answer{ProposalID: c.p.ID, Reject: &Reject{Code: "other", Message: a.Err.Error()}})
			return
		}
		payload := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":1,"result":%s}`, a.Result)
		v := c.codec.Read(c.lp, lifecycle.Prompt{Approver: Caller, EnvelopeID: a.PromptID}, payload, nil)
		switch v.Kind {
		case lifecycle.AnswerApproved:
			params := c.p.Params
			if v.Params != nil {
				params = v.Params
			}
			e.send(c, params)
		case lifecycle.AnswerDeclined:
			e.answer(c, Answer{ProposalID: c.p.ID, Reject: &Reject{Code: "disagree", Message: v.Reason}})
		case lifecycle.AnswerCancelled:
			e.answer(c, Answer{ProposalID: c.p.ID, Reject: &Reject{Code: "other", Message: "the approver cancelled"}})
		default:
			e.answer(c, Answer{ProposalID: c.p.ID, Reject: &Reject{Code: "other", Message: "unreadable answer: " + v.Why}})
		}
	})
}

func (e *fakeEngine) Withdrawn(ctx context.Context, w Withdrawal) error {
	return e.post(ctx, func() {
		e.mu.Lock()
		e.withdrawals = append(e.withdrawals, w)
		e.mu.Unlock()
		c := e.calls[w.ProposalID]
		if c == nil || c.finished {
			return
		}
		c.finished = true
		if c.prompt != "" {
			e.fx.CancelPrompt(context.Background(), CancelPrompt{ProposalID: c.p.ID, PromptID: c.prompt, Reason: w.Reason})
		}
		if c.sent {
			e.fx.SendCancel(context.Background(), Cancel{ProposalID: c.p.ID, Reason: w.Reason})
		}
	})
}

func (e *fakeEngine) decide(p Proposal) {
	e.mu.Lock()
	e.proposals = append(e.proposals, p)
	e.mu.Unlock()
	c := &fakeCall{p: p}
	e.calls[p.ID] = c
	rule := e.table[p.Tool.Name]
	switch {
	case rule == "fulfil":
		e.send(c, p.Params)
	case strings.HasPrefix(rule, "reject:"):
		code, msg, _ := strings.Cut(strings.TrimPrefix(rule, "reject:"), ":")
		e.answer(c, Answer{ProposalID: p.ID, Reject: &Reject{Code: code, Message: msg}})
	case rule == "escalate" || rule == "escalate-edit":
		if !p.Elicitation {
			e.answer(c, Answer{ProposalID: p.ID, Reject: &Reject{Code: "incapable"}})
			return
		}
		c.lp = &lifecycle.Proposal{ID: p.ID, From: p.Proposer, Method: p.Method, Params: p.Params, Tool: p.Tool.Name,
			Deadline: time.Now().Add(time.Minute),
			Decision: &lifecycle.Decision{Action: lifecycle.Escalate, Message: "a write needs you", Approvers: []string{Caller}, Quorum: 1, Timeout: time.Minute}}
		if rule == "escalate-edit" {
			c.lp.Decision.Editable = []string{"path"}
		}
		// What the record does not hold and the form shows: the tool's
		// input schema, as the front end listed it (it types the
		// editable fields).
		c.codec = elicit.Codec{Context: func(*lifecycle.Proposal) (*policies.Tool, json.RawMessage, bool) {
			return nil, p.Tool.InputSchema, false
		}}
		promptID := "prompt-" + p.ID
		payload, err := c.codec.Prompt(c.lp, lifecycle.PromptSpec{Approver: Caller, EnvelopeID: promptID, RPCID: 1, Approvers: []string{Caller}, Quorum: 1})
		if err != nil {
			e.answer(c, Answer{ProposalID: p.ID, Reject: &Reject{Code: "other", Message: err.Error()}})
			return
		}
		var env struct{ Params json.RawMessage }
		_ = json.Unmarshal(payload, &env)
		e.mu.Lock()
		e.prompts = append(e.prompts, env.Params)
		e.mu.Unlock()
		if err := e.fx.SendPrompt(context.Background(), Prompt{ProposalID: p.ID, PromptID: promptID, Params: env.Params}); err != nil {
			e.answer(c, Answer{ProposalID: p.ID, Reject: &Reject{Code: "incapable", Message: err.Error()}})
			return
		}
		c.prompt = promptID
		e.fx.Status(context.Background(), Status{ProposalID: p.ID, Stage: StageEscalated, Approvers: []string{Caller}})
	default:
		e.answer(c, Answer{ProposalID: p.ID, Reject: &Reject{Code: "policy", Message: "no rule for " + p.Tool.Name}})
	}
}

func (e *fakeEngine) send(c *fakeCall, params json.RawMessage) {
	if err := e.fx.SendRequest(context.Background(), Request{ProposalID: c.p.ID, Params: params}); err != nil {
		e.answer(c, Answer{ProposalID: c.p.ID, Reject: &Reject{Code: "other", Message: err.Error()}})
		return
	}
	c.sent = true
}

func (e *fakeEngine) answer(c *fakeCall, a Answer) {
	c.finished = true
	e.mu.Lock()
	e.answers[c.p.ID]++
	e.mu.Unlock()
	_ = e.fx.Answer(context.Background(), a)
}

func (e *fakeEngine) seen() []Proposal {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Proposal(nil), e.proposals...)
}

func (e *fakeEngine) withdrawn() []Withdrawal {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Withdrawal(nil), e.withdrawals...)
}
