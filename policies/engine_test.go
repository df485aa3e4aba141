package policies

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var testNow = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// callInput builds the input the sidecar would for a tools/call proposal.
func callInput(t testing.TB, from, tool, args, annotations string) *Input {
	t.Helper()
	env := fmt.Sprintf(`{"protocol":"mew/v0.4","id":"p-1","ts":"2026-11-22T10:00:00Z","from":%q,"kind":"mcp/proposal","payload":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":%q,"arguments":%s}}}`, from, tool, args)
	in, err := InputFromEnvelope([]byte(env), testNow)
	if err != nil {
		t.Fatal(err)
	}
	in.Tool.Server = "fs"
	if annotations != "" {
		in.Tool.Annotations = json.RawMessage(annotations)
	}
	in.Proposer.Capabilities = json.RawMessage(`[{"kind":"mcp/proposal"},{"kind":"chat"}]`)
	in.Space = &Space{ID: "dev", Participants: []Participant{
		{ID: "fs", Capabilities: json.RawMessage(`[{"kind":"mcp/response"}]`)},
		{ID: from, Capabilities: in.Proposer.Capabilities},
	}}
	in.Agent = AgentInfo{ID: "fulfiller", Pending: 1, Inflight: 0, MaxPending: 1000}
	return in
}

func TestExamplePolicies(t *testing.T) {
	e := loadExamples(t)
	busy := callInput(t, "coder", "read_file", `{"path":"/tmp/x"}`, "")
	busy.Agent.Pending = 51

	tests := []struct {
		name string
		in   *Input
		want Decision
	}{
		{
			name: "read-only by name prefix",
			in:   callInput(t, "coder", "read_file", `{"path":"/tmp/notes.txt"}`, ""),
			want: Decision{Action: Fulfill, Message: "read-only"},
		},
		{
			name: "read-only by annotation",
			in:   callInput(t, "coder", "fetch_page", `{"url":"https://example.com"}`, `{"readOnlyHint":true}`),
			want: Decision{Action: Fulfill, Message: "read-only"},
		},
		{
			name: "write with no rule is rejected",
			in:   callInput(t, "coder", "write_file", `{"path":"/tmp/notes.txt","content":"x"}`, ""),
			want: Decision{Action: Reject, Reason: "policy", Message: "no rule allows this call; ask the security team to extend the policy"},
		},
		{
			name: "production write escalates with quorum 2 (destructive by default)",
			in:   callInput(t, "coder", "write_file", `{"path":"/srv/prod/app.conf","content":"x"}`, ""),
			want: Decision{Action: Escalate, Message: "write_file targets production (/srv/prod/app.conf)",
				Approvers: []string{"oncall-alice", "oncall-bob", "oncall-carol"}, Quorum: 2, Timeout: 4 * time.Minute},
		},
		{
			name: "production non-destructive escalates with quorum 1",
			in:   callInput(t, "coder", "restart", `{"host":"web1.prod.example.com"}`, `{"destructiveHint":false}`),
			want: Decision{Action: Escalate, Message: "restart targets production (web1.prod.example.com)",
				Approvers: []string{"oncall-alice", "oncall-bob", "oncall-carol"}, Quorum: 1, Timeout: 4 * time.Minute},
		},
		{
			name: "blocklisted proposer",
			in:   callInput(t, "mallory", "read_file", `{"path":"/tmp/x"}`, ""),
			want: Decision{Action: Reject, Reason: "policy", Message: "proposals from mallory are not accepted here"},
		},
		{
			name: "busy",
			in:   busy,
			want: Decision{Action: Reject, Reason: "busy", Message: "51 proposals are waiting (limit 50); try again later"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := e.Decide(t.Context(), tc.in)
			tc.want.Revision = e.Revision()
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestFailClosed: whatever goes wrong in evaluation, the answer is a reject
// with reason policy and the error says what went wrong.
func TestFailClosed(t *testing.T) {
	tests := []struct {
		name   string
		policy string
		ctx    func() (context.Context, context.CancelFunc)
		is     error  // errors.Is target, if any
		substr string // in the error text
	}{
		{
			name:   "undefined",
			policy: `decision := {"action": "fulfill"} if input.never`,
			is:     ErrUndefinedDecision,
		},
		{
			name:   "no decision rule at all",
			policy: `allow := true`,
			is:     ErrUndefinedDecision,
		},
		{
			name:   "malformed action",
			policy: `decision := {"action": "allow"}`,
			substr: `malformed decision: action: "allow" is not fulfill, reject or escalate`,
		},
		{
			name:   "malformed: reject without reason",
			policy: `decision := {"action": "reject"}`,
			substr: "malformed decision: reason: a reject needs a reason code",
		},
		{
			name:   "malformed: unknown reason",
			policy: `decision := {"action": "reject", "reason": "denied"}`,
			substr: `"denied" is not a reason code`,
		},
		{
			name:   "malformed: not an object",
			policy: `decision := "fulfill"`,
			substr: "malformed decision: must be an object, got string",
		},
		{
			name: "conflict: two values for decision",
			policy: `decision := {"action": "fulfill"} if input.method == "tools/call"
decision := {"action": "escalate"} if input.tool.name == "write_file"`,
			substr: "eval_conflict_error: rule data.fulfiller.decision produced conflicting values",
		},
		{
			name: "runtime error: function with two outputs",
			policy: `level(x) := 1 if x > 0
level(x) := 2 if x > 1
decision := {"action": "fulfill", "level": level(5)}`,
			substr: "eval_conflict_error: function data.fulfiller.level produced conflicting values for the same inputs",
		},
		{
			name:   "runtime error: built-in error leaves the decision undefined",
			policy: `decision := {"action": "fulfill", "n": 1 / input.agent.pending}`,
			is:     ErrUndefinedDecision,
			substr: "div: divide by zero",
		},
		{
			name: "timeout: slow policy",
			policy: `n := numbers.range(1, 5000)
decision := {"action": "fulfill"} if {
	count({x | some a in n; some b in n; x := a * b}) > 0
}`,
			is: ErrEvalTimeout,
		},
		{
			name:   "timeout: huge built-in",
			policy: `decision := {"action": "fulfill"} if count(numbers.range(1, 1e10)) > 0`,
			is:     ErrEvalTimeout,
		},
		{
			name:   "caller cancelled",
			policy: `decision := {"action": "fulfill"}`,
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx, func() {}
			},
			is: context.Canceled,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeTree(t, map[string]string{"p.rego": "package fulfiller\n\n" + tc.policy + "\n"})
			// Only the timeout cases run with a short timeout: on a busy
			// machine a 50ms budget can cut any evaluation short, and the
			// other cases must fail closed for their own reason.
			timeout := time.Minute
			if errors.Is(tc.is, ErrEvalTimeout) {
				timeout = 50 * time.Millisecond
			}
			e, err := Load(t.Context(), Options{Policies: []string{dir}, Timeout: timeout, Logger: quietLogger()})
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			ctx := t.Context()
			if tc.ctx != nil {
				var cancel context.CancelFunc
				ctx, cancel = tc.ctx()
				defer cancel()
			}
			in := callInput(t, "coder", "write_file", `{"path":"/x"}`, "")
			in.Agent = AgentInfo{ID: "fulfiller", MaxPending: 10} // pending 0

			start := time.Now()
			d := e.Decide(ctx, in)
			// The slow policies run for minutes unless cut: a generous
			// bound still shows that the timeout, not the end of the
			// evaluation, returned.
			if elapsed := time.Since(start); errors.Is(tc.is, ErrEvalTimeout) && elapsed > 30*time.Second {
				t.Errorf("Decide took %v; the timeout is 50ms", elapsed)
			}
			// A timeout is tried twice and then answered busy (load is not
			// a policy verdict); everything else is a reject/policy.
			want := "policy"
			if errors.Is(tc.is, ErrEvalTimeout) {
				want = "busy"
			}
			if d.Action != Reject || d.Reason != want || d.Err == nil {
				t.Fatalf("decision = %+v, want a fail-closed reject/%s", d, want)
			}
			if d.Revision != e.Revision() {
				t.Errorf("revision %q, want %q", d.Revision, e.Revision())
			}
			if tc.is != nil && !errors.Is(d.Err, tc.is) {
				t.Errorf("err = %v, want errors.Is %v", d.Err, tc.is)
			}
			if !strings.Contains(d.Err.Error(), tc.substr) {
				t.Errorf("err = %q, want it to contain %q", d.Err, tc.substr)
			}
			b, _ := json.Marshal(d)
			if !strings.Contains(string(b), `"error":`) {
				t.Errorf("JSON %s carries no error", b)
			}
		})
	}
}

func TestConflictNamesFileAndLine(t *testing.T) {
	e := loadInline(t, `package fulfiller

decision := {"action": "fulfill"}

decision := {"action": "escalate"}
`)
	d := e.Decide(t.Context(), &Input{})
	if d.Err == nil || !strings.Contains(d.Err.Error(), "policy.rego:") {
		t.Errorf("err = %v, want it to name policy.rego and a line", d.Err)
	}
}

func TestDefaultPolicy(t *testing.T) {
	e, err := Load(t.Context(), Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if !e.IsDefault() {
		t.Error("IsDefault() = false")
	}
	if files := e.Files(); len(files) != 0 {
		t.Errorf("Files() = %v", files)
	}
	for _, in := range []*Input{
		{},
		callInput(t, "coder", "read_file", `{"path":"/tmp/x"}`, `{"readOnlyHint":true}`),
	} {
		d := e.Decide(t.Context(), in)
		if d.Action != Reject || d.Reason != "policy" || d.Err != nil {
			t.Fatalf("decision = %+v, want the default policy's reject/policy", d)
		}
		if !strings.Contains(d.Message, "--policy") {
			t.Errorf("message %q does not say how to add a policy", d.Message)
		}
		if d.Revision == "" || d.Revision != e.Revision() {
			t.Errorf("revision %q", d.Revision)
		}
	}

	// A loaded policy is not the default.
	if loadExamples(t).IsDefault() {
		t.Error("examples: IsDefault() = true")
	}
}

func TestData(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"policy/p.rego": `package fulfiller

decision := {
	"action": "reject", "reason": "policy",
	"message": sprintf("%s %s %v %s", [data.a.x, data.b.y, data.sub.z, data.nested.deeper.w]),
}`,
		"a.json":                      `{"a": {"x": "from-json"}}`,
		"b.yaml":                      "b:\n  y: from-yaml\n",
		"dir/sub/more.yml":            "z: 3\n",
		"dir/nested/deeper/data.json": `{"w": "deep"}`,
		"dir/ignored.txt":             "not data",
	})
	e, err := Load(t.Context(), Options{Timeout: evalTimeout,
		Policies: []string{filepath.Join(dir, "policy")},
		Data:     []string{filepath.Join(dir, "a.json"), filepath.Join(dir, "b.yaml"), filepath.Join(dir, "dir")},
		Logger:   quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	d := e.Decide(t.Context(), &Input{})
	if d.Err != nil || d.Message != "from-json from-yaml 3 deep" {
		t.Errorf("decision = %+v", d)
	}
	files := e.Files()
	if len(files) != 5 || files[0] != filepath.Join(dir, "policy", "p.rego") {
		t.Errorf("Files() = %v", files)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"parse/p.rego":          "package fulfiller\n\ndecision := {\n\t\"action\": \n",
		"compile/p.rego":        "package fulfiller\n\ndecision := {\"action\": \"fulfill\"} if {\n\tx == 1\n}\n",
		"compile2/a.rego":       "package fulfiller\n",
		"compile2/b.rego":       "package fulfiller\n\nimport data.nothing\n\ndecision := y\n",
		"empty/README.md":       "no policies here",
		"notrego.yaml":          "a: 1\n",
		"badjson.json":          "{\n  \"a\": 1,\n  \"b\": \n}\n",
		"badyaml.yaml":          "a: [1, 2\n",
		"list.json":             "[1, 2]",
		"conflict1.json":        `{"limits": {"max": 1}}`,
		"conflict2.yaml":        "limits:\n  max: 2\n",
		"good/p.rego":           "package fulfiller\n\ndecision := {\"action\": \"fulfill\"}\n",
		"good/broken_test.rego": "this is not rego",
	})
	p := func(s string) string { return filepath.Join(dir, s) }
	tests := []struct {
		name     string
		opts     Options
		file     string
		line     int
		contains string
	}{
		{"parse error", Options{Policies: []string{p("parse")}}, p("parse/p.rego"), 5, "rego_parse_error"},
		{"unsafe var", Options{Policies: []string{p("compile")}}, p("compile/p.rego"), 4, "var x is unsafe"},
		{"undefined var", Options{Policies: []string{p("compile2")}}, p("compile2/b.rego"), 5, "rego_"},
		{"missing policy", Options{Policies: []string{p("nope.rego")}}, p("nope.rego"), 0, "no such file"},
		{"dir without rego", Options{Policies: []string{p("empty")}}, p("empty"), 0, "no .rego policy files"},
		{"data as policy", Options{Policies: []string{p("notrego.yaml")}}, p("notrego.yaml"), 0, "not a .rego file"},
		{"bad json", Options{Policies: []string{p("good")}, Data: []string{p("badjson.json")}}, p("badjson.json"), 4, "invalid character"},
		{"bad yaml", Options{Policies: []string{p("good")}, Data: []string{p("badyaml.yaml")}}, p("badyaml.yaml"), 0, "yaml"},
		{"data not an object", Options{Policies: []string{p("good")}, Data: []string{p("list.json")}}, p("list.json"), 0, "must be a JSON/YAML object"},
		{"data conflict", Options{Policies: []string{p("good")}, Data: []string{p("conflict1.json"), p("conflict2.yaml")}}, p("conflict2.yaml"), 0, "data.limits.max is also set by " + p("conflict1.json")},
		{"missing data", Options{Policies: []string{p("good")}, Data: []string{p("nope.json")}}, p("nope.json"), 0, "no such file"},
		{"policy as data", Options{Policies: []string{p("good")}, Data: []string{p("good/p.rego")}}, p("good/p.rego"), 0, "not a data document"},
		{"test file named", Options{Policies: []string{p("good/broken_test.rego")}}, p("good/broken_test.rego"), 0, "a test file is for `fulfiller test`"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Logger = quietLogger()
			_, err := Load(t.Context(), tc.opts)
			var le *LoadError
			if !errors.As(err, &le) {
				t.Fatalf("err = %v (%T), want a *LoadError", err, err)
			}
			if le.File != tc.file || le.Line != tc.line {
				t.Errorf("error at %s:%d, want %s:%d (%v)", le.File, le.Line, tc.file, tc.line, err)
			}
			if !strings.Contains(err.Error(), tc.contains) {
				t.Errorf("err = %q, want it to contain %q", err, tc.contains)
			}
			want := tc.file
			if tc.line > 0 {
				want = fmt.Sprintf("%s:%d: ", tc.file, tc.line)
			}
			if !strings.HasPrefix(err.Error(), want) {
				t.Errorf("err = %q, want it to start with %q", err, want)
			}
		})
	}

	// The broken _test.rego in good/ is not loaded for evaluation.
	if _, err := Load(t.Context(), Options{Timeout: evalTimeout, Policies: []string{p("good")}, Logger: quietLogger()}); err != nil {
		t.Errorf("good/ with a broken _test.rego: %v", err)
	}
}

func TestRevision(t *testing.T) {
	policy := "package fulfiller\n\ndecision := {\"action\": \"fulfill\"}\n"
	a := writeTree(t, map[string]string{"p.rego": policy, "d.json": `{"x": 1}`})
	b := writeTree(t, map[string]string{"other/name.rego": policy, "d.json": `{"x": 1}`})
	load := func(policies string, data ...string) string {
		t.Helper()
		e, err := Load(t.Context(), Options{Timeout: evalTimeout, Policies: []string{policies}, Data: data, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(e.Revision(), "sha256:") || len(e.Revision()) != len("sha256:")+16 {
			t.Errorf("revision %q", e.Revision())
		}
		return e.Revision()
	}
	r1 := load(a, filepath.Join(a, "d.json"))
	if r2 := load(b, filepath.Join(b, "d.json")); r2 != r1 {
		t.Errorf("same content, different names: %s != %s", r2, r1)
	}
	if r := load(a); r == r1 {
		t.Error("revision does not depend on data")
	}
	writeFile(t, filepath.Join(a, "d.json"), `{"x": 2}`)
	if r := load(a, filepath.Join(a, "d.json")); r == r1 {
		t.Error("revision did not change with the data")
	}
	writeFile(t, filepath.Join(a, "p.rego"), policy+"\n# comment\n")
	if r := load(a); r == r1 {
		t.Error("revision did not change with the policy")
	}
}

func TestExplain(t *testing.T) {
	e := loadExamples(t)
	in := callInput(t, "coder", "read_file", `{"path":"/tmp/x"}`, "")
	d, x := e.Explain(t.Context(), in)
	if d.Action != Fulfill || d.Err != nil {
		t.Fatalf("decision = %+v", d)
	}
	if want := e.Decide(t.Context(), in); !reflect.DeepEqual(d, want) {
		t.Errorf("Explain decided %+v, Decide %+v", d, want)
	}
	var names []string
	for _, r := range x.Rules {
		names = append(names, r.Rule)
	}
	for _, want := range []string{"data.fulfiller.readonly.fulfill", "data.fulfiller.decision"} {
		if !slices.Contains(names, want) {
			t.Errorf("fired rules %v lack %s", names, want)
		}
	}
	for _, r := range x.Rules {
		if r.Rule == "data.fulfiller.decision" && r.Location != filepath.Join("..", "examples", "policies", "main.rego")+":30" {
			t.Errorf("decision fired at %s, want the fulfil branch at main.rego:30", r.Location)
		}
		if strings.HasPrefix(r.Rule, "data.fulfiller.production.escalate") {
			t.Errorf("escalate did not fire but is listed: %v", r)
		}
	}
	if !strings.Contains(x.Trace(), "readonly.rego") {
		t.Error("trace does not mention readonly.rego")
	}

	// The default rule is named when nothing else fired.
	_, x = e.Explain(t.Context(), callInput(t, "coder", "write_file", `{"path":"/tmp/x"}`, ""))
	found := false
	for _, r := range x.Rules {
		if r.Rule == "data.fulfiller.decision" && r.Default {
			found = true
		}
	}
	if !found {
		t.Errorf("default decision not in %+v", x.Rules)
	}

	// print() output and trace() notes end up in Notes.
	e = loadInline(t, `package fulfiller

decision := {"action": "fulfill"} if {
	print("tool is", input.tool.name)
	trace("checked")
}`)
	_, x = e.Explain(t.Context(), callInput(t, "coder", "write_file", `{}`, ""))
	if len(x.Notes) != 2 || !strings.HasSuffix(x.Notes[0], "policy.rego:4: tool is write_file") || !strings.HasSuffix(x.Notes[1], "checked") {
		t.Errorf("notes = %q", x.Notes)
	}
}

func TestPrintGoesToDebugLog(t *testing.T) {
	var logs logBuffer
	dir := writeTree(t, map[string]string{"p.rego": `package fulfiller

decision := {"action": "fulfill"} if print("hello from", input.method)`})
	e, err := Load(t.Context(), Options{Timeout: evalTimeout, Policies: []string{dir}, Logger: textLogger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	e.Decide(t.Context(), &Input{Method: "tools/list"})
	if !strings.Contains(logs.String(), "hello from tools/list") {
		t.Errorf("log = %s", logs.String())
	}
}

func TestDecideConcurrentWithReload(t *testing.T) {
	dir := writeTree(t, map[string]string{"p.rego": "package fulfiller\n\ndecision := {\"action\": \"fulfill\", \"message\": \"v0\"}\n"})
	e, err := Load(t.Context(), Options{Timeout: evalTimeout, Policies: []string{dir}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				d := e.Decide(t.Context(), callInput(t, "coder", "x", `{}`, ""))
				if d.Action != Fulfill || !strings.HasPrefix(d.Message, "v") {
					t.Errorf("decision = %+v", d)
					return
				}
			}
		})
	}
	for i := 1; i <= 5; i++ {
		writeFile(t, filepath.Join(dir, "p.rego"), fmt.Sprintf("package fulfiller\n\ndecision := {\"action\": \"fulfill\", \"message\": \"v%d\"}\n", i))
		if err := e.Reload(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if d := e.Decide(t.Context(), &Input{}); d.Message != "v5" {
		t.Errorf("after reloads: %+v", d)
	}
}

func TestReloadKeepsLastGood(t *testing.T) {
	var logs logBuffer
	dir := writeTree(t, map[string]string{"p.rego": "package fulfiller\n\ndecision := {\"action\": \"fulfill\"}\n"})
	e, err := Load(t.Context(), Options{Timeout: evalTimeout, Policies: []string{dir}, Logger: textLogger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	good := e.Revision()
	writeFile(t, filepath.Join(dir, "p.rego"), "package fulfiller\n\ndecision := {\"action\": \n")
	err = e.Reload(t.Context())
	var le *LoadError
	if !errors.As(err, &le) || le.File != filepath.Join(dir, "p.rego") || le.Line == 0 {
		t.Fatalf("Reload = %v, want a LoadError with file and line", err)
	}
	if e.LastReloadError() != err {
		t.Errorf("LastReloadError = %v", e.LastReloadError())
	}
	if e.Revision() != good {
		t.Error("revision changed after a failed reload")
	}
	if d := e.Decide(t.Context(), &Input{}); d.Action != Fulfill || d.Revision != good {
		t.Errorf("decision after failed reload = %+v", d)
	}
	if !strings.Contains(logs.String(), "policy reload failed") || !strings.Contains(logs.String(), "p.rego:") {
		t.Errorf("log = %s", logs.String())
	}

	// Deleting the only file is refused too.
	if err := os.Remove(filepath.Join(dir, "p.rego")); err != nil {
		t.Fatal(err)
	}
	if err := e.Reload(t.Context()); err == nil {
		t.Error("reload of an empty directory succeeded")
	}

	writeFile(t, filepath.Join(dir, "p.rego"), "package fulfiller\n\ndecision := {\"action\": \"escalate\"}\n")
	if err := e.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	if e.LastReloadError() != nil {
		t.Errorf("LastReloadError after success = %v", e.LastReloadError())
	}
	if d := e.Decide(t.Context(), &Input{}); d.Action != Escalate || d.Revision == good {
		t.Errorf("decision after reload = %+v", d)
	}
}

func TestEvalTimeMatchesInputNow(t *testing.T) {
	e := loadInline(t, `package fulfiller

decision := {"action": "fulfill", "message": sprintf("%d", [time.now_ns()])}`)
	d := e.Decide(t.Context(), &Input{Now: testNow})
	if d.Message != fmt.Sprint(testNow.UnixNano()) {
		t.Errorf("time.now_ns() = %s, want %d", d.Message, testNow.UnixNano())
	}
	doc, err := ParseDocument([]byte(`{"proposal": {}, "now": "2026-11-22T10:00:00Z"}`))
	if err != nil {
		t.Fatal(err)
	}
	if d := e.DecideDocument(t.Context(), doc); d.Message != fmt.Sprint(testNow.UnixNano()) {
		t.Errorf("document: time.now_ns() = %s, want %d", d.Message, testNow.UnixNano())
	}
}

func TestDefaultTimeout(t *testing.T) {
	e, err := Load(t.Context(), Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if e.Timeout() != 100*time.Millisecond {
		t.Errorf("Timeout() = %v", e.Timeout())
	}
}

func TestBadInputFailsClosed(t *testing.T) {
	e := loadInline(t, `package fulfiller

decision := {"action": "fulfill"} if input.proposal.id`)
	d := e.Decide(t.Context(), &Input{Proposal: json.RawMessage(`{"kind": `)})
	if d.Action != Reject || d.Reason != "policy" || d.Err == nil || !strings.Contains(d.Err.Error(), "input: proposal") {
		t.Errorf("decision = %+v", d)
	}
}

// Explain lists every branch of the decision that did not decide, also
// those the rule index would skip untried: a branch whose input cannot
// match and one that reads data nobody provided (issue 42: the guide
// promises every branch tried, and the else that failed on missing data
// was left out).
func TestExplainListsBranchesTheIndexSkips(t *testing.T) {
	e := loadInline(t, `package fulfiller

default decision := {"action": "reject", "reason": "policy"}

decision := {"action": "fulfill"} if {
	input.tool.name == "nothing"
} else := {"action": "reject", "reason": "policy", "message": "blocked"} if {
	data.settings.blocklist[_] == input.proposer
} else := {"action": "fulfill", "message": "allowed"} if {
	allowed := data.settings.allowed
	input.proposer in allowed
}`)
	in := callInput(t, "coder", "write_file", `{}`, "")
	d, x := e.Explain(t.Context(), in)
	if want := e.Decide(t.Context(), in); !reflect.DeepEqual(d, want) {
		t.Errorf("Explain decided %+v, Decide %+v", d, want)
	}
	var failed []string
	for _, b := range x.Unmatched {
		failed = append(failed, b.Failed)
	}
	want := []string{`input.tool.name == "nothing"`, `data.settings.blocklist[_] == input.proposer`, `allowed := data.settings.allowed`}
	if !slices.Equal(failed, want) {
		t.Errorf("unmatched branches failed at %q, want %q", failed, want)
	}
	// The branches that read data nobody provided say which.
	for i, want := range [][]string{nil, {"data.settings"}, {"data.settings"}} {
		if i < len(x.Unmatched) && !slices.Equal(x.Unmatched[i].Unprovided, want) {
			t.Errorf("branch %d (%s): unprovided %q, want %q", i, x.Unmatched[i].Failed, x.Unmatched[i].Unprovided, want)
		}
	}
}
