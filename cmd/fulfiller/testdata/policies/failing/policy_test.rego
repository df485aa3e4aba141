package fulfiller_test

import data.fulfiller

test_fulfils if fulfiller.decision.action == "fulfill"

# Deliberately wrong: the policy fulfils everything.
test_rejects_writes if {
	fulfiller.decision.action == "reject" with input as {"tool": {"name": "write_file"}}
}
