package policies

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// TestContractProblems: check finds, in what a policy writes down, exactly
// what the engine would refuse at run time, and nothing in what it would
// accept or cannot know before it runs.
func TestContractProblems(t *testing.T) {
	tests := []struct {
		name   string
		rules  string
		errs   []string // "row:col: message"
		warns  []string
		strict bool
	}{
		{name: "well formed decisions", rules: `
default decision := {"action": "reject", "reason": "policy", "message": "no"}
decision := {"action": "escalate", "approvers": ["a", "b"], "quorum": 2, "timeout": "5m", "editable": ["path"],
	"grantable": {"max_ttl": "8h", "scope": ["proposer", "tool", "arguments.path:prefix"]}} if input.x == 1
decision := {"action": "fulfill", "target": "fs"} if input.x == 2`},
		{name: "computed values are the run time's", rules: `
decision := {"action": "escalate", "approvers": data.a, "quorum": count(data.a) + 1, "timeout": data.t, "message": sprintf("%v", [input])}
d := {"action": input.a, "reason": input.r}`},
		{name: "no action in a decision rule", rules: `
default decision := {"reason": "policy"}`,
			errs: []string{`3:21: decision has no "action": every decision needs action fulfill, reject or escalate`}},
		{name: "no action in a body-bound decision", rules: `
decision := d if {
	d := {"message": "hi"}
}`,
			errs: []string{`4:7: decision has no "action": every decision needs action fulfill, reject or escalate`}},
		{name: "an object without action elsewhere is no decision", rules: `
settings := {"reason": "policy", "timeout": "soon"}`},
		{name: "unknown action next to a contract key", rules: `
deny := {"action": "deny", "reason": "policy"}`,
			errs: []string{`3:20: malformed decision: action: "deny" is not fulfill, reject or escalate`}},
		{name: "an action key alone is no decision outside the decision rule", rules: `
audit := {"action": "deny"}`},
		{name: "unknown reason, in a helper rule", rules: `
deny := {"action": "reject", "reason": "forbidden"}`,
			errs: []string{`3:40: malformed decision: reason: "forbidden" is not a reason code (policy, busy, incapable, timeout, invalid, duplicate, resource_limit, unsafe, disagree, other, inappropriate, no_longer_needed)`}},
		{name: "reject without reason", rules: `
decision := {"action": "reject", "message": sprintf("%v", [input.x])}`,
			errs: []string{`3:13: malformed decision: reason: a reject needs a reason code`}},
		{name: "timeout not a duration, in an else branch", rules: `
decision := {"action": "fulfill"} if input.x == 1
else := {"action": "escalate", "timeout": "10 minutes"}`,
			errs: []string{`4:43: malformed decision: timeout: "10 minutes" is not a duration such as "5m" or "90s"`}},
		{name: "quorum over the approvers, the rest computed", rules: `
decision := {"action": "escalate", "approvers": ["alice"], "quorum": 2, "message": input.m}`,
			errs: []string{`3:70: malformed decision: quorum: 2 approvals needed but only 1 approvers named`}},
		{name: "every mistake of one object", rules: `
decision := {"action": "escalate", "quorum": 0, "timeout": 5, "approvers": ["a", "a"], "editable": "path", "target": ""}`,
			errs: []string{
				`3:46: malformed decision: quorum: must be at least 1, got 0`,
				`3:60: malformed decision: timeout: must be a string, got number`,
				`3:76: malformed decision: approvers: "a" is listed twice`,
				`3:100: malformed decision: editable: must be a list of strings, got string`,
				`3:118: malformed decision: target: must not be empty`,
			}},
		{name: "grantable on a fulfil", rules: `
decision := {"action": "fulfill", "grantable": {"max_ttl": "1h", "scope": ["proposer", "tool"]}}`,
			errs: []string{`3:48: malformed decision: grantable: only an escalate decision may offer a grant, this one is fulfill`}},
		{name: "notify_arguments on a reject", rules: `
decision := {"action": "reject", "reason": "policy", "notify_arguments": true}`,
			errs: []string{`3:74: malformed decision: notify_arguments: only an escalate decision notifies approvers, this one is reject`}},
		{name: "notify_arguments not a boolean", rules: `
decision := {"action": "escalate", "notify_arguments": "yes"}`,
			errs: []string{`3:56: malformed decision: notify_arguments: must be true or false, got string`}},
		{name: "reminders and tiers within the timeout", rules: `
decision := {"action": "escalate", "approvers": ["alice"], "timeout": "4m", "reminders": ["2m"], "escalate_to": [{"after": "3m", "approvers": ["lead"]}]}`},
		{name: "a reminder that is no duration", rules: `
decision := {"action": "escalate", "reminders": ["2 minutes"]}`,
			errs: []string{`3:49: malformed decision: reminders: "2 minutes" is not a duration such as "5m" or "90s"`}},
		{name: "a reminder at the timeout, the rest computed", rules: `
decision := {"action": "escalate", "timeout": "4m", "reminders": ["4m"], "message": input.m}`,
			errs: []string{`3:66: malformed decision: reminders: 4m is not before the timeout 4m: the prompt has ended by then`}},
		{name: "tiers out of order", rules: `
decision := {"action": "escalate", "escalate_to": [{"after": "3m", "approvers": ["lead"]}, {"after": "1m", "approvers": ["cto"]}]}`,
			errs: []string{`3:51: malformed decision: escalate_to[1].after: 1m is not after the previous tier's 3m: tiers come in increasing after`}},
		{name: "a tier after the timeout", rules: `
decision := {"action": "escalate", "timeout": "4m", "escalate_to": [{"after": "5m", "approvers": ["lead"]}]}`,
			errs: []string{`3:68: malformed decision: escalate_to[0].after: 5m is not before the timeout 4m: the prompt has ended by then`}},
		{name: "a tier without approvers", rules: `
decision := {"action": "escalate", "escalate_to": [{"after": "1m", "approvers": []}]}`,
			errs: []string{`3:51: malformed decision: escalate_to[0].approvers: must name at least one approver`}},
		{name: "a tier naming an approver already asked", rules: `
decision := {"action": "escalate", "approvers": ["alice", "lead"], "escalate_to": [{"after": "1m", "approvers": ["lead"]}]}`,
			errs: []string{`3:83: malformed decision: escalate_to[0].approvers: "lead" is already an approver of the escalation`}},
		{name: "reminders on a fulfil", rules: `
decision := {"action": "fulfill", "reminders": ["1m"]}`,
			errs: []string{`3:48: malformed decision: reminders: only an escalate decision has prompts to remind of, this one is fulfill`}},
		{name: "unknown key is a warning", rules: `
decision := {"action": "escalate", "aprovers": ["alice"]}`,
			warns: []string{`3:36: decision key "aprovers" is not part of the contract (action, reason, message, target, approvers, quorum, timeout, editable, grantable, task, task_timeout, notify_arguments, reminders, escalate_to); the sidecar keeps it only for the decision log`}},
		{name: "unknown key is an error when strict", strict: true, rules: `
decision := {"action": "escalate", "aprovers": ["alice"]}`,
			errs: []string{`3:36: decision key "aprovers" is not part of the contract (action, reason, message, target, approvers, quorum, timeout, editable, grantable, task, task_timeout, notify_arguments, reminders, escalate_to); the sidecar keeps it only for the decision log`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := "package fulfiller\n" + tc.rules + "\n"
			m, err := ast.ParseModuleWithOpts("p.rego", src, parserOptions)
			if err != nil {
				t.Fatal(err)
			}
			errs, warns := contractProblems(m, tc.strict)
			slices.Sort(tc.errs)
			if got := positioned(errs); !slices.Equal(got, tc.errs) {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.errs, "\n"))
			}
			if got := positioned(warns); !slices.Equal(got, tc.warns) {
				t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.warns, "\n"))
			}
			// Whatever check accepts as constant, the engine accepts too.
			if len(tc.errs) == 0 {
				if _, err := Load(t.Context(), Options{Policies: []string{writeTree(t, map[string]string{"p.rego": src})}, Logger: quietLogger()}); err != nil {
					t.Errorf("policy check accepts does not load: %v", err)
				}
			}
		})
	}
}

func positioned(errs ast.Errors) []string {
	var out []string
	for _, e := range errs {
		out = append(out, fmt.Sprintf("%d:%d: %s", e.Location.Row, e.Location.Col, e.Message))
	}
	slices.Sort(out)
	return out
}

// TestCheckTestFilesAndStrict: check compiles test files too (as opa check
// does) without holding them to the contract, and strict mode adds OPA's
// strict errors.
func TestCheckTestFilesAndStrict(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"p.rego":      "package fulfiller\n\ndecision := {\"action\": \"fulfill\"} if {\n\tx := 1\n\tinput.m == \"a\"\n}\n",
		"p_test.rego": "package fulfiller_test\n\ntest_bad_decision_fails_closed if {\n\t{\"action\": \"allow\", \"reason\": \"x\"} != {}\n}\n",
	})
	r, err := Check(t.Context(), []string{dir}, CheckOptions{})
	if err != nil || r.Problems != nil || r.Files != 2 {
		t.Fatalf("non-strict: %+v, %v", r, err)
	}
	r, err = Check(t.Context(), []string{dir}, CheckOptions{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, "p.rego") + ":4:2: rego_compile_error: assigned var x unused\n\tx := 1\n\t^"
	if r.Problems == nil || r.Problems.(*LoadError).Pretty() != want {
		t.Errorf("strict: %v\nwant:\n%s", r.Problems, want)
	}
}
