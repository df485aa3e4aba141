package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var (
	replayLog   = filepath.Join("testdata", "replay", "decisions.jsonl")
	replayMixed = filepath.Join("testdata", "replay", "mixed")
)

// replayPretty is what `replay` prints for testdata/replay: a recorded
// run (written by the real decision logger) with known human answers,
// replayed with a policy that fulfils reads, rejects deletes and
// escalates the rest.
const replayPretty = `changed decisions (line, proposal, proposer, tool: old → new, new reason):
  line 1 p1 coder read_file: escalate → fulfill ("read-only")
  line 9 p2 coder delete_file: escalate → reject (unsafe, "never delete")
  line 18 p5 coder write_file: reject → escalate
  line 20 p6 coder read_file: reject → fulfill ("read-only")

replayed 7 proposals from 24 lines with policy revision sha256:3bc3d93762ee02d5
changed: 4
old → new:
  fulfill  → fulfill  1
  escalate → fulfill  1
  escalate → escalate 2
  escalate → reject   1
  reject   → fulfill  1
  reject   → escalate 1
human answers: 3 (1 approved, 2 declined): 2 agreements, 0 false approvals, 0 needless asks, 1 asked again
re-evaluations after a human edit (not counted above): 1 replayed, 0 changed
`

func TestReplayPretty(t *testing.T) {
	stdout, stderr, code := cli(t, "", "replay", "--decision-log", replayLog, "--policy", replayMixed)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if stdout != replayPretty {
		t.Errorf("stdout:\n%s\nwant:\n%s", stdout, replayPretty)
	}
	// docs/replay.md's worked example is this output.
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "replay.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "    --policy cmd/fulfiller/testdata/replay/mixed\n"+replayPretty+"```") {
		t.Error("docs/replay.md's worked example differs from the output")
	}
}

func TestReplayJSON(t *testing.T) {
	log, err := os.ReadFile(replayLog)
	if err != nil {
		t.Fatal(err)
	}
	// The log also comes from stdin.
	stdout, stderr, code := cli(t, string(log), "replay", "--decision-log", "-", "--policy", replayMixed, "--format", "json")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	want := `{"changes":[
{"line":1,"proposal_id":"p1","decision_id":"d-p1","proposer":"coder","tool":"read_file","old":{"action":"escalate"},"new":{"action":"fulfill","message":"read-only"}},
{"line":9,"proposal_id":"p2","decision_id":"d-p2","proposer":"coder","tool":"delete_file","old":{"action":"escalate"},"new":{"action":"reject","reason":"unsafe","message":"never delete"}},
{"line":18,"proposal_id":"p5","decision_id":"d-p5","proposer":"coder","tool":"write_file","old":{"action":"reject","reason":"policy"},"new":{"action":"escalate"}},
{"line":20,"proposal_id":"p6","decision_id":"d-p6","proposer":"coder","tool":"read_file","old":{"action":"reject","reason":"policy","error":"eval_conflict_error"},"new":{"action":"fulfill","message":"read-only"}}
],"summary":{"revision":"sha256:3bc3d93762ee02d5","lines":24,"replayed":7,"changed":4,"transitions":[{"old":"fulfill","new":"fulfill","count":1},{"old":"escalate","new":"fulfill","count":1},{"old":"escalate","new":"escalate","count":2},{"old":"escalate","new":"reject","count":1},{"old":"reject","new":"fulfill","count":1},{"old":"reject","new":"escalate","count":1}],"masked":0,"masked_changed":0,"new_errors":0,"humans":{"answered":3,"approved":1,"declined":2,"agreements":2,"false_approvals":0,"needless_asks":0,"asked_again":1},"reevaluations":{"replayed":1,"changed":0,"transitions":[{"old":"fulfill","new":"fulfill","count":1}]},"duplicates":0,"no_input":0,"malformed":{"count":0,"first":[]},"pending":{"max":65536,"peak":2,"evicted":0,"unfinished":0}}}
`
	if stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", stdout, want)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Errorf("not one JSON document: %v", err)
	}
}

// TestReplayMalformedLog: unreadable lines are reported, not fatal.
func TestReplayMalformedLog(t *testing.T) {
	log, err := os.ReadFile(replayLog)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "log.jsonl")
	if err := os.WriteFile(path, append([]byte("garbage\n"), log...), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, _, code := cli(t, "", "replay", "--decision-log", path, "--policy", replayMixed)
	if code != 0 || !strings.Contains(stdout, "\nmalformed lines: 1\n  line 1: invalid character 'g' looking for beginning of value\n") ||
		!strings.Contains(stdout, "replayed 7 proposals from 25 lines") {
		t.Errorf("exit %d, stdout:\n%s", code, stdout)
	}
}

func TestReplayUsageErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--policy", replayMixed}, "fulfiller: --decision-log is required: the decision log file to replay, or - for stdin\n"},
		{[]string{"--decision-log", replayLog}, "fulfiller: --policy is required: the candidate policy to replay the log with\n"},
		{[]string{"--decision-log", filepath.Join(dir, "nope"), "--policy", replayMixed},
			"fulfiller: --decision-log " + filepath.Join(dir, "nope") + ": no such file or directory\n"},
		{[]string{"--decision-log", dir, "--policy", replayMixed}, "fulfiller: --decision-log " + dir + ": is a directory\n"},
		{[]string{"--decision-log", replayLog, "--policy", replayMixed, "--format", "xml"},
			"fulfiller: --format: format \"xml\": want pretty or json\n"},
		{[]string{"--decision-log", replayLog, "--policy", replayMixed, "--max-pending", "0"}, "fulfiller: --max-pending 0: must be positive\n"},
		{[]string{"--decision-log", replayLog, "--policy", filepath.Join(dir, "missing")},
			"fulfiller: " + filepath.Join(dir, "missing") + ": no such file or directory\n"},
		{[]string{"--decision-log", replayLog, "--policy", replayMixed, "--bogus"}, "fulfiller: unknown flag: --bogus\n"},
	}
	for _, tt := range tests {
		stdout, stderr, code := cli(t, "", append([]string{"replay"}, tt.args...)...)
		if code != 2 || stderr != tt.want || stdout != "" {
			t.Errorf("replay %v: exit %d, stderr %q, stdout %q; want 2, %q", tt.args, code, stderr, stdout, tt.want)
		}
	}
	// A policy that does not compile: the file and line, as eval says it.
	_, stderr, code := cli(t, "", "replay", "--decision-log", replayLog, "--policy", filepath.Join(testPolicies, "broken"))
	if code != 2 || !strings.HasPrefix(stderr, "fulfiller: "+filepath.Join(testPolicies, "broken", "policy.rego")+":5:1: rego_parse_error") {
		t.Errorf("broken policy: exit %d, stderr %q", code, stderr)
	}
}
