package suggest

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/format"

	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/decisionlog"
	"github.com/mewkit/fulfiller/policies"
	"github.com/mewkit/fulfiller/policies/replay"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// logBuilder writes a decision log with the real decisionlog writer, the
// records in the order the Fulfiller emits them.
type logBuilder struct {
	t   testing.TB
	buf bytes.Buffer
	log *decisionlog.Logger
	n   int
}

func newLog(t testing.TB, opts decisionlog.Options) *logBuilder {
	b := &logBuilder{t: t}
	b.log = decisionlog.New(&b.buf, opts)
	return b
}

func (b *logBuilder) now() time.Time {
	b.n++
	return t0.Add(time.Duration(b.n) * time.Second)
}

func (b *logBuilder) record(e fulfill.Event) {
	b.t.Helper()
	e.Time = b.now()
	e.Revision = "rev-old"
	if err := b.log.Record(e); err != nil {
		b.t.Fatal(err)
	}
}

// decide logs the first decision of proposal id: a tools/call of tool on
// server ("" unknown) by proposer with args, decided d.
func (b *logBuilder) decide(id, proposer, tool, server string, args map[string]any, d decision.Decision) {
	b.t.Helper()
	a, err := json.Marshal(args)
	if err != nil {
		b.t.Fatal(err)
	}
	env, err := json.Marshal(map[string]any{"protocol": "mew/v0.4", "id": id, "from": proposer, "kind": "mcp/proposal",
		"payload": map[string]any{"method": "tools/call", "params": map[string]any{"name": tool, "arguments": json.RawMessage(a)}}})
	if err != nil {
		b.t.Fatal(err)
	}
	in, err := policies.InputFromEnvelope(env, t0)
	if err != nil {
		b.t.Fatal(err)
	}
	in.Tool = &policies.Tool{Name: tool, Server: server, Arguments: a}
	d.Revision = "rev-old"
	b.record(fulfill.Event{Stage: fulfill.StageDecided, ProposalID: id, DecisionID: "d-" + id,
		Proposer: proposer, Method: "tools/call", Tool: tool, Decision: &d, Input: in})
}

func (b *logBuilder) outcome(id string, stage fulfill.Stage, by ...string) {
	b.t.Helper()
	b.record(fulfill.Event{Stage: stage, ProposalID: id, DecisionID: "d-" + id, By: by})
}

func (b *logBuilder) answer(id, approver, action string, approve bool) {
	b.log.ObserveApproval(elicit.Event{Time: b.now(), Kind: elicit.EventAnswered,
		ProposalID: id, Approver: approver, Action: action, Approve: approve, DecisionID: "d-" + id, Revision: "rev-old"})
}

// approved logs an escalation a human approved as it was, and its
// fulfilment.
func (b *logBuilder) approved(id, proposer, tool, server, approver string, args map[string]any) {
	b.decide(id, proposer, tool, server, args, decision.Decision{Action: decision.Escalate})
	b.outcome(id, fulfill.StageEscalated)
	b.answer(id, approver, "accept", true)
	b.outcome(id, fulfill.StageApproved, approver)
	b.outcome(id, fulfill.StageFulfilling)
	b.outcome(id, fulfill.StageFulfilled)
}

// declined logs an escalation a human declined.
func (b *logBuilder) declined(id, proposer, tool, server string, args map[string]any) {
	b.decide(id, proposer, tool, server, args, decision.Decision{Action: decision.Escalate})
	b.outcome(id, fulfill.StageEscalated)
	b.answer(id, "alice", "decline", false)
	b.outcome(id, fulfill.StageRejected)
}

func (b *logBuilder) bytes() []byte {
	b.t.Helper()
	if err := b.log.Close(); err != nil {
		b.t.Fatal(err)
	}
	return b.buf.Bytes()
}

// repeatedLog has 20 approvals by alice and bob of coder reading files
// under /srv/app/ on fs with mode "ro" and a varying limit; a decline of
// coder reading /etc/shadow; 3 approvals of coder's write_file (too few);
// one timed-out escalation; one approval of an edited call; and one
// fulfilled by the policy.
func repeatedLog(t testing.TB) []byte {
	b := newLog(t, decisionlog.Options{})
	for i := range 20 {
		who := []string{"alice", "bob"}[i%2]
		b.approved(fmt.Sprintf("p%d", i+1), "coder", "read_file", "fs", who,
			map[string]any{"path": fmt.Sprintf("/srv/app/%s/f%d.txt", []string{"src", "docs"}[i%2], i), "mode": "ro", "limit": 100 * (i%3 + 1)})
		if i == 10 {
			b.declined("d1", "coder", "read_file", "fs", map[string]any{"path": "/etc/shadow", "mode": "ro", "limit": 100})
		}
	}
	for i := range 3 {
		b.approved(fmt.Sprintf("w%d", i+1), "coder", "write_file", "fs", "alice", map[string]any{"path": "/srv/app/out.txt"})
	}
	b.decide("t1", "coder", "read_file", "fs", map[string]any{"path": "/srv/app/x"}, decision.Decision{Action: decision.Escalate})
	b.outcome("t1", fulfill.StageEscalated)
	b.outcome("t1", fulfill.StageRejected)
	// An edited call: the approval is of another call, not evidence.
	b.decide("e1", "coder", "read_file", "fs", map[string]any{"path": "/", "mode": "ro", "limit": 1}, decision.Decision{Action: decision.Escalate})
	b.outcome("e1", fulfill.StageEscalated)
	b.answer("e1", "alice", "accept", true)
	b.outcome("e1", fulfill.StageApproved, "alice")
	b.record(fulfill.Event{Stage: fulfill.StageDecided, ProposalID: "e1", DecisionID: "d-e1b", Proposer: "coder", Method: "tools/call",
		Tool: "read_file", Decision: &decision.Decision{Action: decision.Fulfill},
		Input: &policies.Input{Method: "tools/call", Approval: &policies.Approval{By: []string{"alice"}}}})
	b.outcome("e1", fulfill.StageFulfilling)
	b.decide("f1", "coder", "list_dir", "fs", map[string]any{"path": "/srv"}, decision.Decision{Action: decision.Fulfill})
	return b.bytes()
}

// policyRego is the Rego toolchain cmd/fulfiller wires into suggest:
// package policies (OPA), which suggest itself does not link.
type policyRego struct{}

func (policyRego) Format(name string, src []byte) ([]byte, error) { return policies.Format(name, src) }

func (policyRego) RefKey(name string) bool { return policies.RefKey(name) }

func (policyRego) Load(ctx context.Context, p Policy, timeout time.Duration, log *slog.Logger) (replay.Decider, error) {
	e, err := policies.Load(ctx, policies.Options{Policies: p.Paths, Data: p.Data, Timeout: timeout, Logger: log})
	if err != nil {
		return nil, err
	}
	return e, nil
}

func (policyRego) Test(ctx context.Context, paths []string) (int, string, error) {
	rep, err := policies.RunTests(ctx, paths, policies.TestOptions{})
	if err != nil {
		return 0, "", err
	}
	var failures strings.Builder
	if !rep.OK() {
		_ = rep.WriteText(&failures, false)
	}
	return rep.Count(policies.TestPass), failures.String(), nil
}

func learn(t *testing.T, log []byte, opts Options) *Result {
	t.Helper()
	opts.Rego = policyRego{}
	res, err := Learn(t.Context(), bytes.NewReader(log), opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// write writes a suggestion's files into a new directory.
func write(t *testing.T, s Suggestion) string {
	t.Helper()
	dir := t.TempDir()
	for name, b := range map[string][]byte{s.RuleFile: s.Rule, s.TestFile: s.Test} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runTests runs the generated tests in-process with OPA's tester (what
// fulfiller test and opa test do) and fails on any failure.
func runTests(t *testing.T, dir string) policies.TestReport {
	t.Helper()
	rep, err := policies.RunTests(t.Context(), []string{dir}, policies.TestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || len(rep.Results) == 0 {
		var b strings.Builder
		rep.WriteText(&b, true)
		t.Fatalf("generated tests failed:\n%s", b.String())
	}
	return rep
}

// opaTest runs the opa binary's test on dir when it is on PATH (or
// /root/go/bin); with FULFILLER_TEST_OPA=1 a missing binary fails.
func opaTest(t *testing.T, dir string) {
	t.Helper()
	bin, err := exec.LookPath("opa")
	if err != nil {
		if _, e := os.Stat("/root/go/bin/opa"); e == nil {
			bin, err = "/root/go/bin/opa", nil
		}
	}
	if err != nil {
		if os.Getenv("FULFILLER_TEST_OPA") == "1" {
			t.Fatalf("FULFILLER_TEST_OPA=1 but no opa binary: %v", err)
		}
		t.Logf("no opa binary: checked in-process with OPA's tester only")
		return
	}
	out, err := exec.CommandContext(t.Context(), bin, "test", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("opa test %s: %v\n%s", dir, err, out)
	}
	out, err = exec.CommandContext(t.Context(), bin, "fmt", "--list", "--fail", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("opa fmt --list --fail %s: %v\n%s", dir, err, out)
	}
}

func TestSuggestTwentyApprovals(t *testing.T) {
	log := repeatedLog(t)
	res := learn(t, log, Options{Source: "decisions.jsonl"})
	if len(res.Suggestions) != 1 {
		t.Fatalf("suggestions %+v, skipped %+v", res.Suggestions, res.Skipped)
	}
	s := res.Suggestions[0]
	if s.Name != "coder_read_file" || s.Package != "fulfiller.suggested.coder_read_file" || s.Approvals != 20 ||
		s.Declines != 1 || !reflect.DeepEqual(s.Approvers, []string{"alice", "bob"}) ||
		!reflect.DeepEqual(s.ProposalIDs, []string{"p1", "p2", "p3", "p4", "p5"}) || s.Server != "fs" {
		t.Errorf("suggestion %+v", s)
	}
	wantArgs := []Arg{
		{Name: "limit", Kind: Free, Distinct: 3, Present: 20},
		{Name: "mode", Kind: Pinned, Value: json.RawMessage(`"ro"`), Distinct: 1, Present: 20},
		{Name: "path", Kind: Prefix, Prefix: "/srv/app/", Distinct: 20, Present: 20},
	}
	if !reflect.DeepEqual(s.Args, wantArgs) {
		t.Errorf("args %+v, want %+v", s.Args, wantArgs)
	}
	wantSkipped := []Skipped{{Proposer: "coder", Tool: "write_file", Server: "fs", Approvals: 3, Reason: "3 approvals, fewer than 5"}}
	if !reflect.DeepEqual(res.Skipped, wantSkipped) {
		t.Errorf("skipped %+v", res.Skipped)
	}
	if res.Approved != 23 || res.Declined != 1 || res.Edited != 1 || res.Malformed != 0 {
		t.Errorf("result %+v", res)
	}
	for _, want := range []string{
		"package fulfiller.suggested.coder_read_file\n",
		"\tinput.proposer.id == \"coder\"\n",
		"\tinput.params.name == \"read_file\"\n",
		"\tinput.tool.server == \"fs\"\n",
		"\tobject.keys(args) - {\"limit\", \"mode\", \"path\"} == set()\n",
		"\targs.mode == \"ro\"\n",
		"\tunder(args.path, \"/srv/app/\")\n",
		"# Evidence: 20 human approvals of \"coder\" calling \"read_file\" on \"fs\",\n",
		"# by \"alice\", \"bob\", from 2026-11-22T10:00:01Z to 2026-11-22T10:01:59Z.\n",
		"# Approved proposals: \"p1\", \"p2\", \"p3\", \"p4\", \"p5\" (and 15 more).\n",
		"#   arguments[\"limit\"]: FREE, any value: it varied (3 distinct values approved)\n",
		"#   " + Wiring + "\n",
	} {
		if !strings.Contains(string(s.Rule), want) {
			t.Errorf("rule lacks %q:\n%s", want, s.Rule)
		}
	}
	// opa fmt leaves both files as they are.
	for name, b := range map[string][]byte{s.RuleFile: s.Rule, s.TestFile: s.Test} {
		f, err := format.SourceWithOpts(name, b, format.Opts{RegoVersion: ast.RegoV1})
		if err != nil || !bytes.Equal(f, b) {
			t.Errorf("%s is not opa-fmt-stable (%v):\n%s", name, err, b)
		}
	}

	dir := write(t, s)
	rep := runTests(t, dir)
	// 20 approved, 1 declined, and the calls outside: proposer, tool,
	// server, an unknown argument, mode, path beside, climbing, not a
	// string, missing (mode and path).
	if got, want := len(rep.Results), 20+1+4+2+4; got != want {
		t.Errorf("%d generated tests, want %d", got, want)
	}
	opaTest(t, dir)

	// Replay: no false approvals on the log it was learnt from.
	open := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(log)), nil }
	sc, err := NewScorer(t.Context(), policyRego{}, open, nil, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if err := sc.ScoreAll(t.Context(), res); err != nil {
		t.Fatal(err)
	}
	if len(res.Suggestions) != 1 || res.Suggestions[0].Score == nil {
		t.Fatalf("scored %+v", res.Suggestions)
	}
	got := *res.Suggestions[0].Score
	want := Scores{Alone: Score{Revision: got.Alone.Revision, FalseApprovals: 0, NeedlessAsksAvoided: 20, AutoDecided: 20}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("score %+v, want %+v", got, want)
	}
}

// TestSuggestWithCurrentPolicy scores a suggestion beside the example
// policy, which consults data.fulfiller.suggested (the Wiring line).
func TestSuggestWithCurrentPolicy(t *testing.T) {
	log := repeatedLog(t)
	res := learn(t, log, Options{})
	open := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(log)), nil }
	// The current policy escalates every tools/call, and wires the
	// suggestions in as the example main policy does.
	dir := t.TempDir()
	current := `package fulfiller

default decision := {"action": "reject", "reason": "policy"}

decision := {"action": "escalate"} if {
	input.method == "tools/call"
	input.params.name != "list_dir"
} else := {"action": "fulfill"} if {
	input.params.name == "list_dir"
` + Wiring + "\n"
	if err := os.WriteFile(filepath.Join(dir, "main.rego"), []byte(current), 0o600); err != nil {
		t.Fatal(err)
	}
	sc, err := NewScorer(t.Context(), policyRego{}, open, &Policy{Paths: []string{dir}}, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if err := sc.ScoreAll(t.Context(), res); err != nil {
		t.Fatal(err)
	}
	// escalate wins over the suggestion in this chain: the suggestion
	// changes nothing, and the score says so.
	if w := res.Suggestions[0].Score.WithPolicy; w == nil || w.AutoDecided != 0 || w.NeedlessAsksAvoided != 0 || w.FalseApprovals != 0 {
		t.Errorf("with policy %+v", w)
	}
	// Now with the escalation narrowed to what the suggestion does not
	// cover: the suggestion decides the 20.
	current = strings.Replace(current, `input.params.name != "list_dir"`, `input.params.name != "list_dir"
	not has_suggestion`, 1) + "\nhas_suggestion if data.fulfiller.suggested[_].fulfill\n"
	if err := os.WriteFile(filepath.Join(dir, "main.rego"), []byte(current), 0o600); err != nil {
		t.Fatal(err)
	}
	sc2, err := NewScorer(t.Context(), policyRego{}, open, &Policy{Paths: []string{dir}}, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sc2.Close()
	if err := sc2.ScoreAll(t.Context(), res); err != nil {
		t.Fatal(err)
	}
	if w := res.Suggestions[0].Score.WithPolicy; w == nil || w.AutoDecided != 20 || w.NeedlessAsksAvoided != 20 || w.FalseApprovals != 0 {
		t.Errorf("with policy %+v", w)
	}
}

// TestSuggestDeclineCancels: a human declined a call the pattern covers,
// so there is no suggestion.
func TestSuggestDeclineCancels(t *testing.T) {
	b := newLog(t, decisionlog.Options{})
	for i := range 6 {
		b.approved(fmt.Sprintf("p%d", i), "coder", "read_file", "fs", "alice", map[string]any{"path": fmt.Sprintf("/srv/app/%d", i)})
	}
	b.declined("bad", "coder", "read_file", "fs", map[string]any{"path": "/srv/app/secrets"})
	res := learn(t, b.bytes(), Options{})
	want := []Skipped{{Proposer: "coder", Tool: "read_file", Server: "fs", Approvals: 6, Declines: 1,
		Reason: `a human declined "bad", which the pattern would cover`}}
	if len(res.Suggestions) != 0 || !reflect.DeepEqual(res.Skipped, want) {
		t.Errorf("suggestions %+v, skipped %+v", res.Suggestions, res.Skipped)
	}
}

// TestSuggestPathsWithoutDirectory: paths that share only the root (or
// climb) are no pattern; neither is a bare string prefix.
func TestSuggestPathsWithoutDirectory(t *testing.T) {
	for name, paths := range map[string][]string{
		"root":   {"/etc/a", "/srv/b", "/srv/c", "/srv/d", "/srv/e"},
		"climbs": {"/srv/app/../a", "/srv/app/b", "/srv/app/c", "/srv/app/d", "/srv/app/e"},
	} {
		t.Run(name, func(t *testing.T) {
			b := newLog(t, decisionlog.Options{})
			for i, p := range paths {
				b.approved(fmt.Sprintf("p%d", i), "coder", "read_file", "fs", "alice", map[string]any{"path": p})
			}
			res := learn(t, b.bytes(), Options{})
			if len(res.Suggestions) != 0 || len(res.Skipped) != 1 ||
				!strings.Contains(res.Skipped[0].Reason, "share no directory below the root") {
				t.Errorf("suggestions %+v, skipped %+v", res.Suggestions, res.Skipped)
			}
		})
	}
	// /srv/app/x and /srv/apple/y share "/srv/app" as a string, but only
	// /srv/ as a directory.
	b := newLog(t, decisionlog.Options{})
	for i := range 5 {
		b.approved(fmt.Sprintf("p%d", i), "coder", "read_file", "fs", "alice", map[string]any{"path": []string{"/srv/app/x", "/srv/apple/y"}[i%2]})
	}
	res := learn(t, b.bytes(), Options{})
	if len(res.Suggestions) != 1 || res.Suggestions[0].Args[0].Prefix != "/srv/" {
		t.Fatalf("suggestions %+v, skipped %+v", res.Suggestions, res.Skipped)
	}
}

// TestSuggestInjection: proposer, tool and argument names and values
// holding quotes, backslashes, newlines, braces and Rego keywords stay
// strings: the generated rule has exactly the expected expressions, its
// tests pass, and the malicious call is not fulfilled unless it is
// exactly the approved one.
func TestSuggestInjection(t *testing.T) {
	evil := "x\"\n}\nfulfill if { true }\n# \\ import data.y \u2028 \x1b default"
	b := newLog(t, decisionlog.Options{})
	for i := range 5 {
		b.approved(fmt.Sprintf("p\"%d\n}", i), evil+"proposer", evil+"tool", evil+"server", evil+"approver",
			map[string]any{evil + "arg": evil, "path": fmt.Sprintf("/srv/%s/%d", evil, i), "n": i})
	}
	res := learn(t, b.bytes(), Options{Source: evil})
	if len(res.Suggestions) != 1 {
		t.Fatalf("suggestions %+v, skipped %+v", res.Suggestions, res.Skipped)
	}
	s := res.Suggestions[0]
	if !regexp.MustCompile(`^[a-z][a-z0-9_]*$`).MatchString(s.Name) {
		t.Errorf("name %q", s.Name)
	}
	m, err := ast.ParseModuleWithOpts(s.RuleFile, string(s.Rule), ast.ParserOptions{RegoVersion: ast.RegoV1})
	if err != nil {
		t.Fatal(err)
	}
	var fulfill []*ast.Rule
	for _, r := range m.Rules {
		if r.Head.Name.String() == "fulfill" {
			fulfill = append(fulfill, r)
		}
	}
	// One fulfill rule of method, proposer, tool, server, args, keys,
	// the path, the odd argument name's variable and its pinned value:
	// the malicious strings added none.
	if len(fulfill) != 1 || len(fulfill[0].Body) != 9 || len(m.Rules) != 3 {
		t.Fatalf("rules %d, fulfill %d, body %v:\n%s", len(m.Rules), len(fulfill), fulfill, s.Rule)
	}
	// The pinned value is the evil string, as a string.
	if got, want := fulfill[0].Body[8].Operand(1).Value, ast.Value(ast.String(evil)); got.Compare(want) != 0 {
		t.Errorf("pinned operand %v, want %v", got, want)
	}
	for _, line := range strings.Split(string(s.Rule), "\n") {
		if strings.HasPrefix(line, "#") && strings.ContainsAny(line, "\x1b\u2028") {
			t.Errorf("comment line with a control character: %q", line)
		}
	}
	dir := write(t, s)
	runTests(t, dir)
	opaTest(t, dir)
}

// TestSuggestMalformedAndBounds: malformed lines are counted, a log with
// nothing repeated gives no suggestion, and Learn honours ctx.
func TestSuggestMalformedAndBounds(t *testing.T) {
	log := append([]byte("not json\n{\"no\":\"type\"}\n\n"), repeatedLog(t)...)
	res := learn(t, log, Options{Min: 21})
	if res.Malformed != 2 || len(res.Suggestions) != 0 || len(res.Skipped) != 2 {
		t.Errorf("result %+v", res)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Learn(ctx, bytes.NewReader(log), Options{Rego: policyRego{}}); err == nil {
		t.Error("Learn with a cancelled context succeeded")
	}
	// With room for one pending escalation, interleaved proposals are
	// evicted and counted, never learnt from half.
	b := newLog(t, decisionlog.Options{})
	b.decide("a", "coder", "read_file", "fs", map[string]any{"path": "/srv/a"}, decision.Decision{Action: decision.Escalate})
	b.decide("b", "coder", "read_file", "fs", map[string]any{"path": "/srv/b"}, decision.Decision{Action: decision.Escalate})
	b.outcome("a", fulfill.StageApproved, "alice")
	res = learn(t, b.bytes(), Options{MaxPending: 1})
	if res.Evicted != 1 || res.Approved != 0 {
		t.Errorf("result %+v", res)
	}
}

func TestIdent(t *testing.T) {
	for in, want := range map[string]string{
		"coder": "coder", "Read-File": "read_file", "": "x", "9lives": "x9lives", "\"}\n": "x",
		"a__b": "a_b", "import": "import", "ünï": "n",
	} {
		if got := ident(in); got != want {
			t.Errorf("ident(%q) = %q, want %q", in, got, want)
		}
	}
	taken := map[string]bool{}
	if a, b := uniqueName(taken, groupKey{"a", "b", "s1"}), uniqueName(taken, groupKey{"a", "b", "s2"}); a != "a_b" || b != "a_b_2" {
		t.Errorf("names %q %q", a, b)
	}
}

// TestMaskedDeclineCounts: a declined call whose input was masked still
// cancels a pattern that covers what is left of it.
func TestMaskedDeclineCounts(t *testing.T) {
	b := newLog(t, decisionlog.Options{Mask: []string{"params.arguments.token"}})
	for i := range 5 {
		b.approved(fmt.Sprintf("p%d", i), "coder", "read_file", "fs", "alice", map[string]any{"path": fmt.Sprintf("/srv/app/%d", i)})
	}
	b.approved("masked-ok", "coder", "read_file", "fs", "alice", map[string]any{"path": "/srv/app/y", "token": "t"})
	b.declined("masked", "coder", "read_file", "fs", map[string]any{"path": "/srv/app/x", "token": "secret"})
	res := learn(t, b.bytes(), Options{})
	if len(res.Suggestions) != 0 || res.Masked != 1 || len(res.Skipped) != 1 || res.Skipped[0].Reason != `a human declined "masked", which the pattern would cover` {
		t.Fatalf("result %+v", res)
	}
}

// TestScoreDropsFalseApprovals: a declined call Learn did not see (its
// escalation was evicted from Learn's bounded map) but the rule covers is
// caught by the replay, and the suggestion is dropped.
func TestScoreDropsFalseApprovals(t *testing.T) {
	b := newLog(t, decisionlog.Options{})
	b.decide("evicted", "coder", "read_file", "fs", map[string]any{"path": "/srv/app/x"}, decision.Decision{Action: decision.Escalate})
	for i := range 5 {
		b.approved(fmt.Sprintf("p%d", i), "coder", "read_file", "fs", "alice", map[string]any{"path": fmt.Sprintf("/srv/app/%d", i)})
	}
	b.answer("evicted", "alice", "decline", false)
	b.outcome("evicted", fulfill.StageRejected)
	log := b.bytes()
	res := learn(t, log, Options{MaxPending: 1})
	if len(res.Suggestions) != 1 || res.Evicted != 1 {
		t.Fatalf("result %+v", res)
	}
	open := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(log)), nil }
	sc, err := NewScorer(t.Context(), policyRego{}, open, nil, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if err := sc.ScoreAll(t.Context(), res); err != nil {
		t.Fatal(err)
	}
	want := []Skipped{{Proposer: "coder", Tool: "read_file", Server: "fs", Approvals: 5,
		Reason: "its replay fulfils 1 proposals a human declined"}}
	if len(res.Suggestions) != 0 || !reflect.DeepEqual(res.Skipped, want) {
		t.Errorf("suggestions %+v, skipped %+v", res.Suggestions, res.Skipped)
	}
}

var update = flag.Bool("update", false, "rewrite cmd/fulfiller/testdata/suggest/decisions.jsonl")

// TestCmdTestdata keeps the command's worked example log what repeatedLog
// writes with the real decision logger (go test -run TestCmdTestdata
// -update ./suggest/ rewrites it).
func TestCmdTestdata(t *testing.T) {
	path := filepath.Join("..", "..", "cmd", "fulfiller", "testdata", "suggest", "decisions.jsonl")
	log := repeatedLog(t)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, log, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, log) {
		t.Errorf("%s is stale: run go test -run TestCmdTestdata -update ./suggest/", path)
	}
}

// Learn without a Rego toolchain says so instead of writing nothing (or
// panicking on the first suggestion).
func TestLearnNeedsRego(t *testing.T) {
	if _, err := Learn(t.Context(), strings.NewReader(""), Options{}); err == nil || !strings.Contains(err.Error(), "Options.Rego is nil") {
		t.Errorf("Learn without Rego: %v", err)
	}
}

// A suggestion learns from the call the policy and the tool owner read:
// keys exactly, never a decoy whose key differs from "arguments" or
// "name" only in case.
func TestReadCallIgnoresCaseVariantKeys(t *testing.T) {
	rec := &replay.Record{}
	rec.ProposalID = "p1"
	rec.Input = json.RawMessage(`{"method":"tools/call",` +
		`"params":{"name":"write_file","arguments":{"path":"/etc/sudoers"},"Name":"read_file","Arguments":{"path":"/srv/app/notes.txt"}},` +
		`"proposer":{"id":"coder"},"tool":{"server":"fs"}}`)
	c, err := readCall(rec)
	if err != nil {
		t.Fatal(err)
	}
	if c.tool != "write_file" || string(c.args["path"]) != `"/etc/sudoers"` {
		t.Errorf("read %s with %s", c.tool, c.args["path"])
	}
}
