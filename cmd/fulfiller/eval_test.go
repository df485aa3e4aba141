package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// cli runs the fulfiller command tree in-process and returns what the
// process would print and its exit code.
func cli(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return cliEnv(t, stdin, nil, args...)
}

// cliEnv is cli with exactly the FULFILLER_* variables in env set, and
// FULFILLER_STATE, unless env sets it, naming a directory of the test's:
// run's default state directory is relative to the working directory, the
// package's source.
func cliEnv(t *testing.T, stdin string, env map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	// Flags may also come from FULFILLER_* variables; keep the test's own.
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, envPrefix) {
			t.Setenv(name, "") // restored after the test
			os.Unsetenv(name)
		}
	}
	// `run` would otherwise make fulfiller.state in the source tree; other
	// commands (bench --state-compare needs a --state of its own) must not
	// get a store they were not given.
	if _, ok := env[envName("state")]; !ok && len(args) > 0 && args[0] == "run" {
		t.Setenv(envName("state"), filepath.Join(t.TempDir(), "state"))
	}
	// run refuses to start without a participant token; a test that is
	// not about where the token comes from gets one from the environment.
	if len(args) > 0 && args[0] == "run" && !namesToken(env, args) {
		t.Setenv(envName("token"), "test-token")
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetArgs(args)
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&errOut)
	err := root.ExecuteContext(t.Context())
	printError(&errOut, err)
	return out.String(), errOut.String(), exitCode(err)
}

// parallelCLI lets a test whose cli calls are neither `run` nor given an
// environment run in parallel (t.Parallel) with the binary tests, which
// mostly wait on their processes: alone, such a test left one of the
// machine's two cores idle for as long as it took. It stays sequential when
// the test binary's environment holds a FULFILLER_* variable, which cli
// must clear with t.Setenv, and t.Setenv panics in a parallel test. The
// environment is stable by then: parallel tests start after every
// sequential one has finished and restored what it set.
func parallelCLI(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, envPrefix) {
			return
		}
	}
	t.Parallel()
}

// namesToken reports whether a test's environment or arguments say where
// run's token comes from (or name a config file, which may): then the
// test's own choice stands.
func namesToken(env map[string]string, args []string) bool {
	for _, name := range []string{"token", "token-file", "config"} {
		if _, ok := env[envName(name)]; ok {
			return true
		}
		for _, a := range args {
			if a == "--"+name || strings.HasPrefix(a, "--"+name+"=") {
				return true
			}
		}
	}
	return false
}

var (
	examplePolicies = filepath.Join("..", "..", "examples", "policies")
	exampleData     = filepath.Join(examplePolicies, "data.yaml")
	proposals       = filepath.Join("..", "..", "examples", "proposals")
	testPolicies    = filepath.Join("testdata", "policies")
)

func decode(t *testing.T, out string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out)
	}
	return m
}

// TestEvalExamples: the documented decisions of docs/policies.md.
func TestEvalExamples(t *testing.T) {
	tests := []struct {
		input string
		want  map[string]any
	}{
		{"read.json", map[string]any{"action": "fulfill", "message": "read-only"}},
		{"write-dev.json", map[string]any{"action": "reject", "reason": "policy",
			"message": "no rule allows this call; ask the security team to extend the policy"}},
		{"write-prod.json", map[string]any{"action": "escalate", "message": "write_file targets production (/srv/prod/app.conf)",
			"approvers": []any{"oncall-alice", "oncall-bob", "oncall-carol"}, "quorum": 2.0, "timeout": "4m"}},
		{"busy-input.json", map[string]any{"action": "reject", "reason": "busy",
			"message": "64 proposals are waiting (limit 50); try again later"}},
	}
	for _, tc := range tests {
		t.Run(tc.input, func(t *testing.T) {
			stdout, stderr, code := cli(t, "", "eval", "--policy", examplePolicies, "--data", exampleData,
				"--input", filepath.Join(proposals, tc.input), "--policy-timeout", "1m")
			if code != 0 || stderr != "" {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
			got := decode(t, stdout)
			rev, _ := got["revision"].(string)
			if !strings.HasPrefix(rev, "sha256:") {
				t.Errorf("revision %q", rev)
			}
			delete(got, "revision")
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestEvalStdinAndExplain(t *testing.T) {
	env := `{"protocol":"mew/v0.4","id":"p","from":"coder","kind":"mcp/proposal","payload":{"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/tmp/x"}}}}`
	// A minute, not the 100ms default: an explained evaluation on a loaded
	// CI machine can take longer, and would fail closed.
	stdout, _, code := cli(t, env, "eval", "--policy", examplePolicies, "--data", exampleData, "--input", "-", "--explain", "--policy-timeout", "1m")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	got := decode(t, stdout)
	if got["action"] != "fulfill" {
		t.Errorf("action %v", got["action"])
	}
	ex, _ := got["explanation"].(map[string]any)
	rules, _ := ex["rules"].([]any)
	var names []string
	for _, r := range rules {
		names = append(names, r.(map[string]any)["rule"].(string)+" "+r.(map[string]any)["location"].(string))
	}
	joined := strings.Join(names, "\n")
	for _, want := range []string{
		"data.fulfiller.readonly.fulfill " + filepath.Join(examplePolicies, "readonly.rego") + ":",
		"data.fulfiller.decision " + filepath.Join(examplePolicies, "main.rego") + ":30",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("explanation lacks %q:\n%s", want, joined)
		}
	}
}

// TestEvalFailsClosed: a policy that breaks at evaluation time still gives
// a decision — reject/policy with the error — and exit 0, not a crash.
func TestEvalFailsClosed(t *testing.T) {
	tests := []struct {
		dir, err string
	}{
		{"conflict", `policy.rego:6: eval_conflict_error: rule data.fulfiller.decision produced conflicting values`},
		{"runtime-error", `policy.rego:6: eval_conflict_error: function data.fulfiller.risk produced conflicting values for the same inputs`},
		{"builtin-error", `undefined decision: no rule produced data.fulfiller.decision for this input (built-in error: ` +
			filepath.Join(testPolicies, "builtin-error", "policy.rego") + `:5: eval_builtin_error: to_number`},
	}
	for _, tc := range tests {
		t.Run(tc.dir, func(t *testing.T) {
			// A minute, not the 100ms default: each case must fail closed
			// for its own reason, never because a busy machine timed it out.
			stdout, stderr, code := cli(t, "", "eval", "--policy", filepath.Join(testPolicies, tc.dir),
				"--input", filepath.Join(proposals, "write-dev.json"), "--policy-timeout", "1m")
			if code != 0 {
				t.Fatalf("exit %d, stderr %s", code, stderr)
			}
			got := decode(t, stdout)
			if got["action"] != "reject" || got["reason"] != "policy" {
				t.Errorf("decision %v, want reject/policy", got)
			}
			e, _ := got["error"].(string)
			if !strings.Contains(e, tc.err) {
				t.Errorf("error %q, want it to contain %q", e, tc.err)
			}
			if want := "fulfiller: the policy failed, so this is the fail-closed reject: " + e + "\n"; stderr != want {
				t.Errorf("stderr:\n%s\nwant:\n%s", stderr, want)
			}
		})
	}
}

// TestEvalConflictAsOPAPrintsIt: a conflict's values each stand on their
// own line with where they came from, as OPA prints them, not folded into
// one line with " ; ".
func TestEvalConflictAsOPAPrintsIt(t *testing.T) {
	file := filepath.Join(testPolicies, "conflict", "policy.rego")
	_, stderr, code := cli(t, "", "eval", "--policy", filepath.Dir(file), "--input", filepath.Join(proposals, "write-dev.json"), "--policy-timeout", "1m")
	want := "fulfiller: the policy failed, so this is the fail-closed reject: policy evaluation: " + file +
		":6: eval_conflict_error: rule data.fulfiller.decision produced conflicting values:\n" +
		`  {"action": "fulfill"} at ` + file + ":4\n" +
		`  {"action": "escalate"} at ` + file + ":6\n"
	if code != 0 || stderr != want {
		t.Errorf("exit %d, stderr:\n%s\nwant:\n%s", code, stderr, want)
	}
}

func TestEvalDefaultPolicy(t *testing.T) {
	stdout, _, code := cli(t, "", "eval", "--input", filepath.Join(proposals, "read.json"), "--policy-timeout", "1m")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	got := decode(t, stdout)
	if got["action"] != "reject" || got["reason"] != "policy" || !strings.Contains(got["message"].(string), "--policy") {
		t.Errorf("decision %v", got)
	}
	if _, ok := got["error"]; ok {
		t.Error("the default policy's decision carries an error")
	}
}

// TestEvalUsageErrors: exit 2 with one line naming the file (and line).
func TestEvalUsageErrors(t *testing.T) {
	broken := filepath.Join(testPolicies, "broken", "policy.rego")
	tests := []struct {
		name string
		args []string
		want string // regexp on stderr
	}{
		{"broken policy", []string{"--policy", filepath.Join(testPolicies, "broken"), "--input", filepath.Join(proposals, "read.json")},
			`^fulfiller: ` + regexp.QuoteMeta(broken) + `:5:1: rego_parse_error: unexpected } token\n\t}\n\t\^\n$`},
		{"missing policy", []string{"--policy", "nope.rego", "--input", filepath.Join(proposals, "read.json")},
			`^fulfiller: --policy nope.rego: no such file or directory\n$`},
		{"missing data", []string{"--policy", examplePolicies, "--data", "nope.yaml", "--input", filepath.Join(proposals, "read.json")},
			`^fulfiller: --data nope.yaml: no such file or directory\n$`},
		{"no input", []string{"--policy", examplePolicies},
			`^fulfiller: --input is required`},
		{"missing input", []string{"--input", "nope.json"},
			`^fulfiller: --input nope.json: no such file or directory\n$`},
		{"input not JSON", []string{"--input", exampleData},
			`^fulfiller: --input ` + regexp.QuoteMeta(exampleData) + `: line 1: invalid character`},
		{"input not a proposal", []string{"--input", "-"},
			`^fulfiller: --input \(stdin\): neither an input document .*, an mcp/proposal envelope nor an MCP tools/call request \(kind is "chat"\)\n$`},
		{"stray argument", []string{"--input", "-", "extra"},
			`^fulfiller: unexpected argument "extra"\n$`},
		{"bad flag", []string{"--input", "-", "--explian"},
			`^fulfiller: unknown flag: --explian\n$`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := cli(t, `{"protocol":"mew/v0.4","kind":"chat","payload":{"text":"hi"}}`, append([]string{"eval"}, tc.args...)...)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if stdout != "" {
				t.Errorf("stdout %q", stdout)
			}
			if !regexp.MustCompile(tc.want).MatchString(stderr) {
				t.Errorf("stderr %q, want %s", stderr, tc.want)
			}
		})
	}
}

func TestTestCommand(t *testing.T) {
	parallelCLI(t)
	t.Run("examples pass", func(t *testing.T) {
		stdout, stderr, code := cli(t, "", "test", examplePolicies)
		if code != 0 {
			t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
		}
		m := regexp.MustCompile(`(?m)^(\d+) passed, 0 failed$`).FindStringSubmatch(stdout)
		if m == nil || m[1] == "0" {
			t.Errorf("no summary line with passing tests:\n%s", stdout)
		}
		if strings.Contains(stdout, "FAIL") || !strings.Contains(stdout, "PASS  data.fulfiller.production_test.test_production_path_escalates_to_on_call (") {
			t.Errorf("per-test lines:\n%s", stdout)
		}
	})
	t.Run("failing test exits 2", func(t *testing.T) {
		stdout, stderr, code := cli(t, "", "test", filepath.Join(testPolicies, "failing"))
		if code != 2 {
			t.Errorf("exit %d, want 2 (opa test's)", code)
		}
		for _, want := range []string{
			"PASS  data.fulfiller_test.test_fulfils (",
			"FAIL  data.fulfiller_test.test_rejects_writes (",
			filepath.Join(testPolicies, "failing", "policy_test.rego") + ":8",
			"\n1 passed, 1 failed\n",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, stdout)
			}
		}
		if stderr != "" {
			t.Errorf("stderr %q: the failures are already reported", stderr)
		}
	})
	t.Run("verbose prints the trace of failures", func(t *testing.T) {
		stdout, _, code := cli(t, "", "test", "-v", filepath.Join(testPolicies, "failing"))
		if code != 2 || !strings.Contains(stdout, "Fail data.fulfiller.decision.action = \"reject\"") {
			t.Errorf("exit %d, stdout:\n%s", code, stdout)
		}
	})
	t.Run("run filter", func(t *testing.T) {
		stdout, _, code := cli(t, "", "test", "--run", "test_fulfils$", filepath.Join(testPolicies, "failing"))
		if code != 0 || !strings.Contains(stdout, "\n1 passed, 0 failed\n") {
			t.Errorf("exit %d, stdout:\n%s", code, stdout)
		}
	})
	t.Run("load error exits 1", func(t *testing.T) {
		_, stderr, code := cli(t, "", "test", filepath.Join(testPolicies, "broken"))
		want := "fulfiller: " + filepath.Join(testPolicies, "broken", "policy.rego") + ":5:1: rego_parse_error: unexpected } token\n\t}\n\t^\n"
		if code != 1 || stderr != want {
			t.Errorf("exit %d, stderr %q, want 1 (opa test's) and %q", code, stderr, want)
		}
	})
	t.Run("usage", func(t *testing.T) {
		if _, _, code := cli(t, "", "test"); code != 1 {
			t.Errorf("no paths: exit %d, want 1", code)
		}
		if _, stderr, code := cli(t, "", "test", "--run", "(", examplePolicies); code != 1 || !strings.Contains(stderr, "test filter") {
			t.Errorf("bad --run: exit %d %q", code, stderr)
		}
	})
}

// eval without the --data the policies read says so, as run --check does
// (issue 42): the decision it prints is not the one run makes with its
// data. With the data given it says nothing.
func TestEvalWarnsOfMissingData(t *testing.T) {
	in := filepath.Join(proposals, "read.json")
	stdout, stderr, code := cli(t, "", "eval", "--policy", examplePolicies, "--input", in, "--policy-timeout", "1m")
	if code != 0 || !strings.Contains(stderr, "which no --data provides") || !strings.Contains(stderr, "data.") {
		t.Fatalf("without --data: exit %d, stderr %q; want the warning naming the data read", code, stderr)
	}
	decode(t, stdout) // stdout is still one JSON object
	if _, stderr, code := cli(t, "", "eval", "--policy", examplePolicies, "--data", exampleData, "--input", in, "--policy-timeout", "1m"); code != 0 || stderr != "" {
		t.Fatalf("with --data: exit %d, stderr %q; want no warning", code, stderr)
	}
}

// An MCP client's tools/call request is decided as fulfiller mcp would
// decide it: the example policies, written for a space, decide it the
// same way (one policy file serves both front ends), and --print-input
// shows front_end "mcp" with the request as the proposal.
func TestEvalDecidesAnMCPToolsCall(t *testing.T) {
	read := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/srv/app/config.yaml"}}}`
	stdout, stderr, code := cli(t, read, "eval", "--policy", examplePolicies, "--data", exampleData, "--input", "-", "--policy-timeout", "1m")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if got := decode(t, stdout); got["action"] != "fulfill" || got["message"] != "read-only" {
		t.Errorf("read_file through fulfiller mcp: %v", got)
	}
	stdout, _, code = cli(t, read, "eval", "--policy", examplePolicies, "--input", "-", "--tool-server", "fs", "--print-input")
	if code != 0 {
		t.Fatalf("--print-input: exit %d", code)
	}
	in := decode(t, stdout)
	tool, _ := in["tool"].(map[string]any)
	prop, _ := in["proposal"].(map[string]any)
	if in["front_end"] != "mcp" || in["method"] != "tools/call" || tool["name"] != "read_file" || tool["server"] != "fs" || prop["jsonrpc"] != "2.0" {
		t.Errorf("input of a tools/call request: %v", in)
	}
	_, stderr, code = cli(t, `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///x"}}`, "eval", "--policy", examplePolicies, "--input", "-")
	if code != 2 || !strings.Contains(stderr, `whose method is "resources/read": fulfiller mcp decides tools/call only`) {
		t.Errorf("a resources/read request: exit %d, stderr %q", code, stderr)
	}
}
