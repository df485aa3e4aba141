package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	suggestLog     = filepath.Join("testdata", "suggest", "decisions.jsonl")
	suggestCurrent = filepath.Join("testdata", "suggest", "current")
)

// suggestPretty is what `suggest` prints for testdata/suggest: 20
// approvals by alice and bob of coder reading files under /srv/app/ (and
// a decline of /etc/shadow, 3 approvals of write_file, a timed-out
// escalation and an approval of an edited call), scored beside a policy
// that asks about anything no rule decides. OUT is the --out directory.
const suggestPretty = `suggestion coder_read_file: "coder" calling "read_file" on "fs"
  evidence: 20 human approvals by "alice", "bob", 2026-11-22T10:00:01Z to 2026-11-22T10:01:59Z; 1 declined call, none covered
  pattern:
    arguments["limit"]: FREE, any value: it varied (3 distinct values approved)
    arguments["mode"]: pinned to "ro"
    arguments["path"]: under "/srv/app/" (20 distinct values approved)
    any other argument: not allowed
  replay, the rule alone: 0 false approvals, 20 needless asks avoided, 20 proposals auto-decided
  replay, the current policy with the rule (sha256:1b74590b470c931d): 0 false approvals, 20 needless asks avoided, 20 proposals auto-decided
  wrote OUT/coder_read_file.rego and OUT/coder_read_file_test.rego (31 tests pass)

no suggestion for "coder" calling "write_file" on "fs": 3 approvals, fewer than 5

read 152 lines: learnt from 23 approved and 1 declined escalations; not used: 1 approval of an edited call
1 suggestion, nothing applied. Review the files; a main policy consults them with this line
at the end of its decision chain (docs/suggest.md):
  } else := {"action": "fulfill", "message": "suggested rule"} if data.fulfiller.suggested[_].fulfill
`

func TestSuggestPretty(t *testing.T) {
	parallelCLI(t)
	out := filepath.Join(t.TempDir(), "suggested")
	stdout, stderr, code := cli(t, "", "suggest", "--decision-log", suggestLog, "--out", out,
		"--policy", suggestCurrent, "--policy-timeout", "10s")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if got := strings.ReplaceAll(stdout, out, "OUT"); got != suggestPretty {
		t.Errorf("stdout:\n%s\nwant:\n%s", got, suggestPretty)
	}
	// docs/suggest.md's worked example is this output.
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "suggest.md"))
	if err != nil {
		t.Fatal(err)
	}
	// (The revision hashes the policy's paths, which differ from there.)
	revision := regexp.MustCompile(`sha256:[0-9a-f]{16}`)
	if !strings.Contains(revision.ReplaceAllString(string(doc), "REV"),
		"--policy-timeout 10s\n"+revision.ReplaceAllString(strings.ReplaceAll(suggestPretty, "OUT", "suggested"), "REV")+"```") {
		t.Error("docs/suggest.md's worked example differs from the output")
	}
	rule, err := os.ReadFile(filepath.Join(out, "coder_read_file.rego"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), string(rule)) {
		t.Error("docs/suggest.md does not show the generated rule as it is")
	}
	// The generated files pass fulfiller test …
	stdout, stderr, code = cli(t, "", "test", out)
	if code != 0 || !strings.HasSuffix(stdout, "31 passed, 0 failed\n") {
		t.Errorf("fulfiller test: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// … and opa test and opa fmt, when opa is installed (required with
	// FULFILLER_TEST_OPA=1; the in-process runs above use OPA's tester).
	if bin := opaBinary(t); bin != "" {
		for _, args := range [][]string{{"test", out}, {"fmt", "--list", "--fail", out}} {
			if b, err := exec.CommandContext(t.Context(), bin, args...).CombinedOutput(); err != nil {
				t.Errorf("opa %v: %v\n%s", args, err, b)
			}
		}
	}
	// A second run would replace the reviewed files: it refuses.
	_, stderr, code = cli(t, "", "suggest", "--decision-log", suggestLog, "--out", out)
	if want := "fulfiller: --out " + out + ": coder_read_file.rego already exists; move it away or choose another --out\n"; code != 2 || stderr != want {
		t.Errorf("second run: exit %d, stderr %q, want %q", code, stderr, want)
	}
}

// opaBinary is the opa binary on PATH (or in /root/go/bin), or "" when
// there is none and FULFILLER_TEST_OPA is not 1.
func opaBinary(t *testing.T) string {
	t.Helper()
	if bin, err := exec.LookPath("opa"); err == nil {
		return bin
	}
	if _, err := os.Stat("/root/go/bin/opa"); err == nil {
		return "/root/go/bin/opa"
	}
	if os.Getenv("FULFILLER_TEST_OPA") == "1" {
		t.Fatal("FULFILLER_TEST_OPA=1 but no opa binary on PATH")
	}
	t.Log("no opa binary: the generated tests ran in-process with OPA's tester only")
	return ""
}

func TestSuggestJSON(t *testing.T) {
	parallelCLI(t)
	out := filepath.Join(t.TempDir(), "s")
	stdout, stderr, code := cli(t, "", "suggest", "--decision-log", suggestLog, "--out", out, "--format", "json", "--policy-timeout", "10s")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var doc struct {
		Out         string `json:"out"`
		Wiring      string `json:"wiring"`
		Lines       int    `json:"lines"`
		Approved    int    `json:"approved"`
		Suggestions []struct {
			Name     string `json:"name"`
			Package  string `json:"package"`
			RuleFile string `json:"rule_file"`
			Tests    int    `json:"tests"`
			Args     []struct {
				Name, Kind, Prefix string
				Value              json.RawMessage
			} `json:"args"`
			Score struct {
				Alone      map[string]any  `json:"alone"`
				WithPolicy *map[string]any `json:"with_policy"`
			} `json:"score"`
		} `json:"suggestions"`
		Skipped []struct{ Reason string } `json:"skipped"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil || strings.Count(stdout, "\n") != 1 {
		t.Fatalf("not one JSON document (%v):\n%s", err, stdout)
	}
	if doc.Out != out || !strings.HasPrefix(doc.Wiring, "} else := ") || doc.Lines != 152 || doc.Approved != 23 ||
		len(doc.Suggestions) != 1 || len(doc.Skipped) != 1 {
		t.Fatalf("doc %+v", doc)
	}
	s := doc.Suggestions[0]
	if s.Name != "coder_read_file" || s.Package != "fulfiller.suggested.coder_read_file" || s.RuleFile != "coder_read_file.rego" ||
		s.Tests != 31 || len(s.Args) != 3 || s.Args[2].Kind != "prefix" || s.Args[2].Prefix != "/srv/app/" || s.Score.WithPolicy != nil {
		t.Errorf("suggestion %+v", s)
	}
	if s.Score.Alone["false_approvals"] != 0.0 || s.Score.Alone["needless_asks_avoided"] != 20.0 || s.Score.Alone["auto_decided"] != 20.0 {
		t.Errorf("score %+v", s.Score.Alone)
	}
}

// TestSuggestNothing: nothing repeated enough is no error, and writes
// nothing.
func TestSuggestNothing(t *testing.T) {
	out := filepath.Join(t.TempDir(), "s")
	stdout, stderr, code := cli(t, "", "suggest", "--decision-log", suggestLog, "--out", out, "--min", "21")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	want := `no suggestion for "coder" calling "read_file" on "fs": 20 approvals, fewer than 21
no suggestion for "coder" calling "write_file" on "fs": 3 approvals, fewer than 21

read 152 lines: learnt from 23 approved and 1 declined escalations; not used: 1 approval of an edited call
no suggestion: no proposer, tool and server had enough human approvals and no decline the pattern would cover
`
	if stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", stdout, want)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("--out was made: %v", err)
	}
}

func TestSuggestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		want string
	}{
		{nil, "fulfiller: --decision-log is required: the decision log file to learn from\n"},
		{[]string{"--decision-log", "-"}, "fulfiller: --decision-log -: suggest reads the log more than once (to learn, then to replay); give a file\n"},
		{[]string{"--decision-log", filepath.Join(dir, "nope")}, "fulfiller: --decision-log " + filepath.Join(dir, "nope") + ": no such file or directory\n"},
		{[]string{"--decision-log", dir}, "fulfiller: --decision-log " + dir + ": is a directory\n"},
		{[]string{"--decision-log", suggestLog, "--min", "1"}, "fulfiller: --min 1: must be at least 2 (one approval is a grant, not a pattern)\n"},
		{[]string{"--decision-log", suggestLog, "--format", "xml"}, "fulfiller: --format: format \"xml\": want pretty or json\n"},
		{[]string{"--decision-log", suggestLog, "--data", file}, "fulfiller: --data needs --policy: it is the current policy's data\n"},
		{[]string{"--decision-log", suggestLog, "--out", file}, "fulfiller: --out " + file + ": not a directory\n"},
		{[]string{"--decision-log", suggestLog, "--policy", filepath.Join(dir, "missing")},
			"fulfiller: " + filepath.Join(dir, "missing") + ": no such file or directory\n"},
		{[]string{"--decision-log", suggestLog, "--policy-timeout", "0s"}, "fulfiller: --policy-timeout 0s: must be positive\n"},
		{[]string{"--decision-log", suggestLog, "--bogus"}, "fulfiller: unknown flag: --bogus\n"},
	}
	for _, tt := range tests {
		stdout, stderr, code := cli(t, "", append([]string{"suggest", "--out", filepath.Join(dir, "out")}, tt.args...)...)
		if code != 2 || stderr != tt.want || stdout != "" {
			t.Errorf("suggest %v: exit %d, stderr %q, stdout %q; want 2, %q", tt.args, code, stderr, stdout, tt.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); !os.IsNotExist(err) {
		t.Errorf("a failed run made --out: %v", err)
	}
	// A policy that does not compile: the file and line, as eval says it.
	_, stderr, code := cli(t, "", "suggest", "--decision-log", suggestLog, "--policy", filepath.Join(testPolicies, "broken"))
	if code != 2 || !strings.HasPrefix(stderr, "fulfiller: "+filepath.Join(testPolicies, "broken", "policy.rego")+":5:1: rego_parse_error") {
		t.Errorf("broken policy: exit %d, stderr %q", code, stderr)
	}
}

// TestSuggestBesideExamplePolicy: the example policy already fulfils
// reads, so the suggestion adds nothing beside it, and the output says so;
// the false approval is the example policy's own (it reads /etc/shadow,
// which alice declined), never the rule's.
func TestSuggestBesideExamplePolicy(t *testing.T) {
	parallelCLI(t)
	out := filepath.Join(t.TempDir(), "s")
	examples := filepath.Join("..", "..", "examples", "policies")
	stdout, stderr, code := cli(t, "", "suggest", "--decision-log", suggestLog, "--out", out, "--policy-timeout", "10s",
		"--policy", examples, "--data", filepath.Join(examples, "data.yaml"))
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{
		"  replay, the rule alone: 0 false approvals, 20 needless asks avoided, 20 proposals auto-decided\n",
		": 1 false approval, 0 needless asks avoided, 0 proposals auto-decided\n" +
			"  note: with the current policy the rule decides nothing: the policy does not consult\n" +
			"    data.fulfiller.suggested, or decides these calls (e.g. escalates them) before it does\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
}
