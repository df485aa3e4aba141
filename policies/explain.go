package policies

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/topdown/lineage"
	"github.com/open-policy-agent/opa/v1/topdown/print"
)

// Explanation tells which rules produced a decision.
type Explanation struct {
	// Rules are the rules (and functions) whose body succeeded during the
	// evaluation, in the order they first did. Rules that succeeded but
	// were outvoted — an allow overridden by a deny — are listed too: they
	// are part of why the decision came out as it did.
	Rules []FiredRule `json:"rules"`
	// Unmatched are the branches of data.fulfiller.decision — its rules
	// and their else branches — that were tried and did not decide, in
	// the order tried, each with the expression of its body that failed:
	// why the decision is not one of theirs. Branches after the one that
	// decided are never tried, so they are not listed.
	Unmatched []UnmatchedBranch `json:"unmatched,omitempty"`
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

// UnmatchedBranch is a branch of the decision rule whose body failed.
type UnmatchedBranch struct {
	Location string `json:"location"`  // file:line of the branch (its else, for an else branch)
	Failed   string `json:"failed"`    // the body's expression that failed, as written
	FailedAt string `json:"failed_at"` // file:line of that expression
	// Unprovided: the data documents the failed expression reads that no
	// data file provides (as run --check and eval warn of them): why it
	// could not succeed, whatever the input.
	Unprovided []string `json:"unprovided,omitempty"`
}

// FilteredTrace is the evaluation trace as opa eval --explain=MODE prints
// it, filtered with OPA's own lineage helpers: "fails" (the expressions
// that failed, with the rules around them), "notes" (trace() notes),
// "full" (everything); ok is false for another mode.
func (x Explanation) FilteredTrace(mode string) (trace string, ok bool) {
	var events []*topdown.Event
	switch mode {
	case "fails":
		events = lineage.Fails(x.events)
	case "notes":
		events = lineage.Notes(x.events)
	case "full":
		events = lineage.Full(x.events)
	default:
		return "", false
	}
	var b bytes.Buffer
	topdown.PrettyTraceWithLocation(&b, events)
	return b.String(), true
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

// explanation reads the trace; missing are the data documents the
// policies read that no data file provides (policySet.missing).
func (x *explainer) explanation(missing []string) Explanation {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := Explanation{Rules: []FiredRule{}, Notes: x.prints, events: x.buf}
	seen := map[string]bool{}
	// The decision's branches entered, by the id of the query their
	// body runs as; and those that exited (decided).
	branches := map[uint64]*ast.Rule{}
	var tried []uint64
	exited := map[uint64]bool{}
	firstFail := map[uint64]*topdown.Event{}
	for _, ev := range x.buf {
		if rule, ok := ev.Node.(*ast.Rule); ok && rule.Path().Equal(decisionPath) {
			switch ev.Op {
			case topdown.EnterOp:
				if _, ok := branches[ev.QueryID]; !ok {
					branches[ev.QueryID] = rule
					tried = append(tried, ev.QueryID)
				}
			case topdown.ExitOp:
				exited[ev.QueryID] = true
			}
		}
		if _, ok := ev.Node.(*ast.Expr); ok && ev.Op == topdown.FailOp {
			if _, ok := branches[ev.QueryID]; ok && firstFail[ev.QueryID] == nil {
				firstFail[ev.QueryID] = ev
			}
		}
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
	for _, q := range tried {
		fail := firstFail[q]
		if exited[q] || fail == nil || branches[q].Default {
			continue
		}
		// The expression as the author wrote it (quotas.deny), not as
		// compiled (data.fulfiller.quotas.deny) — when its location's text
		// is the expression: for a one-line `else := v if expr` the parser
		// gives the expression the whole branch's text.
		b := UnmatchedBranch{Failed: fail.Node.(*ast.Expr).String()}
		if fail.Location != nil && len(fail.Location.Text) > 0 {
			if _, err := ast.ParseExpr(string(fail.Location.Text)); err == nil {
				b.Failed = string(fail.Location.Text)
			}
		}
		if loc := branches[q].Location; loc != nil {
			b.Location = loc.String()
		}
		if fail.Location != nil {
			b.FailedAt = fail.Location.String()
		}
		b.Unprovided = unprovided(fail.Node.(*ast.Expr), missing)
		out.Unmatched = append(out.Unmatched, b)
	}
	return out
}

// decisionPath is the rule fulfiller queries, data.fulfiller.decision.
var decisionPath = ast.MustParseRef("data.fulfiller.decision")

// unprovided lists the documents of missing (data.a.b) that expr reads.
func unprovided(expr *ast.Expr, missing []string) []string {
	var out []string
	ast.WalkRefs(expr, func(r ast.Ref) bool {
		if !r.HasPrefix(ast.DefaultRootRef) {
			return false
		}
		path := r.ConstantPrefix().String()
		for _, m := range missing {
			if (path == m || strings.HasPrefix(path, m+".") || strings.HasPrefix(path, m+"[")) && !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
		return false
	})
	return out
}
