package policies

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// deepPolicy looks into the proposal as received, so the whole envelope
// is parsed into the input. (A policy that reads only input.params gets
// params parsed on their own, and the depth counts from there.)
const deepPolicy = `package fulfiller

default decision := {"action": "reject", "reason": "policy"}

decision := {"action": "reject", "reason": "unsafe", "message": "nested"} if {
	is_array(input.proposal.payload.params.arguments.x)
	is_array(input.params.arguments.x)
}
`

// deepInput is a proposal whose argument x is n nested arrays, so the
// proposal document is n+4 levels deep (envelope, payload, params,
// arguments).
func deepInput(n int) *Input {
	x := strings.Repeat("[", n) + "0" + strings.Repeat("]", n)
	params := `{"name":"deep","arguments":{"x":` + x + `}}`
	return &Input{
		Proposal: json.RawMessage(`{"protocol":"mew/v0.4","id":"p-deep","from":"coder","kind":"mcp/proposal","payload":{"method":"tools/call","params":` + params + `}}`),
		Method:   "tools/call",
		Params:   json.RawMessage(params),
		Tool:     &Tool{Name: "deep", Arguments: json.RawMessage(`{"x":` + x + `}`)},
		Proposer: &Participant{ID: "coder"},
		Now:      testNow,
	}
}

// At the limit (10 000 levels, as encoding/json allows on the wire) the
// input is built and the policy decides; one level more and the input
// cannot be built, so the decision fails closed as reject "policy" — also
// for a document a hundred thousand levels deep, without exhausting the
// stack.
func TestInputDepthLimit(t *testing.T) {
	e := loadInline(t, deepPolicy)
	if d := e.Decide(t.Context(), deepInput(maxJSONDepth-4)); d.Err != nil || d.Action != Reject || d.Reason != ReasonUnsafe {
		t.Fatalf("at the depth limit: %+v, want the policy's reject unsafe", d)
	}
	for _, n := range []int{maxJSONDepth - 3, 100_000} {
		d := e.Decide(t.Context(), deepInput(n))
		if d.Err == nil || d.Action != Reject || d.Reason != ReasonPolicy {
			t.Fatalf("%d levels: %+v, want a fail-closed reject policy", n+4, d)
		}
		if !strings.Contains(d.Err.Error(), errJSONDepth.Error()) {
			t.Fatalf("%d levels: error %v does not say the input is too deep", n+4, d.Err)
		}
	}
}

// A policy that walks a huge input (every path of a 10 000-deep document:
// quadratic work) is cut by the evaluation timeout (twice) and fails
// closed, busy.
func TestWalkOnHugeInputIsCutByTimeout(t *testing.T) {
	dir := writeTree(t, map[string]string{"p.rego": `package fulfiller

decision := {"action": "fulfill"} if count([p | walk(input, [p, _])]) < 0
`})
	e, err := Load(t.Context(), Options{Policies: []string{dir}, Timeout: 50 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	d := e.Decide(t.Context(), deepInput(maxJSONDepth-4))
	if d.Action != Reject || d.Reason != ReasonBusy || !errors.Is(d.Err, ErrEvalTimeout) {
		t.Fatalf("decision %+v (err %v), want reject busy after the evaluation timed out twice", d, d.Err)
	}
}

// BenchmarkDecideDeepInput measures a decision on a proposal at the depth
// limit: building the 10 000-level input and evaluating a policy that reads
// into it. docs/limits.md quotes the result.
func BenchmarkDecideDeepInput(b *testing.B) {
	e := loadInline(b, deepPolicy)
	in := deepInput(maxJSONDepth - 4)
	b.ReportAllocs()
	for b.Loop() {
		if d := e.Decide(b.Context(), in); d.Err != nil {
			b.Fatal(d.Err)
		}
	}
}
