package fulfill

import (
	"encoding/json"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/policies"
	"github.com/mewkit/fulfiller/toolmeta"
)

// input builds the policy input document for p (docs/design.md, Policy
// contract). params are the proposal's params, or an approver's edit of
// them; approval is set only when asking again after a human answered.
// Fields that are not known are left out, never invented.
func (f *Fulfiller) input(p *proposal, params json.RawMessage, approval *policies.Approval) *policies.Input {
	raw := p.env.Raw
	if raw == nil {
		raw, _ = agent.Encode(p.env)
	}
	in := &policies.Input{
		Proposal: raw,
		Method:   p.method,
		Params:   params,
		Approval: approval,
		Now:      time.Now().UTC(),
	}
	if p.tool != "" {
		in.Tool = f.toolInput(p, p.target, params)
		in.Grants = f.grantsCovering(p.env.From, in.Tool, in.Now)
	}
	if who, ok := f.space.Participant(p.env.From); ok {
		in.Proposer = &policies.Participant{ID: who.ID, Capabilities: capsJSON(who.Capabilities)}
	} else {
		in.Proposer = &policies.Participant{ID: p.env.From}
	}
	roster := f.space.Roster()
	sp := &policies.Space{ID: f.cfg.SpaceID, Participants: make([]policies.Participant, 0, len(roster))}
	for _, who := range roster {
		sp.Participants = append(sp.Participants, policies.Participant{ID: who.ID, Capabilities: capsJSON(who.Capabilities)})
	}
	in.Space = sp
	f.mu.Lock()
	in.Agent = policies.AgentInfo{ID: f.space.ID(), Pending: f.live, Inflight: f.slots.used, MaxPending: f.cfg.MaxPending}
	f.mu.Unlock()
	return in
}

// toolInput describes the called tool: name and arguments from params, and
// server, description and annotations from its owner's tools/list when the
// owner is known (the target named by `to`, else the only owner), with the
// operator's declared annotations laid over the owner's. While the owner
// is unknown nothing is declared either: an entry for the owner might have
// applied, so no "*" entry is guessed in its place.
func (f *Fulfiller) toolInput(p *proposal, target string, params json.RawMessage) *policies.Tool {
	name, args := toolCall(params)
	if name == "" {
		name = p.tool
	}
	t := &policies.Tool{Name: name, Arguments: args}
	server := target
	if server == "" {
		if owners := f.catalog.owners(name); len(owners) == 1 {
			server = owners[0].Server
		}
	}
	if server == "" {
		return t
	}
	t.Server = server
	if info, ok := f.catalog.tool(server, name); ok {
		t.Description = info.Description
		t.OwnerAnnotations = info.Annotations
		t.Execution = info.Execution
	}
	t.Annotations, _ = f.annotate(server, name, t.OwnerAnnotations)
	return t
}

// annotate lays the operator's declared annotations (Config.ToolMetadata)
// over the owner's.
func (f *Fulfiller) annotate(server, tool string, owner json.RawMessage) (json.RawMessage, *toolmeta.Entry) {
	if f.cfg.ToolMetadata == nil {
		return owner, nil
	}
	return f.cfg.ToolMetadata.Annotate(server, tool, owner)
}

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
