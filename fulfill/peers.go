package fulfill

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/mewkit/fulfiller/agent"
)

// Roles of a participant that can end our pending proposals, as
// StageVetoHolder events report them in Reason.
const (
	RoleApprover = "approver" // a configured approver: it may turn proposals down directly
	RoleOutsider = "outsider" // neither a known fulfiller nor an approver
)

// canEnd says what of ours a participant's capabilities let it end: any
// mcp/reject ends a proposal at the reference SDK proposer (it fails on the
// first reject from anyone) and makes us supersede our own work, and an
// mcp/request tools/call correlated to a proposal counts as its
// fulfilment. Payload patterns on mcp/reject are ignored on purpose: a
// reject with any reason fails the proposal.
func canEnd(caps []agent.Capability) (what []string) {
	kinds := make([]agent.Capability, len(caps))
	for i, c := range caps {
		kinds[i] = agent.Capability{Kind: c.Kind}
	}
	if agent.Permits(kinds, agent.KindReject, nil) {
		what = append(what, agent.KindReject)
	}
	if agent.Permits(caps, agent.KindRequest, json.RawMessage(`{"method":"tools/call"}`)) {
		what = append(what, agent.KindRequest+" tools/call")
	}
	return what
}

// knownFulfiller reports whether id is one of the fulfillers configured
// as peers (--peer-fulfillers).
func (f *Fulfiller) knownFulfiller(id string) bool {
	return slices.Contains(f.cfg.PeerFulfillers, id)
}

// checkVetoHolders warns about participants present that can end any
// pending proposal without being a known fellow fulfiller: the gateway's
// capabilities are the only defence against them (--approver-keys does not
// cover a reject or a fulfilment). Configured approvers that hold
// mcp/reject are expected in many spaces (examples/space.yaml gives them
// one to decline directly), so they are named in one line, at start, and
// on each later join; everyone else gets a warning of its own.
func (f *Fulfiller) checkVetoHolders(ps []agent.Participant) {
	var approvers []string
	for _, p := range ps {
		if p.ID == f.space.ID() || f.knownFulfiller(p.ID) {
			continue
		}
		what := canEnd(p.Capabilities)
		if len(what) == 0 {
			continue
		}
		role := RoleOutsider
		if slices.Contains(f.cfg.Approvers, p.ID) && !slices.Contains(what, agent.KindRequest+" tools/call") {
			role = RoleApprover
			approvers = append(approvers, p.ID)
		} else {
			f.log.Warn("a participant that is not a known fulfiller can end any pending proposal (a reject from anyone fails it at the proposer); only its capabilities stop it: grant them only to fulfillers you list in --peer-fulfillers",
				"participant", p.ID, "holds", strings.Join(what, ", "))
		}
		f.emit(Event{Stage: StageVetoHolder, Target: p.ID, By: []string{p.ID}, Reason: role, Message: "holds " + strings.Join(what, ", ")})
	}
	if len(approvers) > 0 {
		f.log.Warn("approvers hold mcp/reject: each can turn down any pending proposal, not only those it is asked about", "approvers", approvers)
	}
}
