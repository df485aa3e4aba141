# METADATA
# title: Example approval policy
# description: |
#   Combines the example rules. Precedence: a deny (quotas.rego) beats a
#   human's grant, which beats an escalation (production.rego), which beats
#   a job run as a task (jobs.rego), which beats a fulfil (readonly.rego).
#   Anything no rule speaks for is rejected.
package fulfiller

import data.fulfiller.jobs
import data.fulfiller.production
import data.fulfiller.quotas
import data.fulfiller.readonly

# What no rule allows is refused.
default decision := {
	"action": "reject",
	"reason": "policy",
	"message": "no rule allows this call; ask the security team to extend the policy",
}

decision := quotas.deny if {
	quotas.deny
} else := production.granted if {
	production.granted
} else := production.escalate if {
	production.escalate
} else := jobs.fulfill if {
	jobs.fulfill
} else := {"action": "fulfill", "message": "read-only"} if {
	readonly.fulfill
} else := {"action": "fulfill", "message": "suggested rule"} if data.fulfiller.suggested[_].fulfill

# The last branch consults the reviewed `fulfiller suggest` rules committed
# beside these files (package fulfiller.suggested.NAME; docs/suggest.md).
