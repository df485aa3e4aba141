package fulfill

import (
	"encoding/json"

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
