package examples_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/mewkit/fulfiller/policies"
	"github.com/mewkit/fulfiller/policies/toolmeta"
)

// TestDeclaredDestructiveToolIsNotReadOnlyOnTheOwnersWord (issue 41, row
// 3): the operator declares purge_cache destructive in --tool-metadata;
// its owner claims readOnlyHint: true in tools/list. The annotations the
// policy sees are the operator's alone, and the example policies never
// fulfil the call without a human: outside production nothing allows it,
// and in production it needs the two approvals of a destructive tool.
func TestDeclaredDestructiveToolIsNotReadOnlyOnTheOwnersWord(t *testing.T) {
	meta, err := toolmeta.Parse("tool-metadata.yaml", []byte("fs:\n  purge_cache: {annotations: {destructiveHint: true}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	owner := json.RawMessage(`{"readOnlyHint":true,"title":"Purge"}`)
	annotations, entry := meta.Annotate("fs", "purge_cache", owner)
	if entry == nil || string(annotations) != `{"destructiveHint":true}` {
		t.Errorf("annotations %s (entry %v), want the operator's alone: {\"destructiveHint\":true}", annotations, entry)
	}
	engine, err := policies.Load(context.Background(), policies.Options{Policies: []string{"policies"}, Data: []string{"policies/data.yaml"}, Timeout: testPolicyTimeout})
	if err != nil {
		t.Fatal(err)
	}
	decide := func(annotations json.RawMessage, path string) policies.Decision {
		args := json.RawMessage(`{"path":"` + path + `"}`)
		return engine.Decide(context.Background(), &policies.Input{
			Method:   "tools/call",
			Params:   json.RawMessage(`{"name":"purge_cache","arguments":` + string(args) + `}`),
			Tool:     &policies.Tool{Name: "purge_cache", Server: "fs", Arguments: args, Annotations: annotations, OwnerAnnotations: owner},
			Proposer: &policies.Participant{ID: "coder"},
		})
	}
	for _, c := range []struct {
		what        string
		annotations json.RawMessage
	}{
		{"the operator's alone", annotations},
		// Both hints true (the merge of old) counts as destructive.
		{"both hints", json.RawMessage(`{"destructiveHint":true,"readOnlyHint":true}`)},
	} {
		if d := decide(c.annotations, "/tmp/cache"); d.Action != policies.Reject {
			t.Errorf("%s, outside production: %s (%s), want reject", c.what, d.Action, d.Message)
		}
		if d := decide(c.annotations, "/srv/prod/cache"); d.Action != policies.Escalate || d.Quorum != 2 {
			t.Errorf("%s, in production: %s quorum %d (%s), want escalate with quorum 2", c.what, d.Action, d.Quorum, d.Message)
		}
	}
}

// TestProductionMoveFileNeedsTwoApprovals (issue 41, row 4): with the
// shipped examples/tool-metadata.yaml, a move_file in production is
// destructive, as the filesystem server says, and needs two approvals.
func TestProductionMoveFileNeedsTwoApprovals(t *testing.T) {
	meta, err := toolmeta.Load("tool-metadata.yaml")
	if err != nil {
		t.Fatal(err)
	}
	engine, err := policies.Load(context.Background(), policies.Options{Policies: []string{"policies"}, Data: []string{"policies/data.yaml"}, Timeout: testPolicyTimeout})
	if err != nil {
		t.Fatal(err)
	}
	for tool, quorum := range map[string]int{"move_file": 2, "write_file": 2, "edit_file": 2, "create_directory": 1} {
		annotations, _ := meta.Annotate("fs", tool, nil)
		args := json.RawMessage(`{"source":"/srv/prod/a","destination":"/srv/prod/b","path":"/srv/prod/a"}`)
		d := engine.Decide(context.Background(), &policies.Input{
			Method:   "tools/call",
			Params:   json.RawMessage(`{"name":"` + tool + `","arguments":` + string(args) + `}`),
			Tool:     &policies.Tool{Name: tool, Server: "fs", Arguments: args, Annotations: annotations},
			Proposer: &policies.Participant{ID: "coder"},
		})
		if d.Action != policies.Escalate || d.Quorum != quorum {
			t.Errorf("%s in production: %s quorum %d (%s), want escalate with quorum %d", tool, d.Action, d.Quorum, d.Message, quorum)
		}
	}
}
