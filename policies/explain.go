package policies

import (
	"bytes"
	"encoding/json"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/topdown/print"
)

// Explanation tells which rules produced a decision.
type Explanation struct {
	// Rules are the rules (and functions) whose body succeeded during the
	// evaluation, in the order they first did. Rules that succeeded but
	// were outvoted — an allow overridden by a deny — are listed too: they
	// are part of why the decision came out as it did.
	Rules []FiredRule `json:"rules"`
	// Notes are the policy's print() output and trace() notes.
	Notes []string `json:"notes,omitempty"`

	events []*topdown.Event
}

// FiredRule is one rule that succeeded.
type FiredRule struct {
	Rule     string `json:"rule"`              // full path, e.g. data.fulfiller.readonly.fulfill
	Location string `json:"location"`          // file:line of the rule
	Default  bool   `json:"default,omitempty"` // the rule's default value was used
}

// Trace is the full evaluation trace in opa's pretty format, with
// locations: every expression tried, failed and redone. It is long, and
// meant for a human debugging a policy.
func (x Explanation) Trace() string {
	var b bytes.Buffer
	topdown.PrettyTraceWithLocation(&b, x.events)
	return b.String()
}

// ExplainedDecision is a decision with its explanation, as
// `fulfiller eval --explain` prints it.
type ExplainedDecision struct {
	Decision    Decision
	Explanation Explanation
}

// MarshalJSON writes the decision's object with one more field,
// "explanation".
func (x ExplainedDecision) MarshalJSON() ([]byte, error) {
	d, err := x.Decision.MarshalJSON()
	if err != nil {
		return nil, err
	}
	ex, err := json.Marshal(x.Explanation)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(d)+len(ex)+16)
	out = append(out, d[:len(d)-1]...) // without the closing brace
	out = append(out, `,"explanation":`...)
	out = append(out, ex...)
	return append(out, '}'), nil
}

// explainer collects trace events and print output for one evaluation.
type explainer struct {
	mu     sync.Mutex // print hooks may be called from built-ins' goroutines
	buf    topdown.BufferTracer
	prints []string
}

func (x *explainer) tracer() topdown.QueryTracer { return &x.buf }

// Print receives the policy's print() calls.
func (x *explainer) Print(pctx print.Context, msg string) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if pctx.Location != nil {
		msg = pctx.Location.String() + ": " + msg
	}
	x.prints = append(x.prints, msg)
	return nil
}

func (x *explainer) explanation() Explanation {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := Explanation{Rules: []FiredRule{}, Notes: x.prints, events: x.buf}
	seen := map[string]bool{}
	for _, ev := range x.buf {
		switch ev.Op {
		case topdown.ExitOp:
			rule, ok := ev.Node.(*ast.Rule)
			if !ok {
				continue
			}
			fr := FiredRule{Rule: rule.Path().String(), Default: rule.Default}
			// Else branches are rules of their own here, with their
			// own location, so the branch that fired is named.
			if rule.Location != nil {
				fr.Location = rule.Location.String()
			}
			if key := fr.Rule + "\x00" + fr.Location; !seen[key] {
				seen[key] = true
				out.Rules = append(out.Rules, fr)
			}
		case topdown.NoteOp:
			msg := ev.Message
			if ev.Location != nil {
				msg = ev.Location.String() + ": " + msg
			}
			out.Notes = append(out.Notes, msg)
		}
	}
	return out
}
