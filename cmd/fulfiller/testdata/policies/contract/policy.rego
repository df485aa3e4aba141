# Breaks the decision contract in every way check can see, and has what
# opa check --strict refuses: an unused import and an unused variable.
package fulfiller

import data.fulfiller.helpers

default decision := {"reason": "policy"}

decision := {"action": "reject", "reason": "nope"} if input.method == "a"

decision := {"action": "allow", "reason": "policy"} if input.method == "b"

decision := {"action": "escalate", "approvers": ["alice"], "quorum": 2, "timeout": "soon", "aprovers": []} if {
	input.method == "c"
}

decision := {"action": "reject"} if input.method == "d"

decision := d if {
	input.method == "e"
	x := 1
	d := {"action": "fulfill", "grantable": {"max_ttl": "1h", "scope": []}}
}

# Computed values are the sidecar's to check when it decides.
decision := {"action": "escalate", "timeout": data.settings.timeout} if input.method == "f"
