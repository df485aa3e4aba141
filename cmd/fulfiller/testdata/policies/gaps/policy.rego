# A policy whose tests leave gaps: the blocklist rule and the escalation
# are never reached, so coverage names their lines.
package fulfiller

default decision := {"action": "reject", "reason": "policy"}

decision := {"action": "reject", "reason": "policy", "message": "blocked"} if {
	input.proposer.id in {"mallory", "eve"}
} else := {"action": "escalate", "approvers": ["alice"], "timeout": "5m"} if {
	input.tool.name == "delete_file"
} else := {"action": "fulfill"} if {
	input.method == "tools/list"
}
