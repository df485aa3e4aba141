package examples_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/internal/space"
)

// spaceFile is the part of a reference-gateway space.yaml this test reads.
type spaceFile struct {
	Space struct {
		ID string `yaml:"id"`
	} `yaml:"space"`
	Participants map[string]struct {
		Tokens       []string           `yaml:"tokens"`
		Capabilities []agent.Capability `yaml:"capabilities"`
	} `yaml:"participants"`
}

// TestSpaceYAMLGrantsEachRoleWhatItNeeds loads examples/space.yaml into the
// in-process space (which enforces capabilities the way the reference
// gateway does), joins each participant with its token, and checks the
// welcome's capabilities against what the role must and must not send. An
// operator who copies the file gets a fulfiller that can fulfil, reject,
// explain, ask humans and cancel prompts, and agents that can only propose.
func TestSpaceYAMLGrantsEachRoleWhatItNeeds(t *testing.T) {
	raw, err := os.ReadFile("space.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var sf spaceFile
	if err := yaml.Unmarshal(raw, &sf); err != nil {
		t.Fatalf("examples/space.yaml: %v", err)
	}
	cfg := space.Config{SpaceID: sf.Space.ID, Tokens: map[string][]agent.Capability{}}
	for id, p := range sf.Participants {
		if len(p.Tokens) == 0 {
			t.Fatalf("participant %s has no token", id)
		}
		for _, tok := range p.Tokens {
			cfg.Tokens[tok] = p.Capabilities
		}
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
	}
	for _, r := range roles {
		t.Run(r.id, func(t *testing.T) {
			p, ok := sf.Participants[r.id]
			if !ok {
				t.Fatalf("examples/space.yaml has no participant %s", r.id)
			}
			c, err := agent.Dial(context.Background(), agent.Config{URL: srv.URL(), Space: sf.Space.ID, ID: r.id, Token: p.Tokens[0]})
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
