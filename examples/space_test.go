package examples_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/internal/space"
)

// spaceFile is the part of a reference-gateway space.yaml this test reads,
// in the form `mew space up` (MEW 0.11.0) takes it.
type spaceFile struct {
	Space struct {
		ID string `yaml:"id"`
	} `yaml:"space"`
	Participants map[string]struct {
		Tokens       []string           `yaml:"tokens"`
		Capabilities []agent.Capability `yaml:"capabilities"`
		// A bridged MCP server: `mew space up` starts `mew bridge` for a
		// participant of type mcp-bridge with auto_start and mcp_server.
		Type      string `yaml:"type"`
		AutoStart bool   `yaml:"auto_start"`
		MCPServer *struct {
			Command string   `yaml:"command"`
			Args    []string `yaml:"args"`
		} `yaml:"mcp_server"`
	} `yaml:"participants"`
}

// readSpaceFile parses examples/space.yaml.
func readSpaceFile(t *testing.T) spaceFile {
	t.Helper()
	raw, err := os.ReadFile("space.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var sf spaceFile
	if err := yaml.Unmarshal(raw, &sf); err != nil {
		t.Fatalf("examples/space.yaml: %v", err)
	}
	return sf
}

// TestSpaceYAMLGrantsEachRoleWhatItNeeds loads examples/space.yaml into the
// in-process space (which enforces capabilities the way the reference
// gateway does), joins each participant with a token of its own, and checks the
// welcome's capabilities against what the role must and must not send. An
// operator who copies the file gets a fulfiller that can fulfil, reject,
// explain, ask humans and cancel prompts, and agents that can only propose.
func TestSpaceYAMLGrantsEachRoleWhatItNeeds(t *testing.T) {
	sf := readSpaceFile(t)
	// `mew space up` gives each participant a random token from its token
	// store (.mew/tokens/<id>.token); the test does the same with one
	// made-up token per id.
	cfg := space.Config{SpaceID: sf.Space.ID, Tokens: map[string][]agent.Capability{}}
	for id, p := range sf.Participants {
		cfg.Tokens[id+"-store-token"] = p.Capabilities
	}
	srv, err := space.New(cfg)
	if err != nil {
		t.Fatalf("the space rejects the file's capabilities: %v", err)
	}
	t.Cleanup(func() { _ = srv.Close() })

	type send struct {
		kind    string
		payload string
	}
	var (
		toolsCall   = send{agent.KindRequest, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_path"}}`}
		toolsList   = send{agent.KindRequest, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`}
		elicitation = send{agent.KindRequest, `{"jsonrpc":"2.0","id":3,"method":"elicitation/create","params":{}}`}
		cancelled   = send{agent.KindRequest, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`}
		listChanged = send{agent.KindRequest, `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`}
		reject      = send{agent.KindReject, `{"reason":"policy"}`}
		chat        = send{agent.KindChat, `{"text":"why"}`}
		proposal    = send{agent.KindProposal, `{"method":"tools/call","params":{"name":"delete_path"}}`}
		withdraw    = send{agent.KindWithdraw, `{"reason":"no_longer_needed"}`}
		response    = send{agent.KindResponse, `{"jsonrpc":"2.0","id":3,"result":{"action":"accept"}}`}
	)
	roles := []struct {
		id          string
		may, mayNot []send
	}{
		{"fulfiller", []send{toolsCall, toolsList, elicitation, cancelled, reject, chat}, []send{{"system/presence", `{}`}}},
		{"coder", []send{proposal, withdraw, chat}, []send{toolsCall, elicitation, reject}},
		{"fs", []send{response, listChanged, chat}, []send{toolsCall, proposal, reject}},
		{"oncall-alice", []send{response, reject, chat}, []send{toolsCall, proposal}},
		{"oncall-bob", []send{response, reject, chat}, []send{toolsCall, proposal}},
		{"oncall-carol", []send{response, reject, chat}, []send{toolsCall, proposal}},
	}
	for _, r := range roles {
		t.Run(r.id, func(t *testing.T) {
			if _, ok := sf.Participants[r.id]; !ok {
				t.Fatalf("examples/space.yaml has no participant %s", r.id)
			}
			c, err := agent.Dial(context.Background(), agent.Config{URL: srv.URL(), Space: sf.Space.ID, ID: r.id, Token: r.id + "-store-token"})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for _, s := range r.may {
				if !c.Can(s.kind, json.RawMessage(s.payload)) {
					t.Errorf("%s may not send %s %s; its capabilities: %+v", r.id, s.kind, s.payload, c.Capabilities())
				}
			}
			for _, s := range r.mayNot {
				if c.Can(s.kind, json.RawMessage(s.payload)) {
					t.Errorf("%s may send %s %s, which its role must not", r.id, s.kind, s.payload)
				}
			}
		})
	}
}

// TestSpaceYAMLHasNoTokens: the reference gateway also accepts a `tokens:`
// entry of space.yaml besides the token `mew space up` keeps in its store,
// and takes whoever presents it for that participant; a token written in an
// example that operators copy is one everybody knows.
func TestSpaceYAMLHasNoTokens(t *testing.T) {
	for id, p := range readSpaceFile(t).Participants {
		if len(p.Tokens) > 0 {
			t.Errorf("participant %s has tokens %q in examples/space.yaml; leave them to the gateway's token store", id, p.Tokens)
		}
	}
}

// TestSpaceYAMLStartsTheFilesystemBridge checks the fs entry in the form MEW
// 0.11.0's `mew space up` needs to start `mew bridge` in front of the MCP
// filesystem server (docs/real-mew.md runs it): type mcp-bridge, auto_start,
// and an mcp_server whose arguments survive the bridge's --mcp-args, which
// the space joins and the bridge splits again on ",".
func TestSpaceYAMLStartsTheFilesystemBridge(t *testing.T) {
	fs, ok := readSpaceFile(t).Participants["fs"]
	if !ok {
		t.Fatal("examples/space.yaml has no participant fs")
	}
	if fs.Type != "mcp-bridge" || !fs.AutoStart || fs.MCPServer == nil {
		t.Fatalf("fs: type %q, auto_start %v, mcp_server %v; mew space up starts a bridge only for type mcp-bridge with auto_start: true and mcp_server", fs.Type, fs.AutoStart, fs.MCPServer)
	}
	want := []string{"-y", "@modelcontextprotocol/server-filesystem@2026.8.31", "./files"}
	if fs.MCPServer.Command != "npx" || !slices.Equal(fs.MCPServer.Args, want) {
		t.Errorf("fs runs %s %q, want npx %q (the server and directory docs/real-mew.md was run with)", fs.MCPServer.Command, fs.MCPServer.Args, want)
	}
	for _, a := range fs.MCPServer.Args {
		if strings.Contains(a, ",") {
			t.Errorf("fs argument %q has a comma: the bridge would split it in two", a)
		}
	}
}

// TestSpaceYAMLHasEveryApprover: every approver the example policy data and
// the example fulfiller configuration name must be able to join and answer
// (mcp/response), or an escalation to them cannot reach its quorum.
func TestSpaceYAMLHasEveryApprover(t *testing.T) {
	var data struct {
		Settings struct {
			Production struct {
				Approvers []string `yaml:"approvers"`
			} `yaml:"production"`
		} `yaml:"settings"`
	}
	var conf struct {
		Approvers []string `yaml:"approvers"`
	}
	for file, v := range map[string]any{"policies/data.yaml": &data, "fulfiller.yaml": &conf} {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(raw, v); err != nil {
			t.Fatalf("examples/%s: %v", file, err)
		}
	}
	named := append(slices.Clone(data.Settings.Production.Approvers), conf.Approvers...)
	if len(named) == 0 {
		t.Fatal("the examples name no approvers")
	}
	sf := readSpaceFile(t)
	for _, id := range named {
		p, ok := sf.Participants[id]
		if !ok {
			t.Errorf("approver %s is named by the examples but is no participant of examples/space.yaml", id)
			continue
		}
		if !slices.ContainsFunc(p.Capabilities, func(c agent.Capability) bool { return c.Kind == agent.KindResponse && c.Payload == nil }) {
			t.Errorf("approver %s may not send mcp/response: %+v", id, p.Capabilities)
		}
	}
}
