# The current policy of the suggest example: deny beats escalate beats
# fulfil, and humans are asked about anything no rule decides. The last
# line consults the suggestions committed beside it.
package fulfiller

default decision := {"action": "escalate", "message": "no rule decides this call"}

decision := {"action": "reject", "reason": "policy", "message": "proposals from mallory are not accepted here"} if {
	input.proposer.id == "mallory"
} else := {"action": "escalate", "message": "production needs a human"} if {
	startswith(input.params.arguments.path, "/srv/prod/")
} else := {"action": "fulfill", "message": "list_dir only reads"} if {
	input.params.name == "list_dir"
} else := {"action": "fulfill", "message": "suggested rule"} if data.fulfiller.suggested[_].fulfill
