package policies

import (
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

func TestInputFields(t *testing.T) {
	tests := []struct {
		policy string
		want   fieldSet
	}{
		{`decision := {"action": "fulfill"}`, 0},
		{`decision := {"action": "fulfill"} if input.method == "tools/list"`, fieldMethod},
		{`decision := {"action": "fulfill"} if {
	input.tool.name == "x"
	input["proposer"].id == "y"
	input.nonsense
}`, fieldTool | fieldProposer},
		{`f(x) := x.tool
decision := {"action": "fulfill", "t": f(input)}`, allFields},
		{`decision := {"action": "fulfill"} if walk(input, [_, "x"])`, allFields},
		{`decision := {"action": "fulfill"} if { some k; input[k] == 1 }`, allFields},
		{`decision := {"action": "fulfill"} if { some k, _ in input }`, allFields},
		{`decision := {"action": "fulfill"} if print(input)`, allFields},
		{`decision := x if x := object.get(input, "method", "")`, allFields},
		{`import input.agent
decision := {"action": "fulfill"} if agent.pending < 3`, fieldAgent},
		{`import input as i
decision := {"action": "fulfill"} if i.method`, allFields},
		{`a := data.x[input.space.id]
decision := {"action": "fulfill"} if a with input.now as "x"`, fieldSpace | fieldNow},
		{`decision := {"action": "fulfill"} if allow with input as {}
allow := true`, allFields},
	}
	for _, tc := range tests {
		m, err := ast.ParseModuleWithOpts("p.rego", "package fulfiller\n\n"+tc.policy, parserOptions)
		if err != nil {
			t.Fatalf("%s: %v", tc.policy, err)
		}
		if got := inputFields([]*ast.Module{m}); got != tc.want {
			t.Errorf("%s:\ngot %09b, want %09b", tc.policy, got, tc.want)
		}
	}
}

// The example policies do not read the proposal, so Decide does not parse
// it — and decides exactly as with the whole input.
func TestInputFieldsExamples(t *testing.T) {
	e := loadExamples(t)
	set := e.cur.Load()
	if set.need.has(fieldProposal) || set.need.has(fieldSpace) || !set.need.has(fieldTool) {
		t.Errorf("examples need %09b", set.need)
	}
	for _, in := range []*Input{benchInput(t), callInput(t, "mallory", "read_file", `{}`, ""), callInput(t, "coder", "read_file", `{}`, "")} {
		full, err := in.Document()
		if err != nil {
			t.Fatal(err)
		}
		if a, b := e.Decide(t.Context(), in), e.DecideDocument(t.Context(), full); a.Action != b.Action || a.Message != b.Message {
			t.Errorf("Decide %+v, with the full input %+v", a, b)
		}
	}
}
