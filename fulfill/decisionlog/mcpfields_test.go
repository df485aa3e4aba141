package decisionlog_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/decisionlog"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/policies"
)

// An MCP call's lines name it (DESIGN: "its decision log lines carry
// front_end, client, server, tool"): client, server and rpc_id, as its
// front end named them at intake (the event's LogFields, the record's),
// on every line of the proposal, @caller's answer too, and on the
// lines of a call rejected before any decision (busy) or resumed after
// a restart (no decided line in this process at all). A MEW proposal's
// lines are as they were: none of the three.
func TestMCPCallFields(t *testing.T) {
	var buf bytes.Buffer
	log := decisionlog.New(&buf, decisionlog.Options{})
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	fields := func(id string) *lifecycle.LogFields {
		return &lifecycle.LogFields{Client: "claude-code", Server: "fs", RPCID: json.RawMessage(id)}
	}
	mcp := func(pid string, rpc string, stage fulfill.Stage) fulfill.Event {
		return fulfill.Event{Time: at, Stage: stage, FrontEnd: "mcp", ProposalID: pid, DecisionID: "d-" + pid, Revision: "r",
			Proposer: "local", Method: "tools/call", Tool: "write_file", Target: "fs", LogFields: fields(rpc)}
	}
	// p-1: escalated to @caller, who declines.
	decided := mcp("p-1", "7", fulfill.StageDecided)
	decided.Input = &policies.Input{FrontEnd: "mcp", Method: "tools/call", Tool: &policies.Tool{Name: "write_file", Server: "fs"}}
	decided.Decision = &decision.Decision{Action: decision.Escalate, Approvers: []string{"@caller"}, Revision: "r"}
	log.Observe(decided)
	log.Observe(mcp("p-1", "7", fulfill.StageEscalated))
	log.ObserveApproval(elicit.EventOf(lifecycle.Human{ID: "p-1", At: at, Kind: lifecycle.HumanAnswered, Approver: "@caller", Action: "decline",
		DecisionID: "d-p-1", Revision: "r", FrontEnd: "mcp", Log: fields("7")}))
	rejected := mcp("p-1", "7", fulfill.StageRejected)
	rejected.Reason, rejected.Message = "disagree", "@caller declined"
	log.Observe(rejected)
	// p-2: rejected busy before any decision.
	busy := mcp("p-2", `"a"`, fulfill.StageRejected)
	busy.Revision, busy.Reason, busy.Message = "", "busy", "pending proposals hold 10 of 10 bytes (the limit)"
	log.Observe(busy)
	// p-3: resumed after a restart, fulfilled: its first line here.
	fulfilled := mcp("p-3", "9", fulfill.StageFulfilled)
	fulfilled.Result = json.RawMessage(`{"content":[]}`)
	log.Observe(fulfilled)
	mew := fulfill.Event{Time: at, FrontEnd: "mew", ProposalID: "p-4", DecisionID: "d-4", Revision: "r", Proposer: "coder", Method: "tools/call", Tool: "read_file", Target: "fs",
		Stage: fulfill.StageRejected, Reason: "policy", Message: "no"}
	log.Observe(mew)
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var r struct{ ProposalID, Stage, FrontEnd, Client, Server string }
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		for k, v := range map[string]*string{"proposal_id": &r.ProposalID, "stage": &r.Stage, "front_end": &r.FrontEnd, "client": &r.Client, "server": &r.Server} {
			_ = json.Unmarshal(m[k], v)
		}
		got = append(got, strings.Join([]string{r.ProposalID, r.Stage, r.FrontEnd, r.Client, r.Server, string(m["rpc_id"])}, " "))
	}
	want := []string{
		"p-1 decided mcp claude-code fs 7",
		"p-1 escalated mcp claude-code fs 7",
		"p-1 answered mcp claude-code fs 7",
		"p-1 rejected mcp claude-code fs 7",
		`p-2 rejected mcp claude-code fs "a"`,
		"p-3 fulfilled mcp claude-code fs 9",
		"p-4 rejected mew   ",
	}
	if !slices.Equal(got, want) {
		t.Errorf("proposal_id stage front_end client server rpc_id of each line:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
