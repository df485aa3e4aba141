package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/rego"
)

var (
	exampleToolsList = filepath.Join("..", "..", "examples", "tools-list.json")
	writeProd        = filepath.Join(proposals, "write-prod.json")
)

// opaDecision evaluates data.fulfiller.decision with OPA's rego package,
// as opa eval -I -d examples/policies does, on the input document in
// input.
func opaDecision(t *testing.T, input string) any {
	t.Helper()
	var in any
	if err := json.Unmarshal([]byte(input), &in); err != nil {
		t.Fatalf("--print-input printed no JSON: %v\n%s", err, input)
	}
	rs, err := rego.New(
		rego.Query("data.fulfiller.decision"),
		rego.Load([]string{examplePolicies}, nil),
		rego.Input(in),
	).Eval(t.Context())
	if err != nil || len(rs) != 1 {
		t.Fatalf("opa: %v %v", rs, err)
	}
	// Through JSON, as fulfiller's decision is compared.
	b, _ := json.Marshal(rs[0].Expressions[0].Value)
	var v any
	json.Unmarshal(b, &v)
	return v
}

// TestEvalPrintInputDecidesAsOPA: the document --print-input prints,
// given to OPA as input with the same policy, gives the decision fulfiller
// eval gives with the same flags — for bare envelopes, with --tools, with
// --tool-metadata and for a full input document.
func TestEvalPrintInputDecidesAsOPA(t *testing.T) {
	parallelCLI(t)
	base := []string{"eval", "--policy", examplePolicies, "--data", exampleData, "--policy-timeout", "1m"}
	for _, tc := range []struct {
		name   string
		flags  []string
		action string
		quorum float64
	}{
		{"read", []string{"--input", filepath.Join(proposals, "read.json")}, "fulfill", 0},
		{"write dev", []string{"--input", filepath.Join(proposals, "write-dev.json")}, "reject", 0},
		// No annotations: destructive by MCP's default, quorum 2.
		{"write prod", []string{"--input", writeProd}, "escalate", 2},
		// The owner says write_file is not destructive: quorum 1, grantable.
		{"write prod, tools/list", []string{"--input", writeProd, "--tools", exampleToolsList}, "escalate", 1},
		{"write prod, tool metadata", []string{"--input", writeProd, "--tool-metadata", exampleToolMetadata, "--tool-server", "fs"}, "escalate", 0},
		{"busy input document", []string{"--input", filepath.Join(proposals, "busy-input.json")}, "reject", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{}, base...), tc.flags...)
			input, stderr, code := cli(t, "", append(args, "--print-input")...)
			if code != 0 || stderr != "" {
				t.Fatalf("--print-input: exit %d, stderr %q", code, stderr)
			}
			stdout, stderr, code := cli(t, "", args...)
			if code != 0 || stderr != "" {
				t.Fatalf("eval: exit %d, stderr %q", code, stderr)
			}
			got := decode(t, stdout)
			delete(got, "revision") // fulfiller's, not the policy's
			if want := opaDecision(t, input); !reflect.DeepEqual(any(got), want) {
				t.Errorf("fulfiller eval decides\n%v\nopa on --print-input's document\n%v", got, want)
			}
			if got["action"] != tc.action {
				t.Errorf("action %v, want %s", got["action"], tc.action)
			}
			if q, _ := got["quorum"].(float64); tc.quorum != 0 && q != tc.quorum {
				t.Errorf("quorum %v, want %v", got["quorum"], tc.quorum)
			}
		})
	}
}

// TestEvalTools: --tools fills input.tool from a tools/list answer as run
// does from its catalog — description, owner_annotations, execution, and
// annotations, the operator's declaration in place of the owner's — in each
// shape an author may paste; a wrong file is a one-line error, exit 2.
func TestEvalTools(t *testing.T) {
	echo := filepath.Join(testPolicies, "echo-tool")
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tools := `[{"name":"write_file","description":"Write a file","inputSchema":{"type":"object"},"annotations":{"destructiveHint":false},"execution":{"taskSupport":"optional"}},{"description":"nameless"}]`
	result := write("result.json", `{"tools":`+tools+`}`)
	rpc := write("rpc.json", `{"jsonrpc":"2.0","id":1,"result":{"tools":`+tools+`}}`)
	envelope := write("envelope.json", `{"protocol":"mew/v0.4","id":"r","from":"fs","kind":"mcp/response","correlation_id":["l"],"payload":{"jsonrpc":"2.0","id":1,"result":{"tools":`+tools+`}}}`)
	meta := write("meta.yaml", "fs:\n  write_file: {annotations: {readOnlyHint: false, destructiveHint: true}}\n")
	tool := func(args ...string) map[string]any {
		t.Helper()
		stdout, stderr, code := cli(t, "", append([]string{"eval", "--policy", echo, "--input", writeProd}, args...)...)
		if code != 0 || stderr != "" {
			t.Fatalf("%q: exit %d, stderr %q", args, code, stderr)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(decode(t, stdout)["message"].(string)), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	want := map[string]any{
		"name": "write_file", "server": "fs", "description": "Write a file",
		"arguments":         map[string]any{"path": "/srv/prod/app.conf", "content": "debug = false\n"},
		"annotations":       map[string]any{"destructiveHint": false},
		"owner_annotations": map[string]any{"destructiveHint": false},
		"execution":         map[string]any{"taskSupport": "optional"},
	}
	for _, args := range [][]string{
		{"--tools", envelope},
		{"--tools", envelope, "--tool-server", "fs"},
		{"--tools", rpc, "--tool-server", "fs"},
		{"--tools", result, "--tool-server", "fs"},
	} {
		if got := tool(args...); !reflect.DeepEqual(got, want) {
			t.Errorf("%q: input.tool\n%v\nwant\n%v", args, got, want)
		}
	}
	// The operator's declaration alone; the owner's stays visible as
	// owner_annotations.
	want["annotations"] = map[string]any{"readOnlyHint": false, "destructiveHint": true}
	if got := tool("--tools", envelope, "--tool-metadata", meta); !reflect.DeepEqual(got, want) {
		t.Errorf("with --tool-metadata: input.tool\n%v\nwant\n%v", got, want)
	}

	// A tool the answer does not list: the owner is known, nothing else.
	other := write("other.json", `{"kind":"mcp/response","from":"fs","payload":{"result":{"tools":[{"name":"read_file"}]}}}`)
	stdout, stderr, code := cli(t, "", "eval", "--policy", echo, "--input", writeProd, "--tools", other)
	if code != 0 || stderr != "fulfiller: warning: --tools "+other+" does not list write_file, so the policy sees no description or annotations from its owner\n" {
		t.Errorf("unlisted: exit %d, stderr %q", code, stderr)
	}
	if got := decode(t, stdout)["message"]; got != `{"arguments":{"content":"debug = false\n","path":"/srv/prod/app.conf"},"name":"write_file","server":"fs"}` {
		t.Errorf("unlisted: input.tool %v", got)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tools", result}, "fulfiller: --tools " + result + " does not say who answered it (not an mcp/response envelope): give --tool-server ID, the tool's owner\n"},
		{[]string{"--tools", envelope, "--tool-server", "db"}, "fulfiller: --tools " + envelope + " is fs's answer, but --tool-server says the tool's owner is db\n"},
		{[]string{"--tools", write("error.json", `{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}`), "--tool-server", "fs"},
			"fulfiller: --tools " + filepath.Join(dir, "error.json") + `: an error response, not a tools/list result: {"code":-32601,"message":"Method not found"}` + "\n"},
		{[]string{"--tools", writeProd}, "fulfiller: --tools " + writeProd + `: an envelope of kind "mcp/proposal", not the mcp/response to a tools/list request` + "\n"},
		{[]string{"--tools", exampleData}, "fulfiller: --tools " + exampleData + ": not a tools/list answer: invalid character '#' looking for beginning of value\n"},
		{[]string{"--tools", filepath.Join(dir, "nope.json")}, "fulfiller: --tools open " + filepath.Join(dir, "nope.json") + ": no such file or directory\n"},
	} {
		stdout, stderr, code := cli(t, "", append([]string{"eval", "--policy", echo, "--input", writeProd}, tc.args...)...)
		if code != 2 || stdout != "" || stderr != tc.want {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
	// A full input document is evaluated as it is.
	stdout, stderr, code = cli(t, "", "eval", "--policy", echo, "--input", filepath.Join(proposals, "busy-input.json"), "--tools", envelope)
	if code != 2 || !strings.HasPrefix(stderr, "fulfiller: --tools, --tool-metadata and --tool-server complete a bare proposal envelope;") {
		t.Errorf("full document: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestEvalExplainUnmatched: --explain says which branches of the
// decision's else chain were tried and on which expression each failed
// (golden, on the example policy): a production write escalates after
// the deny and the grant branches failed; a dev write falls through every
// branch to the default. --explain=fails adds OPA's trace on stderr.
func TestEvalExplainUnmatched(t *testing.T) {
	main := filepath.Join(examplePolicies, "main.rego")
	branch := func(line, failed string, failedLine string) map[string]any {
		return map[string]any{"location": main + ":" + line, "failed": failed, "failed_at": main + ":" + failedLine}
	}
	deny, granted := branch("22", "quotas.deny", "23"), branch("24", "production.granted", "25")
	for _, tc := range []struct {
		input  string
		action string
		want   []any
	}{
		{writeProd, "escalate", []any{deny, granted}},
		{filepath.Join(proposals, "write-dev.json"), "reject", []any{deny, granted,
			branch("26", "production.escalate", "27"),
			branch("28", "jobs.fulfill", "29"),
			branch("30", "readonly.fulfill", "31"),
			branch("32", "data.fulfiller.suggested[_].fulfill", "32"),
		}},
		{filepath.Join(proposals, "read.json"), "fulfill", []any{deny, granted,
			branch("26", "production.escalate", "27"),
			branch("28", "jobs.fulfill", "29"),
		}},
	} {
		stdout, stderr, code := cli(t, "", "eval", "--policy", examplePolicies, "--data", exampleData, "--input", tc.input, "--explain", "--policy-timeout", "1m")
		if code != 0 || stderr != "" {
			t.Fatalf("%s: exit %d, stderr %q", tc.input, code, stderr)
		}
		got := decode(t, stdout)
		unmatched := got["explanation"].(map[string]any)["unmatched"]
		if got["action"] != tc.action || !reflect.DeepEqual(unmatched, tc.want) {
			b, _ := json.MarshalIndent(unmatched, "", "  ")
			w, _ := json.MarshalIndent(tc.want, "", "  ")
			t.Errorf("%s: action %v, unmatched:\n%s\nwant:\n%s", tc.input, got["action"], b, w)
		}
	}

	stdout, stderr, code := cli(t, "", "eval", "--policy", examplePolicies, "--data", exampleData, "--input", writeProd, "--explain=fails", "--policy-timeout", "1m")
	if code != 0 || decode(t, stdout)["explanation"] == nil {
		t.Fatalf("--explain=fails: exit %d, stdout %s", code, stdout)
	}
	// opa eval --explain=fails's lines (the columns are as wide as the
	// longest location).
	for _, want := range []string{
		`(?m)^query:1 +Enter data\.fulfiller\.decision = _$`,
		`(?m)^` + regexp.QuoteMeta(main) + `:23 +\| \| Fail data\.fulfiller\.quotas\.deny$`,
		`(?m)^` + regexp.QuoteMeta(main) + `:25 +\| \| Fail data\.fulfiller\.production\.granted$`,
	} {
		if !regexp.MustCompile(want).MatchString(stderr) {
			t.Errorf("--explain=fails: stderr lacks %s:\n%s", want, stderr)
		}
	}
	if _, stderr, code := cli(t, "", "eval", "--input", writeProd, "--explain=why"); code != 2 || stderr != "fulfiller: --explain \"why\": want rules, fails, notes or full\n" {
		t.Errorf("--explain=why: exit %d, stderr %q", code, stderr)
	}
}
