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
	"github.com/mewkit/fulfiller/policies"
)

// An MCP call's lines name it (DESIGN: "its decision log lines carry
// front_end, client, server, tool"): client, server and rpc_id, read
// from its decided input, on the decided line and every later one of
// the proposal, @caller's answer too. A MEW proposal's lines are as
// they were: none of the three.
func TestMCPCallFields(t *testing.T) {
	var buf bytes.Buffer
	log := decisionlog.New(&buf, decisionlog.Options{})
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	mcpIn := &policies.Input{FrontEnd: "mcp", Method: "tools/call",
		Proposal: json.RawMessage(`{"id":"p-1","rpc_id":7,"front_end":"mcp","server":"fs","proposer":"local","client":{"name":"claude-code","version":"2.1"}}`),
		Tool:     &policies.Tool{Name: "write_file", Server: "fs"}}
	mcp := fulfill.Event{Time: at, FrontEnd: "mcp", ProposalID: "p-1", DecisionID: "d-1", Revision: "r", Proposer: "local", Method: "tools/call", Tool: "write_file", Target: "fs"}
	decided := mcp
	decided.Stage, decided.Input, decided.Decision = fulfill.StageDecided, mcpIn, &decision.Decision{Action: decision.Escalate, Approvers: []string{"@caller"}, Revision: "r"}
	log.Observe(decided)
	log.ObserveApproval(elicit.Event{Time: at, Kind: elicit.EventAnswered, ProposalID: "p-1", DecisionID: "d-1", Revision: "r", Approver: "@caller", Action: "decline"})
	rejected := mcp
	rejected.Stage, rejected.Reason, rejected.Message = fulfill.StageRejected, "disagree", "@caller declined"
	log.Observe(rejected)
	mew := fulfill.Event{Time: at, FrontEnd: "mew", ProposalID: "p-2", DecisionID: "d-2", Revision: "r", Proposer: "coder", Method: "tools/call", Tool: "read_file", Target: "fs",
		Stage: fulfill.StageRejected, Reason: "policy", Message: "no"}
	log.Observe(mew)
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var r struct{ Stage, FrontEnd, Client, Server string }
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		for k, v := range map[string]*string{"stage": &r.Stage, "front_end": &r.FrontEnd, "client": &r.Client, "server": &r.Server} {
			_ = json.Unmarshal(m[k], v)
		}
		got = append(got, strings.Join([]string{r.Stage, r.FrontEnd, r.Client, r.Server, string(m["rpc_id"])}, " "))
	}
	want := []string{
		"decided mcp claude-code fs 7",
		"answered mcp claude-code fs 7",
		"rejected mcp claude-code fs 7",
		"rejected mew   ",
	}
	if !slices.Equal(got, want) {
		t.Errorf("stage front_end client server rpc_id of each line:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
