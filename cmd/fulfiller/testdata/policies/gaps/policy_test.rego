package fulfiller_test

import data.fulfiller

test_lists_are_fulfilled if {
	fulfiller.decision.action == "fulfill" with input as {"method": "tools/list", "proposer": {"id": "coder"}}
}

test_default_rejects if {
	fulfiller.decision.action == "reject" with input as {"method": "tools/call", "proposer": {"id": "coder"}, "tool": {"name": "write_file"}}
}
