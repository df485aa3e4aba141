package fulfill

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/policies"
)

// mewFront is the MEW participant as the engine's FrontEnd: proposals
// are a space's mcp/proposal envelopes (the Fulfiller's reader turns
// them into events, shellframes.go), the wire writes envelopes to the
// space, the ids are the space's, and the policy input's proposer,
// space and tools are what the space and its tool owners' tools/list
// (the catalog) say.
type mewFront struct {
	space   Space
	catalog *catalog
	wire    *wire
	spaceID string        // input.space.id (Config.SpaceID)
	wait    time.Duration // how long routing waits for a running tools/list (Config.DiscoveryWait)
}

var _ FrontEnd = (*mewFront)(nil)

// Name is FrontEndMEW.
func (m *mewFront) Name() string { return FrontEndMEW }

// Wire is the space's wire: envelopes, prompts to approvers in the
// space, JSON-RPC ids reserved from the space's one sequence.
func (m *mewFront) Wire() lifecycle.Wire { return m.wire }

// IDs are the space's (shellIDs).
func (m *mewFront) IDs() lifecycle.IDs { return shellIDs{m.space} }

// attach hooks the wire to the engine's journal: the wire reports its
// answers written, not written and refused after the write (a
// gateway's system/error), which only it can tell.
func (m *mewFront) attach(e *Engine) {
	m.wire.hooks = wireHooks{events: e.journal, method: e.journal.method}
}

// Input fills in the proposer and the roster with their capabilities,
// as the space last said, and this participant's id.
func (m *mewFront) Input(_ context.Context, p *lifecycle.Proposal, in *policies.Input) {
	if who, ok := m.space.Participant(p.From); ok {
		in.Proposer = &policies.Participant{ID: who.ID, Capabilities: capsJSON(who.Capabilities)}
	} else {
		in.Proposer = &policies.Participant{ID: p.From}
	}
	roster := m.space.Roster()
	sp := &policies.Space{ID: m.spaceID, Participants: make([]policies.Participant, 0, len(roster))}
	for _, who := range roster {
		sp.Participants = append(sp.Participants, policies.Participant{ID: who.ID, Capabilities: capsJSON(who.Capabilities)})
	}
	in.Space = sp
	in.Agent.ID = m.space.ID()
}

// Tool is the tool of a call: name and arguments from params (p.Tool
// when params name none), and server, description, annotations and
// execution from its owner's tools/list when the owner is known (target,
// else the tool's only owner), with its input schema.
func (m *mewFront) Tool(p *lifecycle.Proposal, target string, params json.RawMessage) (*policies.Tool, json.RawMessage) {
	if p.Tool == "" {
		return nil, nil
	}
	name, args := toolCall(params)
	if name == "" {
		name = p.Tool
	}
	t := &policies.Tool{Name: name, Arguments: args}
	server := target
	if server == "" {
		if owners := m.catalog.owners(name); len(owners) == 1 {
			server = owners[0].Server
		}
	}
	if server == "" {
		return t, nil
	}
	t.Server = server
	info, ok := m.catalog.tool(server, name)
	if !ok {
		return t, nil
	}
	t.Description = info.Description
	t.OwnerAnnotations = info.Annotations
	t.Execution = info.Execution
	return t, info.InputSchema
}

// Route is who carries the call out (the decision's target, else
// current: the addressee or the route already chosen, else the tool's
// only owner), or why nobody can: the target is not in the space, does
// not list the tool, or fulfiller's capabilities forbid the request.
func (m *mewFront) Route(ctx context.Context, p *lifecycle.Proposal, current string, d decision.Decision) (target, why string) {
	target = d.Target
	if target == "" {
		target = current
	}
	if target == "" && p.Method == agent.MethodToolsCall && p.Tool != "" {
		lctx, cancel := context.WithTimeout(ctx, m.wait)
		owners := m.catalog.lookup(lctx, p.Tool)
		cancel()
		switch len(owners) {
		case 0:
			return "", fmt.Sprintf("no participant in the space offers tool %q", p.Tool)
		case 1:
			target = owners[0].Server
		default:
			names := make([]string, len(owners))
			for i, o := range owners {
				names[i] = o.Server
			}
			return "", fmt.Sprintf("tool %q is offered by %v; address the proposal to one of them", p.Tool, names)
		}
	}
	if target == "" {
		return "", fmt.Sprintf("no participant to send %s to; address the proposal to one", p.Method)
	}
	if _, ok := m.space.Participant(target); !ok {
		return "", fmt.Sprintf("%s is not in the space", target)
	}
	if p.Method == agent.MethodToolsCall && p.Tool != "" {
		// An owner that listed its tools and not this one would answer
		// "Tool not found" (issue 41, row 14): nothing is sent. One whose
		// list is not known (it answers no tools/list, or has not yet)
		// is asked, as before.
		if known, listed := m.catalog.listed(target, p.Tool); known && !listed {
			return "", fmt.Sprintf("%s does not offer tool %q (it is not in its tools/list)", target, p.Tool)
		}
	}
	payload, _ := json.Marshal(map[string]string{"method": p.Method})
	if !m.space.Can(agent.KindRequest, payload) {
		return "", fmt.Sprintf("fulfiller's capabilities do not allow mcp/request %s", p.Method)
	}
	return target, ""
}

// shellIDs mints the ids the core puts on the wire: envelope ids named
// after this participant, JSON-RPC ids from the space's one sequence
// (no peer sees an id twice), decision ids as OPA's decision logs do.
type shellIDs struct{ space Space }

func (i shellIDs) EnvelopeID() string { return agent.NewID(i.space.ID()) }
func (i shellIDs) RPCID() int64       { return i.space.NextRPCID() }
func (i shellIDs) DecisionID() string { return NewDecisionID() }

// PromptID is random (crypto), as elicit's prompt ids are: a forger
// cannot tell the next one.
func (i shellIDs) PromptID() string { return agent.NewID(i.space.ID() + "-elicit") }

// capsJSON is the capabilities as the policy input carries them (nil: none known).
func capsJSON(caps []agent.Capability) json.RawMessage {
	if caps == nil {
		return nil
	}
	b, err := json.Marshal(caps)
	if err != nil {
		return nil
	}
	return b
}
