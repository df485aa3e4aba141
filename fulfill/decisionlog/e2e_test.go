package decisionlog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/decisionlog"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/spacetest"
	"github.com/mewkit/fulfiller/internal/toolserver"
	"github.com/mewkit/fulfiller/policies"
)

// e2ePolicy fulfils reads, escalates writes to alice (who may edit the
// path) and rejects anything under /etc — also after an edit.
const e2ePolicy = `package fulfiller

default decision := {"action": "reject", "reason": "policy", "message": "not allowed"}

decision := {"action": "fulfill"} if input.tool.name == "read_file"

decision := {"action": "escalate", "approvers": ["alice"], "editable": ["path"], "message": "writes need a human"} if {
	input.tool.name == "write_file"
	not unsafe
}

decision := {"action": "reject", "reason": "unsafe", "message": "nothing under /etc"} if unsafe

unsafe if startswith(input.tool.arguments.path, "/etc/")
`

// TestE2EEveryLineJoinsItsDecision runs a whole space — the in-process
// gateway, a file tool server, the real engine and Fulfiller with elicit's codec,
// an approver answering by hand — through every kind of journey with the
// decision log on, and checks docs/design.md rule 10 on every line: proposal_id,
// decision_id and revision are present; every line after a decision
// record carries that record's decision_id and revision (a re-evaluation
// after an edit governs what follows it), the ignored line of a replayed
// id too (it joins the original's decision); lines of a proposal that no
// policy decided share one id and have revision null.
func TestE2EEveryLineJoinsItsDecision(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, err := space.New(space.Config{Tokens: map[string][]agent.Capability{
		"fulfiller-token": {{Kind: "mcp/*"}, {Kind: "chat"}},
		"coder-token":     {{Kind: "mcp/proposal"}, {Kind: "mcp/withdraw"}, {Kind: "chat"}},
		"tool-token":      {{Kind: "mcp/response"}, {Kind: "chat"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	fs := spacetest.Join(t, ctx, srv, "fs", "tool-token")
	spacetest.ServeTools(t, fs, toolserver.NewFiles(map[string]string{"/srv/motd": "hello"}).Tools()...)
	alice, subs, err := agent.DialSubscribed(ctx, agent.Config{URL: srv.URL(), ID: "alice", Token: "tool-token"}, agent.SubscribeOptions{Kinds: []string{agent.KindRequest}})
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	asked := make(chan agent.Envelope, 16)
	go func() {
		for env := range subs[0].C() {
			if env.From == "fulfiller" && slices.Contains(env.To, "alice") && strings.Contains(string(env.Payload), `"elicitation/create"`) {
				asked <- env
			}
		}
	}()
	answer := func(result string) {
		t.Helper()
		var env agent.Envelope
		select {
		case env = <-asked:
		case <-ctx.Done():
			t.Fatal("alice was never asked")
		}
		var req agent.RPCRequest
		_ = json.Unmarshal(env.Payload, &req)
		if result == "" {
			return // leave it open
		}
		if _, err := alice.Send(ctx, agent.Envelope{To: []string{"fulfiller"}, Kind: agent.KindResponse, CorrelationID: agent.CorrelationIDs{env.ID},
			Payload: json.RawMessage(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":` + result + `}`)}); err != nil {
			t.Fatal(err)
		}
	}

	dir := t.TempDir()
	policyFile := filepath.Join(dir, "policy.rego")
	if err := os.WriteFile(policyFile, []byte(e2ePolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	engine, err := policies.Load(ctx, policies.Options{Timeout: time.Minute, Policies: []string{policyFile}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "decisions.jsonl")
	dlog, err := decisionlog.Open(logPath, decisionlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fc := spacetest.Join(t, ctx, srv, "fulfiller", "fulfiller-token")
	ful := fulfill.New(fc, engine, fulfill.Config{SpaceID: space.DefaultSpaceID, MaxPending: 2, MaxPendingPerProposer: 2, Approvals: elicit.Config{Observer: dlog.ObserveApproval}.Approvals("fulfiller"), Observer: fulfill.Observers{dlog}})
	fulSub := fc.Subscribe(agent.SubscribeOptions{All: true})
	fctx, stopFul := context.WithCancel(ctx)
	fulDone := make(chan struct{})
	go func() { defer close(fulDone); _ = ful.Run(fctx, fulSub.C()) }()
	poll.Until(t, "tool discovery", func() bool { return len(ful.Tools()) > 0 })

	coder := spacetest.Join(t, ctx, srv, "coder", "coder-token")
	prop := spacetest.NewProposer(t, coder)
	propose := func(id, payload string) {
		t.Helper()
		if _, err := prop.Propose(ctx, id, nil, json.RawMessage(payload)); err != nil {
			t.Fatal(err)
		}
	}
	outcome := func(id, want string) {
		t.Helper()
		out, err := prop.Wait(ctx, id)
		got := "fulfilled"
		if out.Rejected {
			got = "rejected " + out.Reason
		}
		if err != nil || got != want {
			t.Fatalf("%s: %+v (%v), want %s", id, out, err, want)
		}
	}
	write := func(path string) string {
		return `{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"` + path + `","content":"hi"}}}`
	}
	read := `{"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/srv/motd"}}}`

	propose("p-read", read)
	outcome("p-read", "fulfilled")
	propose("p-etc", write("/etc/motd"))
	outcome("p-etc", "rejected unsafe")
	propose("p-invalid", `{"method":7}`)
	outcome("p-invalid", "rejected invalid")
	propose("p-approve", write("/srv/motd"))
	answer(`{"action":"accept","content":{"approve":true}}`)
	outcome("p-approve", "fulfilled")
	propose("p-edit", write("/srv/motd"))
	answer(`{"action":"accept","content":{"approve":true,"path":"/srv/motd.new"}}`)
	outcome("p-edit", "fulfilled")
	// Two open prompts fill --max-pending 2: the next proposal is busy.
	propose("p-w1", write("/srv/a"))
	answer("")
	propose("p-w2", write("/srv/b"))
	answer("")
	propose("p-busy", read)
	outcome("p-busy", "rejected busy")
	if err := prop.Withdraw(ctx, "p-w1", "changed my mind"); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the withdrawal", func() bool { return len(ful.Pending()) == 1 })
	// A replayed id is ignored (rule 5), and logged.
	if _, err := coder.Send(ctx, agent.Envelope{ID: "p-read", Kind: agent.KindProposal, Payload: json.RawMessage(read)}); err != nil {
		t.Fatal(err)
	}
	// The fulfiller handles envelopes in order: once this is answered, the
	// replay has been handled.
	propose("p-marker", read)
	outcome("p-marker", "fulfilled")
	poll.Until(t, "the marker's response to be handled", func() bool { return len(ful.Pending()) == 1 })
	stopFul() // p-w2 is rejected "other" at shutdown
	<-fulDone
	if err := dlog.Close(); err != nil {
		t.Fatal(err)
	}

	recs := readRecords(t, logPath)
	type gov struct {
		id  string
		rev any
	}
	current := map[string]*gov{} // proposal → decision in force
	stages := map[string][]string{}
	for i, r := range recs {
		line := fmt.Sprintf("line %d %v", i+1, r)
		pid, _ := r["proposal_id"].(string)
		did, _ := r["decision_id"].(string)
		rev, hasRev := r["revision"]
		if pid == "" || did == "" || !hasRev {
			t.Fatalf("%s: want proposal_id, decision_id and revision", line)
		}
		stage := r["type"].(string) + "/" + r["stage"].(string)
		stages[pid] = append(stages[pid], stage)
		switch {
		case r["type"] == "ignored" && current[pid] == nil:
			t.Errorf("%s: an ignored replay of a proposal never seen", line)
			continue
		case r["type"] == "decision":
			if rev != engine.Revision() {
				t.Errorf("%s: revision %v, want %s", line, rev, engine.Revision())
			}
			if g := current[pid]; g != nil && g.rev != nil && g.id == did {
				t.Errorf("%s: a re-evaluation reuses decision id %s", line, did)
			}
			if g := current[pid]; g != nil && g.rev == nil && g.id != did {
				t.Errorf("%s: the first decision %s is not the id the proposal's earlier lines carry (%s)", line, did, g.id)
			}
			current[pid] = &gov{did, rev}
			continue
		}
		g := current[pid]
		if g == nil { // no policy ran (yet): the proposal's own id, no revision
			g = &gov{did, nil}
			current[pid] = g
		}
		if did != g.id || rev != g.rev {
			t.Errorf("%s: decision_id %s revision %v, want %s %v (its governing decision)", line, did, rev, g.id, g.rev)
		}
	}
	want := map[string][]string{
		"p-read":    {"decision/decided", "outcome/fulfilling", "outcome/fulfilled", "ignored/ignored"},
		"p-etc":     {"decision/decided", "outcome/rejected"},
		"p-invalid": {"outcome/rejected"},
		"p-approve": {"decision/decided", "outcome/escalated", "approval/answered", "outcome/approved", "outcome/fulfilling", "outcome/fulfilled"},
		"p-edit":    {"decision/decided", "outcome/escalated", "approval/answered", "outcome/approved", "decision/decided", "outcome/fulfilling", "outcome/fulfilled"},
		"p-w1":      {"decision/decided", "outcome/escalated", "outcome/withdrawn"},
		"p-w2":      {"decision/decided", "outcome/escalated", "outcome/rejected"},
		"p-busy":    {"outcome/rejected"},
		"p-marker":  {"decision/decided", "outcome/fulfilling", "outcome/fulfilled"},
	}
	for id, w := range want {
		if !slices.Equal(stages[id], w) {
			t.Errorf("%s: lines %v, want %v", id, stages[id], w)
		}
	}
	// The edit's lines: approval and approved under the first decision,
	// the fulfilment under the re-evaluation.
	var edit []map[string]any
	for _, r := range recs {
		if r["proposal_id"] == "p-edit" {
			edit = append(edit, r)
		}
	}
	if len(edit) == 7 && (edit[2]["decision_id"] != edit[0]["decision_id"] || edit[5]["decision_id"] != edit[4]["decision_id"] || edit[4]["reevaluated"] != true) {
		t.Errorf("p-edit lines do not join their decisions: %v", edit)
	}
}
