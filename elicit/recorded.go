package elicit

import (
	"github.com/mewkit/fulfiller/fulfill"
)

var _ fulfill.PromptCanceller = (*Elicitor)(nil)

// CancelRecorded withdraws prompts that another member of the group asked
// and recorded in the pending-work store, for an operator's cancel of a
// proposal taken from that member (fulfill.PromptCanceller): every prompt
// in esc.Prompts that is still open — its approver has not answered
// (esc.Approvals) nor handed it on (another prompt's chain) — gets one
// notifications/cancelled with reason, from this member, naming the
// prompt's envelope and JSON-RPC ids as recorded. Nothing is asked first:
// resuming the escalation would put the question in front of the
// approvers again only to take it away. Approvers' clients accept the
// cancellation from any listed member of the group.
func (e *Elicitor) CancelRecorded(esc fulfill.Escalation, reason string) {
	if reason == "" {
		reason = "cancelled"
	}
	x := &escalation{e: e, esc: esc, id: esc.Proposal.ID, log: e.log.With("proposal", esc.Proposal.ID)}
	answered := map[string]bool{}
	for _, a := range esc.Approvals {
		answered[a.Approver] = true
	}
	handedOn := map[string]bool{}
	for _, pr := range esc.Prompts {
		for _, by := range pr.Chain {
			handedOn[by] = true
		}
	}
	for _, pr := range esc.Prompts {
		x.order = append(x.order, &seat{requestID: pr.EnvelopeID, rpcID: pr.RPCID, approver: pr.Approver, chain: pr.Chain,
			open: !answered[pr.Approver] && !handedOn[pr.Approver], recorded: true})
	}
	x.log.Info("withdrawing prompts another member asked", "prompts", len(esc.Prompts), "reason", reason)
	x.cancelOpen(reason)
}
