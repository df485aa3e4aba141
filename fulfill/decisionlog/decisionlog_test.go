package decisionlog_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/decisionlog"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/policies"
)

// fakeSpace is a space with one tool owner, "fs", that answers every
// fulfilment request at once: with an error for the tool "err", with a
// result otherwise. Answers reach the Fulfiller through the same channel
// as proposals, by way of a forwarder, so Send never blocks on Run.
type fakeSpace struct {
	out chan agent.Envelope

	mu      sync.Mutex
	rejects map[string]string // proposal id → reason
	fulfils map[string]int    // proposal id → fulfilment requests
}

func newFakeSpace(n int) *fakeSpace {
	return &fakeSpace{out: make(chan agent.Envelope, 2*n+16), rejects: map[string]string{}, fulfils: map[string]int{}}
}

func (s *fakeSpace) ID() string                       { return "fulfiller" }
func (s *fakeSpace) NextRPCID() int64                 { return 1 }
func (s *fakeSpace) Can(string, json.RawMessage) bool { return true }
func (s *fakeSpace) Roster() []agent.Participant      { return nil }
func (s *fakeSpace) Participant(id string) (agent.Participant, bool) {
	return agent.Participant{ID: id}, true
}
func (s *fakeSpace) RequestEnvelope(context.Context, agent.Envelope) (agent.RPCResponse, error) {
	return agent.RPCResponse{}, errors.New("no discovery in this fake")
}

func (s *fakeSpace) Send(_ context.Context, env agent.Envelope) (agent.Envelope, error) {
	if env.ID == "" {
		env.ID = agent.NewID("fulfiller")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch env.Kind {
	case agent.KindReject:
		var p struct{ Reason string }
		_ = json.Unmarshal(env.Payload, &p)
		s.rejects[env.CorrelationID.First()] = p.Reason
	case agent.KindRequest:
		var req agent.RPCRequest
		_ = json.Unmarshal(env.Payload, &req)
		var call struct{ Name string }
		_ = json.Unmarshal(req.Params, &call)
		s.fulfils[env.CorrelationID.First()]++
		payload := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[]}}`, req.ID)
		if call.Name == "err" {
			payload = fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32000,"message":"boom"}}`, req.ID)
		}
		s.out <- agent.Envelope{ID: agent.NewID("fs"), From: "fs", To: []string{"fulfiller"}, Kind: agent.KindResponse,
			CorrelationID: agent.CorrelationIDs{env.ID}, Payload: json.RawMessage(payload)}
	}
	return env, nil
}

// toolDecider fulfils the tools "ok" and "err" at fs and rejects the rest.
type toolDecider struct{}

func (toolDecider) Decide(_ context.Context, in *policies.Input) decision.Decision {
	if in.Tool != nil && (in.Tool.Name == "ok" || in.Tool.Name == "err") {
		return decision.Decision{Action: decision.Fulfill, Target: "fs", Revision: "test-rev"}
	}
	return decision.Decision{Action: decision.Reject, Reason: "policy", Message: "no", Revision: "test-rev"}
}

func proposal(id, payload string) agent.Envelope {
	return agent.Envelope{Protocol: "mew/v0.4", ID: id, From: "coder", Kind: agent.KindProposal, Payload: json.RawMessage(payload)}
}

// runWorld runs a real Fulfiller over the fake space with log as its
// observer, feeds it the proposals, waits until log holds want records and
// shuts the Fulfiller down.
func runWorld(t *testing.T, log *decisionlog.Logger, props []agent.Envelope, want uint64) *fakeSpace {
	t.Helper()
	sp := newFakeSpace(len(props))
	ful := fulfill.New(sp, toolDecider{}, fulfill.Config{MaxPending: 2 * len(props), MaxPendingPerProposer: 2 * len(props), MaxInflight: 16, Observer: log})
	in := make(chan agent.Envelope)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ful.Run(ctx, in) }()
	stopFwd := make(chan struct{})
	fwdDone := make(chan struct{})
	go func() { // the gateway's side: responses flow back in
		defer close(fwdDone)
		for {
			select {
			case env := <-sp.out:
				select {
				case in <- env:
				case <-stopFwd:
					return
				}
			case <-stopFwd:
				return
			}
		}
	}()
	for _, p := range props {
		in <- p
	}
	poll.Until(t, fmt.Sprintf("%d records", want), func() bool { return log.Records() >= want })
	close(stopFwd)
	<-fwdDone
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	return sp
}

func readRecords(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %d is not JSON: %v: %s", len(out)+1, err, sc.Bytes())
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFloodEveryDecisionAndOutcomeLoggedOnce pushes 6 000 proposals (600
// with -short) through a real Fulfiller as fast as it takes them and
// checks that the log holds exactly the lines their journeys call for —
// one decision per evaluated proposal, one line per outcome change — with
// none lost or doubled, even with a buffer far smaller than the log.
func TestFloodEveryDecisionAndOutcomeLoggedOnce(t *testing.T) {
	n := 6000 // over 14 000 log lines
	if testing.Short() {
		// Soak size off: 1 500 lines, still many times the buffer (checked
		// below), from 16 decisions in flight at once.
		n = 600
	}
	const bufferSize = 4096
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	// Interval sync: this test is about nothing lost or doubled under a
	// flood; waiting for an fsync per answer would only make it slow.
	log, err := decisionlog.Open(path, decisionlog.Options{Sync: decisionlog.SyncInterval, BufferSize: bufferSize, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	kinds := []string{"ok", "err", "no", "invalid"}
	props := make([]agent.Envelope, n)
	for i := range props {
		id := fmt.Sprintf("p-%05d", i)
		switch kind := kinds[i%4]; kind {
		case "invalid":
			props[i] = proposal(id, `{"method":7}`)
		default:
			props[i] = proposal(id, fmt.Sprintf(`{"method":"tools/call","params":{"name":%q,"arguments":{"i":%d}}}`, kind, i))
		}
	}
	// ok, err: decided, fulfilling, fulfilled; no: decided, rejected;
	// invalid: rejected (envelope validation comes before the policy).
	want := uint64(n/4*3 + n/4*3 + n/4*2 + n/4*1)
	sp := runWorld(t, log, props, want)
	if err := log.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() < 10*bufferSize {
		t.Fatalf("log of %d bytes: want many buffers' worth, so that the buffer fills and is written early again and again", fi.Size())
	}
	recs := readRecords(t, path)
	if uint64(len(recs)) != want {
		t.Fatalf("log has %d lines, want %d", len(recs), want)
	}
	type key struct{ id, stage string }
	seen := map[key]map[string]any{}
	owner := map[string]string{} // decision id → the proposal it decided
	for _, r := range recs {
		pid, _ := r["proposal_id"].(string)
		if pid == "" {
			t.Fatalf("record without proposal_id: %v", r)
		}
		// Every line of a proposal carries its decision's id, and no
		// two proposals share one.
		did, _ := r["decision_id"].(string)
		if did == "" || (owner[did] != "" && owner[did] != pid) {
			t.Fatalf("decision_id %q missing or shared by %s and %s", did, owner[did], pid)
		}
		owner[did] = pid
		if _, ok := r["revision"]; !ok {
			t.Fatalf("record without revision: %v", r)
		}
		k := key{pid, r["stage"].(string)}
		if seen[k] != nil {
			t.Fatalf("%s logged twice for %s", k.stage, k.id)
		}
		seen[k] = r
	}
	for i := range n {
		id := fmt.Sprintf("p-%05d", i)
		var stages []string
		switch kinds[i%4] {
		case "ok", "err":
			stages = []string{"decided", "fulfilling", "fulfilled"}
		case "no":
			stages = []string{"decided", "rejected"}
		case "invalid":
			stages = []string{"rejected"}
		}
		for _, s := range stages {
			if seen[key{id, s}] == nil {
				t.Fatalf("%s: no %s record", id, s)
			}
			if got, want := seen[key{id, s}]["decision_id"], seen[key{id, stages[0]}]["decision_id"]; got != want {
				t.Fatalf("%s: %s has decision_id %v, its decision %v", id, s, got, want)
			}
			// Revision: the policy's where it decided, null where it never ran.
			want := any("test-rev")
			if kinds[i%4] == "invalid" {
				want = nil
			}
			if got := seen[key{id, s}]["revision"]; got != want {
				t.Fatalf("%s: %s has revision %v, want %v", id, s, got, want)
			}
		}
		switch kinds[i%4] {
		case "ok":
			if got := seen[key{id, "fulfilled"}]["status"]; got != "ok" {
				t.Fatalf("%s: status %v, want ok", id, got)
			}
		case "err":
			r := seen[key{id, "fulfilled"}]
			if r["status"] != "error" || r["rpc_error"].(map[string]any)["message"] != "boom" {
				t.Fatalf("%s: fulfilled record %v, want status error with the rpc error", id, r)
			}
		case "no":
			r := seen[key{id, "rejected"}]
			if r["reason"] != "policy" || seen[key{id, "decided"}]["revision"] != "test-rev" {
				t.Fatalf("%s: %v", id, r)
			}
		case "invalid":
			if r := seen[key{id, "rejected"}]; r["reason"] != "invalid" {
				t.Fatalf("%s: %v", id, r)
			}
		}
	}
	// And the wire agrees with the log: one answer each.
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if len(sp.rejects)+len(sp.fulfils) != n {
		t.Fatalf("%d rejects + %d fulfilments on the wire, want %d answers", len(sp.rejects), len(sp.fulfils), n)
	}
}

// TestMaskErasesArgumentsEverywhere: a mask of params.arguments.password
// erases the value from params, tool and the raw proposal alike, and says
// so in erased.
func TestMaskErasesArgumentsEverywhere(t *testing.T) {
	for _, mask := range []string{"params.arguments.password", "tool.arguments.password", "input.params.arguments.password"} {
		t.Run(mask, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "d.jsonl")
			log, err := decisionlog.Open(path, decisionlog.Options{Mask: []string{mask}})
			if err != nil {
				t.Fatal(err)
			}
			props := []agent.Envelope{proposal("p-1", `{"method":"tools/call","params":{"name":"ok","arguments":{"user":"bob","password":"s3cret"}}}`)}
			runWorld(t, log, props, 3)
			if err := log.Close(); err != nil {
				t.Fatal(err)
			}
			raw, _ := os.ReadFile(path)
			if bytes.Contains(raw, []byte("s3cret")) {
				t.Fatalf("secret in the log:\n%s", raw)
			}
			recs := readRecords(t, path)
			d := recs[0]
			if d["type"] != "decision" {
				t.Fatalf("first record %v", d)
			}
			in := d["input"].(map[string]any)
			if got := in["params"].(map[string]any)["arguments"].(map[string]any); got["user"] != "bob" || got["password"] != nil {
				t.Fatalf("params.arguments = %v", got)
			}
			if got := in["tool"].(map[string]any)["arguments"].(map[string]any); got["user"] != "bob" || got["password"] != nil {
				t.Fatalf("tool.arguments = %v", got)
			}
			wantErased := []any{"/input/params/arguments/password", "/input/proposal/payload/params/arguments/password", "/input/tool/arguments/password"}
			if fmt.Sprint(d["erased"]) != fmt.Sprint(wantErased) {
				t.Fatalf("erased = %v, want %v", d["erased"], wantErased)
			}
		})
	}
}

// TestApprovalRecords: an accepted answer of a keyed approver is logged
// as verified, a forgery as not verified, an unkeyed answer without the
// field, a delegation with whom it went to.
func TestApprovalRecords(t *testing.T) {
	var buf bytes.Buffer
	log := decisionlog.New(&buf, decisionlog.Options{Keyed: func(a string) bool { return a == "alice" }})
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	const did = "0b5a5c2e-9c1f-4e0a-8d1c-3f1e2d3c4b5a"
	log.ObserveApproval(elicit.Event{Time: at, Kind: elicit.EventAnswered, ProposalID: "p-1", DecisionID: did, Revision: "rev-1", Approver: "alice", Action: "accept", Approve: true})
	log.ObserveApproval(elicit.Event{Time: at, Kind: elicit.EventForgery, ProposalID: "p-1", DecisionID: did, Revision: "rev-1", Approver: "alice", From: "mallory", Action: "accept", Reason: "no signature"})
	log.ObserveApproval(elicit.Event{Time: at, Kind: elicit.EventAnswered, ProposalID: "p-1", DecisionID: did, Revision: "rev-1", Approver: "bob", Action: "decline", Reason: "not today"})
	log.ObserveApproval(elicit.Event{Time: at, Kind: elicit.EventAsked, ProposalID: "p-1", DecisionID: did, Revision: "rev-1", Approver: "bob"}) // not an answer: not logged
	log.ObserveApproval(elicit.Event{Time: at, Kind: elicit.EventDelegated, ProposalID: "p-1", DecisionID: did, Revision: "rev-1", Approver: "carol", RequestID: "q-1", To: "dave"})
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4:\n%s", len(lines), buf.String())
	}
	want := []string{
		`"type":"approval","stage":"answered","proposal_id":"p-1","revision":"rev-1","approver":"alice","action":"accept","approve":true,"signature_verified":true}`,
		`"type":"approval","stage":"forgery","proposal_id":"p-1","revision":"rev-1","reason":"no signature","message":"answer from mallory ignored","approver":"alice","action":"accept","signature_verified":false}`,
		`"type":"approval","stage":"answered","proposal_id":"p-1","revision":"rev-1","reason":"not today","approver":"bob","action":"decline","approve":false}`,
		`"type":"approval","stage":"delegated","proposal_id":"p-1","revision":"rev-1","message":"carol handed their request on to dave","approver":"carol","to":"dave"}`,
	}
	for i, l := range lines {
		if l != `{"decision_id":"`+did+`","timestamp":"2026-11-22T10:00:00Z",`+want[i] {
			t.Errorf("line %d:\n got %s\nwant …%s", i+1, l, want[i])
		}
	}
}

// TestReopenAfterRotation: after the file is renamed (logrotate), Reopen
// starts a new file at the path; nothing is lost or written twice.
func TestReopenAfterRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "d.jsonl")
	log, err := decisionlog.Open(path, decisionlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ev := func(id string) fulfill.Event {
		return fulfill.Event{Time: time.Now(), Stage: fulfill.StageRejected, ProposalID: id, Reason: "busy"}
	}
	log.Observe(ev("a"))
	log.Observe(ev("b"))
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := log.Reopen(); err != nil {
		t.Fatal(err)
	}
	log.Observe(ev("c"))
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(readRecords(t, path+".1")); got != 2 {
		t.Fatalf("rotated file has %d records, want 2", got)
	}
	recs := readRecords(t, path)
	if len(recs) != 1 || recs[0]["proposal_id"] != "c" {
		t.Fatalf("new file: %v", recs)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
}

// TestShadowRecords: a shadow decision is its own line, type and stage
// "shadow", governed by the live decision it shadows (decision_id,
// revision); a failed shadow carries its error; a dropped one is not
// logged (the metrics count it).
func TestShadowRecords(t *testing.T) {
	var buf bytes.Buffer
	log := decisionlog.New(&buf, decisionlog.Options{})
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	const did = "0b5a5c2e-9c1f-4e0a-8d1c-3f1e2d3c4b5a"
	ev := func(r fulfill.ShadowResult) fulfill.Event {
		return fulfill.Event{Time: at, Stage: fulfill.StageShadow, ProposalID: "p-1", DecisionID: did, Revision: "sha256:live",
			Proposer: "coder", Method: "tools/call", Tool: "add", Shadow: &r}
	}
	log.Observe(ev(fulfill.ShadowResult{Live: decision.Escalate, Latency: 1500,
		Decision: decision.Decision{Action: decision.Fulfill, Revision: "sha256:shadow"}}))
	log.Observe(ev(fulfill.ShadowResult{Live: decision.Fulfill, Latency: 2000, Agrees: true,
		Decision: decision.Decision{Action: decision.Fulfill, Revision: "sha256:shadow"}}))
	log.Observe(ev(fulfill.ShadowResult{Live: decision.Fulfill, Latency: 100000000,
		Decision: decision.Decision{Action: decision.Reject, Reason: "policy", Revision: "sha256:shadow", Err: policies.ErrEvalTimeout}}))
	log.Observe(ev(fulfill.ShadowResult{Live: decision.Fulfill, Dropped: true}))
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	head := `{"decision_id":"` + did + `","timestamp":"2026-11-22T10:00:00Z","type":"shadow","stage":"shadow","proposal_id":"p-1","revision":"sha256:live","proposer":"coder","method":"tools/call","tool":"add",`
	want := []string{
		`"shadow":{"revision":"sha256:shadow","live":"escalate","result":{"action":"fulfill","revision":"sha256:shadow"},"agrees":false,"latency_ns":1500}}`,
		`"shadow":{"revision":"sha256:shadow","live":"fulfill","result":{"action":"fulfill","revision":"sha256:shadow"},"agrees":true,"latency_ns":2000}}`,
		`"shadow":{"revision":"sha256:shadow","live":"fulfill","result":{"action":"reject","reason":"policy","revision":"sha256:shadow","error":"policy evaluation timed out"},"error":"policy evaluation timed out","agrees":false,"latency_ns":100000000}}`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, l := range lines {
		if l != head+want[i] {
			t.Errorf("line %d:\n got %s\nwant …%s", i+1, l, want[i])
		}
	}
}

// A decision a grant let through names it, and a grant made is its own
// line.
func TestGrantRecords(t *testing.T) {
	var buf bytes.Buffer
	log := decisionlog.New(&buf, decisionlog.Options{})
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	base := fulfill.Event{Time: at, ProposalID: "p-1", DecisionID: "d-1", Revision: "sha256:live", Proposer: "coder", Method: "tools/call", Tool: "write_file"}
	granted := base
	granted.Stage, granted.GrantID, granted.By, granted.Message = fulfill.StageGranted, "grant-1", []string{"alice"}, "calls like this allowed for 1h, until 2026-11-22T11:00:00Z"
	log.Observe(granted)
	decided := base
	decided.Stage, decided.GrantID, decided.Decision = fulfill.StageDecided, "grant-1", &decision.Decision{Action: decision.Fulfill, Message: "granted", Revision: "sha256:live"}
	log.Observe(decided)
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	head := `{"decision_id":"d-1","timestamp":"2026-11-22T10:00:00Z",`
	want := []string{
		head + `"type":"grant","stage":"granted","proposal_id":"p-1","revision":"sha256:live","proposer":"coder","method":"tools/call","tool":"write_file","grant_id":"grant-1","message":"calls like this allowed for 1h, until 2026-11-22T11:00:00Z","by":["alice"]}`,
		head + `"type":"decision","stage":"decided","proposal_id":"p-1","revision":"sha256:live","proposer":"coder","method":"tools/call","tool":"write_file","result":{"action":"fulfill","message":"granted","revision":"sha256:live"},"grant_id":"grant-1"}`,
	}
	if got := strings.Split(strings.TrimSpace(buf.String()), "\n"); !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A fulfilment that ran as an MCP task: the task's record, and the
// fulfilled line that relayed its result, both name the task.
func TestTaskRecords(t *testing.T) {
	var buf bytes.Buffer
	log := decisionlog.New(&buf, decisionlog.Options{})
	at := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	base := fulfill.Event{Time: at, ProposalID: "p-1", DecisionID: "d-1", Revision: "sha256:live", Proposer: "coder", Method: "tools/call", Tool: "migrate", Target: "jobs"}
	task := &fulfill.TaskInfo{ID: "T1", Spec: fulfill.TaskSpecExtension, Status: "working", Created: at, Deadline: at.Add(time.Hour)}
	created := base
	created.Stage, created.Task = fulfill.StageTask, task
	log.Observe(created)
	done := base
	ended := *task
	ended.Status = "completed"
	done.Stage, done.Task, done.Result, done.Latency = fulfill.StageFulfilled, &ended, json.RawMessage(`{"content":[]}`), time.Second
	log.Observe(done)
	// The tool's own failure (isError: true) is "tool_error", not "ok".
	failed := base
	failed.ProposalID = "p-2"
	failed.Stage, failed.Result, failed.Latency = fulfill.StageFulfilled, json.RawMessage(`{"content":[{"type":"text","text":"ENOENT"}],"isError":true}`), time.Millisecond
	log.Observe(failed)
	// Keys exactly: an "IsError" beside the real one does not count.
	decoy := failed
	decoy.ProposalID = "p-3"
	decoy.Result = json.RawMessage(`{"content":[],"IsError":true,"isError":false}`)
	log.Observe(decoy)
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	head := `{"decision_id":"d-1","timestamp":"2026-11-25T10:00:00Z",`
	meta := `"proposal_id":"p-1","revision":"sha256:live","proposer":"coder","method":"tools/call","tool":"migrate","target":"jobs",`
	want := []string{
		head + `"type":"outcome","stage":"task",` + meta + `"task":{"id":"T1","spec":"2026-07-28","status":"working","created":"2026-11-25T10:00:00Z","deadline":"2026-11-25T11:00:00Z"}}`,
		head + `"type":"outcome","stage":"fulfilled",` + meta + `"latency_ns":1000000000,"status":"ok","task":{"id":"T1","spec":"2026-07-28","status":"completed","created":"2026-11-25T10:00:00Z","deadline":"2026-11-25T11:00:00Z"}}`,
		head + `"type":"outcome","stage":"fulfilled",` + strings.Replace(meta, "p-1", "p-2", 1) + `"latency_ns":1000000,"status":"tool_error"}`,
		head + `"type":"outcome","stage":"fulfilled",` + strings.Replace(meta, "p-1", "p-3", 1) + `"latency_ns":1000000,"status":"ok"}`,
	}
	if got := strings.Split(strings.TrimSpace(buf.String()), "\n"); !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestInvisibleCharactersEscapedInTheLine (issue 41, row 1): text others
// wrote (a reason, a message, the arguments in the input) reaches the
// log's lines with bidirectional and invisible characters as JSON \u
// escapes: a person reading the file (less, grep) sees them, and a JSON
// reader gets the same text.
func TestInvisibleCharactersEscapedInTheLine(t *testing.T) {
	var buf bytes.Buffer
	log := decisionlog.New(&buf, decisionlog.Options{})
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	const reason = "ls \u2067# list the\u2069 && r\u200bm -rf / \u0085\ufeff"
	log.ObserveApproval(elicit.Event{Time: at, Kind: elicit.EventAnswered, ProposalID: "p\u202e1", DecisionID: "d-1", Revision: "rev-1", Approver: "bob", Action: "decline", Reason: reason})
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSpace(buf.String())
	for _, r := range "\u2067\u2069\u200b\u202e\u0085\ufeff" {
		if strings.ContainsRune(line, r) {
			t.Errorf("the line holds %U raw: %s", r, line)
		}
	}
	if want := `"proposal_id":"p\u202e1"`; !strings.Contains(line, want) {
		t.Errorf("line lacks %s: %s", want, line)
	}
	if want := `"reason":"ls \u2067# list the\u2069 \u0026\u0026 r\u200bm -rf / \u0085\ufeff"`; !strings.Contains(line, want) {
		t.Errorf("line lacks %s: %s", want, line)
	}
	var r struct {
		ProposalID string `json:"proposal_id"`
		Reason     string
	}
	if err := json.Unmarshal([]byte(line), &r); err != nil || r.Reason != reason || r.ProposalID != "p\u202e1" {
		t.Errorf("read back %+v %v", r, err)
	}
}

// TestPolicyTimeoutRecords (issue 41, row 13): the decision log says when
// an evaluation ran past the policy timeout: "retried" when the second
// evaluation decided, "busy" when it timed out too and the answer was a
// busy reject, never a policy verdict.
func TestPolicyTimeoutRecords(t *testing.T) {
	var buf bytes.Buffer
	log := decisionlog.New(&buf, decisionlog.Options{})
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	base := fulfill.Event{Time: at, Stage: fulfill.StageDecided, ProposalID: "p-1", DecisionID: "d-1", Revision: "sha256:live"}
	retried := base
	retried.Decision = &decision.Decision{Action: decision.Fulfill, Message: "read-only", Revision: "sha256:live", Retried: true}
	log.Observe(retried)
	busy := base
	busy.ProposalID, busy.DecisionID = "p-2", "d-2"
	busy.Decision = &decision.Decision{Action: decision.Reject, Reason: "busy", Message: "fulfiller is too loaded to decide this proposal now; propose it again",
		Revision: "sha256:live", Retried: true, Err: errors.New("policy evaluation timed out after 100ms, twice: answered busy, not policy")}
	log.Observe(busy)
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"decision_id":"d-1","timestamp":"2026-11-22T10:00:00Z","type":"decision","stage":"decided","proposal_id":"p-1","revision":"sha256:live","result":{"action":"fulfill","message":"read-only","revision":"sha256:live"},"policy_timeout":"retried"}`,
		`{"decision_id":"d-2","timestamp":"2026-11-22T10:00:00Z","type":"decision","stage":"decided","proposal_id":"p-2","revision":"sha256:live","result":{"action":"reject","reason":"busy","message":"fulfiller is too loaded to decide this proposal now; propose it again","revision":"sha256:live","error":"policy evaluation timed out after 100ms, twice: answered busy, not policy"},"error":"policy evaluation timed out after 100ms, twice: answered busy, not policy","policy_timeout":"busy"}`,
	}
	if got := strings.Split(strings.TrimSpace(buf.String()), "\n"); !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
