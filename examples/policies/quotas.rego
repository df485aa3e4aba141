# METADATA
# title: Quotas and blocklist
# description: Refuse work from blocked proposers and while the sidecar is overloaded.
package fulfiller.quotas

# The first reason that applies, in this order: a blocked proposer is
# refused even when the sidecar is idle.
deny := {
	"action": "reject",
	"reason": "policy",
	"message": sprintf("proposals from %s are not accepted here", [input.proposer.id]),
} if {
	input.proposer.id in data.settings.blocklist
} else := {
	"action": "reject",
	"reason": "busy",
	"message": sprintf("%d proposals are waiting (limit %d); try again later", [input.agent.pending, data.settings.quotas.max_pending]),
} if {
	input.agent.pending > data.settings.quotas.max_pending
}
