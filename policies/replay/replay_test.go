package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/decisionlog"
	"github.com/mewkit/fulfiller/policies"
)

// Candidate policies.
const (
	// mixed fulfils reads, rejects deletes and escalates the rest.
	mixedPolicy = `package fulfiller

decision := {"action": "fulfill", "message": "read-only"} if {
	input.params.name == "read_file"
} else := {"action": "reject", "reason": "unsafe", "message": "never delete"} if {
	input.params.name == "delete_file"
} else := {"action": "escalate"}
`
	looserPolicy = `package fulfiller

decision := {"action": "fulfill"}
`
	stricterPolicy = `package fulfiller

decision := {"action": "reject", "reason": "policy", "message": "closed"}
`
	// pathPolicy fulfils writes under /tmp and escalates other writes: a
	// masked path is absent, so those become escalations.
	pathPolicy = `package fulfiller

decision := {"action": "fulfill"} if {
	startswith(input.params.arguments.path, "/tmp/")
} else := {"action": "escalate"}
`
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// logBuilder writes a decision log with the real decisionlog writer.
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

func (b *logBuilder) record(e fulfill.Event) {
	b.t.Helper()
	b.n++
	e.Time = t0.Add(time.Duration(b.n) * time.Second)
	if e.Revision == "" && e.Stage != fulfill.StageIgnored {
		e.Revision = "rev-old"
	}
	if err := b.log.Record(e); err != nil {
		b.t.Fatal(err)
	}
}

// decide logs the first decision of proposal id (a tools/call of tool by
// proposer) with the old decision d.
func (b *logBuilder) decide(id, proposer, tool, path string, d decision.Decision) {
	b.t.Helper()
	b.decision(id, proposer, tool, path, d, nil)
}

func (b *logBuilder) decision(id, proposer, tool, path string, d decision.Decision, approval *policies.Approval) {
	b.t.Helper()
	env := fmt.Sprintf(`{"protocol":"mew/v0.4","id":%q,"from":%q,"kind":"mcp/proposal","payload":{"method":"tools/call","params":{"name":%q,"arguments":{"path":%q}}}}`,
		id, proposer, tool, path)
	in, err := policies.InputFromEnvelope([]byte(env), t0)
	if err != nil {
		b.t.Fatal(err)
	}
	in.Approval = approval
	d.Revision = "rev-old"
	b.record(fulfill.Event{Stage: fulfill.StageDecided, ProposalID: id, DecisionID: "d-" + id,
		Proposer: proposer, Method: "tools/call", Tool: tool, Decision: &d, Input: in})
}

func (b *logBuilder) outcome(id string, stage fulfill.Stage, reason string) {
	b.t.Helper()
	b.record(fulfill.Event{Stage: stage, ProposalID: id, DecisionID: "d-" + id, Reason: reason})
}

func (b *logBuilder) answer(id, approver, action string, approve bool) {
	b.n++
	b.log.ObserveApproval(elicit.Event{Time: t0.Add(time.Duration(b.n) * time.Second), Kind: elicit.EventAnswered,
		ProposalID: id, Approver: approver, Action: action, Approve: approve, DecisionID: "d-" + id, Revision: "rev-old"})
}

// approved logs a whole approved escalation: the answer, the approved
// outcome, the re-evaluation with the approval, and the fulfilment.
func (b *logBuilder) approved(id, proposer, tool, path string) {
	b.decide(id, proposer, tool, path, decision.Decision{Action: decision.Escalate})
	b.outcome(id, fulfill.StageEscalated, "")
	b.answer(id, "alice", "accept", true)
	b.outcome(id, fulfill.StageApproved, "")
	b.decision(id, proposer, tool, path, decision.Decision{Action: decision.Fulfill},
		&policies.Approval{By: []string{"alice"}, Content: []byte(`{"approve":true}`)})
	b.outcome(id, fulfill.StageFulfilling, "")
	b.outcome(id, fulfill.StageFulfilled, "")
}

// declined logs a declined escalation.
func (b *logBuilder) declined(id, proposer, tool, path string) {
	b.decide(id, proposer, tool, path, decision.Decision{Action: decision.Escalate})
	b.outcome(id, fulfill.StageEscalated, "")
	b.answer(id, "alice", "decline", false)
	b.outcome(id, fulfill.StageRejected, decision.ReasonDisagree)
}

func (b *logBuilder) bytes() []byte {
	b.t.Helper()
	if err := b.log.Close(); err != nil {
		b.t.Fatal(err)
	}
	return b.buf.Bytes()
}

func engine(t testing.TB, src string) *policies.Engine {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.rego"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := policies.Load(context.Background(), policies.Options{Policies: []string{dir}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func run(t *testing.T, log []byte, policy string, opts Options) (*Report, []Change) {
	t.Helper()
	var changes []Change
	opts.OnChange = func(c Change) error { changes = append(changes, c); return nil }
	rep, err := Replay(t.Context(), bytes.NewReader(log), engine(t, policy), opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep, changes
}

// knownLog is a recorded run whose human answers are known:
//
//	p1 read_file   escalated, alice approved
//	p2 delete_file escalated, alice declined
//	p3 write_file  escalated, alice declined
//	p4 read_file   fulfilled by the policy
//	p5 write_file  rejected by the policy
//	p6 read_file   the policy failed closed
//	p7 write_file  escalated, timed out (no human verdict)
func knownLog(t *testing.T) []byte {
	b := newLog(t, decisionlog.Options{})
	b.approved("p1", "coder", "read_file", "/srv/a")
	b.decide("p4", "coder", "read_file", "/srv/b", decision.Decision{Action: decision.Fulfill, Message: "old"})
	b.declined("p2", "coder", "delete_file", "/srv/c")
	b.outcome("p4", fulfill.StageFulfilling, "")
	b.declined("p3", "coder", "write_file", "/srv/d")
	b.decide("p5", "coder", "write_file", "/srv/e", decision.Decision{Action: decision.Reject, Reason: "policy"})
	b.outcome("p5", fulfill.StageRejected, "policy")
	b.decide("p6", "coder", "read_file", "/srv/f", decision.Decision{Action: decision.Reject, Reason: "policy",
		Err: errors.New("eval_conflict_error")})
	b.outcome("p6", fulfill.StageRejected, "policy")
	b.decide("p7", "coder", "write_file", "/srv/g", decision.Decision{Action: decision.Escalate})
	b.outcome("p7", fulfill.StageEscalated, "")
	b.outcome("p7", fulfill.StageRejected, decision.ReasonTimeout)
	return b.bytes()
}

func TestReplayMixedPolicy(t *testing.T) {
	rep, changes := run(t, knownLog(t), mixedPolicy, Options{})
	wantTrans := []Transition{
		{decision.Fulfill, decision.Fulfill, 1},
		{decision.Escalate, decision.Fulfill, 1},
		{decision.Escalate, decision.Escalate, 2},
		{decision.Escalate, decision.Reject, 1},
		{decision.Reject, decision.Fulfill, 1},
		{decision.Reject, decision.Escalate, 1},
	}
	if !reflect.DeepEqual(rep.Transitions, wantTrans) {
		t.Errorf("transitions %+v\nwant %+v", rep.Transitions, wantTrans)
	}
	if rep.Replayed != 7 || rep.Changed != 4 {
		t.Errorf("replayed %d changed %d, want 7 and 4", rep.Replayed, rep.Changed)
	}
	wantHumans := Humans{Answered: 3, Approved: 1, Declined: 2, Agreements: 2, AskedAgain: 1}
	if rep.Humans != wantHumans {
		t.Errorf("humans %+v, want %+v", rep.Humans, wantHumans)
	}
	// p1's re-evaluation (with the approval) is counted apart.
	if re := rep.Reevaluations; re.Replayed != 1 || re.Changed != 0 ||
		!reflect.DeepEqual(re.Transitions, []Transition{{decision.Fulfill, decision.Fulfill, 1}}) {
		t.Errorf("reevaluations %+v", re)
	}
	var got []string
	for _, c := range changes {
		got = append(got, fmt.Sprintf("%d %s %s %s %s>%s %s %q %q", c.Line, c.ProposalID, c.Proposer, c.Tool,
			c.Old.Action, c.New.Action, c.New.Reason, c.New.Message, c.Old.Error))
	}
	want := []string{
		`1 p1 coder read_file escalate>fulfill  "read-only" ""`,
		`9 p2 coder delete_file escalate>reject unsafe "never delete" ""`,
		`18 p5 coder write_file reject>escalate  "" ""`,
		`20 p6 coder read_file reject>fulfill  "read-only" "eval_conflict_error"`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("changes\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if rep.Malformed.Count != 0 || rep.Pending.Evicted != 0 || rep.Pending.Unfinished != 0 || rep.Masked != 0 {
		t.Errorf("report %+v", rep)
	}
}

func TestReplayLooserAndStricter(t *testing.T) {
	log := knownLog(t)
	rep, _ := run(t, log, looserPolicy, Options{})
	if want := (Humans{Answered: 3, Approved: 1, Declined: 2, Agreements: 1, FalseApprovals: 2}); rep.Humans != want {
		t.Errorf("looser: humans %+v, want %+v", rep.Humans, want)
	}
	if rep.Changed != 6 {
		t.Errorf("looser: changed %d, want 6 (all but p4)", rep.Changed)
	}
	rep, _ = run(t, log, stricterPolicy, Options{})
	if want := (Humans{Answered: 3, Approved: 1, Declined: 2, Agreements: 2, NeedlessAsks: 1}); rep.Humans != want {
		t.Errorf("stricter: humans %+v, want %+v", rep.Humans, want)
	}
	wantTrans := []Transition{
		{decision.Fulfill, decision.Reject, 1},
		{decision.Escalate, decision.Reject, 4},
		{decision.Reject, decision.Reject, 2},
	}
	if !reflect.DeepEqual(rep.Transitions, wantTrans) {
		t.Errorf("stricter: transitions %+v", rep.Transitions)
	}
	// The re-evaluation of p1 (fulfill then) would now be rejected.
	if re := rep.Reevaluations; re.Replayed != 1 || re.Changed != 1 {
		t.Errorf("stricter: reevaluations %+v", re)
	}
}

// TestReplayMasked: a masked input is replayed without the erased value,
// and the report says so.
func TestReplayMasked(t *testing.T) {
	b := newLog(t, decisionlog.Options{Mask: []string{"params.arguments.path"}})
	b.decide("m1", "coder", "write_file", "/tmp/x", decision.Decision{Action: decision.Fulfill})
	b.outcome("m1", fulfill.StageFulfilling, "")
	log := b.bytes()
	if !bytes.Contains(log, []byte(`"erased":[`)) || bytes.Contains(log, []byte("/tmp/x")) {
		t.Fatalf("the log was not masked:\n%s", log)
	}
	rep, changes := run(t, log, pathPolicy, Options{})
	if rep.Masked != 1 || rep.MaskedChanged != 1 || len(changes) != 1 || !changes[0].Masked {
		t.Errorf("masked %d changed %d, changes %+v", rep.Masked, rep.MaskedChanged, changes)
	}
	var out bytes.Buffer
	p, _ := NewPrinter(&out, "pretty")
	if err := p.Finish(rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "masked inputs: 1 replayed without their erased values (1 of them changed; the mask may be why)\n") {
		t.Errorf("pretty output hides the mask:\n%s", out.String())
	}
}

// TestReplayMalformed: bad lines are counted with their numbers, the rest
// is replayed.
func TestReplayMalformed(t *testing.T) {
	good := knownLog(t)
	var log bytes.Buffer
	log.WriteString("not json\n")
	log.Write(good)
	log.WriteString(`{"type":"decision"}` + "\n")
	log.WriteString(`{"decision_id":"x","type":"ignored","stage":"ignored","proposal_id":"","revision":null,"reason":"invalid"}` + "\n") // a frame without id: fine
	log.WriteString(`{"type":"decision","proposal_id":"x","result":"fulfill","input":{}}` + "\n")
	log.WriteString("\n")
	log.WriteString(`{"type":"outcome","proposal_id":"p9"` + "\n") // cut off: no newline at the end
	log.WriteString(strings.Repeat("x", 5000) + "\n")
	log.WriteString(`{"truncated`)
	lines := int64(bytes.Count(good, []byte("\n")))
	rep, _ := run(t, log.Bytes(), mixedPolicy, Options{MaxLine: 4096})
	if rep.Replayed != 7 {
		t.Errorf("replayed %d, want 7", rep.Replayed)
	}
	if rep.Malformed.Count != 6 {
		t.Errorf("malformed %d, want 6: %+v", rep.Malformed.Count, rep.Malformed.First)
	}
	var nums []int64
	for _, m := range rep.Malformed.First {
		nums = append(nums, m.Line)
	}
	if want := []int64{1, lines + 2, lines + 4, lines + 6, lines + 7}; !reflect.DeepEqual(nums, want) {
		t.Errorf("malformed lines %v, want %v (%+v)", nums, want, rep.Malformed.First)
	}
	if rep.Lines != lines+8 {
		t.Errorf("lines %d, want %d", rep.Lines, lines+8)
	}
}

// TestReplayBounded: with more interleaved escalations than the bound,
// the oldest are evicted and counted, and the map never grows past it.
func TestReplayBounded(t *testing.T) {
	b := newLog(t, decisionlog.Options{})
	const n = 50
	for i := range n {
		b.decide(fmt.Sprintf("e%d", i), "coder", "read_file", "/srv", decision.Decision{Action: decision.Escalate})
	}
	for i := range n {
		id := fmt.Sprintf("e%d", i)
		b.answer(id, "alice", "accept", true)
		b.outcome(id, fulfill.StageApproved, "")
	}
	rep, _ := run(t, b.bytes(), looserPolicy, Options{MaxPending: 8})
	if rep.Pending.Peak != 8 || rep.Pending.Evicted != n-8 {
		t.Errorf("pending %+v, want peak 8, evicted %d", rep.Pending, n-8)
	}
	// Only the 8 that stayed are scored.
	if rep.Humans.Approved != 8 || rep.Humans.Agreements != 8 {
		t.Errorf("humans %+v", rep.Humans)
	}
}

// TestReplayDuplicateDecision: only a proposal's first decision is
// replayed; a forged or repeated later one is counted, not scored.
func TestReplayDuplicateDecision(t *testing.T) {
	b := newLog(t, decisionlog.Options{})
	b.decide("d1", "coder", "delete_file", "/x", decision.Decision{Action: decision.Escalate})
	b.decide("d1", "coder", "read_file", "/x", decision.Decision{Action: decision.Escalate})
	b.answer("d1", "alice", "decline", false)
	b.outcome("d1", fulfill.StageRejected, decision.ReasonDisagree)
	rep, _ := run(t, b.bytes(), mixedPolicy, Options{})
	if rep.Replayed != 1 || rep.Duplicates != 1 || rep.Humans.Agreements != 1 || rep.Humans.FalseApprovals != 0 {
		t.Errorf("report %+v", rep)
	}
}

// TestReplayForgedAnswerNotCounted: a forgery record (a bad signature) is
// no human verdict.
func TestReplayForgedAnswerNotCounted(t *testing.T) {
	b := newLog(t, decisionlog.Options{})
	b.decide("f1", "coder", "write_file", "/x", decision.Decision{Action: decision.Escalate})
	b.log.ObserveApproval(elicit.Event{Kind: elicit.EventForgery, ProposalID: "f1", Approver: "alice", Action: "decline", DecisionID: "d-f1", Revision: "rev-old"})
	b.outcome("f1", fulfill.StageRejected, decision.ReasonTimeout)
	rep, _ := run(t, b.bytes(), looserPolicy, Options{})
	if rep.Humans != (Humans{}) {
		t.Errorf("humans %+v, want none", rep.Humans)
	}
}

func TestReplayProgressAndCancel(t *testing.T) {
	log := knownLog(t)
	var calls []int64
	var read int64
	_, err := Replay(t.Context(), bytes.NewReader(log), engine(t, mixedPolicy), Options{
		ProgressEvery: 10, OnProgress: func(lines, n int64) { calls, read = append(calls, lines), n },
	})
	if err != nil {
		t.Fatal(err)
	}
	total := int64(bytes.Count(log, []byte("\n")))
	if len(calls) == 0 || calls[0] != 10 || calls[len(calls)-1] != total {
		t.Errorf("progress calls %v, want 10 … %d", calls, total)
	}
	if read != int64(len(log)) {
		t.Errorf("progress ends at %d bytes, want %d", read, len(log))
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Replay(ctx, bytes.NewReader(log), engine(t, mixedPolicy), Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled replay: %v", err)
	}
}

func TestProgressBar(t *testing.T) {
	var out bytes.Buffer
	update, done := ProgressBar(&out, 200)
	update(10, 50)
	update(40, 200)
	done()
	want := "\rreplay: [#######                       ]  25% 10 lines" +
		"\rreplay: [##############################] 100% 40 lines\n"
	if out.String() != want {
		t.Errorf("bar %q, want %q", out.String(), want)
	}
	out.Reset()
	update, done = ProgressBar(&out, 0) // stdin: size unknown
	update(7, 99)
	done()
	if out.String() != "\rreplay: 7 lines\n" {
		t.Errorf("bar without size %q", out.String())
	}
	out.Reset()
	_, done = ProgressBar(&out, 10)
	done()
	if out.Len() != 0 {
		t.Errorf("a bar never drawn printed %q", out.String())
	}
}

// TestPrettyEscapesControls: ids, names and messages in the log came from
// proposers; the pretty output escapes their control characters, so a
// proposal cannot rewrite the terminal of whoever reviews the replay.
func TestPrettyEscapesControls(t *testing.T) {
	var out bytes.Buffer
	p, err := NewPrinter(&out, "pretty")
	if err != nil {
		t.Fatal(err)
	}
	c := Change{Line: 3, ProposalID: "p\x1b[2J1", Proposer: "cod\ber", Tool: "read\u202efile",
		Old: Verdict{Action: decision.Escalate}, New: Verdict{Action: decision.Reject, Reason: "un\rsafe", Message: "m\x1b[1A", Error: "e\x07rr"}}
	if err := p.Change(c); err != nil {
		t.Fatal(err)
	}
	want := "changed decisions (line, proposal, proposer, tool: old → new, new reason):\n" +
		`  line 3 p\x1b[2J1 cod\ber read\u202efile: escalate → reject (un\rsafe, error: e\arr)` + "\n"
	if out.String() != want {
		t.Errorf("got  %q\nwant %q", out.String(), want)
	}
}
